"""The privacy-budget ledger: what has been spent on each table, by all analysts and by each,
and the accountant.

Every noisy release passes :meth:`dsfed_server.disclosure.checks.Guard.noisy`, which asks the
call's :class:`CallScope` to **check** the release against two budgets on every table the call
read, *before* the noise is drawn:

* the **table's** budget (``[budget] epsilon_per_table``, ``delta_per_table``): everything
  every analyst has been told about the table. Two colluding accounts share it, so a second
  account does not buy fresh noise on the same records;
* the **analyst's** share of it (``epsilon_per_analyst``, ``delta_per_analyst``, at most the
  table's), so one analyst cannot use up a table for everyone.

The service **spends** (:meth:`CallScope.commit`) only after the call has succeeded, and
before its result leaves the site (diffprivlib's accountant pattern). A release that would
overspend either budget is refused with :class:`~dsfed_server.errors.BudgetExceeded`, naming
the budget's rule and stating what remains.

Table key
    The ``project.table`` of the site table(s) the released values were computed from.
    The service tracks this provenance through the workspace: ``assignTable`` marks its
    table, and every value assigned in a call inherits the tables that call read (subsets,
    columns, derived tables). A content digest would not do: every subset or derived vector
    would get a fresh budget, so an analyst could reset the budget by subsetting. A noisy
    release computed from analyst-supplied values only (no site table) is not charged.

Repeats are free
    Noise is seeded by the site secret and the query's content (:func:`~dsfed_server.
    disclosure.mechanisms.seeded_rng`), not by who asks, so asking the same release again,
    from any account, returns the very same numbers: no new information, no new spending.
    The ledger keeps the key of every release it charged (an HMAC of the seed's parts) and a
    release already charged on that table, to anyone, costs nothing.

Parallel composition
    Releases of one call that name the same ``partition`` are about disjoint sets of
    records (the two classes of ``noisyScoresDS``); together they cost as much as the most
    expensive of them. Releases without a partition compose sequentially.

Accountant (``ACCOUNTANT = "rdp"``)
    Two valid bounds are kept for the sequence of releases on one table (all analysts, and
    each analyst's part of it) and the tighter is used:

    * basic composition: :math:`(\\sum_i \\varepsilon_i, \\sum_i \\delta_i)`;
    * Renyi DP of the Gaussian mechanism (Mironov 2017, Prop. 7): release *i* with
      l2-sensitivity :math:`\\Delta_i` and noise :math:`\\sigma_i` has
      :math:`RDP(\\alpha) = \\alpha\\rho_i`, :math:`\\rho_i = \\Delta_i^2 / (2\\sigma_i^2)`; RDP adds
      up, and is converted to :math:`(\\varepsilon, \\delta)` at the budget's delta by
      :math:`\\varepsilon(\\delta) = \\min_{\\alpha > 1} \\alpha\\rho + \\log(1 - 1/\\alpha)
      - (\\log\\delta + \\log\\alpha)/(\\alpha - 1)` (Canonne, Kamath & Steinke 2020, Prop. 12;
      Balle et al. 2020, Thm. 21), the conversion Google's ``dp-accounting`` RDP accountant uses
      (``tests/test_budget.py`` checks the two agree).

    The spending is within budget iff one of the bounds is: basic with
    :math:`\\sum\\varepsilon_i \\le E` and :math:`\\sum\\delta_i \\le D`, or RDP with
    :math:`\\varepsilon(D) \\le E`.

Storage
    SQLite (stdlib ``sqlite3``) at the site config's ``[site] ledger``: append-only tables
    (triggers refuse UPDATE and DELETE), so the ledger survives restarts and is never rewritten.
    Check-and-spend runs in one ``BEGIN IMMEDIATE`` transaction, so two concurrent calls (or
    two server processes) cannot both spend the last of a budget.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from scipy import optimize

from dsfed_server.disclosure.store import connect, create
from dsfed_server.errors import BudgetExceeded

ACCOUNTANT = "rdp"
_SLACK = 1e-9  # relative tolerance on budget comparisons (float sums)


# --- the accountant ----------------------------------------------------------------------


def gaussian_rho(*, sigma: float, sensitivity: float) -> float:
    """zCDP / RDP slope :math:`\\rho = \\Delta^2 / (2\\sigma^2)` of the Gaussian mechanism."""
    return sensitivity**2 / (2.0 * sigma**2)


def _rdp_to_dp(alpha: float, rdp: float, delta: float) -> float:
    """One order's conversion (CKS 2020 Prop. 12), as in dp-accounting's ``compute_epsilon``."""
    if delta**2 + math.expm1(-rdp) > 0:  # delta <= sqrt(1 - exp(-KL)): epsilon 0 suffices
        return 0.0
    return rdp + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)


def rdp_epsilon(rho: float, delta: float) -> float:
    """:math:`\\varepsilon(\\delta)` of a composition with total RDP :math:`\\alpha\\rho`,
    minimised over the order :math:`\\alpha > 1` (grid, then a bounded refinement)."""
    if rho <= 0:
        return 0.0
    alphas = 1.0 + np.logspace(-4, 5, 2000)
    rdp = alphas * rho
    values = rdp + np.log1p(-1.0 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1.0)
    values = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, values)  # as _rdp_to_dp, vectorised
    i = int(np.argmin(values))
    lo, hi = alphas[max(i - 1, 0)], alphas[min(i + 1, alphas.size - 1)]
    best = optimize.minimize_scalar(lambda a: _rdp_to_dp(a, a * rho, delta), bounds=(lo, hi), method="bounded",
                                    options={"xatol": 1e-10})
    return float(max(0.0, min(values[i], best.fun)))


@dataclass(frozen=True)
class Cost:
    """What one release (or a partition of disjoint releases) costs."""

    epsilon: float
    delta: float
    rho: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    @staticmethod
    def of(mechanism: Any) -> "Cost":
        """The release's guarantee: its (epsilon, delta) and the Renyi cost of the calibrated noise
        (under secure aggregation the analyst sees the sum, which carries the calibrated noise)."""
        return Cost(float(mechanism.epsilon), float(mechanism.delta),
                    gaussian_rho(sigma=float(mechanism.calibrated_sigma), sensitivity=float(mechanism.sensitivity)))


ZERO = Cost(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Guarantee:
    """The tighter (epsilon, delta) bound of a sequence of costs, against a budget."""

    epsilon: float
    delta: float
    accountant: str  # "basic" or "rdp": which bound is the tighter one
    within: bool

    def as_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "accountant": self.accountant}


def guarantee(total: Cost, *, epsilon_budget: float, delta_budget: float) -> Guarantee:
    """Basic composition and RDP at the budget's delta; the tighter one that fits the budget
    (or, when none fits, the one with the smaller epsilon)."""
    basic = (total.epsilon, total.delta)
    rdp = (rdp_epsilon(total.rho, delta_budget), delta_budget) if total.rho > 0 else (0.0, 0.0)
    fits = [(e, d, name) for (e, d), name in ((basic, "basic"), (rdp, "rdp"))
            if e <= epsilon_budget * (1 + _SLACK) and d <= delta_budget * (1 + _SLACK)]
    if fits:
        e, d, name = min(fits, key=lambda t: (t[0], t[1]))
        return Guarantee(e, d, name, True)
    e, d, name = min(((basic[0], basic[1], "basic"), (rdp[0], rdp[1], "rdp")), key=lambda t: t[0])
    return Guarantee(e, d, name, False)


def remaining_budget(spent: Guarantee, epsilon_budget: float, delta_budget: float) -> dict[str, float | None]:
    """What is left: epsilon, and delta under basic composition (under RDP the guarantee is
    stated at the budget's delta, so no delta is 'left'; None)."""
    return {"epsilon": max(0.0, epsilon_budget - spent.epsilon),
            "delta": max(0.0, delta_budget - spent.delta) if spent.accountant == "basic" else None}


# --- storage -----------------------------------------------------------------------------

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
class Cap:
    """One budget: at most ``epsilon`` at ``delta`` for whom ``scope`` names, under ``rule``."""

    scope: str  # "table" (all analysts) or "analyst" (one analyst's share of a table)
    epsilon: float
    delta: float

    @property
    def rule(self) -> str:
        return f"budget.epsilon_per_{self.scope}"

    @property
    def delta_rule(self) -> str:
        return f"budget.delta_per_{self.scope}"

    def fits(self, total: Cost) -> bool:
        return guarantee(total, epsilon_budget=self.epsilon, delta_budget=self.delta).within


@dataclass(frozen=True)
class Caps:
    """The two budgets every release on a table is checked against (``[budget]``)."""

    table: Cap
    analyst: Cap

    @classmethod
    def of(cls, budget: Any) -> "Caps":
        return cls(Cap("table", budget.epsilon_per_table, budget.delta_per_table),
                   Cap("analyst", budget.epsilon_per_analyst, budget.delta_per_analyst))


@dataclass(frozen=True)
class Charge:
    """A pending charge: ``cost`` on ``table`` for the releases ``keys`` (new ones only)."""

    table: str
    function: str
    cost: Cost
    keys: tuple[str, ...]


class Ledger:
    """Append-only spend records in SQLite; one connection per operation (thread-safe)."""

    def __init__(self, path: str | Path) -> None:
        self.path = create(path, _SCHEMA)
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        return connect(self.path)

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
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        spent = []
        with self._lock:
            db = self._connect()
            try:
                db.execute("BEGIN IMMEDIATE")
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
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            finally:
                db.close()
        return spent

    def pin_peers(self, analyst: str, tables: Iterable[str], peers: Iterable[str]) -> dict[str, str]:
        """The peer set of secure sums on each table, for every analyst: recorded by the first secure
        sum on the table (with who asked), returned as recorded (the caller refuses a sum whose peers
        differ: two colluding accounts summing over different site sets could difference them)."""
        wanted = ",".join(sorted(peers))
        pinned: dict[str, str] = {}
        with self._lock, self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            for table in sorted(set(tables)):
                row = db.execute("SELECT peers FROM secure_peers WHERE table_key = ? ORDER BY time LIMIT 1",
                                 (table,)).fetchone()
                if row is None:
                    db.execute("INSERT INTO secure_peers VALUES (?, ?, ?, ?)",
                               (analyst, table, wanted, datetime.now(timezone.utc).isoformat()))
                pinned[table] = wanted if row is None else row[0]
            if any(v != wanted for v in pinned.values()):
                db.execute("ROLLBACK")
            else:
                db.execute("COMMIT")
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


# --- one call's reads and pending releases -------------------------------------------------


@dataclass
class _Release:
    key: str
    cost: Cost
    partition: str


@dataclass
class CallScope:
    """What one analyst call read and would release; the Guard and the service share it.

    ``sources`` are the site tables (``project.table``) the call read; ``analyst_vectors``
    counts analyst-supplied vectors (values derived from no site table) read in it, and
    ``analyst_tables`` the ids of analyst-supplied tables.
    """

    analyst: str
    ledger: Ledger | None
    caps: Caps
    secret: bytes = field(repr=False, default=b"")
    sources: set[str] = field(default_factory=set)
    analyst_vectors: int = 0
    analyst_tables: set[int] = field(default_factory=set)
    pending: list[_Release] = field(default_factory=list)
    spent: list[dict[str, Any]] = field(default_factory=list)
    repeats: int = 0
    symbols: set[str] = field(default_factory=set)  # workspace symbols the call read (their definitions)
    # per function the call ran (nested calls too): the rules it declares and those it applied (audited)
    rules: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def note_rules(self, function: str, declared: tuple[str, ...], applied: Iterable[str]) -> None:
        """Keep, for the audit record, what ``function`` declared and what it applied in this call."""
        entry = self.rules.setdefault(function, {"declared": list(declared), "applied": []})
        entry["applied"] += [rule for rule in applied if rule not in entry["applied"]]

    def read(self, sources: frozenset[str], value: Any) -> None:
        import pandas as pd  # local: the ledger's math needs no pandas

        if sources:
            self.sources.update(sources)
        elif isinstance(value, pd.Series):
            self.analyst_vectors += 1
        elif isinstance(value, pd.DataFrame):
            self.analyst_tables.add(id(value))

    def release_key(self, *parts: bytes | str) -> str:
        mac = hmac.new(self.secret or b"dsfed-ledger", b"release", hashlib.sha256)
        for part in parts:
            data = part.encode() if isinstance(part, str) else part
            mac.update(len(data).to_bytes(8, "big"))
            mac.update(data)
        return mac.hexdigest()

    def tables(self) -> list[str]:
        return sorted(self.sources)

    def _charges(self, releases: list[_Release], function: str) -> list[Charge]:
        """The pending releases as charges per table: new releases only, partitions at their max."""
        charges = []
        for table in self.tables():
            done = self.ledger.released(table, [r.key for r in releases]) if self.ledger else set()
            groups: dict[str, list[_Release]] = {}
            for r in releases:
                if r.key not in done:
                    groups.setdefault(r.partition, []).append(r)
            for members in groups.values():
                cost = Cost(max(m.cost.epsilon for m in members), max(m.cost.delta for m in members),
                            max(m.cost.rho for m in members))
                charges.append(Charge(table, function, cost, tuple(dict.fromkeys(m.key for m in members))))
        return charges

    def check(self, function: str, key: str, mechanism: Any, partition: str | None) -> None:
        """Refuse now if this release, with the call's other pending ones, would overspend."""
        release = _Release(key, Cost.of(mechanism), partition or f"#{len(self.pending)}:{key}")
        candidate = [*self.pending, release]
        if self.ledger is not None:
            by_table: dict[str, Cost] = {}
            for charge in self._charges(candidate, function):
                by_table[charge.table] = by_table.get(charge.table, ZERO) + charge.cost
            for table, cost in by_table.items():
                over = self.ledger.check(self.analyst, table, cost, self.caps)
                if over is not None:
                    raise self.refusal(table, *over, cost)
        self.pending.append(release)

    def refusal(self, table: str, cap: Cap, total: Cost, cost: Cost) -> BudgetExceeded:
        now = guarantee(total, epsilon_budget=cap.epsilon, delta_budget=cap.delta)
        remaining = remaining_budget(now, cap.epsilon, cap.delta)
        rule = cap.delta_rule if cost.delta > cap.delta else cap.rule
        left = f"remaining epsilon {remaining['epsilon']:.6g}"
        if remaining["delta"] is not None:
            left += f", delta {remaining['delta']:.3g}"
        whose = (f"the privacy budget of table {table!r} (all analysts together)" if cap.scope == "table" else
                 f"the privacy budget of analyst {self.analyst!r} on table {table!r}")
        return BudgetExceeded(
            f"{whose} would be exceeded: this release costs epsilon {cost.epsilon:.6g} (delta {cost.delta:.3g}); "
            f"spent so far epsilon {now.epsilon:.6g} at delta {now.delta:.3g} ({now.accountant} composition) of "
            f"epsilon {cap.epsilon:g} at delta {cap.delta:g}; {left}",
            rule=rule,
            hint="repeating a query already answered, by anyone, costs nothing (it returns the same noise); ask for "
                 "a smaller epsilon, or ask the site's governance board for more budget",
        )

    def commit(self, function: str) -> dict[str, Any] | None:
        """Spend the pending releases (after the call succeeded); what the audit record carries."""
        if not self.pending:
            return None
        charges = self._charges(self.pending, function)

        def refuse(table: str, cap: Cap, total: Cost, cost: Cost) -> None:
            raise self.refusal(table, cap, total, cost)

        self.spent = self.ledger.spend(self.analyst, charges, self.caps, refuse) if self.ledger else []
        new_keys = {k for c in charges for k in c.keys}
        self.repeats = len({r.key for r in self.pending} - new_keys) if self.sources else 0
        return {
            "accountant": ACCOUNTANT,
            "tables": self.tables(),
            # what this call cost on each table it read (the same on each)
            "epsilon": max(_per_table(self.spent, "epsilon").values(), default=0.0),
            "delta": max(_per_table(self.spent, "delta").values(), default=0.0),
            "charges": self.spent,
            "releases": len(self.pending),
            "repeated_releases": self.repeats,
        }


def _per_table(spent: list[dict[str, Any]], key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in spent:
        out[item["table"]] = out.get(item["table"], 0.0) + item[key]
    return out
