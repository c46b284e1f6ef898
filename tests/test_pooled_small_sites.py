"""A pooled study checks the pooled cells only: a site holding fewer than q records of a class does
not refuse a pooled analysis whose pooled cells pass, and still refuses the same analysis per site.

References: pROC (``roc``, ``ci.auc(method = "delong")``), R's probit ``glm`` on the pooled ROC-GLM
table, ``rms::val.prob`` and ``hoslem.test``'s grouping, all through rpy2, on the pooled records.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.calibration import ds_brier, ds_hosmer_lemeshow, ds_logistic_calibration
from dsfed_client.analyses.curves import ds_hist_auc, ds_score_histograms, reference_symbol
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.calls import Call
from dsfed_server.synthetic import seed000_scores
from conftest import inprocess_builder
from rref import R_HIST_ROCGLM, R_HOSLEM, R_PROC, R_VALPROB, r_eval, r_reference
from sitekit import ROOT, make_sites

# exactness against R needs noise off: the shipped test profile (q = 5, pooled thresholds)
NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
SMALL_SITE = "site1"


def split_with_a_small_site(y: np.ndarray, p: np.ndarray, positives: int, negatives: int
                            ) -> dict[str, pd.DataFrame]:
    """Five sites: ``site1`` holds the first ``positives`` positives and ``negatives`` negatives, the
    other records of each class go round-robin to sites 2-5."""
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    parts = {SMALL_SITE: np.r_[pos[:positives], neg[:negatives]],
             **{f"site{k + 2}": np.r_[pos[positives + k::4], neg[negatives + k::4]] for k in range(4)}}
    return {site: pd.DataFrame({"y": y[i], "score": p[i]}) for site, i in parts.items()}


def grid_study() -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, pd.DataFrame]]:
    """100 records with scores at the centres of 8 equal leaves on [0, 1] (so the 3-level histogram
    separates all distinct scores), every leaf holding at least 11 records pooled; ``site1`` holds 3
    positives and 17 negatives."""
    c0, c1 = [10, 9, 8, 7, 6, 5, 4, 2], [1, 2, 3, 5, 6, 8, 10, 14]
    centres = (np.arange(8) + 0.5) / 8
    y = np.r_[np.zeros(sum(c0), int), np.ones(sum(c1), int)]
    p = np.r_[np.repeat(centres, c0), np.repeat(centres, c1)]
    order = np.random.default_rng(38).permutation(y.size)
    y, p = y[order], p[order]
    frames = split_with_a_small_site(y, p, positives=3, negatives=17)
    site = np.concatenate([np.full(len(f), k) for k, f in enumerate(frames.values())])
    y, p = (np.concatenate([f[c].to_numpy() for f in frames.values()]) for c in ("y", "score"))
    return y, p, site, frames


@pytest.fixture(scope="module")
def grid_sites(tmp_path_factory):
    y, p, site, frames = grid_study()
    assert (frames[SMALL_SITE]["y"] == 1).sum() == 3  # fewer than q = 5 positives at one site
    provisioned, services = make_sites(tmp_path_factory.mktemp("small-site"), frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        yield session, y, p, site


def test_pooled_histogram_auc_and_roc_glm_equal_R_with_a_small_site(grid_sites):
    """Pooled: the AUC, its DeLong interval and the ROC-GLM equal pROC and R's probit glm on the pooled
    records, although site1 holds 3 positives (before: refused by site1's count of its positives)."""
    session, y, p, site = grid_sites
    auc, lower, upper, var = r_reference("proc_ref", R_PROC, y=y, p=p)
    a, b, glm_auc = r_reference("hist_rocglm_ref", R_HIST_ROCGLM, y=y, p=p, site=site, nT=np.array([49.0]))
    result = ds_hist_auc(session, "D$y", "D$score", levels=3, n_thresholds=49, secure=True)
    assert result.noise_off
    assert result.auc == pytest.approx(auc, rel=1e-12)
    assert result.variance == pytest.approx(var, rel=1e-10)
    assert result.ci_delong == pytest.approx((lower, upper), rel=1e-10)
    assert (result.roc_glm.a, result.roc_glm.b) == pytest.approx((a, b), rel=1e-8)
    assert result.roc_glm.auc == pytest.approx(glm_auc, rel=1e-8)


def test_pooled_logistic_calibration_equals_R_with_a_small_site(grid_sites):
    """Pooled: calibration intercept and slope equal R's ``glm(y ~ qlogis(p), binomial)`` on the pooled
    records (``rms::val.prob``'s Intercept and Slope, to its own convergence tolerance)."""
    session, y, p, _ = grid_sites
    intercept, slope = r_eval("coef(glm(y ~ qlogis(p), family = binomial))", y=y, p=p)
    _, _, lrm_intercept, lrm_slope, _ = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    fit = ds_logistic_calibration(session, "D$y", "D$score", secure=True)
    assert (fit.intercept, fit.slope) == pytest.approx((intercept, slope), rel=1e-8)
    assert (fit.intercept, fit.slope) == pytest.approx((lrm_intercept, lrm_slope), rel=1e-6)


def test_per_site_releases_keep_their_own_counts(grid_sites):
    """Per site, the same analyses are refused by site1 alone, naming rule A1 and the class it lacks:
    the ROC-GLM fitted per site on the table the sites built from the pooled reference (the table
    carries the counts of the records behind it), the logistic calibration, the Brier sums."""
    session, *_ = grid_sites
    hist = ds_score_histograms(session, "D$y", "D$score", levels=3, secure=True, totals="exact")
    with reference_symbol(session, hist) as reference:
        table = session.assign("R", Call("histRocGlmDataDS", Ref("D$y"), Ref("D$score"), reference, 49))
        calls = [lambda: ds_glm(session, "u ~ x", table, family="binomial", link="probit", weights="w",
                                secure=False, null_model=False),
                 lambda: ds_logistic_calibration(session, "D$y", "D$score", secure=False),
                 lambda: ds_brier(session, "D$y", "D$score", secure=False)]
        for call in calls:
            with pytest.raises(FederatedCallError) as exc:
                call()
            assert set(exc.value.failures) == {SMALL_SITE}
            refusal = exc.value.failures[SMALL_SITE]
            assert refusal.rule == "disclosure.q_threshold"
            assert "positives (truth = 1)" in refusal.message or "outcome y: level 1" in refusal.message
        # pooled, the same table is fitted: its counts are checked summed over the sites
        fit = ds_glm(session, "u ~ x", table, family="binomial", link="probit", weights="w", secure=True,
                     null_model=False)
    assert np.all(np.isfinite(fit.params))


def test_seed000_design_at_100_records_is_released_pooled_under_the_default_rules(tmp_path):
    """Schalk et al.'s (2024) design (uniform scores, outcome a step at 0.5 with labels redrawn) at n = 100 over
    five sites, the shipped default rules (noise on), site1 holding 2 positives: every pooled release
    of the validation is given, the exact ones equal R (Brier, calibration intercept and slope,
    Hosmer-Lemeshow C over ``hoslem.test``'s deciles); the histogram AUC rests on all 100 records."""
    pooled = seed000_scores(100, np.random.default_rng(2038))
    frames = split_with_a_small_site(pooled["y"].to_numpy(), pooled["score"].to_numpy(), positives=2, negatives=18)
    y, p = (np.concatenate([f[c].to_numpy() for f in frames.values()]) for c in ("y", "score"))
    provisioned, services = make_sites(tmp_path, frames)  # disclosure_rules/default.toml
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        brier = ds_brier(session, "D$y", "D$score", secure=True)
        logistic = ds_logistic_calibration(session, "D$y", "D$score", secure=True)
        hl_c = ds_hosmer_lemeshow(session, "D$y", "D$score", kind="C", secure=True)
        auc = ds_hist_auc(session, "D$y", "D$score", secure=True, roc_glm=False)
        with pytest.raises(FederatedCallError) as exc:
            ds_brier(session, "D$y", "D$score", secure=False)
    assert set(exc.value.failures) == {SMALL_SITE}
    ref_brier, _, intercept, slope, _ = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert brier.brier == pytest.approx(ref_brier, rel=1e-10)
    assert (logistic.intercept, logistic.slope) == pytest.approx((intercept, slope), rel=1e-8)
    hl = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    assert hl_c.statistic == pytest.approx(hl[0], rel=1e-8) and hl_c.df == hl[1]
    assert (auc.n_positive, auc.n_negative) == (int(y.sum()), int(y.size - y.sum()))
    assert 0.0 <= auc.ci_logit[0] < auc.auc < auc.ci_logit[1] <= 1.0
