"""Parameters are checked against their declared constraints before any site is contacted: a bad
value raises a ValueError naming the function and the parameter, and no request reaches a site
(the transports' request counters do not move; a valid call moves them, so the counter is live).

References: the constraints' documented ranges (alpha in the open interval (0, 1); at least 3
Hosmer-Lemeshow groups so that df = groups - 2 > 0; kind C or H)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.calibration import (
    ds_calibration_curve, ds_ece_mce, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.curves import ds_hist_auc, ds_roc_pr_curves
from dsfed_client.analyses.discrimination import ds_auc, ds_roc_glm
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.analyses.recalibration import ds_recalibrate
from dsfed_client.analyses.suite import validate
from dsfed_client.params import InvalidParameterError
from conftest import inprocess_builder
from sitekit import ROOT, make_sites

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    rng = np.random.default_rng(14)
    frames = {}
    for k in range(2):
        y = rng.integers(0, 2, 60)
        frames[f"site{k + 1}"] = pd.DataFrame({"y": y, "score": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 60),
                                                                        0.01, 0.99)})
    provisioned, services = make_sites(tmp_path_factory.mktemp("params"), frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        yield s


def _requests(session) -> int:
    return sum(s["requests"] for s in session.transfer_stats().values())


BAD = [
    (ds_auc, {"alpha": 1.5}, "alpha", "ds_auc"),
    (ds_auc, {"alpha": 0.0}, "alpha", "ds_auc"),
    (ds_roc_glm, {"alpha": -0.1}, "alpha", "ds_roc_glm"),
    (ds_roc_glm, {"n_thresholds": 1}, "n_thresholds", "ds_roc_glm"),
    (ds_hist_auc, {"alpha": 1}, "alpha", "ds_hist_auc"),
    (ds_hist_auc, {"within_bin": "uniform"}, "within_bin", "ds_hist_auc"),
    (ds_hosmer_lemeshow, {"n_groups": 2}, "n_groups", "ds_hosmer_lemeshow"),
    (ds_hosmer_lemeshow, {"n_groups": 10.0}, "n_groups", "ds_hosmer_lemeshow"),
    (ds_hosmer_lemeshow, {"kind": "D"}, "kind", "ds_hosmer_lemeshow"),
    (ds_ece_mce, {"n_groups": 0}, "n_groups", "ds_ece_mce"),
    (ds_calibration_curve, {"n_bins": 1}, "n_bins", "ds_calibration_curve"),
    (ds_logistic_calibration, {"alpha": 2.0}, "alpha", "ds_logistic_calibration"),
    (ds_roc_pr_curves, {"n_quantiles": 1}, "n_quantiles", "ds_roc_pr_curves"),
    (ds_recalibrate, {"method": "beta"}, "method", "ds_recalibrate"),
    (validate, {"alpha": 1.0}, "alpha", "validate"),
    (validate, {"n_groups": True}, "n_groups", "validate"),
    (validate, {"method": "exact"}, "method", "validate"),
]


@pytest.mark.parametrize(("func", "kwargs", "name", "where"), BAD, ids=[f"{w}-{n}-{list(k.values())[0]}"
                                                                          for _, k, n, w in BAD])
def test_bad_parameter_raises_before_any_site_is_contacted(session, func, kwargs, name, where):
    before = _requests(session)
    with pytest.raises(ValueError, match=rf"The '{name}' parameter of {where} must be") as err:
        func(session, "D$y", "D$score", **kwargs)
    assert isinstance(err.value, InvalidParameterError)
    assert repr(list(kwargs.values())[0]) in str(err.value)  # the bad value is shown
    assert _requests(session) == before


def test_glm_family_checked_before_any_site_is_contacted(session):
    before = _requests(session)
    with pytest.raises(ValueError, match="The 'family' parameter of ds_glm must be one of 'binomial', 'gaussian', "
                                         "'poisson'. Got 'gamma' instead."):
        ds_glm(session, "y ~ score", "D", family="gamma")
    assert _requests(session) == before


def test_a_valid_call_reaches_the_sites_and_alpha_sets_the_level(session):
    """The counter moves for a valid call; alpha = 0.1 gives the 90% Wald interval of the AUC."""
    before = _requests(session)
    result = ds_auc(session, "D$y", "D$score", alpha=0.1)
    assert _requests(session) > before
    half = 1.6448536269514722 * np.sqrt(result.variance)  # qnorm(0.95)
    assert result.ci_delong == pytest.approx((result.auc - half, min(1.0, result.auc + half)), rel=1e-12)
    assert result.to_dict()["alpha"] == 0.1 and "90% CI (DeLong)" in result.summary()
