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
from dsfed_client.analyses.quantiles import quantile_groups
from conftest import GBSG2_SITES, FIXTURES, inprocess_builder
from rref import R_CALCURVE, R_HOSLEM, R_PROC, R_ROCGLM, R_VALPROB, r_reference
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
    # seed 000 eq. (3) by hand from the pooled DeLong variance
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


def test_calibration_curve_equals_pooled_when_nothing_suppressed(dataset):
    name, session, y, p, _ = dataset
    curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10)
    ref = r_reference("calcurve_ref", R_CALCURVE, y=y, p=p, nbins=np.array([10.0])).reshape(3, 10)
    if curve.suppressed_total == 0:
        np.testing.assert_array_equal(curve.n, ref[0])
        np.testing.assert_allclose(curve.mean_outcome, ref[1], rtol=1e-12)
        np.testing.assert_allclose(curve.mean_prediction, ref[2], rtol=1e-12)
    else:  # every record is either in a pooled point or counted as suppressed, never both
        assert curve.n.sum() + curve.suppressed_total == len(y)
        assert name not in BIG_ENOUGH
        assert all(curve.suppressed_share_max[i] > 0 for i, s in enumerate(curve.suppressed_sites) if s)


BIG_ENOUGH = ("ties", "smooth")  # every group holds at least q records at every site


@pytest.mark.parametrize("kind", ["C", "H"])
def test_hosmer_lemeshow_equals_R(dataset, kind):
    name, session, y, p, _ = dataset
    ref = r_reference(f"hl_{kind.lower()}", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind=kind)
    assert hl.complete or name not in BIG_ENOUGH
    if hl.complete:
        assert hl.statistic == pytest.approx(ref[0], rel=RTOL)
        assert hl.df == ref[1]
        assert hl.pvalue == pytest.approx(ref[2], rel=1e-7)
        np.testing.assert_array_equal(hl.table["n"].to_numpy(), ref[3:])
    else:  # small groups at some site: the result says what it left out instead of dropping it silently
        assert hl.suppressed_records > 0 or hl.uncertain_records > 0
        assert hl.table["n"].sum() + hl.suppressed_records == len(y)
        assert (hl.table["suppressed_sites"] != "").any() or not hl.exact_grouping


def test_ece_mce_equal_R(dataset):
    name, session, y, p, _ = dataset
    ece, mce = r_reference("ece_ref", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    result = ds_ece_mce(session, "D$y", "D$score")
    complete = result.exact_grouping and result.suppressed_records == 0
    assert complete or name not in BIG_ENOUGH
    if complete:
        assert result.ece == pytest.approx(ece, rel=RTOL)
        assert result.mce == pytest.approx(mce, rel=RTOL)


def test_quantile_groups_reproduce_hoslem_grouping(dataset):
    name, session, y, p, _ = dataset
    groups = quantile_groups(session, "D$score", 10)
    expected = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))[3:]  # R's group sizes
    got = np.diff(np.concatenate([[0], groups.ranks]))
    assert groups.exact or name not in BIG_ENOUGH + ("rare",)
    if groups.exact:
        np.testing.assert_array_equal(got, expected)
    else:
        assert groups.uncertain_records > 0
    assert groups.rounds <= 12
