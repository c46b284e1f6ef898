"""The native HTTP API (``/v1``) of a site, a thin FastAPI layer over :class:`SiteService`.

Routes parse the request, call the service and return its result; the
Opal-compatible DataSHIELD routes (``/ws``, :mod:`dsfed_server.opal`) are
mounted beside them and call the same service. Every route
but ``/v1/health`` needs credentials: HTTP Basic (user, password) or
``Authorization: Bearer <API token>``. Domain errors become JSON bodies
``{"error": {"type", "site", "function", "rule", "message", "hint"}}`` with a
fitting status; nothing reaches the client as a bare 500.
"""

from __future__ import annotations

import base64
import contextlib
from typing import Annotated, Any, AsyncIterator

import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dsfed_core.wire import MAX_RELAYED_CELLS
from dsfed_server import __version__
from dsfed_server.access_log import AccessLogMiddleware, note_user
from dsfed_server.audit import HEAD_HEADER
from dsfed_server.auth import auth_headers, client_address
from dsfed_core.calltree import call_schema
from dsfed_server.config import User
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_core.errors import AuthError, CallError, NotFound, ProtocolError, SiteError
from dsfed_server.opal import dto as opal_dto
from dsfed_server.opal import opal_router
from dsfed_server.openapi_doc import ERROR_RESPONSES, V1_SESSION, V1_SYMBOL, describe_symbol_names, operation_id
from dsfed_server.registry import REGISTRY
from dsfed_server.service import CallRequest, SiteService


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _call_tree_schema(schema: dict[str, Any]) -> None:
    """The ``call`` field's OpenAPI schema: the call tree's node shapes calling registry functions,
    not a bare object (so that generated requests reach the functions); the site reads it with
    ``parser.from_json``."""
    schema["anyOf"] = [call_schema(REGISTRY.names()), {"type": "null"}]


# a symbol's definition digest: of its assign call, or of the pooled release the sites derived it from
Digest = Annotated[str, StringConstraints(pattern=r"^(site-derived:)?[0-9a-f]{64}$")]
HandleName = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class CallBody(_Body):
    expr: str | None = Field(None, description="DataSHIELD call text, e.g. meanDS(D$age)")
    call: dict[str, Any] | None = Field(None, description="structured call tree (dsfed_core/calltree.py)",
                                        json_schema_extra=_call_tree_schema)
    handles: dict[HandleName, Digest] | None = Field(
        None, max_length=64, description="symbols the call reads, each with the digest its assign answered: "
                                         "the call is refused (409 stale_handle) if one no longer holds it")

    def request(self) -> CallRequest:
        return CallRequest(text=self.expr, tree=self.call, handles=self.handles)


class RosterEntry(_Body):
    site: str
    round: str | None = None
    key: str
    pooled: bool = False
    signature: str


class SecureOption(_Body):
    round: str = Field(pattern=r"^[0-9a-f]{32}$",
                       description="the round's id (32 hex digits), keyed by secureKeyDS at every site")
    step: int = Field(ge=0, description="this call's step in the round; each step is used once")
    roster: list[RosterEntry] = Field(description="every site's secureKeyDS answer for the round, unchanged")
    frac_bits: int = Field(24, ge=0, le=40, description="fixed-point fraction bits of the masked values")
    pooled: bool = Field(False, description="seal this site's counts and sums for the other sites (a pooled "
                                            "release; release them with POST .../pooled)")
    relayed: bool = Field(False, description="the first step of a relayed protocol: checked at this site, sealed "
                                             "for the other sites (continue with POST .../pooled)")
    cuts: list[dict[str, Any]] | None = Field(None, description="the cut histories the sites answered with, "
                                                                "relayed unchanged: [{table, column, cuts}]")
    cells: list[list[Any]] | None = Field(None, max_length=MAX_RELAYED_CELLS,
                                          description="the pooled cells the sites recorded, relayed unchanged: "
                                                      "[[identity, pooled count, column], ...]")


class RelayEntry(_Body):
    meta: dict[str, Any] = Field(description="what the sealing site declared about itself, unchanged")
    sealed: dict[str, str] = Field(description="the sealing site's vector, sealed for each other site")


class PooledBody(_Body):
    round: str = Field(pattern=r"^[0-9a-f]{32}$", description="the round's id")
    step: int = Field(ge=0, description="the step whose sealed vectors are relayed")
    roster: list[RosterEntry] = Field(description="every site's secureKeyDS answer for the round, unchanged")
    relay: dict[str, RelayEntry] = Field(description="every site's answer of the sealing call, by site name")
    next_step: int | None = Field(None, ge=0, description="the step a protocol of several steps seals next, "
                                                          "if it goes on (each step is used once)")


