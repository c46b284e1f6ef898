"""Federated recalibration (Huang 2020, chapter 4): Platt scaling by the distributed GLM and smooth
isotonic regression by PAVA on disclosure-checked bin sums, applied at the sites by recalibrateDS.

References: R's ``glm`` (Platt coefficients, to 1e-8); scipy's ``isotonic_regression`` on the pooled
records (ties pooled), cross-checked against R's ``isoreg``; R's Hosmer-Lemeshow and ``rms::val.prob``
(rref.py) on the pooled recalibrated scores. Real sessions over five in-process sites with noise off.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special
from scipy.optimize import isotonic_regression

from dsfed_client import Call, FederatedCallError, Ref
from dsfed_server.pooled import suite as pooled_suite
from dsfed_client.analyses.recalibration import (
    RecalibrationMap, ds_apply_recalibration, ds_calibration_measures, ds_isotonic_fit, ds_platt_fit,
    equal_count_breaks, ds_recalibrate,
)
from conftest import audit_records, http_builder, inprocess_builder
from dsfed_server.launch import LocalSites
from rref import R_HOSLEM, R_VALPROB, r_eval, r_reference
from sitekit import ROOT, make_sites

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
SITES, N_SITE = 5, 600
# Distributed isotonic map (50 equal-count bins, none merged) vs the pooled, unbinned smooth
# isotonic map on these data: measured 0.050 (max over a grid on [0, 1]) and 0.011 (mean over the
# records); the difference is the binning (steps can break only at bin boundaries).
ISO_GRID_TOL, ISO_RECORD_TOL = 0.08, 0.02
# ... and the calibration measures after recalibration with either map (measured: 2.7e-4, 1.1e-3, 4.0e-3)
MEASURE_TOL = {"brier": 1e-3, "ece": 5e-3, "mce": 1e-2}


def _overconfident(seed: int, *, discrete: bool = False) -> dict[str, pd.DataFrame]:
    """Sites whose model is over-confident and shifted: p = expit(2.5 logit(r) + 0.7), r the true risk.

    ``discrete``: a points score with 30 values, each held by 20 records at every site.
    """
    rng = np.random.default_rng(seed)
    frames = {}
    for k in range(SITES):
        if discrete:
            points = rng.permutation(np.repeat(np.arange(30), N_SITE // 30))
            lr = -3.0 + 5.0 * points / 29
        else:
            lr = rng.normal(-0.5, 1.2, N_SITE)
        y = (rng.uniform(size=N_SITE) < special.expit(lr)).astype(int)
        frames[f"site{k + 1}"] = pd.DataFrame({"y": y, "score": special.expit(2.5 * lr + 0.7),
                                               "half": np.arange(N_SITE) % 2})
    return frames


def _session(tmp_path_factory, name: str, frames: dict[str, pd.DataFrame]):
    provisioned, services = make_sites(tmp_path_factory.mktemp(name), frames, rules=NO_NOISE)
    session = inprocess_builder(provisioned, services).login()
    session.assign_table("D", "P.t")
    pooled = pd.concat(frames.values(), ignore_index=True)
    return session, pooled["y"].to_numpy(), pooled["score"].to_numpy()


@pytest.fixture(scope="module")
def smooth(tmp_path_factory):
    session, y, p = _session(tmp_path_factory, "smooth", _overconfident(6))
    yield session, y, p
    session.close()


@pytest.fixture(scope="module")
def discrete(tmp_path_factory):
    session, y, p = _session(tmp_path_factory, "discrete", _overconfident(7, discrete=True))
    yield session, y, p
    session.close()


def pooled_isotonic(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled isotonic regression of y on p with ties pooled (scikit-learn's and R's treatment):
    the fitted value of every record, and one knot per step (mean score, step value)."""
    values, inverse, counts = np.unique(p, return_inverse=True, return_counts=True)
    ybar = np.bincount(inverse, weights=y) / counts
    fitted = isotonic_regression(ybar, weights=counts).x
    starts = np.flatnonzero(np.r_[True, np.diff(fitted) != 0])
    n_s = np.add.reduceat(counts.astype(float), starts)
    knots = np.add.reduceat(values * counts, starts) / n_s
    return fitted[inverse], knots, np.add.reduceat(ybar * counts, starts) / n_s


