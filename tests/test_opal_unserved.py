"""What the DataSHIELD door (/ws) does not serve, answered in Opal's own documents.

The unmodified PyPI clients (``datashield`` + ``datashield-opal``) call Opal routes a dsfed site does not
serve: saved workspaces, projects, taxonomies, resources. Each answer is Opal's: an empty workspace list,
or Opal's error document (``code``, ``status``, ``arguments``) saying what is not supported and what to
use instead; an unknown /ws route gets Opal's error document too, never FastAPI's ``{"detail": ...}``.
"""

from __future__ import annotations

import pandas as pd
import pytest
import requests
from datashield import DSLoginBuilder, DSSession
from datashield.interface import DSError
from obiba_opal.core import HTTPError

from sitekit import make_sites, serve

OPAL_ERROR_KEYS = {"code", "status", "arguments"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    provisioned, services = make_sites(tmp_path_factory.mktemp("unserved"),
                                       {"s": pd.DataFrame({"x": [float(i) for i in range(20)]})})
    with serve(services["s"]) as url:
        cred = provisioned["s"].credentials["analyst"]
        yield url, (cred.user, cred.password)


@pytest.fixture
def session(site):
    url, (user, password) = site
    builder = DSLoginBuilder()
    builder.add("s", url, user=user, password=password)
    ds = DSSession(builder.build())
    ds.open()
    yield ds
    ds.close()


def _opal_error(response: requests.Response | dict, status: int) -> dict:
    body = response if isinstance(response, dict) else response.json()
    assert OPAL_ERROR_KEYS <= set(body) and "detail" not in body, body
    assert body["code"] == status and isinstance(body["arguments"], list) and body["arguments"], body
    return body


@pytest.mark.parametrize("method, path", [
    ("GET", "/ws/nothing"), ("POST", "/ws/datashield/nothing"), ("GET", "/ws/datashield/session/x/y/z"),
    ("PUT", "/ws/files/x"),
])
def test_unknown_ws_routes_answer_in_opal_error_format(site, method, path):
    url, auth = site
    answer = requests.request(method, url + path, auth=auth, timeout=10)
    body = _opal_error(answer, 404)
    assert body["status"] == "not_found" and f"no route {path}" in body["arguments"][0]
    assert "docs/analyst.md" in body["error"]["hint"]


def test_workspaces_list_is_empty_and_cannot_be_saved(session, site):
    assert session.workspaces() == {"s": []}
    url, auth = site
    sid = session.sessions()["s"].get_id()
    answer = requests.post(f"{url}/ws/datashield/session/{sid}/workspaces", params={"save": "w"}, auth=auth,
                           timeout=10)
    body = _opal_error(answer, 404)
    assert body["status"] == "not_supported" and "does not save workspaces" in body["arguments"][0]
    session.workspace_save("w")  # the client sends it without failing on errors: no crash, nothing saved
    assert session.workspaces() == {"s": []}
    answer = requests.put(f"{url}/ws/datashield/session/{sid}/workspace/w", auth=auth, timeout=10)
    assert "no workspace" in _opal_error(answer, 404)["arguments"][0]


@pytest.mark.parametrize("call, what", [
    (lambda ds: ds.taxonomies(), "taxonomies"),
    (lambda ds: ds.resources(), "projects"),
    (lambda ds: ds.search_variables("age"), "search variables"),
])
def test_unserved_listings_fail_with_opal_not_supported(session, call, what):
    with pytest.raises(HTTPError) as exc:
        call(session)
    body = _opal_error(exc.value.error, 404)
    assert body["status"] == "not_supported" and what in body["arguments"][0] and "see docs/analyst.md" in \
        body["error"]["hint"]


def test_resources_are_not_supported(session, site):
    url, auth = site
    conn = session.conns[0]
    assert conn.has_resource("P.r") is False  # Opal's client reads a non-200 as "no such resource"
    with pytest.raises(DSError):
        session.assign_resource("R", resource="P.r")
    body = _opal_error(session.get_errors()["s"].get_error(), 404)
    assert "does not serve Opal resources" in body["arguments"][0]
    for path in ("/ws/project/P/resources", "/ws/project/P/resource/r"):
        assert _opal_error(requests.get(url + path, auth=auth, timeout=10), 404)["status"] == "not_supported"