class AggregateBody(CallBody):
    secure: SecureOption | None = Field(None, description="release only a masked share of a sum over sites")

    def request(self) -> CallRequest:
        secure = None if self.secure is None else self.secure.model_dump()
        return CallRequest(text=self.expr, tree=self.call, secure=secure, handles=self.handles)


class AssignBody(CallBody):
    symbol: str


class AssignTableBody(_Body):
    symbol: str
    table: str
    variables: list[str] | None = None


def _credentials(service: SiteService, request: Request) -> User:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic" and value:
        try:
            name, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise AuthError("malformed Basic credentials", site=service.name) from None
        return service.login_password(name, password, client_address(request))
    if scheme.lower() == "bearer" and value:
        return service.login_token(value.strip(), client_address(request))
    raise AuthError(
        "credentials required", site=service.name,
        hint="send HTTP Basic (user, password) or 'Authorization: Bearer <token>'",
    )


def current_user(request: Request) -> User:
    """The authenticated user of a request (a FastAPI dependency)."""
    user = _credentials(request.app.state.service, request)
    note_user(request, user.name)
    return user


UserDep = Annotated[User, Depends(current_user)]


def _error_body(request: Request, err: SiteError) -> dict[str, Any]:
    """An error in the shape of the API the request went to (Opal's under ``/ws``)."""
    return opal_dto.error(err) if request.url.path.startswith("/ws/") else {"error": err.to_wire()}


