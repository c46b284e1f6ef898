"""Heterogeneity across sites: the random-effects meta-analysis against R's ``metafor::rma`` and
``predict.rma`` on fixed numbers; per-site AUC, calibration slope and O/E on the GBSG2 sites over
HTTP (noise off) against pROC, R's glm and the O/E formula per site, pooled as ``metafor::rma``
pools the same per-site estimates; and the note in place of estimates where the sites' rules
refuse per-site releases or there are too few sites.

References: metafor (Viechtbauer 2010) ``rma(yi, sei = sei, method = "REML" | "DL")`` and
``predict``; Riley et al. (2011)'s prediction interval by its formula with R's ``qt(, k - 2)``;
pROC ``auc``/``var(method = "delong")``; R ``glm(y ~ qlogis(p), binomial)`` on each site's records
with 0 < p < 1 (as rms::val.prob); :math:`\\ln(O/E)` with SE :math:`\\sqrt{(1 - O/N)/O}` (Debray et
al. 2017; metamisc's ``oecalc``) computed here from each site's file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.heterogeneity import MIN_SITES, ds_heterogeneity
from dsfed_client.analyses.meta import random_effects
from dsfed_server.launch import LocalSites
from conftest import GBSG2_SITES, http_builder, inprocess_builder, read_site_csv
from rref import R_PROC, r_eval, r_reference
from sitekit import ROOT, make_sites, rules_variant

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"

R_RMA = """
f <- metafor::rma(yi, sei = sei, method = method, control = list(threshold = 1e-12, maxiter = 1000))
p <- predict(f)
k <- length(yi)
half <- qt(0.975, k - 2) * sqrt(f$tau2 + f$se^2)
c(f$b, f$se, f$ci.lb, f$ci.ub, f$tau2, f$I2, f$H2, f$QE, f$QEp, p$pi.lb, p$pi.ub, f$b - half, f$b + half)
"""

CASES = {
    "heterogeneous": ([0.2, 0.5, -0.1, 0.9, 0.4], [0.2, 0.3, 0.25, 0.4, 0.15]),
    "tau2 truncated at 0": ([0.30, 0.31, 0.29, 0.30], [0.2, 0.25, 0.3, 0.22]),
    "unequal, large": ([1.1, 2.3, 0.4, 1.8, 3.0, 0.9, 1.5], [0.3, 0.5, 0.2, 0.45, 0.6, 0.25, 0.35]),
    "three sites": ([-0.5, 0.1, 0.8], [0.1, 0.12, 0.2]),
}


def rma(yi, sei, method: str) -> np.ndarray:
    return r_eval(R_RMA, yi=np.asarray(yi), sei=np.asarray(sei), method=np.array([method]))


def as_row(m) -> list[float]:
    return [m.estimate, m.se, *m.ci, m.tau2, m.i2, m.h2, m.q, m.q_pvalue, *m.pi]


@pytest.mark.parametrize("method", ["REML", "DL"])
@pytest.mark.parametrize("case", list(CASES))
def test_random_effects_equal_metafor_rma(case, method):
    yi, sei = CASES[case]
    ref = rma(yi, sei, method)
    normal = random_effects(yi, sei, method=method)
    np.testing.assert_allclose(as_row(normal), ref[:11], rtol=1e-7, atol=1e-10)
    riley = random_effects(yi, sei, method=method, prediction="t")
    np.testing.assert_allclose(riley.pi, ref[11:], rtol=1e-7, atol=1e-10)
    if case == "tau2 truncated at 0":
        assert normal.tau2 == 0.0 and normal.i2 == 0.0 and normal.h2 == 1.0
        assert normal.pi == pytest.approx(normal.ci)  # no heterogeneity: the prediction interval is the CI
    else:
        assert normal.tau2 > 0
    assert normal.k == len(yi) and normal.to_frame().shape == (len(yi) + 1, 4)
    assert "tau^2" in normal.summary()


def test_random_effects_refuse_what_cannot_be_pooled():
    with pytest.raises(ValueError, match="at least 2 sites"):
        random_effects([0.1], [0.1])
    with pytest.raises(ValueError, match="at least 3 sites"):
        random_effects([0.1, 0.2], [0.1, 0.1], prediction="t")
    with pytest.raises(ValueError, match="standard error finite and positive"):
        random_effects([0.1, 0.2, 0.3], [0.1, 0.0, 0.1])
