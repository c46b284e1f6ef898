"""The call tree: the only form in which a client's request reaches a function.

A call arrives either as DataSHIELD-style text or as structured JSON, both read by
:mod:`dsfed_core.parser` (:func:`~dsfed_core.parser.parse`, :func:`~dsfed_core.parser.from_json`).
Both give the same immutable nodes below. Nothing is ever evaluated: the dispatcher looks up function names
in the registry and resolves symbols in the session's workspace.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from typing import Any, Iterator, Union

from dsfed_core.errors import CallError
from dsfed_core.lexer import tokenize
from dsfed_core.wire import encode_f64

Scalar = Union[str, int, float, bool, None]


@dataclass(frozen=True)
class Limits:
    """Limits from the site's rules file (``[strings]`` and ``[parser]``) on what a call may hold."""

    max_length: int = 80
    max_name_length: int = 20
    max_depth: int = 4


# A string holding only a list of numbers ("0.5,-1.2e-3,2") is data, not a name: DataSHIELD
# sends coefficient vectors so (ds.glm's beta.vect), longer than strings.max_length for larger
# models. Such strings are bounded by the call-text limit (text) or the request size (JSON) instead.
_NUMBER_LIST = re.compile(r"[-+0-9.eE, ]*")

# The largest magnitude of a number in a call, from text or JSON: whole numbers up to it are exact
# in float64, and sums, differences and squares of a few such numbers stay finite. A parameter may
# narrow it (its minimum and maximum in docs/functions.md).
NUMBER_LIMIT = 1e15


def check_number(value: int | float, where: str) -> None:
    """Refuse a number that is not finite or beyond :data:`NUMBER_LIMIT` (a 400-digit literal,
    ``1e308``): one rule for every number that reaches a function, applied where an argument is
    bound to its parameter (:func:`dsfed_server.registry.convert`), so the refusal names it."""
    ok = abs(value) <= NUMBER_LIMIT if isinstance(value, int) else math.isfinite(value) and abs(value) <= NUMBER_LIMIT
    if not ok:
        shown = (str(value) if not isinstance(value, int) or abs(value) < 10**20
                 else f"a {len(str(abs(value)))}-digit number")
        raise CallError(f"{where}: {shown} is not a finite number within +-{NUMBER_LIMIT:g}",
                        hint="numbers in a call are finite and at most 1e15 in magnitude")


@dataclass(frozen=True)
class Literal:
    value: Scalar

    def to_text(self) -> str:
        v = self.value
        if v is None:
            return "NULL"
        if v is True:
            return "TRUE"
        if v is False:
            return "FALSE"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(v)


@dataclass(frozen=True)
class Symbol:
    name: str

    def to_text(self) -> str:
        return self.name


@dataclass(frozen=True)
class Column:
    """``table$column``: a column of a table symbol in the workspace."""

    table: str
    column: str

    def to_text(self) -> str:
        return f"{self.table}${self.column}"


@dataclass(frozen=True)
class Vector:
    """``c(...)`` of literals of one type."""

    items: tuple[Literal, ...]

    def to_text(self) -> str:
        return "c(" + ", ".join(i.to_text() for i in self.items) + ")"

    @property
    def values(self) -> list[Scalar]:
        return [i.value for i in self.items]


@dataclass(frozen=True, eq=False)
class NumericVector:
    """A long ``c(...)`` of numbers from a structured call, held as one float array.

    Structured calls may carry many numbers (e.g. pooled noisy scores); holding them
    as an array keeps a million-element argument cheap to read and check.
    """

    array: np.ndarray

    def to_text(self) -> str:
        shown = ", ".join(repr(float(v)) for v in self.array[:5])
        return f"c({shown}{', ...' if self.array.size > 5 else ''})"

    @property
    def values(self) -> list[Scalar]:
        return self.array.tolist()


@dataclass(frozen=True)
class FormulaTerm:
    """One term of a model formula: a variable or an interaction ``a:b``."""

    variables: tuple[str, ...]

    def to_text(self) -> str:
        return ":".join(self.variables)


@dataclass(frozen=True)
class Formula:
    """``y ~ x1 + x2 + x1:x2``; ``intercept`` False for ``+ 0`` or ``- 1``."""

    response: str | None
    terms: tuple[FormulaTerm, ...]
    intercept: bool = True

    def to_text(self) -> str:
        rhs = [t.to_text() for t in self.terms]
        if not self.intercept:
            rhs.append("0")
        elif not rhs:
            rhs.append("1")
        lhs = f"{self.response} " if self.response else ""
        return f"{lhs}~ " + " + ".join(rhs)

    @property
    def variables(self) -> list[str]:
        seen: list[str] = []
        for name in ([self.response] if self.response else []) + [v for t in self.terms for v in t.variables]:
            if name not in seen:
                seen.append(name)
        return seen


