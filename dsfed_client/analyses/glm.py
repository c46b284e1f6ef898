"""Distributed GLM by Fisher scoring on summed site parts (seed 000 "Distributed GLM";
seed 002 §2, Newton-Raphson on summed Hessians and gradients).

Each round every site computes :math:`X_k^T W_k X_k`, :math:`X_k^T W_k z_k` and its deviance
(registry entry ``glmDS2``); the sites sum them among themselves (the analyst relays sealed
vectors, :mod:`dsfed_server.disclosure.relay`), release the sums, and each derives

.. math:: \\beta^{(t+1)} = \\Big(\\sum_k X_k^T W_k X_k\\Big)^{-1} \\sum_k X_k^T W_k z_k ,

itself (rule 3: the analyst sends no coefficient, so none can saturate the linear predictor into a
step around one record), starting, as R's ``glm.fit`` does, from the family's ``mustart``, and stops when
:math:`|D^{(t)} - D^{(t-1)}| / (|D^{(t)}| + 0.1) < \\epsilon` (R's rule,
``epsilon = 1e-8``, ``maxit = 25``). Without noise the result is R's ``glm``
fit on the pooled data: the same path, step by step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Iterator

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_client.aggregation import Aggregation
from dsfed_client.calls import Formula, Ref
from dsfed_client.params import ALPHA, Interval, Options, validate_params
from dsfed_client.progress import progress
from dsfed_client.results import Results, derived, hidden, render, result, stat
from dsfed_client.session import FederatedSession


class ConvergenceError(RuntimeError):
    """The distributed fit did not converge within ``maxit`` iterations."""


@result
class GLMResults(Results):
    """A fitted distributed GLM, in the shape statsmodels' GLM results take: ``params``, ``bse``,
    ``cov_params()``, ``conf_int(alpha)``, ``pvalues``, ``summary()``.

    References
    ----------
    Wu et al. (2012), seed 002 §2: Newton-Raphson on the summed site Hessians and gradients.
    Schalk, Rehms et al. (2024), seed 000, "Distributed GLM". R's ``glm.fit`` (the path followed)
    and ``summary.glm`` (z or t statistics).
    """

    _title: ClassVar[str] = "Distributed Generalized Linear Model Results"

    formula: str = stat("Formula", brief="")
    family: str = stat("Family", brief="")
    link: str = stat("Link", brief="")
    names: tuple[str, ...] = hidden()
    params: np.ndarray = hidden()
    cov_params_: np.ndarray = hidden()
    deviance: float = stat("Deviance")
    dispersion: float = stat("Dispersion")
    nobs: int = stat("No. observations", brief="")
    df_resid: int = stat("Df residuals")
    iterations: int = stat("Iterations (distributed IRLS)")
    sites: tuple[str, ...] = stat("Sites", default=())  # the sites the parts were summed over (only their sums)
    pooled: bool = stat("Counts checked pooled", default=False)  # pooled over the sites (True) or per site

    @property
    def bse(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov_params_))

    @property
    def uses_t(self) -> bool:
        """Estimated dispersion (gaussian): t statistics on ``df_resid``, as R's ``summary.glm``."""
        return self.family == "gaussian"

    @property
    def statistic(self) -> np.ndarray:
        return self.params / self.bse

    @property
    def pvalues(self) -> np.ndarray:
        if self.uses_t:
            return 2 * stats.t.sf(np.abs(self.statistic), self.df_resid)
        return 2 * stats.norm.sf(np.abs(self.statistic))

    @derived()
    def coefficients(self) -> dict[str, float]:
        """The coefficients by term name."""
        return dict(zip(self.names, self.params.tolist()))

    def cov_params(self) -> np.ndarray:
        return self.cov_params_.copy()

    @validate_params({"alpha": ALPHA})
    def conf_int(self, alpha: float = 0.05) -> np.ndarray:
        """Wald intervals :math:`\\hat\\beta \\pm z_{1-\\alpha/2}\\,\\mathrm{se}` (R's ``confint.default``)."""
        q = stats.norm.ppf(1 - alpha / 2)
        return np.column_stack([self.params - q * self.bse, self.params + q * self.bse])

    @validate_params({"alpha": ALPHA})
    def to_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        """One row per term: ``coef``, ``std err``, ``z`` (``t``), ``P>|z|``, ``ci_lower``, ``ci_upper``
        (``frame.attrs["alpha"]``)."""
        ci = self.conf_int(alpha)
        label = "t" if self.uses_t else "z"
        frame = pd.DataFrame(
            {"coef": self.params, "std err": self.bse, label: self.statistic, f"P>|{label}|": self.pvalues,
             "ci_lower": ci[:, 0], "ci_upper": ci[:, 1]},
            index=pd.Index(list(self.names), name="term"),
        )
        frame.attrs["alpha"] = alpha
        return frame

    def _table(self) -> pd.DataFrame:
        return self.to_frame()

    @validate_params({"alpha": ALPHA})
    def summary(self, alpha: float = 0.05) -> str:
        """A statsmodels-style text table: the fit's header, then one row per coefficient."""
        return render(self._title, self._rows(), table=self.to_frame(alpha), notes=(
            f"{1 - alpha:.0%} Wald intervals; every iterate derived by the sites from summed parts",))

    def plot(self, ax: Any = None, *, alpha: float = 0.05) -> Any:
        """A forest plot of the coefficients with their Wald intervals; returns the matplotlib Axes."""
        from dsfed_client.plots import plot_coefficients  # noqa: PLC0415

        ax = plot_coefficients(self.names, self.params, self.conf_int(alpha), ax=ax)
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


