"""What the site's OpenAPI document (``/v1`` and ``/ws``) says beyond the routes themselves:
operation ids, the error responses every route may give, and links.

A link says which value of a response a later call takes: the id of a new session feeds every
session route, a new symbol's name feeds the calls that describe or remove it. Clients read them
as documentation; stateful API fuzzers (schemathesis) follow them from login to session to assign
to aggregate.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from dsfed_server.workspace import symbol_name_schema


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = Field(description="the error's kind: bad_call, disclosure_refused, not_found, ...")
    site: str = Field(description="the site that answered")
    function: str = Field(description="the registry function or route it concerns, if any")
    rule: str | None = Field(description="the rule (rules-file or site-config key) that refused, if any")
    message: str
    hint: str | None = Field(description="what to do instead, if the site knows")


class ErrorBody(BaseModel):
    """An error as every route answers it; ``/ws`` adds Opal's ``code``, ``status`` and ``arguments``."""
    model_config = ConfigDict(extra="allow")
    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
    (400, "a request the site cannot read"),
    (401, "credentials missing or wrong"),
    (403, "refused by the disclosure rules, not enabled here, or not this role's"),
    (404, "no such session (or not the caller's), symbol, table, profile or command; under /ws, an Opal "
          "route dsfed does not serve (not_supported)"),
    (409, "a handle whose symbol was removed or replaced since its assign (stale_handle)"),
    (413, "a body larger than the site's limit"),
    (422, "a call or request that is malformed or not allowed"),
    (429, "too many failed logins from this address or for this name, or every password-check slot busy "
          "(see Retry-After)"),
    (500, "a fault of the site, with an error id found in its server and audit logs"),
    (503, "a backend the function needs (the R bridge) is unavailable"),
)}


def operation_id(route: APIRoute) -> str:
    """An OpenAPI operation id: the API (``v1`` or ``ws``) and the route's function, e.g.
    ``v1_open_session``; the links below name operations by it."""
    return f"{route.path.split('/')[1]}_{route.name}"


def _link(operation: str, description: str, parameters: dict[str, str], body: Any = None) -> dict[str, Any]:
    """An OpenAPI link: which value of a response a later call takes (for clients and for stateful
    API fuzzers such as schemathesis)."""
    link: dict[str, Any] = {"operationId": operation, "description": description, "parameters": parameters}
    return link if body is None else {**link, "requestBody": body}


# an Opal call's answer: its result as JSON, or with ``async=true`` the command's id as text
WS_ANSWER: dict[int | str, Any] = {200: {"description": "the result (R's serialize() format for Accept: "
                                                    "application/octet-stream), or the id of the queued command",
                                     "content": {"application/json": {"schema": {}},
                                                 "application/octet-stream": {"schema": {"type": "string",
                                                                                         "format": "binary"}},
                                                 "text/plain": {"schema": {"type": "string"}}}}}

# a route that answers with its status only (Opal's removals)
WS_DONE: dict[int | str, Any] = {200: {"description": "done (no content)"}}


def _session_links(api: str, sid: str, operations: tuple[str, ...]) -> dict[int | str, Any]:
    """The ``responses`` entry of a route that opens a session: its id feeds every session route."""
    links = {op: _link(f"{api}_{op}", "the new session's id", {"sid": sid}) for op in operations}
    return {201: {"description": "the session is open", "links": links}}


def _symbol_links(api: str, symbol: dict[str, str], described: Any) -> dict[int | str, Any]:
    """The ``responses`` entry of a route that assigns a symbol (``symbol``: the remove route's
    parameter and where the name is): ask for its class (``described``, the aggregate body), list
    the session's symbols, remove it."""
    sid = {"sid": "$request.path.sid"}
    links = {"classOfSymbol": _link(f"{api}_aggregate", "the new symbol's class", sid, described),
             "listSymbols": _link(f"{api}_symbols", "the session's symbols", sid),
             "removeSymbol": _link(f"{api}_remove_symbol", "remove the new symbol", {**sid, **symbol})}
    answer = {"content": {"text/plain": {"schema": {"type": "string"}}}} if api == "ws" else {}  # Opal: empty or an id
    return {200: {**answer, "description": "the symbol is assigned", "links": links}}


V1_SESSION = _session_links("v1", "$response.body#/session", (
    "get_session", "close_session", "symbols", "aggregate", "cost", "pooled", "assign", "assign_table"))
V1_SYMBOL = _symbol_links("v1", {"name": "$response.body#/symbol"},
                          {"call": {"call": "classDS", "args": [{"sym": "$response.body#/symbol"}]}})
WS_SESSION = _session_links("ws", "$response.body#/id", (
    "get_session", "close_session", "symbols", "aggregate", "assign", "assign_table", "list_commands"))
WS_SYMBOL = _symbol_links("ws", {"symbol": "$request.path.symbol"}, "classDS({$request.path.symbol})")
# the R script an Opal call sends as its body (text/plain)
WS_SCRIPT = {"requestBody": {"required": True, "content": {"text/plain": {"schema": {
    "type": "string", "description": "a DataSHIELD call, e.g. meanDS(D$age)"}}}}}


def describe_symbol_names(document: dict[str, Any], max_length: int) -> dict[str, Any]:
    """Give every symbol name in ``document`` (the ``symbol`` of an assign body, the symbol in a
    symbol route's path) the schema of the names the site accepts."""
    schema = symbol_name_schema(max_length)
    for name in ("AssignBody", "AssignTableBody"):
        document["components"]["schemas"][name]["properties"]["symbol"] = schema
    for path, operations in document["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                if f"{{{parameter['name']}}}" in path and parameter["name"] in ("symbol", "name"):
                    parameter["schema"] = schema
    return document
