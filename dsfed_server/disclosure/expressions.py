"""What a derived column can tell about the table columns it is computed from, read from its
expression over the ranges the data dictionary declares, never from the values it happens to produce.

An exact sum over records of a column computed from other columns is a sum of one function of each
record's values. What such sums can reveal depends on the function: a straight line gives the
column's total; a step (``(x - t)/sqrt((x - t)^2)``, ``2/(1 + exp(1e9*(t - x))) - 1``), a kink
(``sqrt(u^2)``), a bump (``exp(-40*(x - c)^2)``) or a spike (``log(x - t)`` just above ``t``) gives the
count, and with a second column the values, of the records next to a value the analyst chose -- a
cut in all but name, which bisection walks record by record (Matthews & Harel 2013 for curves; Chin
& Ozsoyoglu 1982 for sums). A term too small to matter to a mean (``+ 1e-13*D$income``) changes
nothing in what an exact sum reveals, so it changes nothing here either.

The site therefore reads every expression before it computes it, bottom up, and classifies every
sub-expression (:func:`classify`):

* a **number**;
* a **function of one root column** (a column of a site table, or a model's predictions; a derived
  column stands for its own expression over its roots): it must be defined over the root's whole
  declared range except, at most, beyond one cut at each end (``log(D$pnodes)`` is missing at 0:
  that cut goes through the release gate as ``D$pnodes > 0`` would), monotone there (a polynomial of
  degree at most :data:`MAX_DEGREE` may turn), and no more **concentrated** than the rules file's
  ``disclosure.derived_concentration``: the largest share of the function's total variation found in
  any part of the declared range, divided by the square root of that part's share of the range
  (:func:`concentration`). A straight line and a square root score 1, ``log(x + 1)`` on [0, 50]
  about 1.3, ``x^3`` 1.2; a step, a kink or a spike grows without bound as its width shrinks. A
  monotone function's cuts are cuts on its root: the release gate keeps them in the root's history
  (:class:`Meaning` says how to map them back);
* **several roots**: sums and differences of the parts above, products of parts on different columns,
  and a division by a function of one root on other columns (whose reciprocal is itself checked as
  one): such a part enters only linearly, never multiplied by, divided by or raised with a part that
  reads one of its columns, which would build a function of that column the site never read. Exact sums
  of such a column are sums of products of checked functions of different columns, which a
  correlation or a model's sums of squares release anyway. A non-linear function of several roots
  (``log(D$w/D$h^2)``, ``exp(D$x + D$y)``) is refused, saying how to write it per column;
* the **gated** constructs, comparisons with ``ifelse``, ``pmin``, ``pmax`` and ``abs``: their cuts
  go through the release gate (:mod:`dsfed_server.arithmetic` finds them); their branches are
  sub-expressions classified as above, and the construct counts as several roots for what contains it.

Every check runs over a grid of the declared range refined where interval arithmetic (Moore, Kearfott
& Cloud 2009, *Introduction to Interval Analysis*) cannot rule out a feature narrower than the grid:
a bump between two grid points is found by the enclosure of the cell that holds it. For a column
declared as whole numbers the function is read at every whole number of its range, which is exact.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dsfed_core.calltree import COMPARISONS, Arith, Column, Literal, Node, Symbol

MAX_DEGREE = 3  # the highest power of a polynomial that may turn over its declared range
GRID = 1024  # cells of the first grid over a declared range
MAX_CELLS = 1 << 16  # most cells a refined grid may hold
MAX_DEPTH = 40  # most times a cell is halved
MAX_WHOLE_NUMBERS = 200_001  # a whole-number range read at every value up to this many values
TRIM = 0.02  # the share of a range at each end left out of the concentration (the ends: dominance)


CONCENTRATION = "disclosure.derived_concentration"
DOMINANCE = "disclosure.derived_dominance"


class ExpressionRefused(Exception):
    """An expression whose meaning the site does not release: ``message`` says what it is, ``hint``
    how to write what the analyst may want instead, ``rule`` the rules-file key that refuses it."""

    def __init__(self, message: str, hint: str, rule: str = CONCENTRATION) -> None:
        super().__init__(message)
        self.message, self.hint, self.rule = message, hint, rule


@dataclass(frozen=True)
class Root:
    """A column a derived column is computed from: a site table's column (``table``: its lineage) or a
    model's predictions, with the range and kind the data dictionary declares for it. ``every``, for a
    model's predictions, gives every record's (:class:`~dsfed_server.disclosure.provenance.ModelColumn`)."""

    table: str
    column: str
    declared: tuple[float, float] | None = None
    integer: bool = False
    every: Callable[[], np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        return self.table, self.column

    def __deepcopy__(self, memo: dict) -> "Root":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy


# --- a function of one root ----------------------------------------------------------------------

Interval = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True, eq=False)
class Fn:
    """A function of one root, as a tree of the site's own operators: ``x`` (the root), ``const``,
    ``neg``, ``+``, ``-``, ``*``, ``/``, ``^`` (``value``: the exponent), ``exp``, ``log``
    (``value``: the base, 0 for e), ``sqrt``, or ``map`` (``apply``: a monotone map the site applied and
    checked when it made the column, such as a recalibration map; ``increasing``: its direction)."""

    op: str
    args: tuple["Fn", ...] = ()
    value: float = 0.0
    apply: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False)
    increasing: bool = True
    label: str = ""

    def __deepcopy__(self, memo: dict) -> "Fn":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy

    @property
    def depth(self) -> int:
        return 1 + max((f.depth for f in self.args), default=0)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The values at root values ``x`` (float); NaN where R gives NA, NaN or +-Inf (missing)."""
        with np.errstate(all="ignore"):
            out = np.asarray(self._point(np.asarray(x, dtype=float)), dtype=float)
        out = np.array(np.broadcast_to(out, np.shape(x)), dtype=float)
        out[~np.isfinite(out)] = np.nan
        return out

    def _point(self, x: np.ndarray) -> np.ndarray:
        op = self.op
        if op == "x":
            return x
        if op == "const":
            return np.full(x.shape, self.value)
        a = [f._point(x) for f in self.args]
        if op == "map":
            return self.apply(a[0])  # type: ignore[misc]
        if op == "neg":
            return -a[0]
        if op == "+":
            return a[0] + a[1]
        if op == "-":
            return a[0] - a[1]
        if op == "*":
            return a[0] * a[1]
        if op == "/":
            return a[0] / a[1]
        if op == "^":
            return np.power(a[0], self.value)
        if op == "exp":
            return np.exp(a[0])
        if op == "sqrt":
            return np.sqrt(a[0])
        if op == "log":
            return np.log(a[0]) / (math.log(self.value) if self.value else 1.0)
        raise ValueError(op)

    def cells(self, a: np.ndarray, b: np.ndarray) -> tuple[Interval, Interval]:
        """Enclosures over the cells ``[a, b]`` of the function's values and of its derivative
        (interval arithmetic: the true values lie within; infinite where it cannot bound them)."""
        with np.errstate(all="ignore"):
            return self._cells(a, b)

    def _cells(self, a: np.ndarray, b: np.ndarray) -> tuple[Interval, Interval]:
        op = self.op
        zero, one = np.zeros_like(a), np.ones_like(a)
        if op == "x":
            return (a, b), (one, one)
        if op == "const":
            c = np.full_like(a, self.value)
            return (c, c), (zero, zero)
        parts = [f._cells(a, b) for f in self.args]
        (u, du) = parts[0]
        if op == "map":
            fa, fb = self.apply(u[0]), self.apply(u[1])  # type: ignore[misc]
            inner = (zero, np.full_like(a, np.inf)) if self.increasing else (np.full_like(a, -np.inf), zero)
            return (np.minimum(fa, fb), np.maximum(fa, fb)), _mul(inner, du)
        if op == "neg":
            return _neg(u), _neg(du)
        if op in ("+", "-"):
            (v, dv) = parts[1]
            if op == "-":
                v, dv = _neg(v), _neg(dv)
            return _add(u, v), _add(du, dv)
        if op == "*":
            (v, dv) = parts[1]
            return _mul(u, v), _add(_mul(du, v), _mul(u, dv))
        if op == "/":
            (v, dv) = parts[1]
            r = _recip(v)
            return _mul(u, r), _add(_mul(du, r), _neg(_mul(_mul(u, dv), _mul(r, r))))
        if op == "^":
            p = self.value
            if p == 0:
                return (one, one), (zero, zero)
            return _pow(u, p), _mul(_mul((np.full_like(a, p),) * 2, _pow(u, p - 1)), du)  # type: ignore[arg-type]
        if op == "exp":
            e = (np.exp(u[0]), np.exp(u[1]))
            return e, _mul(e, du)
        if op == "sqrt":
            s = (np.sqrt(np.maximum(u[0], 0.0)), np.sqrt(np.maximum(u[1], 0.0)))
            s = (np.where(u[1] < 0, np.nan, s[0]), np.where(u[1] < 0, np.nan, s[1]))
            return s, _mul(du, _recip(_mul((2 * one, 2 * one), s)))
        if op == "log":
            scale = math.log(self.value) if self.value else 1.0
            lo = np.where(u[0] > 0, np.log(np.maximum(u[0], 1e-320)), -np.inf)
            hi = np.where(u[1] > 0, np.log(np.maximum(u[1], 1e-320)), np.nan)
            d = _mul(du, _recip(u))
            if scale < 0:
                return (hi / scale, lo / scale), _neg(_scaled(d, -1 / scale))
            return (lo / scale, hi / scale), _scaled(d, 1 / scale)
        raise ValueError(op)

    @property
    def degree(self) -> int | None:
        """The degree of the function as a polynomial of its root, or None (not a polynomial)."""
        op = self.op
        if op == "const":
            return 0
        if op == "x":
            return 1
        degrees = [f.degree for f in self.args]
        if any(d is None for d in degrees):
            return None
        if op == "neg":
            return degrees[0]
        if op in ("+", "-"):
            return max(degrees)  # type: ignore[type-var]
        if op == "*":
            return degrees[0] + degrees[1]  # type: ignore[operator]
        if op == "/" and degrees[1] == 0:
            return degrees[0]
        if op == "^" and float(self.value).is_integer() and self.value >= 0:
            return degrees[0] * int(self.value)  # type: ignore[operator]
        return None


