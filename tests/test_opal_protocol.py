"""The Opal REST subset under /ws, request by request against a real site process: the
credential forms, asynchronous commands (status, result, order, removal), session isolation,
Opal's error documents, the table assignment's variable filter and the metadata documents."""

from __future__ import annotations

import base64
import time

import pytest
import requests

from conftest import audit_records

RSCRIPT = {"Content-Type": "application/x-rscript", "Accept": "application/json"}


@pytest.fixture
def site(gbsg2_http, gbsg2_provisioned):
    url = gbsg2_http.urls["site1"] + "/ws"
    creds = gbsg2_provisioned["site1"].credentials
    return url, creds, gbsg2_provisioned["site1"]


def _http(cred) -> requests.Session:
    http = requests.Session()
    http.auth = (cred.user, cred.password)
    return http


@pytest.fixture
def opened(site):
    """An Opal DataSHIELD session of 'analyst' at site1, with D assigned synchronously."""
    url, creds, _ = site
    http = _http(creds["analyst"])
    response = http.post(f"{url}/datashield/sessions", params={"wait": "false", "profile": "default"}, timeout=10)
    assert response.status_code == 201 and response.json()["state"] == "RUNNING"
    sid = response.json()["id"]
    assigned = http.put(f"{url}/datashield/session/{sid}/symbol/D/table/GBSG2.validation",
                        params={"missings": "false", "async": "false"}, timeout=10)
    assert assigned.status_code == 200
    yield http, f"{url}/datashield/session/{sid}", sid
    http.delete(f"{url}/datashield/session/{sid}", timeout=10)


def test_credential_forms(site):
    url, creds, _ = site
    a = creds["analyst"]
    current = f"{url}/system/subject-profile/_current"
    basic = requests.get(current, auth=(a.user, a.password), timeout=10)
    assert basic.json()["principal"] == "analyst" and basic.headers["X-Opal-Version"]
    opalr = base64.b64encode(f"{a.user}:{a.password}".encode()).decode()
    opal_auth = requests.get(current, headers={"Authorization": f"X-Opal-Auth {opalr}"}, timeout=10)
    assert opal_auth.json()["principal"] == "analyst"
    assert requests.get(current, headers={"X-Opal-Auth": a.token}, timeout=10).json()["principal"] == "analyst"
    for headers in ({}, {"X-Opal-Auth": "not-a-token"}, {"Authorization": "Basic %%%"}):
        refused = requests.get(current, headers=headers, timeout=10)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
        body = refused.json()
        assert (body["code"], body["status"], body["error"]["type"]) == (401, "unauthenticated", "unauthenticated")
        assert "site 'site1'" in body["arguments"][0]


def test_async_command_lifecycle(opened):
    http, base, _ = opened
    rid = http.post(f"{base}/aggregate", params={"async": "true"}, data="meanDS(D$age)", headers=RSCRIPT,
                    timeout=10).text
    status = http.get(f"{base}/command/{rid}", params={"wait": "true"}, timeout=30).json()
    assert (status["id"], status["status"], status["withResult"], status["withError"]) == (
        rid, "COMPLETED", True, False)
    assert status["script"] == "meanDS(D$age)"
    assert rid in [c["id"] for c in http.get(f"{base}/commands", timeout=10).json()]
    result = http.get(f"{base}/command/{rid}/result", timeout=10).json()
    assert set(result) == {"EstimatedMean", "Nmissing", "Nvalid", "Ntotal", "ValidityMessage"}
    gone = http.get(f"{base}/command/{rid}/result", timeout=10)  # rm = true by default
    assert gone.status_code == 404 and gone.json()["status"] == "not_found"
    rid = http.post(f"{base}/aggregate", params={"async": "true"}, data="lengthDS(D$age)", headers=RSCRIPT,
                    timeout=10).text
    assert http.get(f"{base}/command/{rid}/result", params={"wait": "true", "rm": "false"}, timeout=30).json() == 51
    assert http.delete(f"{base}/command/{rid}", timeout=10).status_code == 200
    assert http.get(f"{base}/command/{rid}", timeout=10).status_code == 404


