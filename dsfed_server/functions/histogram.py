"""Histogram counts over analyst-chosen breaks, with the site's small-bin policy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext, numeric
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.gate import Cut, Intervals, Released, cuts_from
from dsfed_core.errors import CallError
from dsfed_server.registry import P, Param, register


def bin_counts(values: np.ndarray, breaks: np.ndarray) -> np.ndarray:
    """Counts in R's ``hist`` intervals (b0, b1], ..., with the first closed: [b0, b1].

    Values below ``b0`` and above the last break fall in two open-ended bins
    at either end, so nothing is silently dropped.
    """
    idx = np.searchsorted(breaks, values, side="left")  # value in (b[i-1], b[i]] -> i
    idx = np.where(values == breaks[0], 1, idx)  # include.lowest
    return np.bincount(idx, minlength=len(breaks) + 1)


def hist_cuts(breaks: np.ndarray) -> tuple[Cut, ...]:
    """The cuts of R's ``hist`` intervals over ``breaks`` with open-ended bins at both ends:
    (-inf, b0), [b0, b1], (b1, b2], ..., (bm, inf)."""
    return (Cut(float(breaks[0]), False),) + cuts_from(breaks[1:], inclusive=True)


@register(
    "histogramDS",
    "aggregate",
    [
        Param("x", P.VECTOR, "a numeric vector, e.g. D$age"),
        Param("breaks", P.NUMBERS, "increasing bin edges, e.g. c(20, 30, 40, 50, 60, 70, 80)"),
    ],
    checks=("bins.small_bin_policy", "disclosure.max_factor_levels", "disclosure.factor_levels_density", *GATE_RULES),
    cells=True,
)
def histogram(ctx: CallContext, x: pd.Series, breaks: list[float]) -> Intervals:
    """Counts of ``x`` per bin; bins below q are refused or merged as the site's rules say
    (``bins.small_bin_policy``, applied by the release gate).

    ``edges`` has one more entry than ``counts``; ``null`` at either end
    stands for an open-ended bin (-inf or +inf) holding values outside the
    breaks. ``Nmissing`` counts missing values.
    """
    edges = np.asarray(breaks, dtype=float)
    if edges.size < 2 or np.any(np.diff(edges) <= 0) or not np.all(np.isfinite(edges)):
        raise CallError("breaks must be at least two strictly increasing finite numbers")
    values = numeric(x)
    valid = values[~np.isnan(values)]
    ctx.guard.min_count(valid.size, "valid values")
    ctx.guard.factor_levels(edges.size - 1, valid.size, "histogram bins")

    def render(released: Released) -> dict[str, Any]:
        full = np.concatenate([[-np.inf], [c.value for c in released.cuts], [np.inf]])
        counts = released.counts
        # drop empty open-ended bins so the result reads like an ordinary histogram
        if counts[0] == 0:
            counts, full = counts[1:], full[1:]
        if counts[-1] == 0:
            counts, full = counts[:-1], full[:-1]
        return {"edges": [None if not np.isfinite(e) else float(e) for e in full], "counts": counts.tolist(),
                "Nmissing": int(released.totals["Nmissing"]), **released.describe()}

    return Intervals(valid, hist_cuts(edges), render, policy=ctx.guard.rule("bins.small_bin_policy"),
                     what="histogram", column=ctx.root_column(x), totals={"Nmissing": values.size - valid.size},
                     rows=ctx.record_rows(x))
