"""Random-effects meta-analysis of per-site estimates: pooled estimate, tau^2, I^2, H^2, Q and the
prediction interval (pure functions of estimates and standard errors; no site is asked anything).

The model is :math:`y_i = \\mu + u_i + e_i`, :math:`u_i \\sim N(0, \\tau^2)`,
:math:`e_i \\sim N(0, v_i)` with :math:`v_i` the squared standard error of site i's estimate.
Given :math:`\\hat\\tau^2`, :math:`w_i = 1/(v_i + \\hat\\tau^2)`,
:math:`\\hat\\mu = \\sum w_i y_i / \\sum w_i` and :math:`SE(\\hat\\mu) = (\\sum w_i)^{-1/2}`; the
interval is :math:`\\hat\\mu \\pm z_{1-\\alpha/2} SE` (metafor's ``rma`` default, ``test = "z"``).

:math:`\\tau^2` by REML (Viechtbauer 2005; metafor's default: Fisher scoring with step halving,
truncated at 0) or by DerSimonian & Laird (1986). :math:`Q = \\sum_i (y_i - \\hat\\mu_{FE})^2 / v_i`
on k - 1 df; :math:`I^2 = \\hat\\tau^2 / (\\hat\\tau^2 + \\tilde v)` and
:math:`H^2 = (\\hat\\tau^2 + \\tilde v) / \\tilde v` with the "typical" within-site variance
:math:`\\tilde v = (k-1)\\sum w_i / ((\\sum w_i)^2 - \\sum w_i^2)`, :math:`w_i = 1/v_i` (Higgins &
Thompson 2002, eq. 9, in the form metafor reports for every tau^2 estimator; under DL it equals
:math:`(Q - (k-1))/Q`).

Prediction interval for the estimate at a new site: ``prediction="normal"`` (the default, as
metafor's ``predict.rma``): :math:`\\hat\\mu \\pm z_{1-\\alpha/2}\\sqrt{\\hat\\tau^2 + SE^2}`;
``prediction="t"`` (Riley, Higgins & Deeks 2011, eq. 1; what metamisc's ``valmeta`` reports):
:math:`t_{k-2}` in place of z, which widens it for few sites and needs k >= 3.

References
----------
DerSimonian R, Laird N (1986), Meta-analysis in clinical trials, Control Clin Trials 7:177-188.
Viechtbauer W (2005), Bias and efficiency of meta-analytic variance estimators in the random-effects
model, J Educ Behav Stat 30:261-293 (REML, Fisher scoring). Higgins JPT, Thompson SG (2002),
Quantifying heterogeneity in a meta-analysis, Stat Med 21:1539-1558 (I^2, H^2). Riley RD, Higgins JPT,
Deeks JJ (2011), Interpretation of random effects meta-analyses, BMJ 342:d549 (prediction interval).
Viechtbauer W (2010), metafor, J Stat Softw 36(3) (``rma``, ``predict.rma``).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import pandas as pd
from scipy import special, stats

from dsfed_client.params import ALPHA, Options, validate_params
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat

REML_TOLERANCE = 1e-10  # on the change of tau^2 between Fisher-scoring steps (metafor: 1e-5)
REML_MAXIT = 1000


def tau2_dl(y: np.ndarray, v: np.ndarray) -> float:
    """DerSimonian & Laird (1986) moment estimator, truncated at 0:
    :math:`\\max(0, (Q - (k-1)) / (\\sum w - \\sum w^2 / \\sum w))`, :math:`w = 1/v`.

    >>> round(tau2_dl(np.array([0.0, 1.0, 2.0]), np.array([0.1, 0.1, 0.1])), 10)  # Q = 20
    0.9
    """
    w = 1.0 / v
    mu = np.sum(w * y) / np.sum(w)
    q = float(np.sum(w * (y - mu) ** 2))
    return max(0.0, float((q - (y.size - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w))))


def tau2_reml(y: np.ndarray, v: np.ndarray, *, tol: float = REML_TOLERANCE, maxit: int = REML_MAXIT) -> float:
    """REML by Fisher scoring (Viechtbauer 2005, as metafor's ``rma.uni``): with
    :math:`W = \\mathrm{diag}(1/(v_i + \\tau^2))` and :math:`P = W - W 1 (1^T W 1)^{-1} 1^T W`,
    :math:`\\tau^2 \\leftarrow \\tau^2 + (y^T P P y - \\mathrm{tr} P) / \\mathrm{tr}(P P)`, the step
    halved while it would leave :math:`\\tau^2 < 0`, from the DL estimate, until the change is below
    ``tol``; truncated at 0 (0 at once where the score is not positive at 0, which metafor reaches
    by halving steps towards it).

    Three equal variances: REML is the sample variance less v (here 1 - 0.1):

    >>> round(tau2_reml(np.array([0.0, 1.0, 2.0]), np.array([0.1, 0.1, 0.1])), 8)
    0.9
    """
    def scoring_step(tau2: float) -> float:
        w = 1.0 / (v + tau2)
        P = np.diag(w) - np.outer(w, w) / np.sum(w)
        PP = P @ P
        return float((y @ PP @ y - np.trace(P)) / np.trace(PP))

    if scoring_step(0.0) <= 0.0:  # the restricted likelihood falls from 0 on: the estimate is 0
        return 0.0
    tau2 = tau2_dl(y, v)
    for _ in range(maxit):
        step = scoring_step(tau2)
        while tau2 + step < 0.0:
            step /= 2.0
        tau2 += step
        if abs(step) < tol:
            return max(0.0, float(tau2))
    raise RuntimeError(f"REML estimation of tau^2 did not converge in {maxit} Fisher-scoring steps; "
                       "use method='DL'")


TAU2: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {"REML": tau2_reml, "DL": tau2_dl}
# scales the estimates are pooled on: name -> (to the scale, back to the measure's own)
SCALES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "identity": (lambda x: x, lambda x: x),
    "logit": (special.logit, special.expit),
    "log": (np.log, np.exp),
}


@result
class MetaAnalysis(Results):
    """A random-effects meta-analysis of k per-site estimates ``yi`` with standard errors ``sei`` on
    the pooling ``scale`` (``identity``, ``logit``, ``log``); ``estimate``, ``ci`` and ``pi`` are on that
    scale, ``back`` gives them on the measure's own (an AUC, an O/E ratio). ``to_frame`` has one row
    per site and the pooled row, on the measure's own scale.

    References
    ----------
    DerSimonian & Laird (1986); Viechtbauer (2005); Higgins & Thompson (2002); Riley, Higgins & Deeks
    (2011); metafor's ``rma`` and ``predict.rma`` (Viechtbauer 2010). See :mod:`dsfed_client.analyses.meta`.
    """

    _title: ClassVar[str] = "Random-effects meta-analysis"

    measure: str = stat("Measure", brief="")
    scale: str = stat("Pooled on the scale")
    method: str = stat("tau^2 estimator")
    estimate: float = stat("Pooled estimate", brief=".4g")
    se: float = stat("Std. error")
    ci: ConfInt = stat("{level} CI")
    tau2: float = stat("tau^2", brief=".4g")
    i2: float = stat("I^2 (%)", ".4g", brief=".3g")
    h2: float = stat("H^2")
    q: float = stat("Cochran's Q")
    q_pvalue: float = stat("Q p-value", ".4g")
    pi: ConfInt = stat("{level} prediction interval")
    prediction: str = stat("Prediction interval quantile")
    alpha: float = stat()
    labels: tuple[str, ...] = hidden()
    yi: np.ndarray = hidden()
    sei: np.ndarray = hidden()

    @derived("Sites", brief="")
    def k(self) -> int:
        return int(self.yi.size)

    @derived("Pooled estimate (measure's scale)", ".4g", export=True)
    def estimate_back(self) -> float:
        return float(self.back(self.estimate))

    @derived("{level} CI (measure's scale)")
    def ci_back(self) -> ConfInt:
        return ConfInt(*(float(self.back(v)) for v in self.ci))

    @derived("{level} prediction interval (measure's scale)")
    def pi_back(self) -> ConfInt:
        return ConfInt(*(float(self.back(v)) for v in self.pi))

    def back(self, value: Any) -> Any:
        """``value`` from the pooling scale back to the measure's own (expit, exp or itself)."""
        return SCALES[self.scale][1](value)

    def site_intervals(self) -> np.ndarray:
        """Each site's Wald interval on the pooling scale (k x 2)."""
        z = stats.norm.ppf(1 - self.alpha / 2)
        return np.column_stack([self.yi - z * self.sei, self.yi + z * self.sei])

    def _table(self) -> pd.DataFrame:
        ci = self.back(self.site_intervals())
        weights = 1.0 / (self.sei**2 + self.tau2)
        frame = pd.DataFrame({"estimate": self.back(self.yi), "ci_lower": ci[:, 0], "ci_upper": ci[:, 1],
                              "weight_pct": 100 * weights / weights.sum()}, index=pd.Index(self.labels, name="site"))
        frame.loc["pooled (RE)"] = [self.estimate_back, *self.ci_back, 100.0]
        frame.attrs["alpha"] = self.alpha
        return frame

    def plot(self, ax: Any = None, *, reference: float | None = None) -> Any:
        """A forest plot: every site's estimate with its interval (marker sized by weight), the pooled
        diamond and the prediction interval, on the measure's own scale (``reference``: a line at the
        value of no effect); returns the Axes."""
        from dsfed_client.plots import plot_forest  # noqa: PLC0415

        return plot_forest(self, reference=reference, ax=ax)


@validate_params({"method": [Options(set(TAU2))], "prediction": [Options({"normal", "t"})],
                  "scale": [Options(set(SCALES))], "alpha": ALPHA})
def random_effects(yi: Sequence[float], sei: Sequence[float], *, labels: Sequence[str] | None = None,
                   method: str = "REML", prediction: str = "normal", scale: str = "identity",
                   measure: str = "estimate", alpha: float = 0.05) -> MetaAnalysis:
    """Pool estimates ``yi`` (already on the pooling ``scale``) with standard errors ``sei`` by a
    random-effects model (:mod:`dsfed_client.analyses.meta`): ``method`` ``"REML"`` (metafor's default)
    or ``"DL"``; ``prediction`` ``"normal"`` (metafor's ``predict.rma``) or ``"t"`` (Riley et al. 2011,
    :math:`t_{k-2}`, needs 3 sites).

    >>> m = random_effects([0.0, 1.0, 2.0], [0.1**0.5] * 3, method="DL")
    >>> round(m.estimate, 6), round(m.tau2, 6), round(m.i2, 4), round(m.q, 6)
    (1.0, 0.9, 90.0, 20.0)
    """
    y, s = np.asarray(yi, dtype=float), np.asarray(sei, dtype=float)
    names = tuple(labels) if labels is not None else tuple(str(i + 1) for i in range(y.size))
    if y.ndim != 1 or y.shape != s.shape or len(names) != y.size:
        raise ValueError(f"estimates, standard errors and labels must be one per site: {y.shape}, {s.shape}, "
                         f"{len(names)}")
    if y.size < 2 or (prediction == "t" and y.size < 3):
        raise ValueError(f"a random-effects meta-analysis needs at least {3 if prediction == 't' else 2} sites "
                         f"(got {y.size})")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError(f"every estimate must be finite and every standard error finite and positive: {y}, {s}")
    v, k = s**2, y.size
    tau2 = TAU2[method](y, v)
    w = 1.0 / (v + tau2)
    mu = float(np.sum(w * y) / np.sum(w))
    se = float(np.sqrt(1.0 / np.sum(w)))
    w_fe = 1.0 / v
    q = float(np.sum(w_fe * (y - np.sum(w_fe * y) / np.sum(w_fe)) ** 2))
    typical = (k - 1) * np.sum(w_fe) / (np.sum(w_fe) ** 2 - np.sum(w_fe**2))
    z = stats.norm.ppf(1 - alpha / 2)
    crit = z if prediction == "normal" else stats.t.ppf(1 - alpha / 2, k - 2)
    half_pi = crit * np.sqrt(tau2 + se**2)
    return MetaAnalysis(measure, scale, method, mu, se, ConfInt(mu - z * se, mu + z * se), tau2,
                        float(100 * tau2 / (tau2 + typical)), float((tau2 + typical) / typical), q,
                        float(stats.chi2.sf(q, k - 1)), ConfInt(mu - half_pi, mu + half_pi), prediction, alpha,
                        names, y, s)
