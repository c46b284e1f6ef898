"""Building calls from Python values (the native client's call syntax).

``Ref("D$age")`` names a server-side symbol or column; ``Formula("y ~ x")`` a
model formula; ``Call("subsetRowsDS", Ref("D"), "age", ">=", 50)`` a nested call.
Plain Python strings, numbers, booleans and ``None`` are literals; lists are
``c(...)`` vectors; a numpy array of numbers travels as raw float64 (``{"f64": ...}``).
Each builds the call tree of :mod:`dsfed_core.calltree`, whose ``to_json`` is the one
writer of the wire form the sites read.

A :class:`Ref` with a ``digest`` is a **handle**: what ``assign`` returned. A call that
reads it sends the digest along, and a site whose symbol no longer holds that definition
(removed, or replaced by a later assign) refuses the call (``stale_handle``) instead of
answering about other data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from dsfed_core import calltree
from dsfed_core.parser import parse_formula

_REF = re.compile(r"([A-Za-z][A-Za-z0-9._]*)(?:\$([A-Za-z.][A-Za-z0-9._]*))?")


@dataclass(frozen=True)
class Ref:
    """A server-side symbol (``"D"``) or table column (``"D$age"``); with ``digest``, a handle
    on the symbol's definition (as ``assign`` returns it)."""

    name: str
    digest: str | None = None

    def __post_init__(self) -> None:
        if not _REF.fullmatch(self.name):
            raise ValueError(f"{self.name!r} is not a symbol or table$column reference")

    @property
    def symbol(self) -> str:
        """The workspace symbol (``"D"`` of ``"D$age"``)."""
        return self.name.partition("$")[0]

    def column(self, column: str) -> "Ref":
        """A column of this table symbol, keeping the handle's digest: ``handle.column("age")``."""
        return Ref(f"{self.symbol}${column}", self.digest)

    def node(self) -> calltree.Node:
        table, _, column = self.name.partition("$")
        return calltree.Column(table, column) if column else calltree.Symbol(table)


@dataclass(frozen=True)
class Formula:
    """A model formula, ``Formula("y ~ x1 + x2")`` (checked here with the sites' parser)."""

    text: str

    def node(self) -> calltree.Node:
        return parse_formula(self.text)


class Call:
    """A call of a registry function: ``Call("meanDS", Ref("D$age"))``."""

    def __init__(self, function: str, *args: Any, **kwargs: Any) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs

    def node(self) -> calltree.Call:
        args = [calltree.Arg(None, to_node(a)) for a in self.args]
        args += [calltree.Arg(k, to_node(v)) for k, v in self.kwargs.items()]
        return calltree.Call(self.function, tuple(args))

    def tree(self) -> dict[str, Any]:
        return calltree.to_json(self.node())

    def handles(self) -> dict[str, str]:
        """The handles this call reads (symbol -> digest), nested calls included."""
        return dict(_handles([*self.args, *self.kwargs.values()]))


def _handles(values: list[Any]) -> Iterator[tuple[str, str]]:
    for value in values:
        if isinstance(value, Ref) and value.digest:
            yield value.symbol, value.digest
        elif isinstance(value, Call):
            yield from value.handles().items()


def _literal(value: Any) -> calltree.Literal:
    value = value.item() if hasattr(value, "item") else value  # a numpy scalar
    if value is None or isinstance(value, (str, int, float, bool)):
        return calltree.Literal(value)
    raise TypeError(f"cannot send a {type(value).__name__} as a call argument")


def to_node(value: Any) -> calltree.Node:
    """The call-tree node of a Python value."""
    if isinstance(value, (Ref, Formula, Call)):
        return value.node()
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiu" and value.ndim == 1:
        return calltree.NumericVector(value.astype(float))
    if isinstance(value, (list, tuple)):
        return calltree.Vector(tuple(_literal(v) for v in value))
    return _literal(value)


def to_tree(value: Any) -> dict[str, Any]:
    """The wire form of a Python value as a call argument."""
    return calltree.to_json(to_node(value))
