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

A row set is kept as the positions of its records in the table, with the table's number of records then.
A table grows between two runs of the site (an export appended to, a database table inserted into); the
row sets kept at an earlier size apply to the grown table where its first records are still those
records: the site keeps, per table and size, a digest of each served column's values in its first that many
records (:meth:`Catalog.prefix_digests <dsfed_server.catalog.Catalog.prefix_digests>`), and an earlier
row set is read with the new records outside it. Only the columns served both then and now are compared (a
column no longer served releases nothing); a column served now in place of one served then may be that one
renamed, and is refused. Where the earlier records changed (edited, deleted, the table shorter), no earlier
row set says which records it held: every lookup of the table's row sets is refused (:func:`table_changed`),
and with it every release audited against them.

The same records in another order, with or without records added after them, are matched with those of then:
the site keeps each record's place among the records sorted by a key of their served values at each size it
keeps, and which columns it keyed (:class:`~dsfed_server.record_prefixes.RecordKeys`; a column added later is
checked by its digests, not keyed; records equal in every served column are
interchangeable for every release, and keep their order among themselves), sorts as many first records now
the same way, and checks the records so matched against every digest it kept. Row sets are then read at their
records' positions now, and kept at the positions of then (:func:`_now`, :func:`_then`): the history holds
one order per table.

The decision is made once per table and size in a run, from the columns as the catalog would serve them
then; a column the catalog reads from its engine later in the run (a CSV file replaced in place, a
PostgreSQL ``UPDATE``, between the two) is digested again as it is kept (:meth:`History.columns_read`), and
the table refused for the run where its values are not those decided on. The catalog serves its kept copy
for the rest of the run, so each column is digested once more at most, as it is kept.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np

from dsfed_core.errors import DisclosureRefusal
from dsfed_server.disclosure.differencing import PooledCell
from dsfed_server.disclosure.equations import Summed
from dsfed_server.disclosure.gate import Cut
from dsfed_server.disclosure.store import Connections, append_only, create
from dsfed_server.record_prefixes import RecordKeys
from dsfed_server.timestamps import utc_now

