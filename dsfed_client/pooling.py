"""Pooling per-site summaries into the pooled statistic, exactly.

Pure functions of the per-site results (no I/O), so each can be tested on
hand-computed cases.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np
import pandas as pd

from dsfed_client.results import Results, hidden, result, stat


@result
class PooledMean(Results):
    """A mean pooled over the sites from their means and counts."""

    _title: ClassVar[str] = "Pooled mean"

    mean: float = stat("Mean", brief=".6g")
    n_valid: int = stat("Valid", brief="")
    n_missing: int = stat("Missing")
    n_total: int = stat("Total")
    per_site: dict[str, float] = stat("Per site", factory=dict)


@result
class PooledVariance(Results):
    """A sample variance pooled over the sites from their sums and sums of squares."""

    _title: ClassVar[str] = "Pooled variance"

    variance: float = stat("Variance", brief=".6g")
    mean: float = stat("Mean")
    n_valid: int = stat("Valid", brief="")
    per_site: dict[str, float] = stat("Per site", factory=dict)


@result
class PooledCount(Results):
    """A count summed over the sites."""

    _title: ClassVar[str] = "Pooled count"

    n: int = stat("n", brief="")
    per_site: dict[str, int] = stat("Per site", factory=dict)


@result
class PooledTable(Results):
    """A one- or two-way contingency table summed over the sites on the union of levels."""

    _title: ClassVar[str] = "Pooled table"

    rows: list[str] = stat(brief="")
    cols: list[str] | None = stat(brief="")
    counts: np.ndarray = hidden()
    per_site: dict[str, np.ndarray] = stat(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        if self.cols is None:
            return dict(zip(self.rows, self.counts.tolist()))
        return {r: dict(zip(self.cols, row)) for r, row in zip(self.rows, self.counts.tolist())}

    def _table(self) -> pd.DataFrame:
        if self.cols is None:
            return pd.DataFrame({"count": self.counts}, index=pd.Index(self.rows, name="level"))
        return pd.DataFrame(self.counts, index=pd.Index(self.rows, name="row"), columns=self.cols)


@result
class PooledHistogram(Results):
    """A histogram summed over the sites on the edges every site released."""

    _title: ClassVar[str] = "Pooled histogram"

    edges: np.ndarray = hidden()  # may start at -inf / end at +inf (open-ended bins)
    counts: np.ndarray = hidden()
    n_missing: int = stat("Missing", brief="")
    per_site: dict[str, tuple[np.ndarray, np.ndarray]] = hidden(default=None)

    def _table(self) -> pd.DataFrame:
        return pd.DataFrame({"lower": self.edges[:-1], "upper": self.edges[1:], "count": self.counts})


def summed_fields(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The numeric fields of per-site results summed over the sites; a field only some sites return (a newer
    server's) has no sum: left out, as if none had returned it."""
    first = next(iter(results.values()))
    return {k: float(sum(r[k] for r in results.values())) for k, v in first.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and all(k in r for r in results.values())}


def pooled_mean(results: Mapping[str, Mapping[str, Any]]) -> PooledMean:
    """Pooled mean :math:`\\bar x = \\sum_k n_k \\bar x_k / \\sum_k n_k`.

    Site a holds 1, 2, 3 (one value missing), site b 10, 20; by hand the pooled mean is 36 / 5:

    >>> m = pooled_mean({"a": {"EstimatedMean": 2.0, "Nvalid": 3, "Nmissing": 1, "Ntotal": 4},
    ...                  "b": {"EstimatedMean": 15.0, "Nvalid": 2, "Nmissing": 0, "Ntotal": 2}})
    >>> m
    PooledMean(mean=7.2, n_valid=5)
    >>> m.to_dict()
    {'mean': 7.2, 'n_valid': 5, 'n_missing': 1, 'n_total': 6, 'per_site': {'a': 2.0, 'b': 15.0}}
    """
    n = sum(int(r["Nvalid"]) for r in results.values())
    total = sum(float(r["EstimatedMean"]) * int(r["Nvalid"]) for r in results.values())
    return PooledMean(
        mean=total / n,
        n_valid=n,
        n_missing=sum(int(r["Nmissing"]) for r in results.values()),
        n_total=sum(int(r["Ntotal"]) for r in results.values()),
        per_site={s: float(r["EstimatedMean"]) for s, r in results.items()},
    )


def pooled_variance(results: Mapping[str, Mapping[str, Any]]) -> PooledVariance:
    """Pooled sample variance :math:`(SS - S^2/N)/(N-1)` from per-site sums (as ``var`` in R).

    Uses a two-pass-equivalent form over site means to limit cancellation:
    :math:`\\sum_k [SS_k - S_k^2/n_k] + \\sum_k n_k(\\bar x_k - \\bar x)^2`.

    The same two sites: ``var(c(1, 2, 3, 10, 20))`` in R is 254.8 / 4 = 63.7:

    >>> v = pooled_variance({"a": {"Nvalid": 3, "Sum": 6.0, "SumOfSquares": 14.0},
    ...                      "b": {"Nvalid": 2, "Sum": 30.0, "SumOfSquares": 500.0}})
    >>> round(v.variance, 10), v.per_site
    (63.7, {'a': 1.0, 'b': 50.0})
    """
    n_k = np.array([int(r["Nvalid"]) for r in results.values()], dtype=float)
    s_k = np.array([float(r["Sum"]) for r in results.values()])
    ss_k = np.array([float(r["SumOfSquares"]) for r in results.values()])
    n = n_k.sum()
    means = s_k / n_k
    grand = s_k.sum() / n
    within = np.sum(ss_k - s_k * means)
    between = np.sum(n_k * (means - grand) ** 2)
    per_site = {s: float((ss - sm * sm / nk) / (nk - 1)) for s, ss, sm, nk in zip(results, ss_k, s_k, n_k)}
    return PooledVariance(float((within + between) / (n - 1)), float(grand), int(n), per_site)