# --- Platt ----------------------------------------------------------------------------------


def test_platt_coefficients_equal_R_glm(smooth):
    session, y, p = smooth
    fit = ds_platt_fit(session, "D$y", "D$score")
    ref = r_eval("coef(glm(y ~ qlogis(p), family = binomial))", y=y, p=p)
    np.testing.assert_allclose(fit.map.coefficients, ref, rtol=1e-8)
    assert fit.calibration.fit.nobs == len(y)


def test_platt_recalibration_improves_calibration_and_is_applied_at_the_sites(smooth):
    session, y, p = smooth
    r = ds_recalibrate(session, "D$y", "D$score", method="logistic", into="p.platt")
    assert r.after.hl_c < r.before.hl_c / 10 and r.after.hl_h < r.before.hl_h / 10
    assert r.after.ece < r.before.ece / 2 and r.after.brier < r.before.brier
    # in sample, logistic recalibration makes the calibration intercept 0 and slope 1
    assert r.after.intercept == pytest.approx(0.0, abs=1e-6) and r.after.slope == pytest.approx(1.0, rel=1e-6)
    # the sites applied exactly the map the analyst holds: measures equal R's on the pooled recalibrated scores
    q = r.map(p)
    brier, z = r_reference("valprob_ref", R_VALPROB, y=y, p=q)[:2]
    assert r.after.brier == pytest.approx(brier, rel=1e-8)
    assert r.after.spiegelhalter_z == pytest.approx(z, rel=1e-6, abs=1e-8)
    hl_c = r_reference("hl_c", R_HOSLEM, y=y, p=q, g=np.array([10.0]))
    assert r.after.complete and r.after.hl_c == pytest.approx(hl_c[0], rel=1e-8)
    frame = r.to_frame()
    assert frame.loc["hl_c", "change"] < 0 and "Federated logistic recalibration" in r.summary()


# --- isotonic ------------------------------------------------------------------------------


@pytest.mark.parametrize("smooth_map", [True, False], ids=["pchip", "step"])
def test_isotonic_recalibration_improves_calibration(smooth, smooth_map):
    session, y, p = smooth
    r = ds_recalibrate(session, "D$y", "D$score", method="isotonic", smooth=smooth_map, into="p.iso")
    # a break at a site's plateau of the grid query where that site released another grid point
    # (no record between them) is not released a second time: its bin merges
    assert r.fit.merged_bins <= 2
    assert r.after.hl_c < r.before.hl_c / 10 and r.after.hl_h < r.before.hl_h / 10
    assert r.after.ece < r.before.ece / 2 and r.after.brier < r.before.brier
    # the sites applied the analyst's map: Brier and H-L C equal R's on the pooled recalibrated scores
    q = r.map(p)
    assert r.map is (r.fit.map if smooth_map else r.fit.step)
    assert r.after.brier == pytest.approx(np.mean((y - q) ** 2), rel=1e-10)
    hl_c = r_reference("hl_c", R_HOSLEM, y=y, p=q, g=np.array([10.0]))
    assert r.after.complete
    assert r.after.hl_c == pytest.approx(hl_c[0], rel=1e-8, abs=1e-9)  # the step map: 0 (in-sample, exact)


def test_isotonic_fit_equals_pooled_pava_on_the_same_bins(smooth):
    """Distributed == pooled given the bins: PAVA on the pooled records' bin means (computed here from
    the raw records, R's cut(include.lowest = TRUE)) gives the same knots to rounding."""
    session, y, p = smooth
    fit = ds_isotonic_fit(session, "D$y", "D$score", n_bins=50)
    assert fit.merged_bins <= 2 and fit.n_total == len(y)  # see test_isotonic_recalibration_improves_calibration
    breaks = np.r_[fit.bins["lower"].to_numpy(), 1.0]
    idx = np.clip(np.searchsorted(breaks, p, side="left") - 1, 0, len(breaks) - 2)
    n = np.bincount(idx, minlength=len(breaks) - 1).astype(float)
    used = n > 0
    sp, sy = np.bincount(idx, weights=p)[used], np.bincount(idx, weights=y)[used]
    fitted = isotonic_regression(sy / n[used], weights=n[used]).x
    starts = np.flatnonzero(np.r_[True, np.diff(fitted) != 0])
    n_s = np.add.reduceat(n[used], starts)
    np.testing.assert_allclose(fit.map.knots, np.add.reduceat(sp, starts) / n_s, rtol=1e-12)
    np.testing.assert_allclose(fit.map.values, np.add.reduceat(sy, starts) / n_s, rtol=1e-12, atol=1e-15)
    assert fit.steps["n"].sum() == len(y)


