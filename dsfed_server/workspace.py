"""Analyst sessions and their workspaces of server-side symbols.

Each session belongs to one user; only that user can use it. Symbols hold
tables (pandas DataFrames, or subsets of them as row positions:
:mod:`dsfed_server.rowsets`) and vectors (pandas Series, or derived columns and
predictions as how they are computed: :mod:`dsfed_server.views`) and never leave
the site. Idle sessions expire after the site's configured timeout.
"""

from __future__ import annotations

import re
import secrets
import threading
import weakref
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from dsfed_core.errors import CallError, Forbidden, NotFound

_SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9._]*")
RESERVED_SYMBOLS = {"TRUE", "FALSE", "NULL", "NA", "Inf", "NaN", "c", "function"}


def symbol_name_schema(max_length: int) -> dict[str, Any]:
    """The JSON Schema of the names :func:`check_symbol_name` accepts (for the OpenAPI document)."""
    return {"type": "string", "pattern": f"^{_SYMBOL.pattern}$", "maxLength": max_length,
            "description": f"a symbol name; not one of R's reserved words {', '.join(sorted(RESERVED_SYMBOLS))}"}


def check_symbol_name(name: str, max_length: int) -> str:
    if not isinstance(name, str) or not _SYMBOL.fullmatch(name) or name in RESERVED_SYMBOLS:
        raise CallError(
            f"{name!r} is not a valid symbol name",
            hint="use letters, digits, '.' and '_', starting with a letter",
        )
    if len(name) > max_length:
        raise CallError(
            f"symbol name {name!r} is longer than {max_length} characters",
            rule="strings.max_name_length",
        )
    return name


@dataclass
class Session:
    id: str
    owner: str
    created: float
    last_used: float
    profile: str = "default"  # the rules-file profile whose functions and rules apply
    symbols: dict[str, Any] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _memo: OrderedDict = field(default_factory=OrderedDict, repr=False)
    # provenance: the site tables (project.table) each symbol's value was computed from;
    # empty for values the analyst supplied (e.g. referenceScoresDS). Drives the privacy
    # ledger's table key and the rule on analyst-supplied vectors.
    sources: dict[str, frozenset] = field(default_factory=dict, repr=False)
    scope: Any = field(default=None, repr=False)  # the running call's CallScope (ledger.py)
    # how each symbol was made: a digest of its assign call and of the definitions of the symbols
    # that call read (secure sums bind their masks to the definitions their call reads)
    definitions: dict[str, str] = field(default_factory=dict, repr=False)
    # secure-aggregation rounds: this site's X25519 key pair per round (never released)
    rounds: dict[str, Any] = field(default_factory=dict, repr=False)
    # site table -> the label pooled releases name it by (assignTable's per-site map: shared_tables.py)
    shared_tables: dict[str, str] = field(default_factory=dict, repr=False)
    # (reference, records, scores) -> the cuts, and the gate's description, of the cells a pooled release of the
    # reference's bins released for those records once every site's audit passed them: what a table built from
    # the reference for a pooled fit, or the pooled paired sums, read it at (functions/curves.py)
    pooled_cells: dict[tuple[bytes, bytes, bytes], tuple] = field(default_factory=dict, repr=False)

    def recall(self, key: tuple, source: object) -> Any:
        """The value :meth:`memo` keeps under ``key`` for ``source``, or None where it keeps none (a value
        whose building declares releases is built by its caller, and kept with :meth:`memo`)."""
        hit = self._memo.get(key)
        if hit is None or hit[0]() is not source:
            return None
        self._memo.move_to_end(key)
        return hit[1]

    def memo(self, key: tuple, source: object, build: Callable[[], Any], size: int = 8, *,
             one_per_kind: bool = False) -> Any:
        """A value derived from ``source`` (e.g. a model frame from a table), built once per session.

        Kept only while ``source`` is the very same object, so a reassigned symbol
        is never served a stale value, and forgotten when ``source`` is freed (a removed or
        reassigned symbol: the memo holds it by a weak reference); at most ``size`` values are
        kept, and with ``one_per_kind`` only the latest of the values whose keys start alike
        (``key[0]``: column-sized values such as model frames, one of which a fit in progress uses).
        """
        hit = self._memo.get(key)
        if hit is not None and hit[0]() is source:
            self._memo.move_to_end(key)
            return hit[1]
        if one_per_kind:
            for older in [k for k in self._memo if k[0] == key[0]]:
                del self._memo[older]
        value = build()
        memo = self._memo

        def forget(_: weakref.ref) -> None:
            if key in memo and memo[key][0] is ref:
                del memo[key]

        ref = weakref.ref(source, forget)
        self._memo[key] = (ref, value)
        while len(self._memo) > size:
            self._memo.popitem(last=False)
        return value

    def keep_derived(self, kind: str, digest: str, value: Any, prefix: str, sources: frozenset,
                     max_name_length: int) -> str:
        """Keep ``value``, which the sites derived from an authenticated pooled result, as the symbol
        ``dsfed.<kind>.<digest>`` (cut to the site's longest name), defined as ``prefix`` + digest
        (what :meth:`derived_by_sites` recognises) and read from ``sources``; its name."""
        name = f"dsfed.{kind}.{digest}"[:max_name_length]
        self.symbols[name] = value
        self.sources[name] = sources
        self.definitions[name] = f"{prefix}{digest}"
        return name

    def derived_by_sites(self, value: Any, prefix: str) -> bool:
        """Whether ``value`` is, itself (not a copy or a subset of it), a symbol the sites derived from
        an authenticated pooled result (its definition starts with ``prefix``)."""
        return any(v is value and self.definitions.get(name, "").startswith(prefix)
                   for name, v in self.symbols.items())

    def get(self, name: str) -> Any:
        try:
            return self.symbols[name]
        except KeyError:
            known = ", ".join(sorted(self.symbols)) or "none"
            raise NotFound(f"no symbol {name!r} in this session", hint=f"symbols: {known}") from None


