"""Building structured calls from Python values (the native client's call syntax).

``Ref("D$age")`` names a server-side symbol or column; ``Formula("y ~ x")`` a
model formula; ``Call("subsetDS", Ref("D"), "age", ">=", 50)`` a nested call.
Plain Python strings, numbers, booleans and ``None`` are literals; lists are
``c(...)`` vectors; a numpy array of numbers travels as raw float64 (``{"f64": ...}``).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

_REF = re.compile(r"^([A-Za-z][A-Za-z0-9._]*)(?:\$([A-Za-z.][A-Za-z0-9._]*))?$")


@dataclass(frozen=True)
class Ref:
    """A server-side symbol (``"D"``) or table column (``"D$age"``)."""

    name: str

    def __post_init__(self) -> None:
        if not _REF.match(self.name):
            raise ValueError(f"{self.name!r} is not a symbol or table$column reference")

    def tree(self) -> dict[str, Any]:
        table, _, column = self.name.partition("$")
        return {"col": [table, column]} if column else {"sym": table}


@dataclass(frozen=True)
class Formula:
    text: str

    def tree(self) -> dict[str, Any]:
        return {"formula": self.text}


class Call:
    def __init__(self, function: str, *args: Any, **kwargs: Any) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs

    def tree(self) -> dict[str, Any]:
        return {
            "call": self.function,
            "args": [to_tree(a) for a in self.args],
            "kwargs": {k: to_tree(v) for k, v in self.kwargs.items()},
        }


def decode_f64(value: dict[str, str] | list[float]) -> np.ndarray:
    """Numbers a site sent as ``{"f64": base64}`` (or as a plain JSON list)."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["f64"], validate=True), dtype="<f8").astype(float)
    return np.asarray(value, dtype=float)


def to_tree(value: Any) -> dict[str, Any]:
    if isinstance(value, (Ref, Formula, Call)):
        return value.tree()
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiu" and value.ndim == 1:
        # long numeric vectors travel as raw little-endian float64, not as JSON number text
        return {"f64": base64.b64encode(np.ascontiguousarray(value, dtype="<f8").tobytes()).decode()}
    if isinstance(value, (list, tuple)):
        return {"vec": [v.item() if hasattr(v, "item") else v for v in value]}
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return {"lit": value}
    raise TypeError(f"cannot send a {type(value).__name__} as a call argument")
