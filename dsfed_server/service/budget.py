"""The privacy budget: what a call would cost before it runs (the privacy map), and the ledger's
spending as governance sees it (every analyst, every table) and as an analyst sees their own."""

from __future__ import annotations

from typing import Any

from dsfed_core.calltree import Call
from dsfed_core.errors import CallError, SiteError
from dsfed_server.config import User
from dsfed_server.context import CallContext
from dsfed_server.disclosure.accountant import ACCOUNTANT, ZERO, Cost, statement, use_of_remaining
from dsfed_server.registry import bind
from dsfed_server.service.calls import CallPipeline, CallRequest, check_handles, symbols_named
from dsfed_server.service.state import SiteState
from dsfed_server.workspace import Session

# the arguments by which a noisy function takes the privacy an analyst asks for (never less than the site's)
PRIVACY_ARGUMENTS = ("epsilon", "delta", "sensitivity")


class PrivacyBudget:
    """A call's cost before it runs, and the budget spent and remaining."""

    def __init__(self, state: SiteState, calls: CallPipeline) -> None:
        self.state = state
        self.calls = calls

    def cost(self, user: User, sid: str, request: CallRequest) -> dict[str, Any]:
        """What a call would charge the caller's privacy budget on each table it reads, and what the
        caller has left there, without running it (OpenDP's privacy map).

        A noisy function's mechanism follows from the site's rules and the call's own privacy
        arguments (``epsilon``, ``delta``, ``sensitivity``), never from the data, so the charge is
        known before the call: at most this (a release the ledger charged before, for anyone,
        costs nothing again). Nothing is computed from the records, released or spent."""
        state = self.state
        function, text = self.calls.label(request)
        with state.audited(user, sid, function, "cost", text):
            session = state.sessions.get(sid, user.name)
            check_handles(session, request.handles)
            node = self.calls.tree(request)
            if not isinstance(node, Call):
                raise CallError("a cost request must be a function call such as scoreHistogramDS(D$y, D$score)")
            with session.lock:
                charge = self._privacy_map(session, node)
                tables = sorted(set().union(*(session.sources.get(name, frozenset())
                                              for name in symbols_named(node))))
            guard = self.calls.guard(function)
            caps, share = guard.caps(), guard.warn_share()

            def entry(table: str) -> dict[str, Any]:
                mine, everyone = state.ledger.total(table, user.name), state.ledger.total(table)
                uses = {"analyst": use_of_remaining(mine, charge, caps.analyst, share),
                        "table": use_of_remaining(everyone, charge, caps.table, share)}
                return {"table": table, "charge": {"epsilon": charge.epsilon, "delta": charge.delta, "rho": charge.rho},
                        **statement(mine, caps.analyst), "uses": uses,
                        "warn": any(u["warn"] for u in uses.values())}

            return {"site": state.name, "function": node.function, "accountant": ACCOUNTANT,
                    "budget": {"epsilon": caps.analyst.epsilon, "delta": caps.analyst.delta}, "warn_share": share,
                    "tables": [entry(table) for table in tables]}

    def _privacy_map(self, session: Session, call: Call) -> Cost:
        """The cost of ``call`` and of the calls nested in it: one release of each noisy function's
        mechanism (releases of one call over disjoint records compose in parallel)."""
        nested = sum((self._privacy_map(session, a.value) for a in call.args if isinstance(a.value, Call)), ZERO)
        spec = self.calls.spec(call.function, session)
        if "privacy.mechanism" not in spec.checks:
            return nested
        guard = self.calls.guard(spec.name, session)
        try:
            asked = bind(spec, call.args, CallContext(self.calls, session, spec.name, guard), only=PRIVACY_ARGUMENTS)
            mechanism = guard.mechanism(**{name: asked.get(name) for name in PRIVACY_ARGUMENTS})
        except SiteError as exc:
            raise exc.at(site=self.state.name, function=spec.name)
        return nested if mechanism is None else nested + Cost.of(mechanism)

    def budget(self, user: User) -> dict[str, Any]:
        """Governance: privacy budget spent and remaining per table (all analysts) and per analyst x
        table (the ledger)."""
        state = self.state
        with state.audited(user, None, "listBudget", "governance", ""):
            state.require_role(user, "governance")
            guard = self.calls.guard("listBudget")
            caps = guard.caps()
            rows = state.ledger.listing()
            tables: dict[str, Cost] = {}
            for row in rows:
                tables[row["table"]] = tables.get(row["table"], ZERO) + row["cost"]
            return {
                "site": state.name, "accountant": ACCOUNTANT, "budget": caps.as_dict(),
                "warn_share": guard.warn_share(),
                "tables": [{"table": t, **statement(cost, caps.table)} for t, cost in sorted(tables.items())],
                "spending": [{"analyst": row["analyst"], "table": row["table"], **statement(row["cost"], caps.analyst),
                              "queries": row["queries"], "releases": row["releases"], "last": row["last"]}
                             for row in rows],
            }

    def my_budget(self, user: User) -> dict[str, Any]:
        """The caller's own privacy budget: per table they have spent on, what they spent and what
        remains of their share (``budget.epsilon_per_analyst`` / ``delta_per_analyst``), in the
        ledger's accounting (the figures ``GET /v1/budget`` gives governance for them). Other
        analysts' spending is not shown."""
        state = self.state
        with state.audited(user, None, "listMyBudget", "metadata", ""):
            guard = self.calls.guard("listMyBudget")
            cap = guard.caps().analyst
            return {
                "site": state.name, "analyst": user.name, "accountant": ACCOUNTANT,
                "budget": {"epsilon": cap.epsilon, "delta": cap.delta}, "warn_share": guard.warn_share(),
                "tables": [{"table": row["table"], **statement(row["cost"], cap), "queries": row["queries"],
                            "releases": row["releases"], "last": row["last"]}
                           for row in state.ledger.listing() if row["analyst"] == user.name],
            }
