"""Smooth (spline) calibration over the five GBSG2 sites as real HTTP servers, noise off, against R
on the pooled data: Hmisc's rcspline.eval knots, glm(y ~ rms::rcs(qlogis(p), 4), binomial), its
predict(se.fit = TRUE), ICI/E50/E90/Emax computed from R's fitted curve the same way, val.prob's R2,
and the log loss by its formula."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.smooth_calibration import ds_spline_calibration
from dsfed_client.calls import Call, Ref
from dsfed_client.errors import FederatedCallError
from conftest import http_builder, inprocess_builder
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.launch import LocalSites
from dsfed_server.rowbatches import BATCH_ROWS
from dsfed_server.synthetic import binormal
from rref import r_eval, r_reference
from sitekit import NO_NOISE, make_sites, rules_variant

RTOL = 1e-8
Q = 5  # q_threshold of the GBSG2 sites' rules
N_GRID = 50

R_SPLINE = """
spline_ref <- function(y, p, ng, q) {
  col <- p; i <- p > 0 & p < 1; y <- y[i]; p <- p[i]; lp <- qlogis(p)
  k <- Hmisc::rcspline.eval(lp, nk = 4, knots.only = TRUE)
  fit <- glm(y ~ rms::rcs(qlogis(p), 4), family = binomial)    # rms's own knots
  fitk <- glm(y ~ rms::rcs(lp, k), family = binomial)           # the same, with the knots as numbers
  e <- abs(fitted(fit) - p)                                     # Austin & Steyerberg's errors
  rng <- quantile(lp, c(0.01, 0.99), type = 7)
  cells <- function(a, b) sum(col > plogis(a) & col <= plogis(b))  # the score column's records between two cuts
  if (cells(-Inf, rng[1]) < q || cells(rng[1], k[1]) < q) rng[1] <- k[1]      # the gate's rule: else the
  if (cells(k[4], rng[2]) < q || cells(rng[2], Inf) < q) rng[2] <- k[4]       # outer knot bounds the range
  g <- seq(rng[1], rng[2], length.out = ng)
  pr <- predict(fitk, newdata = data.frame(lp = g), se.fit = TRUE)
  emax <- max(abs(plogis(pr$fit) - plogis(g)))                  # Emax on the released range
  r2 <- suppressWarnings(rms::val.prob(p, y, pl = FALSE))[["R2"]]
  c(k, coef(fit), as.vector(vcov(fit)), mean(e), quantile(e, c(0.5, 0.9), type = 7), emax, r2,
    pr$fit, pr$se.fit, rng)
}
"""


@pytest.fixture(scope="module")
def spline(gbsg2_provisioned, gbsg2_http):
    with http_builder(gbsg2_provisioned, gbsg2_http.urls).login() as session:
        session.assign_table("D", "GBSG2.validation")
        yield ds_spline_calibration(session, "D$y", "D$score", n_grid=N_GRID, secure=True)


@pytest.fixture(scope="module")
def reference(gbsg2_pooled) -> dict[str, np.ndarray]:
    y, p = gbsg2_pooled["y"].to_numpy(), gbsg2_pooled["score"].to_numpy()
    out = r_reference("spline_ref", R_SPLINE, y=y, p=p, ng=[N_GRID], q=[Q])
    parts = np.split(out, np.cumsum([4, 4, 16, 1, 2, 1, 1, N_GRID, N_GRID]))
    names = ("knots", "coef", "vcov", "ici", "e", "emax", "r2", "fit", "se", "range")
    return dict(zip(names, parts))


def test_knots_equal_rcspline_eval(spline, reference):
    # exact: the sites pool the order statistics themselves (no bracket midpoint)
    np.testing.assert_allclose(spline.knots, reference["knots"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(np.log(np.divide(spline.p_range, np.subtract(1, spline.p_range))),
                               reference["range"], rtol=RTOL)
    # on GBSG2 the 1 % bound leaves fewer than q records below it: the outer knot, and the result says so
    assert reference["range"][0] == reference["knots"][0] and spline.range_note
    assert " ".join(spline.range_note.split()) in " ".join(spline.summary().split())  # the summary wraps it


def test_fit_equals_R_glm_on_rcs(spline, reference):
    np.testing.assert_allclose(spline.fit.params, reference["coef"], rtol=RTOL)
    np.testing.assert_allclose(spline.fit.cov_params(), reference["vcov"].reshape(4, 4), rtol=1e-6)


def test_pointwise_band_equals_R_predict_se_fit(spline, reference):
    eta, se = reference["fit"], reference["se"]
    np.testing.assert_allclose(spline.calibrated, 1 / (1 + np.exp(-eta)), rtol=RTOL)
    np.testing.assert_allclose(spline.lower, 1 / (1 + np.exp(-(eta - 1.959963984540054 * se))), rtol=1e-7)
    np.testing.assert_allclose(spline.upper, 1 / (1 + np.exp(-(eta + 1.959963984540054 * se))), rtol=1e-7)
    import matplotlib

    matplotlib.use("Agg")
    ax = spline.plot()  # the band drawn is the one checked above
    band = next(c for c in ax.collections if c.get_gid() == "spline-band")
    top = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(top.max(), spline.upper.max()) and np.isclose(top.min(), spline.lower.min())


def test_ici_e50_e90_emax_equal_R_from_its_fitted_curve(spline, reference):
    assert spline.ici == pytest.approx(reference["ici"][0], rel=RTOL)
    assert (spline.e50, spline.e90) == pytest.approx(tuple(reference["e"]), rel=RTOL)
    assert spline.emax == pytest.approx(reference["emax"][0], rel=RTOL)


def test_r2_equals_val_prob_and_log_loss_its_formula(spline, reference, gbsg2_pooled):
    y, p = gbsg2_pooled["y"].to_numpy(), gbsg2_pooled["score"].to_numpy()
    keep = (p > 0) & (p < 1)
    y, p = y[keep], p[keep]
    assert spline.r2 == pytest.approx(reference["r2"][0], rel=RTOL)
    assert spline.log_loss == pytest.approx(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)), rel=RTOL)
    assert spline.n == y.size


def test_analyst_knots_and_coefficients_are_refused(gbsg2_provisioned, gbsg2_http, spline):
    """The attack: knots of the analyst's making (a table with a 'knot' column), and coefficients
    other than the pooled fit (a steep curve). Both refused, naming what to do."""
    with http_builder(gbsg2_provisioned, gbsg2_http.urls).login() as session:
        session.assign_table("D", "GBSG2.validation")
        session.assign("k", Call("referenceScoresDS", [-2.0, -1.9], [0.5, 0.6]))  # numbers the analyst chose
        with pytest.raises(FederatedCallError, match="knots must be the symbol the sites derived"):
            session.assign("f", Call("rcsFrameDS", Ref("D$y"), Ref("D$score"), Ref("k")))
        knots = session.pooled("rcsKnotsDS", Ref("D$y"), Ref("D$score"))
        frame = session.assign("f", Call("rcsFrameDS", Ref("D$y"), Ref("D$score"),
                                         Ref(knots["knots_symbol"], knots["knots_digest"])))
        fitted = np.asarray(spline.fit.params)
        for beta in ([0.0, 200.0, 0.0, 0.0], [0.0, 20.0, 0.0, 0.0], fitted + [0.01, 0.0, 0.0, 0.0]):
            with pytest.raises(FederatedCallError, match="not the pooled fit of this table"):
                session.pooled("splineErrorsDS", frame, [float(b) for b in beta])
        refit = session.pooled("splineErrorsDS", frame, [float(b) for b in spline.fit.params])
        assert refit["ici"] == pytest.approx(spline.ici, rel=RTOL)


def test_refused_where_the_rules_do_not_enable_it(tmp_path, gbsg2_frames):
    rules = rules_variant(tmp_path / "rules.toml", enabled='["assignTable", "secureKeyDS", "brierDS"]')
    frames = {s: frame[["y", "score"]] for s, frame in gbsg2_frames.items()}
    provisioned, services = make_sites(tmp_path, frames, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError, match="rcsKnotsDS") as refused:
            ds_spline_calibration(session, "D$y", "D$score", secure=True)
    assert {e.rule for e in refused.value.failures.values()} == {"functions.enabled"}


# --- the knots as cuts on the score column (release gate, with a cut history) -------------------


def _frames() -> dict[str, pd.DataFrame]:
    """Three sites' records: 200 distinct scores each, outcomes drawn from them."""
    rng = np.random.default_rng(31)
    frames = {}
    for k in range(3):
        p = rng.uniform(0.05, 0.95, 200)
        frames[f"s{k + 1}"] = pd.DataFrame({"y": (rng.uniform(size=p.size) < p).astype(int), "score": p})
    return frames


