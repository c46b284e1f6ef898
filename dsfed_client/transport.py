"""The transport to a site: HTTP, behind the :class:`Transport` interface.

A site in this process (simulation studies, fast tests) gives a transport of the same
interface (``dsfed_server.inprocess``), sending the same requests through the site's own HTTP
app without a socket and reading its answers with the same :func:`~dsfed_core.wire.read_answer`,
so an analysis run in-process behaves as it would over HTTP.
"""

from __future__ import annotations

import random
import socket
import ssl
import time
from typing import Any, Protocol

import requests

from dsfed_core.errors import SiteUnavailable
from dsfed_core.wire import TransferStats, encode, read_answer


class Transport(Protocol):
    site: str
    stats: TransferStats

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        """Send one request to ``/v1{path}``; return the decoded JSON or raise SiteError.
        ``encoded`` is ``body`` already serialised (a session sends one body to every site)."""

    def close(self) -> None: ...


def _unreachable(exc: requests.ConnectionError, connect_timeout: float) -> str:
    """Why a connection failed, in words (urllib3's own text is long and gets cut mid-word)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, TimeoutError):  # urllib3 sends the request under the connect timeout
            return (f"the site took no request within {connect_timeout:g} s (connected, but it did not read the "
                    "request: busy, or stalled)")
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (no server listens there)"
        if isinstance(cause, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed ({cause.reason or 'handshake error'})"
        if isinstance(cause, (ConnectionResetError, BrokenPipeError)):
            return "the connection was closed by the other side"
        linked = [getattr(cause, "reason", None), *cause.args[:2], cause.__cause__, cause.__context__]
        cause = next((c for c in linked if isinstance(c, BaseException)), None)
    return "the connection failed"


BUSY_RETRIES = 8  # a site busy checking passwords: send again at most this often,
BUSY_WAIT_S = 2  # when it asks to wait at most this long (a throttled client waits a whole window)
BUSY_SPREAD_S = 8.0  # the most a wait adds to Retry-After, so that clients refused together come back apart


def busy_wait(retry_after: int, retries: int, rng: random.Random) -> float:
    """Seconds to wait before sending again a request refused as busy: what ``Retry-After`` says
    plus a random part that grows with each refusal up to :data:`BUSY_SPREAD_S` ("full jitter",
    Brooker 2015), so that logins refused at the same moment do not return at the same moment."""
    return retry_after + rng.uniform(0.0, min(BUSY_SPREAD_S, retry_after * 2.0 ** retries))


class HttpTransport:
    """HTTP(S) to a site server, with connection reuse and bounded waiting: ``connect_timeout``
    bounds connecting and handing the request over (urllib3 sends the request under the connect
    timeout, so a site busy on other work for a few seconds must not count as unreachable: 30 s),
    ``read_timeout`` the wait for the answer."""

    def __init__(
        self,
        site: str,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        connect_timeout: float = 30.0,
        read_timeout: float = 300.0,
    ) -> None:
        self.site = site
        self.url = url.rstrip("/")
        self.http = requests.Session()
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"
        elif user is not None and password is not None:
            self.http.auth = (user, password)
        self.timeout = (connect_timeout, read_timeout)
        self.stats = TransferStats()
        self._jitter = random.Random()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        data = encoded if encoded is not None else None if body is None else encode(body)
        self.stats.requests += 1
        self.stats.bytes_sent += len(data or b"")
        try:
            response = self._send(method, path, data)
        except requests.Timeout:
            raise SiteUnavailable(
                f"no answer within {self.timeout[1]:g} s", site=self.site, function=function,
                hint="the site may be overloaded or down; retry later or ask its administrator",
            ) from None
        except requests.ConnectionError as exc:
            raise SiteUnavailable(
                f"cannot reach {self.url}: {_unreachable(exc, self.timeout[0])}", site=self.site, function=function,
                hint="check that the site server is running and the URL is right, or ask the site's administrator",
            ) from None
        self.stats.bytes_received += len(response.content)
        return read_answer(response.status_code, response.content, site=self.site, function=function, origin=self.url)

    def _send(self, method: str, path: str, data: bytes | None) -> requests.Response:
        """One request; a 429 that asks for a short wait (every password-check slot of the site
        busy; nothing ran) is sent again after :func:`busy_wait`, up to ``BUSY_RETRIES`` times."""
        retries = 0
        while True:
            response = self.http.request(method, f"{self.url}/v1{path}", data=data, timeout=self.timeout,
                                         headers={"Content-Type": "application/json"} if data else None)
            wait = response.headers.get("Retry-After", "")
            if response.status_code != 429 or not wait.isdigit() or int(wait) > BUSY_WAIT_S or retries == BUSY_RETRIES:
                return response
            time.sleep(busy_wait(int(wait), retries, self._jitter))
            retries += 1

    def close(self) -> None:
        self.http.close()
