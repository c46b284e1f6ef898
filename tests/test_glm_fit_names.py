"""The end of a fit the analyst reads counts as one coefficient vector, named by its model
(``glm.count_sums``, rule ``disclosure.sums_per_record``): what is one fit and what is another.

- Without an intercept, or in a product whose parts the model lacks, a straight-line change of a covariate is
  another fit: ``y ~ 0 + I(score + c)`` has,
  for every c, its own estimate and information :math:`\\sum_i \\sigma'(b_c (s_i + c)) (s_i + c)^2`, new
  equations in the scores. Named up to a straight line (as the start's moments are), the four were one fit and
  all four were released over a subset of 26 records, which answers 6 functions of the score: two fits.
- The same model with its terms in another order is the same fit, counted once.
- A 0/1 outcome's intercept-only fit (the dsfed client's null model) ends at the share of positives, a moment:
  it costs nothing, so ``y ~ score`` and ``y ~ age`` after it are released over 27 records.

One site of 60 records under the shipped rules (``sitekit.make_sites``: default.toml); relayed fits over this
one site, whose end the analyst reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame


def fitted(tmp: Path, low: int, formulas: list[str], null_model: bool = False) -> list[str]:
    """Each formula fitted in turn over the records aged ``low`` or more: "released", or the refusal's rule."""
    with fixed_secrets("glm fit names"):
        provisioned, services = make_sites(tmp, {"s1": synthetic_frame(7, 60)})
    out = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("S", f'dataFrameSubsetDS2("D", "D$age", "{low}", 6, NULL, NULL, FALSE)')
        for formula in formulas:
            try:
                ds_glm(session, formula, "S", null_model=null_model)
                out.append("released")
            except FederatedCallError as exc:
                out.append(",".join(sorted({e.rule or e.kind for e in exc.failures.values()})))
    return out


def test_a_covariate_shifted_without_an_intercept_is_another_fit(tmp_path):
    assert (synthetic_frame(7, 60).age >= 62).sum() == 26
    got = fitted(tmp_path, 62, ["y ~ 0 + score", "y ~ 0 + I(score + 0.5)", "y ~ 0 + I(score + 1)",
                                "y ~ 0 + I(score + 2)"])
    assert got == ["released", "released", "disclosure.sums_per_record", "disclosure.sums_per_record"]


def test_a_shifted_covariate_in_a_product_without_its_parts_is_another_fit(tmp_path):
    """``age*(score + c) = age*score + c*age``: without ``age`` in the model the fit absorbs no c."""
    got = fitted(tmp_path, 40, ["y ~ age:I(score + 1)", "y ~ age:I(score + 2)"])
    assert got == ["released", "disclosure.sums_per_record"]


def test_the_same_model_with_its_terms_in_another_order_is_the_same_fit(tmp_path):
    got = fitted(tmp_path, 25, ["y ~ score + age", "y ~ score + age", "y ~ age + score", "y ~ score + age + weight"])
    assert got == ["released", "released", "released", "disclosure.sums_per_record"]  # 60 records answer 15


def test_the_null_model_of_a_binary_outcome_costs_nothing(tmp_path):
    assert (synthetic_frame(7, 60).age >= 60).sum() == 27
    assert fitted(tmp_path, 60, ["y ~ score", "y ~ age"], null_model=True) == ["released", "released"]


@pytest.mark.parametrize("formula", ["y ~ score", "y ~ 0 + score"])
def test_a_fit_released_after_its_refusal_is_none(tmp_path, formula):
    """The refusal leaves the count as it was: the same fit asked again after a refused one is released."""
    got = fitted(tmp_path, 62, [formula, "y ~ age + score + weight", formula])
    assert got == ["released", "disclosure.sums_per_record", "released"]


def test_a_pooled_fit_over_the_records_a_site_keeps_is_over_its_table(tmp_path):
    """A site leaves out the records whose pattern of missing values fewer than q share (here six, in two
    patterns of three: the weight missing, the height missing): its whole-table fit summed over three sites is
    over the records it keeps, the table as the row-set audit tells it, and its end is not counted there
    (measured against all 60 records, the fit was a subset's, and the second model was refused at that site)."""
    frames = {site: synthetic_frame(seed, 60) for site, seed in (("s1", 7), ("s2", 8), ("s3", 9))}
    frames["s1"].loc[[3, 14, 25], "weight"] = np.nan
    frames["s1"].loc[[36, 47, 58], "height"] = np.nan
    with fixed_secrets("glm fit names"):
        provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        assert session.aggregate_expr("dimDS(D)")["s1"][0] == 54  # the six records left out
        for formula in ("y ~ score + age + income", "y ~ score + age + income + weight"):
            fit = ds_glm(session, formula, "D", null_model=False)  # relayed over the three sites
            assert fit.nobs == 174