def _gated_sites(tmp_path):
    """Three sites of 200 distinct scores each as server processes, no noise, the cut history on."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    rules = rules_variant(tmp_path / "rules.toml", base=NO_NOISE, cut_history="true")
    frames = _frames()
    provisioned, _ = make_sites(tmp_path, frames, rules=rules)
    return provisioned, np.sort(pd.concat(frames.values())["score"].to_numpy())


def _first_knot(p: np.ndarray) -> float:
    """rcspline.eval's 5 % knot of logit(p), in R, on the pooled scores (the truth)."""
    return float(r_eval("Hmisc::rcspline.eval(qlogis(p), nk = 4, knots.only = TRUE)[1]", p=p)[0])


def test_released_knots_join_the_score_columns_cut_history(tmp_path):
    """After a spline calibration, a threshold two records above the 5 % knot (a cell of 2 < q between
    them) is withheld; on fresh sites, without the calibration, the same threshold is released."""
    provisioned, p = _gated_sites(tmp_path)
    knot = _first_knot(p)
    above = p[p > 1 / (1 + np.exp(-knot))]
    t = float((above[1] + above[2]) / 2)  # records between the knot's cut and t: 2
    with LocalSites(provisioned.values(), tmp_path / "run") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            fresh = ds_threshold_metrics(session, "D$y", "D$score", [t], secure=True)
            assert fresh.withheld == () and fresh.thresholds.tolist() == [t]  # the control: released
    provisioned, p = _gated_sites(tmp_path / "again")
    with LocalSites(provisioned.values(), tmp_path / "again" / "run") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            fit = ds_spline_calibration(session, "D$y", "D$score", secure=True)
            assert fit.knots[0] == pytest.approx(knot, rel=RTOL)
            after = ds_threshold_metrics(session, "D$y", "D$score", [t], secure=True)
            assert after.withheld == (t,), "the knot's cut was not in the score column's history"