def test_isotonic_fit_close_to_pooled_unbinned_fit(smooth):
    """Against the pooled isotonic regression of every record (scipy; itself checked against R's
    isoreg): the smooth maps differ by the binning only, within the stated tolerances."""
    session, y, p = smooth
    fitted, knots, values = pooled_isotonic(y, p)
    order = np.argsort(p)
    yf = r_eval("isoreg(p, y)$yf", y=y, p=p)  # R's fitted values in the order of sorted p (no ties here)
    np.testing.assert_allclose(fitted[order], yf, atol=1e-12)
    pooled_map = RecalibrationMap("pchip", knots=knots, values=values)
    fit = ds_isotonic_fit(session, "D$y", "D$score", n_bins=50)
    assert fit.map.max_difference(pooled_map) < ISO_GRID_TOL
    assert np.mean(np.abs(fit.map(p) - pooled_map(p))) < ISO_RECORD_TOL
    # binning is not worse at recovering the true recalibration map expit((logit p - 0.7) / 2.5)
    truth = special.expit((special.logit(p) - 0.7) / 2.5)
    assert np.mean(np.abs(fit.map(p) - truth)) < np.mean(np.abs(pooled_map(p) - truth)) * 1.25
    # calibration after recalibration: distributed map at the sites vs the pooled map on pooled records
    after = ds_calibration_measures(session, "D$y", ds_apply_recalibration(session, "D$score", fit, "p.iso50"))
    ref = pooled_suite(y, pooled_map(p))
    for measure, tol in MEASURE_TOL.items():
        assert abs(getattr(after, measure) - ref[measure]) < tol, measure


