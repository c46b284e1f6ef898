"""One HTTP request to an ASGI application in this Python process, without a socket.

The in-process transport (:mod:`dsfed_server.inprocess`) sends its requests through the site's
FastAPI app with :func:`call_app`, so that a request runs the same middleware, authentication,
validation, routes and error handlers as over HTTP. This is the ASGI specification's HTTP
connection (https://asgi.readthedocs.io/en/latest/specs/www.html) for one request whose body is
known in full: a scope, one ``http.request`` message, and the ``http.response.start`` and
``http.response.body`` messages collected into an :class:`AppAnswer`.

The app runs on one event loop for the whole process, in a daemon thread started with the first
request, as a server runs it: requests from several threads at once are served side by side, a
route written as a plain function runs on the loop's worker threads (kept between requests, and
daemon threads too, so they never hold the interpreter open), and the caller needs no event loop
of its own (a notebook's may be running).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

Message = MutableMapping[str, Any]
ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]

CLIENT = ("in-process", 0)  # the address a site counts this caller's failed logins under
SERVER = ("in-process", 80)


@dataclass
class AppAnswer:
    """What the app answered: the status, the headers (names lower case) and the body."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class _Loop:
    """The event loop the apps run on, in a daemon thread: started when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                self._thread = threading.Thread(target=self._serve, args=(loop, started), daemon=True,
                                                name="dsfed-in-process-sites")
                self._thread.start()
                started.wait()
                self._loop = loop
            return self._loop

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)

        async def forever() -> None:
            # the loop's root task: worker threads (anyio's, for plain-function routes) live as long
            # as it does, so they are reused between requests instead of started for each one
            started.set()
            await asyncio.Event().wait()

        loop.run_until_complete(forever())


_loop = _Loop()


def call_app(app: ASGIApp, method: str, path: str, *, body: bytes = b"",
             headers: dict[str, str] | None = None) -> AppAnswer:
    """Send ``method path`` (``path`` may carry a query string) with ``body`` to ``app``; the answer.
    An exception the app raises after it answered (Starlette re-raises what its error handler
    answered 500 for, for the server to log) is left to the app's own error handler, which has
    already recorded it."""
    if _loop.is_current():
        raise RuntimeError("an in-process request from the apps' own event loop would wait for itself")
    future = asyncio.run_coroutine_threadsafe(_exchange(app, method, path, body, headers or {}), _loop.get())
    return future.result()


async def _exchange(app: ASGIApp, method: str, path: str, body: bytes, headers: dict[str, str]) -> AppAnswer:
    route, _, query = path.partition("?")
    sent = {"content-length": str(len(body)), **{k.lower(): v for k, v in headers.items()}}
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": method.upper(), "scheme": "http", "path": route, "raw_path": quote(route).encode(),
        "query_string": query.encode(), "root_path": "", "client": CLIENT, "server": SERVER,
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in sent.items()],
    }
    answer = AppAnswer(status=0)
    chunks: list[bytes] = []
    request_sent = False
    done = asyncio.Event()

    async def receive() -> Message:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    except Exception:
        if not done.is_set():
            raise
    answer.body = b"".join(chunks)
    return answer
