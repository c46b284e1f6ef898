"""The histogram AUC's weights of its two placement means (inverse-variance weights of two estimates
with independent errors), checked by Monte Carlo against an independent computation of the
placement values: the noise variance :func:`noise_variance` reports for the weighted AUC is the
variance the noise adds, and it is smaller than the equal mean's where the classes differ in size.

No sites: the noisy counts of every level are drawn as the pooled release draws them (Gaussian,
variance of level l summed over five sites, the budget split equally over levels 1..L, exact class
totals), made consistent and monotone as the sites derive their reference
(:func:`dsfed_core.histograms.global_cdfs`); the placement values are those of a step inside each
leaf (ties one half), computed here with ``searchsorted`` on the scores, not by the sites' code.
"""

from __future__ import annotations

import numpy as np

from dsfed_client.analyses.curves import ScoreHistograms, noise_variance, placement_noise_variances, placement_weight
from dsfed_core.histograms import global_cdfs, level_variances
from dsfed_server.synthetic import binormal

LEVELS, SITES, SIGMA = 6, 5, 3.73  # sigma: analytic Gaussian at epsilon 1, delta 1e-5, sensitivity 1


def level_counts(p: np.ndarray, y: np.ndarray) -> dict[str, list[np.ndarray]]:
    leaf = np.clip(np.floor(p * 2**LEVELS), 0, 2**LEVELS - 1).astype(int)
    out = {}
    for cls, name in ((0, "negatives"), (1, "positives")):
        levels = [np.bincount(leaf[y == cls], minlength=2**LEVELS).astype(float)]
        for _ in range(LEVELS):
            levels.append(levels[-1].reshape(-1, 2).sum(axis=1))
        out[name] = levels[::-1]
    return out


def placement_means(p: np.ndarray, y: np.ndarray, edges: np.ndarray, cum0: np.ndarray, cum1: np.ndarray
                    ) -> tuple[float, float]:
    """Mean V10 of the positives and mean V01 of the negatives against step CDFs (each leaf's mid value)."""
    def step(cum: np.ndarray, x: np.ndarray) -> np.ndarray:
        j = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, edges.size - 2)
        return 0.5 * (cum[j] + cum[j + 1]) / cum[-1]
    return float(step(cum0, p[y == 1]).mean()), float(1.0 - step(cum1, p[y == 0]).mean())


def mann_whitney(p: np.ndarray, y: np.ndarray) -> float:
    """The empirical AUC, ties one half (pROC's)."""
    pos, neg = np.sort(p[y == 1]), np.sort(p[y == 0])
    below, upto = np.searchsorted(neg, pos, "left"), np.searchsorted(neg, pos, "right")
    return float(np.mean(below + 0.5 * (upto - below)) / neg.size)


def test_weighted_auc_noise_variance_is_the_noise_and_below_the_equal_means():
    rng = np.random.default_rng(38)
    data = binormal(500, rng, 0.75, 0.3)
    y, p = data["y"].to_numpy(), data["score"].to_numpy()
    pooled_auc = mann_whitney(p, y)
    exact = level_counts(p, y)
    pooled = np.full(LEVELS, SITES * SIGMA**2 * LEVELS)  # each level's share of the budget: 1 / L
    variances = level_variances(pooled, 1)
    edges = np.linspace(0.0, 1.0, 2**LEVELS + 1)
    draws: dict[str, list[float]] = {k: [] for k in ("weighted", "equal", "reported", "reported_equal", "weight",
                                                      "monotone")}
    for _ in range(1500):
        noisy = {cls: [levels[0]] + [v + rng.normal(0.0, np.sqrt(pooled[0]), v.size) for v in levels[1:]]
                 for cls, levels in exact.items()}
        ref = global_cdfs(noisy, variances, 2)  # the reference the sites derive
        cdf = global_cdfs(noisy, variances, 2, monotone=True)  # the analyst's CDFs (curves)
        hist = ScoreHistograms(edges, cdf["negatives"], cdf["positives"], float(cdf["negatives"][-1]),
                               float(cdf["positives"][-1]), False, variances, {})
        w = placement_weight(hist)
        v10, v01 = placement_noise_variances(hist)
        assert w == v01 / (v10 + v01)
        m10, m01 = placement_means(p, y, edges, ref["negatives"], ref["positives"])
        i10, i01 = placement_means(p, y, edges, cdf["negatives"], cdf["positives"])
        for key, value in (("weighted", w * m10 + (1 - w) * m01), ("equal", (m10 + m01) / 2),
                           ("reported", noise_variance(hist, w)), ("reported_equal", noise_variance(hist)),
                           ("weight", w), ("monotone", w * i10 + (1 - w) * i01)):
            draws[key].append(value)
    weighted, equal, monotone = (np.asarray(draws[k]) for k in ("weighted", "equal", "monotone"))
    # prevalence 0.3: the negatives' mean placement (V10, on the negatives' counts) carries less noise
    assert 0.7 < np.mean(draws["weight"]) < 0.95
    # the reported variances are the noise's (the AUC is linear in the consistent counts)
    assert 0.85 < weighted.var() / np.mean(draws["reported"]) < 1.15
    assert 0.85 < equal.var() / np.mean(draws["reported_equal"]) < 1.15
    # the weights halve the noise's variance here, and add no bias: both are unbiased but for the
    # tie rule's bias at 64 leaves (-0.0002 on binormal scores)
    assert weighted.var() < 0.6 * equal.var()
    for auc in (weighted, equal):
        assert abs(auc.mean() - pooled_auc) < 3 * auc.std() / np.sqrt(auc.size) + 0.0005
    # against the monotone CDFs (isotonic regression, non-linear) the same AUC is biased low
    assert monotone.mean() - pooled_auc < -0.002


def test_noise_off_weight_is_one_half():
    edges = np.linspace(0.0, 1.0, 5)
    cum = np.array([0.0, 2.0, 3.0, 7.0, 9.0])
    hist = ScoreHistograms(edges, cum, cum[::-1].max() - cum[::-1], 9.0, 9.0, True, np.empty(0), {})
    assert placement_noise_variances(hist) == (0.0, 0.0)
    assert placement_weight(hist) == 0.5 and noise_variance(hist, 0.5) == 0.0
