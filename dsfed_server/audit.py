"""The audit log: append-only JSON lines in a keyed hash chain, its head sealed outside the log.

One record per call, refused and failed calls included::

    {"seq": 7, "time": "2026-11-22T10:31:02.123Z", "site": "site1", "user": "analyst",
     "session": "...", "function": "meanDS", "kind": "aggregate", "call": "meanDS(D$age)",
     "outcome": "refused", "rule": "disclosure.q_threshold", "message": "...",
     "prev": "<mac of the previous record>", "mac": "<HMAC-SHA256 of this record>"}

``mac`` is an HMAC-SHA256 of the record's canonical JSON (without ``mac``) under a key derived
from the site secret (:func:`audit_key`). Since that JSON includes ``seq`` and ``prev``, editing,
deleting, inserting or reordering a record breaks the chain from there on, and recomputing the
chain needs the key. The chain's head (last ``seq`` and ``mac``) is sealed with the same key in a
file beside the log (``<log>.head``, replaced atomically after every record), so cutting records
off the end is detected too; a site refuses to start on a log that does not end at its head. The
head is also sent in every authenticated response (:data:`HEAD_HEADER`), so analysts and
governance hold copies outside the site: a copy names a record the log must still hold.

What the key does not stop: someone who holds the site secret (and can write the files) can
rewrite the whole log and its head. Only head copies held elsewhere (:func:`verify`'s
``expect``) reveal such a rewrite of the records before them.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsfed_server.timestamps import utc_now

GENESIS = "0" * 64
HEAD_HEADER = "X-Dsfed-Audit-Head"  # "<seq>:<mac>" of the last record, in every authenticated response


def audit_key(secret: bytes) -> bytes:
    """The chain's key, derived from the site secret (never the secret itself)."""
    return hmac.new(secret, b"dsfed audit chain v1", hashlib.sha256).digest()