@dataclass(frozen=True)
class Arg:
    name: str | None
    value: "Node"

    def to_text(self) -> str:
        return f"{self.name}={self.value.to_text()}" if self.name else self.value.to_text()


# the operators and functions of an arithmetic expression (:class:`Arith`), by R's precedence
ARITH_BINARY = ("|", "&", "==", "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "^")
ARITH_UNARY = ("neg", "!", "(")  # unary minus, logical not, parentheses (kept: R's names keep them)
ARITH_FUNCTIONS = ("log", "exp", "sqrt", "abs", "pmin", "pmax", "ifelse")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def r_number(value: float) -> str:
    """A number as R's ``deparse`` writes it (15 significant digits; scientific notation when it is
    shorter, as ``1e+05``), so that design column names match R's ``model.matrix``.

    >>> [r_number(v) for v in (2, 0.5, 100000, 123456, 1e-4, 0.001, -1.5)]
    ['2', '0.5', '1e+05', '123456', '1e-04', '0.001', '-1.5']
    """
    v = float(value)
    if v == 0 or not math.isfinite(v):
        return {0.0: "0", math.inf: "Inf", -math.inf: "-Inf"}.get(v, "NaN")
    mantissa, exponent = f"{v:.14e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    power = int(exponent)
    scientific = f"{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"
    digits = len(mantissa.lstrip("-").replace(".", ""))
    fixed = f"{v:.{max(0, digits - 1 - power)}f}"
    return fixed if len(fixed) <= len(scientific) else scientific


@dataclass(frozen=True)
class Arith:
    """An arithmetic expression over columns and numbers: ``D$age * 2``, ``log(D$pnodes + 1)``,
    ``ifelse(D$age > 50, 1, 0)`` (:func:`dsfed_core.parser.parse` with ``arithmetic=True``).

    ``op`` is one of :data:`ARITH_BINARY` (two arguments), :data:`ARITH_UNARY` (one) or
    :data:`ARITH_FUNCTIONS` (a call; ``log`` may name its ``base``). Nothing here is evaluated: the
    site's own interpreter (``dsfed_server.arithmetic``) gives each operator its meaning. ``to_text``
    writes it as R's ``deparse`` does, so a term of a model formula is named as R names it."""

    op: str
    args: tuple[Arg, ...]

    def to_text(self) -> str:
        parts = [_operand_text(a.value) if a.name is None else f"{a.name} = {_operand_text(a.value)}"
                 for a in self.args]
        if self.op in ARITH_FUNCTIONS:
            return f"{self.op}(" + ", ".join(parts) + ")"
        if self.op == "neg":
            return f"-{parts[0]}"
        if self.op == "!":
            return f"!{parts[0]}"
        if self.op == "(":
            return f"({parts[0]})"
        spaced = self.op not in ("/", "^")
        return f"{parts[0]} {self.op} {parts[1]}" if spaced else f"{parts[0]}{self.op}{parts[1]}"

    def leaves(self) -> Iterator["Node"]:
        """The columns, symbols and numbers the expression reads, in order."""
        for arg in self.args:
            if isinstance(arg.value, Arith):
                yield from arg.value.leaves()
            else:
                yield arg.value


@dataclass(frozen=True)
class Call:
    function: str
    args: tuple[Arg, ...]

    def to_text(self) -> str:
        return f"{self.function}(" + ", ".join(a.to_text() for a in self.args) + ")"


Node = Union[Literal, Symbol, Column, Vector, NumericVector, Formula, Call, Arith]


def _operand_text(node: Node) -> str:
    """An operand of an expression as R deparses it (numbers as :func:`r_number`, missing as NA)."""
    if isinstance(node, Literal) and node.value is None:
        return "NA"
    if isinstance(node, Literal) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return r_number(node.value)
    return node.to_text()


def depth(node: Node) -> int:
    """Nesting depth of calls and vectors (a bare literal or symbol has depth 0)."""
    if isinstance(node, Call):
        return 1 + max((depth(a.value) for a in node.args), default=0)
    if isinstance(node, (Vector, NumericVector)):
        return 1
    return 0


# --- structured JSON form -------------------------------------------------------------
#
#   {"lit": 1.5} | {"sym": "D"} | {"col": ["D", "age"]} | {"vec": [1, 2, 3]}
#   {"formula": "y ~ x1 + x2"} | {"expr": "log(D$pnodes + 1)"}
#   | {"call": "meanDS", "args": [node, ...], "kwargs": {"name": node}}
#   {"f64": "<base64 of little-endian float64 values>"}  (a long vector of numbers, read as raw numbers)


_SCALAR_SCHEMA = {"type": ["number", "string", "boolean", "null"]}
_LEAF_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"lit": _SCALAR_SCHEMA}, "required": ["lit"], "additionalProperties": False},
    {"type": "object", "properties": {"sym": {"type": "string"}}, "required": ["sym"], "additionalProperties": False},
    {"type": "object", "properties": {"col": {"type": "array", "items": {"type": "string"}, "minItems": 2,
                                              "maxItems": 2}},
     "required": ["col"], "additionalProperties": False},
    {"type": "object", "properties": {"vec": {"type": "array", "items": _SCALAR_SCHEMA}}, "required": ["vec"],
     "additionalProperties": False},
    {"type": "object", "properties": {"f64": {"type": "string", "format": "byte"}}, "required": ["f64"],
     "additionalProperties": False},
    {"type": "object", "properties": {"formula": {"type": "string"}}, "required": ["formula"],
     "additionalProperties": False},
    {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"],
     "additionalProperties": False},
]