def pooled_count(results: Mapping[str, Any]) -> PooledCount:
    per_site = {s: int(r) for s, r in results.items()}
    return PooledCount(sum(per_site.values()), per_site)


def _union(lists: list[list[str]]) -> list[str]:
    out: list[str] = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


def pooled_table1d(results: Mapping[str, Mapping[str, Any]]) -> PooledTable:
    """Sum of per-site counts over the union of levels (a level absent at a site counts 0)."""
    levels = _union([r["levels"] for r in results.values()])
    per_site = {}
    for site, r in results.items():
        counts = np.zeros(len(levels), dtype=np.int64)
        for level, c in zip(r["levels"], r["counts"]):
            counts[levels.index(level)] = c
        per_site[site] = counts
    return PooledTable(levels, None, sum(per_site.values()), per_site)


def pooled_table2d(results: Mapping[str, Mapping[str, Any]]) -> PooledTable:
    rows = _union([r["rows"] for r in results.values()])
    cols = _union([r["cols"] for r in results.values()])
    per_site = {}
    for site, r in results.items():
        counts = np.zeros((len(rows), len(cols)), dtype=np.int64)
        for i, row in enumerate(r["rows"]):
            for j, col in enumerate(r["cols"]):
                counts[rows.index(row), cols.index(col)] = r["counts"][i][j]
        per_site[site] = counts
    return PooledTable(rows, cols, sum(per_site.values()), per_site)


def _edges(raw: list[float | None]) -> np.ndarray:
    edges = np.array([np.nan if e is None else e for e in raw], dtype=float)
    if np.isnan(edges[0]):
        edges[0] = -np.inf
    if np.isnan(edges[-1]):
        edges[-1] = np.inf
    return edges


def pooled_histogram(results: Mapping[str, Mapping[str, Any]]) -> PooledHistogram:
    """Sum per-site histograms on their common edges.

    A site whose small-bin policy merged bins returns coarser edges; the pooled
    histogram uses the edges every site has (each site's bins nest inside
    those), so no count is split or guessed.
    """
    per_site = {s: (_edges(r["edges"]), np.asarray(r["counts"], dtype=np.int64)) for s, r in results.items()}
    finite = [set(e[np.isfinite(e)].tolist()) for e, _ in per_site.values()]
    common = sorted(set.intersection(*finite)) if finite else []
    lo = -np.inf if any(e[0] == -np.inf for e, _ in per_site.values()) else None
    hi = np.inf if any(e[-1] == np.inf for e, _ in per_site.values()) else None
    edges = np.array(([lo] if lo is not None else []) + common + ([hi] if hi is not None else []), dtype=float)
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for site_edges, site_counts in per_site.values():
        for left, c in zip(site_edges[:-1], site_counts):
            idx = np.searchsorted(edges, left, side="right") - 1
            counts[max(idx, 0)] += c
    n_missing = sum(int(r.get("Nmissing", 0)) for r in results.values())
    return PooledHistogram(edges, counts, n_missing, per_site)


def common_edges(edge_lists: list[np.ndarray]) -> np.ndarray:
    """The edges every site released (each site's cells nest inside the cells they make): a site's
    release gate may have merged cells, so a pooled cell must be a union of every site's cells.

    >>> common_edges([np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.25, 0.5, 0.75, 1.0])])
    array([0. , 0.5, 1. ])
    """
    inner = set.intersection(*[set(e[1:-1].tolist()) for e in edge_lists])
    lo = min(e[0] for e in edge_lists)
    hi = max(e[-1] for e in edge_lists)
    return np.array([lo, *sorted(inner), hi], dtype=float)


def onto(edges: np.ndarray, site_edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A site's per-cell values summed onto the (coarser) common cells ``edges``.

    >>> onto(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.25, 0.5, 0.75, 1.0]), [1, 2, 3, 4])
    array([3., 7.])
    """
    idx = np.searchsorted(edges[1:-1], site_edges[:-1], side="right")
    return np.bincount(idx, weights=np.asarray(values, dtype=float), minlength=edges.size - 1)


def pooled_bins(results: Mapping[str, Mapping[str, Any]], fields: tuple[str, ...]
                ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per-site binned sums (``edges`` and a value per cell in each of ``fields``) summed on the
    common edges (:func:`common_edges`), exactly: no cell is split or guessed."""
    site_edges = {s: np.asarray(r["edges"], dtype=float) for s, r in results.items()}
    edges = common_edges(list(site_edges.values()))
    sums = {f: sum(onto(edges, site_edges[s], r[f]) for s, r in results.items()) for f in fields}
    return edges, sums