def _mac(key: bytes, record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "mac"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()


def _head_tag(key: bytes, seq: int, mac: str) -> str:
    return hmac.new(key, f"head\0{seq}\0{mac}".encode(), hashlib.sha256).hexdigest()


def head_path(log: Path) -> Path:
    return log.with_name(log.name + ".head")


class AuditChainError(Exception):
    """The audit log does not end at its sealed head: records were cut off, or a file replaced."""


@dataclass(frozen=True)
class ChainReport:
    ok: bool
    records: int
    bad_line: int | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.ok:
            return f"audit chain intact: {self.records} records, ending at its sealed head"
        where = f" at line {self.bad_line}" if self.bad_line is not None else ""
        return f"audit chain broken{where}: {self.reason}"


def _read_head(path: Path, key: bytes) -> tuple[int, str] | str:
    """The sealed head (seq, mac), or why it cannot be used."""
    try:
        head = json.loads(path.read_text())
        seq, mac, tag = int(head["seq"]), str(head["mac"]), str(head["tag"])
    except FileNotFoundError:
        return f"the sealed head {path.name} is missing"
    except (OSError, ValueError, KeyError, TypeError):
        return f"the sealed head {path.name} is unreadable"
    if not hmac.compare_digest(tag, _head_tag(key, seq, mac)):
        return f"the sealed head {path.name} was not sealed with this site's key"
    return seq, mac


def _parse_expect(expect: str) -> tuple[int, str]:
    seq, sep, mac = expect.partition(":")
    if not (sep and seq.isdigit() and len(mac) >= 16 and all(c in "0123456789abcdef" for c in mac)):
        raise ValueError(f"a head copy is '<seq>:<mac>' as the {HEAD_HEADER} header gives it, not {expect!r}")
    return int(seq), mac


def verify(path: str | Path, key: bytes, *, expect: tuple[str, ...] = ()) -> ChainReport:
    """Check every record's MAC, sequence number and link to the one before; that the log ends at
    its sealed head; and that it holds every head copy in ``expect`` (``"<seq>:<mac>"`` values of
    :data:`HEAD_HEADER` seen earlier, a prefix of the MAC of at least 16 digits suffices)."""
    path = Path(path)
    copies = [_parse_expect(e) for e in expect]
    macs: dict[int, str] = {}
    prev, count = GENESIS, 0
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                return ChainReport(False, count, number, "not valid JSON")
            if not isinstance(record, dict) or not {"seq", "prev", "mac"} <= record.keys():
                return ChainReport(False, count, number, "record lacks 'seq', 'prev' or 'mac'")
            if not hmac.compare_digest(str(record["mac"]), _mac(key, record)):
                return ChainReport(False, count, number,
                                   "content does not match its MAC (record edited, or written without this site's key)")
            if record["prev"] != prev or record["seq"] != count + 1:
                return ChainReport(False, count, number,
                                   "does not follow the previous record (records removed, inserted or reordered)")
            prev = macs[count + 1] = record["mac"]
            count += 1
    head = _read_head(head_path(path), key)
    if isinstance(head, str):
        if count or head_path(path).exists():
            return ChainReport(False, count, None, head)
    elif head != (count, prev):
        return ChainReport(False, count, None, f"the log ends at record {count} but its sealed head is record "
                                               f"{head[0]}: records were cut off the end, or a file replaced")
    for seq, mac in copies:
        if not macs.get(seq, "").startswith(mac):
            return ChainReport(False, count, None, f"the head copy {seq}:{mac[:16]}... is not in the log: "
                                                   "the log was rewritten or rolled back since that copy")
    return ChainReport(True, count)


def verify_file(path: str | Path, secret_file: str | Path, *, expect: tuple[str, ...] = ()) -> ChainReport:
    """:func:`verify` with the key derived from the site secret file (the CLIs and the demo)."""
    from dsfed_server.config import read_secret  # noqa: PLC0415  (config reads the site's files)

    return verify(path, audit_key(read_secret(Path(secret_file))), expect=expect)


class AuditLog:
    """Appends records to the keyed chain and seals its head. Safe to share between threads, and
    between processes writing the same site's log (the site server and a tool in the same run):
    each append holds an exclusive lock on the log and continues from the record last written,
    by whichever writer. Opening a log that does not end at its sealed head raises
    :class:`AuditChainError`."""

    def __init__(self, path: str | Path, site: str, key: bytes) -> None:
        self.path = Path(path)
        self.site = site
        self._key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with open(self.path, "ab") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            self._size = os.fstat(fh.fileno()).st_size
            self._seq, self._prev = self._tail(fh, check_head=True)

    @property
    def head(self) -> str:
        """The chain's head as :data:`HEAD_HEADER` sends it: ``"<seq>:<mac>"`` (as this writer last saw it)."""
        return f"{self._seq}:{self._prev}"

    def _tail(self, fh: Any, *, check_head: bool) -> tuple[int, str]:
        """The last record's (seq, mac), checked against its MAC and (at start) the sealed head."""
        size = os.fstat(fh.fileno()).st_size
        if size == 0 and not head_path(self.path).exists():
            return 0, GENESIS
        tail: tuple[int, str] | None = None
        with open(self.path, "rb") as reader:
            reader.seek(max(0, size - (1 << 20)))  # a record is far shorter than 1 MiB
            lines = reader.read(size).splitlines()
        try:
            last = json.loads(lines[-1])
            if hmac.compare_digest(str(last["mac"]), _mac(self._key, last)):
                tail = int(last["seq"]), str(last["mac"])
        except (IndexError, ValueError, KeyError, TypeError):
            pass
        head = _read_head(head_path(self.path), self._key) if check_head else tail
        if tail is None or isinstance(head, str) or tail != head:
            reason = head if isinstance(head, str) else (
                "its last record is missing or not sealed with this site's key" if tail is None else
                f"it ends at record {tail[0]}, its sealed head is record {head[0]}")  # type: ignore[index]
            raise AuditChainError(
                f"{self.path}: the audit log does not end at its sealed head ({reason}). Run "
                f"'dsfed-server audit verify {self.path} --secret <site secret>', keep the log and "
                f"{head_path(self.path).name} as evidence, move both aside and start again")
        return tail

    def record(self, **fields: Any) -> dict[str, Any]:
        with self._lock, open(self.path, "ab") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
            if os.fstat(fh.fileno()).st_size != self._size:  # another writer appended since
                self._seq, self._prev = self._tail(fh, check_head=False)
            record = {
                "seq": self._seq + 1,
                "time": utc_now(),
                "site": self.site,
                **fields,
                "prev": self._prev,
            }
            record = json.loads(json.dumps(record, default=str))
            record["mac"] = _mac(self._key, record)
            line = json.dumps(record, sort_keys=True, ensure_ascii=True, default=str)
            fh.write((line + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
            self._seal(record["seq"], record["mac"])
            self._seq, self._prev = record["seq"], record["mac"]
            self._size = os.fstat(fh.fileno()).st_size
            return record

    def _seal(self, seq: int, mac: str) -> None:
        """Replace the sealed head atomically (write, fsync, rename)."""
        target = head_path(self.path)
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"seq": seq, "mac": mac, "tag": _head_tag(self._key, seq, mac)}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)

    def verify(self) -> ChainReport:
        """:func:`verify` of this log with its key."""
        return verify(self.path, self._key)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