X = Fn("x")


def _const(value: float) -> Fn:
    return Fn("const", value=float(value))


def _scaled(d: Interval, s: float) -> Interval:
    return (d[0] * s, d[1] * s) if s >= 0 else (d[1] * s, d[0] * s)


def _neg(u: Interval) -> Interval:
    return -u[1], -u[0]


def _add(u: Interval, v: Interval) -> Interval:
    return u[0] + v[0], u[1] + v[1]


def _mul(u: Interval, v: Interval) -> Interval:
    products = np.stack([u[0] * v[0], u[0] * v[1], u[1] * v[0], u[1] * v[1]])
    products = np.where(np.isnan(products), 0.0, products)  # 0 x inf: the zero bound holds
    lo, hi = products.min(axis=0), products.max(axis=0)
    unknown = np.isnan(u[0]) | np.isnan(u[1]) | np.isnan(v[0]) | np.isnan(v[1])
    return np.where(unknown, np.nan, lo), np.where(unknown, np.nan, hi)


def _recip(v: Interval) -> Interval:
    lo, hi = v
    spans_zero = ((lo < 0) & (hi > 0)) | ((lo == 0) & (hi == 0))
    return (np.where(spans_zero | (hi == 0), -np.inf, 1 / hi), np.where(spans_zero | (lo == 0), np.inf, 1 / lo))