def test_isotonic_exact_with_one_bin_per_distinct_score(discrete):
    """With bins split between the distinct scores and none merged, the binned PAVA is the pooled
    isotonic regression: same knots, same step values, same smooth map."""
    session, y, p = discrete
    values = np.unique(p)
    breaks = np.r_[0.0, (values[:-1] + values[1:]) / 2, 1.0]
    fit = ds_isotonic_fit(session, "D$y", "D$score", breaks=breaks)
    assert fit.merged_bins == 0
    fitted, knots, step_values = pooled_isotonic(y, p)
    np.testing.assert_allclose(fit.map.knots, knots, rtol=1e-13)
    np.testing.assert_allclose(fit.map.values, step_values, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(fit.step(p), fitted, rtol=1e-13, atol=1e-15)
    assert fit.map.max_difference(RecalibrationMap("pchip", knots=knots, values=step_values)) < 1e-12
    assert len(fit.bins) == len(values) == 30 and (fit.bins["n"] == SITES * N_SITE // 30).all()


def test_isotonic_merged_bins_are_reported(smooth):
    """Many small bins: each site's release gate merges those holding fewer than q of its records
    with the next; the fit uses the bins every site released, keeps every record and says how many
    requested bins were merged; the bins' sums are the pooled sums on those bins."""
    session, y, p = smooth
    fit = ds_isotonic_fit(session, "D$y", "D$score", n_bins=200)
    assert fit.merged_bins > 0 and len(fit.bins) + fit.merged_bins == len(equal_count_breaks(
        session, "D$score", 200)) - 1
    assert fit.bins["n"].sum() == len(y) == fit.n_total
    assert "merged by the sites' release gate" in fit.summary() and fit.to_dict()["merged_bins"] == fit.merged_bins
    edges = np.concatenate([fit.bins["lower"].to_numpy()[:1], fit.bins["upper"].to_numpy()])
    idx = np.clip(np.searchsorted(edges, p, side="left") - 1, 0, edges.size - 2)  # cut(include.lowest = TRUE)
    np.testing.assert_array_equal(fit.bins["n"].to_numpy(), np.bincount(idx, minlength=edges.size - 1))
    np.testing.assert_allclose(fit.bins["sum_y"].to_numpy(), np.bincount(idx, weights=y, minlength=edges.size - 1))
    assert np.all(np.diff(fit.map.knots) > 0) and np.all(np.diff(fit.map.values) >= 0)


@pytest.mark.parametrize("method", ["logistic", "isotonic"])
def test_recalibration_fitted_on_one_half_improves_the_other(smooth, method):
    """Out of sample: fit on the records with half == 0, apply at the sites to those with half == 1."""
    session, _, _ = smooth
    session.assign("train", Call("subsetRowsDS", Ref("D"), "half", "==", 0))
    session.assign("test", Call("subsetRowsDS", Ref("D"), "half", "==", 1))
    fit = (ds_platt_fit(session, "train$y", "train$score") if method == "logistic"
           else ds_isotonic_fit(session, "train$y", "train$score", n_bins=25))
    assert getattr(fit, "merged_bins", 0) == 0
    before = ds_calibration_measures(session, "test$y", "test$score")
    after = ds_calibration_measures(session, "test$y", ds_apply_recalibration(session, "test$score", fit, "p.test"))
    assert after.n == before.n == SITES * N_SITE // 2
    assert after.hl_c < before.hl_c / 10 and after.hl_h < before.hl_h / 10
    assert after.ece < before.ece / 2 and after.brier < before.brier


# --- the assign function refuses bad maps ---------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"knots": np.array([0.1, 0.3, 0.3]), "values": np.array([0.1, 0.2, 0.3])}, "strictly increasing"),
    ({"knots": np.array([0.1, 0.5, 0.4]), "values": np.array([0.1, 0.2, 0.3])}, "strictly increasing"),
    ({"knots": np.array([0.1, 0.5, 0.9]), "values": np.array([0.1, 0.2, 1.3])}, "values must be probabilities"),
    ({"knots": np.array([0.1, 0.5, 0.9]), "values": np.array([-0.1, 0.2, 0.3])}, "values must be probabilities"),
    ({"knots": np.array([0.1, 0.5, 0.9]), "values": np.array([0.4, 0.2, 0.3])}, "non-decreasing"),
    ({"knots": np.array([-0.1, 0.5, 0.9]), "values": np.array([0.1, 0.2, 0.3])}, "knots must lie in [0, 1]"),
    ({"knots": np.array([0.1, 0.5]), "values": np.array([0.1, 0.2, 0.3])}, "same length"),
    ({"knots": np.array([0.1, 0.5])}, "needs knots and values"),
    ({"coefficients": [0.0, 1.0]}, "takes knots and values"),
])
def test_recalibrate_refuses_bad_maps(smooth, kwargs, message):
    session, _, _ = smooth
    with pytest.raises(FederatedCallError) as exc:
        session.assign("bad", Call("recalibrateDS", Ref("D$score"), "pchip", **kwargs))
    assert message in str(exc.value) and len(exc.value.failures) == SITES


@pytest.mark.parametrize("kwargs, message", [
    ({"coefficients": [0.0, 1.0, 2.0]}, "coefficients = c(intercept, slope)"),
    ({"coefficients": [0.0, 1.0], "knots": [0.1, 0.2]}, "coefficients only"),
    ({}, "coefficients = c(intercept, slope)"),
])
def test_recalibrate_refuses_bad_logistic_maps(smooth, kwargs, message):
    session, _, _ = smooth
    with pytest.raises(FederatedCallError) as exc:
        session.assign("bad", Call("recalibrateDS", Ref("D$score"), "logistic", **kwargs))
    assert message in str(exc.value)


