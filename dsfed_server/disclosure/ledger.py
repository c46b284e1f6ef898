"""The privacy-budget ledger: what has been spent on each table, by all analysts and by each,
stored; and the peer set each table's secure sums are pinned to.

Every noisy release passes :meth:`dsfed_server.disclosure.checks.Guard.noisy`, which asks the
call's :class:`~dsfed_server.disclosure.scope.CallScope` to **check** the release against two
budgets on every table the call read, *before* the noise is drawn:

* the **table's** budget (``[budget] epsilon_per_table``, ``delta_per_table``): everything
  every analyst has been told about the table. Two colluding accounts share it, so a second
  account does not buy fresh noise on the same records;
* the **analyst's** share of it (``epsilon_per_analyst``, ``delta_per_analyst``, at most the
  table's), so one analyst cannot use up a table for everyone.

The service **spends** (:meth:`~dsfed_server.disclosure.scope.CallScope.commit`) only after the
call has succeeded, and before its result leaves the site (diffprivlib's accountant pattern). A release that would
overspend either budget is refused with :class:`~dsfed_core.errors.BudgetExceeded`, naming
the budget's rule and stating what remains. The bounds are the accountant's
(:mod:`dsfed_server.disclosure.accountant`); repeats and partitions are the call scope's
(:mod:`dsfed_server.disclosure.scope`).

Table key
    The ``project.table`` of the site table(s) the released values were computed from.
    The service tracks this provenance through the workspace: ``assignTable`` marks its
    table, and every value assigned in a call inherits the tables that call read (subsets,
    columns, derived tables). A content digest would not do: every subset or derived vector
    would get a fresh budget, so an analyst could reset the budget by subsetting. A noisy
    release computed from analyst-supplied values only (no site table) is not charged.

Storage
    SQLite (stdlib ``sqlite3``) at the site config's ``[site] ledger``: append-only tables
    (triggers refuse UPDATE and DELETE), so the ledger survives restarts and is never rewritten.
    Check-and-spend runs in one ``BEGIN IMMEDIATE`` transaction, so two concurrent calls (or
    two server processes) cannot both spend the last of a budget.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from contextlib import AbstractContextManager
from typing import Any, Iterable

from dsfed_server.disclosure.accountant import Cap, Caps, Cost, guarantee
from dsfed_server.disclosure.store import Connections, create
from dsfed_server.timestamps import utc_now

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spend (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    analyst TEXT NOT NULL,
    table_key TEXT NOT NULL,
    function TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    rho REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS spend_by_owner ON spend (analyst, table_key);
CREATE TABLE IF NOT EXISTS released (
    analyst TEXT NOT NULL,
    table_key TEXT NOT NULL,
    release TEXT NOT NULL,
    spend_seq INTEGER NOT NULL REFERENCES spend (seq),
    PRIMARY KEY (analyst, table_key, release)
);
CREATE TRIGGER IF NOT EXISTS spend_append_only_u BEFORE UPDATE ON spend
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS spend_append_only_d BEFORE DELETE ON spend
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_append_only_u BEFORE UPDATE ON released
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TRIGGER IF NOT EXISTS released_append_only_d BEFORE DELETE ON released
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
CREATE TABLE IF NOT EXISTS secure_peers (
    analyst TEXT NOT NULL,
    table_key TEXT NOT NULL,
    peers TEXT NOT NULL,
    time TEXT NOT NULL,
    PRIMARY KEY (analyst, table_key)
);
CREATE TRIGGER IF NOT EXISTS secure_peers_append_only_u BEFORE UPDATE ON secure_peers
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;
"""


@dataclass(frozen=True)
class Charge:
    """A pending charge: ``cost`` on ``table`` for the releases ``keys`` (new ones only)."""

    table: str
    function: str
    cost: Cost
    keys: tuple[str, ...]


