"""The SQLite files a site keeps its disclosure state in (privacy ledger, release history):
one connection per operation, write-ahead log, every commit synced to disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def create(path: str | Path, schema: str) -> Path:
    """Make the file's folder and its tables (idempotent: the schema uses IF NOT EXISTS)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with connect(path) as db:
        db.executescript(schema)
    return path


def append_only(tables: tuple[str, ...], what: str) -> str:
    """SQL triggers that abort any update or delete of a row of ``tables`` (``what``: the file, named in the
    error)."""
    return "".join(f"CREATE TRIGGER IF NOT EXISTS {t}_append_only_{k} BEFORE {verb} ON {t}\n"
                   f"    BEGIN SELECT RAISE(ABORT, '{what} is append-only'); END;\n"
                   for t in tables for k, verb in (("u", "UPDATE"), ("d", "DELETE")))
