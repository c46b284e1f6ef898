"""The governance CLI, run as a real ``dsfed`` process: ``rules explain`` explains every key of a
rules file from the schema's descriptions, ``rules check`` validates as a site does, ``audit show``
summarises the audit log a real site wrote, ``audit verify`` catches an edited line."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_server.audit import AuditLog, audit_key, head_path
from dsfed_server.disclosure.rules import RulesFile
from rref import gaussian_spent_reference
from sitekit import ROOT, dsfed, make_sites, rules_variant

RULE_FILES = sorted((ROOT / "disclosure_rules").glob("*.toml"))


def _flat(text: str) -> str:
    return " ".join(text.split())


def _toml_keys(data: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a parsed TOML document, tables included."""
    keys = []
    for key, value in data.items():
        keys.append((*prefix, key))
        if isinstance(value, dict):
            keys += _toml_keys(value, (*prefix, key))
    return keys


def _schema_field(path: tuple[str, ...]):
    """The pydantic field behind a TOML key path (a profile's name maps to the Profile model)."""
    model: type[BaseModel] = RulesFile
    info = None
    steps = list(path)
    while steps:
        key = steps.pop(0)
        info = model.model_fields[key]
        annotation = info.annotation
        if key == "profiles" and steps:
            steps.pop(0)  # the profile's own name
            model = annotation.__args__[1]  # dict[str, Profile]
            if not steps:
                return info
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return info


def _schema_descriptions(model: type[BaseModel]) -> list[tuple[str, str | None]]:
    """(field path, description) for every field of the schema, nested models included."""
    out = []
    for name, info in model.model_fields.items():
        out.append((name, info.description))
        annotation = info.annotation
        if name == "profiles":
            annotation = annotation.__args__[1]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += [(f"{name}.{sub}", d) for sub, d in _schema_descriptions(annotation)]
    return out


def test_every_schema_field_has_a_description():
    missing = [path for path, description in _schema_descriptions(RulesFile) if not (description or "").strip()]
    assert missing == [], f"rules-file keys without a description for `dsfed rules explain`: {missing}"


@pytest.mark.parametrize("path", [ROOT / "disclosure_rules" / "default.toml", ROOT / "disclosure_rules" / "site1.toml"],
                         ids=["default.toml", "site1.toml"])
def test_rules_explain_covers_every_key_of_the_file(path: Path):
    result = dsfed("rules", "explain", path)
    assert result.returncode == 0, result.stderr
    out = _flat(result.stdout)
    data = tomllib.loads(path.read_text())
    keys = _toml_keys(data)
    assert ("profiles",) in keys or path.name == "default.toml"
    for key in keys:
        info = _schema_field(key)
        assert info is not None and (info.description or "").strip(), f"{'.'.join(key)} has no explanation"
        assert _flat(info.description) in out, f"{'.'.join(key)}: its explanation is not printed"
        value = data
        for part in key:
            value = value[part]
        if not isinstance(value, (dict, list)):
            shown = json.dumps(value) if isinstance(value, (str, bool)) else repr(value)
            assert f"{key[-1]} = {shown}" in out, f"{'.'.join(key)}: its value is not printed"
    for function in data["functions"]["enabled"]:
        assert f"- {function} (" in out
    # written for a board, not for us: no paper shorthand; the technical words it uses are explained
    assert not re.search(r"\bseeds?[ -]\d{3}", out), re.search(r".{60}\bseeds?[ -]\d{3}.{20}", out)
    assert "placement value: for one record, the share of the other class's scores" in out


def test_rules_explain_of_a_profile_shows_what_it_tightens_and_refuses():
    out = dsfed("rules", "explain", ROOT / "disclosure_rules" / "site1.toml").stdout
    assert "[profiles.summaries]" in out
    assert "q_threshold = 10   (the site's own rules: 5)" in out
    refused = _flat(out.split("[profiles.summaries]")[1]).split("Refused:")[1]
    assert "glmDS2" in refused and "noisyScoresDS" in refused and "meanDS" not in refused


def test_rules_explain_warns_when_noise_is_off():
    out = dsfed("rules", "explain", ROOT / "disclosure_rules" / "testing-no-noise.toml").stdout
    assert "WARNING: differential-privacy noise is OFF" in out