def _parts_stream(agg: Aggregation, *args: Any, link: str | None) -> Iterator[_Parts]:
    """The summed parts at each iterate of Fisher scoring, starting from R's ``mustart``.

    The sites sum their parts among themselves, release the sums and derive every iterate
    :math:`\\beta^{(t+1)} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k` themselves (seed 002), so
    the analyst chooses no coefficient: under :class:`~dsfed_client.aggregation.Pooled`, a pooled protocol (counts checked pooled over the
    sites); otherwise a relayed one (each site checks its own counts)."""
    for release in agg.steps("glmDS2", *args, link=link, frac_bits=24):
        yield _Parts(tuple(release["coef.names"]), release["link"], np.asarray(release["info.matrix"], dtype=float),
                     np.asarray(release["xwz"], dtype=float), float(release["dev"]), int(round(release["Npositive"])))


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
        every iterate themselves (seed 002), so no coefficient of the analyst's choosing is
        involved. ``True``: a pooled protocol under secure aggregation, the sites checking the
        pooled counts (records, factor levels, saturation) against their rules; ``False``: a
        relayed protocol, each site checking its own counts (any number of sites); ``None``: pooled
        where every site offers it (:meth:`FederatedSession.aggregation`). The parts travel
        in fixed point: the first round with 24 fraction bits, the next ones with as many as the
        summed parts leave room for (up to 40, chosen alike at every site), so the fit equals the
        pooled one to about :math:`2^{-f}` times the information matrix's condition number.
    epsilon, maxit : float, int
        R's convergence rule (``glm.control``): stop when
        :math:`|D^{(t)} - D^{(t-1)}| / (|D^{(t)}| + 0.1) < \\epsilon`, at most ``maxit`` iterations.

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
    Logistic Regression" (seed 002), §2: Newton-Raphson on summed Hessians and gradients.
    Schalk, Rehms et al. (2024), seed 000, "Distributed GLM" (Fisher scoring on summed parts).
    """
    if family == "gaussian" and link not in (None, "identity"):
        raise ValueError("gaussian models are fitted with the identity link only")
    table = data if isinstance(data, Ref) else Ref(data)
    agg = session.aggregation(secure)
    stream = _parts_stream(agg, Formula(formula), family, None, offset, weights, table, link=link)
    summed = next(stream)
    names, info, xwz, dev_old = summed.names, summed.info, summed.xwz, summed.dev
    with progress(f"GLM {formula}: Fisher scoring", total=maxit) as bar:
        for iteration in range(1, maxit + 1):
            beta = np.linalg.solve(info, xwz)
            summed = next(stream)
            info_used = info
            info, xwz, dev = summed.info, summed.xwz, summed.dev
            bar.advance()
            if abs(dev - dev_old) / (abs(dev) + 0.1) < epsilon:
                break
            dev_old = dev
        else:
            stream.close()
            raise ConvergenceError(f"the distributed GLM did not converge in {maxit} iterations")
    stream.close()
    n = summed.n
    df_resid = n - len(names)
    dispersion = dev / df_resid if family == "gaussian" else 1.0
    return GLMResults(
        formula=formula, family=family, link=summed.link, names=names, params=beta,
        cov_params_=np.linalg.inv(info_used) * dispersion, deviance=dev, dispersion=dispersion,
        nobs=n, df_resid=df_resid, iterations=iteration, sites=tuple(session.sites), pooled=agg.pooled,
    )
