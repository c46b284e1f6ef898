"""The site's own interpreter of arithmetic expressions over columns and numbers.

An expression arrives as a call tree (:class:`~dsfed_core.calltree.Arith`, parsed by
:mod:`dsfed_core.parser`); nothing is evaluated as code. Each operator below is a numpy function
chosen here, with R's semantics (R Language Definition 3.1.4 and ``?Arithmetic``, ``?Comparison``,
``?Logic``, ``?ifelse``, ``?pmin``):

- missing values (NA) propagate through arithmetic, comparisons and ``pmin``/``pmax``;
  ``NA & FALSE`` is FALSE and ``NA | TRUE`` TRUE (three-valued logic); ``ifelse`` is NA where its
  test is; ``NA^0`` and ``1^NA`` are 1, as in R;
- a result R gives as ``NaN``, ``Inf`` or ``-Inf`` (``log(-1)``, ``log(0)``, ``1/0``, ``sqrt(-1)``,
  an overflowing ``exp``) is stored as **missing**: the site stores finite numbers only, and a
  release counts those records among the missing ones (``Nmissing`` of ``meanDS``).

What the site checks (:func:`evaluate` reports it, :mod:`dsfed_server.functions.derive` applies it):
every comparison, and every kink of ``pmin``/``pmax``/``abs`` (a clamp at a number is a cut too:
``mean(pmin(pmax(age - 60.5, 0), 1))`` counts the records above 61), is a **cut** on one column
at a value the analyst chose: its operand must be one column scaled or shifted by numbers
(``D$age``, ``(D$age - 50) / 10``), so that the cut maps back to a value of the column
(:class:`Condition`), which the release gate checks like a subset condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dsfed_core.calltree import COMPARISONS, Arith, Column, Literal, Node, Symbol
from dsfed_core.errors import CallError

Leaf = Column | Symbol
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {"exp": np.exp, "sqrt": np.sqrt, "abs": np.abs,
                                                       "neg": np.negative}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "^": np.power}


@dataclass(frozen=True)
class Condition:
    """A cut the expression makes on one column: the records with ``column op value`` (in the
    column's own units), as a subset condition would. ``kink``: a kink of ``abs``, ``pmin`` or ``pmax``, whose
    record at the value adds the same to every sum on either side (``abs(0)`` is 0, a clamp at ``v`` gives ``v``),
    so ``< value`` and ``<= value`` are the same cut of it: written ``<``, as bins ``[a, b)`` cut, unless the
    column's history holds the other (:meth:`~dsfed_server.disclosure.checks.Guard.kinks_as_released`)."""

    leaf: Leaf
    op: str
    value: float
    kink: bool = False


@dataclass
class Evaluated:
    """The expression's values (float, NaN for missing) and what the site checks of it: the cuts
    (:class:`Condition`) and the row sets (boolean over the records) of every comparison and
    logical combination (the records where it is TRUE)."""

    values: np.ndarray
    conditions: list[Condition] = field(default_factory=list)
    row_sets: list[np.ndarray] = field(default_factory=list)


Affine = tuple[Leaf, float, float]  # a * column + b


def affine(node: Node) -> Affine | float | None:
    """``node`` as ``a * column + b`` (a tuple), as a number (a float), or None when it is neither."""
    if isinstance(node, Literal) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, (Column, Symbol)):
        return (node, 1.0, 0.0)
    if not isinstance(node, Arith) or any(a.name for a in node.args):
        return None
    parts = [affine(a.value) for a in node.args]
    if any(p is None for p in parts):
        return None
    if node.op == "(":
        return parts[0]
    if node.op == "neg":
        return _scale(parts[0], -1.0)  # type: ignore[arg-type]
    if node.op in ("+", "-") and len(parts) == 2:
        left, right = parts
        right = right if node.op == "+" else _scale(right, -1.0)  # type: ignore[arg-type]
        if isinstance(left, float) and isinstance(right, float):
            return left + right
        if isinstance(left, float):
            left, right = right, left
        if isinstance(right, float):
            return (left[0], left[1], left[2] + right)  # type: ignore[index]
        if left[0] == right[0]:  # type: ignore[index]
            return (left[0], left[1] + right[1], left[2] + right[2])  # type: ignore[index]
        return None
    if node.op == "*" and len(parts) == 2:
        left, right = parts
        if isinstance(left, float):
            return _scale(right, left)  # type: ignore[arg-type]
        return _scale(left, right) if isinstance(right, float) else None  # type: ignore[arg-type]
    if node.op == "/" and len(parts) == 2 and isinstance(parts[1], float) and parts[1] != 0:
        return _scale(parts[0], 1.0 / parts[1])  # type: ignore[arg-type]
    return None


