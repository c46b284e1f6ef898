"""Distributed GLM by Fisher scoring on summed site parts (Schalk et al. 2024, "Distributed GLM";
Wu et al. (2012) §2, Newton-Raphson on summed Hessians and gradients).

Each round every site computes :math:`X_k^T W_k X_k`, :math:`X_k^T W_k z_k` and its deviance
(registry entry ``glmDS2``); the sites sum them among themselves (the analyst relays sealed
vectors, :mod:`dsfed_server.disclosure.relay`), release the sums, and each derives

.. math:: \\beta^{(t+1)} = \\Big(\\sum_k X_k^T W_k X_k\\Big)^{-1} \\sum_k X_k^T W_k z_k ,

itself (the analyst sends no coefficient, so none can saturate the linear predictor into a
step around one record), starting, as R's ``glm.fit`` does, from the family's ``mustart``, and stops when
:math:`|D^{(t)} - D^{(t-1)}| / (|D^{(t)}| + 0.1) < \\epsilon` (R's rule,
``epsilon = 1e-8``, ``maxit = 25``). Without noise the result is R's ``glm``
fit on the pooled data: the same path, step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Generator, Iterator

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_client.aggregation import Aggregation
from dsfed_client.calls import Formula, Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.models import ds_predict, upload_model
from dsfed_client.params import ALPHA, Interval, Options, validate_params
from dsfed_client.progress import progress
from dsfed_client.results import Results, derived, hidden, render, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.errors import NOT_A_PEER, SHAPES_DIFFER
from dsfed_core.models import GLMModel
from dsfed_core.parser import parse_formula


class ConvergenceError(RuntimeError):
    """The fit (distributed, or :func:`probit_fit`'s) did not converge within ``maxit`` iterations."""


@result
class LRTest(Results):
    """A likelihood-ratio test of a GLM against a nested one; unpacks as ``(statistic, pvalue)``.

    :math:`G^2 = (D_0 - D_1) / \\phi` on :math:`df = p_1 - p_0` degrees of freedom, with
    :math:`\\phi` the larger model's dispersion (1 for binomial and poisson), referred to
    :math:`\\chi^2_{df}`: R's ``anova(m0, m1, test = "LRT")``.
    """

    _title: ClassVar[str] = "Likelihood-ratio test of nested distributed GLMs"

    statistic: float = stat("LR statistic", brief=".6g")
    pvalue: float = stat("P(>Chi)", ".4g", brief=".4g")
    df_diff: int = stat("Df", brief="")
    deviance_diff: float = stat("Deviance difference")
    restricted: str = stat("Restricted model")
    full: str = stat("Full model")

    def __iter__(self) -> Iterator[float]:
        return iter((self.statistic, self.pvalue))


@result
class GLMResults(Results):
    """A fitted distributed GLM, in the shape statsmodels' GLM results take: ``params``, ``bse``,
    ``cov_params()``, ``conf_int(alpha)``, ``pvalues``, ``llf``, ``aic``, ``deviance``,
    ``null_deviance``, ``summary()``, ``predict()``, ``lr_test()``.

    ``params``, ``bse``, ``statistic`` and ``pvalues`` are pandas Series indexed by R's
    ``model.matrix`` column names (``(Intercept)``, ``age``, ``tgradeII``); ``conf_int`` and
    ``cov_params`` are DataFrames with the same labels. ``np.asarray(fit.params)`` and unpacking
    (``a, b = fit.params``) give the plain values.

    References
    ----------
    Wu et al. (2012), "Preserving institutional privacy in distributed binary logistic regression" §2:
    Newton-Raphson on the summed site Hessians and gradients.
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Distributed GLM". R's ``glm.fit`` (the path followed), ``summary.glm`` (z or t statistics),
    ``logLik.glm`` and the families' ``aic``.
    """

    _title: ClassVar[str] = "Distributed Generalized Linear Model Results"

    formula: str = stat("Formula", brief="")
    family: str = stat("Family", brief="")
    link: str = stat("Link", brief="")
    names: tuple[str, ...] = hidden()
    params: pd.Series = hidden()
    cov_params_: np.ndarray = hidden()
    deviance: float = stat("Deviance")
    dispersion: float = stat("Dispersion")
    nobs: int = stat("No. observations", brief="")
    df_resid: int = stat("Df residuals")
    iterations: int = stat("Iterations (distributed IRLS)")
    sites: tuple[str, ...] = stat("Sites", default=())  # the sites the parts were summed over (only their sums)
    pooled: bool = stat("Counts checked pooled", default=False)  # pooled over the sites (True) or per site
    null_deviance: float | None = stat("Null deviance", default=None)  # None: not fitted (see null_note)
    weighted: bool = hidden(default=False)  # fitted with prior weights
    null_note: str = hidden(default="")  # why the null deviance is missing, if it is
    # the iterates came from the analyst (DataSHIELD's ds.glm protocol): the sites pinned no peers to relay with
    analyst_iterates: bool = hidden(default=False)

    def __post_init__(self) -> None:
        if not isinstance(self.params, pd.Series):
            object.__setattr__(self, "params", pd.Series(np.asarray(self.params, dtype=float),
                                                         index=pd.Index(list(self.names), name="term")))

    @property
    def bse(self) -> pd.Series:
        """Standard errors :math:`\\sqrt{\\operatorname{diag}(\\phi I^{-1})}` by term."""
        return pd.Series(np.sqrt(np.diag(self.cov_params_)), index=self.params.index)

    @property
    def uses_t(self) -> bool:
        """Estimated dispersion (gaussian): t statistics on ``df_resid``, as R's ``summary.glm``."""
        return self.family == "gaussian"

    @property
    def statistic(self) -> pd.Series:
        return self.params / self.bse

    @property
    def pvalues(self) -> pd.Series:
        z = np.abs(self.statistic)
        p = 2 * stats.t.sf(z, self.df_resid) if self.uses_t else 2 * stats.norm.sf(z)
        return pd.Series(p, index=self.params.index)

    @derived()
    def coefficients(self) -> dict[str, float]:
        """The coefficients by term name."""
        return dict(zip(self.names, self.params.tolist()))

    @property
    def df_model(self) -> int:
        """The number of coefficients (the design has full rank, or the fit fails)."""
        return len(self.names)

    @derived("Log-likelihood")
    def llf(self) -> float | None:
        """R's ``logLik``: binomial (0/1 outcomes) :math:`-D/2`; gaussian without prior weights
        :math:`-\\tfrac n2 (\\log(2\\pi D/n) + 1)`. None where it needs sums the fit does not
        release (poisson: :math:`\\sum \\log y_i!`; gaussian with weights: :math:`\\sum \\log w_i`)."""
        if self.family == "binomial":
            return -self.deviance / 2
        if self.family == "gaussian" and not self.weighted:
            return -self.nobs / 2 * (np.log(2 * np.pi * self.deviance / self.nobs) + 1)
        return None

    @derived("AIC")
    def aic(self) -> float | None:
        """R's ``AIC``: :math:`-2\\ell + 2k`, :math:`k` the coefficients (and, for gaussian, the
        dispersion)."""
        llf = self.llf
        return None if llf is None else -2 * llf + 2 * (self.df_model + (self.family == "gaussian"))

    def cov_params(self) -> pd.DataFrame:
        """:math:`\\phi (\\sum_k X_k^T W_k X_k)^{-1}` at the estimate, labelled by term."""
        return pd.DataFrame(self.cov_params_.copy(), index=self.params.index, columns=self.params.index)

    @validate_params({"alpha": ALPHA})
    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        """Wald intervals :math:`\\hat\\beta \\pm z_{1-\\alpha/2}\\,\\mathrm{se}` (R's ``confint.default``),
        one row per term, columns ``lower`` and ``upper``."""
        q = stats.norm.ppf(1 - alpha / 2)
        return pd.DataFrame({"lower": self.params - q * self.bse, "upper": self.params + q * self.bse})

    @validate_params({"alpha": ALPHA})
    def to_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        """One row per term: ``coef``, ``std err``, ``z`` (``t``), ``P>|z|``, ``ci_lower``, ``ci_upper``
        (``frame.attrs["alpha"]``)."""
        ci = self.conf_int(alpha)
        label = "t" if self.uses_t else "z"
        frame = pd.DataFrame(
            {"coef": self.params, "std err": self.bse, label: self.statistic, f"P>|{label}|": self.pvalues,
             "ci_lower": ci["lower"], "ci_upper": ci["upper"]},
            index=self.params.index,
        )
        frame.attrs["alpha"] = alpha
        return frame

    def _table(self) -> pd.DataFrame:
        return self.to_frame()

    def _notes(self) -> tuple[str, ...]:
        return (self.null_note,) if self.null_note else ()

    @validate_params({"alpha": ALPHA})
    def summary(self, alpha: float = 0.05) -> str:
        """A statsmodels-style text table: the fit's header, then one row per coefficient."""
        how = (ANALYST_ITERATES if self.analyst_iterates else "every iterate derived by the sites from summed parts")
        return render(self._title, self._rows(), table=self.to_frame(alpha), notes=(
            f"{1 - alpha:.0%} Wald intervals; {how}", *self._notes()))

    def lr_test(self, other: "GLMResults") -> LRTest:
        """Likelihood-ratio test of this model against ``other``, one nested in the other (either
        order): R's ``anova(m0, m1, test = "LRT")``.

        Raises ValueError when the two are not nested fits of one family and link on the same
        number of records (R refuses models fitted to different numbers of records too)."""
        small, big = sorted((self, other), key=lambda f: f.df_model)
        if (small.family, small.link) != (big.family, big.link):
            raise ValueError(f"lr_test: the models differ in family/link ({small.family}/{small.link} vs "
                             f"{big.family}/{big.link}); fit both with the same one")
        if small.nobs != big.nobs:
            raise ValueError(f"lr_test: the models were fitted on {small.nobs} and {big.nobs} records; fit both on "
                             "the same records (e.g. complete cases of every variable, completeCasesDS)")
        extra = set(small.names) - set(big.names)
        if extra or small.df_model == big.df_model:
            raise ValueError(f"lr_test: {small.formula!r} is not nested in {big.formula!r}"
                             + (f" (terms {', '.join(sorted(extra))} are not in the larger model)" if extra else ""))
        diff = small.deviance - big.deviance
        statistic = diff / big.dispersion
        df = big.df_model - small.df_model
        return LRTest(statistic, float(stats.chi2.sf(statistic, df)), df, diff, small.formula, big.formula)

    def model(self) -> GLMModel:
        """The fitted model as a model file's content (formula, family, link, coefficients: no code)."""
        return GLMModel(self.formula, self.family, self.link, dict(zip(self.names, map(float, self.params))))

    def predict(self, session: FederatedSession, data: str | Ref, *, into: str | None = None,
                type: str = "response") -> Ref:
        """Apply the fitted model at every site to the table ``data`` as the new vector ``into`` (a
        fresh name if None): uploads the model (:func:`~dsfed_client.models.upload_model`; a site
        accepts it where ``models.analyst_glm`` allows a GLM of the analyst's own, or its board
        approved the digest) and assigns ``predictDS(data, <digest>, type)``. ``type``:
        ``"response"`` (:math:`g^{-1}(x^T\\hat\\beta)`) or ``"link"`` (:math:`x^T\\hat\\beta`), as R's
        ``predict.glm``. Returns the vector's handle; nothing leaves the sites."""
        model = self.model()
        upload_model(session, model)
        return ds_predict(session, data, model.sha256, into or session.new_symbol("pred"), type=type)

    def plot(self, ax: Any = None, *, alpha: float = 0.05) -> Any:
        """A forest plot of the coefficients with their Wald intervals; returns the matplotlib Axes."""
        from dsfed_client.plots import plot_coefficients  # noqa: PLC0415

        ax = plot_coefficients(self.names, self.params.to_numpy(), self.conf_int(alpha).to_numpy(), ax=ax)
        ax.set_title(f"{self.formula} ({self.family}/{self.link})")
        return ax


@dataclass(frozen=True)
class _Parts:
    """The summed IRLS parts of one round (what the analyst needs, whichever way it was summed)."""

    names: tuple[str, ...]
    link: str
    info: np.ndarray
    xwz: np.ndarray
    dev: float
    n: int


UNPINNED_NOTE = ("ds_glm sent these coefficients because the sites have pinned no peers ([federation] keys): "
                 "without them the sites cannot derive the iterates from each other's sealed parts, so each site "
                 "evaluates the analyst's coefficients under its own rules and counts every iterate. To fit without "
                 "that count, ask the sites' governance to pin each other's identity keys (docs/site-admin.md); "
                 "until then fit fewer coefficients, over more records, or each site alone (ds.glmSLMA)")
ANALYST_ITERATES = ("every iterate sent by the client to every site and evaluated there (DataSHIELD's ds.glm "
                    "protocol): the sites have pinned no peers to derive the iterates with")


def _parts_stream(agg: Aggregation, *args: Any, link: str | None, xlev: list[str] | None = None
                  ) -> Generator[_Parts, np.ndarray, None]:
    """The summed parts at each iterate of Fisher scoring, starting from R's ``mustart``.

    The sites sum their parts among themselves, release the sums and derive every iterate
    :math:`\\beta^{(t+1)} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k` themselves (Wu et al. 2012), so
    the analyst chooses no coefficient: under :class:`~dsfed_client.aggregation.Pooled`, a pooled protocol (counts
    checked pooled over the sites); otherwise a relayed one (each site checks its own counts)."""
    for release in agg.steps("glmDS2", *args, link=link, frac_bits=24, **({"xlev": xlev} if xlev else {})):
        yield _Parts(tuple(release["coef.names"]), release["link"], np.asarray(release["info.matrix"], dtype=float),
                     np.asarray(release["xwz"], dtype=float), float(release["dev"]), int(round(release["Npositive"])))


def _analyst_stream(session: FederatedSession, formula: Formula, family: str, offset: str | None,
                    weights: str | None, table: Ref, *, link: str | None, xlev: list[str] | None = None
                    ) -> Generator[_Parts, np.ndarray, None]:
    """The summed parts at each iterate the client sends (DataSHIELD's ``ds.glm`` protocol, Wu et al. 2012):
    every site evaluates ``glmDS2`` at the coefficients it is sent (first at R's ``mustart``) and releases its
    own parts, which the client sums; the next coefficients are sent back in (``generator.send``). Where the
    sites have pinned no peers they cannot derive the iterates from parts the others sealed for them; each site
    then applies its rules for coefficients from the analyst (``disclosure.glm_analyst_coefficients``,
    ``glm_max_linear_predictor``) and counts each iterate's parts (``disclosure.sums_per_record``)."""
    beta: np.ndarray | None = None
    while True:
        try:
            sent = None if beta is None else [float(b) for b in beta]
            answers = session.aggregate("glmDS2", formula, family, sent, offset, weights, table, link=link,
                                        **({"xlev": xlev} if xlev else {}))
        except FederatedCallError as exc:
            exc.add_note(UNPINNED_NOTE)
            raise
        first = next(iter(answers.values()))
        beta = yield _Parts(
            tuple(first["coef.names"]), first["link"],
            sum(np.asarray(a["info.matrix"], dtype=float) for a in answers.values()),
            sum(np.asarray(a["xwz"], dtype=float) for a in answers.values()),
            float(sum(a["dev"] for a in answers.values())), int(sum(a["Npositive"] for a in answers.values())))


def _unpinned(exc: FederatedCallError) -> bool:
    """Whether the sites refused a relayed fit only because they have not pinned each other's identity keys."""
    return all(f.rule == "secure_aggregation.peers" and NOT_A_PEER in f.message for f in exc.failures.values())


@validate_params({
    "family": [Options({"binomial", "poisson", "gaussian"})],
    "link": [Options({"logit", "probit", "log", "identity"}), None],
    "epsilon": [Interval(float, 0, 1, closed="neither")], "maxit": [Interval(int, 1, 1000)],
})
def ds_glm(
    session: FederatedSession,
    formula: str,
    data: str | Ref,
    *,
    family: str = "binomial",
    link: str | None = None,
    weights: str | None = None,
    offset: str | None = None,
    epsilon: float = 1e-8,
    maxit: int = 25,
    secure: bool | None = False,
    null_model: bool = True,
) -> GLMResults:
    """Fit ``formula`` on the table symbol ``data`` at every site of ``session`` without pooling records.

    Parameters
    ----------
    formula : str
        R model formula, e.g. ``"y ~ age + tgrade"``.
    data : str or Ref
        Name of the table symbol assigned at every site, or its handle (as ``assign`` returns it).
    family, link : str
        ``binomial`` (``logit``, ``probit``), ``poisson`` (``log``) or
        ``gaussian`` (``identity``).
    weights, offset : str, optional
        Columns of ``data`` holding prior weights and offsets.
    secure : bool or None
        Either way the sites sum their parts among themselves, release only the sums and derive
        every iterate themselves (Wu et al. 2012), so no coefficient of the analyst's choosing is
        involved; except that with ``False``, where the sites have pinned no peers (no
        ``[federation]`` keys, docs/site-admin.md), the client sends every iterate and sums each
        site's parts, as DataSHIELD's ``ds.glm`` does (each site's rules on analyst coefficients
        apply; ``analyst_iterates`` says so). ``True``: a pooled protocol under secure aggregation,
        the sites checking the pooled counts (records, factor levels, saturation) against their rules; ``False``: a
        relayed protocol, each site checking its own counts (any number of sites); ``None``: pooled
        where every site offers it (:meth:`FederatedSession.aggregation`). The parts travel
        in fixed point: the first round with 24 fraction bits, the next ones with as many as the
        summed parts leave room for (up to 40, chosen alike at every site), so the fit equals the
        pooled one to about :math:`2^{-f}` times the information matrix's condition number.
    epsilon, maxit : float, int
        R's convergence rule (``glm.control``): stop when
        :math:`|D^{(t)} - D^{(t-1)}| / (|D^{(t)}| + 0.1) < \\epsilon`, at most ``maxit`` iterations.
    null_model : bool
        Also fit the intercept-only model (same weights and offset) for ``null_deviance``, as R's
        ``glm`` reports it: a second distributed fit of a few rounds. Given only when both models
        have the same records (no covariate missing), else ``null_note`` says why.

    Returns
    -------
    GLMResults

    Raises
    ------
    InvalidParameterError
        A parameter outside its constraints, before any site is contacted.
    ConvergenceError
        No convergence within ``maxit`` iterations.

    References
    ----------
    Wu, Jiang, Kim, Ohno-Machado (2012), "Preserving Institutional Privacy in Distributed Binary
    Logistic Regression", §2: Newton-Raphson on summed Hessians and gradients.
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Distributed GLM" (Fisher scoring on summed parts).
    """
    if family == "gaussian" and link not in (None, "identity"):
        raise ValueError("gaussian models are fitted with the identity link only")
    table = data if isinstance(data, Ref) else Ref(data)
    agg = session.aggregation(secure)
    try:
        fit = _fit(session, agg, formula, table, family, link, weights, offset, epsilon, maxit)
    except FederatedCallError as exc:
        xlev = _union_levels(session, formula, table) if _shapes_differ(exc) else []
        if not xlev:
            raise
        fit = _fit(session, agg, formula, table, family, link, weights, offset, epsilon, maxit, xlev)
    if not null_model:
        return fit
    parsed = parse_formula(formula)
    if not parsed.intercept:
        return replace(fit, null_note="Null deviance not fitted: the model has no intercept")
    if fit.names == ("(Intercept)",):
        return replace(fit, null_deviance=fit.deviance)
    null = _fit(session, agg, f"{parsed.response} ~ 1", table, fit.family, fit.link, weights, offset, epsilon, maxit)
    if null.nobs != fit.nobs:
        return replace(fit, null_note=f"Null deviance not given: the intercept-only model has {null.nobs} records, "
                                      f"the model {fit.nobs} (missing covariates); fit on complete cases for it")
    return replace(fit, null_deviance=null.deviance)


def _shapes_differ(exc: FederatedCallError) -> bool:
    """Whether the sites refused a fit only because their parts had different shapes."""
    return all(f.rule == "secure_aggregation.peers" and SHAPES_DIFFER in f.message for f in exc.failures.values())


def _union_levels(session: FederatedSession, formula: str, table: Ref) -> list[str]:
    """``glmDS2``'s ``xlev`` for the formula's factors whose levels differ between sites: each the
    union of the levels the sites declare (``levelsDS``), in the order of a site that declares them
    all where those agree, else sorted (R's ``factor`` of the pooled values); [] if none differ."""
    xlev = []
    variables = dict.fromkeys(v for term in parse_formula(formula).terms for v in term.variables if "(" not in v)
    for variable in variables:
        column = Ref(variable if "$" in variable else f"{table.symbol}${variable}")
        try:
            if any(cls != "factor" for cls in session.aggregate("classDS", column).values()):
                continue
            per_site = [list(r["Levels"]) for r in session.aggregate("levelsDS", column).values()]
        except FederatedCallError:
            continue
        if all(levels == per_site[0] for levels in per_site):
            continue
        union = set().union(*per_site)
        orders = {tuple(levels) for levels in per_site if set(levels) == union}
        ordered = list(orders.pop()) if len(orders) == 1 else sorted(union)
        xlev.append(f"{variable}={','.join(ordered)}")
    return xlev


def _fit(session: FederatedSession, agg: Aggregation, formula: str, table: Ref, family: str, link: str | None,
         weights: str | None, offset: str | None, epsilon: float, maxit: int, xlev: list[str] | None = None
         ) -> GLMResults:
    """One distributed Fisher scoring run (R's ``glm.fit`` path and stopping rule); the progress
    bar counts its rounds and ends at the round it converged in. ``xlev``: the factors' levels,
    the same at every site (:func:`_union_levels`)."""
    stream = _parts_stream(agg, Formula(formula), family, None, offset, weights, table, link=link, xlev=xlev)
    analyst = False
    try:
        summed = next(stream)
    except FederatedCallError as exc:  # a plain fit over sites without peers: the analyst's iterates, per site
        if not (agg.per_site_parts and _unpinned(exc)):
            raise
        stream, analyst = _analyst_stream(session, Formula(formula), family, offset, weights, table, link=link,
                                          xlev=xlev), True
        summed = next(stream)
    beta, info_used, iteration, summed = _scoring(stream, summed, formula, epsilon, maxit)
    n, dev = summed.n, summed.dev
    df_resid = n - len(summed.names)
    dispersion = dev / df_resid if family == "gaussian" else 1.0
    return GLMResults(
        formula=formula, family=family, link=summed.link, names=summed.names, params=beta,
        cov_params_=np.linalg.inv(info_used) * dispersion, deviance=dev, dispersion=dispersion,
        nobs=n, df_resid=df_resid, iterations=iteration, sites=tuple(session.sites), pooled=agg.pooled,
        weighted=weights is not None, analyst_iterates=analyst,
    )


def _scoring(stream: Generator[_Parts, np.ndarray, None], summed: _Parts, formula: str, epsilon: float, maxit: int
             ) -> tuple[np.ndarray, np.ndarray, int, _Parts]:
    """Fisher scoring from the parts ``summed`` at R's ``mustart`` (R's ``glm.fit`` path and stopping rule), each
    next iterate sent into ``stream`` for its parts: the coefficients, the information matrix they were solved
    with, the iterations and the parts at the coefficients. The progress bar counts the rounds."""
    info, xwz, dev_old = summed.info, summed.xwz, summed.dev
    with progress(f"GLM {formula}: Fisher scoring", total=maxit) as bar:
        for iteration in range(1, maxit + 1):
            beta = np.linalg.solve(info, xwz)
            summed = stream.send(beta)
            info_used = info
            info, xwz, dev = summed.info, summed.xwz, summed.dev
            bar.advance()
            if abs(dev - dev_old) / (abs(dev) + 0.1) < epsilon:
                bar.update(total=iteration, description=f"GLM {formula}: converged")
                break
            dev_old = dev
        else:
            stream.close()
            raise ConvergenceError(f"the GLM {formula} did not converge in {maxit} iterations")
    stream.close()
    return beta, info_used, iteration, summed


def _probit_rows(x: np.ndarray, u: np.ndarray, w: np.ndarray) -> Generator[_Parts, np.ndarray, None]:
    """The parts of the binomial probit GLM ``u ~ x`` over rows of prior weights ``w`` the analyst holds, first at
    R's ``mustart`` :math:`(w u + 1/2) / (w + 1)`, then at each coefficient vector sent; rows of weight 0 left out
    (R's ``glm.fit``; its probit link keeps the linear predictor within :math:`\\pm\\Phi^{-1}(1 - \\epsilon_{mach})`
    and :math:`\\phi(\\eta)` at least :math:`\\epsilon_{mach}`)."""
    good = w > 0
    x, u, w = x[good], u[good].astype(float), w[good]
    design, eps = np.column_stack([np.ones(x.size), x]), np.finfo(float).eps
    eta = stats.norm.ppf((w * u + 0.5) / (w + 1.0))
    while True:
        mu = stats.norm.cdf(np.clip(eta, stats.norm.ppf(eps), -stats.norm.ppf(eps)))
        mu_eta = np.maximum(stats.norm.pdf(eta), eps)
        weight = w * mu_eta**2 / (mu * (1.0 - mu))
        z = eta + (u - mu) / mu_eta
        dev = -2.0 * float(np.sum(w * np.where(u > 0, np.log(mu), np.log1p(-mu))))
        beta = yield _Parts(("(Intercept)", "x"), "probit", design.T @ (weight[:, None] * design),
                            design.T @ (weight * z), dev, int(good.sum()))
        eta = design @ beta


def probit_fit(x: np.ndarray, u: np.ndarray, w: np.ndarray, epsilon: float = 1e-8, maxit: int = 25) -> GLMResults:
    """R's ``glm(u ~ x, family = binomial("probit"), weights = w)`` on rows the analyst holds (a post-processing of
    released counts: no site is asked), by the Fisher scoring of :func:`ds_glm`."""
    stream = _probit_rows(np.asarray(x, dtype=float), np.asarray(u), np.asarray(w, dtype=float))
    beta, info_used, iteration, summed = _scoring(stream, next(stream), "u ~ x", epsilon, maxit)
    return GLMResults(formula="u ~ x", family="binomial", link="probit", names=summed.names, params=beta,
                      cov_params_=np.linalg.inv(info_used), deviance=summed.dev, dispersion=1.0, nobs=summed.n,
                      df_resid=summed.n - 2, iterations=iteration, weighted=True)
