"""What an analyst or an administrator reads when something is wrong: one line naming the site, the
URL and what to do, for a site that is down, a site that restarted and a URL that is not a dsfed
site, and a site that connects but does not read the request (real processes and sockets on loopback)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from dsfed_client import FederatedCallError, LoginBuilder, SiteUnavailable
from dsfed_client.transport import HttpTransport
from dsfed_core.errors import NotFound, SiteError
from dsfed_server.cli import _bind
from dsfed_server.launch import LocalSites
from sitekit import make_sites


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _one_line(err: Exception) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


def test_site_down_is_one_line_with_url_and_what_to_do():
    url = f"http://127.0.0.1:{_free_port()}"
    builder = LoginBuilder()
    builder.append("site1", url, user="analyst", password="x" * 12, read_timeout=5)
    with pytest.raises(FederatedCallError) as caught:
        builder.login()
    err = caught.value.failures["site1"]
    assert isinstance(err, SiteUnavailable)
    assert _one_line(err) == (
        f"site 'site1', function openSession: cannot reach {url}: connection refused (no server listens there) "
        "-- check that the site server is running and the URL is right, or ask the site's administrator")


def test_a_site_that_connects_but_reads_nothing_is_told_apart_from_one_down():
    """A listening socket nobody reads (as a site busy beyond the connect timeout): the request's
    64 MB body fills the socket buffers, sending stalls, and the error says so, with the timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # the kernel completes the connection; no process accepts or reads it
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        transport = HttpTransport("site1", url, connect_timeout=1, read_timeout=5)
        started = time.monotonic()
        with pytest.raises(SiteUnavailable) as caught:
            transport.request("POST", "/sessions", encoded=b"0" * (64 << 20), function="assignTable")
        assert time.monotonic() - started < 5
    assert _one_line(caught.value) == (
        f"site 'site1', function assignTable: cannot reach {url}: the site took no request within 1 s "
        "(connected, but it did not read the request: busy, or stalled) -- check that the site server is "
        "running and the URL is right, or ask the site's administrator")


class _NotDsfed(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        body = b"<html><body>Not Found</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_url_that_is_not_a_dsfed_site():
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotDsfed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        builder = LoginBuilder()
        builder.append("site1", url, user="analyst", password="x" * 12, read_timeout=5)
        with pytest.raises(FederatedCallError) as caught:
            builder.login()
    finally:
        server.shutdown()
        server.server_close()
    err = caught.value.failures["site1"]
    assert type(err) is SiteError
    assert _one_line(err) == (
        f"site 'site1', function openSession: {url} answered HTTP 404 without dsfed's JSON: not a dsfed site -- "
        "check the URL: a dsfed site's address is the one its administrator gives (it serves /v1/health)")


def test_restarted_site_says_so(tmp_path: Path):
    provisioned, _ = make_sites(tmp_path, {"site1": pd.DataFrame({"x": range(20)})})
    site = provisioned["site1"]
    port = _free_port()
    text = site.config.read_text()
    site.config.write_text(text.replace("port = 0\n", f"port = {port}\n", 1))
    cred = site.credentials["analyst"]
    with LocalSites([site], tmp_path / "proc") as sites:
        builder = LoginBuilder()
        builder.append("site1", sites.urls["site1"], user=cred.user, password=cred.password, read_timeout=10)
        session = builder.login()
        session.assign_table("D", "P.t")
        process = sites.processes["site1"]
        process.stop()
        process.start()
        process.wait_ready(time.monotonic() + 60)
        assert process.url == f"http://127.0.0.1:{port}"
        with pytest.raises(FederatedCallError) as caught:
            session.aggregate_expr("meanDS(D$x)")
    err = caught.value.failures["site1"]
    assert isinstance(err, NotFound)
    message = _one_line(err)
    assert message.startswith("site 'site1', function meanDS: no session ")
    assert message.endswith(": the site restarted since it was opened (sessions do not survive a restart) "
                            "or the id is not one of its sessions -- open a new session")


def test_port_in_use_is_one_line(tmp_path: Path):
    provisioned, _ = make_sites(tmp_path, {"site1": pd.DataFrame({"x": range(20)})})
    taken = _bind("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        result = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "run", str(provisioned["site1"].config),
                                 "--port", str(port)], capture_output=True, text=True, timeout=60)
    finally:
        taken.close()
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("dsfed-server:")]  # not R's log
    assert errors == [(
        f"dsfed-server: cannot listen on 127.0.0.1:{port}: the address is in use (another server, or this "
        "site already running); stop it or choose another port (--port, or [listen] port)")]
    assert "Traceback" not in result.stderr


def test_sites_file_typo_is_refused(tmp_path: Path):
    sites_file = tmp_path / "sites.json"
    sites_file.write_text(json.dumps({"sites": {"site1": {"url": "http://127.0.0.1:9", "user": "analyst",
                                                          "pasword": "x" * 12}}, "table": "P.t"}))
    result = subprocess.run([sys.executable, "-m", "dsfed_client.cli", "report", "--sites", str(sites_file),
                             "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert (f"{sites_file}: site 'site1': unknown key 'pasword' (did you mean 'password'?); "
            "allowed: url, user, password, token") in result.stderr
    assert not (tmp_path / "r.html").exists()
