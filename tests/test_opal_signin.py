"""Opal's sign-in session at /ws, as R's opalr uses it, against a real site process: credentials
once on the profile request, then the opalsid cookie (with the XSRF-TOKEN echoed on requests that
change anything), sign-out; the empty profile; DSOpal's application/x-opal table assignment."""

from __future__ import annotations

import requests

from conftest import audit_records
from dsfed_server.auth import hash_token
from dsfed_server.config import User
from dsfed_server.opal.signin import WebSessions

RSCRIPT = {"Content-Type": "application/x-rscript", "Accept": "application/json"}


def _signed_in(url: str, cred) -> requests.Session:
    """A cookie jar signed in as opalr signs in: credentials on the profile request only."""
    http = requests.Session()
    profile = http.get(f"{url}/ws/system/subject-profile/_current", auth=(cred.user, cred.password), timeout=10)
    assert profile.status_code == 200 and profile.json()["principal"] == cred.user
    cookies = {c.name: c for c in http.cookies}
    assert set(cookies) >= {"opalsid", "XSRF-TOKEN"}
    assert cookies["opalsid"].has_nonstandard_attr("HttpOnly") and cookies["opalsid"].path == "/"
    assert not cookies["opalsid"].secure  # plain http on loopback: Secure only over https
    http.headers["X-XSRF-TOKEN"] = cookies["XSRF-TOKEN"].value
    return http


def test_cookie_session_carries_the_account(gbsg2_http, gbsg2_provisioned, gbsg2_frames):
    url = gbsg2_http.urls["site1"]
    site = gbsg2_provisioned["site1"]
    http = _signed_in(url, site.credentials["analyst"])
    sid = http.post(f"{url}/ws/datashield/sessions", timeout=10).json()["id"]  # no credentials: the cookie
    ws = f"{url}/ws/datashield/session/{sid}"
    assert http.put(f"{ws}/symbol/D", data="GBSG2.validation", params={"async": "false"},
                    headers={"Content-Type": "application/x-opal"}, timeout=10).status_code == 200
    mean = http.post(f"{ws}/aggregate", data="meanDS(D$age)", headers=RSCRIPT, timeout=10).json()
    assert mean["EstimatedMean"] == gbsg2_frames["site1"]["age"].mean()
    last = audit_records(site)[-1]
    assert (last["user"], last["function"], last["outcome"]) == ("analyst", "meanDS", "ok")
    signin = [r for r in audit_records(site) if r["function"] == "signIn"][-1]
    assert (signin["user"], signin["kind"], signin["outcome"]) == ("analyst", "auth", "ok")
    assert http.delete(ws, timeout=10).status_code == 200
    opalsid = http.cookies["opalsid"]
    assert http.delete(f"{url}/ws/auth/session/{opalsid}", timeout=10).status_code == 200
    assert [r for r in audit_records(site) if r["function"] == "signOut"][-1]["user"] == "analyst"
    after = requests.get(f"{url}/ws/datasources", cookies={"opalsid": opalsid}, timeout=10)
    assert after.status_code == 401 and "has ended" in after.json()["arguments"][0]


