"""The audit log: every call recorded, refused ones included. The keyed chain and its sealed head
catch an edit, a deletion, a truncation and a rewrite with recomputed hashes (each done here as an
attacker without the site secret would do it), at verify time and when the site starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsfed_client import FederatedCallError
import hashlib
import os
import secrets
from pathlib import Path

import pandas as pd
import requests

from dsfed_server.audit import HEAD_HEADER, AuditChainError, AuditLog, audit_key, head_path, verify
from dsfed_server.config import read_secret
from dsfed_server.service import SiteService
from conftest import inprocess_builder
from sitekit import make_sites


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
        ("openSession", "ok"), ("assignTable", "ok"), ("meanDS", "ok"), ("table2DDS", "refused"),
        ("closeSession", "ok"),
    ]
    refused = mine[3]
    assert refused["rule"] == "disclosure.q_threshold" and refused["user"] == "analyst"
    assert all(part in refused["call"] for part in ("'call': 'table2DDS'", "['D', 'menostat']", "['D', 'y']"))
    site = gbsg2_provisioned["site2"]
    assert verify(site.audit_log, audit_key(read_secret(site.secret))).ok



KEY = audit_key(secrets.token_bytes(32))


def _log(tmp_path: Path, n: int = 6) -> Path:
    log = AuditLog(tmp_path / "audit.jsonl", "s", KEY)
    for i in range(n):
        log.record(user="u", session="x", function=f"f{i}", kind="aggregate", call="", outcome="ok", rule=None,
                   message="")
    return log.path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def _rehash_unkeyed(records: list[dict]) -> list[dict]:
    """The rewrite an attacker without the key can do: renumber, relink, recompute SHA-256 hashes."""
    prev, out = "0" * 64, []
    for seq, record in enumerate(records, start=1):
        record = {**record, "seq": seq, "prev": prev}
        record.pop("mac")
        body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        record["mac"] = prev = hashlib.sha256(body.encode()).hexdigest()
        out.append(record)
    return out


def test_an_intact_chain_verifies_and_a_restart_continues_it(tmp_path):
    path = _log(tmp_path, 3)
    log = AuditLog(path, "s", KEY)  # a restarted server appends to the same chain
    record = log.record(user="u", session=None, function="g", kind="aggregate", call="", outcome="ok", rule=None,
                        message="")
    report = verify(path, KEY, expect=(f"2:{_lines(path)[1]['mac'][:16]}",))
    assert report.ok and report.records == 4 and log.head == f"4:{record['mac']}"


def test_an_edited_record_is_detected(tmp_path):
    path = _log(tmp_path)
    records = _lines(path)
    records[2]["outcome"] = "refused"
    _write(path, records)
    report = verify(path, KEY)
    assert (report.ok, report.bad_line) == (False, 3) and "edited" in report.reason


def test_a_deleted_record_is_detected(tmp_path):
    path = _log(tmp_path)
    records = _lines(path)
    del records[1]
    _write(path, records)
    report = verify(path, KEY)
    assert (report.ok, report.bad_line) == (False, 2) and "removed" in report.reason


def test_truncation_is_detected_by_verify_and_at_start(tmp_path):
    """The last half cut off in place: every remaining record is intact, the sealed head is not
    reached. The site refuses to start on it (as it does on a log whose head file was deleted)."""
    path = _log(tmp_path, 8)
    _write(path, _lines(path)[:4])
    report = verify(path, KEY)
    assert not report.ok and "cut off" in report.reason and report.records == 4
    with pytest.raises(AuditChainError, match="does not end at its sealed head"):
        AuditLog(path, "s", KEY)
    head_path(path).unlink()  # and the head deleted too
    assert "missing" in verify(path, KEY).reason
    with pytest.raises(AuditChainError, match="missing"):
        AuditLog(path, "s", KEY)
    path.write_text("")  # everything removed, the head left
    _log(tmp_path / "other", 2)
    os.replace(head_path(tmp_path / "other" / "audit.jsonl"), head_path(path))
    assert not verify(path, KEY).ok


def test_a_rewrite_with_recomputed_hashes_is_detected(tmp_path):
    """Every failed call removed, the chain renumbered and relinked with fresh SHA-256 hashes and a
    head written to match: without the key, no record's MAC is right."""
    path = _log(tmp_path)
    records = [r for r in _lines(path) if r["function"] != "f3"]
    rewritten = _rehash_unkeyed(records)
    _write(path, rewritten)
    last = rewritten[-1]
    head_path(path).write_text(json.dumps({"seq": last["seq"], "mac": last["mac"], "tag": "0" * 64}))
    report = verify(path, KEY)
    assert (report.ok, report.bad_line) == (False, 1) and "without this site's key" in report.reason


