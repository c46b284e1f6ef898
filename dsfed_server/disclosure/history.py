"""What a site has released about each of its tables, for every analyst, across restarts.

The release gate (:mod:`dsfed_server.disclosure.gate`) and the subset rules
(:mod:`dsfed_server.disclosure.differencing`) decide a new release against everything released
before on the same table: the **cuts** released on each column (every bin edge, group break,
threshold, reference edge and subset condition, mapped to the column by
:mod:`dsfed_server.disclosure.provenance`), the **row sets** of every subset made from it and of every
cell released from it (a pooled cell: this site's records of it, with its pooled count), and the
**functions** summed exactly over each row set (:mod:`dsfed_server.disclosure.equations`).
Kept per site table -- not per analyst, not per session -- in the site's ledger database
(``[site] ledger``), so neither a second account, nor a new session, nor a restart starts a fresh
history. Append-only: SQLite triggers refuse UPDATE and DELETE, as in the privacy ledger.

One server process owns a ledger file; within it, :attr:`History.lock` serialises a decision and
its recording, so two concurrent calls cannot both pass against the same old history.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np

from dsfed_server.disclosure.differencing import PooledCell
from dsfed_server.disclosure.equations import Summed
from dsfed_server.disclosure.gate import Cut
from dsfed_server.disclosure.store import connect, create
from dsfed_server.timestamps import utc_now

_SCHEMA = """
CREATE TABLE IF NOT EXISTS released_cuts (
    table_key TEXT NOT NULL,
    column_name TEXT NOT NULL,
    value REAL NOT NULL,
    inclusive INTEGER NOT NULL,
    mode TEXT NOT NULL,
    analyst TEXT NOT NULL,
    function TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, column_name, value, inclusive)
);
CREATE TABLE IF NOT EXISTS subset_rows (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    rows BLOB NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, rows)
);
CREATE TABLE IF NOT EXISTS released_sums (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    function TEXT NOT NULL,
    roots TEXT NOT NULL,
    rows BLOB NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, function, rows)
);
CREATE TABLE IF NOT EXISTS pooled_rows (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    rows BLOB NOT NULL,
    pooled_count INTEGER NOT NULL,
    column_name TEXT NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, rows, pooled_count, column_name)
);
CREATE TABLE IF NOT EXISTS pooled_cells (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    cell_id TEXT NOT NULL,
    rows BLOB NOT NULL,
    pooled_count INTEGER NOT NULL,
    column_name TEXT NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, cell_id)
);
CREATE TRIGGER IF NOT EXISTS pooled_cells_append_only_u BEFORE UPDATE ON pooled_cells
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS pooled_cells_append_only_d BEFORE DELETE ON pooled_cells
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS pooled_rows_append_only_u BEFORE UPDATE ON pooled_rows
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS pooled_rows_append_only_d BEFORE DELETE ON pooled_rows
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_sums_append_only_u BEFORE UPDATE ON released_sums
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_sums_append_only_d BEFORE DELETE ON released_sums
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_cuts_append_only_u BEFORE UPDATE ON released_cuts
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_cuts_append_only_d BEFORE DELETE ON released_cuts
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS subset_rows_append_only_u BEFORE UPDATE ON subset_rows
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS subset_rows_append_only_d BEFORE DELETE ON subset_rows
    BEGIN SELECT RAISE(ABORT, 'the release history is append-only'); END;