def _scale(part: Affine | float, factor: float) -> Affine | float:
    if isinstance(part, float):
        return part * factor
    return (part[0], part[1] * factor, part[2] * factor)


def _cut_operand(node: Arith, operand: Node, why: str) -> Affine:
    form = affine(operand)
    if not isinstance(form, tuple) or form[1] == 0 or not np.isfinite(form[1]):
        raise CallError(f"{node.to_text()[:80]!r}: {why} takes one column, scaled or shifted by numbers "
                        "(D$age, (D$age - 50)/10), and numbers: it cuts that column at a value the site checks "
                        "as a cut", hint="e.g. ifelse(D$age > 50, 1, 0) or pmin(D$pnodes, 10)")
    return form


def _at(form: Affine, value: float) -> float:
    """The column's value where ``a * column + b`` equals ``value``."""
    _, a, b = form
    return (value - b) / a


def evaluate(node: Node, read: Callable[[Leaf], np.ndarray], n: int) -> Evaluated:
    """The values of ``node`` for ``n`` records, ``read`` giving a column's (float, NaN for missing)."""
    out = Evaluated(np.empty(0))
    values, logical = _eval(node, read, out)
    if logical:
        raise CallError(f"{node.to_text()[:80]!r} gives TRUE/FALSE; the site stores numbers: use "
                        "ifelse(condition, 1, 0)")
    values = np.array(np.broadcast_to(np.asarray(values, dtype=float), (n,)))
    values[~np.isfinite(values)] = np.nan  # R's NaN, Inf and -Inf: stored as missing
    out.values = values
    return out


def truth(node: Node, read: Callable[[Leaf], np.ndarray], n: int) -> np.ndarray:
    """The values of the condition ``node`` for ``n`` records: 1.0 TRUE, 0.0 FALSE, NaN NA."""
    values, logical = _eval(node, read, Evaluated(np.empty(0)))
    if not logical:
        raise CallError(f"{node.to_text()[:80]!r} is a number, not a condition (D$age > 50)")
    return np.array(np.broadcast_to(np.asarray(values, dtype=float), (n,)))


def _eval(node: Node, read: Callable[[Leaf], np.ndarray], out: Evaluated) -> tuple[np.ndarray, bool]:
    """The value of ``node`` and whether it is logical (1.0 TRUE, 0.0 FALSE, NaN NA)."""
    if isinstance(node, Literal):
        if node.value is None:
            return np.array(np.nan), False
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CallError(f"{node.to_text()!r} is not a number; an expression reads columns and numbers")
        return np.array(float(node.value)), False
    if isinstance(node, (Column, Symbol)):
        return read(node), False
    if not isinstance(node, Arith):
        raise CallError(f"{node.to_text()[:80]!r} is not part of an arithmetic expression")
    with np.errstate(all="ignore"):
        return _apply(node, read, out)


def _numeric(node: Node, read: Callable[[Leaf], np.ndarray], out: Evaluated, where: Arith) -> np.ndarray:
    values, logical = _eval(node, read, out)
    if logical:
        raise CallError(f"{where.to_text()[:80]!r}: a comparison (TRUE/FALSE) is not a number here; use "
                        "ifelse(condition, 1, 0)")
    return values


def _logical(node: Node, read: Callable[[Leaf], np.ndarray], out: Evaluated, where: Arith) -> np.ndarray:
    values, logical = _eval(node, read, out)
    if not logical:
        raise CallError(f"{where.to_text()[:80]!r}: {where.op} takes a comparison (D$age > 50), not a number")
    return values