class SessionStore:
    """Thread-safe sessions keyed by an unguessable id.

    An account holds at most ``max_per_user`` sessions. At the limit, opening one more reclaims
    the account's session idle longest, if it has been idle ``reclaim_after_s`` or more: sessions
    a client (a fuzzer, a crashed script) left open do not lock the account out until they expire,
    and a session in use is never taken away. A session that is not the caller's answers as one
    that does not exist, so its id's existence is not told. Ids start with a random prefix drawn
    when the process starts, so an id from before a restart is answered as such."""

    def __init__(self, idle_timeout_s: float, max_per_user: int, reclaim_after_s: float) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_per_user = max_per_user
        self.reclaim_after_s = reclaim_after_s
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        # this process's sessions start with it: an id from before a restart is told apart
        self._boot = secrets.token_hex(4)

    def _expire(self, now: float) -> None:
        for sid in [s.id for s in self._sessions.values() if now - s.last_used > self.idle_timeout_s]:
            del self._sessions[sid]

    def open(self, owner: str, profile: str = "default") -> tuple[Session, str | None]:
        """A new session, and the id of the session it reclaimed (None: none)."""
        now = time.monotonic()
        reclaimed = None
        with self._lock:
            self._expire(now)
            mine = sorted((s for s in self._sessions.values() if s.owner == owner), key=lambda s: s.last_used)
            if len(mine) >= self.max_per_user:
                if now - mine[0].last_used < self.reclaim_after_s:
                    raise Forbidden(
                        f"user {owner!r} has {self.max_per_user} sessions, all used in the last "
                        f"{self.reclaim_after_s:g} s",
                        hint="close a session, or wait until one has been idle that long (it is then reclaimed)",
                    )
                reclaimed = mine[0].id
                del self._sessions[reclaimed]
            session = Session(f"{self._boot}.{secrets.token_urlsafe(24)}", owner, now, now, profile)
            self._sessions[session.id] = session
            return session, reclaimed

    def get(self, sid: str, user: str) -> Session:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            session = self._sessions.get(sid)
            if session is None and not sid.startswith(f"{self._boot}."):
                raise NotFound(f"no session {sid[:64]!r}: the site restarted since it was opened (sessions do not "
                               "survive a restart) or the id is not one of its sessions", hint="open a new session")
            if session is None or session.owner != user:
                raise NotFound(f"no session {sid[:64]!r} of user {user!r}: never opened by this user, closed, expired "
                               f"after {self.idle_timeout_s:g} s idle, or reclaimed after "
                               f"{self.reclaim_after_s:g} s idle when the account reached its session limit",
                               hint="open a new session")
            session.last_used = now
            return session

    def close(self, sid: str, user: str) -> None:
        session = self.get(sid, user)
        with self._lock:
            self._sessions.pop(session.id, None)

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)
