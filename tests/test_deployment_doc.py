"""docs/deployment.md states real things: its systemd unit's ExecStart command line starts a site
(the documented command with only the config path swapped for a test site's), the documented
health check answers as documented, and the access log's documented line has the shape the site
writes."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import requests

from sitekit import ACCESS_LINE, ROOT, make_sites

DOC = (ROOT / "docs" / "deployment.md").read_text()


def _block(language: str, containing: str) -> str:
    return next(b for b in re.findall(rf"```{language}\n(.*?)```", DOC, re.S) if containing in b)


def test_systemd_exec_start_runs_a_site_whose_health_check_answers_as_documented(tmp_path: Path):
    exec_start = re.search(r"^ExecStart=(.+)$", _block("ini", "[Service]"), re.M).group(1)
    argv = shlex.split(exec_start)
    assert Path(argv[0]).name == "dsfed-server" and argv[1] == "run"
    documented_config = argv[2]
    assert re.search(rf"^/opt/dsfed/venv/bin/dsfed-server check {re.escape(documented_config)}", DOC, re.M)

    provisioned, _ = make_sites(tmp_path, {"site1": pd.DataFrame({"age": range(30, 60)})})
    ready = tmp_path / "ready.json"
    command = [sys.executable, "-m", "dsfed_server.cli",
               *[str(provisioned["site1"].config) if a == documented_config else a for a in argv[1:]],
               "--port", "0", "--ready-file", str(ready)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        url = json.loads(ready.read_text())["url"]

        check = re.search(r"^curl -fsS http://127\.0\.0\.1:\d+(/\S+)\n(\{.*\})$", DOC, re.M)
        health = requests.get(url + check.group(1), timeout=10)
        assert health.status_code == 200
        documented = json.loads(check.group(2))
        assert set(health.json()) == set(documented) and health.json()["status"] == documented["status"]
        assert health.json()["site"] == "site1"
    finally:
        process.terminate()
        process.wait(10)

    documented_line = re.search(r"^\d{4}-\d\d-\d\dT.*ms$", DOC, re.M).group(0)
    written = provisioned["site1"].audit_log.with_name("site1-access.log").read_text().splitlines()
    assert ACCESS_LINE.match(documented_line) and ACCESS_LINE.match(written[-1])
    assert written[-1].split()[2:5] == ["-", '"GET', '/v1/health"']
