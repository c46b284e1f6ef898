"""Aggregate summaries with dsBase's names and result shapes: length, dim, names, class, mean, variance.

Pooling across sites happens in the analyst client; each site returns sums
and counts so the pooled value is exact (e.g. pooled mean = sum of
``EstimatedMean * Nvalid`` over sites / sum of ``Nvalid``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError
from dsfed_server.context import CallContext, numeric, r_class
from dsfed_server.disclosure.checks import LEVEL_RULES, SUM_RULES
from dsfed_server.disclosure.declared import Declared
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet, column_names

_Q = ("disclosure.q_threshold",)

_X = Param("x", P.OBJECT, "a symbol or table$column")
_VALID = "VALID ANALYSIS"


def _rows(x: Any) -> int:
    if isinstance(x, (pd.DataFrame, pd.Series)):
        return len(x)
    raise CallError(f"x must be a table or a vector, got {r_class(x)}")


@register("lengthDS", "aggregate", [_X], checks=("disclosure.q_threshold",))
def length(ctx: CallContext, x: Any) -> int:
    """Length of a vector, or number of columns of a table (as R's ``length``)."""
    n = _rows(x)
    ctx.guard.min_count(n, "length")
    return int(x.shape[1]) if isinstance(x, pd.DataFrame) else n


@register("dimDS", "aggregate", [Param("x", P.TABLE, "a table symbol", rows_only=True)],
          checks=("disclosure.q_threshold",))
def dim(ctx: CallContext, x: pd.DataFrame | RowSet) -> list[int]:
    """Rows and columns of a table, as R's ``dim``."""
    ctx.guard.min_count(len(x), "number of rows")
    return [int(x.shape[0]), int(x.shape[1])]


@register("colnamesDS", "aggregate", [Param("x", P.TABLE, "a table symbol", rows_only=True)])
def colnames(ctx: CallContext, x: pd.DataFrame | RowSet) -> list[str]:
    """Column names of a table (metadata from the data dictionary; no record-level content)."""
    return [str(c) for c in column_names(x)]


@register("classDS", "aggregate", [_X])
def class_(ctx: CallContext, x: Any) -> str:
    """R class of a symbol: data.frame, numeric, integer, factor, character or logical."""
    return r_class(x)


def _counts(values: np.ndarray) -> tuple[np.ndarray, int, int]:
    valid = values[~np.isnan(values)]
    return valid, int(values.size - valid.size), int(values.size)


@register("meanDS", "aggregate", [Param("x", P.VECTOR, "a numeric vector, e.g. D$age")], checks=SUM_RULES)
def mean(ctx: CallContext, x: pd.Series) -> Generator[Declared, Any, dict[str, Any]]:
    """Mean of the non-missing values, with counts (dsBase ``meanDS`` shape).

    Returns ``EstimatedMean``, ``Nmissing``, ``Nvalid``, ``Ntotal``,
    ``ValidityMessage``. Refused when ``Nvalid`` < q.
    """
    valid, n_missing, n_total = _counts(numeric(x))
    ctx.guard.min_count(valid.size, "valid values")
    yield from ctx.summed(x)
    return {
        "EstimatedMean": float(valid.mean()),
        "Nmissing": n_missing,
        "Nvalid": int(valid.size),
        "Ntotal": n_total,
        "ValidityMessage": _VALID,
    }


@register("varDS", "aggregate", [Param("x", P.VECTOR, "a numeric vector, e.g. D$age")], checks=SUM_RULES)
def variance(ctx: CallContext, x: pd.Series) -> Generator[Declared, Any, dict[str, Any]]:
    """Sum and sum of squares of the non-missing values, with counts (dsBase ``varDS`` shape).

    The analyst pools :math:`S = \\sum x`, :math:`SS = \\sum x^2`, :math:`N`
    over sites and computes :math:`(SS - S^2/N) / (N - 1)`. Refused when
    ``Nvalid`` < q.
    """
    valid, n_missing, n_total = _counts(numeric(x))
    ctx.guard.min_count(valid.size, "valid values")
    yield from ctx.summed(x, squares=True)
    return {
        "Sum": float(valid.sum()),
        "SumOfSquares": float(np.dot(valid, valid)),
        "Nmissing": n_missing,
        "Nvalid": int(valid.size),
        "Ntotal": n_total,
        "ValidityMessage": _VALID,
    }


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
def correlation_parts(ctx: CallContext, x: Any, y: Any) -> Generator[Declared, Any, dict[str, Any]]:
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
    yield from ctx.summed(*_vectors(x, y), squares=True, products=True)
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