def test_rules_check_accepts_every_shipped_file():
    result = dsfed("rules", "check", *RULE_FILES)
    assert result.returncode == 0, result.stderr
    valid = [line.split(": valid")[0] for line in result.stdout.splitlines() if ": warning: " not in line]
    assert valid == [str(p) for p in RULE_FILES]


@pytest.mark.parametrize("change,needle,reason", [
    ({"q_threshold": "0"}, "q_threshold", "greater than or equal to 1"),
    ({"enabled": '["meanDS", "evalDS"]'}, "enabled", "unknown function(s) evalDS"),
])
def test_rules_check_rejects_a_bad_file_with_file_line_reason(tmp_path: Path, change, needle, reason):
    path = rules_variant(tmp_path / "bad.toml", **change)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), start=1) if text.startswith(needle))
    for action in ("check", "explain"):
        result = dsfed("rules", action, path)
        assert result.returncode != 0 and result.stdout == ""
        assert result.stderr.startswith(f"{path}:{line}: ") and reason in result.stderr
    good = ROOT / "disclosure_rules" / "default.toml"
    result = dsfed("rules", "check", good, path)  # one bad file among good ones fails the check
    assert result.returncode != 0 and result.stdout.startswith(f"{good}: valid") and f"{path}:{line}: " in result.stderr


@pytest.fixture(scope="module")
def audited_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real site's audit log after a session of known calls: one noisy release, one refusal."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.integers(30, 80, 40).astype(float), "grp": ["a"] * 38 + ["b"] * 2,
                          "y": np.tile([0, 1], 20), "score": rng.uniform(0.05, 0.95, 40)})
    provisioned, services = make_sites(tmp_path_factory.mktemp("audited"), {"siteA": frame})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.mean("D$age")
        session.mean("D$y")
        session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))  # spends privacy budget
        with pytest.raises(FederatedCallError):
            session.table1d("D$grp")  # level "b" holds 2 < q = 5 records
    return provisioned["siteA"].audit_log


def _counts(table_out: str, header: str) -> dict[str, list[str]]:
    """Rows of the printed counts table under ``header``: first cell -> the other cells."""
    block = table_out.split(header, 1)[1].split("\n\n", 1)[0].strip().splitlines()
    return {cells[0]: cells[1:] for cells in (line.split() for line in block[1:])}


def test_audit_show_counts_calls_and_names_the_refusing_rule(audited_site: Path):
    result = dsfed("audit", "show", audited_site, "--by", "function")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Sites: siteA" in out and "9 calls recorded" in out
    header = out.split("Calls by function:\n", 1)[1].splitlines()[0].split()
    assert header == ["function", "calls", "ok", "refused"]
    rows = _counts(out, "Calls by function:\n")
    # the noisy call is previewed first (its cost, after the function listing that says it is noisy)
    assert rows == {"assignTable": ["1", "1", "0"], "closeSession": ["1", "1", "0"], "listFunctions": ["1", "1", "0"],
                    "meanDS": ["2", "2", "0"], "noisyScoresDS": ["2", "2", "0"], "openSession": ["1", "1", "0"],
                    "table1DDS": ["1", "0", "1"]}
    assert "Refused calls: 1" in out
    refusal = _flat(out.split("Refused calls: 1", 1)[1])
    assert "table1DDS: refused by rule disclosure.q_threshold" in refusal and "analyst analyst" in refusal


def test_audit_show_states_the_spending_in_the_ledgers_accounting(audited_site: Path):
    """One release of the analytic Gaussian (default rules: epsilon 1, delta 1e-5, sensitivity 0.2)
    against the budget (5, 1e-4): spent is the smaller of basic composition (1.0) and RDP at delta
    1e-4 (rho = sensitivity^2 / (2 sigma^2), CKS 2020 Prop. 12 on a dense grid of orders, written
    out in rref), remaining = 5 - spent, for the table and for the analyst."""
    spent, spent_delta = gaussian_spent_reference(1, epsilon=1.0, delta=1e-5, sensitivity=0.2, budget_delta=1e-4)
    accounting = "rdp" if spent_delta == 1e-4 else "basic"  # RDP spends the budget's delta, basic 1e-5
    out = dsfed("audit", "show", audited_site).stdout
    lines = out.split("Privacy budget:", 1)[1].strip().splitlines()
    rows = [line.split() for line in lines if line.strip().startswith("siteA")]
    assert [r[:3] for r in rows] == [["siteA", "P.t", "(all"], ["siteA", "P.t", "analyst"]]
    for row in rows:
        eps, remaining = float(row[-6]), float(row[-3])
        assert eps == pytest.approx(spent, rel=1e-4) and remaining == pytest.approx(5.0 - spent, rel=1e-4)
        assert row[-4] == accounting and row[-1] == "1"