def _pow(u: Interval, p: float) -> Interval:
    lo, hi = u
    if float(p).is_integer():
        k = int(p)
        if k < 0:
            return _recip(_pow(u, -k))
        a, b = lo ** k, hi ** k
        if k % 2:
            return a, b
        spans = (lo < 0) & (hi > 0)
        return np.where(spans, 0.0, np.minimum(a, b)), np.maximum(a, b)
    neg = hi < 0
    a, b = np.maximum(lo, 0.0) ** p, np.maximum(hi, 0.0) ** p
    if p < 0:
        a, b = b, np.where(lo <= 0, np.inf, a)
    return np.where(neg, np.nan, a), np.where(neg, np.nan, b)


# --- checking a function of one root -------------------------------------------------------------


@dataclass(frozen=True)
class Checked:
    """What the site found of a function of one root over its declared range: its direction
    (``monotone``: 1 non-decreasing, -1 non-increasing, 0 neither), its ``concentration`` inside the
    range (:func:`interior_concentration`) and its ``dominance`` over all of it (:func:`dominance`), and
    where it is missing: ``below``/``above``, the cut beyond which it is (``(op, value)`` of the records
    kept: ``(">", 0.0)`` keeps the records above 0), or None."""

    monotone: int
    concentration: float
    dominance: float = 0.0
    below: tuple[str, float] | None = None
    above: tuple[str, float] | None = None


def _ladder(m: int) -> np.ndarray:
    """Index gaps 1 .. m on a geometric ladder (ratio 1.02): on an even grid the sup over all gaps is
    approached within a factor of about 1.01."""
    gaps = {1, m}
    g = 1.0
    while g < m:
        gaps.add(int(g))
        g = max(g * 1.02, g + 1)
    return np.array(sorted(x for x in gaps if 1 <= x <= m))


def concentration(positions: np.ndarray, variation: np.ndarray) -> float:
    """The largest share of the total variation between two points of a grid, divided by the square
    root of their distance's share of the grid's length: ``positions`` increasing (``n + 1``),
    ``variation`` the variation in each of the ``n`` cells between them.

    >>> x = np.linspace(0.0, 1.0, 101)
    >>> round(concentration(x, np.diff(x)), 6)  # a straight line
    1.0
    >>> round(concentration(x, np.abs(np.diff(np.sqrt(x)))), 6)  # a square root: its first cell
    1.0
    >>> step = np.zeros(100); step[37] = 1.0
    >>> round(concentration(x, step), 6)  # a step: all of it in a hundredth of the range
    10.0
    """
    total = float(variation.sum())
    if not total > 0:
        return 0.0
    if not np.isfinite(total):
        return math.inf
    cumulative = np.concatenate([[0.0], np.cumsum(variation / total)])
    u = (positions - positions[0]) / (positions[-1] - positions[0])
    best = 0.0
    for gap in _ladder(u.size - 1):
        shares = cumulative[gap:] - cumulative[:-gap]
        lengths = u[gap:] - u[:-gap]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(lengths > 0, shares / np.sqrt(lengths), np.where(shares > 0, np.inf, 0.0))
        best = max(best, float(ratio.max()))
    return best


def interior_concentration(positions: np.ndarray, variation: np.ndarray) -> float:
    """:func:`concentration` of the cells inside the grid's middle, :data:`TRIM` of its length left out
    at each end: a steep part at an end of the range (``log(x + 1)`` at 0) is what :func:`dominance`
    weighs; a steep part inside it is a cut at a value the analyst chose."""
    lo, hi = positions[0], positions[-1]
    inner = (positions[:-1] >= lo + TRIM * (hi - lo)) & (positions[1:] <= hi - TRIM * (hi - lo))
    cells = np.flatnonzero(inner)
    if cells.size < 1:
        return 0.0
    return concentration(positions[cells[0]:cells[-1] + 2], variation[cells[0]:cells[-1] + 1])


