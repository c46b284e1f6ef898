"""The site's share of a distributed GLM (seed 000 "Distributed GLM"; seed 002, eq. for
Newton-Raphson on summed site parts), with dsBase's names ``glmDS1`` / ``glmDS2``.

For a coefficient vector :math:`\\beta` (or, in the first round, R's
``mustart``) a site returns :math:`X^T W X`, :math:`X^T W z`, the score
:math:`U = X^T W (y - \\mu) / \\mu'(\\eta)` and its deviance, where
:math:`\\eta = X\\beta + \\text{offset}`, :math:`W = w\\,\\mu'(\\eta)^2 / V(\\mu)`
and :math:`z = \\eta - \\text{offset} + (y - \\mu)/\\mu'(\\eta)` exactly as in R's
``glm.fit``. Summed over sites these give the pooled IRLS step
:math:`\\beta_{new} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k`.

Disclosure checks (DataSHIELD ``glmDS1``): at least q records; at most
``glm_saturation`` x n parameters; a binary outcome or covariate whose
smaller level has fewer than q records is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.calltree import Formula
from dsfed_server.context import CallContext
from dsfed_server.errors import CallError
from dsfed_server.families import FAMILY_NAMES, LINK_NAMES, Family, family as make_family
from dsfed_server.modelframe import ModelFrame, model_frame
from dsfed_server.registry import P, Param, SecureSum, register

_CHECKS = ("disclosure.q_threshold", "disclosure.glm_saturation")


def _checked_frame(ctx: CallContext, formula: Formula, fam: Family, data: pd.DataFrame,
                   weights: str | None, offset: str | None) -> ModelFrame:
    """The model frame, checked against the rules; built once per session and table object, as
    Fisher scoring asks for the same model again every iteration."""
    key = ("glm", formula.to_text(), fam.name, fam.link, weights, offset)
    return ctx.session.memo(key, data, lambda: _build_checked_frame(ctx, formula, fam, data, weights, offset))


def _build_checked_frame(ctx: CallContext, formula: Formula, fam: Family, data: pd.DataFrame,
                         weights: str | None, offset: str | None) -> ModelFrame:
    mf = model_frame(formula, data, weights=weights, offset=offset)
    guard = ctx.guard
    guard.min_count(mf.n, "complete records for the model")
    guard.saturation(len(mf.names), mf.n)
    problem = fam.validate_y(mf.y)
    if problem:
        raise CallError(problem)
    columns = [("outcome " + (formula.response or "y"), mf.y)] + [
        (f"covariate {name}", mf.X[:, j]) for j, name in enumerate(mf.names) if name != "(Intercept)"
    ]
    for what, values in columns:
        levels, counts = np.unique(values, return_counts=True)
        if levels.size == 2:
            guard.min_count(int(counts.min()), f"binary {what}: a level")
    return mf


_FORMULA = Param("formula", P.FORMULA, "model formula, e.g. y ~ age + tgrade")
_FAMILY = Param("family", P.STRING, "binomial, poisson or gaussian", choices=FAMILY_NAMES)
_LINK = Param("link", P.STRING, "link function (default: the family's canonical link)", required=False,
              choices=LINK_NAMES)
_WEIGHTS = Param("weights", P.NAME, "column of prior weights", required=False)
_OFFSET = Param("offset", P.NAME, "column of offsets", required=False)


@register("glmDS1", "aggregate",
          [_FORMULA, _FAMILY, _WEIGHTS, _OFFSET, Param("data", P.TABLE, "the table"), _LINK], checks=_CHECKS)
def glm_check(ctx: CallContext, formula: Formula, family: str, weights: str | None, offset: str | None,
              data: pd.DataFrame, link: str | None) -> dict[str, Any]:
    """Check a model against the site's rules and return its dimensions and coefficient names."""
    mf = _checked_frame(ctx, formula, make_family(family, link), data, weights, offset)
    return {"dimX": [mf.n, len(mf.names)], "coef.names": list(mf.names), "errorMessage": "No errors"}


@register(
    "glmDS2",
    "aggregate",
    [
        _FORMULA,
        _FAMILY,
        Param("beta.vect", P.NUMBERS, "current coefficients (omit for R's starting values)", required=False),
        _OFFSET,
        _WEIGHTS,
        Param("dataName", P.TABLE, "the table"),
        _LINK,
    ],
    checks=_CHECKS,
    secure_sum=SecureSum(fields=("info.matrix", "score.vect", "xwz", "dev", "numsubs", "Nvalid", "Npositive",
                                 "Nmissing", "Ntotal"), public=("family", "link", "coef.names")),
)
def glm_parts(ctx: CallContext, formula: Formula, family: str, beta_vect: list[float] | None,
              offset: str | None, weights: str | None, dataName: pd.DataFrame, link: str | None) -> dict[str, Any]:
    """This site's IRLS parts at ``beta.vect``: information matrix, score, X'Wz and deviance."""
    fam = make_family(family, link)
    mf = _checked_frame(ctx, formula, fam, dataName, weights, offset)
    if beta_vect is None:
        mu = fam.mustart(mf.y, mf.weights)
        eta = fam.linkfun(mu)
        mu = fam.linkinv(eta)
    else:
        beta = np.asarray(beta_vect, dtype=float)
        if beta.size != len(mf.names):
            raise CallError(f"beta.vect has {beta.size} values; the model has {len(mf.names)} coefficients")
        eta = mf.X @ beta + mf.offset
        mu = fam.linkinv(eta)
    mu_eta = fam.mu_eta(eta)
    variance = fam.variance(mu)
    good = (mf.weights > 0) & (mu_eta != 0)
    w = np.where(good, mf.weights * mu_eta**2 / np.where(good, variance, 1.0), 0.0)
    resid = (mf.y - mu) / mu_eta
    z = eta - mf.offset + resid
    xw = mf.X * w[:, None]
    dev = float(np.sum(fam.dev_resids(mf.y, mu, mf.weights)))
    if not np.isfinite(dev):
        raise CallError("the deviance is not finite at these coefficients; try other starting values")
    return {
        "family": fam.name,
        "link": fam.link,
        "coef.names": list(mf.names),
        "info.matrix": (xw.T @ mf.X).tolist(),
        "score.vect": (xw.T @ resid).tolist(),
        "xwz": (xw.T @ z).tolist(),
        "dev": dev,
        "numsubs": mf.n,
        "Nvalid": mf.n,
        "Npositive": int(np.sum(mf.weights > 0)),
        "Nmissing": mf.n_total - mf.n,
        "Ntotal": mf.n_total,
        "disclosure.risk": 0,
        "errorMessage2": "No errors",
    }
