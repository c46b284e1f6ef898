"""Distributed validation (noise off) against R on several data sets: pROC, rms::val.prob,
an R Hosmer-Lemeshow following hoslem.test, R glm probit on the pooled ROC-GLM data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.calibration import (
    ds_brier, ds_calibration_curve, ds_ece_mce, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.discrimination import ds_auc, ds_roc_glm
from dsfed_client.quantile_search import quantile_groups
from conftest import GBSG2_SITES, FIXTURES, inprocess_builder
from rref import R_BINNED, R_CALCURVE, R_HOSLEM, R_PROC, R_ROCGLM, R_VALPROB, r_reference
from sitekit import ROOT, make_sites

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
RTOL = 1e-8


def _synthetic(kind: str) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng({"ties": 1, "rare": 2, "smooth": 3}[kind])
    frames = {}
    for k in range(5):
        n = 400 if kind != "rare" else 2500
        if kind == "rare":  # 1 % prevalence
            y = (rng.uniform(size=n) < 0.01).astype(int)
            y[:5] = 1  # every site keeps at least q positives
            p = np.clip(rng.beta(1, 30, n) + 0.05 * y, 0.0005, 0.9995)
        else:
            y = rng.integers(0, 2, n)
            p = np.clip(0.5 + (y - 0.5) * 0.4 + rng.normal(0, 0.2, n), 0.001, 0.999)
            if kind == "ties":
                p = np.round(p, 2)  # many ties
        frames[f"site{k + 1}"] = pd.DataFrame({"y": y, "score": p})
    return frames


@pytest.fixture(scope="module", params=["gbsg2", "ties", "rare", "smooth"])
def dataset(request, tmp_path_factory):
    if request.param == "gbsg2":
        frames = {s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score"]] for s in GBSG2_SITES}
    else:
        frames = _synthetic(request.param)
    provisioned, services = make_sites(tmp_path_factory.mktemp(request.param), frames, rules=NO_NOISE)
    session = inprocess_builder(provisioned, services).login()
    session.assign_table("D", "P.t")
    pooled = pd.concat(frames.values(), ignore_index=True)
    site = np.concatenate([np.full(len(f), k) for k, f in enumerate(frames.values())])
    yield request.param, session, pooled["y"].to_numpy(), pooled["score"].to_numpy(), site
    session.close()


def test_empirical_auc_and_delong_equal_pROC(dataset):
    _, session, y, p, _ = dataset
    auc, lower, upper, var = r_reference("proc_ref", R_PROC, y=y, p=p)
    result = ds_auc(session, "D$y", "D$score")
    assert result.auc == pytest.approx(auc, rel=RTOL)
    assert result.variance == pytest.approx(var, rel=RTOL)
    np.testing.assert_allclose(result.ci_delong, [lower, upper], rtol=RTOL)
    assert result.noise_off and result.approximation_error == 0.0


def test_roc_glm_equals_R_probit_on_pooled_intermediate_data(dataset):
    _, session, y, p, site = dataset
    a, b, auc, auc_int = r_reference("rocglm_ref", R_ROCGLM, y=y, p=p, site=site, nT=np.array([99.0]))
    fit = ds_roc_glm(session, "D$y", "D$score", n_thresholds=99)
    np.testing.assert_allclose([fit.a, fit.b], [a, b], rtol=RTOL)
    assert fit.auc == pytest.approx(auc, rel=RTOL)
    assert fit.auc_integral == pytest.approx(auc_int, rel=1e-8)
    # Schalk et al. (2024) eq. (3) by hand from the pooled DeLong variance
    var = r_reference("proc_ref", R_PROC, y=y, p=p)[3]
    from scipy import special, stats
    half = stats.norm.ppf(0.975) * np.sqrt(var) / (auc * (1 - auc))
    np.testing.assert_allclose(fit.ci, special.expit(special.logit(auc) + np.array([-half, half])), rtol=1e-8)


def test_brier_spiegelhalter_intercept_slope_equal_val_prob(dataset):
    _, session, y, p, _ = dataset
    brier, z, intercept, slope, citl = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    b = ds_brier(session, "D$y", "D$score")
    assert b.brier == pytest.approx(brier, rel=RTOL)
    assert b.spiegelhalter_z == pytest.approx(z, rel=RTOL)
    cal = ds_logistic_calibration(session, "D$y", "D$score")
    assert cal.intercept == pytest.approx(intercept, rel=RTOL, abs=1e-10)
    assert cal.slope == pytest.approx(slope, rel=RTOL)
    assert cal.citl == pytest.approx(citl, rel=RTOL, abs=1e-12)


def _binned(y, p, edges, right: bool) -> np.ndarray:
    """R's per-cell count, outcome sum and prediction sum on ``edges`` (3 x cells)."""
    return r_reference("binned_ref", R_BINNED, y=y, p=p, breaks=np.asarray(edges, dtype=float),
                       right=np.array([1.0 if right else 0.0])).reshape(3, -1)


