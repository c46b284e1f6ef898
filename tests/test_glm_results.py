"""The conventional results of a distributed GLM: named coefficients, Wald intervals,
log-likelihood, AIC, deviance and null deviance, the likelihood-ratio test of nested models and
predictions kept at the sites, each against R's ``glm`` on the pooled GBSG2 records (noise off).

References: R's ``coef``, ``confint.default``, ``logLik``, ``AIC``, ``deviance``, ``$null.deviance``,
``anova(m0, m1, test = "LRT")`` and ``predict(type = "response" / "link")`` through rpy2.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, inprocess_builder
from dsfed_client.analyses import ds_glm
from dsfed_client.analyses.glm import GLMResults
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from rref import r_eval
from sitekit import approving

TABLE = "GBSG2.validation"
FULL = "y ~ age + tsize + tgrade + pnodes"
NESTED = "y ~ age + tsize"
GAUSSIAN = "score ~ age + tsize + tgrade"
R_DATA = "d <- data.frame(y = y, score = score, age = age, tsize = tsize, pnodes = pnodes, tgrade = factor(tgrade)); "


@pytest.fixture(scope="module")
def sites(tmp_path_factory, gbsg2_pooled):
    """The five GBSG2 sites, noise off, accepting a GLM of the analyst's own (for ``predict``)."""
    run = tmp_path_factory.mktemp("glm-results")
    rules = approving(run / "rules.toml", {}, analyst_glm="true")
    provisioned = provision(run / "run", {s: (FIXTURES / s, rules) for s in GBSG2_SITES})
    services = {n: SiteService.from_config_file(p.config) for n, p in provisioned.items()}
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", TABLE)
        yield session, gbsg2_pooled


def r_glm(pooled: pd.DataFrame, source: str) -> np.ndarray:
    return r_eval(R_DATA + source, y=pooled.y, score=pooled.score, age=pooled.age, tsize=pooled.tsize,
                  pnodes=pooled.pnodes, tgrade=pooled.tgrade.astype(str))


@pytest.mark.parametrize("formula,family", [(FULL, "binomial"), (GAUSSIAN, "gaussian")])
def test_named_results_equal_R_glm(sites, formula, family):
    session, pooled = sites
    fit = ds_glm(session, formula, "D", family=family, secure=True)
    model = f"f <- glm({formula}, data = d, family = {family}); "
    names = r_glm(pooled, model + "colnames(model.matrix(f))")
    assert list(fit.params.index) == list(names) == list(fit.conf_int().index) == list(fit.bse.index)
    ref = r_glm(pooled, model + "c(coef(f), sqrt(diag(vcov(f))), confint.default(f), logLik(f), AIC(f), "
                               "deviance(f), f$null.deviance)")
    p = len(names)
    np.testing.assert_allclose(fit.params.to_numpy(), ref[:p], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(fit.bse.to_numpy(), ref[p:2 * p], rtol=1e-8)
    np.testing.assert_allclose(fit.conf_int()["lower"].to_numpy(), ref[2 * p:3 * p], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(fit.conf_int()["upper"].to_numpy(), ref[3 * p:4 * p], rtol=1e-7, atol=1e-10)
    llf, aic, deviance, null_deviance = ref[4 * p:]
    assert fit.llf == pytest.approx(llf, rel=1e-9)
    assert fit.aic == pytest.approx(aic, rel=1e-9)
    assert fit.deviance == pytest.approx(deviance, rel=1e-9)
    assert fit.null_deviance == pytest.approx(null_deviance, rel=1e-9)
    # the arrays the code base relies on still come out: unpacking, numpy, to_frame, the model file
    assert np.asarray(fit.params).shape == (p,) and fit.to_frame().index.tolist() == list(names)
    assert fit.model().coefficients == dict(zip(names, fit.params.tolist()))
    text = fit.summary()
    assert "Log-likelihood" in text and "AIC" in text and "Null deviance" in text
    shown = fit._repr_html_()
    assert "<table" in shown and "tgradeIII" in shown and "AIC" in shown


def test_lr_test_equals_R_anova(sites):
    session, pooled = sites
    full, nested = ds_glm(session, FULL, "D", secure=True), ds_glm(session, NESTED, "D", secure=True)
    ref = r_glm(pooled, f"a <- anova(glm({NESTED}, data = d, family = binomial), glm({FULL}, data = d, "
                        "family = binomial), test = 'LRT'); c(a$Deviance[2], a$Df[2], a[['Pr(>Chi)']][2])")
    test = full.lr_test(nested)
    statistic, pvalue = nested.lr_test(full)  # either order; unpacks as (statistic, pvalue)
    assert test.statistic == statistic == pytest.approx(ref[0], rel=1e-8)
    assert test.df_diff == ref[1] == 3
    assert test.pvalue == pvalue == pytest.approx(ref[2], rel=1e-6)
    with pytest.raises(ValueError, match="not nested"):
        full.lr_test(ds_glm(session, "y ~ age + horTh", "D", secure=True))
    with pytest.raises(ValueError, match="family"):
        full.lr_test(ds_glm(session, NESTED, "D", link="probit", secure=True))


@pytest.mark.parametrize("type", ["response", "link"])
def test_predict_assigns_a_site_vector_whose_pooled_mean_is_R_predict(sites, type):
    session, pooled = sites
    fit = ds_glm(session, FULL, "D", secure=True)
    handle = fit.predict(session, "D", into=f"p_{type}", type=type)
    assert handle.symbol == f"p_{type}"
    expected = r_glm(pooled, f"mean(predict(glm({FULL}, data = d, family = binomial), type = '{type}'))")[0]
    assert session.mean(f"p_{type}").mean == pytest.approx(expected, rel=1e-9)


def test_null_deviance_is_not_made_up():
    """No intercept: no null deviance, and the summary says why (R's would be of a different model)."""
    fit = GLMResults(formula="y ~ 0 + x", family="binomial", link="logit", names=("x",), params=np.array([0.5]),
                     cov_params_=np.array([[0.04]]), deviance=10.0, dispersion=1.0, nobs=20, df_resid=19,
                     iterations=4, null_note="Null deviance not fitted: the model has no intercept")
    assert fit.null_deviance is None and "no intercept" in fit.summary()
    assert fit.params["x"] == 0.5 and fit.conf_int().loc["x", "upper"] == pytest.approx(0.5 + 1.959963984540054 * 0.2)


def test_progress_counts_the_real_rounds_outside_a_terminal(sites, monkeypatch, capsys):
    """Forced on (as in a log) the GLM's bar ends full at the round it converged in, not at n/25;
    ``DSFED_PROGRESS=0`` prints nothing."""
    session, _ = sites
    monkeypatch.setenv("DSFED_PROGRESS", "1")
    fit = ds_glm(session, NESTED, "D", secure=True, null_model=False)
    err = capsys.readouterr().err
    assert f"{NESTED}: converged" in err and f"{fit.iterations}/{fit.iterations}" in err and "/25" not in err
    monkeypatch.setenv("DSFED_PROGRESS", "0")
    ds_glm(session, NESTED, "D", secure=True, null_model=False)
    assert capsys.readouterr().err == ""


def test_progress_shows_in_a_jupyter_kernel(monkeypatch):
    """In a Jupyter kernel (IPython's ZMQ shell) stderr is no terminal, and progress shows."""
    import types

    from dsfed_client import progress

    class ZMQInteractiveShell:  # the class name IPython's kernel shell has
        pass

    monkeypatch.delenv("DSFED_PROGRESS", raising=False)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not progress.enabled()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=ZMQInteractiveShell))
    assert progress.enabled()