def test_a_rollback_to_an_earlier_consistent_state_is_caught_by_a_head_copy(tmp_path):
    """Log and head copied at record 3, the site goes on to 6, then both files are put back: the
    chain is consistent (the key was never needed), but a head copy an analyst saw at record 5
    names a record the log no longer holds."""
    path = _log(tmp_path, 3)
    saved = path.read_bytes(), head_path(path).read_bytes()
    log = AuditLog(path, "s", KEY)
    for i in range(3):
        log.record(user="u", session="x", function=f"g{i}", kind="aggregate", call="", outcome="ok", rule=None,
                   message="")
        if i == 1:
            seen = log.head
    path.write_bytes(saved[0])
    head_path(path).write_bytes(saved[1])
    assert verify(path, KEY).ok
    report = verify(path, KEY, expect=(seen,))
    assert not report.ok and "rolled back" in report.reason


def test_the_head_travels_with_every_response_and_governance_verifies_at_the_site(tmp_path, gbsg2_provisioned,
                                                                                    gbsg2_http):
    """An analyst's responses carry the chain's head; the governance route verifies the chain at
    the site with its key, and the CLIs (server and client) verify the log with the secret file,
    detecting an edit (exit status 1, the line named)."""
    site, url = gbsg2_provisioned["site3"], gbsg2_http.urls["site3"]
    a, g = site.credentials["analyst"], site.credentials["governance"]
    response = requests.get(f"{url}/v1/tables", auth=(a.user, a.password), timeout=10)
    seq, mac = response.headers[HEAD_HEADER].split(":")
    assert _lines(site.audit_log)[int(seq) - 1]["mac"] == mac
    assert requests.get(f"{url}/v1/audit/verify", auth=(a.user, a.password), timeout=10).status_code == 403
    checked = requests.get(f"{url}/v1/audit/verify", auth=(g.user, g.password), timeout=10).json()
    assert checked["ok"] and checked["records"] >= int(seq)
    assert requests.get(f"{url}/v1/health", timeout=10).headers.get(HEAD_HEADER) is None
    copy = tmp_path / "copy.jsonl"
    records = _lines(site.audit_log)
    records[0]["user"] = "someone else"
    _write(copy, records)
    head_path(copy).write_bytes(head_path(site.audit_log).read_bytes())
    for command in ([sys.executable, "-m", "dsfed_server.cli", "audit", "verify"],
                    [sys.executable, "-m", "dsfed_client.cli", "audit", "verify"]):
        ok = subprocess.run([*command, str(site.audit_log), "--secret", str(site.secret), "--expect", f"{seq}:{mac}"],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0 and "intact" in ok.stdout, ok.stderr
        bad = subprocess.run([*command, str(copy), "--secret", str(site.secret)], capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode == 1 and "line 1" in bad.stdout


def test_a_site_does_not_start_on_a_cut_log(tmp_path):
    """SiteService refuses to start (naming the file and what to do) on a log cut short."""
    provisioned, services = make_sites(tmp_path, {"s1": pd.DataFrame({"x": range(20)})})
    site = provisioned["s1"]
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
    _write(site.audit_log, _lines(site.audit_log)[:1])
    with pytest.raises(AuditChainError, match="audit verify"):
        SiteService.from_config_file(site.config)
    result = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "check", str(site.config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "sealed head" in result.stderr