def _truth(values: np.ndarray, out: Evaluated) -> np.ndarray:
    """Record the records where a logical value is TRUE (a row set the site checks)."""
    out.row_sets.append(np.asarray(values == 1.0))
    return values


def two_columns_compared(text: str) -> CallError:
    """A comparison with a column on each side is a cut on their combination, which no cut history checks (the
    records where ``k > thr`` holds, ``thr`` any column, are whatever the analyst makes them): not made, in an
    expression or a subset condition alike."""
    return CallError(f"{text[:80]!r}: a comparison takes a column (scaled or shifted by numbers) on one side and a "
                     "number on the other", hint="e.g. D$age > 50")


def _apply(node: Arith, read: Callable[[Leaf], np.ndarray], out: Evaluated) -> tuple[np.ndarray, bool]:
    op, args = node.op, [a.value for a in node.args]
    if op == "(":
        return _eval(args[0], read, out)
    if op in COMPARISONS:
        left, right = (_numeric(a, read, out, node) for a in args)
        forms = (affine(args[0]), affine(args[1]))
        if isinstance(forms[1], float):
            form, value, cut_op = _cut_operand(node, args[0], "a comparison"), forms[1], op
        elif isinstance(forms[0], float):
            form, value, cut_op = _cut_operand(node, args[1], "a comparison"), forms[0], _FLIP[op]
        else:
            raise two_columns_compared(node.to_text())
        if form[1] < 0:
            cut_op = _FLIP[cut_op]
        out.conditions.append(Condition(form[0], cut_op, _at(form, value)))
        missing = np.isnan(left) | np.isnan(right)
        return _truth(np.where(missing, np.nan, _COMPARE[op](left, right).astype(float)), out), True
    if op in ("&", "|", "!"):
        parts = [_logical(a, read, out, node) for a in args]
        if op == "!":
            return _truth(1.0 - parts[0], out), True
        a, b = parts
        decided, known = (0.0, 1.0) if op == "&" else (1.0, 0.0)
        result = np.where((a == decided) | (b == decided), decided,
                          np.where(np.isnan(a) | np.isnan(b), np.nan, known))
        return _truth(result, out), True
    if op == "ifelse":
        test = _logical(args[0], read, out, node)
        yes, no = (_numeric(a, read, out, node) for a in args[1:])
        return np.where(test == 1.0, yes, np.where(test == 0.0, no, np.nan)), False
    values = [_numeric(a, read, out, node) for a in args]
    if op in ("pmin", "pmax"):
        return _clamp(node, args, values, out), False
    if op == "abs":
        form = _cut_operand(node, args[0], "abs (a kink at 0)")
        out.conditions.append(Condition(form[0], "<", _at(form, 0.0), kink=True))
    if op in _UNARY:
        return _UNARY[op](values[0]), False
    if op == "log":
        natural = np.log(values[0])
        return (natural / np.log(values[1]) if len(values) == 2 else natural), False
    return _BINARY[op](values[0], values[1]), False


def _clamp(node: Arith, args: list[Node], values: list[np.ndarray], out: Evaluated) -> np.ndarray:
    """``pmin``/``pmax`` of one column expression and numbers: each number is a kink, a cut."""
    variable = [i for i, a in enumerate(args) if not isinstance(affine(a), float)]
    if len(variable) != 1:
        raise CallError(f"{node.to_text()[:80]!r}: {node.op} takes one column (scaled or shifted by numbers) and "
                        "numbers: each number is a cut of that column the site checks",
                        hint="e.g. pmin(D$pnodes, 10)")
    form = _cut_operand(node, args[variable[0]], node.op)
    for i, arg in enumerate(args):
        if i != variable[0]:
            out.conditions.append(Condition(form[0], "<", _at(form, affine(arg)), kink=True))  # type: ignore[arg-type]
    combine = np.minimum if node.op == "pmin" else np.maximum  # NaN propagates, as R's na.rm = FALSE
    result = values[0]
    for value in values[1:]:
        result = combine(result, value)
    return result
