"""One- and two-way contingency tables (dsBase ``table1DDS`` / ``table2DDS``).

The functions declare the table's cells (:class:`~dsfed_server.disclosure.gate.Categories`);
the release gate refuses a table with any non-zero cell below q whole (no cell suppression, as
in dsBase: a suppressed cell could be recovered from the margins) -- per site, or, under secure
aggregation, on the cells pooled over the sites.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext, r_class
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.gate import Categories, Released
from dsfed_core.errors import CallError
from dsfed_server.registry import P, Param, register

NA_LEVEL = "NA"


def _levels(ctx: CallContext, x: pd.Series, what: str) -> tuple[list[str], np.ndarray]:
    """Level labels and each record's level index (the NA level last, only if present)."""
    if not isinstance(x, pd.Series):
        raise CallError(f"{what} must be a vector, got {r_class(x)}")
    if isinstance(x.dtype, pd.CategoricalDtype):
        labels = [str(c) for c in x.cat.categories]
        codes = x.cat.codes.to_numpy().astype(np.int64)
    else:
        if r_class(x) == "numeric":
            raise CallError(f"{what} is a continuous (numeric) vector; tabulate a factor or an integer vector")
        present = x.dropna()
        uniques = sorted(present.unique().tolist())
        labels = [str(u) for u in uniques]
        index = {u: i for i, u in enumerate(uniques)}
        codes = np.array([index[v] if v in index else -1 for v in x.astype(object).where(x.notna(), None)],
                         dtype=np.int64)
    ctx.guard.factor_levels(len(labels), len(x), what)
    if (codes < 0).any():
        codes = np.where(codes < 0, len(labels), codes)
        labels = labels + [NA_LEVEL]
    return labels, codes


@register("table1DDS", "aggregate", [Param("x", P.VECTOR, "a factor or integer vector, e.g. D$tgrade")],
          checks=("disclosure.max_factor_levels", "disclosure.factor_levels_density", *GATE_RULES),
          cells=True)
def table1d(ctx: CallContext, x: pd.Series) -> Categories:
    """Counts per level of ``x`` (missing values as level ``NA``); refused if a non-zero count is below q."""
    ctx.guard.min_count(len(x), "records")
    labels, codes = _levels(ctx, x, "x")

    def render(released: Released) -> dict[str, Any]:
        return {"levels": labels, "counts": released.counts.tolist(), "total": int(released.counts.sum()),
                "pooled": released.pooled}

    return Categories(codes, (len(labels),), render, what="1-D table", rows=ctx.record_rows(x.astype(object).fillna("")))


@register(
    "table2DDS",
    "aggregate",
    [Param("x", P.VECTOR, "row variable (factor or integer)"), Param("y", P.VECTOR, "column variable")],
    checks=("disclosure.max_factor_levels", "disclosure.factor_levels_density", *GATE_RULES),
    cells=True,
)
def table2d(ctx: CallContext, x: pd.Series, y: pd.Series) -> Categories:
    """Counts of ``x`` by ``y`` as a matrix (rows: levels of x); refused if a non-zero cell is below q."""
    if len(x) != len(y):
        raise CallError(f"x and y have different lengths ({len(x)} and {len(y)})")
    ctx.guard.min_count(len(x), "records")
    rows, rx = _levels(ctx, x, "x")
    cols, cy = _levels(ctx, y, "y")

    def render(released: Released) -> dict[str, Any]:
        return {"rows": rows, "cols": cols, "counts": released.counts.tolist(), "total": int(released.counts.sum()),
                "pooled": released.pooled}

    return Categories(rx * len(cols) + cy, (len(rows), len(cols)), render, what="2-D table",
                      rows=ctx.record_rows(x.astype(object).fillna(""), y.astype(object).fillna("")))