def test_async_commands_of_a_session_run_in_order(opened, gbsg2_frames):
    http, base, _ = opened

    def submit(method: str, path: str, script: str) -> str:
        response = http.request(method, f"{base}/{path}", params={"async": "true"}, data=script,
                                headers=RSCRIPT, timeout=10)
        return response.text

    rids = [submit("PUT", "symbol/A", "D$score"), submit("POST", "aggregate", "meanDS(A)"),
            submit("PUT", "symbol/A", "D$age"), submit("POST", "aggregate", "meanDS(A)")]
    statuses = [http.get(f"{base}/command/{rid}", params={"wait": "true"}, timeout=30).json() for rid in rids]
    assert [s["status"] for s in statuses] == ["COMPLETED"] * 4
    assert [s["withResult"] for s in statuses] == [False, True, False, True]  # an assignment has no result
    score, age = (http.get(f"{base}/command/{rid}/result", timeout=10).json()["EstimatedMean"] for rid in rids[1::2])
    frame = gbsg2_frames["site1"]
    assert (score, age) == (pytest.approx(frame["score"].mean(), rel=1e-12),
                            pytest.approx(frame["age"].mean(), rel=1e-12))


def test_failed_command_carries_the_refusal(opened, site):
    http, base, _ = opened
    rid = http.post(f"{base}/aggregate", params={"async": "true"}, data="quantileMeanDS(D$pnodes)",
                    headers=RSCRIPT, timeout=10).text
    ok = http.get(f"{base}/command/{rid}", params={"wait": "true"}, timeout=30).json()
    assert ok["status"] == "COMPLETED"
    rid = http.post(f"{base}/aggregate", params={"async": "true"}, data="evalDS(D)", headers=RSCRIPT, timeout=10).text
    failed = http.get(f"{base}/command/{rid}", params={"wait": "true"}, timeout=30).json()
    assert failed["status"] == "FAILED" and failed["withError"] and not failed["withResult"]
    assert "site 'site1', function evalDS: 'evalDS' is not a registered function" in failed["error"]
    result = http.get(f"{base}/command/{rid}/result", timeout=10)
    assert result.status_code == 422 and result.json()["error"]["type"] == "bad_call"
    last = audit_records(site[2])[-1]
    assert (last["function"], last["kind"], last["outcome"]) == ("evalDS", "aggregate", "bad_call")


def test_sessions_and_commands_are_private(opened, site):
    http, base, sid = opened
    url, creds, provisioned = site
    other = _http(creds["analyst2"])
    rid = http.post(f"{base}/aggregate", params={"async": "true"}, data="meanDS(D$age)", headers=RSCRIPT,
                    timeout=10).text
    assert other.get(f"{base}/command/{rid}", timeout=10).status_code == 404
    assert other.get(f"{base}/commands", timeout=10).status_code == 404  # not theirs: as an unknown session
    foreign = other.post(f"{base}/aggregate", data="meanDS(D$age)", headers=RSCRIPT, timeout=10)
    assert foreign.status_code == 404 and foreign.json()["status"] == "not_found"  # as an unknown session
    last = audit_records(provisioned)[-1]
    assert (last["user"], last["function"], last["outcome"]) == ("analyst2", "meanDS", "not_found")
    governance = _http(creds["governance"])
    assert governance.post(f"{url}/datashield/sessions", timeout=10).status_code == 403


def test_session_state_and_close(site):
    url, creds, _ = site
    http = _http(creds["analyst"])
    sid = http.post(f"{url}/datashield/sessions", timeout=10).json()["id"]
    assert http.get(f"{url}/datashield/session/{sid}", timeout=10).json()["state"] == "RUNNING"
    assert http.delete(f"{url}/datashield/session/{sid}", timeout=10).status_code == 200
    closed = http.get(f"{url}/datashield/session/{sid}", timeout=10)
    assert closed.status_code == 404 and closed.json()["status"] == "not_found"
    restore = http.post(f"{url}/datashield/sessions", params={"restore": "ws1"}, timeout=10)
    assert restore.status_code == 404 and "workspace" in restore.json()["arguments"][0]