class Ledger:
    """Append-only spend records in SQLite (thread-safe)."""

    def __init__(self, path: str | Path) -> None:
        self.path = create(path, _SCHEMA)
        self._db = Connections(self.path)
        self._lock = threading.Lock()

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.reading()

    def close(self) -> None:
        """Close the connections kept open."""
        self._db.close()

    @staticmethod
    def _total(db: sqlite3.Connection, table: str, analyst: str | None = None) -> Cost:
        """Spent on ``table``: by everyone, or by ``analyst``."""
        query = ("SELECT COALESCE(SUM(epsilon), 0), COALESCE(SUM(delta), 0), COALESCE(SUM(rho), 0) "
                 "FROM spend WHERE table_key = ?")
        params: tuple[str, ...] = (table,)
        if analyst is not None:
            query, params = query + " AND analyst = ?", (table, analyst)
        row = db.execute(query, params).fetchone()
        return Cost(float(row[0]), float(row[1]), float(row[2]))

    def total(self, table: str, analyst: str | None = None) -> Cost:
        with self._connect() as db:
            return self._total(db, table, analyst)

    @staticmethod
    def _released(db: sqlite3.Connection, table: str, keys: list[str]) -> set[str]:
        if not keys:
            return set()
        marks = ",".join("?" * len(keys))
        rows = db.execute(f"SELECT release FROM released WHERE table_key = ? AND release IN ({marks})",
                          (table, *keys)).fetchall()
        return {r[0] for r in rows}

    def released(self, table: str, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` were already charged on ``table`` (to any analyst: same seed, same noise)."""
        with self._connect() as db:
            return self._released(db, table, list(keys))

    def overspent(self, db: sqlite3.Connection, analyst: str, table: str, cost: Cost,
                  caps: Caps) -> tuple[Cap, Cost] | None:
        """The first budget ``cost`` would overspend on ``table`` (and what it has spent), or None."""
        for cap, who in ((caps.analyst, analyst), (caps.table, None)):
            total = self._total(db, table, who)
            if not cap.fits(total + cost):
                return cap, total
        return None

    def check(self, analyst: str, table: str, cost: Cost, caps: Caps) -> tuple[Cap, Cost] | None:
        with self._connect() as db:
            return self.overspent(db, analyst, table, cost, caps)

    def spend(self, analyst: str, charges: list[Charge], caps: Caps, refuse: Any) -> list[dict[str, Any]]:
        """Re-check and record ``charges`` atomically; ``refuse(table, cap, total, cost)`` raises
        when one would overspend a budget (nothing is then recorded). Returns what was spent."""
        if not charges:
            return []
        now = utc_now()
        spent = []
        with self._lock, self._db.immediate() as db:
            for charge in charges:
                done = self._released(db, charge.table, list(charge.keys))
                keys = [k for k in charge.keys if k not in done]
                if not keys:
                    continue  # a concurrent call released the same values first
                over = self.overspent(db, analyst, charge.table, charge.cost, caps)
                if over is not None:
                    refuse(charge.table, *over, charge.cost)
                cur = db.execute("INSERT INTO spend (time, analyst, table_key, function, epsilon, delta, rho) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (now, analyst, charge.table, charge.function, charge.cost.epsilon,
                                  charge.cost.delta, charge.cost.rho))
                db.executemany("INSERT INTO released (analyst, table_key, release, spend_seq) VALUES (?, ?, ?, ?)",
                               [(analyst, charge.table, k, cur.lastrowid) for k in keys])
                after = guarantee(self._total(db, charge.table), epsilon_budget=caps.table.epsilon,
                                  delta_budget=caps.table.delta)
                spent.append({"table": charge.table, "epsilon": charge.cost.epsilon, "delta": charge.cost.delta,
                              "rho": charge.cost.rho, "releases": len(keys), "seq": cur.lastrowid,
                              "table_total": after.as_dict()})
        return spent

    def pin_peers(self, analyst: str, tables: Iterable[str], peers: Iterable[str]) -> dict[str, str]:
        """The peer set of secure sums on each table, for every analyst: recorded by the first secure
        sum on the table (with who asked), returned as recorded (the caller refuses a sum whose peers
        differ: two colluding accounts summing over different site sets could difference them)."""
        wanted = ",".join(sorted(peers))
        pinned: dict[str, str] = {}
        with self._lock, self._db.immediate() as db:
            for table in sorted(set(tables)):
                row = db.execute("SELECT peers FROM secure_peers WHERE table_key = ? ORDER BY time LIMIT 1",
                                 (table,)).fetchone()
                if row is None:
                    db.execute("INSERT INTO secure_peers VALUES (?, ?, ?, ?)",
                               (analyst, table, wanted, datetime.now(timezone.utc).isoformat()))
                pinned[table] = wanted if row is None else row[0]
            if any(v != wanted for v in pinned.values()):
                db.rollback()  # pinned nowhere: the call is refused
        return pinned

    def listing(self) -> list[dict[str, Any]]:
        """Per analyst x table: summed costs and the number of charged queries and releases."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT s.analyst, s.table_key, SUM(s.epsilon), SUM(s.delta), SUM(s.rho), COUNT(*), "
                "(SELECT COUNT(*) FROM released r WHERE r.analyst = s.analyst AND r.table_key = s.table_key), "
                "MAX(s.time) FROM spend s GROUP BY s.analyst, s.table_key ORDER BY s.analyst, s.table_key"
            ).fetchall()
        return [{"analyst": a, "table": t, "cost": Cost(float(e), float(d), float(r)), "queries": int(n),
                 "releases": int(k), "last": last} for a, t, e, d, r, n, k, last in rows]
