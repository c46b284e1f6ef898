"""DP noise: the analytic Gaussian sigma meets Balle & Wang's condition; repeating a noisy
query gives identical numbers; a client cannot weaken the site's privacy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dsfed_client import FederatedCallError, Ref
from dsfed_core.wire import decode_f64
from dsfed_client.analyses.discrimination import ds_roc_glm
from dsfed_server.disclosure.mechanisms import analytic_gaussian_sigma
from conftest import inprocess_builder
from sitekit import make_sites, rules_variant

GRID = list(itertools.product([0.1, 0.5, 1.0, 5.0, 10.0], [1e-5, 1e-4, 1e-3, 1e-2, 1e-1], [0.01, 0.1, 0.178, 0.4, 1.0]))


@pytest.mark.parametrize("epsilon,delta,sensitivity", GRID)
def test_analytic_gaussian_meets_balle_wang_condition(epsilon, delta, sensitivity):
    sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    # Theorem 8 of Balle & Wang (2018), evaluated independently with scipy.stats
    achieved = stats.norm.cdf(a) - math.exp(epsilon) * stats.norm.cdf(b)
    assert abs(achieved - delta) < 1e-9
    # and it is the smallest such sigma: 0.1 % less noise breaks the guarantee
    s = sigma * 0.999
    worse = stats.norm.cdf(sensitivity / (2 * s) - epsilon * s / sensitivity) - math.exp(epsilon) * stats.norm.cdf(
        -sensitivity / (2 * s) - epsilon * s / sensitivity)
    assert worse > delta


def test_classical_gaussian_needs_more_noise():
    # the classical bound sqrt(2 ln(1.25/delta)) * Delta / epsilon (epsilon < 1) is never below the analytic one
    for eps, delta in [(0.5, 1e-5), (0.9, 1e-3)]:
        classical = math.sqrt(2 * math.log(1.25 / delta)) / eps
        assert analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=1.0) < classical


@pytest.fixture
def noisy_site(tmp_path):
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 200)
    frame = pd.DataFrame({"y": y, "score": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.15, 200), 0, 1)})
    rules = rules_variant(tmp_path / "r.toml", epsilon="1.0", delta="1e-5", score_l2_sensitivity="0.1")
    provisioned, services = make_sites(tmp_path, {"a": frame}, rules=rules)
    return provisioned, services, frame


def test_repeating_a_noisy_query_returns_identical_numbers(noisy_site):
    provisioned, services, frame = noisy_site
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        first = session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["a"]
        again = session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["a"]
        session.assign_table("E", "P.t")  # the same data under another name
        renamed = session.aggregate("noisyScoresDS", Ref("E$y"), Ref("E$score"))["a"]
    assert first == again == renamed
    assert first["sigma"] == pytest.approx(analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=0.1))
    truth = np.sort(frame.loc[frame.y == 0, "score"].to_numpy())
    noise = decode_f64(first["negatives"]) - truth
    assert np.std(noise) == pytest.approx(first["sigma"], rel=0.3)  # noise really is there
    # a new session (another analyst day) gets the same noise too: it is seeded, not fresh
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        assert session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["a"] == first


@pytest.mark.parametrize("kwargs,rule", [
    ({"epsilon": 2.0}, "privacy.epsilon"),
    ({"delta": 1e-3}, "privacy.delta"),
    ({"sensitivity": 0.01}, "privacy.score_l2_sensitivity"),
])
def test_client_cannot_weaken_privacy(noisy_site, kwargs, rule):
    provisioned, services, _ = noisy_site
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), **kwargs)
        assert exc.value.failures["a"].rule == rule


def test_client_may_ask_for_more_privacy(noisy_site):
    provisioned, services, _ = noisy_site
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), epsilon=0.5, sensitivity=0.2)["a"]
    assert result["epsilon"] == 0.5 and result["sensitivity"] == 0.2
    assert result["sigma"] == pytest.approx(analytic_gaussian_sigma(epsilon=0.5, delta=1e-5, sensitivity=0.2))


def test_noisy_roc_glm_on_gbsg2_reports_its_noise(gbsg2_provisioned, gbsg2_services, gbsg2_pooled):
    """The paper's setting on the GBSG2 sites (their rules: epsilon 5, delta 0.01, Delta 0.178):
    the analysis runs, names each site's sigma, and stays near the pooled empirical AUC."""
    with inprocess_builder(gbsg2_provisioned, gbsg2_services).login() as session:
        session.assign_table("D", "GBSG2.validation")
        fit = ds_roc_glm(session, "D$y", "D$score")
    pos = gbsg2_pooled.loc[gbsg2_pooled.y == 1, "score"].to_numpy()
    neg = gbsg2_pooled.loc[gbsg2_pooled.y == 0, "score"].to_numpy()
    exact = (np.sum(pos[:, None] > neg[None, :]) + 0.5 * np.sum(pos[:, None] == neg[None, :])) / (pos.size * neg.size)
    assert not fit.reference.noise_off and all(s > 0 for s in fit.reference.sigma.values())
    assert all(m["epsilon"] == 5.0 and m["delta"] == 0.01 for m in fit.reference.mechanism.values())
    # the noise-induced error is of the order of the AUC's own standard error at n = 250
    assert abs(fit.empirical.auc - exact) < 3 * np.sqrt(fit.empirical.variance)
    assert fit.empirical.approximation_error > 0
    assert 0 < fit.ci[0] < fit.auc < fit.ci[1] < 1


def test_sites_below_q_are_refused_with_the_rule(tmp_path):
    """A site with q negatives is used; a site with q - 1 is refused, naming site, function and rule."""
    rng = np.random.default_rng(9)

    def frame(n_neg: int) -> pd.DataFrame:
        y = np.array([0] * n_neg + [1] * 30)
        return pd.DataFrame({"y": y, "score": np.clip(0.2 + 0.5 * y + rng.normal(0, 0.1, y.size), 0, 1)})

    rules = rules_variant(tmp_path / "r.toml", mechanism='"none"',
                          no_noise_acknowledged='"test: site sizes at the q boundary"')
    provisioned, services = make_sites(tmp_path, {"at_q": frame(5), "below_q": frame(4)}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            ds_roc_glm(session, "D$y", "D$score")
    assert set(exc.value.failures) == {"below_q"}
    err = exc.value.failures["below_q"]
    assert (err.function, err.rule) == ("noisyScoresDS", "disclosure.q_threshold")
    assert "negatives" in err.message
