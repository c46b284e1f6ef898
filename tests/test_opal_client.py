"""The unmodified PyPI DataSHIELD client (``datashield`` + ``datashield-opal`` over
``obiba-opal``) against five real dsfed site processes on loopback, through the
Opal protocol (/ws): login, tables, sessions, assignment, aggregates (synchronous
and asynchronous), symbols, methods, profiles and refusals. Every number is
checked against dsfed's native client on the same sites and against the pooled
data read independently from the fixture files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from datashield import DSError, DSSession

from conftest import GBSG2_SITES, audit_records, http_builder
from dsfed_client import Ref
from opalkit import TABLE, ds_session, logins, opal_value
from rref import r_eval

@pytest.fixture
def ds(gbsg2_http, gbsg2_provisioned):
    """A DataSHIELD session over the five sites, logged in with passwords, with D assigned."""
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        yield session


@pytest.fixture
def native(gbsg2_http, gbsg2_provisioned):
    """dsfed's own client on the same five server processes, with D assigned."""
    with http_builder(gbsg2_provisioned, gbsg2_http.urls).login() as session:
        session.assign_table("D", TABLE)
        yield session


# --- login, tables, sessions -------------------------------------------------------------------


@pytest.mark.parametrize("token", [False, True], ids=["password", "token"])
def test_login_lists_tables_and_opens_sessions(gbsg2_http, gbsg2_provisioned, token):
    session = DSSession(logins(gbsg2_http, gbsg2_provisioned, token=token))
    session.open()
    try:
        assert session.tables() == {site: [TABLE] for site in GBSG2_SITES}
        started = session.sessions()
        assert set(started) == set(GBSG2_SITES) and all(s.is_ready() for s in started.values())
        variables = session.variables(table=TABLE)["site1"]
        assert [v["name"] for v in variables][:3] == ["horTh", "age", "menostat"]
        assert variables[1]["valueType"] == "integer"
    finally:
        session.close()


def test_wrong_password_is_refused_and_audited(gbsg2_http, gbsg2_provisioned):
    session = DSSession(logins(gbsg2_http, gbsg2_provisioned, password="not-the-password"))
    with pytest.raises(DSError, match="Failed to authenticate"):
        session.open()
    last = audit_records(gbsg2_provisioned["site1"])[-1]
    assert (last["function"], last["outcome"], last["user"]) == ("login", "unauthenticated", "analyst")


# --- aggregates: the same numbers as the native client and the pooled data ---------------------


@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_meanDS_and_varDS_equal_native_and_pooled(ds, native, gbsg2_pooled, asynchronous):
    for column in ("age", "score"):
        means = ds.aggregate(f"meanDS(D${column})", asynchronous=asynchronous)
        assert means == dict(native.aggregate("meanDS", Ref(f"D${column}")))
        n = sum(r["Nvalid"] for r in means.values())
        pooled = sum(r["EstimatedMean"] * r["Nvalid"] for r in means.values()) / n
        assert pooled == pytest.approx(gbsg2_pooled[column].mean(), rel=1e-12)
        assert n == len(gbsg2_pooled)
        sums = ds.aggregate(f"varDS(D${column})", asynchronous=asynchronous)
        assert sums == dict(native.aggregate("varDS", Ref(f"D${column}")))
        s, ss = sum(r["Sum"] for r in sums.values()), sum(r["SumOfSquares"] for r in sums.values())
        assert (ss - s * s / n) / (n - 1) == pytest.approx(np.var(gbsg2_pooled[column], ddof=1), rel=1e-10)


