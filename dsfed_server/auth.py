"""Credentials: salted scrypt password hashes and SHA-256 hashed API tokens; failed logins throttled.

The site config stores only hashes. A successful password check is cached
under an HMAC of the credentials with a per-process key, so the (deliberately
slow) scrypt runs once per client, not once per request. An unknown user name
costs the same scrypt as a known one with a wrong password, so the answer's
time does not tell which names exist. Failed logins are counted per client
address and per user name (:class:`Throttle`); past the site's limit the
address or name is refused without a password check until the window passes.
At most ``[login] concurrent_checks`` scrypts run at once, so a flood of guesses
from many addresses cannot take every core from the analysts' calls. A login past them
waits in a queue of at most ``check_queue`` logins, ``check_wait_s`` for a native login
(its client waits as ``Retry-After`` says and sends again) and ``signin_wait_s`` for a
sign-in at the Opal door, whose clients (DataSHIELD's, which dsfed cannot change) give up
at a 429; past the queue a login is refused at once. An unknown name waits in the same
queue as a known one, for its dummy check, so the waits do not tell names apart either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import threading
import time
from collections import OrderedDict, deque

from starlette.requests import Request

from dsfed_server.config import LoginLimits, User
from dsfed_core.errors import AuthError, LoginsBusy, SiteError, TooManyFailedLogins

_N, _R, _P = 2**14, 8, 1


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def check_password(password: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        got = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=32
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, base64.b64decode(digest))


def hash_token(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


class Throttle:
    """Failed logins per client address and per user name in a sliding window (the site config's
    ``[login]``). At most ``max_keys`` addresses and names are tracked (the oldest forgotten), so
    a flood of invented names cannot grow memory without bound."""

    def __init__(self, limits: LoginLimits, *, max_keys: int = 100_000) -> None:
        self.limits = limits
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._reported: dict[str, float] = {}  # when a blocked key's refusal was last audited
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def _keys(self, address: str, name: str) -> tuple[tuple[str, int, str], ...]:
        """Each counter this login counts in: its key, its limit and the config key setting it."""
        return ((f"address\0{address}", self.limits.failures_per_address, "login.failures_per_address"),
                (f"user\0{name}", self.limits.failures_per_user, "login.failures_per_user"))

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key, deque())
        while times and times[0] <= now - self.limits.window_s:
            times.popleft()
        return times

    def _past_limit(self, address: str, name: str, now: float) -> dict[str, tuple[str, float]]:
        """The counters past their limit (key -> config key, seconds until it may try again).

        A name past its limit is refused only to addresses that failed a login in the window: a
        flood of guesses against an analyst's name does not lock out the analyst, whose address has
        not failed, while each guessing address gets at most one guess once the name is past its
        limit (so at most ``failures_per_user`` + the number of addresses per window)."""
        address_failed = bool(self._recent(f"address\0{address}", now))
        out = {}
        for key, limit, setting in self._keys(address, name):
            times = self._recent(key, now)
            if len(times) >= limit and (address_failed or setting != "login.failures_per_user"):
                out[key] = (setting, times[0] + self.limits.window_s - now)
        return out

    def blocked(self, address: str, name: str) -> dict[str, float]:
        """The limits this login is past (config key -> seconds until it may try again)."""
        with self._lock:
            return dict(self._past_limit(address, name, time.monotonic()).values())

    def first_refusal(self, address: str, name: str) -> bool:
        """Whether this refusal is the first of the address's or name's blocked window (audited;
        the others are not, so a flood cannot grow the audit log)."""
        now = time.monotonic()
        with self._lock:
            fresh = [key for key in self._past_limit(address, name, now)
                     if self._reported.get(key, -math.inf) <= now - self.limits.window_s]
            for key in fresh:
                self._reported[key] = now
            for key in [k for k, t in self._reported.items() if t <= now - self.limits.window_s]:
                del self._reported[key]
        return bool(fresh)

    def failed(self, address: str, name: str) -> None:
        now = time.monotonic()
        with self._lock:
            for key, _, _ in self._keys(address, name):
                times = self._recent(key, now)
                times.append(now)
                self._failures[key] = times
                self._failures.move_to_end(key)
            while len(self._failures) > self._max_keys:
                self._failures.popitem(last=False)


class Authenticator:
    def __init__(self, users: tuple[User, ...], limits: LoginLimits) -> None:
        self._users = {u.name: u for u in users}
        self._tokens = {h: u for u in users for h in u.token_hashes}
        self._key = secrets.token_bytes(32)
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()
        self._dummy = hash_password(secrets.token_urlsafe(16))  # what an unknown name is checked against
        self._checks = threading.BoundedSemaphore(limits.concurrent_checks)
        self._waiting = 0  # logins waiting for a slot (at most limits.check_queue)
        self.throttle = Throttle(limits)

    def _check_password(self, password: str, stored: str, wait_s: float) -> bool:
        """scrypt, in one of the site's ``concurrent_checks`` slots, waiting up to ``wait_s`` in a queue of
        at most ``check_queue`` logins (429 if the queue is full, or if no slot frees in time)."""
        limits = self.throttle.limits
        if not self._checks.acquire(blocking=False):
            with self._lock:
                full = self._waiting >= limits.check_queue
                self._waiting += not full
            if full:
                raise LoginsBusy(f"the site is checking too many passwords at once and {limits.check_queue} more "
                                 "logins are waiting", rule="login.check_queue", hint="try again in 1 s",
                                 retry_after=1)
            try:
                if not self._checks.acquire(timeout=wait_s):
                    raise LoginsBusy(f"the site is checking too many passwords at once (waited {wait_s:g} s)",
                                     rule="login.concurrent_checks", hint="try again in 1 s", retry_after=1)
            finally:
                with self._lock:
                    self._waiting -= 1
        try:
            return check_password(password, stored)
        finally:
            self._checks.release()

    def check_throttle(self, address: str, name: str) -> None:
        """Refuse, without checking anything, a client or name past its failed-login limit."""
        blocked = self.throttle.blocked(address, name)
        if blocked:
            rule, wait = max(blocked.items(), key=lambda item: item[1])
            whom = "from this address" if rule == "login.failures_per_address" else "for this user name"
            raise TooManyFailedLogins(
                f"too many failed logins {whom} in the last {self.throttle.limits.window_s:g} s; no password is "
                "checked until then", rule=rule, hint=f"try again in {math.ceil(wait)} s",
                retry_after=math.ceil(wait))

    def by_password(self, name: str, password: str, *, wait_s: float | None = None) -> User:
        """The user of these credentials; a password check waits for a slot up to ``wait_s`` (None: the
        site's ``check_wait_s``)."""
        wait = self.throttle.limits.check_wait_s if wait_s is None else wait_s
        user = self._users.get(name)
        if user is None or not user.password_hash:
            self._check_password(password, self._dummy, wait)  # the same time as a known name's wrong password
            raise AuthError("wrong user name or password")
        mark = hmac.new(self._key, f"{name}\0{password}\0{user.password_hash}".encode(), "sha256").digest()
        with self._lock:
            if mark in self._verified:
                return user
        if not self._check_password(password, user.password_hash, wait):
            raise AuthError("wrong user name or password")
        with self._lock:
            self._verified.add(mark)
        return user

    def by_token(self, token: str) -> User:
        digest = hash_token(token)
        for stored, user in self._tokens.items():
            if hmac.compare_digest(stored, digest):
                return user
        raise AuthError("unknown API token")


def client_address(request: Request) -> str:
    """The address failed logins are counted under (the peer's IP address)."""
    return request.client.host if request.client is not None else "unknown"


def auth_headers(exc: SiteError) -> dict[str, str] | None:
    """The headers of an authentication error's response (HTTP 401 and 429)."""
    if isinstance(exc, TooManyFailedLogins):
        return {"Retry-After": str(exc.retry_after)}
    return {"WWW-Authenticate": 'Basic realm="dsfed"'} if isinstance(exc, AuthError) else None
