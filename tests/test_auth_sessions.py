"""Authentication, roles and session isolation, over real HTTP."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
import requests

from dsfed_client import FederatedCallError
from conftest import http_builder, inprocess_builder
from sitekit import ROOT, make_sites


@pytest.fixture
def site(gbsg2_http, gbsg2_provisioned):
    return gbsg2_http.urls["site1"], gbsg2_provisioned["site1"].credentials


def test_health_needs_no_credentials(site):
    url, _ = site
    assert requests.get(f"{url}/v1/health", timeout=10).json()["status"] == "ok"


@pytest.mark.parametrize("path,method", [
    ("/v1/functions", "GET"), ("/v1/tables", "GET"), ("/v1/sessions", "POST"), ("/v1/audit", "GET"),
    ("/v1/sessions/x/aggregate", "POST"), ("/v1/whoami", "GET"),
])
def test_missing_or_wrong_credentials_give_401(site, path, method):
    url, creds = site
    body = {"expr": "lengthDS(D$age)"} if path.endswith("aggregate") else None
    for auth, headers in [(None, {}), (("analyst", "wrong-password"), {}), (("nobody", "x"), {}),
                          (None, {"Authorization": "Bearer not-a-token"}), (None, {"Authorization": "Basic %%%"})]:
        response = requests.request(method, url + path, auth=auth, headers=headers, json=body, timeout=10)
        assert response.status_code == 401, (path, auth, headers)
        assert response.json()["error"]["type"] == "unauthenticated"


def test_password_and_token_both_work(site):
    url, creds = site
    a = creds["analyst"]
    assert requests.get(f"{url}/v1/whoami", auth=(a.user, a.password), timeout=10).json()["user"] == "analyst"
    headers = {"Authorization": f"Bearer {a.token}"}
    assert requests.get(f"{url}/v1/whoami", headers=headers, timeout=10).json() == {
        "user": "analyst", "role": "analyst", "site": "site1"}


def test_another_analysts_session_is_refused(site):
    """Another analyst's session answers exactly as a session id that does not exist (404, the same
    message but for the id), so its existence is not told."""
    url, creds = site
    a, b = creds["analyst"], creds["analyst2"]
    sid = requests.post(f"{url}/v1/sessions", auth=(a.user, a.password), timeout=10).json()["session"]
    requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=(a.user, a.password),
                  json={"symbol": "D", "table": "GBSG2.validation"}, timeout=10).raise_for_status()
    boot, rest = sid.split(".", 1)
    never_opened = f"{boot}.{'x' * len(rest)}"  # an id of this process's that was never opened
    for method, path, body in [
        ("GET", f"/v1/sessions/{sid}/symbols", None),
        ("POST", f"/v1/sessions/{sid}/aggregate", {"expr": "meanDS(D$age)"}),
        ("POST", f"/v1/sessions/{sid}/assign", {"symbol": "x", "expr": "D$age"}),
        ("DELETE", f"/v1/sessions/{sid}/symbols/D", None),
        ("DELETE", f"/v1/sessions/{sid}", None),
    ]:
        response = requests.request(method, url + path, auth=(b.user, b.password), json=body, timeout=10)
        unknown = requests.request(method, url + path.replace(sid, never_opened), auth=(b.user, b.password),
                                   json=body, timeout=10)
        assert response.status_code == unknown.status_code == 404, path
        assert response.json()["error"]["message"].replace(sid, "") == unknown.json()["error"]["message"].replace(
            never_opened, "")
    # the owner's session is untouched
    symbols = requests.get(f"{url}/v1/sessions/{sid}/symbols", auth=(a.user, a.password), timeout=10).json()
    assert symbols == [{"name": "D", "class": "data.frame"}]
    requests.delete(f"{url}/v1/sessions/{sid}", auth=(a.user, a.password), timeout=10).raise_for_status()


def test_roles(site):
    url, creds = site
    g, a = creds["governance"], creds["analyst"]
    assert requests.get(f"{url}/v1/audit", auth=(a.user, a.password), timeout=10).status_code == 403
    records = requests.get(f"{url}/v1/audit", auth=(g.user, g.password), timeout=10).json()
    assert records and all("mac" in r for r in records)
    assert requests.post(f"{url}/v1/sessions", auth=(g.user, g.password), timeout=10).status_code == 403
    # audited as docs/governance.md says: outcome forbidden (not a refusal by a rule)
    records = requests.get(f"{url}/v1/audit", auth=(g.user, g.password), timeout=10).json()
    opened = [r for r in records if r["function"] == "openSession" and r["user"] == g.user]
    assert [(r["outcome"], r["rule"]) for r in opened] == [("forbidden", None)]
    assert "`forbidden`" in (ROOT / "docs" / "governance.md").read_text()


def test_symbols_are_per_session(gbsg2_http, gbsg2_provisioned):
    with http_builder(gbsg2_provisioned, gbsg2_http.urls).login() as one, \
            http_builder(gbsg2_provisioned, gbsg2_http.urls).login() as two:
        one.assign_table("D", "GBSG2.validation")
        with pytest.raises(FederatedCallError) as exc:
            two.mean("D$age")
        assert {e.kind for e in exc.value.failures.values()} == {"not_found"}


def test_idle_sessions_expire(tmp_path):
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"x": np.arange(10.0)})}, idle_timeout_s=0.3)
    session = inprocess_builder(provisioned, services).login()
    session.assign_table("T", "P.t")
    time.sleep(0.5)
    with pytest.raises(FederatedCallError) as exc:
        session.mean("T$x")
    err = exc.value.failures["s"]
    assert err.kind == "not_found" and "expired" in err.message
    session.close()


def test_malformed_bodies_get_clear_422(site):
    url, creds = site
    a = creds["analyst"]
    sid = requests.post(f"{url}/v1/sessions", auth=(a.user, a.password), timeout=10).json()["session"]
    for body in [{"expr": "meanDS(D$age)", "call": {"call": "meanDS"}}, {"unexpected": 1}, {"expr": 5}]:
        response = requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=(a.user, a.password), json=body, timeout=10)
        assert response.status_code == 422
        assert response.json()["error"]["type"] == "bad_call"


def test_what_the_http_layer_refuses_comes_in_the_site_error_shape(site):
    """A body that is not JSON, an unknown path and a wrong method: the site's error body (Opal's
    under /ws), not the framework's bare ``detail``; neither call names the call it lacks."""
    url, creds = site
    auth = (creds["analyst"].user, creds["analyst"].password)
    sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
    cases = [("POST", f"/v1/sessions/{sid}/aggregate",
              {"data": b"{not json", "headers": {"Content-Type": "application/json"}}),
             ("GET", "/v1/no-such-route", {}), ("PUT", "/v1/whoami", {}), ("GET", "/ws/no-such-route", {})]
    for method, path, extra in cases:
        response = requests.request(method, url + path, auth=auth, timeout=10, **extra)
        assert response.status_code in (400, 404, 405, 422), (path, response.status_code)
        error = response.json()["error"]
        assert error["site"] == "site1" and error["message"] and "detail" not in response.json()
    neither = requests.post(f"{url}/v1/sessions/{sid}/aggregate", auth=auth, json={}, timeout=10).json()["error"]
    assert neither["message"] == "give the call as text (expr) or as a structured tree (call): neither given"


