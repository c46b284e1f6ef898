"""The ROC-GLM where the AUC comes from the noisy histograms alone (the sites merged the reference's cells): fitted on
the histograms' leaves, a post-processing of what was released, against R's ``glm`` on the same rows built in R."""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_client.analyses.curves import ScoreHistograms, histograms_roc_glm
from dsfed_client.analyses.glm import probit_fit
from rref import r_eval

R_PROBIT = ("f <- suppressWarnings(glm(u ~ x, family = binomial(link = 'probit'), weights = w)); "
            "c(coef(f), sqrt(diag(vcov(f))), deviance(f), f$iter)")


def test_the_local_probit_fit_is_r_glm():
    """Weighted rows with fractional and zero weights (noisy counts clipped at 0): coefficients, standard errors,
    deviance and the number of Fisher-scoring iterations are R's."""
    rng = np.random.default_rng(11)
    x = np.repeat(rng.normal(size=40), 2)
    u = np.tile([0, 1], 40)
    w = np.clip(rng.normal(6.0, 4.0, 80), 0.0, None)
    w[[3, 17]] = 0.0
    fit = probit_fit(x, u, w)
    ref = r_eval(R_PROBIT, x=x, u=u, w=w)
    np.testing.assert_allclose(fit.params, ref[:2], rtol=1e-8)
    np.testing.assert_allclose(fit.bse, ref[2:4], rtol=1e-6)
    assert fit.deviance == pytest.approx(ref[4], rel=1e-10) and fit.iterations == int(ref[5])
    assert fit.nobs == int((w > 0).sum())


R_LEAVES = """
l0 <- pmax(diff(c0), 0); l1 <- pmax(diff(c1), 0)
f0 <- (cumsum(l0) - l0 / 2) / sum(l0); f1 <- (cumsum(l1) - l1 / 2) / sum(l1)
t <- (1:nT) / (nT + 1)
pv <- if (positives) 1 - f0 else 1 - f1; wt <- if (positives) l1 else l0
ones <- vapply(t, function(tj) sum(wt[pv <= tj]), numeric(1))
d <- data.frame(u = rep(c(0, 1), nT), x = rep(qnorm(t), each = 2), w = as.vector(rbind(sum(wt) - ones, ones)))
f <- coef(suppressWarnings(glm(u ~ x, family = binomial(link = 'probit'), data = d, weights = w)))
ab <- if (positives) f else c(-f[1] / f[2], 1 / f[2])
c(ab, pnorm(ab[1] / sqrt(1 + ab[2]^2)))
"""


@pytest.mark.parametrize("placed", ["positives", "negatives"])
def test_the_roc_glm_on_the_leaves_is_r_glm_on_the_leaves_placement_values(placed: str):
    """Noisy cumulative counts over 32 leaves (one leaf's count below 0, read as 0): each leaf's records at the
    leaf's placement value, half its own leaf counted, weighted by the leaf's count; R builds the table from the
    counts and fits it (the negatives' fit mapped back to the ROC curve's a, b)."""
    rng = np.random.default_rng(3)
    edges = np.linspace(0.0, 1.0, 33)
    mids = (edges[:-1] + edges[1:]) / 2
    neg = rng.poisson(40 * np.exp(-((mids - 0.35) ** 2) / 0.04)) + rng.normal(0, 1.5, 32)
    pos = rng.poisson(30 * np.exp(-((mids - 0.6) ** 2) / 0.05)) + rng.normal(0, 1.5, 32)
    neg[5] = -2.0
    c0, c1 = np.concatenate([[0.0], np.cumsum(neg)]), np.concatenate([[0.0], np.cumsum(pos)])
    hist = ScoreHistograms(edges, c0, c1, c0[-1], c1[-1], False, np.empty(0), {})
    fit = histograms_roc_glm(hist, 99, 0.05, 0.001, 0.0002, placed)
    ref = r_eval(R_LEAVES, c0=c0, c1=c1, nT=np.array([99.0]), positives=np.array([float(placed == "positives")]))
    assert (fit.a, fit.b, fit.auc) == pytest.approx(tuple(ref), rel=1e-7)
    assert fit.placed == placed and fit.merged_bound == 0.0 and "histograms' leaves" in fit.fitted_on
    assert fit.variance == 0.001 and fit.noise_variance == 0.0002
