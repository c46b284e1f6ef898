"""The access log: one line per HTTP request with its status and authenticated user,
written by a real server on loopback, and never a password, token, header, query string or body."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd
import requests

from dsfed_server.launch import LocalSites
from sitekit import ACCESS_LINE, make_sites, serve


def _lines(path: Path) -> list[tuple[str, str, str, int]]:
    """(user, method, path, status) of each line; every line must have the documented shape, from loopback."""
    out = []
    for line in path.read_text().splitlines():
        match = ACCESS_LINE.match(line)
        assert match and match["address"] == "127.0.0.1", line
        out.append((match["user"], match["method"], match["path"], int(match["status"])))
    return out


def test_each_request_is_one_line_with_user_and_status_and_no_credentials(tmp_path: Path):
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"age": range(30, 60)})})
    site, service = provisioned["s"], services["s"]
    analyst = site.credentials["analyst"]
    marker = "MARKERinTHEbody"
    with serve(service) as url:
        assert requests.get(f"{url}/v1/health", timeout=10).status_code == 200
        basic = (analyst.user, analyst.password)
        sid = requests.post(f"{url}/v1/sessions", auth=basic, timeout=10).json()["session"]
        refused = requests.post(f"{url}/v1/sessions/{sid}/aggregate", json={"expr": f"meanDS({marker}$age)"},
                                headers={"Authorization": f"Bearer {analyst.token}"}, timeout=10)
        assert refused.status_code == 404
        wrong = requests.get(f"{url}/v1/whoami", auth=(analyst.user, "not-the-password-123"), timeout=10)
        assert wrong.status_code == 401
        opal = requests.post(f"{url}/ws/datashield/sessions", params={"token": analyst.token},
                             headers={"X-Opal-Auth": analyst.token}, timeout=10)
        assert opal.status_code == 201

    log = site.audit_log.with_name("s-access.log")  # the default: beside the audit log
    assert _lines(log) == [
        ("-", "GET", "/v1/health", 200),
        ("analyst", "POST", "/v1/sessions", 201),
        ("analyst", "POST", f"/v1/sessions/{sid}/aggregate", 404),
        ("-", "GET", "/v1/whoami", 401),
        ("analyst", "POST", "/ws/datashield/sessions", 201),
    ]
    text = log.read_text()
    credentials = (analyst.password, analyst.token, "not-the-password-123",
                   base64.b64encode(f"{analyst.user}:{analyst.password}".encode()).decode())
    for secret in (*credentials, marker, "Authorization", "Bearer", "token="):
        assert secret not in text
    assert service.audit.path.read_text().count("\n") == 4  # the audit log has its own records (no /v1/health)


def test_access_log_to_standard_error(tmp_path: Path):
    provisioned, _ = make_sites(tmp_path, {"s": pd.DataFrame({"age": range(30, 60)})})
    site = provisioned["s"]
    site.config.write_text(site.config.read_text().replace("[listen]", 'access_log = "-"\n\n[listen]', 1))
    with LocalSites([site], tmp_path / "proc") as sites:
        url = sites.urls["s"]
        assert requests.get(f"{url}/v1/tables", auth=(site.credentials["analyst"].user,
                                                       site.credentials["analyst"].password), timeout=10).ok
        sites.stop()
        output = sites.processes["s"].log_file.read_text()
    matches = [m for m in map(ACCESS_LINE.match, output.splitlines()) if m]
    assert [m.group("address", "user", "method", "path", "status") for m in matches] == [
        ("127.0.0.1", "analyst", "GET", "/v1/tables", "200")]
    assert site.credentials["analyst"].password not in output
    assert not site.audit_log.with_name("s-access.log").exists()
