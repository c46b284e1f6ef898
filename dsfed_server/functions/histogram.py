"""Histogram counts over analyst-chosen breaks, with the site's small-bin policy: the native
``histogramDS`` and dsBase's ``histogramDS1``/``histogramDS2`` (dsBase's names, argument forms and result
shapes, with this site's rules; dsfed's own implementation, no dsBase code).

Where dsBase answers a disclosure risk with a silent zero or NA, dsfed refuses or coarsens, saying so:

- ``histogramDS2`` does not zero small bins: the site's ``bins.small_bin_policy`` merges them with a
  neighbour (or refuses the histogram), and ``invalidcells`` counts the requested bins not released as
  asked, which ``merged`` names and ``why`` explains;
- ``histogramDS1`` does not widen min/max by fresh random factors (averaging repeated calls would remove
  them): it returns the range rounded outward to the finest grid on which the lowest and the highest grid
  cell each hold at least q records (see :func:`outward_range`), deterministic per data.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError
from dsfed_server.context import CallContext, numeric
from dsfed_server.disclosure.checks import GATE_RULES, LEVEL_RULES
from dsfed_server.disclosure.gate import Cut, Intervals, Released, cuts_from
from dsfed_server.registry import P, Param, register

_Q = ("disclosure.q_threshold",)


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
                     strata=ctx.strata(x), rows=ctx.record_rows(x))


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
                     column=ctx.root_column(xvect), strata=ctx.strata(xvect), rows=ctx.record_rows(xvect))
