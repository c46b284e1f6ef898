"""The SQLite files a site keeps its disclosure state in (privacy ledger, release history):
write-ahead log, every commit synced to disk, connections kept open for the next operation."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (each statement its own transaction unless one is begun), usable from any
    thread that holds it alone (:class:`Connections` hands each to one operation at a time)."""
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


class Connections:
    """Connections to the SQLite file at ``path``, each lent to one operation at a time and up to :attr:`KEPT` kept
    open for the next: opening one (and setting its journal mode) took about a tenth of a pooled release's time at
    a site."""

    KEPT = 4  # idle connections kept (each holds three files open: the database, its log and its shared memory)

    def __init__(self, path: Path) -> None:
        self.path = path
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode for the block: each statement reads what was committed when it began."""
        db = self._take()
        try:
            yield db
        finally:
            self._give(db)

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """A connection in one ``BEGIN IMMEDIATE`` transaction (the write lock taken at once, so no other writer's
        commit comes between its reads and its writes): committed at the block's end, rolled back where it
        raises."""
        db = self._take()
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
            self._give(db)

    def close(self) -> None:
        """Close the idle connections (those lent out are closed when given back)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        for db in idle:
            db.close()

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return connect(self.path)

    def _give(self, db: sqlite3.Connection) -> None:
        if db.in_transaction:  # a transaction begun and left (the block raised before it ended): not lent again
            db.close()
            return
        with self._lock:
            if not self._closed and len(self._idle) < self.KEPT:
                self._idle.append(db)
                return
        db.close()


def create(path: str | Path, schema: str) -> Path:
    """Make the file's folder and its tables (idempotent: the schema uses IF NOT EXISTS)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    db = connect(path)
    try:
        db.executescript(schema)
    finally:
        db.close()
    return path


def append_only(tables: tuple[str, ...], what: str) -> str:
    """SQL triggers that abort any update or delete of a row of ``tables`` (``what``: the file, named in the
    error)."""
    return "".join(f"CREATE TRIGGER IF NOT EXISTS {t}_append_only_{k} BEFORE {verb} ON {t}\n"
                   f"    BEGIN SELECT RAISE(ABORT, '{what} is append-only'); END;\n"
                   for t in tables for k, verb in (("u", "UPDATE"), ("d", "DELETE")))
