"""Analyst sessions and their workspaces of server-side symbols.

Each session belongs to one user; only that user can use it. Symbols hold
tables (pandas DataFrames) and vectors (pandas Series) and never leave the
site. Idle sessions expire after the site's configured timeout.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from dsfed_server.errors import CallError, Forbidden, NotFound

_SYMBOL = re.compile(r"^[A-Za-z][A-Za-z0-9._]*$")
RESERVED_SYMBOLS = {"TRUE", "FALSE", "NULL", "NA", "Inf", "NaN", "c", "function"}


def check_symbol_name(name: str, max_length: int) -> str:
    if not isinstance(name, str) or not _SYMBOL.match(name) or name in RESERVED_SYMBOLS:
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

    def memo(self, key: Hashable, source: Any, build: Callable[[], Any], size: int = 8) -> Any:
        """A value derived from ``source`` (e.g. a model frame from a table), built once per session.

        Kept only while ``source`` is the very same object, so a reassigned symbol
        is never served a stale value (``source`` None: the key itself names the
        content, e.g. by its digest); at most ``size`` values are kept.
        """
        hit = self._memo.get(key)
        if hit is not None and hit[0] is source:
            self._memo.move_to_end(key)
            return hit[1]
        value = build()
        self._memo[key] = (source, value)
        while len(self._memo) > size:
            self._memo.popitem(last=False)
        return value

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
    """Thread-safe sessions keyed by an unguessable id."""

    def __init__(self, idle_timeout_s: float, max_per_user: int) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_per_user = max_per_user
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for sid in [s.id for s in self._sessions.values() if now - s.last_used > self.idle_timeout_s]:
            del self._sessions[sid]

    def open(self, owner: str, profile: str = "default") -> Session:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if sum(1 for s in self._sessions.values() if s.owner == owner) >= self.max_per_user:
                raise Forbidden(
                    f"user {owner!r} already has {self.max_per_user} open sessions",
                    hint="close a session before opening another",
                )
            session = Session(secrets.token_urlsafe(24), owner, now, now, profile)
            self._sessions[session.id] = session
            return session

    def get(self, sid: str, user: str) -> Session:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            session = self._sessions.get(sid)
            if session is None:
                raise NotFound(f"no session {sid!r} (closed or expired after {self.idle_timeout_s:g} s idle)",
                               hint="open a new session")
            if session.owner != user:
                raise Forbidden("this session belongs to another user", hint="use a session you opened")
            session.last_used = now
            return session

    def close(self, sid: str, user: str) -> None:
        session = self.get(sid, user)
        with self._lock:
            self._sessions.pop(session.id, None)

    def count(self) -> int:
        with self._lock:
            return len(self._sessions)
