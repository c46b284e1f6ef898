"""The function registry: the only functions an analyst can reach on a site.

Each entry names its kind (``aggregate`` returns a checked summary; ``assign``
stores a result as a symbol in the session's workspace), its typed parameters,
its implementation (Python, or R through rpy2), its documentation and the
disclosure rules it applies. A site serves an entry only if its rules file
enables it (in the session's profile).

One implementation serves both front doors: the native API returns the
implementation's value as JSON; the Opal-compatible API returns it in the
shape ``jsonlite`` gives for the R value dsBase returns. Where reading the
value as plain JSON would not give that shape, the entry's ``opal_shape``
adapter says what the value is in R (see :mod:`dsfed_server.rvalues`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections.abc import Collection, Generator, Iterable
from typing import TYPE_CHECKING, Any, Callable, Literal as Lit

import numpy as np

from dsfed_core.calltree import (NUMBER_LIMIT, Arith, Column, Formula, Literal, Node, NumericVector, Symbol, Vector,
                                 check_number)
from dsfed_server.disclosure.gate import Categories, Intervals
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_server.disclosure.rules import rule_keys
from dsfed_server.param_types import P
from dsfed_core.errors import CallError

if TYPE_CHECKING:
    from dsfed_server.context import CallContext


@dataclass(frozen=True)
class Param:
    name: str
    type: P
    doc: str
    required: bool = True
    default: Any = None
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    # a table parameter whose function builds only what it reads of the table (its rows and column
    # names, its columns through references such as "S$age" or a model's formula): a subset symbol
    # is passed as its RowSet, not built
    rows_only: bool = False


@dataclass(frozen=True)
class SecureSum:
    """How an aggregate's result is summed over sites under secure aggregation: ``fields`` are
    additive over sites (masked, and summed by the analyst); ``public`` fields are fixed by the
    request (e.g. coefficient names) and sent as they are; any other field is not sent."""

    fields: tuple[str, ...]
    public: tuple[str, ...] = ()


# what an implementation returns, by the release it goes through: a declaration of cells (the release gate),
# a protocol's steps (pooled or relayed), or a value its own checks released
Release = Lit["cells", "steps", "value"]


class UndeclaredRelease(TypeError):
    """An implementation returned what its registry entry does not declare (cells from an entry without
    ``cells=True``, say): a programming error in the function set, never the analyst's."""


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    kind: Lit["aggregate", "assign"]
    params: tuple[Param, ...]
    impl: Callable[..., Any]
    doc: str
    checks: tuple[str, ...] = ()
    backend: Lit["python", "R"] = "python"
    aliases: tuple[str, ...] = field(default=())
    opal_shape: Callable[[Any], Any] | None = None  # native JSON value -> R value (rvalues) for /ws
    secure_sum: SecureSum | None = None  # offered as a secure sum over sites (disclosure/secure_sum.py)
    # the result is a set of cells (gate.Intervals / gate.Categories) that the release gate checks,
    # per site or pooled over the sites (disclosure/gate.py); the implementation returns the declaration
    cells: bool = False
    # a protocol of several pooled steps (relay.PooledSteps) that runs only as a pooled release
    pooled_only: bool = False
    # a protocol of several steps that also runs relayed: checked per site, parameters from the sites
    relayable: bool = False

    @property
    def poolable(self) -> bool:
        """Offered as a pooled release (disclosure/relay.py): cells, additive fields, or a protocol."""
        return self.cells or self.pooled_only or self.secure_sum is not None

    def release_of(self, result: Any) -> Release:
        """The release ``result`` goes through, as this entry declares it: ``"cells"`` (the release gate),
        ``"steps"`` (a protocol, pooled or relayed) or ``"value"`` (released by the implementation's own
        checks). A result the entry does not declare raises :class:`UndeclaredRelease`: a declaration of
        cells from an entry without ``cells``; steps from one that is neither pooled nor relayed; a value
        from an entry that declares only cells, or only a protocol of pooled steps; and the steps a
        function declares part-way (a generator, :mod:`~dsfed_server.disclosure.declared`) not yet
        driven, which the service releases before what the function returns."""
        if isinstance(result, Generator):
            raise UndeclaredRelease(f"{self.name} declares releases part-way (a generator): the service releases "
                                    "them (disclosure.declared.run) before it releases what the function returns")
        if isinstance(result, (Intervals, Categories)):
            if not self.cells:
                raise UndeclaredRelease(f"{self.name} returned a declaration of cells ({type(result).__name__}) "
                                        "but its registry entry does not declare cells=True")
            return "cells"
        if isinstance(result, PooledSteps):
            if not (self.pooled_only or self.relayable or self.secure_sum is not None):
                raise UndeclaredRelease(f"{self.name} returned a protocol's steps but its registry entry declares "
                                        "neither pooled_only, relayable nor a secure sum")
            return "steps"
        if self.pooled_only or (self.cells and self.secure_sum is None and not self.relayable):
            declared = "pooled_only" if self.pooled_only else "cells=True"
            raise UndeclaredRelease(f"{self.name} returned a {type(result).__name__}, but its registry entry "
                                    f"declares {declared} and nothing else")
        return "value"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "backend": self.backend,
            "doc": self.doc,
            "checks": list(self.checks),
            "secure_sum": None if self.secure_sum is None else {
                "fields": list(self.secure_sum.fields), "public": list(self.secure_sum.public)},
            "cells": self.cells,
            "pooled_only": self.pooled_only,
            "relayable": self.relayable,
            "params": [
                {
                    "name": p.name,
                    "type": p.type.value,
                    "required": p.required,
                    "default": p.default,
                    "choices": list(p.choices) if p.choices else None,
                    "minimum": p.minimum,
                    "maximum": p.maximum,
                    "doc": p.doc,
                }
                for p in self.params
            ],
        }


