"""An Opal answer in the form its client asks for: R's serialization or JSON.

R's opalr sends ``Accept: application/octet-stream`` where it wants an R value and unserializes
the answer; Python's datashield-opal sends ``Accept: application/json`` and reads Opal's JSON
(:func:`dsfed_server.rvalues.opal_json`). The choice follows the request's ``Accept`` header
(RFC 9110, HTTP Semantics, section 12.5.1): R's serialization when ``application/octet-stream``
is acceptable with a quality above ``application/json``'s, JSON otherwise (no header, ``*/*``).
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from dsfed_server.opal.rserialize import MEDIA_TYPE, serialize
from dsfed_server.rvalues import opal_json


def _quality(accept: str, media_type: str) -> float:
    """The quality ``accept`` gives ``media_type`` itself (wildcards not counted; absent: 0)."""
    best = 0.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0].lower() != media_type:
            continue
        quality = 1.0
        for param in fields[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        best = max(best, quality)
    return best


def wants_r(accept: str | None) -> bool:
    """Whether the client asks for R's serialization rather than JSON."""
    if not accept:
        return False
    return _quality(accept, MEDIA_TYPE) > max(0.0, _quality(accept, "application/json"))


def answer(value: Any, accept: str | None) -> Response:
    """The R value ``value`` (read as :mod:`dsfed_server.rvalues` reads values) as the client asks."""
    if wants_r(accept):
        return Response(serialize(value), media_type=MEDIA_TYPE)
    return JSONResponse(opal_json(value))


def no_value(accept: str | None) -> Response:
    """What an assignment answers: an empty text, or R's ``NULL`` for a client that asks for R values."""
    return Response(serialize(None), media_type=MEDIA_TYPE) if wants_r(accept) else PlainTextResponse("")
