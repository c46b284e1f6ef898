"""Identifier columns: a column the data dictionary marks ``"identifier": true`` is read by
no function. Two GBSG2 sites with a ``patient_id`` column run as real processes on loopback; the
column is named through each entry point (an aggregate, a GLM formula, deriveDS, a table's
variables, the DataSHIELD door) and every call is refused with the rule, while the same calls on
other columns match pandas on the pooled records. ``dsfed-server init`` marks likely identifiers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import requests
from datashield import DSError

from conftest import FIXTURES, RULES, audit_records, http_builder
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.errors import FederatedCallError
from dsfed_core.errors import DisclosureRefusal
from dsfed_server.dictionary import read_dictionary
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision
from opalkit import ds_session
from sitekit import dsfed_server

SITES = ("site1", "site2")
RULE = "dictionary.identifier"


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory):
    """site1 and site2's GBSG2 tables with a first column patient_id (distinct over both sites),
    marked identifier in their dictionaries; the sites running as processes."""
    root = tmp_path_factory.mktemp("identifiers")
    frames, spec, start = {}, {}, 1000
    for name in SITES:
        folder = root / "data" / name / "GBSG2"
        folder.mkdir(parents=True)
        frame = pd.read_csv(FIXTURES / name / "GBSG2" / "validation.csv")
        frame.insert(0, "patient_id", np.arange(start, start + len(frame)))
        start += len(frame)
        frame.to_csv(folder / "validation.csv", index=False)
        dictionary = json.loads((FIXTURES / name / "GBSG2" / "validation.dictionary.json").read_text())
        dictionary["variables"].insert(0, {"name": "patient_id", "valueType": "integer", "unit": "",
                                           "label": "hospital record number", "categories": [], "identifier": True})
        (folder / "validation.dictionary.json").write_text(json.dumps(dictionary))
        frames[name] = frame
        spec[name] = (root / "data" / name, RULES / "testing-no-noise.toml")
    provisioned = provision(root / "run", spec)
    with LocalSites(provisioned.values(), root / "proc") as running:
        yield provisioned, running, pd.concat(frames.values(), ignore_index=True)


def _refused_everywhere(exc: FederatedCallError, function: str) -> None:
    assert set(exc.failures) == set(SITES)
    for site, err in exc.failures.items():
        assert isinstance(err, DisclosureRefusal) and err.rule == RULE, err
        assert (err.site, err.function) == (site, function)
        assert "'patient_id' is an identifier column of GBSG2.validation" in err.message
        assert "leave the column out" in err.hint


def test_every_native_entry_point_naming_it_is_refused(sites):
    provisioned, running, pooled = sites
    with http_builder(provisioned, running.urls).login() as session:
        session.assign_table("D", "GBSG2.validation")
        # the table is served without the column: listing, columns, and what a whole-table call reads
        listed = session.tables()
        for site in SITES:
            names = [v["name"] for v in listed[site][0]["variables"]]
            assert names == [c for c in pooled.columns if c != "patient_id"]
        assert session.aggregate_expr("colnamesDS(D)")[SITES[0]] == [c for c in pooled.columns if c != "patient_id"]
        assert session.mean("D$age").mean == pytest.approx(pooled["age"].mean(), rel=1e-12)

        calls = [
            ("meanDS", lambda: session.aggregate_expr("meanDS(D$patient_id)")),
            ("glmDS2", lambda: ds_glm(session, "y ~ age + patient_id", "D")),
            ("deriveDS", lambda: session.derive("pid", "log(D$patient_id + 1)")),
            ("assignTable", lambda: session.assign_table("E", "GBSG2.validation", ["age", "patient_id"])),
            ("subsetRowsDS", lambda: session.assign_expr("S", 'subsetRowsDS(D, "patient_id", ">", 1200)')),
        ]
        for function, call in calls:
            with pytest.raises(FederatedCallError) as exc:
                call()
            _refused_everywhere(exc.value, function)

        fit = ds_glm(session, "y ~ age + tsize", "D")  # the same fit without the column runs
        assert fit.nobs == int(pooled[["y", "age", "tsize"]].notna().all(axis=1).sum())
    refusals = [r for r in audit_records(provisioned["site1"]) if r["rule"] == RULE]
    assert len(refusals) == len(calls) and {r["outcome"] for r in refusals} == {"refused"}


def test_the_datashield_door_refuses_it_and_does_not_list_it(sites):
    provisioned, running, pooled = sites
    with ds_session(running, provisioned) as session:
        assert session.aggregate("meanDS(D$age)")  # a call on another column answers
        for function, text in (("meanDS", "meanDS(D$patient_id)"),
                               ("glmDS2", 'glmDS2(y ~ patient_id, "binomial", "0,0", NULL, NULL, "D")')):
            with pytest.raises(DSError):
                session.aggregate(text, asynchronous=False)
            errors = session.get_errors()
            assert set(errors) == set(SITES), text
            for site, error in errors.items():
                body = error.get_error()
                assert body["code"] == 403 and body["status"] == "disclosure_refused"
                error = body["error"]
                assert (error["site"], error["function"], error["rule"]) == (site, function, RULE)
                assert "'patient_id' is an identifier column" in body["error"]["message"]
    url, cred = running.urls["site1"], provisioned["site1"].credentials["analyst"]
    variables = requests.get(f"{url}/ws/datasource/GBSG2/table/validation/variables",
                             auth=(cred.user, cred.password), timeout=10).json()
    assert [v["name"] for v in variables] == [c for c in pooled.columns if c != "patient_id"]


def test_init_marks_likely_identifiers_for_review(tmp_path: Path):
    rng = np.random.default_rng(15)
    n = 40
    frame = pd.DataFrame({
        "patientId": rng.permutation(n),                        # named like one
        "record": [f"R{i:05d}" for i in rng.permutation(n)],    # text, every value distinct
        "sample_no": rng.permutation(10_000)[:n],               # whole numbers, every value distinct
        "age": rng.integers(30, 40, n),                         # whole numbers with repeats
        "bmi": rng.normal(26, 4, n).round(3),                   # distinct measurements: not flagged
        "paid": rng.integers(0, 2, n),                          # "id" inside a word: not flagged
    })
    csv = tmp_path / "patients.csv"
    frame.to_csv(csv, index=False)
    made = dsfed_server("init", tmp_path / "h", "--csv", csv)
    assert made.returncode == 0, made.stderr
    flagged = {"patientId", "record", "sample_no"}
    assert set(re.findall(r"^  (\S+): marked \"identifier\": true", made.stdout, re.M)) == flagged
    variables = read_dictionary(tmp_path / "h" / "data" / "main" / "patients.dictionary.json")
    assert {v.name for v in variables if v.identifier} == flagged

    checked = dsfed_server("check", tmp_path / "h" / "site.toml")
    assert checked.returncode == 0, checked.stderr
    lines = {line.split()[0]: line for line in checked.stdout.splitlines() if line.startswith("  ")}
    assert all("identifier: no function may read it" in lines[name] for name in flagged)
    assert f"n {n}" in lines["age"] and "identifier" not in lines["age"]
