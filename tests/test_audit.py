"""The audit log: every call recorded, refused ones included; the hash chain catches edits."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsfed_client import FederatedCallError
from dsfed_server.audit import AuditLog, verify
from conftest import inprocess_builder


def test_calls_are_recorded_with_outcome_and_rule(gbsg2_provisioned, gbsg2_services):
    with inprocess_builder(gbsg2_provisioned, gbsg2_services).login() as session:
        session.assign_table("D", "GBSG2.validation")
        session.mean("D$age")
        with pytest.raises(FederatedCallError):
            session.table2d("D$menostat", "D$y")
        sid = session.session_ids["site2"]
    records = [json.loads(line) for line in gbsg2_provisioned["site2"].audit_log.read_text().splitlines()]
    mine = [r for r in records if r["session"] == sid]
    assert [(r["function"], r["outcome"]) for r in mine] == [
        ("openSession", "ok"), ("assignTable", "ok"), ("meanDS", "ok"), ("table2DDS", "refused"), ("closeSession", "ok"),
    ]
    refused = mine[3]
    assert refused["rule"] == "disclosure.q_threshold" and refused["user"] == "analyst"
    assert all(part in refused["call"] for part in ("'call': 'table2DDS'", "['D', 'menostat']", "['D', 'y']"))
    assert verify(gbsg2_provisioned["site2"].audit_log).ok


def _log(tmp_path, n=5):
    log = AuditLog(tmp_path / "audit.jsonl", "s")
    for i in range(n):
        log.record(user="u", session="x", function=f"f{i}", kind="aggregate", call="", outcome="ok", rule=None, message="")
    return log.path


def test_edited_line_is_reported(tmp_path):
    path = _log(tmp_path)
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    record["outcome"] = "refused"
    lines[2] = json.dumps(record, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    report = verify(path)
    assert (report.ok, report.bad_line) == (False, 3) and "edited" in report.reason
    result = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "audit-verify", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "line 3" in result.stdout


def test_removed_line_is_reported(tmp_path):
    path = _log(tmp_path)
    lines = path.read_text().splitlines()
    del lines[1]
    path.write_text("\n".join(lines) + "\n")
    report = verify(path)
    assert (report.ok, report.bad_line) == (False, 2)


def test_chain_continues_across_restarts(tmp_path):
    path = _log(tmp_path, 3)
    log = AuditLog(path, "s")  # a restarted server appends to the same chain
    log.record(user="u", session=None, function="g", kind="aggregate", call="", outcome="ok", rule=None, message="")
    report = verify(path)
    assert report.ok and report.records == 4
