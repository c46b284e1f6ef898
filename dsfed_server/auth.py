"""Credentials: salted scrypt password hashes and SHA-256 hashed API tokens.

The site config stores only hashes. A successful password check is cached
under an HMAC of the credentials with a per-process key, so the (deliberately
slow) scrypt runs once per client, not once per request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading

from dsfed_server.config import User
from dsfed_server.errors import AuthError

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


class Authenticator:
    def __init__(self, users: tuple[User, ...]) -> None:
        self._users = {u.name: u for u in users}
        self._tokens = {h: u for u in users for h in u.token_hashes}
        self._key = secrets.token_bytes(32)
        self._verified: set[bytes] = set()
        self._lock = threading.Lock()

    def by_password(self, name: str, password: str) -> User:
        user = self._users.get(name)
        if user is None or not user.password_hash:
            raise AuthError("wrong user name or password")
        mark = hmac.new(self._key, f"{name}\0{password}\0{user.password_hash}".encode(), "sha256").digest()
        with self._lock:
            if mark in self._verified:
                return user
        if not check_password(password, user.password_hash):
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
