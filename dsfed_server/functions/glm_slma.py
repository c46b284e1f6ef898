"""Study-level meta-analysis of a GLM (dsBase's ``glmSLMADS1`` / ``glmSLMADS.assign`` /
``glmSLMADS2``, which dsBaseClient's ``ds.glmSLMA`` calls): the model fitted to completion at each
site, its estimates and standard errors released for the analyst to pool by meta-analysis.

The fit is R's ``glm.fit``: iteratively reweighted least squares from the family's ``mustart``,
:math:`\\beta^{(t+1)} = (X^T W^{(t)} X)^{-1} X^T W^{(t)} z^{(t)}`, stopped when
:math:`|D^{(t+1)} - D^{(t)}| / (|D^{(t+1)}| + 0.1) < 10^{-8}` or after 25 iterations
(``glm.control``), the covariance ``cov.unscaled`` being :math:`(X^T W X)^{-1}` at the weights of the
last step and ``cov.scaled`` that times the dispersion (1 for binomial and Poisson, the Pearson
estimate :math:`\\sum w_i r_i^2 / (n - p)` for Gaussian), as ``summary.glm`` (R Core Team; McCullagh &
Nelder 1989, Generalized Linear Models, section 2.5) computes them. The null deviance is R's:
the weighted mean of y (intercept, no offset), the intercept-only fit with the offset, or
:math:`\\mu = g^{-1}(\\text{offset})` without an intercept.

Every call passes the GLM's checks (:func:`dsfed_server.functions.glm.check_frame`: at least q
records, ``glm_saturation``, factor levels and binary variables of 0 or at least q records, the
release gate's checks of a subset) when the model is fitted and again when its summary is
released. The released list is dsBase's in dsBase's order, but for ``call`` and ``terms``, which
are R code (dsfed sends data, not code): ``formula`` is the formula's text, ``family`` the
family's name and link with class ``family``, and ``data`` is NULL (the function receives the
table, not the name it was given).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_core.calltree import Formula
from dsfed_core.errors import CallError
from dsfed_server.context import CallContext
from dsfed_server.families import Family, family as make_family
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.declared import Declared
from dsfed_server.functions.glm import (_CHECKS, _FAMILY, _FORMULA, _LINK, _OFFSET, _WEIGHTS, _checked_frame,
                                        _model_table, _parts, checked_parts, count_sums)
from dsfed_server.modelframe import ModelFrame
from dsfed_server.registry import P, Param, register
from dsfed_server.rowbatches import row_batches
from dsfed_server.rowsets import RowSet

MAXIT = 25  # glm.control()
EPSILON = 1e-8


@dataclass(frozen=True)
class StudyGLM:
    """What ``glmSLMADS.assign`` leaves in the workspace: the model it fitted (R class ``glm``)."""

    R_CLASS = "glm"
    formula: str
    family: str
    link: str
    weights: str | None
    offset: str | None
    coefficients: tuple[float, ...]
    converged: bool


@dataclass(frozen=True)
class Fit:
    beta: np.ndarray
    cov_unscaled: np.ndarray
    deviance: float
    iterations: int
    converged: bool


_HINT = ("a model whose covariates do not separate the outcome here, a less steep offset or weights, or more "
         "records")


def fit(fam: Family, mf: ModelFrame, *, guard: Guard) -> Fit:
    """R's ``glm.fit`` IRLS on one site's model frame (see the module's docstring). A step, the start included,
    whose working weights rest on fewer than q records is refused
    (:meth:`~dsfed_server.disclosure.checks.Guard.working_weights`): a separated binomial fit runs its 25
    iterations to slopes of thousands, and its coefficients, covariance and deviance are then equations in the
    two records next to the boundary; a Poisson fit with the offset ``600*score`` stops at 25 iterations with
    its weight on the record of the largest score, whose values ``cov.unscaled`` gives
    (tests/test_glm_poisson_concentration_attacks.py)."""
    start = checked_parts(guard, fam, mf, None, hint=_HINT)
    info, xwz, dev_old = np.asarray(start["info.matrix"]), np.asarray(start["xwz"]), float(start["dev"])
    for iteration in range(1, MAXIT + 1):
        try:
            beta = np.linalg.solve(info, xwz)
        except np.linalg.LinAlgError:
            raise CallError("the model's information matrix is singular at this site (a covariate constant "
                            "here, collinear covariates, or covariates that separate the outcomes here)",
                            hint="simplify the model") from None
        step, effective = _parts(fam, mf, beta)
        guard.working_weights(fam.name, effective, hint=_HINT)
        dev = float(step["dev"])
        if abs(dev - dev_old) / (abs(dev) + 0.1) < EPSILON:
            return Fit(beta, np.linalg.inv(info), dev, iteration, True)
        dev_old, info, xwz = dev, np.asarray(step["info.matrix"]), np.asarray(step["xwz"])
    return Fit(beta, np.linalg.inv(info), dev_old, MAXIT, False)


def _per_record(fam: Family, mf: ModelFrame, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fitted means and the working weights at ``beta`` (one batch of rows at a time)."""
    mu, working = np.empty(mf.n), np.empty(mf.n)
    for rows in row_batches(mf.n):
        eta = mf.design(rows) @ beta + mf.offset[rows]
        mu[rows] = fam.linkinv(eta)
        mu_eta = fam.mu_eta(eta)
        working[rows] = mf.weights[rows] * mu_eta**2 / fam.variance(mu[rows])
    return mu, working


def _aic(fam: Family, y: np.ndarray, mu: np.ndarray, weights: np.ndarray, dev: float, rank: int) -> float:
    """``family$aic(y, n, mu, wt, dev) + 2 * rank`` for R's binomial, poisson and gaussian."""
    if fam.name == "binomial":
        m = weights
        keep = m > 0
        logp = stats.binom.logpmf(np.round(m[keep] * y[keep]), np.round(m[keep]), mu[keep])
        value = -2 * float(np.sum(logp))
    elif fam.name == "poisson":
        value = -2 * float(np.sum(stats.poisson.logpmf(y, mu) * weights))
    else:
        n = y.size
        with np.errstate(divide="ignore"):
            value = n * (math.log(2 * math.pi * dev / n) + 1) + 2 - float(np.sum(np.log(weights)))
    return value + 2 * rank


def _null_deviance(fam: Family, mf: ModelFrame, offset: str | None) -> float:
    """R's null deviance (``glm.fit``'s ``wtdmu``, or ``glm``'s intercept-only refit with an offset)."""
    y, w = np.asarray(mf.y, dtype=float), mf.weights
    if "(Intercept)" not in mf.names:
        mu = fam.linkinv(mf.offset)
    elif offset is None:
        mu = np.full(mf.n, float(np.sum(w * y) / np.sum(w)))
    else:
        mu = fam.linkinv(fam.linkfun(fam.mustart(mf.y, w)))
        eta = fam.linkfun(mu)
        dev_old = float(np.sum(fam.dev_resids(y, mu, w)))
        for _ in range(MAXIT):
            mu_eta = fam.mu_eta(eta)
            working = w * mu_eta**2 / fam.variance(mu)
            z = eta - mf.offset + (y - mu) / mu_eta
            intercept = float(np.sum(working * z) / np.sum(working))
            eta = intercept + mf.offset
            mu = fam.linkinv(eta)
            dev = float(np.sum(fam.dev_resids(y, mu, w)))
            if abs(dev - dev_old) / (abs(dev) + 0.1) < EPSILON:
                break
            dev_old = dev
    return float(np.sum(fam.dev_resids(y, mu, w)))


_DATA = Param("dataName", P.TABLE, "the table", rows_only=True)


@register("glmSLMADS1", "aggregate", [_FORMULA, _FAMILY, _WEIGHTS, _OFFSET, Param("data", P.TABLE, "the table",
                                                                                   rows_only=True), _LINK],
          checks=_CHECKS)
def slma_check(ctx: CallContext, formula: Formula, family: str, weights: str | None, offset: str | None,
               data: pd.DataFrame | RowSet, link: str | None) -> Generator[Declared, Any, dict[str, Any]]:
    """The model checked against the site's rules (dsBase ``glmSLMADS1``, ``ds.glmSLMA``'s first call):
    its dimensions and coefficient names, as ``glmDS1``."""
    mf = yield from _checked_frame(ctx, formula, make_family(family, link), data, weights, offset)
    return {"dimX": [mf.n, len(mf.names)], "coef.names": list(mf.names), "errorMessage": "No errors"}


@register("glmSLMADS.assign", "assign", [_FORMULA, _FAMILY, _OFFSET, _WEIGHTS, _DATA, _LINK], checks=_CHECKS)
def slma_fit(ctx: CallContext, formula: Formula, family: str, offset: str | None, weights: str | None,
             dataName: pd.DataFrame | RowSet, link: str | None) -> Generator[Declared, Any, StudyGLM]:
    """The model fitted to completion at this site and kept as a symbol (dsBase ``glmSLMADS.assign``);
    nothing is released."""
    fam = make_family(family, link)
    mf = yield from _checked_frame(ctx, formula, fam, dataName, weights, offset)
    result = fit(fam, mf, guard=ctx.guard)
    return StudyGLM(formula.to_text(), fam.name, fam.link, weights, offset, tuple(result.beta.tolist()),
                    result.converged)


@register("glmSLMADS2", "aggregate",
          [_FORMULA, _FAMILY, _OFFSET, _WEIGHTS, Param("newobj", P.OBJECT, "the model glmSLMADS.assign fitted"),
           _DATA, _LINK],
          checks=_CHECKS)
def slma_summary(ctx: CallContext, formula: Formula, family: str, offset: str | None, weights: str | None,
                 newobj: Any, dataName: pd.DataFrame | RowSet, link: str | None
                 ) -> Generator[Declared, Any, dict[str, Any]]:
    """This site's fitted model (dsBase ``glmSLMADS2``): coefficients with standard errors, z (or t)
    values and p-values, the covariance matrices, deviances, AIC and counts, after the GLM's checks. Its sums
    are counted with every sum released from the table (:func:`~dsfed_server.functions.glm.count_sums`, rule
    ``disclosure.sums_per_record``): its start's, and its end's as one coefficient vector of its model, offset
    and weights, the analyst reading this site's own fit: logistic fits ``y ~ score``, ``y ~ age`` and
    ``y ~ score + age`` over a subset of ten records are 19 equations in its 20 values besides its moments
    (Denning & Schlörer 1983's moment attack, through the logistic curve)."""
    fam = make_family(family, link)
    if not isinstance(newobj, StudyGLM) or (newobj.formula, newobj.family, newobj.link, newobj.weights,
                                            newobj.offset) != (formula.to_text(), fam.name, fam.link, weights, offset):
        raise CallError("newobj is not the model glmSLMADS.assign fitted for this formula, family, offset and weights",
                        hint="assign the model with glmSLMADS.assign first (ds.glmSLMA does)")
    mf = yield from _checked_frame(ctx, formula, fam, dataName, weights, offset)
    # a fit the site runs to its end, as the sites' own iterates of a pooled fit: counted as one function of the
    # columns its offset and weights read (a slope of the offset is another function: power sums otherwise)
    yield from count_sums(ctx, fam, mf, _model_table(dataName, formula, weights, offset), formula, None, weights,
                          offset, iterates=True)
    result = fit(fam, mf, guard=ctx.guard)
    names = list(mf.names)
    rank = len(names)
    y = np.asarray(mf.y, dtype=float)
    mu, working = _per_record(fam, mf, result.beta)
    n_ok = int(mf.n - np.count_nonzero(mf.weights == 0))
    df_resid = n_ok - rank
    estimated = fam.name == "gaussian"
    if estimated:
        residuals = (y - mu) / fam.mu_eta(fam.linkfun(mu))
        dispersion = float(np.sum((working * residuals**2)[working > 0]) / df_resid) if df_resid > 0 else math.nan
    else:
        dispersion = 1.0
    cov_scaled = result.cov_unscaled * dispersion
    se = np.sqrt(np.diag(cov_scaled))
    statistic = result.beta / se
    p_value = (2 * stats.t.sf(np.abs(statistic), df_resid) if estimated else 2 * stats.norm.sf(np.abs(statistic)))
    label = ("t value", "Pr(>|t|)") if estimated else ("z value", "Pr(>|z|)")
    intercept = "(Intercept)" in names
    return {
        "rank": rank,
        "aic": _aic(fam, y, mu, mf.weights, result.deviance, rank),
        "iter": result.iterations,
        "converged": result.converged,
        "boundary": False,
        "na.action": {"na.action": "na.omit"},
        "contrasts": None,
        "aliased": dict(zip(names, [False] * rank)),
        "dispersion": dispersion,
        "data": None,  # dsBase's dataName text; the function receives the table, not its name
        "df": [rank, df_resid, rank],
        "Ntotal": mf.n_total,
        "Nvalid": mf.n,
        "Nmissing": mf.n_total - mf.n,
        "cov.unscaled": result.cov_unscaled.tolist(),
        "cov.scaled": cov_scaled.tolist(),
        "offset": offset,
        "weights": weights,
        "VarCovMatrix": None,
        "CorrMatrix": None,
        "deviance.null": _null_deviance(fam, mf, offset),
        "df.null": n_ok - int(intercept),
        "deviance.resid": result.deviance,
        "df.resid": df_resid,
        "formula": formula.to_text(),
        "family": fam.name,
        "link": fam.link,
        "coefficients": np.column_stack([result.beta, se, statistic, p_value]).tolist(),
        "coef.names": names,
        "coefficient.columns": ["Estimate", "Std. Error", *label],
    }
