"""Distributed GLM by Fisher scoring on summed site parts (seed 000 "Distributed GLM";
seed 002 §2, Newton-Raphson on summed Hessians and gradients).

Each round the analyst sends the current coefficients; every site returns
:math:`X_k^T W_k X_k`, :math:`X_k^T W_k z_k` and its deviance (registry entry
``glmDS2``); the analyst sums them and solves

.. math:: \\beta^{(t+1)} = \\Big(\\sum_k X_k^T W_k X_k\\Big)^{-1} \\sum_k X_k^T W_k z_k ,

starting, as R's ``glm.fit`` does, from the family's ``mustart``, and stops when
:math:`|D^{(t)} - D^{(t-1)}| / (|D^{(t)}| + 0.1) < \\epsilon` (R's rule,
``epsilon = 1e-8``, ``maxit = 25``). Without noise the result is R's ``glm``
fit on the pooled data: the same path, step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_client.calls import Formula, Ref
from dsfed_client.progress import progress
from dsfed_client.session import FederatedSession


class ConvergenceError(RuntimeError):
    """The distributed fit did not converge within ``maxit`` iterations."""


@dataclass(frozen=True)
class GLMResults:
    """A fitted distributed GLM, in the shape statsmodels' GLM results take."""

    formula: str
    family: str
    link: str
    names: tuple[str, ...]
    params: np.ndarray
    cov_params_: np.ndarray
    deviance: float
    dispersion: float
    nobs: int
    df_resid: int
    iterations: int
    per_site_n: dict[str, int] = field(default_factory=dict)  # empty under secure aggregation
    secure_sites: tuple[str, ...] = ()  # the sites of a secure sum (only sums over them were seen)

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

    def cov_params(self) -> np.ndarray:
        return self.cov_params_.copy()

    def conf_int(self, alpha: float = 0.05) -> np.ndarray:
        """Wald intervals :math:`\\hat\\beta \\pm z_{1-\\alpha/2}\\,\\mathrm{se}` (R's ``confint.default``)."""
        q = stats.norm.ppf(1 - alpha / 2)
        return np.column_stack([self.params - q * self.bse, self.params + q * self.bse])

    def to_frame(self, alpha: float = 0.05) -> pd.DataFrame:
        ci = self.conf_int(alpha)
        label = "t" if self.uses_t else "z"
        return pd.DataFrame(
            {"coef": self.params, "std err": self.bse, label: self.statistic, f"P>|{label}|": self.pvalues,
             f"[{alpha / 2:g}": ci[:, 0], f"{1 - alpha / 2:g}]": ci[:, 1]},
            index=list(self.names),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "formula": self.formula, "family": self.family, "link": self.link,
            "coefficients": dict(zip(self.names, self.params.tolist())),
            "std_errors": dict(zip(self.names, self.bse.tolist())),
            "pvalues": dict(zip(self.names, self.pvalues.tolist())),
            "conf_int": {n: ci for n, ci in zip(self.names, self.conf_int().tolist())},
            "deviance": self.deviance, "dispersion": self.dispersion, "nobs": self.nobs,
            "df_resid": self.df_resid, "iterations": self.iterations, "per_site_n": self.per_site_n,
            "secure_sites": list(self.secure_sites),
        }

    def summary(self, alpha: float = 0.05) -> str:
        """A statsmodels-style text table: the fit's header, then one row per coefficient."""
        rows = [
            ("Formula", self.formula, "No. observations", str(self.nobs)),
            ("Family", self.family, "Df residuals", str(self.df_resid)),
            ("Link", self.link, "Sites", str(len(self.per_site_n) or len(self.secure_sites))),
            ("Method", "distributed IRLS", "Deviance", f"{self.deviance:.6g}"),
            ("Iterations", str(self.iterations), "Dispersion", f"{self.dispersion:.6g}"),
        ]
        table = self.to_frame(alpha).to_string(float_format=lambda v: f"{v:.6g}")
        width = max(78, max(len(line) for line in table.splitlines()))
        head = "\n".join(f"{a + ':':<18}{b:<22}{c + ':':>22}{d:>14}" for a, b, c, d in rows)
        sites = ", ".join(f"{s} {n}" for s, n in self.per_site_n.items())
        if self.secure_sites:
            sites = f"not released (secure sums over {', '.join(self.secure_sites)})"
        return "\n".join([
            "Distributed Generalized Linear Model Results".center(width), "=" * width, head, "=" * width, table,
            "=" * width, f"n per site: {sites}" if sites else "",
        ]).rstrip() + "\n"

    def __repr__(self) -> str:
        coefs = ", ".join(f"{n}={v:.4g}" for n, v in zip(self.names, self.params))
        return f"GLMResults({self.formula!r}, {self.family}/{self.link}, n={self.nobs}, {coefs})"

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
    per_site_n: dict[str, int]