def _call_node_schema(argument: dict[str, Any], function: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["call"], "additionalProperties": False,
            "properties": {"call": function, "args": {"type": "array", "items": argument},
                           "kwargs": {"type": "object", "additionalProperties": argument}}}


def call_schema(functions: list[str]) -> dict[str, Any]:
    """The JSON Schema of a call tree calling one of ``functions`` (for the API's OpenAPI document,
    so that generated requests reach the functions): the node shapes above, a nested call's
    arguments described one level down."""
    function = {"type": "string", "enum": functions, "description": "a registry function's name"}
    nested = _call_node_schema({"type": "object"}, function)
    return _call_node_schema({"anyOf": [*_LEAF_SCHEMAS, nested]}, function)


def to_json(node: Node) -> dict[str, Any]:
    if isinstance(node, Literal):
        return {"lit": node.value}
    if isinstance(node, Symbol):
        return {"sym": node.name}
    if isinstance(node, Column):
        return {"col": [node.table, node.column]}
    if isinstance(node, NumericVector):
        return encode_f64(node.array)
    if isinstance(node, Vector):
        return {"vec": node.values}
    if isinstance(node, Formula):
        return {"formula": node.to_text()}
    if isinstance(node, Arith):
        return {"expr": node.to_text()}
    positional = [to_json(a.value) for a in node.args if a.name is None]
    named = {a.name: to_json(a.value) for a in node.args if a.name is not None}
    return {"call": node.function, "args": positional, "kwargs": named}


# --- the limits, for both front doors -------------------------------------------------------


def check_limits(node: Node, limits: Limits) -> Node:
    """Apply the rules file's ``[strings]`` limits to a call tree, however it arrived (parsed call
    text or the structured JSON form): every name the analyst chooses (symbol, table, column, formula
    variable) at most ``strings.max_name_length`` characters (the names of a function and of its
    arguments are not: they are looked up in the registry, where an unknown one is "not registered"
    or an "unused argument", however long -- dsBase's own argument names run to 31 characters), every string at most
    ``strings.max_length`` unless it only lists numbers. Both readers (:func:`dsfed_core.parser.from_json`,
    :func:`dsfed_core.parser.parse`) end here, and apply ``parser.max_depth`` as they read."""
    for name in _names(node):
        if len(name) > limits.max_name_length:
            shown = name if len(name) <= 40 else f"{name[:37]}..."
            raise CallError(f"name {shown!r} of {len(name)} characters exceeds the limit of {limits.max_name_length}",
                            rule="strings.max_name_length", hint="names of symbols, tables and columns are short")
    for text in _strings(node):
        if len(text) > limits.max_length and not _NUMBER_LIST.fullmatch(text):
            raise CallError(f"string of {len(text)} characters exceeds the limit of {limits.max_length}",
                            rule="strings.max_length", hint="strings in a call are short; numbers go as numbers")
    return node


_WORD = re.compile(r"[A-Za-z.][A-Za-z0-9._]*")


def referenced_names(node: Node) -> Iterator[str]:
    """Every name by which a call tree may reach data: its symbol, table and column names, formula
    variables, and the names written in its strings (a formula, a column list or ``"D$age"`` given
    as text, as dsBase's functions take them). Function and argument names are not among them."""
    yield from _names(node)
    for text in _strings(node):
        yield from _WORD.findall(text)


def _names(node: Node) -> Iterator[str]:
    if isinstance(node, Symbol):
        yield node.name
    elif isinstance(node, Column):
        yield from (node.table, node.column)
    elif isinstance(node, Formula):
        yield from (t.text for variable in node.variables for t in tokenize(variable) if t.kind == "NAME")
    elif isinstance(node, Arith):
        for leaf in node.leaves():
            yield from _names(leaf)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from _names(arg.value)


def _strings(node: Node) -> Iterator[str]:
    if isinstance(node, Literal) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, Vector):
        yield from (v for v in node.values if isinstance(v, str))
    elif isinstance(node, Call):
        for arg in node.args:
            yield from _strings(arg.value)


def check_vector(vec: Vector) -> None:
    """A vector holds literals of one kind: numbers, strings or booleans."""
    kinds = {
        "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__
        for v in vec.values
        if v is not None
    }
    if len(kinds) > 1:
        raise CallError(f"c(...) mixes {', '.join(sorted(kinds))}; give elements of one type")
