"""Aggregate summaries with dsBase's names and result shapes: length, dim, names, class, mean, variance.

Pooling across sites happens in the analyst client; each site returns sums
and counts so the pooled value is exact (e.g. pooled mean = sum of
``EstimatedMean * Nvalid`` over sites / sum of ``Nvalid``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext, numeric, r_class
from dsfed_server.disclosure.checks import SUM_RULES
from dsfed_core.errors import CallError
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet, column_names

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
def mean(ctx: CallContext, x: pd.Series) -> dict[str, Any]:
    """Mean of the non-missing values, with counts (dsBase ``meanDS`` shape).

    Returns ``EstimatedMean``, ``Nmissing``, ``Nvalid``, ``Ntotal``,
    ``ValidityMessage``. Refused when ``Nvalid`` < q.
    """
    valid, n_missing, n_total = _counts(numeric(x))
    ctx.guard.min_count(valid.size, "valid values")
    ctx.summed(x)
    return {
        "EstimatedMean": float(valid.mean()),
        "Nmissing": n_missing,
        "Nvalid": int(valid.size),
        "Ntotal": n_total,
        "ValidityMessage": _VALID,
    }


@register("varDS", "aggregate", [Param("x", P.VECTOR, "a numeric vector, e.g. D$age")], checks=SUM_RULES)
def variance(ctx: CallContext, x: pd.Series) -> dict[str, Any]:
    """Sum and sum of squares of the non-missing values, with counts (dsBase ``varDS`` shape).

    The analyst pools :math:`S = \\sum x`, :math:`SS = \\sum x^2`, :math:`N`
    over sites and computes :math:`(SS - S^2/N) / (N - 1)`. Refused when
    ``Nvalid`` < q.
    """
    valid, n_missing, n_total = _counts(numeric(x))
    ctx.guard.min_count(valid.size, "valid values")
    ctx.summed(x, squares=True)
    return {
        "Sum": float(valid.sum()),
        "SumOfSquares": float(np.dot(valid, valid)),
        "Nmissing": n_missing,
        "Nvalid": int(valid.size),
        "Ntotal": n_total,
        "ValidityMessage": _VALID,
    }