class BodyLimitAndHead:
    """Refuses a request whose Content-Length is above the site's limit before the body is read
    (413, in the shape of the API it went to), and sends the audit chain's head with every answer
    but a 401 and ``/v1/health``'s. A plain ASGI middleware: Starlette's ``@app.middleware("http")``
    costs a task and two streams per request."""

    def __init__(self, app: ASGIApp, *, service: SiteService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        length = request.headers.get("content-length")
        limit = self.service.config.listen.max_body_mb << 20
        if length is not None and (not length.isdigit() or int(length) > limit):
            err = CallError(f"request body larger than the site's limit of {limit >> 20} MiB", site=self.service.name,
                            hint="send less data per call")
            await JSONResponse(_error_body(request, err), status_code=413)(scope, receive, send)
            return
        health = scope["path"] == "/v1/health"

        async def send_with_head(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] != 401 and not health:
                # a copy of the audit chain's head, held elsewhere
                MutableHeaders(scope=message)[HEAD_HEADER] = self.service.audit.head
            await send(message)

        await self.app(scope, receive, send_with_head)


CALL_THREADS = 40  # worker threads for calls and other synchronous routes: anyio's default


def _threads_for(service: SiteService) -> Any:
    """The server's worker threads: the calls' :data:`CALL_THREADS` and, beside them, one for every login the
    site lets check or wait at once (``[login] concurrent_checks`` and ``check_queue``), so that logins waiting
    for a password check (a flood of guesses at the Opal door waits up to ``signin_wait_s``) never hold the
    threads the analysts' calls run in."""
    login = service.config.login

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = CALL_THREADS + login.concurrent_checks + login.check_queue
        yield

    return lifespan


def create_app(service: SiteService) -> FastAPI:
    docs = service.config.listen.api_docs  # /docs and /openapi.json need no credentials: off by default
    app = FastAPI(title=f"dsfed site {service.name}", version=__version__, docs_url="/docs" if docs else None,
                  redoc_url=None, openapi_url="/openapi.json" if docs else None,
                  generate_unique_id_function=operation_id, responses=ERROR_RESPONSES,
                  lifespan=_threads_for(service))
    app.state.service = service
    generated = app.openapi
    app.openapi = lambda: describe_symbol_names(  # type: ignore[method-assign]
        generated(), service.rules.strings.max_name_length)

    app.add_middleware(BodyLimitAndHead, service=service)
    app.add_middleware(AccessLogMiddleware, logger=service.access_log)  # outermost: sees every request

    @app.exception_handler(SiteError)
    async def site_error(request: Request, exc: SiteError) -> JSONResponse:
        exc.at(site=service.name)
        return JSONResponse({"error": exc.to_wire()}, status_code=exc.http_status, headers=auth_headers(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """What the HTTP layer refuses before a route runs, in the site's error shape."""
        err: SiteError
        if exc.status_code == 404:
            hint = ("this site serves the part of Opal's DataSHIELD API that docs/analyst.md lists"
                    if request.url.path.startswith("/ws/") else "see the site's API in docs/")
            err = NotFound(f"no route {request.url.path}", site=service.name, hint=hint)
        elif exc.status_code == 405:
            err = ProtocolError(f"{request.method} is not allowed on {request.url.path}", http_status=405,
                                site=service.name)
        else:
            err = ProtocolError(f"malformed request: {exc.detail}", http_status=exc.status_code, site=service.name,
                                hint="send the body as JSON (an R script as text/plain under /ws)")
        return JSONResponse(_error_body(request, err), status_code=err.http_status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()))
        err = CallError(f"malformed request: {where}: {first.get('msg')}", site=service.name)
        return JSONResponse({"error": err.to_wire()}, status_code=422)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        err = service.internal_error(exc, {"function": request.url.path})
        return JSONResponse({"error": err.to_wire()}, status_code=500)

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "site": service.name, "version": __version__}

    @app.get("/v1/whoami")
    def whoami(user: UserDep) -> dict[str, Any]:
        return {"user": user.name, "role": user.role, "site": service.name}

    @app.get("/v1/functions")
    def functions(user: UserDep) -> dict[str, Any]:
        return service.functions(user)

    @app.get("/v1/tables")
    def tables(user: UserDep) -> list[dict[str, Any]]:
        return service.tables(user)

    @app.post("/v1/sessions", status_code=201, responses=V1_SESSION)
    def open_session(user: UserDep, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        return service.open_session(user, profile)

    @app.get("/v1/sessions/{sid}")
    def get_session(sid: str, user: UserDep) -> dict[str, Any]:
        return service.session_exists(user, sid)

    @app.delete("/v1/sessions/{sid}")
    def close_session(sid: str, user: UserDep) -> dict[str, Any]:
        service.close_session(user, sid)
        return {"closed": sid}

    @app.get("/v1/sessions/{sid}/symbols")
    def symbols(sid: str, user: UserDep) -> list[dict[str, str]]:
        return service.symbols(user, sid)

    @app.delete("/v1/sessions/{sid}/symbols/{name}")
    def remove_symbol(sid: str, name: str, user: UserDep) -> dict[str, Any]:
        service.remove_symbol(user, sid, name)
        return {"removed": name}

    @app.post("/v1/sessions/{sid}/aggregate")
    def aggregate(sid: str, body: AggregateBody, user: UserDep) -> dict[str, Any]:
        return {"result": service.aggregate(user, sid, body.request())}

    @app.post("/v1/models", openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"type": "object", "description": "a GLM model file, or an ONNX file as "
                                        '{"format": "onnx/base64", "model": BASE64} (dsfed_core/models.py)'}}}}})
    async def upload_model(request: Request, user: UserDep) -> dict[str, Any]:
        """Upload a model file (a GLM, or an ONNX graph): stored by its SHA-256 if the site's rules
        approve it (models.approved, or models.analyst_glm for a GLM of the analyst's own; ONNX only
        where models.onnx); the size is checked before the model is read; predictDS then applies it."""
        return await run_in_threadpool(service.upload_model, user, await request.body())

    @app.post("/v1/sessions/{sid}/cost")
    def cost(sid: str, body: CallBody, user: UserDep) -> dict[str, Any]:
        """What the call would charge your privacy budget on each table it reads, and what you have
        left there; nothing is run, released or spent."""
        return service.cost(user, sid, body.request())

    @app.post("/v1/sessions/{sid}/pooled")
    def pooled(sid: str, body: PooledBody, user: UserDep) -> dict[str, Any]:
        """Release a pooled step: every site's sealed vector relayed, the pooled cells checked here."""
        return {"result": service.release_pooled(user, sid, body.model_dump())}

    @app.post("/v1/sessions/{sid}/assign", responses=V1_SYMBOL)
    def assign(sid: str, body: AssignBody, user: UserDep) -> dict[str, Any]:
        return service.assign(user, sid, body.symbol, body.request())

    @app.post("/v1/sessions/{sid}/assign-table", responses=V1_SYMBOL)
    def assign_table(sid: str, body: AssignTableBody, user: UserDep) -> dict[str, Any]:
        return service.assign_table(user, sid, body.symbol, body.table, body.variables)

    @app.get("/v1/budget/mine")
    def my_budget(user: UserDep) -> dict[str, Any]:
        """Your own privacy budget: spent and remaining per table (the ledger's figures)."""
        return service.my_budget(user)

    @app.get("/v1/budget")
    def budget(user: UserDep) -> dict[str, Any]:
        """Governance: privacy budget spent and remaining per analyst x table."""
        return service.budget(user)

    @app.get("/v1/audit")
    def audit(user: UserDep) -> list[dict[str, Any]]:
        return service.audit_records(user)

    @app.get("/v1/audit/verify")
    def audit_verify(user: UserDep) -> dict[str, Any]:
        """Governance: the audit chain verified at the site with its key, and the chain's head."""
        return service.audit_verify(user)

    # the Opal DataSHIELD protocol (/ws) for existing DataSHIELD clients: the same service
    app.include_router(opal_router(service))

    return app
