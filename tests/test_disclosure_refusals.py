"""Each registry function's disclosure rule, violated: a refusal naming the site, the
function and the rule; no result; and the refusal in the site's audit log."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import requests

from dsfed_client import Call, DisclosureRefusal, FederatedCallError, Ref
from sitekit import make_sites, rules_variant
from conftest import inprocess_builder


@pytest.fixture
def sites(tmp_path):
    rng = np.random.default_rng(7)
    big = pd.DataFrame({
        "x": rng.normal(50, 10, 40).round(3),
        "g": ["a"] * 20 + ["b"] * 18 + ["c"] * 2,  # level c: a small non-zero cell
        "k": np.arange(40) % 2,
    })
    small = pd.DataFrame({"x": [1.5, 2.5, 3.5], "g": ["a", "b", "a"], "k": [0, 1, 0]})
    return make_sites(tmp_path, {"big": big, "small": small})


def _refusal(exc: pytest.ExceptionInfo, site: str) -> DisclosureRefusal:
    err = exc.value.failures[site]
    assert isinstance(err, DisclosureRefusal), err
    return err


def _last_audit(provisioned, site: str) -> dict:
    return json.loads(provisioned[site].audit_log.read_text().splitlines()[-1])


CASES = [
    ("lengthDS", (Ref("T$x"),), "disclosure.q_threshold"),
    ("dimDS", (Ref("T"),), "disclosure.q_threshold"),
    ("meanDS", (Ref("T$x"),), "disclosure.q_threshold"),
    ("varDS", (Ref("T$x"),), "disclosure.q_threshold"),
    ("quantileMeanDS", (Ref("T$x"),), "disclosure.q_threshold"),
    ("table1DDS", (Ref("T$g"),), "disclosure.q_threshold"),
    ("table2DDS", (Ref("T$g"), Ref("T$k")), "disclosure.q_threshold"),
    ("histogramDS", (Ref("T$x"), [0.0, 2.0, 4.0]), "disclosure.q_threshold"),
]


@pytest.mark.parametrize("function,args,rule", CASES, ids=[c[0] for c in CASES])
def test_small_site_is_refused_and_audited(sites, function, args, rule):
    provisioned, services = sites
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate(function, *args)
        err = _refusal(exc, "small")
        assert (err.site, err.function, err.rule) == ("small", function, rule)
        assert "3" not in err.message  # the count that fell short is never disclosed
        record = _last_audit(provisioned, "small")
        assert (record["function"], record["outcome"], record["rule"]) == (function, "refused", rule)


def test_small_cell_refuses_whole_table(sites):
    provisioned, services = sites
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.table1d("T$g")
        assert set(exc.value.failures) == {"big", "small"}
        assert _refusal(exc, "big").rule == "disclosure.q_threshold"


def test_histogram_small_bin_refused_under_refuse_policy(tmp_path):
    """A board that prefers refusals to coarsening sets small_bin_policy = "refuse" (the shipped
    default merges: test_histogram_merge_policy_merges_and_keeps_every_record)."""
    big = pd.DataFrame({"x": np.random.default_rng(7).normal(50, 10, 40).round(3)})
    rules = rules_variant(tmp_path / "refuse.toml", small_bin_policy='"refuse"')
    provisioned, services = make_sites(tmp_path, {"big": big}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:  # [-inf, 30) will hold few records
            session.histogram("T$x", [20, 45, 55, 80])
        assert _refusal(exc, "big").rule == "bins.small_bin_policy"
        assert _last_audit(provisioned, "big")["rule"] == "bins.small_bin_policy"


def test_histogram_merge_policy_merges_and_keeps_every_record(tmp_path):
    values = np.array([1.0] * 10 + [2.5] * 2 + [3.5] * 10 + [9.0] * 1 + [5.5] * 8)
    # the shipped policy (merge) at a fixed minimum (no secret margin: its own test draws it)
    rules = rules_variant(tmp_path / "merge.toml", cut_margin="0")
    provisioned, services = make_sites(tmp_path, {"m": pd.DataFrame({"x": values})}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        hist = session.histogram("T$x", [0, 2, 3, 4, 6, 8])
    # hand-computed, by the release gate's rule (cuts in increasing order; a cut is kept only if the
    # cell it closes since the last kept cut, and everything above it, hold 0 or >= q = 5 records):
    # [0,2]=10 keeps 2; (2,3] holds 2 -> cut 3 dropped; (2,4] holds 12 -> cut 4 kept; above 6 lie
    # only 1 record -> cuts 6 and 8 dropped: (4,inf) = 9
    np.testing.assert_array_equal(hist.edges, [0, 2, 4, np.inf])
    np.testing.assert_array_equal(hist.counts, [10, 12, 9])
    assert hist.counts.sum() == values.size


def test_subset_minimum_and_complement(sites):
    provisioned, services = sites
    with inprocess_builder(provisioned, {"big": services["big"]}).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.assign("S", Call("subsetRowsDS", Ref("T"), "g", "==", "c"))  # 2 rows
        assert _refusal(exc, "big").rule == "disclosure.subset_min"
        with pytest.raises(FederatedCallError) as exc:
            session.assign("S", Call("subsetRowsDS", Ref("T"), "g", "!=", "c"))  # leaves out 2 rows
        assert _refusal(exc, "big").rule == "disclosure.subset_min"
        assert _last_audit(provisioned, "big")["outcome"] == "refused"
        session.assign("S", Call("subsetRowsDS", Ref("T"), "g", "==", "a"))  # 20 rows, leaves 20: allowed
        assert session.length("S$x").n == 20


def test_factor_level_limits(tmp_path):
    frame = pd.DataFrame({"id": [f"p{i:02d}" for i in range(30)], "k": np.arange(30) % 2})
    provisioned, services = make_sites(tmp_path, {"s": frame})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.table1d("T$id")
        assert _refusal(exc, "s").rule in ("disclosure.factor_levels_density", "disclosure.max_factor_levels")


def test_function_not_enabled_is_refused_and_audited(tmp_path):
    rules = rules_variant(tmp_path / "few.toml", enabled='["assignTable", "lengthDS"]')
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"x": np.arange(10.0)})}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.mean("T$x")
        err = exc.value.failures["s"]
        assert (err.rule, err.kind) == ("functions.enabled", "not_enabled")
        assert _last_audit(provisioned, "s")["rule"] == "functions.enabled"


def test_refusal_over_http_is_a_json_body_with_the_rule(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site2"]
    cred = gbsg2_provisioned["site2"].credentials["analyst"]
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    sid = http.post(f"{url}/v1/sessions", timeout=10).json()["session"]
    http.post(f"{url}/v1/sessions/{sid}/assign-table", json={"symbol": "D", "table": "GBSG2.validation"}, timeout=10)
    response = http.post(f"{url}/v1/sessions/{sid}/aggregate", json={"expr": "table2DDS(D$menostat, D$y)"}, timeout=10)
    assert response.status_code == 403
    error = response.json()["error"]
    assert error == {
        "type": "disclosure_refused", "site": "site2", "function": "table2DDS", "rule": "disclosure.q_threshold",
        "message": error["message"], "hint": error["hint"],
    }
    assert "below the minimum count of 5" in error["message"]
    http.delete(f"{url}/v1/sessions/{sid}", timeout=10)
