"""The privacy budget's figures agree wherever they are shown, and a noisy call that would
use much of what remains warns first.

Over real site processes on loopback with the noise on, two analysts run noisy calls; then the
site's ledger (governance's ``GET /v1/budget``), ``dsfed audit show`` over the same site's audit
log (text, ``--format json`` and ``--format csv``), the analyst's ``session.budget()`` and the
report's privacy section give the same spent epsilon and the same remaining. The reference is
the ledger itself (what the site enforces), and the spent figure is checked against basic
composition of the same charges (the figure ``audit show`` used to print: larger). Filters are
checked against the raw records selected in the test. The warning is checked against an
independent statement of the spending (RDP of the Gaussian mechanism converted by Canonne, Kamath
& Steinke 2020, Prop. 12, on a dense grid of orders, written out here).
"""

from __future__ import annotations

import csv
import io
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests

from conftest import FIXTURES, http_builder, inprocess_builder
from dsfed_client import BudgetWarning, FederatedCallError, Ref
from dsfed_client.analyses.suite import validate
from dsfed_client.report import collect_study_info, write_report
from dsfed_server.launch import LocalSites
from rref import gaussian_spent_reference
from sitekit import dsfed, make_sites, rules_variant

SITES = ("site1", "site2", "site3")


@pytest.fixture(scope="module")
def two_analysts(tmp_path_factory):
    """Three GBSG2 site processes, noise on: ``analyst`` validates the model (noisy histograms) and
    writes the report; ``analyst2`` makes one noisy release and one refused call. Returns the
    provisioned sites, each site's ``GET /v1/budget``, the analyst's ``session.budget()`` and the
    report's HTML."""
    tmp = tmp_path_factory.mktemp("figures")
    frames = {s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score"]] for s in SITES}
    rules = rules_variant(tmp / "rules.toml", epsilon_per_table="20.0", epsilon_per_analyst="10.0")
    provisioned, _ = make_sites(tmp, frames, rules=rules)
    with LocalSites(provisioned.values(), tmp / "proc") as running:
        with http_builder(provisioned, running.urls).login() as session:
            session.assign_table("D", "P.t")
            result = validate(session, "D$y", "D$score", secure=False)
            session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))
            study = collect_study_info(session, "D$y", table="P.t", score="D$score")
            mine = session.budget()
        with http_builder(provisioned, running.urls, "analyst2").login() as other:
            other.assign_table("D", "P.t")
            other.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), epsilon=0.5)
            with pytest.raises(FederatedCallError):
                other.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), epsilon=2.0)  # privacy.epsilon
        ledger = {}
        for name, url in running.urls.items():
            gov = provisioned[name].credentials["governance"]
            ledger[name] = requests.get(f"{url}/v1/budget", auth=(gov.user, gov.password), timeout=30).json()
    report = write_report(result, tmp / "report.html", **study).read_text()
    return provisioned, ledger, mine, report


def _figures(entries: list[dict]) -> dict[tuple, tuple]:
    return {(e.get("analyst"), e["table"]): (e["spent"], e["remaining"]) for e in entries}