@pytest.mark.parametrize("secure", [True, False], ids=["pooled", "per-site"])
def test_calibration_curve_equals_R_on_the_released_bins(dataset, secure):
    """Pooled over the sites (secure aggregation, pooled thresholds) the sites release the requested
    bins unless a pooled bin holds fewer than q records; per site, each site merges its own small
    bins and the pooled curve uses the bins every site released. Either way every record is in
    exactly one released bin and the bins' sums are R's on those bins; nothing is left out."""
    name, session, y, p, _ = dataset
    curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=secure)
    n, sum_y, sum_p = _binned(y, p, curve.edges, right=False)
    np.testing.assert_array_equal(curve.n, n)
    assert curve.n.sum() == len(y) and curve.bins.pooled == secure
    filled = n > 0
    np.testing.assert_allclose(curve.mean_outcome[filled], sum_y[filled] / n[filled], rtol=1e-12)
    np.testing.assert_allclose(curve.mean_prediction[filled], sum_p[filled] / n[filled], rtol=1e-12)
    if not curve.bins.was_coarsened:  # as requested: Schalk et al.'s (2024) curve itself
        ref = r_reference("calcurve_ref", R_CALCURVE, y=y, p=p, nbins=np.array([10.0])).reshape(3, 10)
        np.testing.assert_array_equal(curve.n, ref[0])
        np.testing.assert_allclose(curve.mean_outcome[filled], ref[1][filled], rtol=1e-12)
    if secure and name in BIG_ENOUGH + ("gbsg2",):  # every pooled bin is 0 or >= q: nothing merged
        assert not curve.bins.was_coarsened


BIG_ENOUGH = ("ties", "smooth")  # every group holds at least q records at every site