def test_a_cookie_alone_must_echo_the_xsrf_token(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site2"]
    http = _signed_in(url, gbsg2_provisioned["site2"].credentials["analyst"])
    assert http.get(f"{url}/ws/datasources", headers={"X-XSRF-TOKEN": ""}, timeout=10).status_code == 200  # GET
    forged = requests.post(f"{url}/ws/datashield/sessions", cookies={"opalsid": http.cookies["opalsid"]}, timeout=10)
    assert forged.status_code == 403 and "X-XSRF-TOKEN" in forged.json()["arguments"][0]
    last = audit_records(gbsg2_provisioned["site2"])[-1]
    assert (last["user"], last["function"], last["outcome"], last["call"]) == (
        "analyst", "crossSiteCheck", "forbidden", "POST /ws/datashield/sessions")
    wrong = http.post(f"{url}/ws/datashield/sessions", headers={"X-XSRF-TOKEN": "guess"}, timeout=10)
    assert wrong.status_code == 403
    assert http.post(f"{url}/ws/datashield/sessions", timeout=10).status_code == 201


def test_sessions_are_the_accounts_own(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site3"]
    creds = gbsg2_provisioned["site3"].credentials
    mine, other = _signed_in(url, creds["analyst"]), _signed_in(url, creds["analyst2"])
    assert mine.cookies["opalsid"] != other.cookies["opalsid"]
    assert other.delete(f"{url}/ws/auth/session/{mine.cookies['opalsid']}", timeout=10).status_code == 404
    assert mine.get(f"{url}/ws/system/subject-profile/_current", timeout=10).json()["principal"] == "analyst"
    sid = mine.post(f"{url}/ws/datashield/sessions", timeout=10).json()["id"]
    assert other.get(f"{url}/ws/datashield/session/{sid}", timeout=10).status_code == 404
    assert mine.delete(f"{url}/ws/auth/session/_current", timeout=10).status_code == 200
    assert mine.get(f"{url}/ws/datasources", timeout=10).status_code == 401  # the jar's cookie ended


def test_web_sessions_expire_and_are_bounded():
    now = [0.0]
    store = WebSessions(idle_timeout_s=60, max_per_user=2, clock=lambda: now[0])
    user = User(name="a", role="analyst", token_hashes=(hash_token("a"),))
    first, _ = store.open(user, "x")
    now[0] = 59.0
    assert store.get(first) is not None  # used: idle from now on
    now[0] = 118.0
    assert store.get(first) is not None
    now[0] = 178.5
    assert store.get(first) is None  # idle too long
    ids = [store.open(user, "x")[0] for _ in range(3)]
    assert store.get(ids[0]) is None and store.get(ids[2]) is not None  # the least recently used went
    stranger = User(name="b", role="analyst", token_hashes=(hash_token("b"),))
    assert not store.close(ids[2], stranger) and store.close(ids[2], user)


def test_the_empty_profile_is_the_default(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site1"]
    cred = gbsg2_provisioned["site1"].credentials["analyst"]
    auth = (cred.user, cred.password)
    empty = requests.get(f"{url}/ws/datashield/env/aggregate/methods", params={"profile": ""}, auth=auth, timeout=10)
    default = requests.get(f"{url}/ws/datashield/env/aggregate/methods", params={"profile": "default"}, auth=auth,
                           timeout=10)
    assert empty.status_code == 200 and empty.json() == default.json() and len(empty.json()) > 10
    opened = requests.post(f"{url}/ws/datashield/sessions", params={"profile": ""}, auth=auth, timeout=10)
    assert opened.status_code == 201 and opened.json()["profile"] == "default"
    requests.delete(f"{url}/ws/datashield/session/{opened.json()['id']}", auth=auth, timeout=10)


def test_x_opal_assignment_reads_opalrs_options(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site4"]
    cred = gbsg2_provisioned["site4"].credentials["analyst"]
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    sid = http.post(f"{url}/ws/datashield/sessions", timeout=10).json()["id"]
    ws = f"{url}/ws/datashield/session/{sid}"
    x_opal = {"Content-Type": "application/x-opal"}
    # as DSOpal sends it: missings=FALSE, variables=name().any('age','tsize'), async=true
    rid = http.put(f"{ws}/symbol/D", data="GBSG2.validation", headers=x_opal, timeout=10,
                   params={"missings": "FALSE", "variables": "name().any('age','tsize')", "async": "true"}).text
    status = http.get(f"{ws}/command/{rid}", params={"wait": "true"}, timeout=30).json()
    assert status["status"] == "COMPLETED" and status["script"] == "D <- GBSG2.validation"
    fetched = http.get(f"{ws}/command/{rid}/result", headers={"Accept": "application/octet-stream"}, timeout=10)
    assert fetched.content.startswith(b"X\n") and fetched.content.endswith(b"\x00\x00\x00\xfe")  # R's NULL
    assert http.post(f"{ws}/aggregate", data='colnamesDS("D")', headers=RSCRIPT, timeout=10).json() == ["age", "tsize"]
    for body, status_code in (("GBSG2.nothing", 404), ("meanDS(D$age)", 422), ("GBSG2", 422)):
        bad = http.put(f"{ws}/symbol/E", data=body, headers=x_opal, params={"async": "false"}, timeout=10)
        assert bad.status_code == status_code, (body, bad.text)
    refused = http.put(f"{ws}/symbol/E", data="GBSG2.validation", headers=x_opal, params={"id": "pid"}, timeout=10)
    assert refused.status_code == 403 and "[rule dictionary.identifier]" in refused.json()["arguments"][0]
    symbols = http.get(f"{ws}/symbols", headers={"Accept": "application/octet-stream"}, timeout=10)
    assert symbols.headers["content-type"] == "application/octet-stream" and b"D" in symbols.content
    assert http.get(f"{ws}/symbols", timeout=10).json() == ["D"]
    http.delete(ws, timeout=10)