def _parts(results: list[dict[str, Any]], per_site_n: dict[str, int]) -> _Parts:
    """The summed IRLS parts from every site's ``glmDS2`` answer (or from one pooled release)."""
    names = tuple(results[0]["coef.names"])
    if any(tuple(r["coef.names"]) != names for r in results):
        raise ValueError("sites build different design matrices (a factor's levels differ between sites)")
    info = sum(np.asarray(r["info.matrix"], dtype=float) for r in results)
    xwz = sum(np.asarray(r["xwz"], dtype=float) for r in results)
    return _Parts(names, results[0]["link"], np.asarray(info), np.asarray(xwz), float(sum(r["dev"] for r in results)),
                  int(round(sum(r["Npositive"] for r in results))), per_site_n)


def _parts_stream(session: FederatedSession, secure: bool, *args: Any, link: str | None) -> Iterator[_Parts]:
    """The summed parts at each iterate of Fisher scoring, starting from R's ``mustart``.

    Per site: the analyst sends each iterate :math:`\\beta^{(t+1)} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k`.
    ``secure``: a pooled protocol (``glmDS2`` without coefficients): the sites pool their parts among
    themselves, release the sums and derive every iterate themselves, so the analyst sees only sums
    and chooses no coefficient."""
    if secure:
        for release in session.pooled_steps("glmDS2", *args, link=link, frac_bits=24):
            yield _parts([release], {})
        return
    beta: list[float] | None = None
    while True:
        results = session.aggregate("glmDS2", args[0], args[1], beta, *args[3:], link=link)
        summed = _parts(list(results.values()), {site: int(r["Nvalid"]) for site, r in results.items()})
        yield summed
        beta = [float(b) for b in np.linalg.solve(summed.info, summed.xwz)]


def ds_glm(
    session: FederatedSession,
    formula: str,
    data: str,
    *,
    family: str = "binomial",
    link: str | None = None,
    weights: str | None = None,
    offset: str | None = None,
    epsilon: float = 1e-8,
    maxit: int = 25,
    secure: bool = False,
) -> GLMResults:
    """Fit ``formula`` on the table symbol ``data`` at every site of ``session`` without pooling records.

    Parameters
    ----------
    formula : str
        R model formula, e.g. ``"y ~ age + tgrade"``.
    data : str
        Name of the table symbol assigned at every site.
    family, link : str
        ``binomial`` (``logit``, ``probit``), ``poisson`` (``log``) or
        ``gaussian`` (``identity``).
    weights, offset : str, optional
        Columns of ``data`` holding prior weights and offsets.
    secure : bool
        A pooled protocol under secure aggregation (seed 002): the sites pool their parts among
        themselves, check the pooled counts (records, factor levels, saturation) against their
        rules, release only the sums and derive every iterate themselves, so no site's parts, no
        per-site count and no coefficient of the analyst's choosing are involved. The parts travel
        in fixed point: the first round with 24 fraction bits, the next ones with as many as the
        pooled sums leave room for (up to 40, chosen alike at every site), so the fit equals the
        pooled one to about :math:`2^{-f}` times the information matrix's condition number.
    """
    if family == "gaussian" and link not in (None, "identity"):
        raise ValueError("gaussian models are fitted with the identity link only")
    stream = _parts_stream(session, secure, Formula(formula), family, None, offset, weights, Ref(data), link=link)
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
        nobs=n, df_resid=df_resid, iterations=iteration, per_site_n=summed.per_site_n,
        secure_sites=tuple(session.sites) if secure else (),
    )