def test_a_knot_beside_a_released_threshold_moves_onto_it(tmp_path):
    """The attack: a threshold c released first, chosen (here from the truth) so that fewer than q
    records lie between c and the 5 % knot; the knot would then single those records out. The gate
    moves the knot onto c, which is public already: the release holds no new cut beside c (0 records
    singled out, against the count the true knot would have isolated), says so, and the fit is R's
    glm on the spline at the knots released."""
    provisioned, p = _gated_sites(tmp_path)
    knot = _first_knot(p)
    cut = 1 / (1 + np.exp(-knot))
    below = p[p <= cut]
    c = float((below[-3] + below[-4]) / 2)  # p >= c and p <= knot: 3 records
    isolated = int(np.sum((p >= c) & (p <= cut)))
    assert 0 < isolated < 5
    with LocalSites(provisioned.values(), tmp_path / "run") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            first = ds_threshold_metrics(session, "D$y", "D$score", [c], secure=True)
            assert first.thresholds.tolist() == [c]
            fit = ds_spline_calibration(session, "D$y", "D$score", secure=True)
    released = 1 / (1 + np.exp(-fit.knots))
    assert released[0] == pytest.approx(c, rel=1e-12), (
        f"the knot beside {c} was released at {released[0]} (the true knot {cut} isolates {isolated} records)")
    assert not np.any(np.isclose(fit.knots, knot, rtol=1e-9)) and "1 knot(s) moved" in fit.knots_note
    assert f"{1 / (1 + np.exp(-knot)):.4g}" not in fit.knots_note  # the refused knot is not told either
    frames = _frames()  # the records the sites hold
    y = np.concatenate([f["y"].to_numpy(float) for f in frames.values()])
    p_all = np.concatenate([f["score"].to_numpy(float) for f in frames.values()])
    coef = r_eval("coef(glm(y ~ rms::rcs(qlogis(p), k), family = binomial))", y=y, p=p_all, k=fit.knots)
    np.testing.assert_allclose(np.asarray(fit.fit.params, dtype=float), coef, rtol=1e-7)


R_SPLINE_LARGE = """
lp <- qlogis(p)
k <- Hmisc::rcspline.eval(lp, nk = 4, knots.only = TRUE)
fit <- glm(y ~ rms::rcs(lp, k), family = binomial)
e <- abs(fitted(fit) - p)
c(k, coef(fit), mean(e), quantile(e, c(0.5, 0.9), type = 7))
"""


def test_sites_larger_than_a_row_batch_equal_R(tmp_path):
    """The spline basis, the score check and the errors are computed a batch of BATCH_ROWS rows at a
    time (dsfed_server/rowbatches.py): over three sites of 2.2 batches each, R's knots, fit and ICI,
    E50, E90 on the pooled records."""
    rng = np.random.default_rng(41)
    n = BATCH_ROWS * 2 + 10_000
    frames = {site: pd.DataFrame(binormal(n, rng, auc=0.75, prevalence=0.3)) for site in ("a", "b", "c")}
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = r_eval(R_SPLINE_LARGE, y=pooled["y"].to_numpy(dtype=float), p=pooled["score"].to_numpy(dtype=float))
    provisioned, services = make_sites(tmp_path, frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        fit = ds_spline_calibration(session, "D$y", "D$score", secure=True)
    np.testing.assert_allclose(fit.knots, ref[:4], rtol=RTOL)
    np.testing.assert_allclose(fit.fit.params, ref[4:8], rtol=RTOL)
    assert (fit.ici, fit.e50, fit.e90) == pytest.approx(tuple(ref[8:11]), rel=RTOL)
    assert fit.n == 3 * n