def test_metadata_functions_in_both_call_patterns(ds, native, gbsg2_frames):
    lengths = ds.aggregate('lengthDS("D$age")')  # the string pattern ds.length sends
    assert lengths == ds.aggregate("lengthDS(D$age)") == dict(native.aggregate("lengthDS", Ref("D$age")))
    assert lengths == {s: len(f) for s, f in gbsg2_frames.items()}
    assert ds.aggregate('dimDS("D")') == {s: list(f.shape) for s, f in gbsg2_frames.items()}
    columns = list(gbsg2_frames["site1"].columns)
    assert ds.aggregate('colnamesDS("D")') == ds.aggregate('namesDS("D")') == {s: columns for s in GBSG2_SITES}
    assert ds.aggregate('classDS("D$tgrade")') == {s: "factor" for s in GBSG2_SITES}
    assert ds.aggregate('classDS("D")') == {s: "data.frame" for s in GBSG2_SITES}
    levels = ds.aggregate("levelsDS(D$tgrade)")
    assert levels == {s: {"Levels": ["I", "II", "III"], "ValidityMessage": "VALID ANALYSIS"} for s in GBSG2_SITES}
    assert ds.aggregate("isValidDS(D$age)") == {s: True for s in GBSG2_SITES}


def test_quantileMeanDS_is_dsBase_vector(ds, native):
    got = ds.aggregate("quantileMeanDS(D$score)")
    for site, result in native.aggregate("quantileMeanDS", Ref("D$score")).items():
        assert got[site] == list(result.values())  # jsonlite drops a named vector's names
        assert list(result) == ["5%", "10%", "25%", "50%", "75%", "90%", "95%", "Mean"]


def test_table1DDS_and_table2DDS_are_dsBase_tables(ds, native, gbsg2_pooled):
    one = ds.aggregate("table1DDS(D$horTh)")
    for site, result in native.aggregate("table1DDS", Ref("D$horTh")).items():
        assert one[site] == {"table": [dict(zip(result["levels"] + ["Total"], result["counts"] + [result["total"]]))],
                             "message": "valid Table"}
    pooled = {level: sum(r["table"][0][level] for r in one.values()) for level in ("no", "yes")}
    assert pooled == gbsg2_pooled["horTh"].value_counts().to_dict()
    two = ds.aggregate("table2DDS(D$y, D$cens)")
    expected = pd.crosstab(gbsg2_pooled["y"], gbsg2_pooled["cens"], margins=True, margins_name="Total")
    rows = {}
    for result in two.values():
        assert result["message"] == "valid Table"
        for row in result["table"]:
            label = row["_row"]
            rows[label] = {k: rows.get(label, {}).get(k, 0) + v for k, v in row.items() if k != "_row"}
    for label, row in rows.items():
        key = "Total" if label == "Total" else int(label)
        assert row == {str(c): int(expected.loc[key, int(c) if c != "Total" else c]) for c in row}
    for site, result in native.aggregate("table2DDS", Ref("D$y"), Ref("D$cens")).items():
        inner = [[r[c] for c in result["cols"]] for r in two[site]["table"][:-1]]
        assert inner == result["counts"]


def test_histogram_and_cor_through_the_datashield_client(ds, native, gbsg2_pooled):
    ranges = ds.aggregate("histogramDS1(D$age, 1, 3, 0.25)")
    lo, hi = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
    assert lo <= gbsg2_pooled["age"].min() and hi >= gbsg2_pooled["age"].max()
    # R's matching: method.indicator by name, then k = 3 and noise = 0.25 by position
    typed = ds.aggregate(f"histogramDS2(D$age, 2, {lo}, {hi}, method.indicator = 1, 3, 0.25)")
    # a histogram object is no JSON for jsonlite::toJSON: Opal sends serializeJSON's typed form
    assert {t["value"][0]["attributes"]["class"]["value"][0] for t in typed.values()} == {"histogram"}
    hists = {site: opal_value(answer) for site, answer in typed.items()}
    breaks = np.linspace(lo, hi, 3)
    native_hists = native.aggregate("histogramDS", Ref("D$age"), list(breaks))
    for site, result in hists.items():
        assert result["invalidcells"] == 0 and result["histobject"]["breaks"] == list(breaks)
        assert result["histobject"]["counts"] == native_hists[site]["counts"]
    counts = np.sum([r["histobject"]["counts"] for r in hists.values()], axis=0)
    expected = pd.cut(gbsg2_pooled["age"], breaks, include_lowest=True).value_counts(sort=False)
    np.testing.assert_array_equal(counts, expected.to_numpy())
    parts = ds.aggregate("corDS(D$age, D$score)")
    native_parts = native.aggregate("corDS", Ref("D$age"), Ref("D$score"))
    assert {site: {**p, "variables": ["x.val", "y.val"]} for site, p in parts.items()} == dict(native_parts)
    n = sum(p["complete.counts"][0][0] for p in parts.values())
    sxy = sum(p["sums.of.products"][0][1] for p in parts.values())
    sx, sy = (sum(p["sums"][i][0] for p in parts.values()) for i in (0, 1))
    sxx, syy = (sum(p["sums.of.squares"][i][0] for p in parts.values()) for i in (0, 1))
    r = (n * sxy - sx * sy) / np.sqrt((n * sxx - sx**2) * (n * syy - sy**2))
    assert r == pytest.approx(np.corrcoef(gbsg2_pooled["age"], gbsg2_pooled["score"])[0, 1], rel=1e-10)