def test_audit_show_v1_budget_session_budget_and_report_agree(two_analysts):
    provisioned, ledger, mine, report = two_analysts
    report_rows = {row[0]: row for row in _report_budget_rows(report)}
    for site in SITES:
        log = provisioned[site].audit_log
        shown = json.loads(dsfed("audit", "show", log, "--format", "json").stdout)["privacy"]
        v1 = ledger[site]
        # audit show's JSON is the ledger's statement: same tables, same analysts, same floats
        assert _figures(shown["tables"]) == _figures(v1["tables"]) and len(v1["tables"]) == 1
        assert _figures(shown["spending"]) == _figures(v1["spending"])
        assert {e["analyst"] for e in v1["spending"]} == {"analyst", "analyst2"}
        assert shown["budget"][site] == v1["budget"]
        # the CSV holds the same numbers (floats written exactly)
        rows = list(csv.DictReader(io.StringIO(dsfed("audit", "show", log, "--format", "csv").stdout)))
        by_key = {(r["scope"], r["analyst"] or None): r for r in rows}
        for scope, entries in (("table", v1["tables"]), ("analyst", v1["spending"])):
            for e in entries:
                r = by_key[(scope, e.get("analyst"))]
                assert (float(r["spent_epsilon"]), float(r["remaining_epsilon"])) == (
                    e["spent"]["epsilon"], e["remaining"]["epsilon"])
                assert float(r["basic_epsilon"]) == e["basic"]["epsilon"] and float(r["rho"]) == e["rho"]
        # the text prints them to 6 significant digits
        text = dsfed("audit", "show", log).stdout.split("Privacy budget:", 1)[1]
        for e in v1["spending"]:
            line = next(cells for cells in map(str.split, text.splitlines())
                        if cells[:3] == [site, "P.t", e["analyst"]])
            assert float(line[-6]) == pytest.approx(e["spent"]["epsilon"], rel=1e-5)
            assert float(line[-3]) == pytest.approx(e["remaining"]["epsilon"], rel=1e-5)
        # the analyst's own figures are governance's row for them
        (table,) = mine[site]["tables"]
        row = next(e for e in v1["spending"] if e["analyst"] == "analyst")
        assert (table["spent"], table["remaining"]) == (row["spent"], row["remaining"])
        assert mine[site]["warn_share"] == v1["warn_share"] == 0.5
        # the report shows those figures (4 decimals)
        cells = report_rows[site]
        assert cells[1] == "P.t" and cells[4] == row["spent"]["accountant"]
        assert float(cells[2]) == pytest.approx(row["spent"]["epsilon"], abs=5e-5)
        assert float(cells[5]) == pytest.approx(row["remaining"]["epsilon"], abs=5e-5)
        # several releases composed: the ledger's RDP figure is below their basic sum (what was shown before)
        assert row["spent"]["accountant"] == "rdp" and row["spent"]["epsilon"] < row["basic"]["epsilon"]
        assert row["remaining"]["epsilon"] == pytest.approx(10.0 - row["spent"]["epsilon"], rel=1e-12)
    assert "total (basic composition)" not in report


