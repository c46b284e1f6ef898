"""dsBase-compatible functions: dsBase's names, argument forms and result shapes, with
this site's rules applied (dsfed's own implementation; no dsBase code).

The DataSHIELD clients send either the symbol pattern (``levelsDS(D$tgrade)``:
the function receives the value) or the string pattern (``namesDS("D")``: the
function receives a name); the registry's parameter types accept both.
Where dsBase answers a disclosure risk with a silent zero or NA, dsfed refuses
with an error naming the rule (a refusal is never a result that looks whole):

- ``histogramDS2`` does not zero small bins: the site's ``bins.small_bin_policy``
  merges them with a neighbour (or refuses the histogram), and ``invalidcells``
  counts the requested bins not released as asked, which ``merged`` names and
  ``why`` explains;
- ``histogramDS1`` does not widen min/max by fresh random factors (averaging
  repeated calls would remove them): it returns the range rounded outward to
  the finest grid on which the lowest and the highest grid cell each hold at
  least q records (see :func:`outward_range`), deterministic per data;
- ``dataFrameSubsetDS2`` also refuses a subset that leaves out fewer than
  ``subset_min`` rows.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from dsfed_core.calltree import Column, Literal, Symbol
from dsfed_server.context import CallContext, numeric, r_class
from dsfed_server.disclosure.checks import GATE_RULES, LEVEL_RULES, SUM_RULES
from dsfed_server.disclosure.gate import Cut, Intervals, Released
from dsfed_core.errors import CallError
from dsfed_server.functions.histogram import bin_counts
from dsfed_server.functions.tables import condition_cells
from dsfed_core.parser import parse
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet

_VALID = "VALID ANALYSIS"
_Q = ("disclosure.q_threshold",)


# --- names, levels, validity -------------------------------------------------------------


@register("namesDS", "aggregate", [Param("x", P.OBJECT, "a list (a table is a list of columns), e.g. \"D\"")])
def names(ctx: CallContext, x: Any) -> list[str]:
    """Names of a list, as R's ``names``; a table (a list of columns in R) gives its column names.

    Like dsBase's ``namesDS``, anything that is not a list is refused.
    """
    if not isinstance(x, pd.DataFrame):
        raise CallError(f"the input object is not a list (a table is one), got a {r_class(x)} vector")
    return [str(c) for c in x.columns]


@register("levelsDS", "aggregate", [Param("x", P.VECTOR, "a factor, e.g. D$tgrade")], checks=LEVEL_RULES)
def levels(ctx: CallContext, x: pd.Series) -> dict[str, Any]:
    """Levels of a factor (dsBase ``levelsDS``): ``Levels`` and ``ValidityMessage``.

    Refused when the factor has more levels than ``max_factor_levels``, or more
    than ``factor_levels_density`` times its length (dsBase's nfilter.levels.density).
    """
    if r_class(x) != "factor":
        raise CallError(f"x must be a factor, got a {r_class(x)} vector")
    labels = [str(c) for c in x.cat.categories]
    ctx.guard.factor_levels(len(labels), len(x), "factor")
    return {"Levels": labels, "ValidityMessage": _VALID}


@register("isValidDS", "aggregate", [Param("obj", P.OBJECT, "a vector or table, e.g. D$age")], checks=_Q)
def is_valid(ctx: CallContext, obj: Any) -> bool:
    """Whether an object could be analysed under the site's minimum count (dsBase ``isValidDS``).

    A vector of length 0 < n < q, a factor with a level holding 0 < n < q
    records, or a table with 0 < rows < q is not valid.
    """
    q = ctx.guard.q
    cls = r_class(obj)
    if cls == "data.frame":
        return not 0 < len(obj) < q
    if cls == "factor":
        counts = np.bincount(obj.cat.codes.to_numpy()[obj.notna().to_numpy()], minlength=len(obj.cat.categories))
        return not bool(np.any((counts > 0) & (counts < q)))
    if cls in ("numeric", "integer", "character", "logical"):
        return not 0 < len(obj) < q
    return False


# --- histograms ----------------------------------------------------------------------------


def _ladder(start: float) -> Iterator[float]:
    """Grid steps 1, 2, 2.5, 5 x 10^k from the first one not below ``start``, upwards."""
    exponent = math.floor(math.log10(start))
    while True:
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            step = mantissa * 10.0**exponent
            if step >= start:
                yield step
        exponent += 1


def outward_range(values: np.ndarray, q: int) -> tuple[float, float]:
    """A range ``[lo, hi]`` holding every value, whose ends disclose no fewer than ``q`` records.

    ``lo`` and ``hi`` are ``values.min()`` and ``values.max()`` rounded outward
    to a grid of step 1, 2, 2.5 or 5 x 10^k: the finest step (from 1/1000 of the
    data's spread) at which the lowest grid cell ``[lo, lo + step]`` and the
    highest ``[hi - step, hi]`` each hold at least ``q`` values. So the range
    says no more about an extreme value than that it lies in a cell of at least
    ``q`` records. Values of one sign always find such a step (a step above
    the largest value puts every value in one cell); when the values take both
    signs and no step works (fewer than q on one side), the range is
    ``[-T, T]`` with T the power of ten at least ten times the largest
    magnitude, which does not even tell the signs. The result depends on the
    data only, so repeating the call reveals nothing new.
    """
    low, high = float(values.min()), float(values.max())
    scale = max(abs(low), abs(high), 1e-300)
    spread = high - low if high > low else scale
    top = 10.0 ** (math.ceil(math.log10(scale)) + 1)
    for step in _ladder(spread / 1000):
        if step >= top:
            return -top, top
        lo = math.floor(low / step) * step
        hi = math.ceil(high / step) * step
        lo, hi = (lo - step if lo > low else lo), (hi + step if hi < high else hi)  # rounding of the products
        if hi <= lo:
            hi = lo + step
        if np.sum(values <= lo + step) >= q and np.sum(values >= hi - step) >= q:
            return lo, hi
    raise AssertionError("unreachable: the ladder passes top")


_METHOD = Param("method.indicator", P.INTEGER, "1: small-cells rule (the only method this site offers)",
                choices=(1,))
_K = Param("k", P.NUMBER, "neighbours for the deterministic method (not offered; accepted and ignored)",
           required=False)
_NOISE = Param("noise", P.NUMBER, "noise for the probabilistic method (not offered; accepted and ignored)",
               required=False)


@register("histogramDS1", "aggregate",
          [Param("xvect", P.VECTOR, "a numeric vector, e.g. D$age"), _METHOD, _K, _NOISE], checks=_Q)
def histogram_range(ctx: CallContext, xvect: pd.Series, method_indicator: int, k: float | None,
                    noise: float | None) -> list[float]:
    """The range for a histogram's breaks (dsBase ``histogramDS1``): ``c(min, max)`` rounded outward.

    Instead of dsBase's fresh random widening, the minimum and maximum are
    rounded outward to a grid whose end cells hold at least q records each
    (:func:`outward_range`). Refused when fewer than q values are non-missing.
    """
    values = numeric(xvect, "xvect")
    valid = values[~np.isnan(values)]
    ctx.guard.min_count(valid.size, "valid values")
    lo, hi = outward_range(valid, ctx.guard.q)
    return [lo, hi]


def r_seq(start: float, stop: float, by: float) -> np.ndarray:
    """R's ``seq(from, to, by)`` for ``by > 0``: ``from + (0:n) * by`` with n = floor((to-from)/by + 1e-10)."""
    n = int((stop - start) / by + 1e-10)
    return np.minimum(start + np.arange(n + 1) * by, stop)


def _hist_fuzz(breaks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """R's ``hist`` nudges right-closed breaks (include.lowest) by 1e-7 of a typical bin width."""
    widths = np.diff(breaks)
    n_breaks = breaks.size
    if n_breaks > 5:
        base = float(np.median(widths))
    elif n_breaks <= 3:
        base = float(values.max() - values.min()) if values.size else 0.0
    else:
        base = float(widths[widths > 0].min())
    diddle = 1e-7 * base
    return breaks + np.concatenate([[-diddle], np.full(n_breaks - 1, diddle)])


def _not_as_asked(requested: np.ndarray, released: np.ndarray) -> list[list[float]]:
    """The requested bins ``[requested[i], requested[i + 1]]`` that are not a released bin (both
    breaks released, next to each other), as ``[lower, upper]``."""
    position = {float(b): i for i, b in enumerate(released)}
    return [[float(a), float(b)] for a, b in zip(requested[:-1], requested[1:])
            if float(a) not in position or position.get(float(b)) != position[float(a)] + 1]


def _equidistant(breaks: np.ndarray) -> bool:
    widths = np.diff(breaks)
    return bool(widths.max() - widths.min() < 1e-7 * widths.mean())


@register(
    "histogramDS2",
    "aggregate",
    [
        Param("xvect", P.VECTOR, "a numeric vector, e.g. D$age"),
        Param("num.breaks", P.INTEGER, "number of bins", minimum=1, maximum=10000),
        Param("min", P.NUMBER, "lower end of the breaks"),
        Param("max", P.NUMBER, "upper end of the breaks"),
        _METHOD, _K, _NOISE,
    ],
    checks=("bins.small_bin_policy", *LEVEL_RULES, *GATE_RULES),
    cells=True,
)
def histogram_bins(ctx: CallContext, xvect: pd.Series, num_breaks: int, min: float, max: float,
                   method_indicator: int, k: float | None, noise: float | None) -> Intervals:
    """A histogram over ``seq(min, max, by = (max - min) / num.breaks)`` (dsBase ``histogramDS2``).

    Returns ``list(histobject = <R's hist(plot = FALSE)>, invalidcells)``:
    counts in R's right-closed intervals (the first closed on the left too),
    ``density``, ``mids``, ``xname``, ``equidist``. A bin holding 0 < n < q
    records (or no record, between two new breaks) is merged with a neighbour
    by the release gate, or refuses the histogram, as the site's
    ``bins.small_bin_policy`` says; it is never zeroed. The histogram object
    then holds the coarser breaks (its density still integrates to 1), and the
    result says so: ``invalidcells`` counts the requested bins not released as
    asked (dsBase's count of its suppressed bins, which its client reports),
    ``merged`` lists them as ``c(lower, upper)`` and ``why`` gives the site's
    reason and what to do. Where every bin is released as asked the result is
    dsBase's two elements, ``invalidcells = 0``.
    Refused as well: fewer than q values, more bins than the factor-level rules
    allow, and values outside ``[min, max]`` (take the range from ``histogramDS1``).
    """
    if not max > min:
        raise CallError(f"max ({max}) must be greater than min ({min})")
    values = numeric(xvect, "xvect")
    valid = values[~np.isnan(values)]
    guard = ctx.guard
    guard.min_count(valid.size, "valid values")
    guard.factor_levels(num_breaks, valid.size, "histogram bins")
    breaks = r_seq(min, max, (max - min) / num_breaks)
    fuzzed = _hist_fuzz(breaks, valid)
    outside = bin_counts(valid, fuzzed)[[0, -1]]
    if outside.any():
        raise CallError("the breaks do not span the range of xvect; take min and max from histogramDS1")
    by_cut = {Cut(float(f), True): float(b) for f, b in zip(fuzzed[1:-1], breaks[1:-1])}

    def render(released: Released) -> dict[str, Any]:
        kept = np.array([breaks[0], *(by_cut.get(c, c.value) for c in released.cuts), breaks[-1]])
        counts = released.counts
        n = counts.sum()
        merged = _not_as_asked(breaks, kept)
        out = {
            "histobject": {
                "breaks": kept.tolist(),
                "counts": counts.tolist(),
                "density": (counts / (n * np.diff(kept))).tolist(),
                "mids": ((kept[:-1] + kept[1:]) / 2).tolist(),
                "xname": "xvect",
                "equidist": _equidistant(kept),
            },
            "invalidcells": len(merged),
        }
        return {**out, "merged": merged, "why": released.why} if merged else out

    return Intervals(valid, tuple(by_cut), render, policy=guard.rule("bins.small_bin_policy"), what="histogram",
                     column=ctx.root_column(xvect), rows=ctx.record_rows(xvect))


# --- correlation ---------------------------------------------------------------------------


def _vectors(*values: Any) -> list[pd.Series]:
    """The vectors of tables and vectors ``values`` as held (a table's columns, a vector itself)."""
    out: list[pd.Series] = []
    for value in values:
        if isinstance(value, pd.DataFrame):
            out += [value[c] for c in value.columns]
        elif isinstance(value, pd.Series):
            out.append(value)
    return out


def _numeric_frame(x: Any, y: Any) -> pd.DataFrame:
    parts: list[pd.DataFrame] = []
    for name, value in (("x", x), ("y", y)):
        if value is None:
            continue
        if isinstance(value, pd.DataFrame):
            parts.append(value)
        elif isinstance(value, pd.Series):
            parts.append(value.rename(f"{name}.val").to_frame())
        else:
            raise CallError(f"{name} must be a numeric vector or a table, got {r_class(value)}")
    frame = pd.concat(parts, axis=1) if len(parts) > 1 else parts[0]
    if len(parts) > 1 and len({len(p) for p in parts}) > 1:
        raise CallError("x and y have different numbers of rows")
    for column in frame.columns:
        cls = r_class(frame[column])
        if cls not in ("numeric", "integer", "logical"):
            raise CallError(f"variable {column!r} is a {cls} vector; correlations need numeric variables")
    return frame


@register(
    "corDS",
    "aggregate",
    [Param("x", P.OBJECT, "a table or a numeric vector, e.g. \"D\""),
     Param("y", P.OBJECT, "a second numeric vector or table (needed when x is a vector)", required=False)],
    checks=(*SUM_RULES, "disclosure.glm_saturation"),
)
def correlation_parts(ctx: CallContext, x: Any, y: Any) -> dict[str, Any]:
    """Sums, sums of squares and of products over complete cases (dsBase ``corDS``).

    Returns the matrices ``sums.of.products``, ``sums`` (row m: the sum of
    variable m), ``complete.counts``, ``na.counts`` (per column, and
    casewise) and ``sums.of.squares``, ``class`` of x, and the ``variables``' names (dsBase's
    dimnames: ``x.val`` and ``y.val`` for two vectors, a table's column names). Pooled over sites
    they give Pearson's correlation exactly:
    :math:`r = (n S_{xy} - S_x S_y) / \\sqrt{(n S_{xx} - S_x^2)(n S_{yy} - S_y^2)}`.
    Refused (nfilter.glm, nfilter.tab) when the variables exceed
    ``glm_saturation`` x the records, a binary variable has a level with
    fewer than q records, or fewer than q cases are complete.
    """
    if y is None and isinstance(x, pd.Series):
        raise CallError("if x is a numeric vector, y must also be a numeric vector")
    frame = _numeric_frame(x, y)
    data = frame.to_numpy(dtype=float, na_value=np.nan)
    n_rows, n_vars = data.shape
    guard = ctx.guard
    guard.saturation(n_vars, n_rows)
    for j, column in enumerate(frame.columns):
        present = data[~np.isnan(data[:, j]), j]
        levels, counts = np.unique(present, return_counts=True)
        if levels.size == 2:
            guard.min_count(int(counts.min()), f"binary variable {column}: a level")
    complete = data[~np.isnan(data).any(axis=1)]
    guard.min_count(complete.shape[0], "complete cases")
    ctx.summed(*_vectors(x, y), squares=True, products=True)
    sums = complete.sum(axis=0)
    squares = (complete**2).sum(axis=0)
    column_nas = np.isnan(data).sum(axis=0)
    casewise = n_rows - complete.shape[0]
    full = np.ones((n_vars, n_vars))
    return {
        "sums.of.products": (complete.T @ complete).tolist(),
        "sums": (sums[:, None] * full).tolist(),
        "complete.counts": (complete.shape[0] * full).astype(int).tolist(),
        "na.counts": {
            "Number of NAs in each column": [column_nas.astype(int).tolist()],
            "Number of NAs casewise": (casewise * full).astype(int).tolist(),
        },
        "sums.of.squares": (squares[:, None] * full).tolist(),
        "class": r_class(x),
        "variables": [str(c) for c in frame.columns],
    }


# --- subsetting ----------------------------------------------------------------------------

_OPERATORS: dict[int, tuple[str, Callable[[Any, Any], Any]]] = {
    1: ("==", operator.eq), 2: ("!=", operator.ne), 3: ("<", operator.lt),
    4: ("<=", operator.le), 5: (">", operator.gt), 6: (">=", operator.ge),
}


def _operand(ctx: CallContext, text: str, n_rows: int) -> Any:
    """``V1.name`` / ``V2.name``: a number or quoted string, or a vector named like ``D$age``."""
    node = parse(text, ctx.limits)
    if isinstance(node, Literal) and node.value is not None:
        return node.value
    if isinstance(node, (Symbol, Column)):
        value = ctx.resolve(node)
        if not isinstance(value, pd.Series):
            raise CallError(f"{text!r} must name a vector, got a {r_class(value)}")
        if len(value) not in (1, n_rows):
            raise CallError(f"{text!r} must have length 1 or the table's {n_rows} rows")
        return value.reset_index(drop=True) if len(value) == n_rows else value.iloc[0]
    raise CallError(f"{text!r} must be a number, a quoted string or the name of a vector")


def _comparable(value: Any) -> Any:
    if isinstance(value, pd.Series):
        if isinstance(value.dtype, pd.CategoricalDtype) or r_class(value) == "character":
            return value.astype("string")
        return value.astype("Float64")
    return value


def _columns(spec: list[float] | None, n_cols: int, what: str) -> list[int]:
    index = [int(c) for c in spec or []]
    if any(c != v or not 1 <= c <= n_cols for c, v in zip(index, spec or [])):
        raise CallError(f"{what} must be column numbers between 1 and {n_cols}")
    return [c - 1 for c in index]


_SUBSET_PARAMS = [
        Param("df.name", P.TABLE, "the table to subset, e.g. \"D\"", rows_only=True),
        Param("V1.name", P.STRING, "the vector compared, e.g. \"D$age\" (or \"ONES\" to keep every row)"),
        Param("V2.name", P.STRING, "what it is compared with: a number (\"50\"), a quoted string, or a vector"),
        Param("Boolean.operator.n", P.INTEGER, "1 ==, 2 !=, 3 <, 4 <=, 5 >, 6 >=", choices=tuple(_OPERATORS)),
        Param("keep.cols", P.NUMBERS, "column numbers to keep, e.g. \"1,3\"", required=False),
        Param("rm.cols", P.NUMBERS, "column numbers to drop, e.g. \"2\"", required=False),
        Param("keep.NAs", P.BOOLEAN, "keep rows where the comparison is NA", required=False, default=False),
]
SUBSET_DONE = "Subsetting undertaken without problems"


@register("dataFrameSubsetDS2", "assign", _SUBSET_PARAMS, checks=("disclosure.subset_min", *GATE_RULES))
def data_frame_subset(ctx: CallContext, df_name: pd.DataFrame | RowSet, V1_name: str, V2_name: str,
                      Boolean_operator_n: int, keep_cols: list[float] | None, rm_cols: list[float] | None,
                      keep_NAs: bool) -> pd.DataFrame | RowSet:
    """Rows of a table where ``V1 <op> V2`` holds, optionally some columns (dsBase ``dataFrameSubsetDS2``).

    Refused when the subset, or the rows it leaves out, would hold fewer than
    the site's ``subset_min`` rows (dsBase's nfilter.subset checks the subset only).
    """
    n_rows = len(df_name)
    if keep_cols is not None and rm_cols is not None:
        raise CallError("give keep.cols or rm.cols, not both")
    if "ONES" in (V1_name, V2_name):
        mask = np.ones(n_rows, dtype=bool)
    else:
        symbol, compare = _OPERATORS[Boolean_operator_n]
        left = _comparable(_operand(ctx, V1_name, n_rows))
        right = _comparable(_operand(ctx, V2_name, n_rows))
        if not isinstance(left, pd.Series):
            raise CallError(f"V1.name {V1_name!r} must name a vector of the table's length")
        text = pd.api.types.is_string_dtype(left.dtype)
        other_text = isinstance(right, str) or (isinstance(right, pd.Series) and pd.api.types.is_string_dtype(right.dtype))
        if text != other_text:
            raise CallError(f"{V1_name!r} and {V2_name!r} are not both numbers or both text/factor values")
        if text and symbol not in ("==", "!="):
            raise CallError(f"text and factor values can only be compared with == or !=, not {symbol}")
        result = pd.array(compare(left, right), dtype="boolean")
        mask = result.fillna(keep_NAs).to_numpy(dtype=bool)
    numeric_literal = "ONES" not in (V1_name, V2_name) and not text and not isinstance(right, pd.Series)
    condition = condition_cells(ctx, left, symbol, float(right)) if numeric_literal else None
    n_cols = df_name.shape[1]
    columns = None
    if keep_cols is not None:
        columns = _columns(keep_cols, n_cols, "keep.cols")
    elif rm_cols is not None:
        drop = set(_columns(rm_cols, n_cols, "rm.cols"))
        columns = [j for j in range(n_cols) if j not in drop]
    return ctx.subset(df_name, mask, ctx.guard.subset_rows(df_name, mask, condition), columns)


@register("dataFrameSubsetDS1", "aggregate", _SUBSET_PARAMS, checks=("disclosure.subset_min", *GATE_RULES))
def data_frame_subset_check(ctx: CallContext, df_name: pd.DataFrame | RowSet, V1_name: str, V2_name: str,
                            Boolean_operator_n: int, keep_cols: list[float] | None, rm_cols: list[float] | None,
                            keep_NAs: bool) -> str:
    """The checks of ``dataFrameSubsetDS2`` with the same arguments, its subset not kept (dsBase
    ``dataFrameSubsetDS1``, the first call of ``ds.dataFrameSubset``): a subset the site refuses is
    refused here with the rule's name, before the assign call; otherwise dsBase's
    ``"Subsetting undertaken without problems"`` (dsBase's warning about a subset close to the
    table's size never arises: such a subset is refused by ``subset_min``)."""
    data_frame_subset(ctx, df_name, V1_name, V2_name, Boolean_operator_n, keep_cols, rm_cols, keep_NAs)
    return SUBSET_DONE
