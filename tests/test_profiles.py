"""Profiles in the rules file (as Opal's DataSHIELD profiles): each enables its own functions and
may tighten the site's rules, never loosen them; a session follows the profile it was opened
with, through the native API and the Opal protocol alike; a bad profile stops the server with
file:line: reason."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import requests

from dsfed_server.disclosure.rules import load_rules
from dsfed_core.errors import DisclosureRefusal, NotEnabled, NotFound
from dsfed_server.service import CallRequest
from dsfed_server.tomlfile import ConfigFileError
from opalkit import ds_session
from sitekit import ROOT, make_sites, rules_variant

PROFILE = """
[profiles.strict]
# the test profile
enabled = ["assignTable", "table1DDS", "corDS"]

[profiles.strict.disclosure]
# stricter minimum count
q_threshold = 10
"""


def rules_with(tmp_path, text: str, **changes: str):
    path = rules_variant(tmp_path / "rules.toml", **changes)
    path.write_text(path.read_text() + text)
    return path


def _line(path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if line.startswith(needle))


def test_shipped_profiles_and_the_default():
    default = load_rules(ROOT / "disclosure_rules" / "default.toml")
    assert default.profile_names == ["default"]
    site = load_rules(ROOT / "disclosure_rules" / "site1.toml")
    assert site.profile_names == ["default", "summaries"]
    summaries = site.profile("summaries")
    assert summaries.disclosure.q_threshold == 10 and site.disclosure.q_threshold == 5
    assert summaries.disclosure.subset_min == site.disclosure.subset_min  # not overridden: the site's
    assert "meanDS" in summaries.functions.enabled and "glmDS2" not in summaries.functions.enabled
    assert site.profile("default").functions.enabled == site.functions.enabled


@pytest.mark.parametrize("text,needle,reason", [
    ('\n[profiles.p]\n# x\nenabled = ["meanDS"]\n# x\nq_threshold = 10\n', "q_threshold = 10",
     "unknown key 'profiles.p.q_threshold'"),
    ('\n[profiles.p]\n# x\nenabled = ["meanDS"]\n[profiles.p.disclosure]\n# x\nq_threshold = 3\n', "q_threshold = 3",
     "profiles.p.disclosure.q_threshold = 3 is less strict than the site's disclosure.q_threshold = 5"),
    ('\n[profiles.p]\n# x\nenabled = ["meanDS"]\n[profiles.p.disclosure]\n# x\nglm_saturation = 0.5\n',
     "glm_saturation = 0.5", "less strict"),
    ('\n[profiles.p]\n# x\nenabled = ["meanDS"]\n[profiles.p.bins]\n# x\nsmall_bin_policy = "merge"\n',
     'small_bin_policy = "merge"', "may only tighten"),
    ('\n[profiles.p]\n# x\nenabled = ["meanDS"]\n[profiles.p.disclosure]\n# x\nq_threshold = 0\n', "q_threshold = 0",
     "greater than or equal to 1"),
    ('\n[profiles.default]\n# x\nenabled = ["meanDS"]\n', "[profiles.default]", "reserved"),
    ('\n[profiles.p]\n# x\nenabled = ["meanDS", "evalDS"]\n', 'enabled = ["meanDS", "evalDS"]',
     "profiles.p.enabled lists unknown function(s) evalDS"),
])
def test_bad_profile_stops_the_server_with_file_line_reason(tmp_path, text, needle, reason):
    bad = rules_with(tmp_path, text, small_bin_policy='"refuse"')  # a site that refuses: "merge" loosens it
    with pytest.raises(ConfigFileError) as exc:
        make_sites(tmp_path, {"s": pd.DataFrame({"x": [1.0] * 10})}, rules=bad)
    assert f"{bad}:{_line(bad, needle)}:" in str(exc.value)
    assert reason in str(exc.value)


def test_a_stricter_profile_may_tighten_and_choose_functions(tmp_path):
    rules = rules_with(tmp_path, PROFILE.replace("q_threshold = 10", "q_threshold = 10\n# x\nsubset_min = 9"))
    strict = load_rules(rules).profile("strict")
    assert (strict.disclosure.q_threshold, strict.disclosure.subset_min) == (10, 9)


@pytest.fixture
def site(tmp_path):
    """A site whose default profile does not enable corDS and whose 'strict' profile does, with q = 10."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"g": ["a"] * 30 + ["b"] * 7, "x": rng.normal(size=37), "z": rng.normal(size=37)})
    enabled = '["assignTable", "table1DDS", "meanDS"]'
    provisioned, services = make_sites(tmp_path, {"s": frame}, rules=rules_with(tmp_path, PROFILE, enabled=enabled))
    return provisioned["s"], services["s"]


