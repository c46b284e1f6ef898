"""Noise off and q = 1 (``testing-no-noise.toml`` with ``disclosure.q_threshold = 1``, so that a cell
of one record may be released and every distributed estimator can be exact), ``validate()`` equals
pooled R to 1e-8 in every section, plain (each site checks its own cells) and secure (pooled
releases), on data sets with continuous scores, with scores rounded to two decimals (many ties
across both classes) and with unequal sites:

* the empirical AUC, its DeLong variance and interval: ``pROC::roc``, ``ci.auc(method = "delong")``;
  the histogram's leaves are refined until every leaf holding both classes holds one distinct
  score, so the tied placement values are DeLong's;
* the ROC-GLM on those placement values: R's probit ``glm`` on the stacked intermediate data;
* Brier and Spiegelhalter's z: ``rms::val.prob``; calibration intercept, slope and
  calibration-in-the-large: R's ``glm`` (converged to 1e-14, where ``val.prob``'s ``lrm`` stops
  near 1e-8);
* Hosmer-Lemeshow C (the groups of ``hoslem.test``: type-7 quantile breaks; per site, found by
  the per-site count search), H, ECE and MCE: written out in R;
* sensitivity and specificity at 0.5: ``pROC::coords``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.analyses.suite import validate
from rref import R_COORDS, R_HIST_ROCGLM, R_HOSLEM, R_PROC, R_VALPROB, r_eval, r_reference
from sitekit import NO_NOISE, make_sites, rules_variant

R_GLM_CAL = """
glm_cal <- function(y, p) {
  lp <- qlogis(p)
  ctl <- glm.control(epsilon = 1e-14, maxit = 100)
  c(coef(glm(y ~ lp, family = binomial, control = ctl)),
    coef(glm(y ~ 1, offset = lp, family = binomial, control = ctl)))
}
"""


def _data(name: str) -> dict[str, pd.DataFrame]:
    """Per site, the outcome and a logistic model's risk (binormal latent score)."""
    rng = np.random.default_rng({"continuous": 500, "rounded": 501, "unequal": 502}[name])
    sizes = {"continuous": (100,) * 5, "rounded": (100,) * 5, "unequal": (220, 130, 50)}[name]
    frames = {}
    for k, n in enumerate(sizes):
        y = (rng.uniform(size=n) < 0.4).astype(int)
        risk = 1 / (1 + np.exp(-(rng.normal(size=n) + 1.1 * y - 0.8)))
        frames[f"site{k + 1}"] = pd.DataFrame({"y": y, "score": np.round(risk, 2) if name == "rounded" else risk})
    return frames


@pytest.mark.parametrize("secure", [False, True], ids=["per-site", "pooled"])
@pytest.mark.parametrize("dataset", ["continuous", "rounded", "unequal"])
def test_noise_off_validate_equals_R_in_every_section(tmp_path: Path, dataset: str, secure: bool):
    frames = _data(dataset)
    rules = rules_variant(tmp_path / "q1.toml", base=NO_NOISE, q_threshold=1)
    with inprocess_builder(*make_sites(tmp_path, frames, rules=rules)).login() as session:
        session.assign_table("D", "P.t")
        report = validate(session, "D$y", "D$score", secure=secure)
    assert report.failed == {}
    assert report.mode == ("pooled" if secure else "per-site")
    pooled = pd.concat(frames.values(), ignore_index=True)
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    site = np.concatenate([np.full(len(f), k) for k, f in enumerate(frames.values())])

    auc, lower, upper, variance = r_reference("proc_ref", R_PROC, y=y, p=p)
    hist = report.discrimination.result
    assert hist.auc == pytest.approx(auc, abs=1e-12)
    assert hist.variance == pytest.approx(variance, abs=1e-12)
    assert tuple(hist.ci_delong) == pytest.approx((lower, upper), abs=1e-10)
    a, b, glm_auc = r_reference("hist_rocglm_ref", R_HIST_ROCGLM, y=y, p=p, site=site, nT=[99])
    fit = hist.roc_glm
    assert (fit.a, fit.b, fit.auc) == pytest.approx((a, b, glm_auc), abs=1e-8)

    brier, z, *_ = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert report.brier.brier == pytest.approx(brier, abs=1e-12)
    assert report.brier.spiegelhalter_z == pytest.approx(z, abs=1e-10)
    intercept, slope, citl = r_eval(f"{R_GLM_CAL}\nglm_cal(y, p)", y=y, p=p)
    lg = report.logistic
    assert (lg.intercept, lg.slope, lg.citl) == pytest.approx((intercept, slope, citl), abs=1e-8)

    chisq, df, _, *sizes = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=[10])
    assert report.hl_c.exact_grouping and report.hl_c.complete
    assert report.hl_c.statistic == pytest.approx(chisq, abs=1e-8)
    assert report.hl_c.df == df
    assert list(report.hl_c.group_sizes or report.hl_c.table["n"]) == sizes
    chisq_h, df_h, *_ = r_reference("hl_h", R_HOSLEM, y=y, p=p, g=[10])
    assert (report.hl_h.statistic, report.hl_h.df) == pytest.approx((chisq_h, df_h), abs=1e-8)
    ece, mce = r_reference("ece_ref", R_HOSLEM, y=y, p=p, g=[10])
    assert (report.errors.ece, report.errors.mce) == pytest.approx((ece, mce), abs=1e-12)

    coords = r_reference("coords_ref", R_COORDS, y=y, p=p, t=[0.5])
    m = report.threshold_metrics
    assert (m.sensitivity[0], m.specificity[0]) == pytest.approx((coords[4], coords[5]), abs=1e-12)


def test_explicit_edges_are_refused_with_noise_on(tmp_path: Path):
    """The noisy hierarchy is over branching^levels equal leaves: explicit edges are for exact leaves only."""
    with inprocess_builder(*make_sites(tmp_path, _data("unequal"))).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError, match="edges are for exact leaves only"):
            session.aggregate("scoreHistogramDS", Ref("D$y"), Ref("D$score"), edges=[0.0, 0.5, 1.0])