def test_audit_show_by_outcome_and_by_analyst(audited_site: Path):
    by_outcome = _counts(dsfed("audit", "show", audited_site, "--by", "outcome").stdout, "Calls by outcome:\n")
    assert by_outcome == {"ok": ["8"], "refused": ["1"]}
    by_analyst = _counts(dsfed("audit", "show", audited_site, "--by", "analyst").stdout, "Calls by analyst:\n")
    assert by_analyst == {"analyst": ["9", "8", "1"]}


def test_audit_show_refuses_charges_without_the_budget_they_were_charged_against(tmp_path: Path):
    """A record with charges but no ``privacy.budget`` cannot be stated in the ledger's accounting
    (RDP converts at the budget's delta): a clear error naming the site, exit status 2."""
    log = AuditLog(tmp_path / "audit.jsonl", "siteB", audit_key(b"k" * 32))
    common = dict(session="s", function="noisyScoresDS", kind="aggregate", call="", outcome="ok", rule=None, message="")
    log.record(user="ana", **common,
               privacy={"charges": [{"table": "P.t", "epsilon": 0.5, "delta": 1e-5, "rho": 0.01}]})
    result = dsfed("audit", "show", log.path)
    assert result.returncode == 2 and "site siteB" in result.stderr and "privacy.budget" in result.stderr
    empty = tmp_path / "empty.jsonl"
    AuditLog(empty, "siteC", audit_key(b"k" * 32)).record(user="ana", **common)
    assert "no privacy budget spent" in dsfed("audit", "show", empty).stdout


def test_audit_verify_intact_then_reports_an_edited_line(audited_site: Path, tmp_path: Path):
    secret = audited_site.with_name("siteA.secret")  # provision's layout: the secret beside the log
    result = dsfed("audit", "verify", audited_site, "--secret", secret)
    assert result.returncode == 0 and "audit chain intact: 9 records" in result.stdout
    edited = tmp_path / "edited.jsonl"
    lines = audited_site.read_text().splitlines()
    record = json.loads(lines[7])
    assert record["outcome"] == "refused"
    record["outcome"] = "ok"  # hiding the refusal
    lines[7] = json.dumps(record, sort_keys=True)
    edited.write_text("\n".join(lines) + "\n")
    shutil.copy(head_path(audited_site), head_path(edited))
    result = dsfed("audit", "verify", edited, "--secret", secret)
    assert result.returncode == 1
    assert result.stdout.startswith(f"{edited}: audit chain broken at line 8") and "record edited" in result.stdout


def test_rules_check_and_explain_warn_on_weak_settings(tmp_path: Path):
    """q = 1, epsilon = 100 and delta = 0.5 are valid but weak: check says so (and still exits 0),
    explain opens with a plain summary and the same warnings; the shipped files raise none."""
    weak = rules_variant(tmp_path / "weak.toml", q_threshold="1", epsilon="100.0", delta="0.5")
    checked = dsfed("rules", "check", weak)
    assert checked.returncode == 0, checked.stderr
    warnings = [line for line in checked.stdout.splitlines() if ": warning: " in line]
    assert [w.split(": warning: ")[1].split(" = ")[0] for w in warnings] == [
        "disclosure.q_threshold", "privacy.epsilon", "privacy.delta"]
    assert "every table of more than 2 records" in warnings[2]
    explained = dsfed("rules", "explain", weak).stdout
    assert explained.splitlines()[1].startswith("In short: an analyst may run")
    assert explained.count("WARNING: ") == 3
    shipped = dsfed("rules", "check", *RULE_FILES).stdout
    assert {line.split(": warning: ")[1].split(" = ")[0] for line in shipped.splitlines() if ": warning: " in line} \
        <= {"privacy.delta"}  # the demo sites' delta 0.01 is above 1/n for their tables of about 137 records
    assert ": warning: " not in dsfed("rules", "check", ROOT / "disclosure_rules" / "default.toml").stdout
