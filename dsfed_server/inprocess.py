"""A site in the analyst's own Python process, behind the client's transport interface.

Simulation studies and fast tests reach a :class:`~dsfed_server.service.SiteService` object
through the same operations the HTTP API serves, with the same JSON round trip, so an
analysis run in-process behaves as it would over HTTP (``LoginBuilder.append_inprocess``).
"""

from __future__ import annotations

import json
from typing import Any

from dsfed_core.errors import SiteError, from_wire
from dsfed_core.wire import TransferStats, encode
from dsfed_server.config import User
from dsfed_server.service import CallRequest, SiteService


class InProcessTransport:
    """A :class:`SiteService` in this Python process, reached through the same operations."""

    def __init__(self, service: SiteService, *, user: str, password: str | None = None,
                 token: str | None = None) -> None:
        self.site = service.name
        self.service = service
        self._user = user
        self._password = password
        self._token = token
        self.stats = TransferStats()

    def _login(self) -> User:
        if self._token:
            return self.service.login_token(self._token)
        return self.service.login_password(self._user, self._password or "")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        self.stats.requests += 1
        self.stats.bytes_sent += len(encoded if encoded is not None else encode(body)) if body is not None else 0
        try:
            user = self._login()
            result = self._dispatch(user, method, path, body or {})
        except SiteError as exc:
            exc.at(site=self.site)
            err = from_wire(exc.to_wire(), site=self.site, status=exc.http_status)
            err.function = err.function or function
            raise err from None
        # the same JSON round trip an HTTP answer takes
        text = json.dumps(result)
        self.stats.bytes_received += len(text)
        return json.loads(text)

    def _dispatch(self, user: User, method: str, path: str, body: dict[str, Any]) -> Any:
        svc = self.service
        parts = [p for p in path.split("/") if p]
        route = (method, parts[0], len(parts))
        if route == ("GET", "functions", 1):
            return svc.functions(user)
        if route == ("GET", "tables", 1):
            return svc.tables(user)
        if route == ("GET", "whoami", 1):
            return {"user": user.name, "role": user.role, "site": svc.name}
        if route == ("POST", "models", 1):
            return svc.upload_model(user, json.dumps(body).encode())
        if route == ("GET", "budget", 2) and parts[1] == "mine":
            return svc.my_budget(user)
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
            call = CallRequest(text=body.get("expr"), tree=body.get("call"), secure=body.get("secure"),
                               handles=body.get("handles"))
            if action == "aggregate":
                return {"result": svc.aggregate(user, sid, call)}
            if action == "cost":
                return svc.cost(user, sid, call)
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