def dominance(values: np.ndarray, weights: np.ndarray, extremes: np.ndarray) -> float:
    """How far the function's farthest value lies from its median, against its mean distance from the
    median, over the range (``values`` with ``weights``: the range's measure; ``extremes``: values the
    function may reach between them). A record where the function is 20 times farther from the median
    than it typically is weighs 20 typical records in a sum: a spike (``log(x - t)`` just above
    ``t``), or the top of a steep exponential, makes a sum one record's value.

    >>> x = np.linspace(0.0, 1.0, 100_001); w = np.full(x.size, 1.0)
    >>> round(dominance(x, w, x), 3)  # a straight line: farthest 0.5, typically 0.25
    2.0
    >>> round(dominance(np.exp(20 * x), w, np.exp(20 * x)), 1)  # exp(20 x): the top dominates
    20.0
    """
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    median = values[order][int(np.searchsorted(cumulative, cumulative[-1] / 2))]
    with np.errstate(over="ignore", invalid="ignore"):
        farthest = float(np.max(np.abs(extremes - median)))
        if not np.isfinite(farthest):  # beyond the floating-point range: no bound at all
            return math.inf
        if farthest == 0:
            return 0.0
        typical = float(np.sum(weights * (np.abs(values - median) / farthest)) / np.sum(weights))
    return 1.0 / typical if typical > 0 else math.inf


def _boundary(f: Fn, undefined: float, defined: float) -> tuple[float, float]:
    """The last undefined and the first defined value between two points (by bisection to adjacent
    floating-point numbers)."""
    for _ in range(200):
        middle = (undefined + defined) / 2
        if middle in (undefined, defined):
            break
        if np.isfinite(f(np.array([middle]))[0]):
            defined = middle
        else:
            undefined = middle
    return undefined, defined


def check_function(f: Fn, root: Root, describe: str) -> Checked:
    """Read ``f`` over ``root``'s declared range (module docstring): where it is defined, whether it
    is monotone, and its concentration. Raises :class:`ExpressionRefused` for a function the site
    cannot read (no declared range, missing inside the range, not monotone, a feature narrower than
    its grid can resolve)."""
    degree = f.degree
    if degree is not None and degree <= 1:
        ends = f(np.array([0.0, 1.0]))
        slope = float(ends[1] - ends[0])
        if np.isnan(ends).all() or slope == 0:
            return Checked(0, 0.0)  # missing everywhere (an NA), or a number
        if not np.isfinite(slope):
            raise ExpressionRefused(f"{describe} scales {root.column} beyond the floating-point range: its values "
                                    "overflow, and where they do is a cut the analyst chose", "use smaller numbers")
        return Checked(1 if slope > 0 else -1, 1.0, 2.0)
    if root.declared is None:
        raise ExpressionRefused(
            f"{describe} is not a straight line of {root.column}, and {root.column} has no range declared in the "
            "data dictionary over which the site could read it",
            f"ask the site to declare a range for {root.column}, or use {root.column} scaled and shifted by numbers")
    lo, hi = root.declared
    if not hi > lo:
        return Checked(0, 0.0)
    if root.integer and hi - lo + 1 <= MAX_WHOLE_NUMBERS:
        points = np.arange(math.ceil(lo), math.floor(hi) + 1, dtype=float)
        return _check_points(f, root, describe, points, degree)
    return _check_range(f, root, describe, float(lo), float(hi), degree)


def _defined_span(f: Fn, root: Root, describe: str, points: np.ndarray, values: np.ndarray, continuous: bool
                  ) -> tuple[int, int, tuple[str, float] | None, tuple[str, float] | None, list[float]]:
    """The points where ``f`` is defined are one run ``[i, j)``; the cuts beyond which it is missing
    (records kept: ``(op, value)``), and for a continuous range the first defined values found at those
    cuts (added to the grid: a spike at the cut is read there)."""
    defined = np.isfinite(values)
    if not defined.any():
        raise ExpressionRefused(f"{describe} is missing for every value of {root.column} in its declared range",
                                "check the expression")
    where = np.flatnonzero(defined)
    i, j = int(where[0]), int(where[-1]) + 1
    if not defined[i:j].all():
        gap = float(points[i + int(np.flatnonzero(~defined[i:j])[0])])
        raise ExpressionRefused(
            f"{describe} is missing at {root.column} = {gap:g}, inside its declared range: where an expression is "
            "missing it cuts the records as a comparison does, at a place the site does not check",
            f"say where with a comparison the site checks, e.g. ifelse(D${root.column} > {gap:g}, ..., NA)")
    below = above = None
    extra: list[float] = []
    if i > 0:
        if continuous:
            last, first = _boundary(f, float(points[i - 1]), float(points[i]))
            below, extra = (">", last), extra + [first]
        else:
            below = (">", float(points[i - 1]))
    if j < points.size:
        if continuous:
            last, first = _boundary(f, float(points[j]), float(points[j - 1]))
            above, extra = ("<", last), extra + [first]
        else:
            above = ("<", float(points[j]))
    return i, j, below, above, extra


def _check_points(f: Fn, root: Root, describe: str, points: np.ndarray, degree: int | None) -> Checked:
    """Every whole number of the declared range: the function's values there are all that matter."""
    values = f(points)
    i, j, below, above, _ = _defined_span(f, root, describe, points, values, False)
    points, values = points[i:j], values[i:j]
    steps = np.diff(values)
    monotone = 1 if np.all(steps >= 0) else -1 if np.all(steps <= 0) else 0
    _turns(monotone, degree, describe, root)
    if points.size < 2:
        return Checked(monotone, 0.0, 0.0, below, above)
    return Checked(monotone, interior_concentration(points, np.abs(steps)),
                   dominance(values, np.ones(values.size), values), below, above)