def test_a_symbol_name_ending_in_a_newline_is_refused(site):
    url, creds = site
    auth = (creds["analyst"].user, creds["analyst"].password)
    sid = requests.post(f"{url}/v1/sessions", auth=auth, timeout=10).json()["session"]
    response = requests.post(f"{url}/v1/sessions/{sid}/assign-table", auth=auth,
                             json={"symbol": "D\n", "table": "GBSG2.validation"}, timeout=10)
    assert response.status_code == 422 and "not a valid symbol name" in response.json()["error"]["message"]


def test_an_opal_command_is_queued_only_for_the_callers_session_and_a_valid_symbol(site):
    url, creds = site
    auth = (creds["analyst"].user, creds["analyst"].password)
    text = {"Content-Type": "text/plain"}
    unknown = requests.post(f"{url}/ws/datashield/session/nope/aggregate", params={"async": "true"}, auth=auth,
                            data="meanDS(D$age)", headers=text, timeout=10)
    assert unknown.status_code == 404 and unknown.json()["status"] == "not_found"
    sid = requests.post(f"{url}/ws/datashield/sessions", auth=auth, timeout=10).json()["id"]
    bad = requests.put(f"{url}/ws/datashield/session/{sid}/symbol/1x", params={"async": "true"}, auth=auth,
                       data="D$age", headers=text, timeout=10)
    assert bad.status_code == 422 and "not a valid symbol name" in bad.json()["error"]["message"]
    assert requests.get(f"{url}/ws/datashield/session/{sid}/commands", auth=auth, timeout=10).json() == []
    requests.delete(f"{url}/ws/datashield/session/{sid}", auth=auth, timeout=10)
    gone = requests.get(f"{url}/ws/datashield/session/{sid}/commands", auth=auth, timeout=10)
    assert gone.status_code == 404


def test_body_limit_comes_from_the_site_config(tmp_path):
    from dsfed_server.launch import LocalSites

    provisioned, _ = make_sites(tmp_path, {"s": pd.DataFrame({"x": np.arange(10.0)})}, max_body_mb=1)
    with LocalSites(provisioned.values(), tmp_path) as sites:
        cred = provisioned["s"].credentials["analyst"]
        response = requests.post(f"{sites.urls['s']}/v1/sessions/x/aggregate", auth=(cred.user, cred.password),
                                 data=b"x" * (2 << 20), headers={"content-type": "application/json"}, timeout=10)
    assert response.status_code == 413
    assert "limit of 1 MiB" in response.json()["error"]["message"]