@pytest.mark.parametrize("kind", ["C", "H"])
def test_pooled_hosmer_lemeshow_equals_R(dataset, kind):
    """Pooled (secure aggregation with pooled thresholds): C's groups are R's type-7 deciles, found by
    the sites on pooled counts, so C, its df and its group sizes are hoslem.test's on every data set;
    H's fixed bins are released unless a pooled bin is small (the rare-outcome set), and then the
    statistic is R's on the bins released."""
    name, session, y, p, _ = dataset
    hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind, secure=True)
    assert hl.pooled
    if hl.complete:
        ref = r_reference(f"hl_{kind.lower()}", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
        assert hl.statistic == pytest.approx(ref[0], rel=RTOL)
        assert hl.df == ref[1]
        assert hl.pvalue == pytest.approx(ref[2], rel=1e-7)
        np.testing.assert_array_equal(hl.table["n"].to_numpy(), ref[3:])
    else:
        assert kind == "H" and name == "rare"
        edges = np.concatenate([hl.table["lower"].to_numpy()[:1], hl.table["upper"].to_numpy()])
        ref = r_reference("hl_ref", R_HOSLEM, y=y, p=p, breaks=edges)
        assert hl.statistic == pytest.approx(ref[0], rel=RTOL) and hl.df == ref[1]
    if kind == "C":
        assert hl.complete


@pytest.mark.parametrize("kind", ["C", "H"])
def test_per_site_hosmer_lemeshow_says_what_it_did(dataset, kind):
    """Per site, each site's release gate merges a group holding fewer than q of its records with the
    next, and C's quantile search sees only counts the gate passes. Whatever the result, the groups
    hold every record, and the statistic is R's Hosmer-Lemeshow on the groups it reports; where it
    is not R's grouping, it says so."""
    name, session, y, p, _ = dataset
    hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind)
    assert not hl.pooled and hl.table["n"].sum() == len(y)
    edges = np.concatenate([hl.table["lower"].to_numpy()[:1], hl.table["upper"].to_numpy()])
    edges[0], edges[-1] = min(edges[0], p.min()), max(edges[-1], p.max())
    ref = r_reference("hl_ref", R_HOSLEM, y=y, p=p, breaks=edges)
    assert hl.statistic == pytest.approx(ref[0], rel=RTOL) and hl.df == ref[1]
    if hl.complete:
        expected = r_reference(f"hl_{kind.lower()}", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
        assert hl.statistic == pytest.approx(expected[0], rel=RTOL)
    else:
        assert hl.coarsened or hl.uncertain_records > 0
        assert "merged" in hl.note() or "COARSENED" in hl.note() or "uncertain" in hl.note()


def test_ece_mce_equal_R(dataset):
    _, session, y, p, _ = dataset
    ece, mce = r_reference("ece_ref", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    result = ds_ece_mce(session, "D$y", "D$score", secure=True)
    assert result.complete
    assert result.ece == pytest.approx(ece, rel=RTOL)
    assert result.mce == pytest.approx(mce, rel=RTOL)


def test_per_site_quantile_groups_are_R_or_say_how_far_off(dataset):
    """The per-site search sees only the counts the sites' release gate passes. Where it settles a
    break, the break is R's; where it does not, the result keeps the break, marks it uncertain and
    bounds the records that may sit in a neighbouring group -- and that bound holds."""
    name, session, y, p, _ = dataset
    groups = quantile_groups(session, "D$score", 10)
    breaks = np.unique(np.quantile(p, np.linspace(0, 1, 11)))  # R's type 7 (numpy's default)
    true_ranks = np.searchsorted(np.sort(p), breaks[1:-1], side="right")
    ours = np.searchsorted(np.sort(p), groups.breaks[1:-1], side="right")
    if groups.exact:
        np.testing.assert_array_equal(np.diff(np.concatenate([[0], groups.ranks])),
                                      r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))[3:])
    else:
        # every record on the wrong side of a break lies in one of the uncertain brackets
        misplaced = sum(min(abs(int(o) - int(t)) for t in true_ranks) for o in ours)
        assert 0 < groups.uncertain_records and misplaced <= groups.uncertain_records
        assert groups.uncertain_breaks
    assert groups.rounds <= 12



def test_the_quantile_search_asks_no_more_thresholds_than_a_site_counts_at():
    """100 groups (the most ``n_groups`` allows) needed 200 searches of 100 probes each in one
    countBelowDS call, over the 20000 thresholds a site counts at ('at most 20000 thresholds per
    call'). A round now spreads at most that many probes over the unsettled searches, each still
    probed inside its bracket."""
    from dsfed_core.quantiles import MAX_THRESHOLDS, Bracket, probes

    # 400 unsettled searches in disjoint brackets, as 100 groups of many records leave them
    brackets = [Bracket(j, j / 400, (j + 1) / 400, (j, j), (j + 1, j + 1)) for j in range(400)]
    asked = probes(brackets, first=False, lower=0.0, upper=1.0)
    assert len(asked) == MAX_THRESHOLDS  # 50 each, where 100 each made 40000
    for b in brackets:
        assert sum(b.a < t < b.b for t in asked) == MAX_THRESHOLDS // 400
    assert len(probes(brackets[:3], first=False, lower=0.0, upper=1.0)) == 300  # few searches keep 100 each
