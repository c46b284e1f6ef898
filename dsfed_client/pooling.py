"""Pooling per-site summaries into the pooled statistic, exactly.

Pure functions of the per-site results (no I/O), so each can be tested on
hand-computed cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class PooledMean:
    mean: float
    n_valid: int
    n_missing: int
    n_total: int
    per_site: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PooledVariance:
    variance: float
    mean: float
    n_valid: int
    per_site: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PooledCount:
    n: int
    per_site: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PooledTable:
    rows: list[str]
    cols: list[str] | None
    counts: np.ndarray
    per_site: dict[str, np.ndarray] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        if self.cols is None:
            return dict(zip(self.rows, self.counts.tolist()))
        return {r: dict(zip(self.cols, row)) for r, row in zip(self.rows, self.counts.tolist())}


@dataclass(frozen=True)
class PooledHistogram:
    edges: np.ndarray  # may start at -inf / end at +inf (open-ended bins)
    counts: np.ndarray
    n_missing: int
    per_site: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def pooled_mean(results: Mapping[str, Mapping[str, Any]]) -> PooledMean:
    """Pooled mean :math:`\\bar x = \\sum_k n_k \\bar x_k / \\sum_k n_k`."""
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
    release gate may have merged cells, so a pooled cell must be a union of every site's cells."""
    inner = set.intersection(*[set(e[1:-1].tolist()) for e in edge_lists])
    lo = min(e[0] for e in edge_lists)
    hi = max(e[-1] for e in edge_lists)
    return np.array([lo, *sorted(inner), hi], dtype=float)


def onto(edges: np.ndarray, site_edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A site's per-cell values summed onto the (coarser) common cells ``edges``."""
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