def _turns(monotone: int, degree: int | None, describe: str, root: Root) -> None:
    if monotone == 0 and (degree is None or degree > MAX_DEGREE):
        raise ExpressionRefused(
            f"{describe} rises and falls over the declared range of {root.column}: a bump, a fold or a kink "
            "at a value the analyst chose picks out the records there, as a cut would",
            f"use a comparison the site checks as a cut (ifelse(D${root.column} > t, ..., ...), "
            f"abs(D${root.column} - t), "
            f"pmin, pmax), a monotone transform, or a polynomial of degree at most {MAX_DEGREE}")


def _check_range(f: Fn, root: Root, describe: str, lo: float, hi: float, degree: int | None) -> Checked:
    """A continuous declared range: a grid refined where the cell enclosures leave room for a feature
    the grid does not show (more variation inside a cell than between its ends, a slope far above the
    cell's average, or a turn), down to :data:`MAX_DEPTH` halvings; a cell still unsure then counts
    with all the variation its enclosure allows."""
    points = np.linspace(lo, hi, GRID + 1)
    i, j, below, above, extra = _defined_span(f, root, describe, points, f(points), True)
    first = extra[0] if below else lo
    last = extra[-1] if above else hi
    points = np.unique(np.concatenate([points[i:j], extra]))
    points = points[(points >= first) & (points <= last)]
    if points.size < 2:
        return Checked(0, 0.0, 0.0, below, above)
    tolerance = 1e-12 * max(float(np.nanmax(np.abs(f(points)))), 1e-300)
    for depth in range(MAX_DEPTH + 1):
        a, b = points[:-1], points[1:]
        with np.errstate(all="ignore"):
            unsure, bound, dlo, dhi = _unsure(f, a, b, degree, tolerance)
        split = unsure & (b - a > 4 * np.spacing(np.maximum(np.abs(a), 1.0)))
        if not split.any() or depth == MAX_DEPTH or points.size + int(split.sum()) > MAX_CELLS:
            break
        points = np.sort(np.concatenate([points, (a[split] + b[split]) / 2]))
    steps = np.diff(f(points))
    if np.all(dlo >= 0) and np.all(steps >= -tolerance):
        monotone = 1
    elif np.all(dhi <= 0) and np.all(steps <= tolerance):
        monotone = -1
    else:
        monotone = 0
    _turns(monotone, degree, describe, root)
    values = f(points)
    (vlo, vhi), _ = f.cells(points[:-1], points[1:])
    middles = (values[1:] + values[:-1]) / 2
    extremes = np.concatenate([values, vlo[np.isfinite(vlo)], vhi[np.isfinite(vhi)],
                               [np.inf] if not (np.all(np.isfinite(vlo)) and np.all(np.isfinite(vhi))) else []])
    return Checked(monotone, interior_concentration(points, np.where(unsure, bound, np.abs(steps))),
                   dominance(middles, np.diff(points), extremes), below, above)


