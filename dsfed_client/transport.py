"""Two transports behind one interface: HTTP to a real site, or a site object in this process.

Both send the same request bodies to the same service operations and turn the
site's error bodies into the same :mod:`dsfed_client.errors`, so an analysis
run in-process (simulation studies, fast tests) behaves as it would over HTTP.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import requests

from dsfed_client.errors import SiteCallError, SiteUnavailable, from_wire

if TYPE_CHECKING:
    from dsfed_server.service import SiteService


def encode(body: dict[str, Any]) -> bytes:
    """The JSON bytes of a request body."""
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class TransferStats:
    """Requests made to one site and the bytes of their bodies, both ways."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


class Transport(Protocol):
    site: str
    stats: TransferStats

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        """Send one request to ``/v1{path}``; return the decoded JSON or raise SiteCallError.
        ``encoded`` is ``body`` already serialised (a session sends one body to every site)."""

    def close(self) -> None: ...


BUSY_RETRIES = 3  # a site busy checking passwords: send again this often,
BUSY_WAIT_S = 2  # when it asks to wait at most this long (a throttled client waits a whole window)


class HttpTransport:
    """HTTP(S) to a site server, with connection reuse and bounded waiting."""

    def __init__(
        self,
        site: str,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        connect_timeout: float = 5.0,
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
            reason = str(exc.args[0]) if exc.args else str(exc)
            raise SiteUnavailable(
                f"cannot reach {self.url} ({reason[:160]})", site=self.site, function=function,
                hint="check that the site server is running",
            ) from None
        self.stats.bytes_received += len(response.content)
        try:
            payload = response.json()
        except ValueError:
            raise SiteCallError(
                f"HTTP {response.status_code} with a body that is not JSON", site=self.site, function=function,
                status=response.status_code,
            ) from None
        if response.status_code >= 400:
            error = payload.get("error") if isinstance(payload, dict) else None
            if not isinstance(error, dict):
                error = {"message": f"HTTP {response.status_code}: {str(payload)[:200]}"}
            err = from_wire(error, site=self.site, status=response.status_code)
            err.function = err.function or function
            raise err
        return payload

    def _send(self, method: str, path: str, data: bytes | None) -> requests.Response:
        """One request; a 429 that asks for a short wait (every password-check slot of the site
        busy; nothing ran) is sent again after it, up to ``BUSY_RETRIES`` times."""
        retries = 0
        while True:
            response = self.http.request(method, f"{self.url}/v1{path}", data=data, timeout=self.timeout,
                                         headers={"Content-Type": "application/json"} if data else None)
            wait = response.headers.get("Retry-After", "")
            if response.status_code != 429 or not wait.isdigit() or int(wait) > BUSY_WAIT_S or retries == BUSY_RETRIES:
                return response
            retries += 1
            time.sleep(int(wait))

    def close(self) -> None:
        self.http.close()


class InProcessTransport:
    """A :class:`SiteService` in this Python process, reached through the same operations."""

    def __init__(self, service: "SiteService", *, user: str, password: str | None = None,
                 token: str | None = None) -> None:
        self.site = service.name
        self.service = service
        self._user = user
        self._password = password
        self._token = token
        self.stats = TransferStats()

    def _login(self):  # type: ignore[no-untyped-def]
        if self._token:
            return self.service.login_token(self._token)
        return self.service.login_password(self._user, self._password or "")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        from dsfed_core.errors import SiteError  # noqa: PLC0415
        from dsfed_server.service import CallRequest  # noqa: PLC0415

        self.stats.requests += 1
        self.stats.bytes_sent += len(encoded if encoded is not None else encode(body)) if body is not None else 0
        try:
            user = self._login()
            result = self._dispatch(user, method, path, body or {}, CallRequest)
        except SiteError as exc:
            exc.at(site=self.site)
            err = from_wire(exc.to_wire(), site=self.site, status=exc.http_status)
            err.function = err.function or function
            raise err from None
        # the same JSON round trip an HTTP answer takes
        text = json.dumps(result)
        self.stats.bytes_received += len(text)
        return json.loads(text)

    def _dispatch(self, user, method: str, path: str, body: dict[str, Any], CallRequest) -> Any:  # type: ignore[no-untyped-def]
        svc = self.service
        parts = [p for p in path.split("/") if p]
        route = (method, parts[0], len(parts))
        if route == ("GET", "functions", 1):
            return svc.functions(user)
        if route == ("GET", "tables", 1):
            return svc.tables(user)
        if route == ("GET", "whoami", 1):
            return {"user": user.name, "role": user.role, "site": svc.name}
        if route == ("GET", "audit", 1):
            return svc.audit_records(user)
        if parts[0] == "sessions":
            if len(parts) == 1 and method == "POST":
                return svc.open_session(user)
            sid = parts[1]
            if len(parts) == 2:
                if method == "DELETE":
                    svc.close_session(user, sid)
                    return {"closed": sid}
                return svc.session_exists(user, sid)
            action = parts[2]
            call = CallRequest(text=body.get("expr"), tree=body.get("call"), secure=body.get("secure"))
            if action == "aggregate":
                return {"result": svc.aggregate(user, sid, call)}
            if action == "pooled":
                return {"result": svc.release_pooled(user, sid, body)}
            if action == "assign":
                return svc.assign(user, sid, body["symbol"], call)
            if action == "assign-table":
                return svc.assign_table(user, sid, body["symbol"], body["table"], body.get("variables"))
            if action == "symbols" and len(parts) == 3:
                return svc.symbols(user, sid)
            if action == "symbols" and len(parts) == 4 and method == "DELETE":
                svc.remove_symbol(user, sid, parts[3])
                return {"removed": parts[3]}
        raise ValueError(f"no in-process route for {method} {path}")

    def close(self) -> None:
        pass