def test_recalibrate_refuses_non_finite_and_unknown_method(smooth):
    session, _, _ = smooth
    with pytest.raises(FederatedCallError, match="finite"):
        session.assign("bad", Call("recalibrateDS", Ref("D$score"), "logistic", coefficients=[0.0, float("inf")]))
    with pytest.raises(FederatedCallError, match="not one of"):
        session.assign("bad", Call("recalibrateDS", Ref("D$score"), "cubic", knots=[0.1], values=[0.2]))
    # the map is applied only after it passed: a valid one works on the same score
    ds_apply_recalibration(session, "D$score", RecalibrationMap("step", knots=np.array([0.5, 1.0]),
                                                                 values=np.array([0.2, 0.8])), "p.ok")
    assert ds_calibration_measures(session, "D$y", "p.ok").n == SITES * N_SITE


# --- over HTTP ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_recalibration_over_http(tmp_path):
    """The maps travel as numbers over HTTP too (knots as raw float64) to real server processes."""
    frames = dict(list(_overconfident(8).items())[:2])
    provisioned, _ = make_sites(tmp_path, frames, rules=NO_NOISE)
    with LocalSites(provisioned.values(), tmp_path / "run") as sites, \
            http_builder(provisioned, sites.urls).login() as session:
        session.assign_table("D", "P.t")
        platt = ds_recalibrate(session, "D$y", "D$score", method="logistic", into="p.platt")
        assert platt.after.slope == pytest.approx(1.0, rel=1e-6) and platt.after.hl_c < platt.before.hl_c
        iso = ds_recalibrate(session, "D$y", "D$score", method="isotonic", n_bins=20, into="p.iso")
        assert iso.after.hl_c < iso.before.hl_c and iso.fit.n_total == iso.after.n == 2 * N_SITE


# --- where it is enabled ---------------------------------------------------------------------------


def test_recalibrate_is_enabled_in_every_shipped_rules_file():
    """recalibrateDS passes a map's knots through the release gate as deriveDS passes its
    comparisons (dsfed_server/functions/recalibration.py; the isolating maps are refused in
    tests/test_adversarial.py), so every shipped rules file enables both."""
    import tomllib

    rules_dir = Path(__file__).resolve().parents[1] / "disclosure_rules"
    for path in sorted(rules_dir.glob("*.toml")):
        enabled = set(tomllib.loads(path.read_text())["functions"]["enabled"])
        assert {"recalibrateDS", "deriveDS"} <= enabled, path.name


def test_recalibrate_checks_every_site_enables_it_before_fitting(tmp_path):
    """A site whose rules do not enable recalibrateDS stops ds_recalibrate before any release: the
    error names the site and the rule, and no site logged a fitting call (nothing was spent)."""
    text = NO_NOISE.read_text()
    assert text.count('    "recalibrateDS",\n') == 1
    without = tmp_path / "without.toml"
    without.write_text(text.replace('    "recalibrateDS",\n', ""))
    frames = dict(list(_overconfident(9).items())[:3])
    provisioned, services = make_sites(tmp_path / "sites", frames, rules=NO_NOISE)
    strict, strict_service = make_sites(tmp_path / "strict", {"site3": frames["site3"]}, rules=without)
    provisioned["site3"], services["site3"] = strict["site3"], strict_service["site3"]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            ds_recalibrate(session, "D$y", "D$score", method="isotonic", into="p.iso")
    assert set(exc.value.failures) == {"site3"}
    failure = exc.value.failures["site3"]
    assert failure.rule == "functions.enabled" and failure.site == "site3" and "recalibrateDS" in str(exc.value)
    for site in provisioned.values():
        functions = {r.get("function") for r in audit_records(site)}
        assert not functions & {"countBelowDS", "groupSumsDS", "glmDS2", "brierDS", "recalibrateDS"}, functions


def test_recalibration_plot_draws_the_applied_map(smooth):
    import matplotlib

    matplotlib.use("Agg")
    session, y, p = smooth
    r = ds_recalibrate(session, "D$y", "D$score", method="logistic", into="p.plot")
    ax = r.plot()
    line = next(l for l in ax.get_lines() if l.get_gid() == "recalibration-map")
    np.testing.assert_allclose(line.get_ydata(), r.map(np.asarray(line.get_xdata())))
    assert "H-L C" in ax.get_legend().get_texts()[-1].get_text()
