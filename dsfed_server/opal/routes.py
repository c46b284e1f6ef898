"""The Opal DataSHIELD REST subset under ``/ws``: what the PyPI ``datashield`` + ``datashield-opal``
(``obiba-opal``) clients call, served by the same :class:`SiteService` as the native API.

Routes parse the Opal request, call the service (which dispatches, applies the
disclosure rules and audits, exactly as for a native call) and answer in
Opal's form: results as dsBase's R value, in R's serialization for a client that
asks for it (R's DSOpal) or as ``jsonlite`` JSON (:mod:`~dsfed_server.opal.answers`),
command ids as text, errors as Opal's ``ClientErrorDto`` carrying dsfed's message
(site, function, rule). Credentials: HTTP Basic, ``Authorization: X-Opal-Auth
base64(user:password)`` (opalr), a token in ``X-Opal-Auth: <token>`` or
``Authorization: Bearer <token>``; or, after a sign-in with one of them on
``GET /ws/system/subject-profile/_current``, Opal's ``opalsid`` cookie
(:mod:`~dsfed_server.opal.signin`), as R's opalr authenticates.

(No ``from __future__ import annotations`` here: the routes' parameters name ``OpalUser``, the
dependency of one router's sign-in sessions, which FastAPI must see as a type, not as a name.)
"""

import base64
from typing import Annotated, Any, Callable, Coroutine

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from dsfed_server.access_log import note_user
from dsfed_server.auth import auth_headers, client_address
from dsfed_server.config import User
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_core.errors import AuthError, CallError, Forbidden, NotEnabled, NotFound, NotSupported, SiteError
from dsfed_server.opal import dto
from dsfed_server.opal.answers import answer, no_value, wants_r
from dsfed_server.opal.commands import CommandStore
from dsfed_server.opal.rserialize import MEDIA_TYPE, serialize
from dsfed_server.opal.signin import (
    COOKIE_PATH, SAFE_METHODS, SESSION_COOKIE, XSRF_COOKIE, XSRF_HEADER, WebSession, WebSessions,
)
from dsfed_server.opal.tables import X_OPAL, check_identifier_options, parse_table, parse_variables
from dsfed_server.rvalues import RVector
from dsfed_server.openapi_doc import WS_ANSWER, WS_DONE, WS_SCRIPT, WS_SESSION, WS_SYMBOL
from dsfed_server.service import LIST_FUNCTIONS_HINT, CallRequest, SiteService
from dsfed_server.workspace import check_symbol_name


MAX_WAIT_S = 300.0  # longest a ``wait=true`` poll holds the request
# where a DataSHIELD user finds the functions a site enables (GET /v1/functions is the native API's)
WS_FUNCTIONS_HINT = ("DSSession.methods() (Python datashield) or ds.listServersideFunctions() (R) list "
                     "the functions this site enables")
UNSERVED = "docs/analyst.md, 'What /ws does not serve'"


def at_door(exc: SiteError) -> SiteError:
    """The error as a DataSHIELD user reads it: a hint at the native API's function listing, which
    an Opal client cannot reach, points to the client's own listing instead."""
    if exc.hint == LIST_FUNCTIONS_HINT:
        exc.hint = WS_FUNCTIONS_HINT
    return exc


def error_response(exc: SiteError, service: SiteService) -> JSONResponse:
    at_door(exc.at(site=service.name))
    return JSONResponse(dto.error(exc), status_code=exc.http_status, headers=auth_headers(exc))