# --- assign, symbols ---------------------------------------------------------------------------


def test_assign_expressions_ls_and_rm(ds, gbsg2_pooled):
    ds.assign_expr("age", "D$age")
    ds.assign_expr("older", 'subsetRowsDS(D, "age", ">=", 50)', asynchronous=False)
    ds.assign_table("V", table=TABLE, variables=["y", "score"])
    assert ds.ls() == {s: ["D", "V", "age", "older"] for s in GBSG2_SITES}
    assert ds.aggregate('colnamesDS("V")') == {s: ["y", "score"] for s in GBSG2_SITES}
    older = ds.aggregate("meanDS(older$score)")
    subset = gbsg2_pooled[gbsg2_pooled["age"] >= 50]
    n = sum(r["Nvalid"] for r in older.values())
    assert n == len(subset)
    assert sum(r["EstimatedMean"] * r["Nvalid"] for r in older.values()) / n == pytest.approx(
        subset["score"].mean(), rel=1e-12)
    ds.rm("age")
    assert ds.ls() == {s: ["D", "V", "older"] for s in GBSG2_SITES}


# dsBaseClient's ds.subset(x = "D", subset = "older", logicalOperator = ">=", threshold = t,
# varname = "age") sends this call text (dsBaseClient R/ds.subset.R: complt FALSE, rs and cs NULL,
# lg the operator's code, 2 for ">=")
DS_SUBSET_CALL = 'subsetDS("D", FALSE, NULL, NULL, 2, {t}, "age")'


def _assigned_rows(ds: DSSession, call: str) -> dict[str, int] | str:
    """The rows per site of ``older`` after assigning ``call``, or the rule of the refusal."""
    try:
        ds.assign_expr("older", call, asynchronous=False)
    except DSError:
        return next(e.get_error()["error"]["rule"] for e in ds.get_errors().values())
    return {site: dims[0] for site, dims in ds.aggregate('dimDS("older")').items()}


@pytest.mark.parametrize("threshold", [50, 40, 80])
def test_dsbase_subset_call_equals_R_and_the_guarded_subset(ds, gbsg2_frames, threshold):
    """dsBase's subsetDS form selects the rows dsBase's own expression selects (R, per site), and
    is the same guarded subset as subsetRowsDS: the same rows or the same refusal."""
    dsbase = _assigned_rows(ds, DS_SUBSET_CALL.format(t=threshold))
    assert dsbase == _assigned_rows(ds, f'subsetRowsDS(D, "age", ">=", {threshold})')
    if isinstance(dsbase, str):
        assert dsbase == "disclosure.subset_min"
        return
    for site, frame in gbsg2_frames.items():  # dsBase: D[which(D[, idx] >= th), ]
        want = r_eval(f"nrow(data.frame(age = age)[which(age >= {threshold}), , drop = FALSE])",
                      age=frame["age"].to_numpy())
        assert dsbase[site] == int(want[0])