# the tables of packed row sets kept per table and size: exact sums' records, thin and exposed pooled cells, and
# the exposed cells' records at 1 of a 0/1 quantity the cells sum
_PACKED_SETS = ("summed_rows", "thin_cells", "exposed_cells", "exposed_parts")
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
CREATE TABLE IF NOT EXISTS pooled_releases (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    first_cell TEXT NOT NULL,
    kind TEXT NOT NULL,
    cell_ids TEXT NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, first_cell)
);
CREATE TABLE IF NOT EXISTS table_records (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    digests TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root)
);
CREATE TABLE IF NOT EXISTS table_orders (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    ranks BLOB NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root)
);
CREATE TABLE IF NOT EXISTS order_columns (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    columns TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root)
);
CREATE TABLE IF NOT EXISTS column_records (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    column_name TEXT NOT NULL,
    digest TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, column_name)
);
CREATE TABLE IF NOT EXISTS peer_tables (
    table_key TEXT NOT NULL PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL
);
""" + "".join(f"""CREATE TABLE IF NOT EXISTS {name} (
    table_key TEXT NOT NULL,
    n_root INTEGER NOT NULL,
    rows BLOB NOT NULL,
    analyst TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (table_key, n_root, rows)
);
""" for name in _PACKED_SETS) + append_only(
    ("order_columns", "table_orders", "column_records", "table_records", "pooled_cells", "pooled_rows",
     "pooled_releases", *_PACKED_SETS, "released_sums", "released_cuts", "subset_rows", "peer_tables"),
    "the release history")

_SEPARATOR = "\x1f"  # between the root columns of a summed function
# the sizes at which a table's row sets were kept (before the sizes' digests were)
_HELD = ("SELECT n_root FROM subset_rows WHERE table_key = ?1 UNION SELECT n_root FROM released_sums WHERE "
         "table_key = ?1 UNION SELECT n_root FROM pooled_rows WHERE table_key = ?1 UNION SELECT n_root FROM "
         "pooled_cells WHERE table_key = ?1")
Sized = dict[int, dict[str, str]]  # per size (increasing), each served column's digest in that many first records


class Digests(Protocol):
    """The site's digests of ``table``'s first records at ``sizes`` (or of its records at positions ``order``,
    in that order), of ``columns`` (default: every served column), each column added to ``keys`` where given
    (:meth:`Catalog.prefix_digests <dsfed_server.catalog.Catalog.prefix_digests>`); None: no table of the
    site."""

    def __call__(self, table: str, sizes: list[int], columns: list[str] | None = None,
                 order: np.ndarray | None = None, keys: RecordKeys | None = None) -> Sized | None: ...


_RESTORE = ("the site's administrator restores the table's earlier records, in their order, and adds new records "
            "after them: a file exported again sorted as the earlier export was; a PostgreSQL table (served in its "
            "physical order, ORDER BY ctid, which an UPDATE, VACUUM FULL or CLUSTER changes) reloaded in that "
            "order, e.g. CREATE TABLE t2 AS SELECT * FROM t ORDER BY the column(s) the earlier load was sorted "
            "by, then renamed to t (docs/governance.md, 'A table that grows')")


def table_changed(table: str, size: int, n: int, digested: bool = True) -> DisclosureRefusal:
    """The refusal of a lookup of ``table``'s row sets (now ``n`` records) when its first ``size`` records are not
    (or, not ``digested`` then, may not be) those its earlier releases were over."""
    how = ("fewer records than then" if size > n else f"other values in its first {size} records than then"
           if digested else f"{n} records, releases having been made at {size} before the site kept digests of them")
    return DisclosureRefusal(
        f"table {table} changed since it was read for releases ({how}: records edited or deleted, or reordered "
        "along with another change, not only added at the end): a release now, beside one then, could single out "
        "the records they differ by, and the site can no longer check the one against the other",
        rule="disclosure.subset_min_difference",
        hint=_RESTORE)


def table_changed_in_run(table: str, columns: list[str]) -> DisclosureRefusal:
    """The refusal of ``table`` whose ``columns``, read later in a run, are not the values its first records
    were checked with earlier in the run."""
    return DisclosureRefusal(
        f"table {table} changed while the site served it ({', '.join(columns)}: other values than when the "
        "site checked its records in this run; a file replaced in place, a database table updated): a release "
        "now, beside one before, could single out the records changed", rule="disclosure.subset_min_difference",
        hint="the site's administrator stops the site before changing its data, and restarts it after; for the "
             f"table to be served again, {_RESTORE}")


def column_renamed(table: str, gone: list[str], new: list[str]) -> DisclosureRefusal:
    """The refusal of ``table`` that serves ``new`` columns it did not when it was read, and no longer ``gone``."""
    return DisclosureRefusal(
        f"table {table} serves {', '.join(new)}, which it did not when it was read for releases, and no longer "
        f"{', '.join(gone)}: the site cannot tell a column renamed from a new one, and a release of the one now, "
        "beside one of the other then, could single out the records whose values differ",
        rule="disclosure.subset_min_difference",
        hint=f"the site's administrator serves {', '.join(gone)} again under the earlier name(s), or the new "
             "column(s) as a table of its own, which starts a history of its own (docs/governance.md, 'A table "
             "that grows')")


def _compared(table: str, size: int, n: int, then: dict[str, str],
              now: dict[str, str]) -> Callable[[], DisclosureRefusal] | None:
    """The refusal of ``table``, whose first ``size`` records had digests ``then`` and have ``now``, if they
    changed: a column served both then and now with other values, or a column served in place of another."""
    if any(now[column] != digest for column, digest in then.items() if column in now):
        return partial(table_changed, table, size, n)
    gone, new = sorted(then.keys() - now.keys()), sorted(now.keys() - then.keys())
    return partial(column_renamed, table, gone, new) if gone and new else None


def _changed(table: str, n: int, held: set[int], recorded: Sized, now: Sized) -> Callable[[], DisclosureRefusal] | None:
    """The refusal of ``table`` at ``n`` records, with digests ``now`` at the sizes ``recorded`` before it, if
    a size the history holds row sets at is not its first records unchanged (:func:`_compared`)."""
    for size in sorted(held | set(recorded)):  # a size held before its digests were kept: only n's own
        if size > n or (size not in recorded and size != n):
            return partial(table_changed, table, size, n, digested=size in recorded or size > n)
        changed = _compared(table, size, n, recorded.get(size, {}), now[size])
        if changed:
            return changed
    return None


def table_grew_little(table: str, size: int, n: int, minimum: int) -> DisclosureRefusal:
    """The refusal of ``table`` grown from ``size`` records, read before, to ``n``: fewer than ``minimum`` more."""
    return DisclosureRefusal(
        f"table {table} holds {n - size} record(s) more than when it was read for releases ({n} against {size}): "
        f"fewer than {minimum}, so a release over the whole table now, beside one then, would single out the "
        "records added", rule="disclosure.subset_min_difference",
        hint=f"the site's administrator adds records in batches of at least {minimum}; the table is served again "
             f"once it holds at least {minimum} more than then (docs/governance.md, 'A table that grows')")


def _padded(packed: bytes, n: int) -> bytes:
    """A packed row set of an earlier, smaller table as one of ``n`` records: the new records are not in it."""
    return bytes(packed) + bytes((n + 7) // 8 - len(packed))


def _now(packed: bytes, n: int, order: np.ndarray | None) -> bytes:
    """A packed row set of ``n`` records in the order they were first read at that size as one of the records
    as the table holds them now (``order``: the position now of each record then; None: the same)."""
    if order is None:
        return bytes(packed)
    held = np.zeros(n, dtype=bool)
    held[order] = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), count=n).astype(bool)
    return np.packbits(held).tobytes()


def _then(packed: bytes, n: int, order: np.ndarray | None) -> bytes:
    """A packed row set of the records as the table holds them now as one of them in the order they were first
    read at its size ``n`` (the inverse of :func:`_now`), as the history keeps it."""
    if order is None:
        return bytes(packed)
    return np.packbits(np.unpackbits(np.frombuffer(packed, dtype=np.uint8), count=n).astype(bool)[order]).tobytes()


def _ranks(keys: RecordKeys, order: np.ndarray | None) -> bytes:
    """Each record's place among the records sorted by their keys (of the records as the table holds them),
    in the order the history keeps them in (``order``: the position now of each record then), as it keeps it."""
    by_key = keys.sorted()
    ranks = np.empty(by_key.size, dtype="<i4" if by_key.size < 2**31 else "<i8")
    ranks[by_key] = np.arange(by_key.size)
    return (ranks if order is None else ranks[order]).tobytes()


def _moved(keys: RecordKeys, ranks: bytes, n: int) -> np.ndarray:
    """The position now of each of ``n`` records as the history keeps them, whose first ``keys.keys.size``
    had places ``ranks`` among them sorted by their keys: the record now at the same place (records added
    after them stay where they are)."""
    m = keys.keys.size
    placed = np.frombuffer(ranks, dtype="<i4" if len(ranks) == 4 * m else "<i8")
    return np.concatenate([keys.sorted()[placed], np.arange(m, n)])


@dataclass(frozen=True)
class _Decided:
    """A run's decision on a table at a size: the sizes whose row sets apply (or the refusal), the digests it
    was made with (None: none kept), and where the table holds the same records in another order than when
    first read at this size, the position now of each record then (None: the same order)."""

    found: tuple[int, ...] | Callable[[], DisclosureRefusal]
    now: Sized | None = None
    order: np.ndarray | None = None


class History:
    """Released cuts per table column, subset row sets and summed functions per table, in SQLite at ``path``;
    ``digests``: the site's digests of its tables' first records (:data:`Digests`), by which row sets kept
    at an earlier size apply to a table that grew (None: only those kept at the table's size)."""

    def __init__(self, path: str | Path, digests: Digests | None = None) -> None:
        self.path = create(path, _SCHEMA)
        self._db = Connections(self.path)
        self.lock = threading.RLock()
        self._digests = digests
        self._mapped: dict[tuple[str, int], _Decided] = {}  # per table and size, this run's decision
        self._open = threading.local()  # this thread's connection in a transaction (:meth:`transaction`)

    def close(self) -> None:
        """Close the connections kept open."""
        self._db.close()

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection to read with in a ``with`` block: this thread's transaction's (its writes seen), left open at
        the block's end, or a new one."""
        db = getattr(self._open, "db", None)
        return nullcontext(db) if db is not None else self._db.reading()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Every read and write of the history on this thread in the block as one SQLite transaction, on the
        connection it gives: a release's records kept whole or not at all, synced to disk once. Nested blocks join
        the outer one. (Outside a transaction each statement commits alone: one sync per row.)"""
        db = getattr(self._open, "db", None)
        if db is not None:
            yield db
            return
        # the history's lock first, then SQLite's write lock: always in that order, so a thread holding the first
        # never waits on a transaction waiting for it
        with self.lock:
            mapped = set(self._mapped)
            try:
                with self._db.immediate() as db:
                    self._open.db = db
                    yield db
            except BaseException:
                for key in self._mapped.keys() - mapped:  # decisions whose digests were not kept: made again
                    del self._mapped[key]
                raise
            finally:
                self._open.db = None

    def _sizes(self, table: str, n: int, min_growth: int = 0) -> tuple[int, ...]:
        """The sizes of ``table`` whose row sets apply to it at ``n`` records: ``n``, and each earlier size whose
        records are its first records unchanged (by their digests). Raises :func:`table_changed` where the
        history holds a size whose records are not. Decided once per table and size in a run of the site (the
        engines serve one number of records a run; a column read later is checked as it is read:
        :meth:`columns_read`); the digests of ``n`` are recorded at the first lookup."""
        return self._decided(table, n, min_growth).found  # type: ignore[return-value]

    def _decided(self, table: str, n: int, min_growth: int = 0) -> _Decided:
        with self.lock:
            decided = self._mapped.get((table, n))
            if decided is None:
                decided = self._mapped[(table, n)] = self._map(table, n, min_growth)
        if callable(decided.found):
            raise decided.found()  # a refusal of its own for each call (the service names its function)
        return decided

    def _map(self, table: str, n: int, min_growth: int) -> _Decided:
        if self._digests is None:
            return _Decided((n,))
        with self._connect() as db:
            recorded = {int(s): json.loads(d) for s, d in
                        db.execute("SELECT n_root, digests FROM table_records WHERE table_key = ?", (table,))}
            for s, column, digest in db.execute("SELECT n_root, column_name, digest FROM column_records WHERE "
                                                "table_key = ?", (table,)):
                recorded[int(s)][column] = digest
            ranks = db.execute("SELECT o.n_root, o.ranks, c.columns FROM table_orders o LEFT JOIN order_columns c "
                               "ON c.table_key = o.table_key AND c.n_root = o.n_root WHERE o.table_key = ? AND "
                               "o.n_root <= ? ORDER BY o.n_root DESC LIMIT 1", (table, n)).fetchone()
            held = {int(s) for (s,) in db.execute(_HELD, (table,))}
        sizes, keys = sorted({s for s in recorded if s < n} | {n}), RecordKeys(n)
        now = self._digests(table, sizes, keys=None if n in recorded else keys)  # keys: to keep n's ranks
        if now is None:  # a table derived in a session: keyed by its content, it has one size
            return _Decided((n,))
        changed, order = _changed(table, n, held, recorded, now), None
        keyed = None if ranks is None or ranks[2] is None else json.loads(ranks[2])  # None: every column served
        if changed is not None and ranks is not None and set(keyed or ()) <= now[n].keys():  # another order?
            then = RecordKeys(int(ranks[0]))  # of the first records, as many as then, over the columns keyed then
            self._digests(table, [], columns=keyed, keys=then)
            order = _moved(then, ranks[1], n)
            moved = self._digests(table, sizes, order=order)
            if moved is not None and _changed(table, n, held, recorded, moved) is None:
                changed, now = None, moved
            else:
                order = None
        if changed is not None:
            return _Decided(changed, now)
        few = [size for size in recorded if 0 < n - size < min_growth]
        if few:  # not recorded: the table is served once it grew by min_growth from the size read before
            return _Decided(partial(table_grew_little, table, max(few), n, min_growth), now)
        if n not in recorded:
            with self.transaction() as db:
                db.execute("INSERT OR IGNORE INTO table_records VALUES (?, ?, ?, ?)",
                           (table, n, json.dumps(now[n], sort_keys=True), utc_now()))
                db.execute("INSERT OR IGNORE INTO table_orders VALUES (?, ?, ?, ?)",
                           (table, n, _ranks(keys, order), utc_now()))
                db.execute("INSERT OR IGNORE INTO order_columns VALUES (?, ?, ?, ?)",
                           (table, n, json.dumps(keys.columns), utc_now()))
        self._record_columns(table, recorded, now)
        return _Decided(tuple(sorted({*recorded, n})), now, order)

    def _record_columns(self, table: str, recorded: Sized, now: Sized) -> None:
        """Keep the digests of the columns served now that were not at a size recorded before (added to the
        dictionary, or served again): from this run on, their values in its first records are checked too."""
        rows = [(table, size, column, digest, utc_now()) for size, kept in recorded.items() if size in now
                for column, digest in now[size].items() if column not in kept]
        if rows:
            with self.transaction() as db:
                db.executemany("INSERT OR IGNORE INTO column_records VALUES (?, ?, ?, ?, ?)", rows)

    def columns_read(self, table: str, columns: list[str]) -> None:
        """Check ``columns`` of ``table``, just read from the site's engine and kept for the rest of the run,
        against the digests its records were decided on earlier in the run (read then as the engine served
        them, or not at all): where they differ, the table changed while the site served it, and it is
        refused for the rest of the run (:func:`table_changed_in_run`, raised; the catalog then keeps no such
        column, and checks it again at its next read). A column is kept once a run, so each is digested here
        once a run where it is unchanged."""
        with self.lock:
            for (key, n), decided in list(self._mapped.items()):
                now = decided.now
                if key != table or now is None or self._digests is None:
                    continue
                sizes = sorted(now)
                read = self._digests(table, sizes, columns, order=decided.order)
                changed = sorted({c for s in sizes for c, d in (read or {}).get(s, {}).items()
                                  if c in now[s] and now[s][c] != d})
                if changed:
                    self._mapped[(key, n)] = _Decided(partial(table_changed_in_run, table, changed), now)
                    raise table_changed_in_run(table, changed)

    def table_records(self, table: str, n: int, min_growth: int) -> None:
        """Keep ``table``'s digests at ``n`` records, and raise :func:`table_changed` where its first records
        are not those of a size read before, :func:`table_grew_little` where it holds 1 to ``min_growth - 1``
        records more than one (decided once per table and size in a run)."""
        self._sizes(table, n, min_growth)

    def _where(self, table: str, n: int) -> tuple[str, tuple, Callable[[bytes], bytes]]:
        """The SQL condition and parameters selecting ``table``'s row sets that apply at ``n`` records, and the
        map of a packed row set kept to one of the records now: padded where kept at an earlier size (the same
        set kept at two sizes is then read once), moved where the records are in another order."""
        decided = self._decided(table, n)
        sizes: tuple[int, ...] = decided.found  # type: ignore[assignment]
        return (f"table_key = ? AND n_root IN ({', '.join('?' * len(sizes))})", (table, *sizes),
                lambda packed: _now(_padded(packed, n), n, decided.order))

    def _kept(self, table: str, n: int, packed: bytes) -> bytes:
        """A packed row set of ``table``'s ``n`` records now, as the history keeps it (:func:`_then`)."""
        return _then(packed, n, self._decided(table, n).order)

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
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO released_cuts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(table, column, c.value, int(c.inclusive), mode, analyst, function, now) for c in finite])

    # --- subsets ---------------------------------------------------------------------------

    def row_sets(self, table: str, n_root: int) -> list[np.ndarray]:
        """The row sets of every subset and released cell of ``table``, packed by ``np.packbits`` as
        they are kept (1 bit a record: :func:`~dsfed_server.disclosure.differencing.bits` reads one)."""
        where, params, now = self._where(table, n_root)
        with self._connect() as db:
            rows = [row for (row,) in db.execute(f"SELECT rows FROM subset_rows WHERE {where}", params)]
        return [np.frombuffer(row, dtype=np.uint8) for row in dict.fromkeys(map(now, rows))]

    # --- sums of functions ----------------------------------------------------------------------

    def sums(self, table: str, n_root: int) -> list[Summed]:
        """Every function summed exactly over a row set of ``table``
        (:mod:`~dsfed_server.disclosure.equations`)."""
        where, params, now = self._where(table, n_root)
        with self._connect() as db:
            rows = db.execute(f"SELECT function, roots, rows FROM released_sums WHERE {where}", params).fetchall()
        return list(dict.fromkeys(Summed(function, tuple(roots.split(_SEPARATOR)), now(packed))
                                  for function, roots, packed in rows))

    def pin_peer_tables(self, table: str, fingerprint: str, *, analyst: str) -> str:
        """The fingerprint of the other sites' tables that fits over ``table`` are summed with, for every analyst:
        recorded by the first such fit (with who asked), returned as recorded."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO peer_tables VALUES (?, ?, ?, ?)",
                       (table, fingerprint, analyst, utc_now()))
            return str(db.execute("SELECT fingerprint FROM peer_tables WHERE table_key = ?", (table,)).fetchone()[0])

    def record_sums(self, table: str, n_root: int, sums: list[Summed], *, analyst: str) -> None:
        self._sizes(table, n_root)  # the table's digests at this size kept first
        now = utc_now()
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO released_sums VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, s.function, _SEPARATOR.join(s.roots),
                             self._kept(table, n_root, s.rows), analyst, now) for s in sums])

    def pooled_row_sets(self, table: str, n_root: int) -> list[PooledCell]:
        """This site's records (packed) of every cell of ``table`` released pooled over sites, each with
        the cell's pooled count, the column it is an interval of and, where the sites gave it one, its
        identity (:class:`~dsfed_server.disclosure.differencing.PooledCell`)."""
        where, params, now = self._where(table, n_root)
        with self._connect() as db:
            rows = db.execute(f"SELECT rows, pooled_count, column_name, '' FROM pooled_rows WHERE {where} UNION ALL "
                              f"SELECT rows, pooled_count, column_name, cell_id FROM pooled_cells WHERE {where}",
                              params + params).fetchall()
        kept = dict.fromkeys((now(packed), int(count), column, cell_id) for packed, count, column, cell_id in rows)
        return [PooledCell(np.frombuffer(packed, dtype=np.uint8), int(count), column, cell_id)
                for packed, count, column, cell_id in kept]

    def record_pooled_row_sets(self, table: str, n_root: int, cells: list[PooledCell], *, analyst: str) -> None:
        """Keep this site's records of pooled cells of ``table`` (of ``n_root`` records; boolean or packed),
        each under its identity where it has one."""
        self._sizes(table, n_root)  # the table's digests at this size kept first
        now = utc_now()
        rows = [(c, self._kept(table, n_root, (np.packbits(c.rows) if c.rows.dtype == bool else c.rows).tobytes()))
                for c in cells]
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO pooled_rows VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, packed, c.count, c.column, analyst, now) for c, packed in rows
                            if not c.cell_id])
            db.executemany("INSERT OR IGNORE INTO pooled_cells VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           [(table, n_root, c.cell_id, packed, c.count, c.column, analyst, now) for c, packed in rows
                            if c.cell_id])

    def record_pooled_release(self, table: str, n_root: int, kind: str, cell_ids: list[str], *, analyst: str) -> None:
        """Keep how a pooled release's cells lie (:func:`~dsfed_server.disclosure.unions.kind_of`) and their
        identities in order (their records are kept with :meth:`record_pooled_row_sets`)."""
        if cell_ids:
            with self.transaction() as db:
                db.execute("INSERT OR IGNORE INTO pooled_releases VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (table, n_root, cell_ids[0], kind, ",".join(cell_ids), analyst, utc_now()))

    def pooled_releases(self, table: str, n_root: int) -> list[tuple[str, list[PooledCell]]]:
        """Every pooled release of ``table`` kept at ``n_root`` records (or fewer): how its cells lie, and this
        site's records of them in order (a release whose cells are not all kept is left out)."""
        where, params, _ = self._where(table, n_root)
        with self._connect() as db:
            kept = db.execute(f"SELECT kind, cell_ids FROM pooled_releases WHERE {where}", params).fetchall()
        if not kept:
            return []
        cells = {c.cell_id: c for c in self.pooled_row_sets(table, n_root) if c.cell_id}
        out = []
        for kind, ids in kept:
            found = [cells.get(i) for i in ids.split(",")]
            if all(c is not None for c in found):
                out.append((kind, found))
        return out  # type: ignore[return-value]

    def thin_row_sets(self, table: str, n_root: int) -> list[np.ndarray]:
        """This site's records (packed) of the cells of ``table`` released pooled in which another site held
        fewer than its q records (:meth:`~dsfed_server.disclosure.checks.Guard.coarsened`)."""
        return self._packed_sets("thin_cells", table, n_root)

    def record_thin_row_sets(self, table: str, n_root: int, packed: list[np.ndarray], *, analyst: str) -> None:
        """Keep this site's records (packed) of pooled cells of ``table`` in which another site held fewer than
        its q records."""
        self._record_packed("thin_cells", table, n_root, packed, analyst)

    def exposed_row_sets(self, table: str, n_root: int) -> list[np.ndarray]:
        """This site's records (packed) of the cells of ``table`` released pooled that the pooled count less the other
        sites' releases alone gave, or would give once they release theirs
        (:meth:`~dsfed_server.disclosure.checks.Guard._record_exposed`), in the order kept: the latest last."""
        return self._packed_sets("exposed_cells", table, n_root, in_order=True)

    def record_exposed_row_sets(self, table: str, n_root: int, packed: list[np.ndarray], *, analyst: str) -> None:
        self._record_packed("exposed_cells", table, n_root, packed, analyst)

    def exposed_parts(self, table: str, n_root: int) -> list[np.ndarray]:
        """This site's records (packed) of each of :meth:`exposed_row_sets` at 1 of a 0/1 quantity its pooled
        release summed per cell (its events), whose number the pooled release gave with the cell's."""
        return self._packed_sets("exposed_parts", table, n_root)

    def record_exposed_parts(self, table: str, n_root: int, packed: list[np.ndarray], *, analyst: str) -> None:
        self._record_packed("exposed_parts", table, n_root, packed, analyst)

    def summed_row_sets(self, table: str, n_root: int) -> list[np.ndarray]:
        """The records (packed) of ``table`` that exact sums this site released alone were over, second moments
        too (:meth:`~dsfed_server.disclosure.checks.Guard.exact_sums`): a sum of a 0/1 column is their number."""
        return self._packed_sets("summed_rows", table, n_root)

    def record_summed_row_sets(self, table: str, n_root: int, packed: list[np.ndarray], *, analyst: str) -> None:
        self._record_packed("summed_rows", table, n_root, packed, analyst)

    def _packed_sets(self, name: str, table: str, n_root: int, in_order: bool = False) -> list[np.ndarray]:
        where, params, now = self._where(table, n_root)
        order = " ORDER BY rowid" if in_order else ""  # rowid: the order kept (the tables are append-only)
        with self._connect() as db:
            rows = db.execute(f"SELECT rows FROM {name} WHERE {where}{order}", params).fetchall()
        return [np.frombuffer(packed, dtype=np.uint8) for packed in dict.fromkeys(now(r[0]) for r in rows)]

    def _record_packed(self, name: str, table: str, n_root: int, packed: list[np.ndarray], analyst: str) -> None:
        self._sizes(table, n_root)  # the table's digests at this size kept first
        now = utc_now()
        with self.transaction() as db:
            db.executemany(f"INSERT OR IGNORE INTO {name} VALUES (?, ?, ?, ?, ?)",
                           [(table, n_root, self._kept(table, n_root, rows.tobytes()), analyst, now)
                            for rows in packed])

    def record_row_set(self, table: str, rows: np.ndarray, *, analyst: str) -> None:
        self._sizes(table, int(rows.size))  # the table's digests at this size kept first
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO subset_rows VALUES (?, ?, ?, ?, ?)",
                       (table, int(rows.size), self._kept(table, int(rows.size), np.packbits(rows).tobytes()),
                        analyst, utc_now()))
