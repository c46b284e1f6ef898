"""Hierarchical histograms pooled over sites, made into global CDFs (Xu & Cormode 2025,
"Methods Overview", step 2).

The sites' noisy counts of every level are summed; :func:`tree_least_squares` makes them
consistent and :func:`monotone_cumulative` monotone. The analyst does this to draw ROC and PR
curves (``monotone=True``); the sites do the same on the same authenticated pooled counts to derive
the reference CDFs of the histogram AUC themselves (data-dependent parameters come from the sites),
without the monotone step: the AUC is linear in the reference, so the consistent counts, unbiased,
give an AUC with no bias from the noise and a noise variance known exactly, where the isotonic
projection, a non-linear map, biases it (binormal scores, n = 500, 64 leaves: about -0.004).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize


def tree_least_squares(levels: list[np.ndarray], variances: np.ndarray, branching: int) -> np.ndarray:
    """Best linear unbiased leaf counts given noisy counts of every level of a complete tree.

    ``levels[l]`` holds the :math:`b^l` noisy counts of level ``l`` with noise variance
    ``variances[l]`` (a trailing axis is carried along: several trees at once). Bottom-up, each
    node's own count and the sum of its children's estimates are combined by inverse-variance
    weights; top-down, the gap between a node's final value and its children's sum is shared
    equally among the children (Hay et al. 2010, "Boosting the accuracy of differentially private
    histograms through consistency", generalised to a noise variance per level). The result sums
    exactly to each consistent parent, and is linear in the noisy counts.
    """
    n = len(levels) - 1
    z: list[np.ndarray] = [np.empty(0)] * (n + 1)
    vz = np.zeros(n + 1)
    z[n], vz[n] = np.asarray(levels[n], dtype=float), variances[n]
    for lv in range(n - 1, -1, -1):
        child = z[lv + 1]
        children = child.reshape(-1, branching, *child.shape[1:]).sum(axis=1)
        vc = branching * vz[lv + 1]
        own = np.asarray(levels[lv], dtype=float)
        z[lv] = (own / variances[lv] + children / vc) / (1 / variances[lv] + 1 / vc)
        vz[lv] = 1 / (1 / variances[lv] + 1 / vc)
    x = z[0]
    for lv in range(1, n + 1):
        gap = x - z[lv].reshape(-1, branching, *z[lv].shape[1:]).sum(axis=1)
        x = z[lv] + np.repeat(gap / branching, branching, axis=0)
    return x


def monotone_cumulative(leaves: np.ndarray) -> np.ndarray:
    """Cumulative counts from (consistent, possibly negative) leaf counts, made non-decreasing
    by isotonic regression with the two ends pinned at 0 and at the total (a projection, so
    the estimate only moves closer to every monotone CDF with those ends)."""
    total = max(float(np.sum(leaves)), 1.0)
    c = np.concatenate([[0.0], np.cumsum(leaves)])
    weights = np.ones_like(c)
    c[-1], weights[0], weights[-1] = total, 1e12, 1e12
    iso = optimize.isotonic_regression(c, weights=weights, increasing=True).x
    iso = np.clip(iso, 0.0, total)
    iso[0], iso[-1] = 0.0, total
    return iso


def level_variances(pooled_variance: np.ndarray, first_level: int) -> np.ndarray:
    """Noise variance of the pooled counts of each level 0..L, from the noise variance of the
    released levels ``first_level``..L summed over sites; an exact level 0 (class totals released
    exactly) gets a negligible variance."""
    variances = np.asarray(pooled_variance, dtype=float)
    if first_level == 1:
        variances = np.concatenate([[variances.min() * 1e-12], variances])
    return variances


def consistent_cumulative(leaves: np.ndarray) -> np.ndarray:
    """Cumulative counts from consistent leaf counts, from 0 to their total, as they are: unbiased
    where the leaves are, but not monotone where a leaf's estimate is below 0."""
    return np.concatenate([[0.0], np.cumsum(np.asarray(leaves, dtype=float))])


def global_cdfs(levels: dict[str, list[np.ndarray]], variances: np.ndarray, branching: int,
                monotone: bool = False) -> dict[str, np.ndarray]:
    """Cumulative counts at the leaf edges of each class (``negatives``, ``positives``) from the
    pooled counts of every level: :func:`tree_least_squares`, then :func:`consistent_cumulative`
    (the histogram AUC's reference, which the sites derive) or, ``monotone=True``,
    :func:`monotone_cumulative` (CDFs for curves and quantiles). Without noise both are the exact
    cumulative counts."""
    cumulative = monotone_cumulative if monotone else consistent_cumulative
    return {cls: cumulative(tree_least_squares(levels[cls], variances, branching))
            for cls in ("negatives", "positives")}
