"""The call pipeline: a call as received, parsed (text or tree), checked (registered, enabled, its
handles current), bound and run under its session's call scope, its declaration of cells released
per site through the gate, and its result as JSON; ``assign`` keeps a value as a session symbol.

A secure or pooled release of an aggregate call (:mod:`dsfed_server.service.rounds`) runs its call
through this pipeline too (:meth:`CallPipeline.invoke`); ``aggregate`` hands it the request."""

from __future__ import annotations

import hashlib
import json
import keyword
import math
import reprlib
from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Generator
from typing import Any, Iterator, Literal, Protocol

import numpy as np
import pandas as pd

from dsfed_core.calltree import Arg, Arith, Call, Column, Node, Symbol
from dsfed_core.errors import BackendUnavailable, CallError, NotEnabled, SiteError, StaleHandle
from dsfed_core.parser import from_json, parse
from dsfed_server import rbridge
from dsfed_server.config import User
from dsfed_server.context import NOTE, CallContext, r_class
from dsfed_server.disclosure import declared
from dsfed_server.disclosure.checks import Guard, enforce_contract
from dsfed_server.disclosure.differencing import SharedCell
from dsfed_server.disclosure.gate import Cut
from dsfed_server.disclosure.identifiers import refuse_identifiers
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_server.disclosure.scope import CallScope
from dsfed_server.registry import FunctionSpec, bind
from dsfed_server.rvalues import opal_json
from dsfed_server.service.state import SiteState
from dsfed_server.views import kept_value
from dsfed_server.workspace import Session, check_symbol_name


@dataclass(frozen=True)
class CallRequest:
    """A call as received: DataSHIELD text or the structured JSON form."""

    text: str | None = None
    tree: dict | None = None
    secure: dict | None = None  # secure-aggregation option: round, step, roster, frac_bits, pooled
    handles: dict[str, str] | None = None  # symbol name -> the definition digest the caller holds


_SHORT = reprlib.Repr()  # bounded repr of structured calls for the audit log (long vectors elided)
_SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 8, 12, 120, 120, 6

# where the native API lists the functions a site enables (the /ws door points to its own listing)
LIST_FUNCTIONS_HINT = "GET /v1/functions lists the functions this site enables"


def python_name(param: str) -> str:
    """A parameter's name as the implementation receives it: dots become underscores,
    and a Python keyword (``class``) gets a trailing underscore."""
    name = param.replace(".", "_")
    return name + "_" if keyword.iskeyword(name) else name