def _unsure(f: Fn, a: np.ndarray, b: np.ndarray, degree: int | None, tolerance: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per cell ``[a, b]``: whether its enclosures leave room for more than the grid shows, the most
    variation they allow in it, and its derivative's enclosure."""
    step = np.abs(f(b) - f(a))
    (vlo, vhi), (dlo, dhi) = f.cells(a, b)
    enclosure = np.where(np.isnan(vhi - vlo), np.inf, vhi - vlo)
    steepest = np.maximum(np.abs(dlo), np.abs(dhi)) * (b - a)
    steepest = np.where(np.isnan(steepest), np.inf, steepest)
    bound = np.fmin(enclosure, steepest)
    turning = ~((dlo >= 0) | (dhi <= 0))
    unsure = (bound > 2 * step + tolerance) | (steepest > 8 * step + tolerance) | (turning & (degree is None))
    return unsure, bound, dlo, dhi


# --- classifying an expression -------------------------------------------------------------------


@dataclass(frozen=True)
class Meaning:
    """What a derived column is, for the site: the ``roots`` it is computed from; for a column of one
    root, ``function`` (of the root's values) and ``monotone`` (1 or -1: its cuts are cuts on the root,
    which the release gate keeps in the root's history; 0: it turns). ``function`` None: several roots,
    or pieces between cuts the gate checked."""

    roots: frozenset[Root]
    function: Fn | None = None
    monotone: int = 0
    # a column of several roots: the text of its expression over its roots, and its core (:func:`forms`)
    text: str = ""
    core: str = ""
    # the summands of such a column (:mod:`dsfed_server.summands`), computed when asked from what the
    # column reads: each one's core, its root columns, the records of the root table where it is not 0 and
    # those its indicator factors hold (packed by np.packbits)
    summands: Callable[[], tuple[tuple[str, tuple[str, ...], bytes, bytes], ...]] | None = field(default=None,
                                                                                                compare=False)
    # where the comparisons the column was computed with hold (``ifelse(D$age > 50, 1, 0)``), its own and its derived
    # columns': per expression that compares, computed when asked from what it reads, its root table, the table's
    # size and each row set of it, packed; with its few-valued roots they make the groups a cut on a column of
    # several roots cuts within (provenance.strata)
    indicators: tuple[Callable[[], tuple[str, int, tuple[bytes, ...]]], ...] = field(default=(), compare=False)

    @property
    def root(self) -> Root | None:
        return next(iter(self.roots)) if self.function is not None and len(self.roots) == 1 else None

    @classmethod
    def of_root(cls, root: Root) -> "Meaning":
        return cls(frozenset([root]), X, 1)

    def __deepcopy__(self, memo: dict) -> "Meaning":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy


@dataclass
class Classified:
    """An expression's :class:`Meaning`, its concentration and dominance (the largest of any part's), and the cuts
    where a part of it is missing (``(root, op, value)``: the records kept), which go through the gate."""

    meaning: Meaning
    concentration: float = 0.0
    dominance: float = 0.0
    missing_cuts: list[tuple[Root, str, float]] = field(default_factory=list)


@dataclass(frozen=True)
class _Part:
    roots: frozenset[Root]
    fn: Fn | None = None  # a function of its one root (None: a number, or several roots / gated pieces)
    number: float | None = None
    logical: bool = False

    @property
    def root(self) -> Root | None:
        return next(iter(self.roots)) if self.fn is not None else None


def classify(node: Node, meaning_of: Callable[[Column | Symbol], Meaning], concentration_limit: float,
             dominance_limit: float) -> Classified:
    """Classify ``node`` (module docstring), each leaf standing for its :class:`Meaning`; raise
    :class:`ExpressionRefused` for a part the rules do not allow (the largest concentration and
    dominance: ``disclosure.derived_concentration``, ``disclosure.derived_dominance``)."""
    walker = _Walker(meaning_of, concentration_limit, dominance_limit)
    part = walker.walk(node)
    if part.fn is not None:
        checked = walker.check(part.fn, part.root, node)  # type: ignore[arg-type]
        meaning = Meaning(part.roots, part.fn, checked.monotone)
    else:
        meaning = Meaning(part.roots, None, 0, *node_forms(node, meaning_of))
    return Classified(meaning, walker.worst, walker.worst_dominance, walker.missing)


# --- what function a column is, as text ----------------------------------------------------------


def forms(meaning: Meaning) -> tuple[str, str] | None:
    """The function a column computes, as a text over its root columns' names, and its **core**: the
    same function up to a straight line in it (``2*log(D$age) + 1`` has the core ``log(age)``: a sum of
    one gives the sum of the other). Two columns with the same core give the same equations on the
    records they are summed over; columns with different cores count as different functions even where
    they are not (``(x + 1)^2`` and ``x^2``): the counting errs on the side of the records. None when the
    site cannot write the function (a column kept without its expression)."""
    if meaning.function is not None and len(meaning.roots) == 1:
        fn, name = meaning.function, next(iter(meaning.roots)).column
        core = fn
        while True:
            if core.op == "neg":
                core = core.args[0]
            elif core.op in ("+", "-", "*") and any(a.op == "const" for a in core.args):
                core = next(a for a in core.args if a.op != "const")
            elif core.op == "/" and core.args[1].op == "const":
                core = core.args[0]
            else:
                break
        return _fn_text(fn, name), _fn_text(core, name)
    if meaning.text:
        return meaning.text, meaning.core
    return None


def _fn_text(fn: Fn, name: str) -> str:
    if fn.op == "x":
        return name
    if fn.op == "const":
        return repr(fn.value)
    args = [_fn_text(a, name) for a in fn.args]
    if fn.op == "map":  # a map the site applied: named by its values over a fixed grid
        grid = np.concatenate([np.linspace(0.0, 1.0, 33), np.linspace(-10.0, 10.0, 41)])
        with np.errstate(all="ignore"):
            values = np.asarray(fn.apply(grid), dtype=float)  # type: ignore[misc]
        digest = hashlib.sha256(np.round(values, 12).tobytes()).hexdigest()[:16]
        return f"{fn.label}#{digest}({args[0]})"
    value = f", {fn.value!r}" if fn.op in ("^", "log") else ""
    return f"{fn.op}({', '.join(args)}{value})"


def node_forms(node: Node, meaning_of: Callable[[Column | Symbol], Meaning]) -> tuple[str, str]:
    """:func:`forms` of an expression of several roots: its text with every column written as its own
    function of its roots, and its core (the empty text for a number)."""
    if isinstance(node, Literal):
        return repr(math.nan if node.value is None else float(node.value)), ""  # type: ignore[arg-type]
    if isinstance(node, (Column, Symbol)):
        found = forms(meaning_of(node))
        if found is None:  # a function the site cannot write: a new one each time (never the same as another)
            text = f"{node.to_text()}#{secrets.token_hex(8)}"
            return text, text
        return found
    if not isinstance(node, Arith):
        text = node.to_text()
        return text, text
    if node.op == "(":
        return node_forms(node.args[0].value, meaning_of)
    parts = [node_forms(a.value, meaning_of) for a in node.args]
    text = f"{node.op}({', '.join(p[0] for p in parts)})"
    numbers = [not p[1] for p in parts]
    if all(numbers):
        return text, ""
    if node.op == "neg":
        return text, parts[0][1]
    if node.op in ("+", "-", "*") and any(numbers):
        return text, parts[numbers.index(False)][1]
    if node.op == "/" and numbers[1]:
        return text, parts[0][1]
    return text, text


class _Walker:
    def __init__(self, meaning_of: Callable[[Column | Symbol], Meaning], concentration_limit: float,
                 dominance_limit: float) -> None:
        self.meaning_of = meaning_of
        self.limit = concentration_limit
        self.dominance_limit = dominance_limit
        self.worst = 0.0
        self.worst_dominance = 0.0
        self.missing: list[tuple[Root, str, float]] = []
        self._checked: dict[int, Checked] = {}

    def check(self, fn: Fn, root: Root, where: Node) -> Checked:
        if id(fn) in self._checked:
            return self._checked[id(fn)]
        text = where.to_text()
        describe = repr(text if len(text) <= 60 else text[:57] + "...")
        checked = check_function(fn, root, describe)
        if checked.concentration > self.limit:
            raise ExpressionRefused(
                f"{describe} concentrates its variation in a small part of the declared range of {root.column} "
                f"(concentration {checked.concentration:.3g}, above the site's {self.limit:g}): a steep step or ramp "
                "there picks out the records near one value, as a cut would",
                f"use a comparison the site checks as a cut (ifelse(D${root.column} > t, 1, 0)), or a gentler "
                "transform")
        if checked.dominance > self.dominance_limit:
            raise ExpressionRefused(
                f"{describe} takes, somewhere in the declared range of {root.column}, a value {checked.dominance:.3g} "
                f"times farther from its median than it typically is (the site allows {self.dominance_limit:g}): a "
                "record there would weigh as many records in a sum, which then gives its values",
                "use a gentler transform (log(x + c) with a larger c, a smaller rate in exp), or a range the data "
                "dictionary declares more tightly", DOMINANCE)
        self.worst = max(self.worst, checked.concentration)
        self.worst_dominance = max(self.worst_dominance, checked.dominance)
        for cut in (checked.below, checked.above):
            if cut is not None and (root, *cut) not in self.missing:
                self.missing.append((root, *cut))
        self._checked[id(fn)] = checked
        return checked

    def one(self, fn: Fn, roots: frozenset[Root], where: Node) -> _Part:
        """A new function of one root, checked."""
        part = _Part(roots, fn)
        self.check(fn, part.root, where)  # type: ignore[arg-type]
        return part

    def walk(self, node: Node) -> _Part:
        if isinstance(node, Literal):
            value = node.value
            return _Part(frozenset(), number=math.nan if value is None else float(value))  # type: ignore[arg-type]
        if isinstance(node, (Column, Symbol)):
            meaning = self.meaning_of(node)
            return _Part(meaning.roots, meaning.function)
        if not isinstance(node, Arith):
            return _Part(frozenset())
        op, args = node.op, [a.value for a in node.args]
        if op == "(":
            return self.walk(args[0])
        parts = [self.walk(a) for a in args]
        roots = frozenset().union(*(p.roots for p in parts))
        if op in COMPARISONS or op in ("&", "|", "!"):
            return _Part(roots, logical=True)
        if op in ("ifelse", "abs", "pmin", "pmax"):
            return _Part(roots)  # the gate checks its cuts; its branches were classified as they were walked
        if all(p.number is not None for p in parts):
            return _Part(frozenset(), number=_number(op, [p.number for p in parts], node))  # type: ignore[misc]
        if op == "neg":
            p = parts[0]
            return _Part(p.roots, _shifted(Fn("neg", (p.fn,))) if p.fn is not None else None)
        if op in ("+", "-", "*"):
            return self._combine(op, parts[0], parts[1], roots, node)
        if op == "/":
            return self._divide(parts[0], parts[1], roots, node)
        if op == "^":
            return self._power(parts[0], parts[1], node)
        if op in ("exp", "sqrt", "log"):
            return self._unary(op, parts, node)
        raise ExpressionRefused(f"{node.to_text()[:60]!r}: the site cannot read {op!r}", "use + - * / ^ log exp sqrt")

    @staticmethod
    def _as_fn(part: _Part) -> Fn:
        return part.fn if part.fn is not None else _const(part.number)  # type: ignore[arg-type]

    def _combine(self, op: str, left: _Part, right: _Part, roots: frozenset[Root], node: Node) -> _Part:
        if left.number is not None or right.number is not None:
            other = right if left.number is not None else left
            if other.fn is None:
                return _Part(roots)
            return _Part(roots, _shifted(Fn(op, (self._as_fn(left), self._as_fn(right)))))  # as checked
        if left.fn is not None and right.fn is not None and left.roots == right.roots:
            return self.one(Fn(op, (left.fn, right.fn)), roots, node)
        if op == "*" and left.roots & right.roots:
            raise _shared(node, left.roots & right.roots, "multiplies")
        return _Part(roots)  # a sum of parts each checked, or a product of parts on different columns

    def _divide(self, left: _Part, right: _Part, roots: frozenset[Root], node: Node) -> _Part:
        if right.number is not None:
            if left.fn is None:
                return _Part(roots)
            return _Part(roots, Fn("/", (left.fn, _const(right.number))))
        if right.fn is None:
            raise ExpressionRefused(
                f"{node.to_text()[:60]!r} divides by an expression of several columns (or of a comparison): the "
                "site cannot read what its sums reveal",
                "divide by one column, or by a function of one column (D$weight/(D$height/100)^2)")
        if left.number is not None or (left.fn is not None and left.roots == right.roots):
            return self.one(Fn("/", (self._as_fn(left), right.fn)), roots, node)
        if left.roots & right.roots:
            raise _shared(node, left.roots & right.roots, "divides")
        self.one(Fn("/", (_const(1.0), right.fn)), right.roots, node)  # its reciprocal is a function of one root
        return _Part(roots)

    def _power(self, base: _Part, exponent: _Part, node: Node) -> _Part:
        if exponent.number is None:
            raise ExpressionRefused(
                f"{node.to_text()[:60]!r} raises to a power that reads a column: the site reads powers by numbers "
                "only", "use a number as the exponent (D$age^2), or exp(log(...)) of one column")
        p = exponent.number
        if not np.isfinite(p):
            raise ExpressionRefused(f"{node.to_text()[:60]!r}: the exponent is not a finite number",
                                    "check the expression")
        if base.fn is not None:
            return self.one(Fn("^", (base.fn,), value=p), base.roots, node)
        if p == 1:
            return base
        if p == 0:
            return _Part(frozenset(), number=1.0)
        raise _shared(node, base.roots, f"raises to the power {p:g}")

    def _unary(self, op: str, parts: list[_Part], node: Node) -> _Part:
        arg = parts[0]
        base = parts[1].number if len(parts) > 1 else None
        if len(parts) > 1 and (base is None or not np.isfinite(base) or base <= 0 or base == 1):
            raise ExpressionRefused(f"{node.to_text()[:60]!r}: a logarithm's base is a positive number other than 1",
                                    "e.g. log(D$x, base = 2)")
        if arg.fn is None:
            raise ExpressionRefused(
                f"{node.to_text()[:60]!r} applies {op} to an expression of several columns (or of a comparison): "
                "the site reads non-linear functions of one column at a time",
                f"apply {op} to each column (log(D$w) - 2*log(D$h) for log(D$w/D$h^2); exp(D$x)*exp(D$y) for "
                "exp(D$x + D$y)), or inside each branch of an ifelse")
        return self.one(Fn(op, (arg.fn,), value=float(base or 0.0)), arg.roots, node)


def _shared(node: Node, roots: frozenset[Root], does: str) -> ExpressionRefused:
    """An expression of several columns, or of a comparison, may enter only linearly: summed, scaled by
    numbers, or times a part on other columns. Multiplying it by a part that reads one of its columns,
    dividing it so or raising it to a power would build, out of parts each checked, a new function of
    that column the site never read (``S = 1.5*S - 0.5*S^3`` again and again, with ``+ 1e-10*D$age`` to
    keep ``S`` a combination, is a sign of ``score - t``)."""
    columns = ", ".join(sorted(r.column for r in roots))
    return ExpressionRefused(
        f"{node.to_text()[:60]!r} {does} an expression of several columns (or of a comparison) by a part that "
        f"reads the same column ({columns}): the site reads functions of a column only where it can check them",
        "write the function of each column on its own (ifelse(D$age > 50, D$age, 0) rather than "
        "D$age*ifelse(D$age > 50, 1, 0)), and combine such parts by sums and by products of different columns")


MAX_FN_DEPTH = 200  # deepest function of one root the site composes (a chain of derived columns)


def _shifted(fn: Fn) -> Fn:
    """A function shifted or scaled by numbers, a straight line folded into ``a * x + b`` (``V <- V + 1``
    again and again stays one line); refused beyond :data:`MAX_FN_DEPTH`."""
    if fn.degree is not None and fn.degree <= 1:
        b, ab = (float(v) for v in fn(np.array([0.0, 1.0])))
        if np.isfinite(b) and np.isfinite(ab):
            return Fn("+", (Fn("*", (_const(ab - b), X)), _const(b)))
    if fn.depth > MAX_FN_DEPTH:
        raise ExpressionRefused(f"a chain of more than {MAX_FN_DEPTH} derived columns", "compute it in fewer steps")
    return fn


def _number(op: str, values: list[float], node: Node) -> float:
    """An operation on numbers only: its value (NaN for NA, and for what R gives as NaN or +-Inf)."""
    if op in ("neg", "exp", "sqrt"):
        fn = Fn(op, (_const(values[0]),))
    elif op == "^":
        fn = Fn("^", (_const(values[0]),), value=values[1])
    elif op == "log":
        if len(values) > 1 and not (np.isfinite(values[1]) and values[1] > 0 and values[1] != 1):
            raise ExpressionRefused(f"{node.to_text()[:60]!r}: a logarithm's base is a positive number other than 1",
                                    "e.g. log(2, base = 10)")
        fn = Fn("log", (_const(values[0]),), value=values[1] if len(values) > 1 else 0.0)
    elif op in ("+", "-", "*", "/"):
        fn = Fn(op, (_const(values[0]), _const(values[1])))
    else:
        raise ExpressionRefused(f"{node.to_text()[:60]!r}: the site cannot read {op!r} of numbers",
                                "check the expression")
    return float(fn(np.zeros(1))[0])
