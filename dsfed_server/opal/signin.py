"""Opal's sign-in sessions for the ``/ws`` door: the ``opalsid`` and ``XSRF-TOKEN`` cookies.

R's opalr sends the user's credentials once, on ``GET /ws/system/subject-profile/_current``, and
authenticates every later request by the cookie Opal set on that answer (``opalsid``), echoing the
``XSRF-TOKEN`` cookie's value in an ``X-XSRF-TOKEN`` header; it signs out with
``DELETE /ws/auth/session/{opalsid}``. This module keeps those sign-in sessions: each ties a random
256-bit identifier (kept only as its SHA-256) to the account that signed in, with its own cross-site
request token. A session ends when signed out, after the site's ``session_idle_timeout_s`` without
a request, or when the site restarts (nothing is written to disk).

A request authenticated by the cookie alone that can change anything (any method but GET, HEAD and
OPTIONS) must carry the session's token in ``X-XSRF-TOKEN``: the double-submit cookie of OWASP's
Cross-Site Request Forgery Prevention Cheat Sheet, which a page of another origin cannot forge as
it cannot read the cookie. The cookies are ``HttpOnly`` (``opalsid``), ``SameSite=Strict``,
``Path=/`` (a site behind a reverse proxy may serve ``/ws`` under a prefix), and ``Secure`` when
the request came over HTTPS (RFC 6265, HTTP State Management
Mechanism, sections 4.1.2.5-4.1.2.6; SameSite: RFC 6265bis draft, section 4.1.2.7). Pure state,
no HTTP framework.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from dsfed_server.config import User

SESSION_COOKIE = "opalsid"
XSRF_COOKIE = "XSRF-TOKEN"
XSRF_HEADER = "x-xsrf-token"
COOKIE_PATH = "/"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _key(sid: str) -> bytes:
    return hashlib.sha256(sid.encode("utf-8", "surrogatepass")).digest()


@dataclass
class WebSession:
    """One sign-in: the account, its cross-site request token and when it was last used."""

    user: User
    xsrf: str
    address: str
    last_used: float

    def xsrf_matches(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.xsrf.encode())


class WebSessions:
    """Sign-in sessions by identifier; each account holds at most ``max_per_user`` (the least
    recently used goes first), the site at most ``max_total``."""

    def __init__(self, idle_timeout_s: float, *, max_per_user: int = 32, max_total: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._max_per_user = max_per_user
        self._max_total = max_total
        self._sessions: OrderedDict[bytes, WebSession] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def open(self, user: User, address: str) -> tuple[str, WebSession]:
        """A new sign-in session of ``user``: its identifier (the cookie's value) and the session."""
        sid = secrets.token_urlsafe(32)
        session = WebSession(user, secrets.token_urlsafe(32), address, self._clock())
        with self._lock:
            self._expire(session.last_used)
            own = [k for k, s in self._sessions.items() if s.user.name == user.name]
            for key in own[: max(0, len(own) - self._max_per_user + 1)]:
                del self._sessions[key]
            while len(self._sessions) >= self._max_total:
                self._sessions.popitem(last=False)
            self._sessions[_key(sid)] = session
        return sid, session

    def get(self, sid: str) -> WebSession | None:
        """The live session of identifier ``sid`` (its idle clock restarted), or None."""
        now = self._clock()
        key = _key(sid)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.last_used > self.idle_timeout_s:
                del self._sessions[key]
                return None
            session.last_used = now
            self._sessions.move_to_end(key)
            return session

    def close(self, sid: str, user: User) -> bool:
        """End ``user``'s session ``sid``; False if there is none (another account's counts as none)."""
        key = _key(sid)
        with self._lock:
            session = self._sessions.get(key)
            if session is None or session.user.name != user.name:
                return False
            del self._sessions[key]
            return True

    def _expire(self, now: float) -> None:
        for key in [k for k, s in self._sessions.items() if now - s.last_used > self.idle_timeout_s]:
            del self._sessions[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
