"""A factor with a level that one site lacks (its dictionary, made from its own records, declares
``ward`` as ``med`` and ``surg`` only, the others ``icu`` too) pools as R pools the records: the GLM,
pooled and relayed, aligns the levels (``glmDS2``'s ``xlev``: the union of the levels each site
declares) and equals R's ``glm`` on the pooled records; before, both failed with "site3's vector has
another length than this site's". A pooled table over the union of the levels (``tableDS`` as
``ds.table`` sends it, ``table1DDS`` of an ``asFactorDS2`` factor) equals R's ``table``. Levels that
leave out one a site holds are refused without naming it. Three in-process sites under the shipped
default rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Call, FederatedCallError, Ref
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.calls import Formula
from rref import r_eval
from sitekit import make_sites

LEVELS = ["icu", "med", "surg"]


def _frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(37)
    frames = {}
    for k, n in enumerate((150, 110, 80)):
        ward = rng.choice(LEVELS, n, p=[0.2, 0.4, 0.4]) if k < 2 else rng.choice(LEVELS[1:], n)
        x = np.round(rng.normal(0, 1, n), 3)
        eta = -0.3 + 0.8 * x + np.select([ward == "icu", ward == "med"], [1.0, 0.4], 0.0)
        frames[f"site{k + 1}"] = pd.DataFrame({"ward": ward, "x": x,
                                               "y": (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)})
    return frames


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    frames = _frames()
    provisioned, services = make_sites(tmp_path_factory.mktemp("levels"), frames)
    return frames, provisioned, services


@pytest.fixture()
def session(sites):
    _, provisioned, services = sites
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        yield session


def test_the_sites_declare_different_levels(session):
    levels = session.aggregate("levelsDS", Ref("D$ward"))
    assert [levels[s]["Levels"] for s in ("site1", "site2", "site3")] == [LEVELS, LEVELS, LEVELS[1:]]


@pytest.mark.parametrize("secure", [True, False], ids=["pooled", "relayed"])
def test_a_glm_over_a_level_one_site_lacks_equals_R(sites, session, secure):
    frames, _, _ = sites
    pooled = pd.concat(frames.values(), ignore_index=True)
    want = r_eval("f <- glm(y ~ factor(ward) + x, family = binomial); "
                  "c(coef(f), summary(f)$coefficients[, 2], deviance(f), f$null.deviance)",
                  y=pooled.y.to_numpy(), ward=pooled.ward.to_numpy(), x=pooled.x.to_numpy())
    fit = ds_glm(session, "y ~ ward + x", "D", family="binomial", secure=secure)
    assert list(fit.params.index) == ["(Intercept)", "wardmed", "wardsurg", "x"]
    np.testing.assert_allclose(fit.params, want[:4], rtol=1e-7)
    np.testing.assert_allclose(fit.bse, want[4:8], rtol=1e-7)
    assert fit.deviance == pytest.approx(want[8], rel=1e-9)
    assert fit.null_deviance == pytest.approx(want[9], rel=1e-9)
    assert fit.nobs == len(pooled) and fit.pooled == secure


def test_pooled_tables_over_the_union_of_the_levels_equal_R(sites, session):
    frames, _, _ = sites
    ward = pd.concat(frames.values(), ignore_index=True)["ward"].to_numpy()
    want = [int(v) for v in r_eval("as.vector(table(factor(w, levels = c('icu', 'med', 'surg'))))", w=ward)]
    union = ",".join(LEVELS)
    table = session.pooled("tableDS", Ref("D$ward"), None, None, union, None, None, None, "no", None)
    assert table["pooled"] and table["counts"] == want
    session.assign("W", Call("asFactorDS2", Ref("D$ward"), union))
    one_way = session.pooled("table1DDS", Ref("W"))
    assert one_way["levels"] == LEVELS and one_way["counts"] == want


def test_levels_that_leave_one_out_or_name_no_factor_are_refused(session):
    with pytest.raises(FederatedCallError) as refused:
        session.aggregate("glmDS1", Formula("y ~ ward + x"), "binomial", None, None, Ref("D"), xlev=["ward=med,surg"])
    assert set(refused.value.failures) == {"site1", "site2"}  # site3 holds no icu record: its levels are covered
    message = refused.value.failures["site1"].message
    assert message == "the levels given for ward leave out 1 level(s) it has at this site" and "icu" not in message
    with pytest.raises(FederatedCallError, match="levels are given for x, which is not a factor at this site"):
        session.aggregate("glmDS1", Formula("y ~ ward + x"), "binomial", None, None, Ref("D"), xlev=["x=1,2"])