class OpalRoute(APIRoute):
    """A route answering errors in Opal's shape and carrying Opal's version header."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            service = request.app.state.service
            try:
                if not service.rules.functions.datashield_protocol:
                    raise NotEnabled("this site does not answer the DataSHIELD (Opal) protocol",
                                     rule="functions.datashield_protocol",
                                     hint="use the dsfed client and its native API (/v1)")
                response = await handler(request)
            except SiteError as exc:
                response = error_response(exc, service)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
                where = ".".join(str(p) for p in first.get("loc", ()))
                response = error_response(CallError(f"malformed request: {where}: {first.get('msg')}"), service)
            except Exception as exc:  # a bug: HTTP 500 with an error id in the server and audit logs
                internal = service.internal_error(exc, {"function": request.url.path})
                response = JSONResponse({**dto.error(internal), "code": 500}, status_code=500)
            response.headers["X-Opal-Version"] = dto.OPAL_PROTOCOL_VERSION
            return response

        return route


def _credentials(request: Request) -> User | None:
    """The user of the request's credentials (password or token), None if it sends none."""
    service: SiteService = request.app.state.service
    token = request.headers.get("x-opal-auth", "").strip()
    if token:
        return service.login_token(token, client_address(request))
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() in ("basic", "x-opal-auth") and value:
        try:
            name, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            raise AuthError("malformed credentials", site=service.name) from None
        # DataSHIELD's clients give up at a 429: a sign-in here waits longer than a native login
        return service.login_password(name, password, client_address(request),
                                      wait_s=service.config.login.signin_wait_s)
    if scheme.lower() == "bearer" and value:
        return service.login_token(value.strip(), client_address(request))
    return None


def _signed_in(request: Request, signins: WebSessions) -> WebSession:
    """The sign-in session of the request's ``opalsid`` cookie; a request that can change anything
    must echo the session's cross-site request token (``X-XSRF-TOKEN``)."""
    service: SiteService = request.app.state.service
    session = signins.get(request.cookies[SESSION_COOKIE])
    if session is None:
        raise AuthError(f"the sign-in session of this request's {SESSION_COOKIE} cookie has ended (signed out, idle "
                        f"for more than {signins.idle_timeout_s:g} s, or the site restarted)", site=service.name,
                        hint="sign in again (R: datashield.login)")
    if request.method not in SAFE_METHODS and not session.xsrf_matches(request.headers.get(XSRF_HEADER)):
        refusal = Forbidden(f"a request authenticated by the {SESSION_COOKIE} cookie must carry the session's "
                            f"{XSRF_COOKIE} cookie value in an X-XSRF-TOKEN header (a check against cross-site "
                            "request forgery)", site=service.name,
                            hint="send the header as R's opalr does, or send credentials with each request")
        service.audit.record(user=session.user.name, session=None, function="crossSiteCheck", kind="auth",
                             call=f"{request.method} {request.url.path}"[:300], address=client_address(request),
                             outcome=refusal.kind, rule=None, message=refusal.message)
        raise refusal
    return session