def test_table_assignment_variable_filter(opened):
    http, base, _ = opened
    put = http.put(f"{base}/symbol/V/table/GBSG2.validation",
                   params={"async": "false", "variables": 'name.any("y","score")'}, timeout=10)
    assert put.status_code == 200
    assert http.post(f"{base}/aggregate", data='colnamesDS("V")', headers=RSCRIPT, timeout=10).json() == ["y", "score"]
    assert http.get(f"{base}/symbols", timeout=10).json() == ["D", "V"]
    opalr = http.put(f"{base}/symbol/W/table/GBSG2.validation",  # R's DSOpal writes Magma's name()
                     params={"async": "false", "variables": "name().any('score', 'age')"}, timeout=10)
    assert opalr.status_code == 200
    colnames = http.post(f"{base}/aggregate", data='colnamesDS("W")', headers=RSCRIPT, timeout=10)
    assert colnames.json() == ["score", "age"]
    for script in ("name().matches(/y/)", 'name.any("y") or true', "name().any('y' 'age')", "age"):
        bad = http.put(f"{base}/symbol/V/table/GBSG2.validation", params={"variables": script}, timeout=10)
        assert bad.status_code == 422 and bad.json()["status"] == "bad_call", script
        assert "name().any('a', 'b')" in bad.json()["arguments"][0]
    mapping = http.put(f"{base}/symbol/V/table/GBSG2.validation", params={"identifiers": "ids"}, timeout=10)
    assert mapping.status_code == 404 and "no identifiers mapping 'ids'" in mapping.json()["arguments"][0]
    ids = http.put(f"{base}/symbol/V/table/GBSG2.validation", params={"id": "patient"}, timeout=10)
    assert ids.status_code == 403 and "[rule dictionary.identifier]" in ids.json()["arguments"][0]
    missing = http.put(f"{base}/symbol/V/table/GBSG2.nothing", timeout=10)
    assert missing.status_code == 404 and "no table 'GBSG2.nothing'" in missing.json()["arguments"][0]


def test_metadata_documents(site):
    url, creds, _ = site
    http = _http(creds["analyst"])
    assert http.get(f"{url}/datasources", timeout=10).json() == [
        {"name": "GBSG2", "type": "dsfed", "table": ["validation"]}]
    table = http.get(f"{url}/datasource/GBSG2/table/validation", timeout=10).json()
    assert (table["name"], table["datasourceName"], table["variableCount"]) == ("validation", "GBSG2", 12)
    variables = http.get(f"{url}/datasource/GBSG2/table/validation/variables", timeout=10).json()
    tgrade = next(v for v in variables if v["name"] == "tgrade")
    assert [c["name"] for c in tgrade["categories"]] == ["I", "II", "III"]
    assert http.get(f"{url}/datasource/GBSG2/table/other", timeout=10).status_code == 404
    assert http.get(f"{url}/datashield/env/other/methods", timeout=10).status_code == 404
    assert http.get(f"{url}/datashield/env/aggregate/methods", params={"profile": "x"}, timeout=10).status_code == 404
    assert http.get(f"{url}/datashield/profile/summaries", timeout=10).json()["enabled"] is True
    assert http.get(f"{url}/datashield/profiles", timeout=10).json()[0] == {
        "name": "default", "cluster": "dsfed", "enabled": True, "restrictedAccess": False}


def test_sync_and_async_answers_are_the_same_document(opened):
    http, base, _ = opened
    for script in ("table2DDS(D$y, D$cens)", "glmDS1(y ~ age + tgrade, \"binomial\", NULL, NULL, \"D\")",
                   "histogramDS2(D$age, 2, 20, 80, 1, 3, 0.25)"):
        sync = http.post(f"{base}/aggregate", params={"async": "false"}, data=script, headers=RSCRIPT, timeout=10)
        rid = http.post(f"{base}/aggregate", params={"async": "true"}, data=script, headers=RSCRIPT, timeout=10).text
        deadline = time.monotonic() + 30
        while http.get(f"{base}/command/{rid}", timeout=10).json()["status"] != "COMPLETED":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert http.get(f"{base}/command/{rid}/result", timeout=10).json() == sync.json()


def test_command_store_keeps_a_bounded_number_of_finished_commands():
    from dsfed_core.errors import NotFound
    from dsfed_server.opal.commands import CommandStore

    store = CommandStore(workers=2, keep_per_session=3)
    try:
        ids = []
        for i in range(5):
            command = store.submit("u", "s1", f"call{i}", lambda i=i: i, with_result=True)
            assert command.done.wait(10) and command.result == i
            ids.append(command.id)
        assert [c.script for c in store.list("u", "s1")] == ["call2", "call3", "call4"]  # the oldest went
        with pytest.raises(NotFound):
            store.get("u", "s1", ids[0])
        with pytest.raises(NotFound):
            store.get("v", "s1", ids[4])  # another user's command does not exist for them
        for i in range(14):  # one user, many sessions: at most 4 x 3 finished commands kept
            store.submit("u", f"t{i}", "x", lambda: None, with_result=False).done.wait(10)
        assert sum(len(store.list("u", s)) for s in ["s1"] + [f"t{i}" for i in range(14)]) <= 12
        store.drop_session("t13")
        assert store.list("u", "t13") == []
    finally:
        store.close()
