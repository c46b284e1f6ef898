"""Histogram counts over analyst-chosen breaks, with the site's small-bin policy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext, numeric
from dsfed_server.errors import CallError
from dsfed_server.registry import P, Param, register


def bin_counts(values: np.ndarray, breaks: np.ndarray) -> np.ndarray:
    """Counts in R's ``hist`` intervals (b0, b1], ..., with the first closed: [b0, b1].

    Values below ``b0`` and above the last break fall in two open-ended bins
    at either end, so nothing is silently dropped.
    """
    idx = np.searchsorted(breaks, values, side="left")  # value in (b[i-1], b[i]] -> i
    idx = np.where(values == breaks[0], 1, idx)  # include.lowest
    return np.bincount(idx, minlength=len(breaks) + 1)


@register(
    "histogramDS",
    "aggregate",
    [
        Param("x", P.VECTOR, "a numeric vector, e.g. D$age"),
        Param("breaks", P.NUMBERS, "increasing bin edges, e.g. c(20, 30, 40, 50, 60, 70, 80)"),
    ],
    checks=("disclosure.q_threshold", "bins.small_bin_policy", "disclosure.factor_levels_density"),
)
def histogram(ctx: CallContext, x: pd.Series, breaks: list[float]) -> dict[str, Any]:
    """Counts of ``x`` per bin; bins below q are refused or merged as the site's rules say.

    ``edges`` has one more entry than ``counts``; ``null`` at either end
    stands for an open-ended bin (-inf or +inf) holding values outside the
    breaks. ``Nmissing`` counts missing values.
    """
    edges = np.asarray(breaks, dtype=float)
    if edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise CallError("breaks must be at least two strictly increasing numbers")
    values = numeric(x)
    valid = values[~np.isnan(values)]
    ctx.guard.min_count(valid.size, "valid values")
    ctx.guard.factor_levels(edges.size - 1, valid.size, "histogram bins")
    counts = bin_counts(valid, edges)
    full_edges = np.concatenate([[-np.inf], edges, [np.inf]])
    counts, full_edges = ctx.guard.histogram(counts, full_edges)
    # drop empty open-ended bins so the result reads like an ordinary histogram
    if counts[0] == 0:
        counts, full_edges = counts[1:], full_edges[1:]
    if counts[-1] == 0:
        counts, full_edges = counts[:-1], full_edges[:-1]
    return {
        "edges": [None if not np.isfinite(e) else float(e) for e in full_edges],
        "counts": counts.tolist(),
        "Nmissing": int(values.size - valid.size),
    }
