"""The site service: one object holding a site's config, rules, data, registry,
sessions and audit log, with the operations both front doors call.

The HTTP API (:mod:`dsfed_server.api`, and the Opal routes beside it) calls these
methods; a site in the analyst's own process (:mod:`dsfed_server.inprocess`) is reached
through that same app, so a simulation run in one process exercises the code a deployed
site runs. Every operation is audited.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import logging
import math
import reprlib
import secrets
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import numpy as np
import pandas as pd

from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server import rbridge
from dsfed_server.access_log import STDERR, open_access_log
from dsfed_server.audit import AuditLog, audit_key
from dsfed_server.auth import Authenticator
from dsfed_core.calltree import Arg, Arith, Call, Column, Limits, Node, Symbol
from dsfed_server.catalog import Catalog
from dsfed_server.engines import open_engine
from dsfed_server.config import SiteConfig, User, load_site_config, read_secret, resolve
from dsfed_server.context import NOTE, CallContext, r_class
from dsfed_server.disclosure.checks import Guard, HistoryBehind, enforce_contract
from dsfed_server.disclosure.gate import Cut
from dsfed_server.disclosure.history import History
from dsfed_server.disclosure.accountant import ACCOUNTANT, ZERO, Caps, Cost, statement, use_of_remaining
from dsfed_server.disclosure.ledger import Ledger
from dsfed_server.disclosure.scope import CallScope
from dsfed_server.disclosure.rules import DEFAULT_PROFILE, Rules, load_rules
from dsfed_server.disclosure import gate, relay, secure_sum, shared_tables
from dsfed_server.disclosure.identifiers import refuse_identifiers
from dsfed_core.errors import (
    BackendUnavailable, CallError, DisclosureRefusal, Forbidden, InternalError, NotEnabled, NotFound, SiteError,
    StaleHandle, TooManyFailedLogins,
)
from dsfed_core.parser import from_json, parse
from dsfed_server.models import ModelStore, read_upload
from dsfed_server.onnx_model import ONNXModel
from dsfed_server.registry import REGISTRY, FunctionSpec, Registry, bind
from dsfed_server.views import kept_value
from dsfed_server.rvalues import opal_json
from dsfed_server.tomlfile import ConfigFileError, locate
from dsfed_server.workspace import Session, SessionStore, check_symbol_name

log = logging.getLogger("dsfed.site")


@dataclass(frozen=True)
class CallRequest:
    """A call as received: DataSHIELD text or the structured JSON form."""

    text: str | None = None
    tree: dict | None = None
    secure: dict | None = None  # secure-aggregation option: round, step, roster, frac_bits, pooled
    handles: dict[str, str] | None = None  # symbol name -> the definition digest the caller holds


def check_enabled(rules: Rules, rules_path: Path, registry: Registry) -> None:
    """Every function the rules file enables, at the top level and in each profile, must exist in the registry."""
    lists = [(("functions", "enabled"), rules.functions.enabled)]
    lists += [(("profiles", name, "enabled"), p.enabled) for name, p in getattr(rules, "profiles", {}).items()]
    for loc, enabled in lists:
        unknown = [name for name in enabled if registry.get(name) is None]
        if unknown:
            text = rules_path.read_text(encoding="utf-8")
            raise ConfigFileError(
                f"{rules_path}:{locate(text, loc)}: {'.'.join(loc)} lists unknown function(s) "
                f"{', '.join(unknown)}; known: {', '.join(registry.names())}"
            )


_SHORT = reprlib.Repr()  # bounded repr of structured calls for the audit log (long vectors elided)
_SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 8, 12, 120, 120, 6


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


def relayed_history(value: Any) -> dict[tuple[str, str], list[Cut]]:
    """The cut histories an analyst relays with a pooled release: ``[{"table", "column", "cuts":
    [[value, inclusive], ...]}, ...]`` (numbers and booleans only; checked, never evaluated)."""
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > 1000:
        raise CallError("pooled release: 'cuts' must be a list of {table, column, cuts}",
                        hint="relay the histories the sites answered with, unchanged")
    out: dict[tuple[str, str], list[Cut]] = {}
    for entry in value:
        table = entry.get("table") if isinstance(entry, dict) else None
        column = entry.get("column") if isinstance(entry, dict) else None
        cuts = entry.get("cuts") if isinstance(entry, dict) else None
        if not (isinstance(table, str) and isinstance(column, str) and isinstance(cuts, list) and len(cuts) <= 100_000):
            raise CallError("pooled release: a relayed history needs a table, a column and a list of cuts")
        parsed = []
        for cut in cuts:
            if not (isinstance(cut, list) and len(cut) == 2 and isinstance(cut[1], bool)
                    and isinstance(cut[0], (int, float)) and not isinstance(cut[0], bool) and math.isfinite(cut[0])):
                raise CallError("pooled release: a relayed cut is [value, inclusive] with a finite value")
            parsed.append(Cut(float(cut[0]), cut[1]))
        out[(table, column)] = sorted(set(parsed))
    return out


def canonical_call(request: CallRequest) -> str:
    """A call as received, in one canonical text (the structured form with sorted keys)."""
    return request.text if request.text is not None else json.dumps(request.tree, sort_keys=True)


# the arguments by which a noisy function takes the privacy an analyst asks for (never less than the site's)
PRIVACY_ARGUMENTS = ("epsilon", "delta", "sensitivity")
# where the native API lists the functions a site enables (the /ws door points to its own listing)
LIST_FUNCTIONS_HINT = "GET /v1/functions lists the functions this site enables"


def _symbols(node: Node) -> set[str]:
    """The workspace symbols a call tree names (symbols and the tables of columns, nested calls too)."""
    if isinstance(node, Symbol):
        return {node.name}
    if isinstance(node, Column):
        return {node.table}
    if isinstance(node, Call):
        return set().union(*(_symbols(a.value) for a in node.args))
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


def same_levels(site: str, meta: dict[str, Any], relayed: Any) -> None:
    """Refuse to sum a pooled table whose level labels differ between sites (a stray ``"F "`` at one):
    its cells would not line up. Names the first site that differs and the levels only one side has.
    Runs before the relayed vectors are opened; a forged declaration can only make this refuse."""
    own = meta.get("levels")
    if own is None or not isinstance(relayed, dict):
        return
    for sender in sorted(relayed):
        entry = relayed[sender]
        theirs = entry.get("meta", {}).get("levels") if isinstance(entry, dict) else None
        if sender == site or theirs is None or theirs == own:
            continue
        differ = []
        for axis, (mine, other) in enumerate(zip(own, theirs)):
            only_here, only_there = [v for v in mine if v not in other], [v for v in other if v not in mine]
            if only_here or only_there or mine != other:
                where = f"variable {axis + 1}: " if len(own) > 1 else ""
                differ.append(f"{where}{site} has {mine}, {sender} has {other}"
                              + (f" (only at {site}: {only_here})" if only_here else "")
                              + (f" (only at {sender}: {only_there})" if only_there else ""))
        raise CallError(f"the sites' levels differ, so their tables cannot be summed cell by cell: "
                        f"{'; '.join(differ) or f'{len(own)} against {len(theirs)} variables'}",
                        hint="make the levels agree at every site (the same categories in each data dictionary; "
                             "trim or recode stray spellings), or ask per site (secure=False), where the client "
                             "aligns the levels")


class SiteService:
    def __init__(
        self,
        config: SiteConfig,
        *,
        base_dir: Path,
        registry: Registry = REGISTRY,
    ) -> None:
        self.config = config
        self.name = config.site.name
        self.rules_path = resolve(base_dir, config.site.rules)
        self.rules = load_rules(self.rules_path)
        check_enabled(self.rules, self.rules_path, registry)
        # each profile's effective rules; "default" is the file's top level
        self.profile_rules: dict[str, Rules] = {name: self.rules.profile(name) for name in self.rules.profile_names}
        self.registry = registry
        self.catalog = Catalog(resolve(base_dir, config.site.data_dir), open_engine(config.catalog, base_dir))
        self.catalog.validate_all()
        self.identifiers = self.catalog.identifiers()  # columns no call may name (disclosure/identifiers.py)
        self.secret = read_secret(resolve(base_dir, config.site.secret_file))
        audit_log = resolve(base_dir, config.site.audit_log)
        self.audit = AuditLog(audit_log, self.name, audit_key(self.secret))
        # written by the HTTP front door only (api.py), one line per request
        access = config.site.access_log or str(audit_log.with_name(f"{self.name}-access.log"))
        self.access_log = open_access_log(None if access == STDERR else resolve(base_dir, access))
        self.identity = secure_sum.identity_key(self.secret)  # signs this site's secure-aggregation keys
        self.peers = {name: secure_sum.parse_identity(key) for name, key in config.federation.peers.items()}
        self.ledger = Ledger(resolve(base_dir, config.site.ledger))  # privacy budget spent, per analyst x table
        # cuts released per table column and subsets made per table, all analysts, persisted (history.py)
        self.history = History(resolve(base_dir, config.site.ledger))
        ledger = resolve(base_dir, config.site.ledger)
        self.models = ModelStore(resolve(base_dir, config.site.models_dir) if config.site.models_dir
                                 else ledger.with_name(ledger.stem + "-models"))
        self.sessions = SessionStore(config.site.session_idle_timeout_s, config.site.max_sessions_per_user,
                                     config.site.session_reclaim_after_s)
        self.auth = Authenticator(config.users, config.login)
        self.limits = Limits(
            max_length=self.rules.strings.max_length,
            max_name_length=self.rules.strings.max_name_length,
            max_depth=self.rules.parser.max_depth,
        )
        if self.rules.noise_off:
            log.warning(
                "site %s: DIFFERENTIAL-PRIVACY NOISE IS OFF (rules file %s): %s",
                self.name, self.rules_path, self.rules.privacy.no_noise_acknowledged,
            )
        needs_r = [n for n in self.rules.functions.enabled if registry.get(n).backend == "R"]  # type: ignore[union-attr]
        if needs_r and not rbridge.installed():
            log.warning("site %s: R is not available; %s will be refused: %s",
                        self.name, ", ".join(needs_r), rbridge.unavailable_reason())

    @classmethod
    def from_config_file(cls, path: str | Path) -> "SiteService":
        config, base = load_site_config(path)
        return cls(config, base_dir=base)

    # --- authentication ---------------------------------------------------------------

    def login_password(self, name: str, password: str, address: str = "in-process") -> User:
        return self._login(name, address, lambda: self.auth.by_password(name, password))

    def login_token(self, token: str, address: str = "in-process") -> User:
        return self._login("(API token)", address, lambda: self.auth.by_token(token))

    def _login(self, name: str, address: str, check: Callable[[], User]) -> User:
        """A login, throttled per client address and user name; a failure is audited (the name
        shortened to 64 characters), and of a throttled streak only the first refusal (a login
        refused because every password-check slot was busy checked nothing and is not recorded)."""
        shown = name if len(name) <= 64 else f"{name[:64]}...({len(name)} characters)"
        try:
            self.auth.check_throttle(address, name)
            return check()
        except TooManyFailedLogins as exc:
            if self.auth.throttle.first_refusal(address, name):
                self.audit.record(user=shown, session=None, function="login", kind="auth", call="", address=address,
                                  outcome=exc.kind, rule=exc.rule, message=f"{exc.message}; {exc.hint}")
            raise exc.at(site=self.name)
        except SiteError as exc:
            self.auth.throttle.failed(address, name)
            self.audit.record(user=shown, session=None, function="login", kind="auth", call="", address=address,
                              outcome="unauthenticated", rule=None, message=exc.message)
            raise exc.at(site=self.name)

    # --- auditing ---------------------------------------------------------------------

    @contextmanager
    def _audited(self, user: User, session: str | None, function: str, kind: str, call: str) -> Iterator[dict]:
        """Record the operation's outcome; the body may fill in fields (e.g. a new session id)."""
        base = {"user": user.name, "session": session, "function": function, "kind": kind, "call": call}
        try:
            yield base
        except SiteError as exc:
            exc.at(site=self.name, function=function if function not in ("?", "") else None)
            outcome = "refused" if isinstance(exc, DisclosureRefusal) else exc.kind  # NotEnabled is one
            if isinstance(exc, InternalError):  # e.g. a broken contract: the administrator's to see
                log.error("site %s: %s", self.name, exc)
            self.audit.record(**base, outcome=outcome, rule=exc.rule, message=exc.message)
            raise
        except Exception as exc:  # an implementation bug: HTTP 500 with an id, never a 4xx
            raise self.internal_error(exc, base) from None
        else:
            self.audit.record(**base, outcome="ok", rule=None, message="")

    def internal_error(self, exc: Exception, fields: dict[str, Any]) -> InternalError:
        """An unexpected exception (a bug, never the analyst's doing) as the error the analyst sees:
        a fresh error id, logged with the traceback and recorded in the audit log, so the site's
        administrator finds one from the other. Call from an ``except`` block."""
        error_id = secrets.token_hex(8)
        function = str(fields.get("function") or "?")
        log.exception("site %s: internal error %s in %s", self.name, error_id, function)
        record = self.audit.record(**{"user": None, "session": None, "kind": "internal", "call": "", **fields,
                                      "function": function, "outcome": "internal_error", "rule": None,
                                      "error_id": error_id, "message": repr(exc)[:300]})
        return InternalError(f"internal error {error_id} while running {function}", site=self.name,
                             function=function if function != "?" else "",
                             hint=f"a fault of the site, not of the call: its administrator finds error id {error_id} "
                                  f"in the server log and audit record {record['seq']}")

    def _require_role(self, user: User, role: str) -> None:
        if user.role != role:
            raise Forbidden(f"this needs the {role} role; user {user.name!r} has {user.role!r}").at(site=self.name)

    # --- sessions ---------------------------------------------------------------------

    def open_session(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """Open a session whose calls follow ``profile``'s enabled functions and rules."""
        call = "" if profile == DEFAULT_PROFILE else f"profile={profile}"
        with self._audited(user, None, "openSession", "session", call) as record:
            self._require_role(user, "analyst")
            self._check_profile(profile)
            session, reclaimed = self.sessions.open(user.name, profile)
            record["session"] = session.id
            if reclaimed is not None:
                record["call"] += f" (reclaimed idle session {reclaimed})"
        return {"session": session.id, "site": self.name, "profile": profile}

    def _check_profile(self, profile: str) -> None:
        if profile not in self.profile_rules:
            raise NotFound(f"no profile {profile!r} at this site",
                           hint=f"profiles: {', '.join(self.profile_rules)}")

    def _rules(self, session: Session | None) -> Rules:
        """The rules of the session's profile (the site's own rules without a session)."""
        return self.profile_rules[session.profile if session is not None else DEFAULT_PROFILE]

    def close_session(self, user: User, sid: str) -> None:
        with self._audited(user, sid, "closeSession", "session", ""):
            self.sessions.close(sid, user.name)

    def session_exists(self, user: User, sid: str) -> dict[str, Any]:
        with self._audited(user, sid, "getSession", "session", ""):
            session = self.sessions.get(sid, user.name)
        return {"session": session.id, "site": self.name, "profile": session.profile, "symbols": len(session.symbols)}

    def symbols(self, user: User, sid: str) -> list[dict[str, str]]:
        with self._audited(user, sid, "listSymbols", "session", ""):
            session = self.sessions.get(sid, user.name)
            with session.lock:
                return [{"name": k, "class": r_class(v)} for k, v in sorted(session.symbols.items())]

    def remove_symbol(self, user: User, sid: str, name: str) -> None:
        with self._audited(user, sid, "removeSymbol", "session", name):
            session = self.sessions.get(sid, user.name)
            with session.lock:
                session.get(name)
                del session.symbols[name]
                session.sources.pop(name, None)
                session.definitions.pop(name, None)

    # --- calls ------------------------------------------------------------------------

    def _tree(self, request: CallRequest, *, arithmetic: bool = False) -> Node:
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
        return refuse_identifiers(node, self.identifiers)

    @staticmethod
    def _label(request: CallRequest) -> tuple[str, str]:
        """Function name and call text for the audit log, even for calls that do not parse."""
        if request.text is not None:
            head = request.text.split("(", 1)[0].strip()
            if "(" not in request.text and "$" in head:
                head = "$"
            return (head if head.isidentifier() or head == "$" else "?"), request.text[:2000]
        tree = request.tree if isinstance(request.tree, dict) else {}
        name = tree.get("call") if isinstance(tree.get("call"), str) else "?"
        return name, _SHORT.repr(request.tree)

    def _spec(self, name: str, session: Session | None = None) -> FunctionSpec:
        spec = self.registry.get(name)
        if spec is None:
            shown = name if len(name) <= 40 else f"{name[:37]}..."
            raise CallError(
                f"{shown!r} is not a registered function; nothing else can be called",
                function=name, hint=LIST_FUNCTIONS_HINT,
            )
        profile = session.profile if session is not None else DEFAULT_PROFILE
        if name not in self._rules(session).functions.enabled:
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

    def _invoke(self, session: Session, call: Call, *, noise_share: float = 1.0,
                deferred: list[tuple[str, int]] | None = None,
                relayed_cuts: dict[tuple[str, str], list[Cut]] | None = None, relayed: bool = False) -> Any:
        """Run ``call``. A declaration of cells (:mod:`~dsfed_server.disclosure.gate`) goes through the
        release gate per site; in a pooled release (``deferred``: the minimum counts to check on the
        pooled counts; ``relayed_cuts``: the sites' cut histories) it is returned as it is, for the
        gate to release pooled. ``relayed``: the first step of a relayed protocol (checked per site)."""
        spec = self._spec(call.function, session)
        if spec.pooled_only and deferred is None:
            raise CallError(f"{spec.name} runs only as a pooled release over the sites (secure aggregation)",
                            function=spec.name, hint="ask with the pooled option (the dsfed client: secure=True)")
        guard = self._guard(spec.name, session, noise_share, deferred, relayed_cuts)
        ctx = CallContext(self, session, spec.name, guard, relayed)
        try:
            bound = bind(spec, call.args, ctx)
            guard.check_analyst_data(spec.params, bound)
            args = {python_name(name): value for name, value in bound.items()}
            result = spec.impl(ctx, **args)
            if isinstance(result, (gate.Intervals, gate.Categories)) and deferred is None:
                result = guard.release(result)
            enforce_contract(guard, spec.checks)
            return result
        except SiteError as exc:
            raise exc.at(site=self.name, function=spec.name)
        finally:
            if session.scope is not None:
                session.scope.note_rules(spec.name, spec.checks, guard.applied)

    def _guard(self, function: str, session: Session | None = None, noise_share: float = 1.0,
               deferred: list[tuple[str, int]] | None = None,
               relayed_cuts: dict[tuple[str, str], list[Cut]] | None = None) -> Guard:
        return Guard(self._rules(session), self.name, function, self.secret,
                     scope=session.scope if session is not None else None, history=self.history,
                     kept=self.catalog.kept, noise_share=noise_share, deferred=deferred, relayed_cuts=relayed_cuts)

    @contextmanager
    def _scope(self, user: User, session: Session, record: dict) -> Iterator[CallScope]:
        """One call's reads and noisy releases (held under the session lock); on success the
        releases are spent in the ledger and the audit record carries the spend."""
        scope = CallScope(user.name, self.ledger, Caps.of(self.rules.budget), secret=self.secret)
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
        spec = self._spec(call.function, session)
        if spec.kind != "assign":
            raise CallError(
                f"{spec.name} is an aggregate function and cannot be an argument of another call",
                function=spec.name,
            )
        return self._invoke(session, call)

    def aggregate(self, user: User, sid: str, request: CallRequest, *,
                  shape: Literal["native", "opal", "r"] = "native") -> Any:
        """Run an aggregate function; its checked result as JSON.

        ``shape="opal"`` gives the JSON Opal's DataSHIELD API gives for dsBase's
        R result (the entry's ``opal_shape``, encoded as Opal's R server does: ``jsonlite::toJSON``,
        or ``serializeJSON``'s typed form for a value ``toJSON`` refuses); ``shape="r"`` that R
        result itself, as :mod:`dsfed_server.rvalues` values, for the Opal door to encode as its
        client asks (that JSON, or R's serialization).
        """
        function, text = self._label(request)
        with self._audited(user, sid, function, "aggregate", text) as record:
            session = self.sessions.get(sid, user.name)
            check_handles(session, request.handles)
            node = self._tree(request)
            if not isinstance(node, Call):
                raise CallError("an aggregate request must be a function call such as meanDS(D$age)")
            spec = self._spec(node.function, session)
            if spec.kind != "aggregate":
                raise CallError(
                    f"{spec.name} is an assign function; use assign with a symbol name",
                    function=spec.name,
                )
            if request.secure is not None:
                with session.lock, self._scope(user, session, record) as scope:
                    return self._secure_aggregate(user, session, spec, node, request, scope, record)
            if spec.secure_sum is not None:
                secure_sum.check_plain_release(spec.name, self._rules(session).secure_aggregation)
            with session.lock, self._scope(user, session, record):
                result = jsonable(self._invoke(session, node))
            if shape != "native":
                result = spec.opal_shape(result) if spec.opal_shape else result
                if shape == "opal":
                    result = opal_json(result)
        return result

    def _round(self, session: Session, option: dict[str, Any]) -> secure_sum.Round:
        round_id = secure_sum.check_round_id(option.get("round"))
        rnd = session.rounds.get(round_id)
        if rnd is None:
            raise CallError(f"no keys for secure-aggregation round {round_id} in this session",
                            hint="call secureKeyDS(round) at every site first")
        return rnd

    def _round_keys(self, session: Session, option: dict[str, Any], *, hiding: bool = True
                    ) -> tuple[secure_sum.Round, dict[str, bytes]]:
        """The session's keys for the option's round, and the roster's keys after every check; a sum
        that must hide each site (``hiding``) needs ``secure_aggregation.min_sites`` sites, a relayed
        protocol (checked per site) needs only its peers to be authentic."""
        rules = self._rules(session).secure_aggregation
        rnd = self._round(session, option)
        return rnd, secure_sum.verify_roster(self.name, rnd, option.get("roster"), self.peers,
                                             rules.min_sites if hiding else 1)

    def _secure_aggregate(self, user: User, session: Session, spec: FunctionSpec, node: Call,
                          request: CallRequest, scope: CallScope, record: dict) -> dict[str, Any]:
        """Run ``node`` and release only its summable fields, masked for a secure sum
        (:mod:`dsfed_server.disclosure.secure_sum`), or, with the ``pooled`` option, sealed for the
        other sites (:meth:`_seal_pooled`). DP noise is split as ``secure_aggregation.honest_sites`` says."""
        option = request.secure or {}
        if option.get("relayed"):
            return self._seal_relayed(session, spec, node, request, scope, record)
        if option.get("pooled"):
            return self._seal_pooled(user, session, spec, node, request, scope, record)
        if spec.secure_sum is None:
            offered = [s.name for s in self.registry if s.secure_sum is not None]
            hint = "ask for a pooled release (the 'pooled' option)" if spec.cells else \
                f"functions that do: {', '.join(offered)}"
            raise CallError(f"{spec.name} does not offer secure summation", hint=hint)
        rules = self._rules(session).secure_aggregation
        rnd, keys = self._round_keys(session, option)
        frac_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [secure sum over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}]"
        result = jsonable(self._invoke(session, node, noise_share=secure_sum.noise_share(rules, len(keys))))
        secure_sum.check_peer_set(self.ledger.pin_peers(user.name, scope.sources, keys), keys, user.name, rules)
        call = definition(canonical_call(request), session, scope)
        return secure_sum.masked_result(result, spec.secure_sum.fields, spec.secure_sum.public, site=self.name,
                                        rnd=rnd, keys=keys, step=step, frac_bits=frac_bits, call=call)

    def _seal_pooled(self, user: User, session: Session, spec: FunctionSpec, node: Call, request: CallRequest,
                     scope: CallScope, record: dict) -> dict[str, Any]:
        """First half of a pooled release (:mod:`dsfed_server.disclosure.relay`): run the call, seal this
        site's counts and sums for the other sites, and keep how to release them once they are pooled."""
        if not spec.poolable:
            offered = [s.name for s in self.registry if s.poolable]
            raise CallError(f"{spec.name} does not offer pooled release", hint=f"functions that do: {', '.join(offered)}")
        rules = self._rules(session)
        option = request.secure or {}
        rnd, keys = self._round_keys(session, option)
        if not (rules.secure_aggregation.pooled_thresholds and all(rnd.pooled_peers.values())):
            who = "this site" if not rules.secure_aggregation.pooled_thresholds else ", ".join(
                sorted(s for s, v in rnd.pooled_peers.items() if not v))
            raise DisclosureRefusal(
                f"a pooled release needs every site of the round to check the pooled cells; {who} does not",
                rule="secure_aggregation.pooled_thresholds",
                hint="ask per site (without the pooled option), or ask the sites' governance to set pooled_thresholds")
        frac_bits = asked_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [pooled over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: sealed]"
        deferred: list[tuple[str, int]] = []
        noise = secure_sum.noise_share(rules.secure_aggregation, len(keys))
        relayed = relayed_history(option.get("cuts"))
        try:
            raw = self._invoke(session, node, noise_share=noise, deferred=deferred, relayed_cuts=relayed)
            guard = self._guard(spec.name, session, relayed_cuts=relayed)
            if isinstance(raw, gate.Intervals):
                history = guard.pooled_history(raw.history_key)
        except HistoryBehind as behind:  # the analyst relays the union next time; nothing is sealed
            return {"history": self._history_answer(behind.key)}
        secure_sum.check_peer_set(self.ledger.pin_peers(user.name, scope.sources, keys), keys, user.name,
                                  rules.secure_aggregation)
        history_key = raw.history_key if isinstance(raw, gate.Intervals) else None
        if isinstance(raw, (gate.Intervals, gate.Categories)):
            plan, fields = gate.pooled_vector(raw, history if isinstance(raw, gate.Intervals) else (),
                                              dominance=self._floor_meta(rules)["dominance"] > 0)

            def finish(pooled: dict[str, np.ndarray], floor: gate.Floor) -> Any:
                def released(release: gate.PooledRelease) -> Any:
                    if isinstance(raw, gate.Intervals):
                        guard.record_pooled(raw.history_key, release.root_cuts)
                    return release.result

                return None, guard.coarsened(lambda exclude: gate.release_pooled(raw, plan, pooled, floor, exclude),
                                             raw.rows, released)
        elif isinstance(raw, relay.PooledSteps):
            fields, finish = raw.fields, raw.advance
            frac_bits = raw.frac_bits if raw.frac_bits is not None else asked_bits
            history_key = raw.history_key
        else:
            result = jsonable(raw)
            fields = {name: np.asarray(result[name], dtype=float) for name in spec.secure_sum.fields  # type: ignore[union-attr]
                      if name in result}
            public = {name: result[name] for name in spec.secure_sum.public if name in result}  # type: ignore[union-attr]

            def finish(pooled: dict[str, np.ndarray], floor: gate.Floor) -> Any:
                return {**public, **{name: v.tolist() if v.ndim else float(v) for name, v in pooled.items()},
                        "pooled": True}
        fields = {**fields, **{f"min:{i}:{what}": np.asarray(float(n)) for i, (what, n) in enumerate(deferred)}}
        call = definition(canonical_call(request), session, scope) + "\0cuts:" + json.dumps(
            {f"{t}${c}": [[v.value, v.inclusive] for v in cuts] for (t, c), cuts in sorted(relayed.items())})
        digest = secure_sum.call_digest(call, frac_bits)  # the cuts too: every site bins on the same cells
        meta = self._floor_meta(rules)
        if isinstance(raw, gate.Intervals):
            meta.update(gate.dictionary_meta(raw.column))
        if isinstance(raw, gate.Categories) and raw.labels:
            meta["levels"] = [list(axis) for axis in raw.labels]
        return self._seal(rnd, keys, step, spec.name, digest, fields, finish, frac_bits, meta,
                          frozenset(scope.sources), history_key, asked_bits=asked_bits)

    def _seal_relayed(self, session: Session, spec: FunctionSpec, node: Call, request: CallRequest,
                      scope: CallScope, record: dict) -> dict[str, Any]:
        """First step of a relayed protocol (:mod:`dsfed_server.disclosure.relay`): as a pooled one,
        the sites derive every step's parameters from the summed step before, never taking them
        from the analyst (data-dependent parameters come from the sites), but every count is checked
        here, per site, before anything is sealed, and the round needs no more sites than its peers (a
        GLM fit at two sites, or at sites that check per site only). The analyst receives the sums over the sites."""
        if not spec.relayable:
            offered = ", ".join(s.name for s in self.registry if s.relayable)
            raise CallError(f"{spec.name} does not offer a relayed protocol", hint=f"functions that do: {offered}")
        option = request.secure or {}
        rnd, keys = self._round_keys(session, option, hiding=False)
        frac_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [relayed over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: sealed]"
        raw = self._invoke(session, node, relayed=True)
        if not isinstance(raw, relay.PooledSteps):
            raise CallError(f"{spec.name} with these arguments is no protocol of several steps, so it is not relayed",
                            hint="leave out the arguments the sites derive themselves (glmDS2: beta.vect)")
        digest = secure_sum.call_digest(definition(canonical_call(request), session, scope) + "\0relayed",
                                        raw.frac_bits if raw.frac_bits is not None else frac_bits)
        return self._seal(rnd, keys, step, spec.name, digest, raw.fields, raw.advance,
                          raw.frac_bits if raw.frac_bits is not None else frac_bits,
                          self._floor_meta(self._rules(session), pooled=False), frozenset(scope.sources), raw.history_key,
                          relayed=True, asked_bits=frac_bits)

    @staticmethod
    def _floor_meta(rules: Rules, pooled: bool = True) -> dict[str, Any]:
        """What a site declares to the others of a step: its q, cut margin and, for a pooled release, its
        dominance rule (they use the largest; :func:`gate.pooled_floor`; a relayed protocol checks per site)."""
        return {"q": rules.disclosure.q_threshold, "margin": rules.disclosure.margin,
                "dominance": rules.secure_aggregation.dominance_sites if pooled else 0}

    def _seal(self, rnd: secure_sum.Round, keys: dict[str, bytes], step: int, function: str, digest: bytes,
              fields: dict[str, np.ndarray], finish: Any, frac_bits: int, meta: dict[str, Any],
              sources: frozenset, history_key: tuple[str, str] | None = None, relayed: bool = False,
              asked_bits: int | None = None) -> dict[str, Any]:
        """Encode ``fields`` in fixed point, mask them, seal them for every peer and keep them (with
        ``finish``, what the pooled vector becomes) until the analyst relays the others'. A step on a
        table column carries this site's share of the key of the gate's draws (:func:`gate.nonce`)."""
        if history_key is not None:
            shared_tables.check_round(history_key, keys)  # a label names the round's sites, no others
            fields = {**fields, gate.NONCE: gate.nonce(self.secret, history_key)}
        layout = {name: list(np.shape(v)) for name, v in fields.items()}
        flat = [secure_sum.encode_fixed(np.ravel(v), frac_bits, len(keys)) for v in fields.values()]
        clipped = sum(c for _, c in flat)
        encoded = np.concatenate([v for v, _ in flat] + [np.array([clipped], dtype=np.uint64)])
        masked = encoded + secure_sum.mask(self.name, rnd, keys, step, digest, encoded.size)
        while len(rnd.pending) >= relay.MAX_PENDING:
            rnd.pending.pop(next(iter(rnd.pending)))
        rnd.pending[step] = relay.PendingStep(function, digest, masked, layout, frac_bits, meta, finish, sources,
                                              history_key, relayed, asked_bits)
        return {"pooled": {"round": rnd.round_id, "step": step, "site": self.name, "meta": meta,
                           "sealed": relay.seal(self.name, rnd, keys, step, digest, masked, meta)}}

    def release_pooled(self, user: User, sid: str, option: dict[str, Any]) -> dict[str, Any]:
        """Second half of a pooled release: open the vectors the other sites sealed for this site (the
        analyst relays them), add them to this site's own, check the pooled cells against this site's
        rules with the largest q of the sites, and release the pooled result (the same at every site):
        ``{"release": ...}``, with ``"continue"``: this site's sealed next step of a protocol of several
        steps, or ``"clipped"``: how many values did not fit the fixed-point range (nothing released)."""
        step = option.get("step")
        with self._audited(user, sid, "pooledRelease", "aggregate", f"step {step}") as record:
            session = self.sessions.get(sid, user.name)
            with session.lock:
                rnd = self._round(session, option)
                pending = rnd.pending.pop(step, None) if isinstance(step, int) else None
                if pending is None:
                    raise CallError(f"no sealed pooled step {step!r} in round {rnd.round_id} of this session",
                                    hint="seal the step first (the 'pooled' option), then relay every site's answer "
                                         "once")
                _, keys = self._round_keys(session, option, hiding=not pending.relayed)
                record["function"] = pending.function
                record["call"] = f"{pending.function} [{'relayed' if pending.relayed else 'pooled'} over " \
                                 f"{','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: released]"
                try:
                    return self._open_pooled(session, rnd, keys, step, pending, option)
                except SiteError as exc:
                    raise exc.at(site=self.name, function=pending.function)

    def _open_pooled(self, session: Session, rnd: secure_sum.Round, keys: dict[str, bytes], step: int,
                     pending: relay.PendingStep, option: dict[str, Any]) -> Any:
        same_levels(self.name, pending.meta, option.get("relay"))
        total, metas = relay.open_relay(self.name, rnd, keys, step, pending, option.get("relay"))
        fields, clipped = relay.decode(total, pending.layout, pending.frac_bits)
        if clipped:  # the analyst learns how many values did not fit, not where: it asks again with fewer bits
            return {"release": None, "clipped": clipped}
        floor = gate.pooled_floor(metas, fields)  # takes the key's shares out of the fields
        guard = self._guard(pending.function, session)
        for name in [name for name in fields if name.startswith("min:")]:
            guard.pooled_minimum(name.split(":", 2)[2], float(fields.pop(name)), floor.q)  # min:<i>:<kind>:<what>
        out = pending.finish(fields, floor)
        history = {} if pending.history_key is None else {"history": self._history_answer(pending.history_key)}
        if not isinstance(out, tuple):
            return {"release": jsonable(out), **history}
        release, following = out  # a protocol of several steps (relay.PooledSteps)
        if following is None:
            return {"release": jsonable(release), **history}
        next_step = secure_sum.use_step(rnd, option.get("next_step"))
        digest = hashlib.sha256(pending.call + b"\0next").digest()  # the same at every site of the round
        asked = pending.asked_bits if pending.asked_bits is not None else pending.frac_bits
        frac_bits = following.frac_bits if following.frac_bits is not None else asked
        sealed = self._seal(rnd, keys, next_step, pending.function, digest, following.fields, following.advance,
                            frac_bits, pending.meta, pending.sources, following.history_key or pending.history_key,
                            pending.relayed, asked_bits=asked)
        return {"release": jsonable(release), "continue": sealed["pooled"], **history}

    def _history_answer(self, key: tuple[str, str]) -> dict[str, Any]:
        """This site's cut history of a column, as a pooled release's answers carry it (the analyst
        relays the union of the sites' histories with the next pooled release on the column)."""
        return {"table": key[0], "column": key[1],
                "cuts": [[c.value, c.inclusive] for c in self.history.cuts(*shared_tables.own_key(key, self.name))]}

    def assign(self, user: User, sid: str, symbol: str, request: CallRequest) -> dict[str, str]:
        function, text = self._label(request)
        with self._audited(user, sid, function, "assign", f"{symbol} <- {text}") as record:
            session = self.sessions.get(sid, user.name)
            check_symbol_name(symbol, self.limits.max_name_length)
            check_handles(session, request.handles)
            node = self._tree(request, arithmetic=True)
            if isinstance(node, Call):
                # the audited function is the call's own (an expression such as ds.make's "D$age*2"
                # parses to a deriveDS call, so the record names deriveDS, not the request's label)
                function = record["function"] = node.function
                spec = self._spec(node.function, session)
                if spec.kind != "assign":
                    raise CallError(
                        f"{spec.name} is an aggregate function; its result cannot be stored as a symbol",
                        function=spec.name,
                    )
            elif not isinstance(node, (Symbol, Column)):
                raise CallError("an assign request must be a call, a symbol or table$column")
            with session.lock, self._scope(user, session, record) as scope:
                ctx = CallContext(self, session, function, self._guard(function, session))
                value = self._invoke(session, node) if isinstance(node, Call) else ctx.resolve(node)
                digest = definition(canonical_call(request), session, scope)
                session.definitions[symbol] = digest
                session.symbols[symbol] = kept_value(session.symbols, value)  # a subset: its row ids; a view
                session.sources[symbol] = frozenset(scope.sources)
                cls = r_class(value)
                said = value.attrs.get(NOTE) if function == "assignTable" and isinstance(value, pd.DataFrame) else None
        return {"symbol": symbol, "class": cls, "digest": digest, **({"note": said} if said else {})}

    def assign_table(self, user: User, sid: str, symbol: str, table: str, variables: list[str] | None) -> dict[str, str]:
        """Opal's table assignment, served by the registry's ``assignTable`` entry."""
        args: dict[str, Any] = {"table": {"lit": table}}
        if variables:
            args["variables"] = {"vec": list(variables)}
        return self.assign(user, sid, symbol, CallRequest(tree={"call": "assignTable", "kwargs": args}))

    # --- what the site offers -----------------------------------------------------------

    def functions(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """The functions ``profile`` enables, documented."""
        call = "" if profile == DEFAULT_PROFILE else f"profile={profile}"
        with self._audited(user, None, "listFunctions", "metadata", call):
            self._check_profile(profile)
            entries = []
            for name in self.profile_rules[profile].functions.enabled:
                spec = self.registry.get(name)
                info = spec.describe()  # type: ignore[union-attr]
                info["available"] = spec.backend != "R" or rbridge.installed()  # type: ignore[union-attr]
                entries.append(info)
        rules = self.profile_rules[profile]
        # the thresholds in force, as governance reads them in the rules file (nothing secret)
        public = {section: getattr(rules, section).model_dump()
                  for section in ("disclosure", "bins", "privacy", "budget", "secure_aggregation")}
        return {"site": self.name, "profile": profile, "noise_off": self.rules.noise_off, "rules": public,
                "functions": entries}

    def profiles(self, user: User) -> list[dict[str, Any]]:
        """The site's profiles (Opal's DataSHIELD profiles): name and enabled functions."""
        with self._audited(user, None, "listProfiles", "metadata", ""):
            return [{"name": name, "functions": list(rules.functions.enabled)}
                    for name, rules in self.profile_rules.items()]

    def tables(self, user: User) -> list[dict[str, Any]]:
        with self._audited(user, None, "listTables", "metadata", ""):
            return [t.describe() for t in self.catalog.tables()]

    def upload_model(self, user: User, data: bytes) -> dict[str, Any]:
        """Store a model file an analyst sends, if the rules approve it (:func:`~dsfed_server.models.
        read_upload`), under its SHA-256; the audit record names the digest, refused ones too."""
        with self._audited(user, None, "uploadModel", "model", f"{len(data)} bytes") as record:
            self._require_role(user, "analyst")
            model = read_upload(data, self._guard("uploadModel"))
            record["call"] = f"sha256 {model.sha256} ({len(data)} bytes)"
            sha256 = self.models.put(model)
            names = [entry.name for entry in self.rules.models.approved if entry.sha256 == sha256]
            if isinstance(model, ONNXModel):
                return {"site": self.name, "sha256": sha256, "approved_as": names, "format": "onnx",
                        "inputs": [spec.name for spec in model.inputs], "outputs": [n for n, _ in model.outputs]}
            return {"site": self.name, "sha256": sha256, "approved_as": names, "format": "glm",
                    "formula": model.formula, "family": model.family, "link": model.link, "inputs": model.inputs}

    def cost(self, user: User, sid: str, request: CallRequest) -> dict[str, Any]:
        """What a call would charge the caller's privacy budget on each table it reads, and what the
        caller has left there, without running it (OpenDP's privacy map).

        A noisy function's mechanism follows from the site's rules and the call's own privacy
        arguments (``epsilon``, ``delta``, ``sensitivity``), never from the data, so the charge is
        known before the call: at most this (a release the ledger charged before, for anyone,
        costs nothing again). Nothing is computed from the records, released or spent."""
        function, text = self._label(request)
        with self._audited(user, sid, function, "cost", text):
            session = self.sessions.get(sid, user.name)
            check_handles(session, request.handles)
            node = self._tree(request)
            if not isinstance(node, Call):
                raise CallError("a cost request must be a function call such as scoreHistogramDS(D$y, D$score)")
            with session.lock:
                charge = self._privacy_map(session, node)
                tables = sorted(set().union(*(session.sources.get(name, frozenset()) for name in _symbols(node))))
            caps, share = Caps.of(self.rules.budget), self.rules.budget.warn_share

            def entry(table: str) -> dict[str, Any]:
                mine, everyone = self.ledger.total(table, user.name), self.ledger.total(table)
                uses = {"analyst": use_of_remaining(mine, charge, caps.analyst, share),
                        "table": use_of_remaining(everyone, charge, caps.table, share)}
                return {"table": table, "charge": {"epsilon": charge.epsilon, "delta": charge.delta, "rho": charge.rho},
                        **statement(mine, caps.analyst), "uses": uses,
                        "warn": any(u["warn"] for u in uses.values())}

            return {"site": self.name, "function": node.function, "accountant": ACCOUNTANT,
                    "budget": {"epsilon": caps.analyst.epsilon, "delta": caps.analyst.delta}, "warn_share": share,
                    "tables": [entry(table) for table in tables]}

    def _privacy_map(self, session: Session, call: Call) -> Cost:
        """The cost of ``call`` and of the calls nested in it: one release of each noisy function's
        mechanism (releases of one call over disjoint records compose in parallel)."""
        nested = sum((self._privacy_map(session, a.value) for a in call.args if isinstance(a.value, Call)), ZERO)
        spec = self._spec(call.function, session)
        if "privacy.mechanism" not in spec.checks:
            return nested
        guard = self._guard(spec.name, session)
        try:
            asked = bind(spec, call.args, CallContext(self, session, spec.name, guard), only=PRIVACY_ARGUMENTS)
            mechanism = guard.mechanism(**{name: asked.get(name) for name in PRIVACY_ARGUMENTS})
        except SiteError as exc:
            raise exc.at(site=self.name, function=spec.name)
        return nested if mechanism is None else nested + Cost.of(mechanism)

    def budget(self, user: User) -> dict[str, Any]:
        """Governance: privacy budget spent and remaining per table (all analysts) and per analyst x
        table (the ledger)."""
        with self._audited(user, None, "listBudget", "governance", ""):
            self._require_role(user, "governance")
            caps = Caps.of(self.rules.budget)
            rows = self.ledger.listing()
            tables: dict[str, Cost] = {}
            for row in rows:
                tables[row["table"]] = tables.get(row["table"], ZERO) + row["cost"]
            return {
                "site": self.name, "accountant": ACCOUNTANT, "budget": caps.as_dict(),
                "warn_share": self.rules.budget.warn_share,
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
        with self._audited(user, None, "listMyBudget", "metadata", ""):
            cap = Caps.of(self.rules.budget).analyst
            return {
                "site": self.name, "analyst": user.name, "accountant": ACCOUNTANT,
                "budget": {"epsilon": cap.epsilon, "delta": cap.delta}, "warn_share": self.rules.budget.warn_share,
                "tables": [{"table": row["table"], **statement(row["cost"], cap), "queries": row["queries"],
                            "releases": row["releases"], "last": row["last"]}
                           for row in self.ledger.listing() if row["analyst"] == user.name],
            }

    def audit_records(self, user: User) -> list[dict[str, Any]]:
        with self._audited(user, None, "readAudit", "governance", ""):
            self._require_role(user, "governance")
            return self.audit.read()

    def audit_verify(self, user: User) -> dict[str, Any]:
        """Governance: the audit chain verified here with the site's key, and its head (keep a copy
        outside the site: a later verify with it detects a rewrite)."""
        with self._audited(user, None, "verifyAudit", "governance", ""):
            self._require_role(user, "governance")
            report = self.audit.verify()
            return {"ok": report.ok, "records": report.records, "message": str(report), "head": self.audit.head}
