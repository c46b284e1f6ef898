"""The histogram AUC's non-sampling variance: the ties within the released cells
(:func:`dsfed_client.analyses.curves.tie_variance`) and the noise variance's own estimation (its Satterthwaite
degrees of freedom, ``ControlVariates.df``), each against an independent Monte Carlo computed here.

* noise off, cells of fixed class counts, the records' order inside each cell drawn at random (exchangeable):
  the mean square of the tied AUC's error against the exact Mann-Whitney AUC (both counted here with numpy)
  against the reported tie variance; the mean error against zero;
* noise on, one fixed binormal data set (n = 500, 64 leaves, cells merging four leaves and one cut inside a
  leaf), 1,000 noise draws as the pooled release draws them: the reported tie variance's mean against the
  textbook sum at the records' exact cell counts (counted here with ``searchsorted``): the noise's part taken off
  leaves it unbiased;
* noise on, the same data set, 600 draws: the reported noise variance's spread over the draws against the one its
  degrees of freedom say (:math:`2 \\hat v^2 / \\nu`);
* through the sites (GBSG2, five sites, ``site*.toml``, pooled): the reported tie variance against the textbook sum
  at the cells of the reference the sites derived (the pooled records' exact counts), and the interval built on
  the sampling variance plus the non-sampling one.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dsfed_client.analyses.curves import ScoreHistograms, control_variates, ds_hist_auc, tie_variance
from dsfed_core.histograms import global_cdfs, level_variances
from dsfed_server.synthetic import binormal

ROOT = Path(__file__).resolve().parents[1]


def mann_whitney(y: np.ndarray, p: np.ndarray) -> float:
    """The empirical AUC, ties one half, by counting pairs."""
    pos, neg = p[y == 1], p[y == 0]
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
                 / (pos.size * neg.size))


def textbook(n0: np.ndarray, n1: np.ndarray) -> float:
    """The variance of the ties' error when the records inside each cell are exchangeable: the Mann-Whitney null
    variance :math:`(n_0 + n_1 + 1) / (12 n_0 n_1)` of each cell's AUC, weighted by its share of the pairs squared
    (Mann & Whitney 1947), summed over the cells."""
    big0, big1 = n0.sum(), n1.sum()
    return float(np.sum(n0 * n1 * (n0 + n1 + 1)) / (12 * big0**2 * big1**2))


def test_tie_variance_is_the_mean_square_of_the_ties_error():
    """16 cells on [0, 1] (the leaves of a 4-level tree whose counts carry a negligible noise, so the counts are
    the records') with fixed counts of each class; in every replicate the records of a cell get uniform scores
    inside it and the cell's labels in a random order. The tied AUC (a record's score replaced by its cell) is
    off the Mann-Whitney AUC by D; over 4,000 replicates E[D] is 0 and E[D^2] the reported tie variance (within
    8 %, about 3.5 SEs of a mean square of a near-normal D). Noise off the reported one is 0: the sites' leaves
    separate the distinct scores there."""
    rng = np.random.default_rng(38)
    edges = np.linspace(0.0, 1.0, 17)
    n0 = rng.integers(0, 15, edges.size - 1).astype(float)
    n1 = rng.integers(0, 10, edges.size - 1).astype(float)
    c0, c1 = np.concatenate([[0.0], np.cumsum(n0)]), np.concatenate([[0.0], np.cumsum(n1)])
    hist = ScoreHistograms(edges, c0, c1, float(n0.sum()), float(n1.sum()), False, np.full(5, 1e-12), {})
    reported = tie_variance(hist, edges[1:-1])
    assert reported == pytest.approx(textbook(n0, n1), rel=1e-9)
    assert tie_variance(ScoreHistograms(edges, c0, c1, float(n0.sum()), float(n1.sum()), True, np.empty(0), {}),
                        edges[1:-1]) == 0.0
    cell = np.repeat(np.arange(edges.size - 1), (n0 + n1).astype(int))
    labels = [np.r_[np.zeros(int(a)), np.ones(int(b))] for a, b in zip(n0, n1)]
    errors = []
    for _ in range(4000):
        y = np.concatenate([rng.permutation(v) for v in labels])
        p = edges[cell] + rng.uniform(0.0, 1.0, cell.size) * (edges[1] - edges[0])
        errors.append(mann_whitney(y, cell.astype(float)) - mann_whitney(y, p))
    errors = np.asarray(errors)
    assert abs(errors.mean()) < 4 * errors.std(ddof=1) / np.sqrt(errors.size)
    assert np.mean(errors**2) == pytest.approx(reported, rel=0.08)


def _noisy_draws(rng: np.random.Generator):
    """One fixed binormal data set (n = 500, 64 leaves) and a generator of the client's histograms from noisy
    level counts drawn as the pooled release draws them (as in test_hist_auc_weights.py)."""
    from test_hist_auc_weights import LEVELS, SIGMA, SITES, level_counts

    data = binormal(500, rng, 0.75, 0.3)
    y, p = data["y"].to_numpy(), data["score"].to_numpy()
    exact = level_counts(p, y)
    pooled = np.full(LEVELS, SITES * SIGMA**2 * LEVELS)
    variances = level_variances(pooled, 1)
    edges = np.linspace(0.0, 1.0, 2**LEVELS + 1)

    def draw() -> ScoreHistograms:
        noisy = {cls: [levels[0]] + [v + rng.normal(0.0, np.sqrt(pooled[0]), v.size) for v in levels[1:]]
                 for cls, levels in exact.items()}
        ref, cdf = global_cdfs(noisy, variances, 2), global_cdfs(noisy, variances, 2, monotone=True)
        return ScoreHistograms(edges, cdf["negatives"], cdf["positives"], float(cdf["negatives"][-1]),
                               float(cdf["positives"][-1]), False, variances, {},
                               consistent_negatives=ref["negatives"], consistent_positives=ref["positives"])

    return y, p, draw


def test_tie_variance_under_noise_is_unbiased():
    """Noise on: cells of four leaves each (a pooled release whose gate merged leaves) and one cut inside a leaf
    (a cut released before). The cells' counts come from the noisy leaf estimates; over 1,000 draws the reported
    tie variance's mean is the textbook sum at the records' exact cell counts within 4 SEs (without taking the
    noise's part off, it would be several times larger: the noise sd of a leaf is near 12 records)."""
    rng = np.random.default_rng(385)
    y, p, draw = _noisy_draws(rng)
    cuts = np.unique(np.r_[np.linspace(0.0, 1.0, 17)[1:-1], 0.37])
    n0 = np.bincount(np.searchsorted(cuts, p[y == 0], "right"), minlength=cuts.size + 1).astype(float)
    n1 = np.bincount(np.searchsorted(cuts, p[y == 1], "right"), minlength=cuts.size + 1).astype(float)
    target = textbook(n0, n1)
    reported = np.array([tie_variance(draw(), cuts) for _ in range(1000)])
    assert abs(reported.mean() - target) < 4 * reported.std(ddof=1) / np.sqrt(reported.size), (reported.mean(),
                                                                                                   target)
    assert reported.std(ddof=1) < 2 * target


def test_noise_variance_degrees_of_freedom_match_its_spread():
    """Noise on, 600 draws on the fixed data set: the reported noise variance of the control variates
    :math:`\\hat v` varies from draw to draw (its gradients rest on the noisy counts); its variance over the draws
    against the mean of :math:`2 \\hat v^2 / \\nu` (Satterthwaite), within 35 % (the SE of a variance over 600
    draws of a skewed quantity is about 10 %); and the t interval on the error over the draws (the estimator's
    own error, against its value at the exact counts) covers at least as often as the normal one."""
    rng = np.random.default_rng(385)
    y, p, draw = _noisy_draws(rng)
    v, df = [], []
    for _ in range(600):
        cv = control_variates(draw())
        v.append(cv.weight**2 * cv.variance10 + (1 - cv.weight) ** 2 * cv.variance01)
        df.append(cv.df)
    v, df = np.asarray(v), np.asarray(df)
    assert np.all(np.isfinite(df)) and np.all(df > 2)
    predicted = np.mean(2 * v**2 / df)
    assert predicted / v.var(ddof=1) == pytest.approx(1.0, abs=0.35), (predicted, v.var(ddof=1))
    assert np.all(stats.t.ppf(0.975, df) > stats.norm.ppf(0.975))


def test_through_the_sites_the_tie_variance_is_the_released_cells(monkeypatch):
    """GBSG2 at its five sites (``site*.toml``, noise on, pooled, 64 leaves): the sites keep some leaf edges of
    the reference they derive, so its cells hold several leaves. The reported tie variance against the textbook
    sum at those cells with the pooled records' exact counts (the reference's edges noted as the sites derive
    it; the noise sd of a cell count here is about 1 record of 10 to 25), within 25 %. The sites' secrets are
    fixed, so that the margins their gates draw are the same at every run: with some margins a site's share of a
    leaf, which the others' releases expose, fails its audit and the leaf merges (about 1 run of 5), and the
    estimator is then the histograms' alone, which this test is not about."""
    import dsfed_server.functions.curves as site_curves
    from test_derived_column_attacks import fixed_secrets
    from dsfed_client import LoginBuilder
    from dsfed_server.inprocess import in_process
    from dsfed_server.provision import provision
    from dsfed_server.service import SiteService

    sites = ("site1", "site2", "site3", "site4", "site5")
    derived, noted = site_curves.derived_reference, []

    def noting(release, kept, added=()):  # noqa: ANN001, ANN202
        noted.append(derived(release, kept, added))
        return noted[-1]

    monkeypatch.setattr(site_curves, "derived_reference", noting)
    pooled = pd.concat([pd.read_csv(ROOT / "opal_fixtures" / s / "GBSG2" / "validation.csv") for s in sites])
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    with tempfile.TemporaryDirectory() as tmp:
        with fixed_secrets("hist auc cell ties"):  # the gates' margins the same at every run (the docstring)
            prov = provision(Path(tmp), {s: (ROOT / "opal_fixtures" / s, ROOT / "disclosure_rules" / f"{s}.toml")
                                         for s in sites})
        builder = LoginBuilder()
        for site in prov.values():
            cred = site.credentials["analyst"]
            builder.append_inprocess(in_process(SiteService.from_config_file(site.config)), user=cred.user,
                                     password=cred.password)
        with builder.login() as session, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session.assign_table("D", "GBSG2.validation")
            result = ds_hist_auc(session, "D$y", "D$score", secure=True, levels=6)
    assert result.estimator == "control variates" and result.merged_pairs == 0
    reference = noted[-1]
    inner = reference["edge"].to_numpy()[1:-1]
    closed = reference["closed"].to_numpy(dtype=bool)[1:-1]
    assert inner.size < 63  # leaves merged: cells of several leaves

    def cell(x: np.ndarray) -> np.ndarray:  # a record's cell: cuts '< edge', or '<= edge' where closed
        return np.sum(np.where(closed[None, :], x[:, None] > inner[None, :], x[:, None] >= inner[None, :]), axis=1)

    n0 = np.bincount(cell(p[y == 0]), minlength=inner.size + 1).astype(float)
    n1 = np.bincount(cell(p[y == 1]), minlength=inner.size + 1).astype(float)
    assert result.tie_variance == pytest.approx(textbook(n0, n1), rel=0.25)
