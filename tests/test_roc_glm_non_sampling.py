"""The histogram ROC-GLM's non-sampling variance against an independent Monte Carlo: what ``ds_hist_auc`` reports
for the ROC-GLM (the noise variance of its class's placement mean, :func:`placement_noise_variances`, plus the
released cells' ties, :func:`tie_variance`) against the mean square of its error over draws, the target being the
pooled, noise-free ROC-GLM of the same class's exact placement values (ties one half, no cells).

The demo's data (GBSG2's 250 validation records over the five sites: 68 negatives, so the negatives' placement
values are the ones fitted), 64 leaves on [0, 1], cells of two leaves each and the calibration curve's cuts k/10
(as the sites' reference keeps some leaf edges and adds the cuts released before). Each draw: the labels permuted
inside every cell (the records' order inside a cell exchangeable: the model the ties' term assumes, and the cells'
class counts kept), the noisy counts of every level drawn as the pooled release draws them (Gaussian, variance 3.24
a count and level, the demo's five sites of ``site*.toml``; exact class totals), made consistent as the sites
derive their reference (:func:`dsfed_core.histograms.global_cdfs`). The placement values at the cells (ties one
half), the probit fit and the targets are computed here with numpy and scipy, not by the sites' or the client's
code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special

from dsfed_client.analyses.curves import ScoreHistograms, placement_noise_variances, tie_variance
from dsfed_core.histograms import global_cdfs, level_variances
from test_hist_auc_weights import LEVELS, level_counts

ROOT = Path(__file__).resolve().parents[1]
VARIANCE, THRESHOLDS = 3.24, 99


def probit_auc(pv: np.ndarray) -> float:
    """The ROC-GLM's AUC from the negatives' placement values :math:`V_{01}` (their distribution is the inverse
    ROC curve, Pepe & Cai 2004): the probit fit of :math:`1(V_{01} \\le t_j)` on :math:`\\Phi^{-1}(t_j)` by maximum
    likelihood, line :math:`c + d x`, AUC :math:`\\Phi(-c / \\sqrt{1 + d^2})`."""
    t = np.arange(1, THRESHOLDS + 1) / (THRESHOLDS + 1)
    x, ones = special.ndtri(t), np.searchsorted(np.sort(pv), t, side="right").astype(float)

    def loss(beta: np.ndarray) -> float:
        eta = beta[0] + beta[1] * x
        return -float(np.sum(ones * special.log_ndtr(eta) + (pv.size - ones) * special.log_ndtr(-eta)))

    c, d = optimize.minimize(loss, np.array([-0.5, 1.0]), method="BFGS", options={"gtol": 1e-9}).x
    return float(special.ndtr(-c / np.sqrt(1 + d * d)))


def test_roc_glm_non_sampling_variance_is_its_errors_mean_square():
    """300 draws: the mean reported variance within 0.7-1.4 times the errors' mean square (0.86 here; the SE of a
    mean square over 300 draws is about 10 %; without the ties' term 0.67), and the noise-only interval (the error
    within 1.96 reported sds) covers at least 0.90 of the draws (0.923 here; the SE of a share over 300 draws is
    about 0.015)."""
    rng = np.random.default_rng(29)
    data = pd.concat([pd.read_csv(ROOT / "opal_fixtures" / f"site{i}" / "GBSG2" / "validation.csv")
                      for i in range(1, 6)])
    y0, p = data["y"].to_numpy(dtype=int), data["score"].to_numpy(dtype=float)
    edges = np.linspace(0.0, 1.0, 2**LEVELS + 1)
    cuts = np.unique(np.r_[edges[2:-1:2], np.arange(1, 10) / 10])
    cell = np.searchsorted(cuts, p, side="right")
    bounds = np.r_[0.0, cuts, 1.0]
    variances = level_variances(np.full(LEVELS, VARIANCE), 1)
    errors, reported = [], []
    for _ in range(300):
        y = y0.copy()
        for c in np.unique(cell):
            y[cell == c] = rng.permutation(y0[cell == c])
        exact = level_counts(p, y)
        noisy = {cls: [levels[0]] + [v + rng.normal(0.0, np.sqrt(VARIANCE), v.size) for v in levels[1:]]
                 for cls, levels in exact.items()}
        ref, cdf = global_cdfs(noisy, variances, 2), global_cdfs(noisy, variances, 2, monotone=True)
        hist = ScoreHistograms(edges, cdf["negatives"], cdf["positives"], float(cdf["negatives"][-1]),
                               float(cdf["positives"][-1]), False, variances, {},
                               consistent_negatives=ref["negatives"], consistent_positives=ref["positives"])
        v10, v01 = placement_noise_variances(hist)
        assert v10 > v01  # the negatives' reference is the noisier: ds_hist_auc fits the negatives' values
        at = np.interp(bounds, edges, ref["positives"]) / ref["positives"][-1]  # the positives' CDF at the bounds
        binned = probit_auc(1.0 - 0.5 * (at[:-1] + at[1:])[cell[y == 0]])
        pos = np.sort(p[y == 1])
        neg = p[y == 0]
        exact_pv = 1 - (np.searchsorted(pos, neg, "left") + np.searchsorted(pos, neg, "right")) / 2 / pos.size
        errors.append(binned - probit_auc(exact_pv))
        reported.append(v01 + tie_variance(hist, cuts))
    errors, reported = np.asarray(errors), np.asarray(reported)
    ratio = reported.mean() / np.mean(errors**2)
    covered = np.mean(np.abs(errors) <= 1.96 * np.sqrt(reported))
    assert 0.7 < ratio < 1.4, (ratio, errors.mean(), np.mean(errors**2), reported.mean())
    assert covered >= 0.90, covered