class Registry:
    def __init__(self) -> None:
        self._specs: dict[str, FunctionSpec] = {}

    def add(self, spec: FunctionSpec) -> FunctionSpec:
        if spec.name in self._specs:
            raise ValueError(f"duplicate registry entry {spec.name}")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> FunctionSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def set_opal_shape(self, name: str, adapter: Callable[[Any], Any]) -> None:
        """Give an existing entry the adapter from its native result to dsBase's R value."""
        spec = self._specs[name]
        if spec.opal_shape is not None:
            raise ValueError(f"{name} already has an Opal shape adapter")
        self._specs[name] = replace(spec, opal_shape=adapter)

    def __iter__(self):
        return iter(self._specs.values())


REGISTRY = Registry()


def register(
    name: str,
    kind: Lit["aggregate", "assign"],
    params: list[Param] | tuple[Param, ...],
    *,
    checks: tuple[str, ...] = (),
    backend: Lit["python", "R"] = "python",
    opal_shape: Callable[[Any], Any] | None = None,
    secure_sum: SecureSum | None = None,
    cells: bool = False,
    pooled_only: bool = False,
    relayable: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator adding an implementation ``impl(ctx, **args)`` to the registry; its docstring is its doc.

    ``opal_shape`` maps the implementation's (JSON-ready) result to the R value
    dsBase returns, for the Opal-compatible front door; omit it when the plain
    JSON reading already gives dsBase's shape. ``cells``: the implementation returns a declaration
    of cells (:mod:`dsfed_server.disclosure.gate`) and the release gate decides what leaves;
    ``pooled_only``: a protocol of pooled steps, never released per site; ``relayable``: a protocol
    that also runs relayed (checked per site, its parameters derived by the sites). ``checks``: every
    rule (rules-file key) the implementation applies; a call that applies another is refused
    (:func:`dsfed_server.disclosure.checks.enforce_contract`).
    """

    for param in params:  # a count sizes arrays: its range is part of the function's contract
        if param.type is P.INTEGER and param.maximum is None and param.choices is None:
            raise ValueError(f"{name}: integer parameter {param.name!r} needs a maximum or choices")
    unknown = [rule for rule in checks if rule not in rule_keys()]
    if unknown:
        raise ValueError(f"{name}: checks {', '.join(unknown)} are no rules-file keys; known: {', '.join(rule_keys())}")

    def deco(impl: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY.add(
            FunctionSpec(
                name=name,
                kind=kind,
                params=tuple(params),
                impl=impl,
                doc=(impl.__doc__ or "").strip(),
                checks=tuple(dict.fromkeys(checks)),
                backend=backend,
                opal_shape=opal_shape,
                secure_sum=secure_sum,
                cells=cells,
                pooled_only=pooled_only,
                relayable=relayable,
            )
        )
        return impl

    return deco


# --- binding arguments ----------------------------------------------------------------


def match(spec: FunctionSpec, args: tuple) -> dict[str, Node]:
    """Match call arguments to parameters as R does (R Language Definition 4.3.2), converting none:
    exact names first, then unique partial names of the parameters left, then the unnamed
    arguments in order into the parameters still unmatched."""
    formals = [p.name for p in spec.params]
    named = [(i, a) for i, a in enumerate(args) if a.name]
    exact = _exact_match(formals, named)
    partial = _partial_match([f for f in formals if f not in exact.values()],
                             [(i, a) for i, a in named if i not in exact])
    by_position = exact | partial
    bound: dict[str, Node] = {formal: args[i].value for i, formal in by_position.items()}
    leftover = [i for i, a in enumerate(args) if not a.name]
    for formal in formals:
        if formal not in bound and leftover:
            bound[formal] = args[leftover.pop(0)].value
    unused = [a for i, a in named if i not in by_position] + [args[i] for i in leftover]
    if unused:
        raise CallError(f"unused argument{'s' if len(unused) > 1 else ''} "
                        f"({', '.join(a.to_text() for a in unused)}); arguments are {', '.join(formals)}")
    return bound


def _exact_match(formals: list[str], named: list[tuple[int, Any]]) -> dict[int, str]:
    """{argument position: parameter} for each argument named exactly as a parameter."""
    pairs = {i: a.name for i, a in named if a.name in formals}
    _once(pairs.values())
    return pairs


def _partial_match(formals: list[str], named: list[tuple[int, Any]]) -> dict[int, str]:
    """{argument position: parameter} for each named argument whose name begins exactly one of
    ``formals``; an argument that begins several is ambiguous."""
    pairs: dict[int, str] = {}
    for i, arg in named:
        hits = [f for f in formals if f.startswith(arg.name)]
        if len(hits) > 1:
            raise CallError(f"argument {i + 1} ({arg.name} = ...) matches multiple formal arguments: "
                            f"{', '.join(hits)}")
        pairs.update((i, f) for f in hits)
    _once(pairs.values())
    return pairs


def _once(formals: Iterable[str]) -> None:
    """Refuse a parameter matched by two arguments (R: matched by multiple actual arguments)."""
    seen: set[str] = set()
    for formal in formals:
        if formal in seen:
            raise CallError(f"formal argument {formal!r} matched by multiple actual arguments")
        seen.add(formal)


def bind(spec: FunctionSpec, args: tuple, ctx: "CallContext", only: Collection[str] | None = None
         ) -> dict[str, Any]:
    """Match call arguments to parameters and convert each (``only``: just these parameters,
    e.g. a noisy function's privacy arguments, leaving every other argument unread)."""
    bound = match(spec, args)
    values: dict[str, Any] = {}
    for param in spec.params:
        if only is not None and param.name not in only:
            continue
        node = bound.get(param.name)
        if node is None or (isinstance(node, Literal) and node.value is None and not param.required):
            if param.required:
                raise CallError(f"missing argument {param.name!r} ({param.doc})")
            values[param.name] = param.default
            continue
        values[param.name] = convert(param, node, ctx)
    return values


def _literal(param: Param, node: Node) -> Any:
    if not isinstance(node, Literal):
        raise CallError(f"argument {param.name!r} must be a {param.type.value} literal, got {node.to_text()!r}")
    return node.value


def _bounded(param: Param, value: int | float) -> int | float:
    check_number(value, f"argument {param.name!r}")
    if param.minimum is not None and value < param.minimum:
        raise CallError(f"argument {param.name!r} = {value} is below its minimum {param.minimum}")
    if param.maximum is not None and value > param.maximum:
        raise CallError(f"argument {param.name!r} = {value} is above its maximum {param.maximum}")
    return value


def convert(param: Param, node: Node, ctx: "CallContext") -> Any:
    """The value of argument ``node`` for ``param``, by the converter of the parameter's type."""
    if isinstance(node, Formula) and param.type is not P.FORMULA:
        raise CallError(f"argument {param.name!r} is a {param.type.value}, not a model formula")
    if isinstance(node, Arith) and param.type is not P.EXPRESSION:
        raise CallError(f"argument {param.name!r} is a {param.type.value}, not an arithmetic expression",
                        hint="derive the column first (deriveDS, or an assign text such as D$age * 2)")
    return _CONVERTERS[param.type](param, node, ctx)


def _reference(node: Node, ctx: "CallContext") -> Node:
    """A symbol, ``table$column`` or nested assign call, also given as a string (``"D$age"``)."""
    return ctx.parse_reference(node.value) if isinstance(node, Literal) and isinstance(node.value, str) else node


def _workspace_value(param: Param, node: Node, ctx: "CallContext") -> Any:
    return ctx.resolve(_reference(node, ctx))


def _table(param: Param, node: Node, ctx: "CallContext") -> Any:
    node = _reference(node, ctx)
    if param.rows_only and isinstance(node, Symbol) and (subset := ctx.site_subset(node.name)) is not None:
        return subset
    value = ctx.resolve(node)
    if not ctx.is_table(value):
        raise CallError(f"argument {param.name!r} must be a table (data frame), got {ctx.class_of(value)}")
    return value


def _vector(param: Param, node: Node, ctx: "CallContext") -> Any:
    value = _workspace_value(param, node, ctx)
    if ctx.is_table(value):
        raise CallError(f"argument {param.name!r} must be a vector (e.g. D$age), got a table")
    return value


def _formula(param: Param, node: Node, ctx: "CallContext") -> Formula:
    """A model formula, unquoted or as a string (read within the site's limits)."""
    if isinstance(node, Literal) and isinstance(node.value, str):
        from dsfed_core.parser import parse_formula

        node = parse_formula(node.value, ctx.limits)
    if not isinstance(node, Formula):
        raise CallError(f"argument {param.name!r} must be a model formula such as y ~ x1 + x2")
    return node


def _expression(param: Param, node: Node, ctx: "CallContext") -> Node:
    """An arithmetic expression over columns and numbers, unquoted (an assign text) or as a string
    (read within the site's limits); never evaluated here."""
    if isinstance(node, Literal) and isinstance(node.value, str):
        from dsfed_core.parser import parse_expression

        node = parse_expression(node.value, ctx.limits)
    if not isinstance(node, (Arith, Column, Symbol)):
        raise CallError(f"argument {param.name!r} must be an arithmetic expression such as log(D$pnodes + 1)")
    return node


def _name(param: Param, node: Node, ctx: "CallContext") -> str:
    """A column or table name, bare (``age``, ``D$age``) or quoted; not resolved."""
    if isinstance(node, Symbol):
        value: Any = node.name
    elif isinstance(node, Column):
        value = node.to_text()
    else:
        value = _literal(param, node)
    if not isinstance(value, str):
        raise CallError(f"argument {param.name!r} must be a name")
    return _choice(param, value)


def _string(param: Param, node: Node, ctx: "CallContext") -> str:
    value = _literal(param, node)
    if not isinstance(value, str):
        raise CallError(f"argument {param.name!r} must be a string, got {node.to_text()!r}")
    return _choice(param, value)


def _scalar(param: Param, node: Node, ctx: "CallContext") -> Any:
    """One number (finite, within the call-wide bound), string or boolean literal."""
    value = _literal(param, node)
    if value is None:
        raise CallError(f"argument {param.name!r} must be a number, string or TRUE/FALSE")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        check_number(value, f"argument {param.name!r}")
    return value


def _boolean(param: Param, node: Node, ctx: "CallContext") -> bool:
    value = _literal(param, node)
    if not isinstance(value, bool):
        raise CallError(f"argument {param.name!r} must be TRUE or FALSE, got {node.to_text()!r}")
    return value


def _bounded_number(param: Param, node: Node) -> int | float:
    """A number literal (or a string holding one) within the parameter's minimum and maximum."""
    value = _literal(param, node)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise CallError(f"argument {param.name!r} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CallError(f"argument {param.name!r} must be a number, got {node.to_text()!r}")
    return _bounded(param, value)


def _number(param: Param, node: Node, ctx: "CallContext") -> int | float:
    return _choice(param, _bounded_number(param, node))


def _integer(param: Param, node: Node, ctx: "CallContext") -> int:
    value = _bounded_number(param, node)
    if float(value) != int(value):
        raise CallError(f"argument {param.name!r} must be a whole number, got {value}")
    return _choice(param, int(value))


def _numbers(param: Param, node: Node, ctx: "CallContext") -> np.ndarray | list[float]:
    """``c(...)`` of numbers (a long one as an array), one number, or ``"1,2,3"``."""
    if isinstance(node, NumericVector):
        return _number_array(param, node.array)
    items = _number_items(param, node)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
        raise CallError(f"argument {param.name!r} must hold numbers only")
    return [float(_bounded(param, v)) for v in items]


def _number_items(param: Param, node: Node) -> list[Any]:
    """The items of ``c(...)``, of ``"1,2,3"`` (as numbers), or of one literal."""
    if isinstance(node, Vector):
        return node.values
    if isinstance(node, Literal) and isinstance(node.value, str):
        try:
            return [float(x) for x in node.value.split(",") if x.strip()]
        except ValueError:
            raise CallError(f"argument {param.name!r} must be numbers, e.g. \"1,2,3\"") from None
    return [_literal(param, node)]


def _number_array(param: Param, array: np.ndarray) -> np.ndarray:
    """A long vector of numbers: finite, within the call-wide bound and the parameter's range."""
    if array.size and not np.all(np.abs(array) <= NUMBER_LIMIT):  # inf and nan are refused too
        raise CallError(f"argument {param.name!r} has values that are not finite numbers within "
                        f"+-{NUMBER_LIMIT:g}")
    if (param.minimum is not None and array.min() < param.minimum) or (
            param.maximum is not None and array.max() > param.maximum):
        raise CallError(f"argument {param.name!r} has values outside [{param.minimum}, {param.maximum}]")
    return array


def _strings(param: Param, node: Node, ctx: "CallContext") -> list[str]:
    if isinstance(node, NumericVector):
        raise CallError(f"argument {param.name!r} must be a {param.type.value}, not a vector of numbers")
    items = node.values if isinstance(node, Vector) else [_literal(param, node)]
    if any(not isinstance(v, str) for v in items):
        raise CallError(f"argument {param.name!r} must hold strings only")
    return [_choice(param, v) for v in items]


# one converter per parameter type: (parameter, argument node, call context) -> the value
_CONVERTERS: dict[P, Callable[[Param, Node, "CallContext"], Any]] = {
    P.OBJECT: _workspace_value,
    P.TABLE: _table,
    P.VECTOR: _vector,
    P.FORMULA: _formula,
    P.EXPRESSION: _expression,
    P.NAME: _name,
    P.STRING: _string,
    P.SCALAR: _scalar,
    P.BOOLEAN: _boolean,
    P.NUMBER: _number,
    P.INTEGER: _integer,
    P.NUMBERS: _numbers,
    P.STRINGS: _strings,
}


def _choice(param: Param, value: Any) -> Any:
    if param.choices is not None and value not in param.choices:
        raise CallError(
            f"argument {param.name!r} = {value!r} is not one of {', '.join(map(repr, param.choices))}"
        )
    return value
