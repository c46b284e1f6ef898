"""One analyst call's scope: what it read and the noisy releases it would charge.

The :class:`~dsfed_server.disclosure.checks.Guard` checks each release here before its noise is
drawn; the service commits the releases to the ledger once the call has succeeded.

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
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any, Iterable

from dsfed_server.disclosure.accountant import ACCOUNTANT, ZERO, Cap, Caps, Cost, guarantee, remaining_budget
from dsfed_server.disclosure.ledger import Charge, Ledger
from dsfed_core.errors import BudgetExceeded


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
        import pandas as pd  # local: the accounting needs no pandas

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
            # the budgets in force: what the spending is stated against (dsfed audit show)
            "budget": self.caps.as_dict(),
            "releases": len(self.pending),
            "repeated_releases": self.repeats,
        }


def _per_table(spent: list[dict[str, Any]], key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in spent:
        out[item["table"]] = out.get(item["table"], 0.0) + item[key]
    return out