def test_session_follows_its_profile(site):
    provisioned, service = site
    cred = provisioned.credentials["analyst"]
    user = service.login_password(cred.user, cred.password)
    default = service.open_session(user)["session"]
    strict = service.open_session(user, "strict")["session"]
    assert service.session_exists(user, strict)["profile"] == "strict"
    for sid in (default, strict):
        service.assign_table(user, sid, "T", "P.t", None)
    # q = 5 by default: the 7 records of level b may be tabulated; q = 10 in 'strict': refused
    assert service.aggregate(user, default, CallRequest(text="table1DDS(T$g)"))["counts"] == [30, 7]
    with pytest.raises(DisclosureRefusal) as exc:
        service.aggregate(user, strict, CallRequest(text="table1DDS(T$g)"))
    assert "minimum count of 10" in exc.value.message and exc.value.rule == "disclosure.q_threshold"
    # each profile enables its own functions
    with pytest.raises(NotEnabled) as exc:
        service.aggregate(user, strict, CallRequest(text="meanDS(T$x)"))
    assert exc.value.rule == "profiles.strict.enabled"
    with pytest.raises(NotEnabled) as exc:
        service.aggregate(user, default, CallRequest(text='corDS("T$x", "T$z")'))
    assert exc.value.rule == "functions.enabled"
    assert service.aggregate(user, strict, CallRequest(text='corDS("T$x", "T$z")'))["complete.counts"] == [[37, 37]] * 2
    assert [f["name"] for f in service.functions(user, "strict")["functions"]] == ["assignTable", "table1DDS", "corDS"]
    assert [p["name"] for p in service.profiles(user)] == ["default", "strict"]
    with pytest.raises(NotFound):
        service.open_session(user, "lenient")
    records = service.audit.read()
    opened = [r for r in records if r["function"] == "openSession"]
    assert [(r["call"], r["outcome"]) for r in opened] == [("", "ok"), ("profile=strict", "ok"),
                                                           ("profile=lenient", "not_found")]


def test_profiles_over_both_front_doors(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site5"]
    cred = gbsg2_provisioned["site5"].credentials["analyst"]
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    opened = http.post(f"{url}/v1/sessions", params={"profile": "summaries"}, timeout=10).json()
    assert opened["profile"] == "summaries"
    http.delete(f"{url}/v1/sessions/{opened['session']}", timeout=10)
    missing = http.post(f"{url}/v1/sessions", params={"profile": "lenient"}, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    listed = http.get(f"{url}/ws/datashield/env/aggregate/methods", params={"profile": "summaries"}, timeout=10).json()
    assert "glmDS2" not in {m["name"] for m in listed} and "meanDS" in {m["name"] for m in listed}
    # tgrade I at site5: 7 records, allowed under q = 5, refused under the profile's q = 10
    with ds_session(gbsg2_http, gbsg2_provisioned, profile="summaries") as session:
        with pytest.raises(Exception):
            session.aggregate("table1DDS(D$tgrade)", conn_names=["site5"])
        assert "minimum count of 10" in str(session.get_errors()["site5"])
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        table = session.aggregate("table1DDS(D$tgrade)", conn_names=["site5"])["site5"]["table"][0]
        assert table == {"I": 7, "II": 39, "III": 7, "Total": 53}
