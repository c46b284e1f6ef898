"""The histogram ROC-GLM fitted on the negatives' placement values (``histRocGlmDataDS(placed = 'negatives')``):
the inverse curve's probit line (Pepe & Cai 2004), which :func:`ds_hist_auc` fits where the negatives' reference
carries more noise than the positives' (fewer negatives).

References: R ``glm`` (probit) on the pooled table of the negatives' DeLong placement values built in R from the
definition (``rocglm_fit`` of ``rref.R_ROCGLM_FIT`` with the classes and the scores' order turned); the
inverse's coefficients (c, d) give the curve's :math:`a = -c/d`, :math:`b = 1/d`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.curves import ds_hist_auc, placement_noise_variances, reference_symbol
from dsfed_core.roc import binormal_auc
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.calls import Call, Ref
from dsfed_server.synthetic import binormal
from conftest import inprocess_builder
from rref import R_ROCGLM_FIT, r_reference
from sitekit import ROOT, make_sites, rules_variant
from test_curves import grid_frames

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
# the negatives' DeLong placement values V01 = share of the positives above (ties one half): rocglm_fit with the
# classes turned and the scores negated, whose "pv" of a negative -x against the positives -x1 is V01
R_INVERSE_ROCGLM = R_ROCGLM_FIT + """
inverse_rocglm_ref <- function(y, p, site, nT) {
  rocglm_fit(1 - y, -p, site, nT, function(s, neg) (sum(neg < s) + sum(neg == s) / 2) / length(neg))
}
"""


def test_negatives_table_noise_off_equals_R_glm(tmp_path):
    """Noise off: the probit fit on the negatives' table equals R's glm on the same table built in R; the
    curve ds_hist_auc reports stays the positives' (Schalk et al.'s), whose noise variance is 0."""
    frames = grid_frames()
    provisioned, services = make_sites(tmp_path, frames, rules=NO_NOISE)
    pooled = pd.concat(frames.values(), ignore_index=True)
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    site = np.concatenate([np.full(len(f), k) for k, f in enumerate(frames.values())])
    c, d = r_reference("inverse_rocglm_ref", R_INVERSE_ROCGLM, y=y, p=p, site=site, nT=np.array([49.0]))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = ds_hist_auc(session, "D$y", "D$score", levels=4, n_thresholds=49)
        assert result.roc_glm.placed == "positives"
        with reference_symbol(session, result.histograms) as reference, session.temporary("hneg") as name:
            data = session.assign(name, Call("histRocGlmDataDS", Ref("D$y"), Ref("D$score"), reference, 49,
                                             within_bin="tied", pooled=False, placed="negatives"))
            glm = ds_glm(session, "u ~ x", data, family="binomial", link="probit", weights="w", null_model=False)
    assert tuple(glm.params) == pytest.approx((c, d), rel=1e-8)
    # the inverse curve has the curve's area: close to the positives' fit on the same records
    assert binormal_auc(-c / d, 1 / d) == pytest.approx(result.roc_glm.auc, abs=0.01)


def test_fewer_negatives_fit_the_negatives_placements(tmp_path):
    """Noise on, prevalence 0.75: the negatives' reference carries the more noise (v10 > v01), so the ROC-GLM
    is the negatives' inverse curve turned round, with their noise variance v01 (and the cells' ties'); near the
    pooled AUC."""
    pooled = binormal(4_000, np.random.default_rng(8), 0.75, 0.75)[["y", "score"]]
    frames = {f"site{i + 1}": pooled.iloc[i * 800:(i + 1) * 800].reset_index(drop=True) for i in range(5)}
    rules = rules_variant(tmp_path / "rules.toml", epsilon_per_table="1000.0", epsilon_per_analyst="1000.0")
    provisioned, services = make_sites(tmp_path, frames, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = ds_hist_auc(session, "D$y", "D$score", secure=True)
    fit = result.roc_glm
    v10, v01 = placement_noise_variances(result.histograms)
    assert v10 > v01 and fit.placed == "negatives"
    # the negatives' noise variance, and the variance of the ties within the released cells (the same tied
    # placement values as the empirical AUC's)
    assert 0 < result.tie_variance < v01
    c, d = fit.glm.params
    assert (fit.a, fit.b) == pytest.approx((-c / d, 1 / d), rel=1e-12)
    assert fit.auc == pytest.approx(binormal_auc(fit.a, fit.b), rel=1e-12)
    y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
    pos, neg = p[y == 1], np.sort(p[y == 0])
    auc = float(np.mean(np.searchsorted(neg, pos, "left") + np.searchsorted(neg, pos, "right")) / 2 / neg.size)
    assert abs(fit.auc - auc) <= 0.02
