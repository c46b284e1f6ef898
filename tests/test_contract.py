"""The disclosure contract enforced: a function applies only the rules its registry entry declares.

Every rule a call applies is read through the call's guard (``Guard.rule``), which records it; the
service compares what was applied with the entry's ``checks`` before anything is released. A rule
applied but not declared is a bug in the declaration: the call answers 500 naming the site, the
function and the rule, nothing is released, and the audit record carries both lists, as it does on
every call.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import requests

from conftest import audit_records
from dsfed_server.config import load_site_config
from dsfed_server.disclosure.checks import CALL_RULES
from dsfed_server.disclosure.rules import rule_keys
from dsfed_server.registry import REGISTRY, P, Param, Registry, register
from dsfed_server.service import SiteService
from sitekit import make_sites, serve

(CALL_RULE,) = CALL_RULES
SERVER = Path(__file__).resolve().parents[1] / "dsfed_server"


def test_every_declared_check_is_a_rule_of_the_rules_file():
    known = set(rule_keys())
    for spec in REGISTRY:
        assert set(spec.checks) <= known, (spec.name, spec.checks)
    assert {"disclosure.q_threshold", "bins.small_bin_policy", "privacy.epsilon"} <= known
    declaring = [spec.name for spec in REGISTRY if spec.checks]
    assert "meanDS" in declaring and "isValidDS" in declaring


def test_registering_an_unknown_rule_name_fails_at_import():
    with pytest.raises(ValueError, match=r"contractProbeDS: checks disclosure\.q are no rules-file keys"):
        register("contractProbeDS", "aggregate", [Param("x", P.VECTOR, "x")], checks=("disclosure.q",))
    assert REGISTRY.get("contractProbeDS") is None


def test_rules_are_read_only_through_the_guard():
    """No function reads the rules file around the guard's record (``guard.rules.<section>``)."""
    readers = [path.name for path in SERVER.rglob("*.py")
               if re.search(r"guard\.rules\.", path.read_text(encoding="utf-8"))]
    assert readers == []


def _site(tmp_path: Path, undeclare: str | None = None):
    """One small site, served over loopback HTTP; ``undeclare``: a function whose declared checks
    are emptied in the site's own registry copy (the production registry is untouched)."""
    provisioned, _ = make_sites(tmp_path, {"s": pd.DataFrame({"x": [float(i) for i in range(20)]})})
    registry = Registry()
    for spec in REGISTRY:
        registry.add(replace(spec, checks=()) if spec.name == undeclare else spec)
    config, base = load_site_config(provisioned["s"].config)
    return provisioned["s"], SiteService(config, base_dir=base, registry=registry)


# what meanDS declares: q, then (the release history kept) the functions its records answer, which the
# mean of a table's column, a second moment, does not apply, and the records at each value of a 0/1 column as row sets
MEAN_RULES = ("disclosure.q_threshold", "disclosure.cut_history", "disclosure.sums_per_record",
              "disclosure.subset_min_difference", "secure_aggregation.pooled_thresholds")


def _aggregate(url: str, site, expr: str) -> requests.Response:
    cred = site.credentials["analyst"]
    auth = (cred.user, cred.password)
    sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
    requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=auth, json={"symbol": "T", "table": "P.t"},
                  timeout=10).raise_for_status()
    return requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=auth, json={"expr": expr}, timeout=10)


def test_a_rule_applied_but_not_declared_refuses_the_call(tmp_path):
    """meanDS applies q (``disclosure.q_threshold``); in this site's registry copy it declares nothing:
    the call is refused, nothing released, and the audit record names the rule and both lists."""
    site, service = _site(tmp_path, undeclare="meanDS")
    with serve(service) as url:
        response = _aggregate(url, site, "meanDS(T$x)")
    assert response.status_code == 500, response.text
    body = response.json()
    assert set(body) == {"error"}  # no mean, no partial result
    error = body["error"]
    assert error["type"] == "internal_error" and error["site"] == "s" and error["function"] == "meanDS"
    assert error["rule"] == "disclosure.q_threshold"
    assert "does not declare" in error["message"] and "nothing was released" in error["message"]
    assert "this is a bug in the function's declaration, report it" in error["hint"]
    (record,) = [r for r in audit_records(site) if r["function"] == "meanDS"]
    assert record["outcome"] == "internal_error" and record["rule"] == "disclosure.q_threshold"
    # disclosure.combine_analyst_vectors is applied to every call's arguments (CALL_RULES), not by the function
    assert record["checks"] == {"meanDS": {"declared": [], "applied": [CALL_RULE, "disclosure.q_threshold"]}}


def test_the_audit_carries_declared_and_applied_rules(tmp_path):
    """With the production declarations: a released mean and a refused histogram both record what the
    function declared and what it applied."""
    site, service = _site(tmp_path)
    with serve(service) as url:
        released = _aggregate(url, site, "meanDS(T$x)")
        refused = _aggregate(url, site, "histogramDS2(T$x, 19, 0, 19, 1)")  # bins of about one record
    assert released.status_code == 200 and released.json()["result"]["EstimatedMean"] == pytest.approx(9.5)
    assert refused.status_code == 403, refused.text
    records = {r["function"]: r for r in audit_records(site) if r["function"] in ("meanDS", "histogramDS2")}
    mean = records["meanDS"]
    assert mean["outcome"] == "ok"
    assert mean["checks"] == {"meanDS": {"declared": list(MEAN_RULES),
                                         "applied": [CALL_RULE, "disclosure.q_threshold"]}}
    histogram = records["histogramDS2"]
    assert histogram["outcome"] == "refused"
    entry = histogram["checks"]["histogramDS2"]
    assert entry["declared"] == list(REGISTRY.get("histogramDS2").checks)
    assert histogram["rule"] in entry["applied"] and set(entry["applied"]) - {CALL_RULE} <= set(entry["declared"])
