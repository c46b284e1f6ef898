"""The SQLite files a site keeps its disclosure state in (privacy ledger, release history):
one connection per operation, write-ahead log, every commit synced to disk."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db



@contextmanager
def immediate(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection in one ``BEGIN IMMEDIATE`` transaction (the write lock taken at once, so no other writer's commit
    comes between its reads and its writes): committed at the block's end, rolled back where it raises, closed."""
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield db
    except BaseException:
        if db.in_transaction:
            db.rollback()
        raise
    else:
        db.commit()
    finally:
        db.close()


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
