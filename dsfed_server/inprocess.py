"""A site in the analyst's own Python process, behind the client's transport interface.

Simulation studies and fast tests put a :class:`~dsfed_server.service.SiteService` in their own
process as an :class:`InProcessSite` (``LoginBuilder.append_inprocess(in_process(service), ...)``).
Its transport sends every request through the site's FastAPI app (:func:`dsfed_server.api.create_app`)
without a socket, so a request runs the same authentication, validation, routes and error
handlers as over HTTP, and its answer is read as the HTTP transport reads one.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from typing import Any

from fastapi import FastAPI

from dsfed_core.wire import TransferStats, encode, read_answer
from dsfed_server.api import create_app
from dsfed_server.asgi_call import call_app
from dsfed_server.service import SiteService


class InProcessSite:
    """A site served in this process: its service and the HTTP app over it, made once."""

    def __init__(self, service: SiteService) -> None:
        self.name = service.name
        self.service = service
        self.app: FastAPI = create_app(service)

    def connect(self, *, user: str, password: str | None = None, token: str | None = None) -> InProcessTransport:
        """A transport to this site for ``user`` (an API token, or a password)."""
        return InProcessTransport(self.name, self.app, user=user, password=password, token=token)


class InProcessTransport:
    """Requests to a site's app in this process, with the credentials the HTTP transport sends."""

    def __init__(self, site: str, app: FastAPI, *, user: str, password: str | None = None,
                 token: str | None = None) -> None:
        self.site = site
        self.app = app
        if token:
            self._authorization = f"Bearer {token}"
        else:
            self._authorization = "Basic " + base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
        self.stats = TransferStats()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *, function: str = "",
                encoded: bytes | None = None) -> Any:
        """Send one request to ``/v1{path}``; the decoded JSON, or the site's error raised."""
        data = encoded if encoded is not None else b"" if body is None else encode(body)
        self.stats.requests += 1
        self.stats.bytes_sent += len(data)
        headers = {"authorization": self._authorization}
        if data:
            headers["content-type"] = "application/json"
        answer = call_app(self.app, method, f"/v1{path}", body=data, headers=headers)
        self.stats.bytes_received += len(answer.body)
        return read_answer(answer.status, answer.body, site=self.site, function=function, origin="in-process")

    def close(self) -> None:
        pass


RECENT_SITES = 16  # sites kept made: making a site's app (its routes' models) takes about a tenth of a second
_recent: OrderedDict[int, InProcessSite] = OrderedDict()
_recent_lock = threading.Lock()


def in_process(service: SiteService) -> InProcessSite:
    """The in-process site of ``service``: the same one for a service used again (tests and studies
    log in to the same sites many times), made anew once :data:`RECENT_SITES` others were used since."""
    with _recent_lock:
        site = _recent.get(id(service))
        if site is not None and site.service is service:
            _recent.move_to_end(id(service))
            return site
        site = _recent[id(service)] = InProcessSite(service)
        while len(_recent) > RECENT_SITES:
            _recent.popitem(last=False)
        return site
