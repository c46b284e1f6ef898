"""A GLM whose outcome is computed from a column its covariates also read is refused before any step
(``Guard.outcome_roots``, rule ``disclosure.cut_history``: the fit separates by construction; the red team in
tests/test_glm_separation_cluster_attacks.py); honest fits with derived covariates, or a derived outcome of
another column, still equal R's ``glm`` on the pooled records (three synthetic sites of 60, pooled protocol)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from sitekit import make_sites
from test_derived_column_attacks import synthetic_frame
from test_glm import r_glm

HEIGHT_CUT = 171


@pytest.fixture
def three_sites(tmp_path: Path):
    frames = {f"s{i}": synthetic_frame(seed, 60) for i, seed in enumerate((7, 11, 13), 1)}
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        yield session, pd.concat(frames.values(), ignore_index=True)


def test_derived_covariates_and_an_outcome_of_another_column_equal_r(three_sites):
    session, pooled = three_sites
    for formula in ("y ~ log(age)", "y ~ I(age/10) + weight"):
        ref = r_glm(pooled, formula, "binomial", "logit")
        fit = ds_glm(session, formula, "D", secure=True)
        np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-6)
    session.derive("H", f"ifelse(D$height > {HEIGHT_CUT}, 1, 0)")  # an outcome computed from height, not age
    session.assign_expr("T", 'cbindDS("H,D$age", "tall,age")')
    ref = r_glm(pooled.assign(tall=(pooled.height > HEIGHT_CUT).astype(int)), "tall ~ age", "binomial", "logit")
    fit = ds_glm(session, "tall ~ age", "T", secure=True)
    np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8, atol=1e-12)


def test_an_outcome_computed_from_a_covariates_column_is_refused_naming_the_rule_and_column(three_sites):
    session, _ = three_sites
    session.derive("H", f"ifelse(D$height > {HEIGHT_CUT}, 1, 0)")
    session.assign_expr("T", 'cbindDS("H,D$height,D$age", "tall,h,age")')
    refused = []
    for formula in ("tall ~ h", "tall ~ age + log(h)", "tall ~ I(h/100)"):
        for secure in (True, False):
            with pytest.raises(FederatedCallError) as exc:
                ds_glm(session, formula, "T", secure=secure)
            refused += list(exc.value.failures.values())
    with pytest.raises(FederatedCallError) as exc:  # DataSHIELD's study-level fit, at its first call
        session.aggregate_expr('glmSLMADS1(tall ~ h, "binomial", NULL, NULL, "T")')
    refused += list(exc.value.failures.values())
    for error in refused:
        assert error.rule == "disclosure.cut_history"
        assert "the outcome tall is computed from height" in str(error) and "separates by construction" in str(error)
    # the prior weights read the outcome's column too
    with pytest.raises(FederatedCallError, match="weights h also reads"):
        ds_glm(session, "tall ~ age", "T", weights="h", secure=True)
