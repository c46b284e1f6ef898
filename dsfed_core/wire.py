"""What travels between an analyst and a site, for both transports (HTTP and in-process).

A request body's JSON bytes (:func:`encode`) and the count of requests and bytes each way
(:class:`TransferStats`); and the wire form of a long vector of numbers: raw little-endian float64
in base64, ``{"f64": ...}``. One codec for both directions: a client sends long numeric arguments
so (a call tree's ``f64`` node, :mod:`dsfed_core.calltree`), and a site answers long vectors so
(noisy scores, histogram levels). Raw bytes keep a million numbers exact and cheap, where JSON
number text would not.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from dsfed_core.errors import SiteError, from_wire


# the earlier pooled cells ([identity, pooled count, column]) an analyst relays with one pooled release at most: the
# site refuses a longer relay, and the client relays no more (a cell left out is decided by each site alone)
MAX_RELAYED_CELLS = 10_000


def encode(body: dict[str, Any]) -> bytes:
    """The JSON bytes of a request body."""
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class TransferStats:
    """Requests made to one site and the bytes of their bodies, both ways."""

    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


def read_answer(status: int, content: bytes, *, site: str, function: str = "", origin: str = "") -> Any:
    """A site's answer as both transports read it: the decoded JSON, or the site's error raised as
    the :mod:`dsfed_core.errors` class its ``{"error": {...}}`` names. An answer that is not JSON,
    or an error status without dsfed's error body, is not from a dsfed site (``origin``: where it
    came from, for the message)."""
    try:
        payload, is_json = json.loads(content), True
    except ValueError:
        payload, is_json = None, False
    error = payload.get("error") if isinstance(payload, dict) else None
    if not is_json or (status >= 400 and not isinstance(error, dict)):
        raise SiteError(
            f"{origin or site} answered HTTP {status} without dsfed's JSON: not a dsfed site",
            site=site, function=function, status=status,
            hint="check the URL: a dsfed site's address is the one its administrator gives (it serves /v1/health)",
        )
    if status >= 400:
        err = from_wire(error, site=site, status=status)  # type: ignore[arg-type]
        err.function = err.function or function
        raise err
    return payload


def encode_f64(values: Any) -> dict[str, str]:
    """``{"f64": base64}`` of ``values`` as little-endian float64."""
    return {"f64": base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")}


def decode_f64(value: Any) -> np.ndarray:
    """The numbers of ``{"f64": base64}`` (or of a plain JSON list of numbers). Raises ValueError,
    saying what is wrong, for text that is not base64 or not whole 8-byte numbers."""
    if not isinstance(value, dict):
        return np.asarray(value, dtype=float)
    try:
        raw = base64.b64decode(value["f64"], validate=True)
    except (binascii.Error, TypeError, KeyError):
        raise ValueError('"f64" must be base64 text') from None
    if len(raw) % 8:
        raise ValueError('"f64" must hold whole 8-byte numbers')
    return np.frombuffer(raw, dtype="<f8").astype(float)
