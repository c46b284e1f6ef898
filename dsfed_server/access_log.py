"""The site's access log: one line per HTTP request, apart from the audit log.

Each line holds the time (UTC), the client address and port, the authenticated user (``-`` when
the request carried no valid credentials), the method, the path (percent-encoded as received,
without the query string), the status and the duration::

    2025-03-04T10:15:02.113Z 127.0.0.1:50122 analyst "POST /v1/sessions/1a2b.../aggregate" 200 12.4ms

Never a body, a header, a query string, a token or a password: what a request carries stays out
of this file, so the file may be handed to whoever runs the machine. The audit log (``audit.py``)
says what was asked and what happened; this log says which requests came, which is what an
operator reads first (a proxy's errors, a flood, slow calls). Written to a file (reopened when
logrotate moves it, :class:`logging.handlers.WatchedFileHandler`) or to standard error.
"""

from __future__ import annotations

import logging
import sys
import time
from logging.handlers import WatchedFileHandler
from pathlib import Path
from typing import Any, Awaitable, Callable

from starlette.requests import Request

from dsfed_server.timestamps import utc_now

STDERR = "-"
"""``[site] access_log = "-"``: write the access log to standard error (the journal under systemd)."""

_USER = "access_log_user"  # the request's authenticated user, in the ASGI scope's state

Scope = dict[str, Any]
Message = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def open_access_log(target: Path | None) -> logging.Logger:
    """A logger writing lines to the file ``target`` (created when the first line is written), or to
    standard error when ``target`` is None. Not registered with :mod:`logging`, so nothing else
    writes to it and it writes nowhere else."""
    handler: logging.Handler = (logging.StreamHandler(sys.stderr) if target is None
                                else WatchedFileHandler(target, encoding="utf-8", delay=True))
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.Logger("dsfed.access", logging.INFO)
    logger.addHandler(handler)
    return logger


def note_user(request: Request, name: str) -> None:
    """Record the authenticated user of ``request`` for its access-log line."""
    setattr(request.state, _USER, name)


def _printable(raw: bytes, limit: int = 2000) -> str:
    """A request path as received (percent-encoded ASCII); any other byte escaped as ``\\xNN``, the
    quote and the backslash too, so that a line cannot be broken or forged (a raw ``\\x22`` logs
    as ``\\x5cx22``, never as an escaped quote)."""
    text = raw[:limit].decode("latin-1")
    return "".join(c if " " < c < "\x7f" and c not in '"\\' else f"\\x{ord(c):02x}" for c in text)


class AccessLogMiddleware:
    """ASGI middleware writing one :mod:`access_log <dsfed_server.access_log>` line per HTTP request,
    after its response (or its failure, as status 500) was sent."""

    def __init__(self, app: ASGIApp, *, logger: logging.Logger) -> None:
        self.app = app
        self.logger = logger

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._write(scope, status, time.perf_counter() - started)

    def _write(self, scope: Scope, status: int, seconds: float) -> None:
        client = scope.get("client")
        address = f"{client[0]}:{client[1]}" if client else "-"
        user = (scope.get("state") or {}).get(_USER) or "-"
        path = _printable(scope.get("raw_path") or scope["path"].encode("utf-8"))
        now = utc_now()
        self.logger.info('%s %s %s "%s %s" %d %.1fms', now, address, user, scope["method"], path, status,
                         seconds * 1000)