# --- methods and profiles ----------------------------------------------------------------------


def test_methods_and_profiles(ds, gbsg2_http, gbsg2_provisioned):
    aggregate = ds.methods()["site1"]
    names = [m["name"] for m in aggregate]
    assert {"meanDS", "glmDS2", "table2DDS", "histogramDS2", "corDS"} <= set(names)
    assert "assignTable" not in names
    assert aggregate[0] == {"name": names[0], "class": "func", "value": f"dsfed::{names[0]}",
                            "pkg": "dsfed", "version": aggregate[0]["version"]}
    assert {"assignTable", "subsetDS", "subsetRowsDS", "dataFrameSubsetDS2"} <= {
        m["name"] for m in ds.methods("assign")["site1"]}
    assert ds.profiles() == {s: {"available": ["default", "summaries"], "current": "default"} for s in GBSG2_SITES}
    with ds_session(gbsg2_http, gbsg2_provisioned, profile="summaries", assign=False) as summaries:
        listed = {m["name"] for m in summaries.methods()["site2"]}
        assert "meanDS" in listed and "glmDS2" not in listed


# --- refusals ----------------------------------------------------------------------------------


def test_refusal_reaches_the_client_with_dsfed_message(ds):
    with pytest.raises(DSError):
        ds.aggregate("table2DDS(D$menostat, D$y)")  # asynchronous: the command fails
    error = ds.get_errors()["site2"]
    assert "site 'site2', function table2DDS" in str(error)
    assert "[rule disclosure.q_threshold]" in str(error)
    with pytest.raises(DSError):
        ds.aggregate("table2DDS(D$menostat, D$y)", asynchronous=False)
    body = ds.get_errors()["site2"].get_error()
    assert body["code"] == 403 and body["status"] == "disclosure_refused"
    assert body["error"]["rule"] == "disclosure.q_threshold" and body["error"]["function"] == "table2DDS"
    assert "[rule disclosure.q_threshold]" in body["arguments"][0]


def _audit_view(record: dict) -> tuple:
    return (record["user"], record["function"], record["kind"], record["call"], record["outcome"],
            record["rule"], record["message"])


def test_not_enabled_in_profile_is_refused_and_audited_like_native(gbsg2_http, gbsg2_provisioned):
    import requests

    call = 'glmDS1(y ~ age, "binomial", NULL, NULL, "D")'
    with ds_session(gbsg2_http, gbsg2_provisioned, profile="summaries") as session:
        with pytest.raises(DSError):
            session.aggregate(call)
        error = session.get_errors()["site4"]
        assert "site 'site4', function glmDS1: glmDS1 is not enabled in this site's profile 'summaries'" in str(error)
        assert "[rule profiles.summaries.enabled]" in str(error)
    opal_record = next(r for r in reversed(audit_records(gbsg2_provisioned["site4"])) if r["function"] == "glmDS1")
    # the same call through the native API, in a session of the same profile
    cred = gbsg2_provisioned["site4"].credentials["analyst"]
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    url = gbsg2_http.urls["site4"]
    sid = http.post(f"{url}/v1/sessions", params={"profile": "summaries"}, timeout=10).json()["session"]
    response = http.post(f"{url}/v1/sessions/{sid}/aggregate", json={"expr": call}, timeout=10)
    assert response.status_code == 403 and response.json()["error"]["rule"] == "profiles.summaries.enabled"
    http.delete(f"{url}/v1/sessions/{sid}", timeout=10)
    native_record = next(r for r in reversed(audit_records(gbsg2_provisioned["site4"])) if r["function"] == "glmDS1")
    assert native_record["seq"] > opal_record["seq"]
    assert _audit_view(opal_record) == _audit_view(native_record)
    assert opal_record["outcome"] == "refused" and opal_record["rule"] == "profiles.summaries.enabled"
    assert json.dumps(opal_record["call"]) == json.dumps(call)
