"""A distributed logistic regression driven only through ``aggregate("glmDS2(...)")`` calls of
the unmodified PyPI DataSHIELD client, in the argument forms dsBaseClient's ``ds.glm`` sends
(formula unquoted, family as a string, beta.vect as comma-separated text, offset, weights,
data name), iterated as ``ds.glm`` does, equals R's ``glm`` on the pooled data.

The reference is R's ``glm`` run to full convergence (``epsilon = 1e-14``). ``ds.glm`` starts
at beta = 0 where R starts at ``mustart``, so the two stop at different iterates; with R's
default ``epsilon = 1e-8`` the stopping point can lie further than 1e-8 from the maximum
likelihood estimate, while both runs to convergence agree with the estimate to ~1e-15."""

from __future__ import annotations

import numpy as np
import pytest
from datashield import DSError, DSSession

from opalkit import ds_session, opal_value
from rref import r_eval

FORMULAS = {
    "y ~ score + age + horTh": ["(Intercept)", "score", "age", "horThyes"],
    "y ~ score + horTh + menostat": ["(Intercept)", "score", "horThyes", "menostatPost"],
}


def r_logistic(frame, formula: str) -> tuple[np.ndarray, float]:
    """R's glm(binomial) on the pooled frame, run to convergence: coefficients and deviance."""
    out = r_eval(
        "d <- data.frame(y = y, score = score, age = age, "
        "tgrade = factor(tgrade, levels = c('I', 'II', 'III')), horTh = factor(horTh, levels = c('no', 'yes')), "
        "menostat = factor(menostat, levels = c('Pre', 'Post'))); "
        f"f <- glm({formula}, family = binomial, data = d, control = glm.control(epsilon = 1e-14, maxit = 100)); "
        "c(coef(f), deviance(f))",
        **{c: frame[c].to_numpy() for c in ("y", "score", "age", "tgrade", "horTh", "menostat")},
    )
    return out[:-1], float(out[-1])


def ds_glm_fit(session: DSSession, formula: str, family: str, data: str, maxit: int = 20):
    """ds.glm's loop: glmDS1 for the model's size, then beta += I^-1 U from beta = 0 until
    |dev - dev_old| / (|dev| + 0.1) <= 1e-8."""
    first = session.aggregate(f'glmDS1({formula}, "{family}", NULL, NULL, "{data}")')
    assert {r["errorMessage"] for r in first.values()} == {"No errors"}
    names = first["site1"]["coef.names"]
    beta, dev_old = np.zeros(first["site1"]["dimX"][1]), 9.99e99
    for iteration in range(1, maxit + 1):
        text = ",".join(repr(float(b)) for b in beta)
        answers = session.aggregate(f'glmDS2({formula}, "{family}", "{text}", NULL, NULL, "{data}")')
        parts = {site: opal_value(answer) for site, answer in answers.items()}
        info = sum(np.asarray(p["info.matrix"]) for p in parts.values())
        score = sum(np.asarray(p["score.vect"]) for p in parts.values())
        dev = sum(p["dev"] for p in parts.values())
        beta = beta + np.linalg.solve(info, score)[:, 0]
        if abs(dev - dev_old) / (abs(dev) + 0.1) <= 1e-8:
            return names, beta, dev, iteration
        dev_old = dev
    raise AssertionError("no convergence")


@pytest.mark.parametrize("formula", FORMULAS)
def test_logistic_regression_through_glmDS2_equals_R(gbsg2_http, gbsg2_provisioned, gbsg2_pooled, formula):
    with ds_session(gbsg2_http, gbsg2_provisioned, token=True) as session:
        names, beta, dev, iterations = ds_glm_fit(session, formula, "binomial", "D")
        text = ",".join(repr(float(b)) for b in beta)
        parts = session.aggregate(f'glmDS2({formula}, "binomial", "{text}", NULL, NULL, "D")')
    coef, deviance = r_logistic(gbsg2_pooled, formula)
    assert names == FORMULAS[formula]
    np.testing.assert_allclose(beta, coef, rtol=1e-8, atol=1e-12)
    assert dev == pytest.approx(deviance, rel=1e-10)
    assert 3 <= iterations <= 20
    # dsBase's element order (ds.glm reads elements by position), R matrices, a family's data; the
    # family's class makes the answer come in serializeJSON's typed form, as Opal sends it
    assert parts["site1"]["type"] == "list" and parts["site1"]["value"][0]["attributes"]["class"]["value"] == ["family"]
    first, p = opal_value(parts["site1"]), len(names)
    assert list(first)[:10] == ["family", "info.matrix", "score.vect", "numsubs", "dev", "Nvalid", "Nmissing",
                                "Ntotal", "disclosure.risk", "errorMessage2"]
    assert first["family"] == {"family": "binomial", "link": "logit"}
    assert np.asarray(first["score.vect"]).shape == (p, 1) and np.asarray(first["info.matrix"]).shape == (p, p)


def test_a_small_factor_level_is_refused_through_the_datashield_door(gbsg2_http, gbsg2_provisioned):
    """Tumour grade I, tgrade's reference level, has 3 patients at site3: glmDS1 and glmDS2 refuse a
    model with tgrade there (its records' outcomes would leave through the score and the information),
    naming the level and the rule, as the native door does."""
    with ds_session(gbsg2_http, gbsg2_provisioned, token=True) as session:
        for call in ('glmDS1(y ~ age + tgrade, "binomial", NULL, NULL, "D")',
                     'glmDS2(y ~ age + tgrade, "binomial", "0,0,0,0", NULL, NULL, "D")'):
            with pytest.raises(DSError):
                session.aggregate(call)
            errors = session.get_errors()
            assert set(errors) == {"site3"}
            assert "factor tgrade: level I" in str(errors["site3"])
            assert "[rule disclosure.q_threshold]" in str(errors["site3"])


def test_coefficient_text_may_exceed_the_string_limit_but_other_strings_may_not():
    from dsfed_core.errors import CallError
    from dsfed_core.calltree import Limits
    from dsfed_core.parser import parse

    limits = Limits(max_length=80, max_name_length=20, max_depth=4)
    beta = ",".join(["-0.00123456789012345678"] * 8)  # ds.glm's beta.vect for an 8-coefficient model
    call = parse(f'glmDS2(y ~ x, "binomial", "{beta}", NULL, NULL, "D")', limits)
    assert call.args[2].value.value == beta
    for text in ("a" * 81, "1," * 40 + "x", "D$age" + "0" * 80):
        with pytest.raises(CallError) as exc:
            parse(f'f("{text}")', limits)
        assert exc.value.rule == "strings.max_length"
    with pytest.raises(CallError) as exc:  # the whole call text stays bounded
        parse(f'glmDS2(y ~ x, "binomial", "{",".join(["1.5"] * 200)}")', limits)
    assert "call text" in exc.value.message