def _report_budget_rows(html: str) -> list[list[str]]:
    table = html.split('<table class="budget">', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [[re.sub(r"<[^>]+>", "", c).replace(",", "") for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def _selected(log: Path, keep) -> list[dict]:
    return [r for r in map(json.loads, log.read_text().splitlines()) if keep(r)]


def test_audit_show_filters_by_analyst_outcome_and_date(two_analysts):
    provisioned, ledger, _, _ = two_analysts
    log = provisioned["site1"].audit_log
    records = _selected(log, lambda r: True)

    def show(*options: str) -> dict:
        result = dsfed("audit", "show", log, "--format", "json", *options)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def counted(summary: dict) -> int:
        return sum(sum(c.values()) for c in summary["counts"].values())

    whole = show()
    assert whole["calls"] == counted(whole) == len(records)

    second = show("--analyst", "analyst2", "--by", "analyst")
    assert second["counts"] == {"analyst2": dict(pd.Series(
        [r["outcome"] for r in records if r["user"] == "analyst2"]).value_counts())}
    assert [e["analyst"] for e in second["privacy"]["spending"]] == ["analyst2"]
    row = next(e for e in ledger["site1"]["spending"] if e["analyst"] == "analyst2")
    assert second["privacy"]["spending"][0]["remaining"] == row["remaining"]  # an analyst's budget: whole
    assert second["privacy"]["tables"][0]["remaining"] is None  # not the table's budget: others spent on it

    refused = show("--outcome", "refused")
    assert refused["calls"] == len([r for r in records if r["outcome"] == "refused"]) >= 1
    assert {r["rule"] for r in refused["refusals"]} == {"privacy.epsilon"}
    assert refused["privacy"]["spending"] == []  # a refused call spends nothing

    first_of_second = next(r["time"] for r in records if r["user"] == "analyst2")
    since = show("--since", first_of_second)
    assert since["calls"] == len([r for r in records if r["time"] >= first_of_second])
    assert {e["analyst"] for e in since["privacy"]["spending"]} == {"analyst2"}
    assert all(e["remaining"] is None for e in since["privacy"]["spending"])  # not the budget's state
    until = show("--until", first_of_second)
    assert until["calls"] == len([r for r in records if r["time"] < first_of_second])
    day = first_of_second[:10]
    assert show("--until", day)["calls"] == len(records)  # a bare date keeps its whole day
    assert show("--since", "2000-01-01", "--until", "2000-12-31")["calls"] == 0
    bad = dsfed("audit", "show", log, "--since", "yesterday")
    assert bad.returncode == 2 and "'yesterday' is not a date" in bad.stderr


# --- the warning ---------------------------------------------------------------------------

EPS, DELTA, SENS = 1.0, 1e-5, 0.1
BUDGET_EPS, BUDGET_DELTA, WARN_SHARE = 2.0, 1e-3, 0.4
N_SCORES = 8


def _spent(k: int) -> float:
    """Epsilon spent by k analytic Gaussian releases (EPS, DELTA, SENS) against (BUDGET_EPS, BUDGET_DELTA):
    the smaller of basic composition (when it fits the budget) and RDP at BUDGET_DELTA (rref's reference)."""
    return gaussian_spent_reference(k, epsilon=EPS, delta=DELTA, sensitivity=SENS, budget_delta=BUDGET_DELTA)[0]


def test_a_noisy_call_warns_first_when_it_would_use_more_than_the_sites_share_of_what_remains(tmp_path):
    """``budget.warn_share = 0.4``: before each noisy call, the client previews its cost and warns
    (BudgetWarning, naming site, function, table and rule) exactly when the call would raise the
    spent epsilon by more than 0.4 of what remains (the independent statement above); with the
    warning made an error, the call stops before any site runs it and nothing is spent."""
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 200)
    frame = pd.DataFrame({"y": y, **{f"s{j}": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.15, 200), 0, 1)
                                     for j in range(N_SCORES)}})
    rules = rules_variant(tmp_path / "rules.toml", epsilon=str(EPS), delta=str(DELTA), score_l2_sensitivity=str(SENS),
                          epsilon_per_table=str(BUDGET_EPS), delta_per_table=str(BUDGET_DELTA),
                          epsilon_per_analyst=str(BUDGET_EPS), delta_per_analyst=str(BUDGET_DELTA),
                          warn_share=str(WARN_SHARE),
                          score_columns="[" + ", ".join(f'"s{j}"' for j in range(N_SCORES)) + "]")
    provisioned, services = make_sites(tmp_path / "sites", {"a": frame}, rules=rules)
    ledger = services["a"].ledger
    warned, expected = [], []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for k in range(N_SCORES):
            uses, remaining = _spent(k + 1) - _spent(k), BUDGET_EPS - _spent(k)
            if _spent(k + 1) > BUDGET_EPS:
                break
            expected.append(uses > WARN_SHARE * remaining)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                session.aggregate("noisyScoresDS", Ref("D$y"), Ref(f"D$s{k}"))
            budget = [w for w in caught if issubclass(w.category, BudgetWarning)]
            warned.append(bool(budget))
            if budget:
                message = str(budget[0].message)
                assert "site 'a', function noisyScoresDS" in message and "'P.t'" in message
                assert "budget.warn_share" in message and f"{uses:.4g}" in message
        assert warned == expected and True in warned and False in warned
        before = ledger.total("P.t")
        with warnings.catch_warnings():
            warnings.simplefilter("error", BudgetWarning)
            with pytest.raises(BudgetWarning):
                session.aggregate("noisyScoresDS", Ref("D$y"), Ref(f"D$s{len(warned)}"))
        assert ledger.total("P.t") == before  # stopped before the call: nothing spent
        with warnings.catch_warnings():
            warnings.simplefilter("error", BudgetWarning)
            session.aggregate("meanDS", Ref("D$y"))  # no noise: no preview, no warning