def jsonable(value: Any) -> Any:
    """Plain JSON types for a result; NaN becomes null as in jsonlite's ``na = "null"``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return None if math.isnan(value) else (None if math.isinf(value) else value)
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA:
        return None
    return value


def canonical_call(request: CallRequest) -> str:
    """A call as received, in one canonical text (the structured form with sorted keys)."""
    return request.text if request.text is not None else json.dumps(request.tree, sort_keys=True)


def symbols_named(node: Node) -> set[str]:
    """The workspace symbols a call tree names (symbols and the tables of columns, nested calls too)."""
    if isinstance(node, Symbol):
        return {node.name}
    if isinstance(node, Column):
        return {node.table}
    if isinstance(node, Call):
        return set().union(*(symbols_named(a.value) for a in node.args))
    return set()


def check_handles(session: Session, handles: dict[str, str] | None) -> None:
    """Refuse a call whose handles (symbol name and the digest of the definition the caller
    holds, from the assign that made it) no longer match the session's symbols: a symbol removed
    or replaced since would give an answer about other data."""
    for name, digest in (handles or {}).items():
        held = session.definitions.get(name)
        if held != digest:
            state = ("is not in this session (removed, or made in another session)" if held is None
                     else "was replaced by another assign since this handle was made")
            raise StaleHandle(f"symbol {name!r} {state}; the handle holds definition {digest[:12]}...",
                              hint="assign it again and use the handle that assign returns")


def definition(call: str, session: Session, scope: CallScope) -> str:
    """Digest of a call together with the definitions of the workspace symbols it read, so two
    sites agree on a definition only if their symbols were made by the same chain of calls."""
    parts = [call] + [f"{name}={session.definitions.get(name, '?')}" for name in sorted(scope.symbols)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class SecureRelease(Protocol):
    """What runs an aggregate call with the secure option (:class:`~dsfed_server.service.rounds.SecureRounds`)."""

    def __call__(self, user: User, session: Session, spec: FunctionSpec, node: Call, request: CallRequest,
                 scope: CallScope, record: dict) -> dict[str, Any]:
        """Run ``node`` and answer its masked or sealed fields."""


class CallPipeline:
    """Calls run at the site: parsed, checked, bound, run and released per site.

    It is what a call reaches of its site (:class:`~dsfed_server.context.Site`): the state's name,
    configuration, rules, limits, tables, models and identity, and the calls nested in an argument."""

    def __init__(self, state: SiteState) -> None:
        self.state = state
        self.name, self.config, self.rules, self.limits = state.name, state.config, state.rules, state.limits
        self.catalog, self.models, self.identity = state.catalog, state.models, state.identity

    def tree(self, request: CallRequest, *, arithmetic: bool = False) -> Node:
        """The request's call tree (text parsed, or the structured form read), identifiers refused;
        an expression (ds.make's ``"D$age*2"``) becomes the site's ``deriveDS`` call."""
        if (request.text is None) == (request.tree is None):
            given = "both" if request.text is not None else "neither"
            raise CallError(f"give the call as text (expr) or as a structured tree (call): {given} given",
                            hint='e.g. {"expr": "meanDS(D$age)"}')
        if request.text is not None:
            node = parse(request.text, self.limits, arithmetic=arithmetic)
        else:
            node = from_json(request.tree, self.limits)
        if isinstance(node, Arith):  # an expression (ds.make's "D$age*2"): the site's deriveDS
            node = Call("deriveDS", (Arg(None, node),))
        return refuse_identifiers(node, self.state.identifiers)

    @staticmethod
    def label(request: CallRequest) -> tuple[str, str]:
        """Function name and call text for the audit log, even for calls that do not parse."""
        if request.text is not None:
            head = request.text.split("(", 1)[0].strip()
            if "(" not in request.text and "$" in head:
                head = "$"
            return (head if head.isidentifier() or head == "$" else "?"), request.text[:2000]
        tree = request.tree if isinstance(request.tree, dict) else {}
        name = tree.get("call") if isinstance(tree.get("call"), str) else "?"
        return name, _SHORT.repr(request.tree)

    def spec(self, name: str, session: Session | None = None) -> FunctionSpec:
        """The registry's entry for ``name``, if the session's profile enables it and its backend runs here."""
        spec = self.state.registry.get(name)
        if spec is None:
            shown = name if len(name) <= 40 else f"{name[:37]}..."
            raise CallError(
                f"{shown!r} is not a registered function; nothing else can be called",
                function=name, hint=LIST_FUNCTIONS_HINT,
            )
        profile = session.profile if session is not None else DEFAULT_PROFILE
        if name not in self.state.session_rules(session).functions.enabled:
            where, rule = ("at this site", "functions.enabled") if profile == DEFAULT_PROFILE else (
                f"in this site's profile {profile!r}", f"profiles.{profile}.enabled")
            raise NotEnabled(
                f"{name} is not enabled {where}", function=name, rule=rule,
                hint="ask the site's governance board, or use an enabled function",
            )
        if spec.backend == "R" and not rbridge.available():
            raise BackendUnavailable(
                f"{name} is implemented in R, which this site does not have: {rbridge.unavailable_reason()}",
                function=name, hint="ask the site administrator to install R and rpy2",
            )
        return spec

    def invoke(self, session: Session, call: Call, *, noise_share: float = 1.0,
               deferred: list[tuple[str, int]] | None = None,
               relayed_cuts: dict[tuple[str, str], list[Cut]] | None = None, relayed: bool = False,
               relayed_cells: list[SharedCell] | None = None, hidden: bool = False, beside: bool = False) -> Any:
        """Run ``call``. A function that releases part-way yields its declarations
        (:mod:`~dsfed_server.disclosure.declared`), each released here before it goes on. What it returns is
        released as its registry entry declares (:meth:`~dsfed_server.registry.FunctionSpec.release_of`): a
        declaration of cells (:mod:`~dsfed_server.disclosure.gate`) through the release gate per site, or, in a
        pooled release (``deferred``: the minimum counts to check on the pooled counts; ``relayed_cuts``: the
        sites' cut histories; ``relayed_cells``: the pooled cells released before), as it is, for the gate to
        release pooled. ``relayed``: the first step of a relayed protocol (checked per site); ``hidden``: over
        at least ``secure_aggregation.min_sites`` sites (:attr:`~dsfed_server.context.CallContext.own_sums`);
        ``beside``: over other sites too."""
        spec = self.spec(call.function, session)
        if spec.pooled_only and deferred is None:
            raise CallError(f"{spec.name} runs only as a pooled release over the sites (secure aggregation)",
                            function=spec.name, hint="ask with the pooled option (the dsfed client: secure=True)")
        guard = self.guard(spec.name, session, noise_share, deferred, relayed_cuts, relayed_cells)
        ctx = CallContext(self, session, spec.name, guard, relayed, hidden, beside)
        try:
            bound = bind(spec, call.args, ctx)
            guard.check_analyst_data(spec.params, bound)
            args = {python_name(name): value for name, value in bound.items()}
            result = spec.impl(ctx, **args)
            if isinstance(result, Generator):  # releases declared part-way, released as they come
                result = declared.run(result, guard)
            if spec.release_of(result) == "cells" and deferred is None:
                result = guard.release(result)
            enforce_contract(guard, spec.checks)
            return result
        except SiteError as exc:
            raise exc.at(site=self.name, function=spec.name)
        finally:
            if session.scope is not None:
                session.scope.note_rules(spec.name, spec.checks, guard.applied)

    def guard(self, function: str, session: Session | None = None, noise_share: float = 1.0,
              deferred: list[tuple[str, int]] | None = None,
              relayed_cuts: dict[tuple[str, str], list[Cut]] | None = None,
              relayed_cells: list[SharedCell] | None = None) -> Guard:
        """The disclosure guard of one function's run under the session's rules."""
        state = self.state
        return Guard(state.session_rules(session), state.name, function, state.secret,
                     scope=session.scope if session is not None else None, history=state.history,
                     kept=state.catalog.kept, noise_share=noise_share, deferred=deferred, relayed_cuts=relayed_cuts,
                     relayed_cells=relayed_cells)

    @contextmanager
    def scope(self, user: User, session: Session, record: dict) -> Iterator[CallScope]:
        """One call's reads and noisy releases (held under the session lock); on success the
        releases are spent in the ledger and the audit record carries the spend."""
        state = self.state
        scope = CallScope(user.name, state.ledger, self.guard(record["function"]).caps(), secret=state.secret)
        session.scope = scope
        try:
            yield scope
            privacy = scope.commit(record["function"])
            if privacy is not None:
                record["privacy"] = privacy
        finally:
            session.scope = None
            if scope.rules:  # refused calls too: what each function declared and what it applied
                record["checks"] = scope.rules

    def run_nested(self, session: Session, call: Call) -> Any:
        """A call inside another call's arguments: only assign-kind functions give values."""
        spec = self.spec(call.function, session)
        if spec.kind != "assign":
            raise CallError(
                f"{spec.name} is an aggregate function and cannot be an argument of another call",
                function=spec.name,
            )
        return self.invoke(session, call)

    def aggregate(self, user: User, sid: str, request: CallRequest, *, secure: SecureRelease,
                  shape: Literal["native", "opal", "r"] = "native") -> Any:
        """Run an aggregate function; its checked result as JSON (with the secure option, what
        ``secure`` answers).

        ``shape="opal"`` gives the JSON Opal's DataSHIELD API gives for dsBase's
        R result (the entry's ``opal_shape``, encoded as Opal's R server does: ``jsonlite::toJSON``,
        or ``serializeJSON``'s typed form for a value ``toJSON`` refuses); ``shape="r"`` that R
        result itself, as :mod:`dsfed_server.rvalues` values, for the Opal door to encode as its
        client asks (that JSON, or R's serialization).
        """
        function, text = self.label(request)
        with self.state.audited(user, sid, function, "aggregate", text) as record:
            session = self.state.sessions.get(sid, user.name)
            check_handles(session, request.handles)
            node = self.tree(request)
            if not isinstance(node, Call):
                raise CallError("an aggregate request must be a function call such as meanDS(D$age)")
            spec = self.spec(node.function, session)
            if spec.kind != "aggregate":
                raise CallError(
                    f"{spec.name} is an assign function; use assign with a symbol name",
                    function=spec.name,
                )
            if request.secure is not None:
                with session.lock, self.scope(user, session, record) as scope:
                    return secure(user, session, spec, node, request, scope, record)
            if spec.secure_sum is not None:
                self.guard(spec.name, session).plain_release()
            with session.lock, self.scope(user, session, record):
                result = jsonable(self.invoke(session, node))
            if shape != "native":
                result = spec.opal_shape(result) if spec.opal_shape else result
                if shape == "opal":
                    result = opal_json(result)
        return result

    def assign(self, user: User, sid: str, symbol: str, request: CallRequest) -> dict[str, str]:
        """Run an assign function (or resolve a symbol or ``table$column``) and keep its value as
        ``symbol``; its class and definition digest (the handle) as JSON."""
        function, text = self.label(request)
        with self.state.audited(user, sid, function, "assign", f"{symbol} <- {text}") as record:
            session = self.state.sessions.get(sid, user.name)
            check_symbol_name(symbol, self.limits.max_name_length)
            check_handles(session, request.handles)
            node = self.tree(request, arithmetic=True)
            if isinstance(node, Call):
                # the audited function is the call's own (an expression such as ds.make's "D$age*2"
                # parses to a deriveDS call, so the record names deriveDS, not the request's label)
                function = record["function"] = node.function
                spec = self.spec(node.function, session)
                if spec.kind != "assign":
                    raise CallError(
                        f"{spec.name} is an aggregate function; its result cannot be stored as a symbol",
                        function=spec.name,
                    )
            elif not isinstance(node, (Symbol, Column)):
                raise CallError("an assign request must be a call, a symbol or table$column")
            with session.lock, self.scope(user, session, record) as scope:
                ctx = CallContext(self, session, function, self.guard(function, session))
                value = self.invoke(session, node) if isinstance(node, Call) else ctx.resolve(node)
                digest = definition(canonical_call(request), session, scope)
                session.definitions[symbol] = digest
                session.symbols[symbol] = kept_value(session.symbols, value)  # a subset: its row ids; a view
                session.sources[symbol] = frozenset(scope.sources)
                cls = r_class(value)
                said = value.attrs.get(NOTE) if function == "assignTable" and isinstance(value, pd.DataFrame) else None
        return {"symbol": symbol, "class": cls, "digest": digest, **({"note": said} if said else {})}

    def assign_table(self, user: User, sid: str, symbol: str, table: str, variables: list[str] | None
                     ) -> dict[str, str]:
        """Opal's table assignment, served by the registry's ``assignTable`` entry."""
        args: dict[str, Any] = {"table": {"lit": table}}
        if variables:
            args["variables"] = {"vec": list(variables)}
        return self.assign(user, sid, symbol, CallRequest(tree={"call": "assignTable", "kwargs": args}))
