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
from dsfed_server.functions.datamanagement import covering_factor
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
        codes, uniques = pd.factorize(x, sort=True)  # missing: -1
        labels = [str(u) for u in uniques.tolist()]
        codes = codes.astype(np.int64, copy=False)
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

    return Categories(codes, (len(labels),), render, what="1-D table", rows=ctx.record_rows(x, missing=True),
                      labels=(tuple(labels),))


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
                      rows=ctx.record_rows(x, y, missing=True), labels=(tuple(rows), tuple(cols)))


@register(
    "tableDS",
    "aggregate",
    [
        Param("rvar.transmit", P.VECTOR, "the rows' variable, e.g. \"D$menostat\""),
        Param("cvar.transmit", P.VECTOR, "the columns' variable", required=False),
        Param("stvar.transmit", P.VECTOR, "a third variable (not offered)", required=False),
        Param("rvar.all.unique.levels.transmit", P.STRING, "rvar's levels, comma-separated (asFactorDS1's)"),
        Param("cvar.all.unique.levels.transmit", P.STRING, "cvar's levels, comma-separated", required=False),
        Param("stvar.all.unique.levels.transmit", P.STRING, "stvar's levels (not offered)", required=False),
        Param("exclude.transmit", P.STRING, "levels to exclude (not offered)", required=False),
        Param("useNA.transmit", P.STRING, "no, ifany or always: a level for missing values", required=False,
              default="no", choices=("no", "ifany", "always")),
        Param("force.nfilter.transmit", P.NUMBER, "a higher minimum cell count (not offered)", required=False),
    ],
    checks=("disclosure.max_factor_levels", "disclosure.factor_levels_density", *GATE_RULES),
    cells=True,
)
def table_dsbase(ctx: CallContext, rvar_transmit: pd.Series, cvar_transmit: pd.Series | None,
                 stvar_transmit: pd.Series | None, rvar_all_unique_levels_transmit: str,
                 cvar_all_unique_levels_transmit: str | None, stvar_all_unique_levels_transmit: str | None,
                 exclude_transmit: str | None, useNA_transmit: str, force_nfilter_transmit: float | None) -> Categories:
    """R's ``table(rvar, cvar, useNA = useNA.transmit)`` over the levels ``ds.table`` gathered with
    ``asFactorDS1`` (dsBase ``tableDS``, ``ds.table``'s main call): ``counts`` in R's column-major
    order, ``dim``, ``dimnames`` (null for the missing-value level) and their ``names``
    (``rvar``, ``cvar``); through the DataSHIELD door, dsBase's ``table``.

    Refused, as dsBase does, when a non-empty cell holds fewer than q records -- the missing-value
    cells included (dsBase checks the table without them) -- through the release gate, per site or
    pooled over the sites; and, stricter than dsBase, when the levels leave out values a variable
    holds (dsBase turns them into NA: an analyst-chosen cut). Three-way tables (``stvar``),
    ``exclude`` and ``force.nfilter`` are not offered.
    """
    if stvar_transmit is not None or exclude_transmit is not None or force_nfilter_transmit is not None:
        raise CallError("tableDS: a third variable (stvar), exclude and force.nfilter are not offered",
                        hint="tabulate one or two variables; the site's q_threshold applies to every cell")
    if cvar_transmit is not None and cvar_all_unique_levels_transmit is None:
        raise CallError("tableDS: cvar.all.unique.levels.transmit is needed with cvar.transmit")
    variables = [(rvar_transmit, rvar_all_unique_levels_transmit, "rvar")]
    if cvar_transmit is not None:
        if len(cvar_transmit) != len(rvar_transmit):
            raise CallError("tableDS: rvar and cvar differ in length")
        variables.append((cvar_transmit, cvar_all_unique_levels_transmit, "cvar"))
    ctx.guard.min_count(len(rvar_transmit), "records")
    factors = [covering_factor(ctx, x, levels, f"{name}.all.unique.levels.transmit") for x, levels, name in variables]
    codes = [np.asarray(f.codes, dtype=np.int64) for f in factors]
    missing = np.zeros(len(rvar_transmit), dtype=bool)
    for c in codes:
        missing |= c < 0
    labels: list[list[str | None]] = [list(f.categories) for f in factors]
    if useNA_transmit == "no":
        keep = ~missing
    else:
        keep = np.ones(len(rvar_transmit), dtype=bool)
        for i, c in enumerate(codes):
            if useNA_transmit == "always" or (c < 0).any():
                codes[i] = np.where(c < 0, len(labels[i]), c)
                labels[i] = labels[i] + [None]
    shape = tuple(len(levels) for levels in labels)
    cells = codes[0][keep] if len(codes) == 1 else codes[0][keep] * shape[1] + codes[1][keep]
    names = [name for _, _, name in variables]
    vectors = [x for x, _, _ in variables]
    rows = ctx.record_rows(*vectors, missing=useNA_transmit != "no")

    def render(released: Released) -> dict[str, Any]:
        counts = np.asarray(released.counts).reshape(shape)
        return {"counts": counts.T.flatten().astype(int).tolist(), "dim": list(shape), "dimnames": labels,
                "names": names, "pooled": released.pooled}

    return Categories(cells, shape, render, what=f"{len(shape)}-D table", rows=rows,
                      labels=tuple(tuple(axis) for axis in labels))
