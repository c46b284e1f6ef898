"""The audit log: append-only JSON lines, each carrying the hash of the one before.

One record per call, refused and failed calls included::

    {"seq": 7, "time": "2026-11-22T10:31:02.123Z", "site": "site1", "user": "analyst",
     "session": "...", "function": "meanDS", "kind": "aggregate", "call": "meanDS(D$age)",
     "outcome": "refused", "rule": "disclosure.q_threshold", "message": "...",
     "prev": "<sha256 of the previous record's line>", "hash": "<sha256 of this record>"}

``hash`` is the SHA-256 of the record's canonical JSON without ``hash``; since
that JSON includes ``prev``, editing, deleting or reordering any line breaks
the chain from there on, and :func:`verify` reports the first broken line.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

GENESIS = "0" * 64


def _digest(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    records: int
    bad_line: int | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"audit chain intact: {self.records} records"
        return f"audit chain broken at line {self.bad_line}: {self.reason}"


def verify(path: str | Path) -> ChainReport:
    """Check every line's hash and its link to the previous line."""
    prev = GENESIS
    count = 0
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return ChainReport(False, count, number, "not valid JSON")
            if not isinstance(record, dict) or "hash" not in record or "prev" not in record:
                return ChainReport(False, count, number, "record lacks 'prev' or 'hash'")
            if record["prev"] != prev:
                return ChainReport(False, count, number, "does not link to the previous record (line removed, inserted or reordered)")
            if _digest(record) != record["hash"]:
                return ChainReport(False, count, number, "content does not match its hash (record edited)")
            prev = record["hash"]
            count += 1
    return ChainReport(True, count)


class AuditLog:
    """Appends hash-chained records; safe to share between threads of one process."""

    def __init__(self, path: str | Path, site: str) -> None:
        self.path = Path(path)
        self.site = site
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._prev, self._seq = self._tail()

    def _tail(self) -> tuple[str, int]:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return GENESIS, 0
        with open(self.path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            last = fh.read().splitlines()[-1]
        record = json.loads(last)
        return record["hash"], int(record["seq"])

    def record(self, **fields: Any) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            record = {
                "seq": self._seq,
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "site": self.site,
                **fields,
                "prev": self._prev,
            }
            record = json.loads(json.dumps(record, default=str))
            record["hash"] = _digest(record)
            line = json.dumps(record, sort_keys=True, ensure_ascii=True, default=str)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            self._prev = record["hash"]
            return record

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
