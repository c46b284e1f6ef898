"""dsBase's study-level GLM (glmSLMADS1, glmSLMADS.assign, glmSLMADS2) at each GBSG2 site through the
unmodified Python DataSHIELD client over /ws: every released number equals R's glm + summary.glm on
that site's data (binomial, poisson with an offset, gaussian with weights); a model the rules refuse
is refused, naming the rule, at fit and at release; a summary needs the model assigned for it."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import GBSG2_SITES
from opalkit import ds_session, opal_value
from rref import r_eval

MODELS = [
    # (formula, family, offset, weights)
    ("y ~ score + age", "binomial", None, None),
    ("pnodes ~ age + tsize", "poisson", "score", None),
    ("score ~ age + tsize", "gaussian", None, "pnodes"),
]

R_SUMMARY = """
f <- glm({formula}, family = {family}{extra}); s <- summary(f)
c(as.vector(s$coefficients), as.vector(s$cov.scaled), as.vector(s$cov.unscaled), f$deviance, f$null.deviance,
  f$aic, f$df.residual, f$df.null, s$dispersion, f$iter, f$rank)
"""


def _text(value: str | None) -> str:
    return "NULL" if value is None else f'"{value}"'


@pytest.mark.parametrize("formula,family,offset,weights", MODELS, ids=[m[1] for m in MODELS])
def test_study_level_glm_equals_R_at_every_site(gbsg2_http, gbsg2_provisioned, gbsg2_frames, formula, family,
                                                 offset, weights):
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        checked = session.aggregate(f'glmSLMADS1({formula}, "{family}", {_text(weights)}, {_text(offset)}, "D")')
        session.assign_expr("fit", f'glmSLMADS.assign({formula}, "{family}", {_text(offset)}, {_text(weights)}, "D")')
        answers = session.aggregate(
            f'glmSLMADS2({formula}, "{family}", {_text(offset)}, {_text(weights)}, "fit", "D")')
    extra = "".join(f", {k} = {v}" for k, v in (("offset", offset), ("weights", weights)) if v)
    for site in GBSG2_SITES:
        frame = gbsg2_frames[site]
        assert checked[site]["errorMessage"] == "No errors" and checked[site]["dimX"] == [len(frame), 3]
        got = opal_value(answers[site])
        want = r_eval(R_SUMMARY.format(formula=formula, family=family, extra=extra),
                      **{c: frame[c].to_numpy() for c in ("y", "score", "age", "pnodes", "tsize")})
        coefficients = np.array(got["coefficients"]).ravel(order="F")
        np.testing.assert_allclose(coefficients, want[:12], rtol=1e-7)
        np.testing.assert_allclose(np.array(got["cov.scaled"]).ravel(order="F"), want[12:21], rtol=1e-7)
        np.testing.assert_allclose(np.array(got["cov.unscaled"]).ravel(order="F"), want[21:30], rtol=1e-7)
        deviance, null, aic, df_resid, df_null, dispersion, iterations, rank = want[30:]
        assert got["deviance.resid"] == pytest.approx(deviance, rel=1e-10)
        assert got["deviance.null"] == pytest.approx(null, rel=1e-10)
        assert got["aic"] == pytest.approx(aic, rel=1e-10)
        assert (got["df.resid"], got["df.null"], got["rank"]) == (df_resid, df_null, rank)
        assert got["dispersion"] == pytest.approx(dispersion, rel=1e-8)
        assert got["iter"] == iterations and got["converged"] is True
        assert got["family"] == {"family": family, "link": {"binomial": "logit", "poisson": "log",
                                                            "gaussian": "identity"}[family]}
        assert (got["offset"], got["weights"], got["formula"]) == (offset, weights, formula)


def test_refusals_name_the_rule_at_fit_and_at_release(gbsg2_http, gbsg2_provisioned, gbsg2_frames):
    """At site3 grade I has 3 records: a model with tgrade would release their outcomes' sum."""
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        for text in ('glmSLMADS1(y ~ tgrade, "binomial", NULL, NULL, "D")',
                     'glmSLMADS.assign(y ~ tgrade, "binomial", NULL, NULL, "D")'):
            with pytest.raises(Exception):
                if text.startswith("glmSLMADS1"):
                    session.aggregate(text, conn_names=["site3"])
                else:
                    session.assign_expr("bad", text, conn_names=["site3"])
            message = " ".join(map(str, session.get_errors()["site3"].get_error()["arguments"]))
            assert "[rule disclosure.q_threshold]" in message and "level I" in message, message
        session.assign_expr("fit", 'glmSLMADS.assign(y ~ score, "binomial", NULL, NULL, "D")', conn_names=["site1"])
        with pytest.raises(Exception):
            session.aggregate('glmSLMADS2(y ~ age, "binomial", NULL, NULL, "fit", "D")', conn_names=["site1"])
        message = " ".join(map(str, session.get_errors()["site1"].get_error()["arguments"]))
        assert "newobj is not the model glmSLMADS.assign fitted" in message
        assert session.aggregate('classDS("fit")', conn_names=["site1"])["site1"] == "glm"