"""

_SEPARATOR = "\x1f"  # between the root columns of a summed function


class History:
    """Released cuts per table column, subset row sets and summed functions per table, in SQLite at ``path``."""

    def __init__(self, path: str | Path) -> None:
        self.path = create(path, _SCHEMA)
        self.lock = threading.RLock()

    def _connect(self) -> sqlite3.Connection:
        return connect(self.path)

    # --- cuts ------------------------------------------------------------------------------

    def cuts(self, table: str, column: str) -> list[Cut]:
        """Every cut released on ``table``'s ``column``, in increasing order."""
        with self._connect() as db:
            rows = db.execute("SELECT value, inclusive FROM released_cuts WHERE table_key = ? AND column_name = ?",
                              (table, column)).fetchall()
        return sorted(Cut(float(v), bool(i)) for v, i in rows)

    def record_cuts(self, table: str, column: str, cuts: list[Cut], *, mode: str, analyst: str,
                    function: str) -> None:
        """Add released cuts (a cut already recorded stays as it was)."""
        finite = [c for c in cuts if np.isfinite(c.value)]
        if not finite:
            return
        now = utc_now()
        with self._connect() as db:
            db.executemany("INSERT OR IGNORE INTO released_cuts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(table, column, c.value, int(c.inclusive), mode, analyst, function, now) for c in finite])

    # --- subsets ---------------------------------------------------------------------------

    def row_sets(self, table: str, n_root: int) -> list[np.ndarray]:
        """The row sets of every subset and released cell of ``table``, packed by ``np.packbits`` as
        they are kept (1 bit a record: :func:`~dsfed_server.disclosure.differencing.bits` reads one)."""
        with self._connect() as db:
            rows = db.execute("SELECT rows FROM subset_rows WHERE table_key = ? AND n_root = ?",
                              (table, n_root)).fetchall()
        return [np.frombuffer(row, dtype=np.uint8) for (row,) in rows]

    # --- sums of functions ----------------------------------------------------------------------

    def sums(self, table: str, n_root: int) -> list[Summed]:
        """Every function summed exactly over a row set of ``table``
        (:mod:`~dsfed_server.disclosure.equations`)."""
        with self._connect() as db:
            rows = db.execute("SELECT function, roots, rows FROM released_sums WHERE table_key = ? AND n_root = ?",
                              (table, n_root)).fetchall()
        return [Summed(function, tuple(roots.split(_SEPARATOR)), bytes(packed)) for function, roots, packed in rows]

    def record_sums(self, table: str, n_root: int, sums: list[Summed], *, analyst: str) -> None:
        now = utc_now()
        with self._connect() as db:
            db.executemany("INSERT OR IGNORE INTO released_sums VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, s.function, _SEPARATOR.join(s.roots), s.rows, analyst, now)
                            for s in sums])

    def pooled_row_sets(self, table: str, n_root: int) -> list[PooledCell]:
        """This site's records (packed) of every cell of ``table`` released pooled over sites, each with
        the cell's pooled count, the column it is an interval of and, where the sites gave it one, its
        identity (:class:`~dsfed_server.disclosure.differencing.PooledCell`)."""
        with self._connect() as db:
            rows = db.execute("SELECT rows, pooled_count, column_name, '' FROM pooled_rows WHERE table_key = ? "
                              "AND n_root = ? UNION ALL SELECT rows, pooled_count, column_name, cell_id FROM "
                              "pooled_cells WHERE table_key = ? AND n_root = ?", (table, n_root, table, n_root)
                              ).fetchall()
        return [PooledCell(np.frombuffer(row, dtype=np.uint8), int(count), column, cell_id)
                for row, count, column, cell_id in rows]

    def record_pooled_row_sets(self, table: str, n_root: int, cells: list[PooledCell], *, analyst: str) -> None:
        """Keep this site's records of pooled cells of ``table`` (of ``n_root`` records; boolean or packed),
        each under its identity where it has one."""
        now = utc_now()
        rows = [(c, (np.packbits(c.rows) if c.rows.dtype == bool else c.rows).tobytes()) for c in cells]
        with self._connect() as db:
            db.executemany("INSERT OR IGNORE INTO pooled_rows VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, packed, c.count, c.column, analyst, now) for c, packed in rows
                            if not c.cell_id])
            db.executemany("INSERT OR IGNORE INTO pooled_cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, c.cell_id, packed, c.count, c.column, analyst, now) for c, packed in rows
                            if c.cell_id])

    def record_row_set(self, table: str, rows: np.ndarray, *, analyst: str) -> None:
        with self._connect() as db:
            db.execute("INSERT OR IGNORE INTO subset_rows VALUES (?, ?, ?, ?, ?)",
                       (table, int(rows.size), np.packbits(rows).tobytes(), analyst, utc_now()))