async def _script(request: Request) -> str:
    try:
        return (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise CallError("the R script body is not UTF-8 text") from None


def opal_router(service: SiteService) -> APIRouter:
    """The ``/ws`` routes of one site."""
    router = APIRouter(prefix="/ws", route_class=OpalRoute, tags=["Opal DataSHIELD"])
    commands = CommandStore()
    signins = WebSessions(service.config.site.session_idle_timeout_s)

    def opal_user(request: Request) -> User:
        """The authenticated user of an Opal request: by its credentials, else by its sign-in cookie."""
        user = _credentials(request)
        if user is None and request.cookies.get(SESSION_COOKIE):
            session = _signed_in(request, signins)
            request.state.signin = session
            user = session.user
        if user is None:
            raise AuthError("credentials required", site=service.name,
                            hint="send HTTP Basic (user, password) or 'X-Opal-Auth: <token>'")
        note_user(request, user.name)
        return user

    OpalUser = Annotated[User, Depends(opal_user)]

    def run(user: User, sid: str, script: str, call: Callable[[], Any], asynchronous: bool,
            with_result: bool, symbol: str | None = None, accept: str | None = None) -> Response:
        """Run a service call now, or queue it as a command and answer its id as text (an assign
        answers an empty text). A command is queued only for the caller's session and a valid
        symbol name; the service checks the call itself when the command runs (and audits it)."""
        if asynchronous:
            service.session_exists(user, sid)
            if symbol is not None:
                check_symbol_name(symbol, service.limits.max_name_length)

            def command_call() -> Any:
                try:
                    return call()
                except SiteError as exc:
                    raise at_door(exc) from None

            command = commands.submit(user.name, sid, script, command_call, with_result=with_result)
            return PlainTextResponse(command.id)
        result = call()
        return answer(result, accept) if with_result else PlainTextResponse("")

    # --- who am I, what data -----------------------------------------------------------

    @router.get("/system/subject-profile/_current")
    def current_subject(request: Request, response: Response, user: OpalUser) -> dict[str, Any]:
        """Who signed in; a sign-in with credentials opens a sign-in session (Opal's ``opalsid``
        and ``XSRF-TOKEN`` cookies), which authenticates the client's later requests."""
        if getattr(request.state, "signin", None) is None:
            address = client_address(request)
            sid, session = signins.open(user, address)
            secure = request.url.scheme == "https"
            response.set_cookie(SESSION_COOKIE, sid, path=COOKIE_PATH, httponly=True, secure=secure,
                                samesite="strict")
            response.set_cookie(XSRF_COOKIE, session.xsrf, path=COOKIE_PATH, secure=secure, samesite="strict")
            service.audit.record(user=user.name, session=None, function="signIn", kind="auth", call="",
                                 address=address, outcome="ok", rule=None, message="")
        return dto.subject(user.name, user.role)

    @router.delete("/auth/session/{sid}", response_class=Response, responses=WS_DONE)
    def sign_out(sid: str, request: Request, user: OpalUser) -> Response:
        """End a sign-in session (``_current``: this request's), as R's ``opal.logout`` does."""
        if sid == "_current":
            sid = request.cookies.get(SESSION_COOKIE, "")
        if not sid or not signins.close(sid, user):
            raise NotFound("no such sign-in session of this account", hint="it has ended already")
        service.audit.record(user=user.name, session=None, function="signOut", kind="auth", call="",
                             address=client_address(request), outcome="ok", rule=None, message="")
        response = Response(status_code=200)
        for name in (SESSION_COOKIE, XSRF_COOKIE):
            response.delete_cookie(name, path=COOKIE_PATH)
        return response

    @router.get("/datasources")
    def datasources(user: OpalUser) -> list[dict[str, Any]]:
        return dto.datasources(service.tables(user))

    def _table(user: User, project: str, table: str) -> dict[str, Any]:
        ref = f"{project}.{table}"
        found = [t for t in service.tables(user) if t["name"] == ref]
        if not found:
            raise NotFound(f"no table {ref!r} here")
        return found[0]

    @router.get("/datasource/{project}/table/{table}")
    def table(project: str, table: str, user: OpalUser) -> dict[str, Any]:
        return dto.table(project, _table(user, project, table))

    @router.get("/datasource/{project}/table/{table}/variables")
    def variables(project: str, table: str, user: OpalUser) -> list[dict[str, Any]]:
        return dto.variables(_table(user, project, table))

    # --- configuration: methods and profiles -------------------------------------------

    @router.get("/datashield/env/{kind}/methods")
    def methods(kind: str, user: OpalUser, profile: str = DEFAULT_PROFILE) -> list[dict[str, Any]]:
        if kind not in ("aggregate", "assign"):
            raise NotFound(f"no DataSHIELD environment {kind!r}", hint="aggregate or assign")
        listing = service.functions(user, profile or DEFAULT_PROFILE)  # "" is the default profile, as in Opal
        return [dto.method(f["name"]) for f in listing["functions"] if f["kind"] == kind]

    @router.get("/datashield/profiles")
    def profiles(user: OpalUser) -> list[dict[str, Any]]:
        return [dto.profile(p["name"]) for p in service.profiles(user)]

    @router.get("/datashield/profile/{name}")
    def profile(name: str, user: OpalUser) -> dict[str, Any]:
        name = name or DEFAULT_PROFILE
        if name not in [p["name"] for p in service.profiles(user)]:
            raise NotFound(f"no profile {name!r} at this site")
        return dto.profile(name)

    # --- sessions ----------------------------------------------------------------------

    @router.post("/datashield/sessions", status_code=201, responses=WS_SESSION)
    def open_session(user: OpalUser, profile: str = DEFAULT_PROFILE, wait: bool = True,
                     restore: str | None = None) -> dict[str, Any]:
        if restore:
            raise NotFound(f"no workspace {restore!r}: dsfed does not keep workspaces after a session",
                           hint="open a session without restore and assign the tables again")
        opened = service.open_session(user, profile or DEFAULT_PROFILE)
        return dto.session(opened["session"], user.name, opened["profile"])

    @router.get("/datashield/session/{sid}")
    def get_session(sid: str, user: OpalUser) -> dict[str, Any]:
        info = service.session_exists(user, sid)
        return dto.session(sid, user.name, info["profile"])

    @router.delete("/datashield/session/{sid}", response_class=Response, responses=WS_DONE)
    def close_session(sid: str, user: OpalUser) -> Response:
        service.close_session(user, sid)
        commands.drop_session(sid)
        return Response(status_code=200)

    # --- calls -------------------------------------------------------------------------

    @router.post("/datashield/session/{sid}/aggregate", responses=WS_ANSWER, openapi_extra=WS_SCRIPT)
    async def aggregate(sid: str, request: Request, user: OpalUser,
                        asynchronous: Annotated[bool, Query(alias="async")] = False) -> Response:
        script = await _script(request)
        call = CallRequest(text=script)
        return await run_in_threadpool(
            run, user, sid, script, lambda: service.aggregate(user, sid, call, shape="r"), asynchronous, True,
            accept=request.headers.get("accept"))

    def table_assignment(user: User, sid: str, symbol: str, table: str, asynchronous: bool,
                         variables: str | None, identifiers: str | None, id_column: str | None) -> Response:
        """``symbol <- project.table`` (``missings`` changes nothing: no dsfed table has missing categories)."""
        check_identifier_options(identifiers, id_column)
        names = parse_variables(variables)
        return run(user, sid, f"{symbol} <- {table}",
                   lambda: service.assign_table(user, sid, symbol, table, names), asynchronous, False, symbol)

    @router.put("/datashield/session/{sid}/symbol/{symbol}", responses=WS_SYMBOL, openapi_extra=WS_SCRIPT)
    async def assign(sid: str, symbol: str, request: Request, user: OpalUser,
                     asynchronous: Annotated[bool, Query(alias="async")] = False,
                     variables: str | None = None, missings: bool = False,
                     identifiers: str | None = None, id: str | None = None) -> Response:
        """An R expression (``application/x-rscript``), or, typed ``application/x-opal``, a table
        (``project.table``) with Opal's table options, as R's DSOpal assigns one."""
        script = await _script(request)
        if request.headers.get("content-type", "").split(";")[0].strip().lower() == X_OPAL:
            return await run_in_threadpool(table_assignment, user, sid, symbol, parse_table(script), asynchronous,
                                           variables, identifiers, id)
        call = CallRequest(text=script)
        return await run_in_threadpool(
            run, user, sid, f"{symbol} <- {script}", lambda: service.assign(user, sid, symbol, call),
            asynchronous, False, symbol)

    @router.put("/datashield/session/{sid}/symbol/{symbol}/table/{table}", responses=WS_SYMBOL)
    def assign_table(sid: str, symbol: str, table: str, user: OpalUser,
                     asynchronous: Annotated[bool, Query(alias="async")] = False,
                     variables: str | None = None, missings: bool = False,
                     identifiers: str | None = None, id: str | None = None) -> Response:
        return table_assignment(user, sid, symbol, table, asynchronous, variables, identifiers, id)

    # --- symbols -----------------------------------------------------------------------

    @router.get("/datashield/session/{sid}/symbols", responses=WS_ANSWER)
    def symbols(sid: str, request: Request, user: OpalUser) -> Response:
        names = [s["name"] for s in service.symbols(user, sid)]
        if wants_r(request.headers.get("accept")):
            return Response(serialize(RVector(names, type="character")), media_type=MEDIA_TYPE)
        return JSONResponse(names)

    @router.delete("/datashield/session/{sid}/symbol/{symbol}", response_class=Response, responses=WS_DONE)
    def remove_symbol(sid: str, symbol: str, user: OpalUser) -> Response:
        service.remove_symbol(user, sid, symbol)
        return Response(status_code=200)

    # --- asynchronous commands ---------------------------------------------------------

    @router.get("/datashield/session/{sid}/commands")
    def list_commands(sid: str, user: OpalUser) -> list[dict[str, Any]]:
        service.session_exists(user, sid)  # a closed session has no commands: 404, not an empty list
        return [c.dto() for c in commands.list(user.name, sid)]

    @router.get("/datashield/session/{sid}/command/{rid}")
    def get_command(sid: str, rid: str, user: OpalUser, wait: bool = False) -> dict[str, Any]:
        command = commands.get(user.name, sid, rid)
        if wait:
            command.done.wait(MAX_WAIT_S)
        return command.dto()

    @router.get("/datashield/session/{sid}/command/{rid}/result", responses=WS_ANSWER)
    def command_result(sid: str, rid: str, request: Request, user: OpalUser, rm: bool = True,
                       wait: bool = False) -> Response:
        command = commands.get(user.name, sid, rid)
        if wait:
            command.done.wait(MAX_WAIT_S)
        if not command.finished:
            raise NotFound(f"command {rid!r} has no result yet ({command.status})", hint="poll its status first")
        if rm:
            commands.remove(user.name, sid, rid)
        if command.error is not None:
            raise command.error
        accept = request.headers.get("accept")
        return answer(command.result, accept) if command.with_result else no_value(accept)

    @router.delete("/datashield/session/{sid}/command/{rid}", response_class=Response, responses=WS_DONE)
    def remove_command(sid: str, rid: str, user: OpalUser) -> Response:
        commands.remove(user.name, sid, rid)
        return Response(status_code=200)

    # --- what dsfed does not serve, answered in Opal's own documents --------------------

    @router.get("/service/r/workspaces")
    def workspaces(user: OpalUser) -> list[dict[str, Any]]:
        """Saved R workspaces: dsfed keeps none (a session's symbols end with it), so the list is empty."""
        return []

    @router.delete("/service/r/workspaces", response_class=Response, responses=WS_DONE)
    def remove_workspace(user: OpalUser, name: str | None = None) -> Response:
        raise NotFound(f"no workspace {name!r}: dsfed keeps no workspaces after a session", hint=UNSERVED)

    @router.post("/datashield/session/{sid}/workspaces")
    def save_workspace(sid: str, user: OpalUser, save: str | None = None) -> Response:
        service.session_exists(user, sid)
        raise NotSupported("dsfed does not save workspaces: a session's symbols end with the session",
                           hint=f"assign the tables and symbols again in a new session; see {UNSERVED}")

    @router.put("/datashield/session/{sid}/workspace/{name}")
    def restore_workspace(sid: str, name: str, user: OpalUser) -> Response:
        raise NotFound(f"no workspace {name!r}: dsfed keeps no workspaces after a session", hint=UNSERVED)

    @router.get("/projects")
    def projects(user: OpalUser) -> Response:
        raise NotSupported("dsfed does not serve Opal projects (nor their resources)",
                           hint=f"DSSession's table listing (GET /ws/datasources) names the tables; see {UNSERVED}")

    @router.get("/system/conf/taxonomies")
    def taxonomies(user: OpalUser) -> Response:
        raise NotSupported("dsfed does not serve taxonomies; the data dictionary is in the table variables",
                           hint=f"GET /ws/datasource/{{project}}/table/{{table}}/variables; see {UNSERVED}")

    @router.get("/datasources/variables/_search")
    def search_variables(user: OpalUser) -> Response:
        raise NotSupported("dsfed does not search variables",
                           hint=f"list a table's variables (GET /ws/datasource/{{project}}/table/{{table}}/variables); "
                                f"see {UNSERVED}")

    @router.get("/project/{project}/resources")
    @router.get("/project/{project}/resource/{name}")
    def resources(project: str, user: OpalUser, name: str | None = None) -> Response:
        raise NotSupported("dsfed does not serve Opal resources", hint=f"assign a table instead; see {UNSERVED}")

    @router.put("/datashield/session/{sid}/symbol/{symbol}/resource/{resource}")
    def assign_resource(sid: str, symbol: str, resource: str, user: OpalUser) -> Response:
        raise NotSupported("dsfed does not serve Opal resources", hint=f"assign a table instead; see {UNSERVED}")

    return router
