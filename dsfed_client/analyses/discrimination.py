"""Discrimination across sites: empirical AUC with DeLong CI, and the distributed ROC-GLM
(Schalk, Rehms et al. 2024).

Both start from the paper's noisy scores: each site releases its negatives'
and positives' scores with Gaussian noise from the analytic Gaussian
mechanism, with epsilon, delta and sensitivity from its own rules file
(registry entry ``noisyScoresDS``). The analyst pools them into the global
survivor functions :math:`\\tilde S_0`, :math:`\\tilde S_1` and sends them back; the
sites compute placement values of their own records and return only sums.
With noise off (a test profile), every number equals the pooled computation.
"""

from __future__ import annotations

import warnings
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import integrate, special, stats

from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.calls import Call, Ref
from dsfed_client.params import ALPHA, N_THRESHOLDS, PRIVACY, validate_params
from dsfed_client.progress import progress
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.roc import binormal_auc
from dsfed_core.wire import decode_f64



def wald_ci(auc: float, variance: float, alpha: float) -> tuple[float, float]:
    """Wald interval on the AUC scale, clipped to [0, 1] (pROC's ``ci.auc(method = "delong")``):
    :math:`AUC \\pm \\Phi^{-1}(1-\\alpha/2)\\sqrt{var}`.

    >>> [round(v, 6) for v in wald_ci(0.8, 0.0025, 0.05)]  # 0.8 -+ 1.959964 * 0.05
    [0.702002, 0.897998]
    """
    half = stats.norm.ppf(1 - alpha / 2) * np.sqrt(variance)
    return max(0.0, float(auc - half)), min(1.0, float(auc + half))


@dataclass(frozen=True)
class NoisyReference:
    """The pooled (noisy) scores of all negatives and positives, stored at every site of the session
    as ``symbol`` (a name of its own, so that a later analysis cannot replace it)."""

    symbol: Ref  # handle on the pooled sets stored at every site
    negatives: np.ndarray
    positives: np.ndarray
    sigma: dict[str, float]
    mechanism: dict[str, dict[str, Any]]
    noise_var_negatives: float = 0.0  # the noise variance of a negative's score, averaged over the records
    noise_var_positives: float = 0.0

    @property
    def noise_off(self) -> bool:
        return all(s == 0 for s in self.sigma.values())

    @property
    def reliability(self) -> float:
        """The share of the pooled noisy scores' variance that is the scores' own,
        :math:`\\hat\\lambda = 1 - \\bar\\sigma^2 / s^2(\\tilde x)` (Carroll et al. 2006, the reliability
        ratio of a measurement-error model), 1 with noise off."""
        noisy = np.concatenate([self.negatives, self.positives])
        noise = (self.noise_var_negatives * self.negatives.size + self.noise_var_positives * self.positives.size
                 ) / noisy.size
        return 1.0 if noise == 0 else float(max(0.0, 1.0 - noise / np.var(noisy, ddof=1)))

    def roc_curve(self, n_thresholds: int = 99) -> tuple[np.ndarray, np.ndarray]:
        """Empirical ROC of the pooled (noisy) scores at the ROC-GLM's grid :math:`t_j = j/(n_T+1)`:
        :math:`ROC(t_j) = n_1^{-1}\\#\\{i: \\tilde S_0(\\tilde F_{1,i}) \\le t_j\\}`, with (0, 0) and (1, 1)
        added. Post-processing of values the analyst already holds: no site is asked anything."""
        neg = np.sort(self.negatives)
        pv = np.sort((neg.size - np.searchsorted(neg, self.positives, side="right")) / neg.size)
        t = np.arange(1, n_thresholds + 1) / (n_thresholds + 1)
        tpr = np.searchsorted(pv, t, side="right") / pv.size
        return np.concatenate([[0.0], t, [1.0]]), np.concatenate([[0.0], tpr, [1.0]])


def pooled_noisy_scores(session: FederatedSession, truth: str, score: str, *, epsilon: float | None = None,
                        delta: float | None = None, sensitivity: float | None = None) -> NoisyReference:
    """Collect every site's noisy scores, pool them, and store the pooled sets at every site."""
    results = session.aggregate("noisyScoresDS", Ref(truth), Ref(score), epsilon=epsilon, delta=delta,
                                sensitivity=sensitivity)
    negatives = np.sort(np.concatenate([decode_f64(r["negatives"]) for r in results.values()]))
    positives = np.sort(np.concatenate([decode_f64(r["positives"]) for r in results.values()]))
    symbol = session.assign(session.new_symbol("ref"), Call("referenceScoresDS", negatives, positives))
    sigma = {s: float(r["sigma"]) for s, r in results.items()}

    def mean_noise_var(cls: str, n: int) -> float:
        return sum(sigma[s] ** 2 * decode_f64(r[cls]).size for s, r in results.items()) / n

    return NoisyReference(
        symbol, negatives, positives, sigma=sigma,
        mechanism={s: {k: r[k] for k in ("mechanism", "epsilon", "delta", "sensitivity")} for s, r in results.items()},
        noise_var_negatives=mean_noise_var("negatives", negatives.size),
        noise_var_positives=mean_noise_var("positives", positives.size),
    )


def _auc_between(positives: np.ndarray, negatives: np.ndarray) -> float:
    """Mann-Whitney AUC of two samples, ties one half."""
    negatives = np.sort(negatives)
    less = np.searchsorted(negatives, positives, side="left")
    ties = np.searchsorted(negatives, positives, side="right") - less
    return float(np.sum(less + 0.5 * ties) / (positives.size * negatives.size))


def logit_se(auc: float, variance: float) -> float:
    """The delta-method standard error of logit(AUC), :math:`\\sqrt{var}/(AUC(1-AUC))` (Schalk et al. 2024, eq. 3)."""
    return float(np.sqrt(variance) / (auc * (1 - auc)))


def logit_ci(auc: float, variance: float, alpha: float, noise_variance: float = 0.0) -> tuple[float, float]:
    """Schalk et al. (2024) eq. (3): :math:`\\mathrm{logit}(AUC) \\pm \\Phi^{-1}(1-\\alpha/2)\\sqrt{var}/(AUC(1-AUC))`,
    back-transformed, so the interval stays inside (0, 1); ``variance`` is the sampling (DeLong) variance.

    The error DP noise adds (``noise_variance``) is additive on the AUC's own scale, not on the logit
    scale: near AUC = 1 the delta method would stretch it to the whole of (0, 1), and a noisy estimate
    just below 1 would get an interval that excludes 1. The two errors are therefore combined by the
    method of variance estimates recovery (Zou & Donner 2008): each limit lies
    :math:`\\sqrt{d_s^2 + (z\\,sd_{noise})^2}` from the estimate, :math:`d_s` that limit's distance
    in the sampling interval, clipped to [0, 1]. Without noise this is eq. (3) itself.

    >>> [round(v, 6) for v in logit_ci(0.8, 0.0025, 0.05)]  # expit(1.386294 -+ 1.959964 * 0.05 / 0.16)
    [0.684344, 0.880669]
    >>> [round(v, 4) for v in logit_ci(0.99, 1e-6, 0.05, noise_variance=0.0001)]  # 0.99 -+ ~1.96 * 0.01
    [0.9703, 1.0]
    >>> [round(v, 4) for v in logit_ci(1.0, 4e-6, 0.05, noise_variance=0.0001)]  # clipped at 1: 1 - 1.96 * 0.01
    [0.9804, 1.0]

    Within one sampling standard error of a bound the logit's linearisation fails (at 1 - 4e-5 with
    :math:`\\sqrt{var}` = 0.002, eq. (3) would give the whole of (0, 1)); there the sampling interval is
    the Wald interval on the AUC's scale, clipped (1.96 * 0.002, combined with 1.96 * 0.01 of noise):

    >>> [round(v, 4) for v in logit_ci(0.99996, 4e-6, 0.05, noise_variance=0.0001)]
    [0.98, 1.0]
    """
    z = stats.norm.ppf(1 - alpha / 2)
    if auc in (0.0, 1.0):
        # eq. (3) is degenerate at the bounds (logit +-inf, its standard error infinite): the sampling
        # interval is the point, whatever the variance; a noisy estimate clipped to 1 (or 0) with a
        # positive DeLong variance otherwise made the interval NaN, returned as the whole of (0, 1)
        lower = upper = float(auc)
    elif min(auc, 1.0 - auc) < np.sqrt(variance):
        # within one standard error of a bound (a noisy estimate just below 1 with the noisy placements'
        # variance): the logit scale's delta method stretches the interval to the whole of (0, 1)
        half = z * np.sqrt(variance)
        lower, upper = max(0.0, float(auc - half)), min(1.0, float(auc + half))
    else:
        half = z * logit_se(auc, variance)
        lower, upper = float(special.expit(special.logit(auc) - half)), float(special.expit(special.logit(auc) + half))
    if not noise_variance:
        return lower, upper
    noise = z * np.sqrt(noise_variance)
    return (float(max(0.0, auc - np.hypot(auc - lower, noise))), float(min(1.0, auc + np.hypot(upper - auc, noise))))


class AUCIntervals(Results):
    """The two intervals of an AUC result with ``auc``, ``variance`` (DeLong), ``alpha`` and, where
    DP noise enters the estimate, ``noise_variance`` (what the noise adds; the intervals use both).

    References
    ----------
    DeLong, DeLong, Clarke-Pearson (1988), Biometrics 44: the variance. Schalk, Rehms et al. (2024),
    "Distributed non-disclosive validation of predictive models by a modified ROC-GLM", eq. (3): the
    logit-scale interval.
    """

    auc: float
    variance: float
    alpha: float
    noise_variance: float = 0.0

    @derived("Std. error", brief=None, export=False)
    def se(self) -> float:
        """The square root of the total variance."""
        return float(np.sqrt(self.total_variance))

    @property
    def noise_error_variance(self) -> float:
        """The variance of the error the DP noise adds to the estimate (NaN: not known)."""
        return self.noise_variance

    @property
    def total_variance(self) -> float:
        """The sampling (DeLong) variance plus the noise's."""
        return self.variance + self.noise_error_variance

    @derived("{level} CI (DeLong)")
    def ci_delong(self) -> ConfInt:
        """Wald interval (pROC's ``ci.auc(method = "delong")``, widened by the noise variance); NaN
        where the total variance is not known (the noise swamps the scores)."""
        if not np.isfinite(self.total_variance):
            return ConfInt(float("nan"), float("nan"))
        return ConfInt(*wald_ci(self.auc, self.total_variance, self.alpha))

    @derived("{level} CI (logit, eq. 3)")
    def ci_logit(self) -> ConfInt:
        """Schalk et al. (2024) eq. (3) on the sampling variance, the noise's combined with it as
        :func:`logit_ci` says; NaN where the total variance is not known."""
        if not np.isfinite(self.total_variance):
            return ConfInt(float("nan"), float("nan"))
        return ConfInt(*logit_ci(self.auc, self.variance, self.alpha, self.noise_error_variance))


# below this reliability ratio the noise variance exceeds the scores' own: the noisy-score AUC says more
# about the noise than about the model, and no interval around it is offered
MIN_RELIABILITY = 0.5
INSTEAD = ("use ds_hist_auc (the histogram AUC: the noise goes on counts of records, not on each score, and "
           "its interval carries it)")


@result
class EmpiricalAUC(AUCIntervals):
    """Empirical AUC with its DeLong variance from pooled placement values, both intervals
    (``ci_delong``, ``ci_logit``) at ``alpha``. With noise on, the intervals carry the variance the
    noise adds (``noise_variance``) and its estimated bias (``approximation_error``, squared);
    where the noise swamps the scores (``swamped``: reliability below :data:`MIN_RELIABILITY`) they
    are NaN and ``note`` names the estimator to use instead.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eqs. (1)-(2) (placement values, DeLong variance) and eq. (3) (logit interval); DeLong et al.
    (1988); Cook & Stefanski (1994), SIMEX (the bias).
    """

    _title: ClassVar[str] = "Empirical AUC (placement values, DeLong variance)"

    auc: float = stat("AUC", brief=".4f")
    variance: float = stat("Variance (DeLong)")
    alpha: float = stat()
    n_positive: int = stat("Positives", brief="")
    n_negative: int = stat("Negatives", brief="")
    noise_off: bool = stat("Noise off (exact)", brief="")
    approximation_error: float = stat("Est. noise error")  # 0 when exact; else an estimate of the noise's error
    noise_variance: float = stat("Noise variance", default=0.0)  # the variance the noise adds, given the records
    reliability: float = stat("Reliability of the noisy scores", default=1.0)
    reference: NoisyReference | None = hidden(default=None)  # for plot()

    @derived("Noise swamps the scores", brief="")
    def swamped(self) -> bool:
        """The noise's variance exceeds the scores' own (reliability below :data:`MIN_RELIABILITY`):
        the estimate is pulled towards 1/2 by more than its bias estimate can be trusted to say."""
        return self.reliability < MIN_RELIABILITY or not np.isfinite(self.approximation_error)

    @derived("Note")
    def note(self) -> str:
        """Why the intervals are missing, and what to use instead; empty otherwise."""
        if not self.swamped:
            return ""
        return (f"the noise on the scores swamps them (reliability {self.reliability:.2f} < {MIN_RELIABILITY}): "
                f"the AUC is pulled towards 0.5 by an unknown amount and no interval is given; {INSTEAD}")

    @property
    def noise_error_variance(self) -> float:
        """The noise's variance and the square of its estimated bias; NaN where the noise swamps the scores."""
        if self.swamped:
            return float("nan")
        return self.noise_variance + self.approximation_error**2

    def plot(self, ax: Any = None, *, fpr: Any = None, tpr: Any = None, overlay_label: str = "histogram ROC") -> Any:
        """The empirical ROC of the pooled noisy scores (AUC and DeLong CI in the legend), optionally
        with another curve given as arrays ``fpr``, ``tpr``; returns the matplotlib Axes."""
        from dsfed_client.plots import plot_roc, roc_axes, new_axes  # noqa: PLC0415

        label = "empirical AUC {:.3f} ({:.0%} CI {:.3f}-{:.3f})".format(self.auc, 1 - self.alpha, *self.ci_delong)
        overlay = None if fpr is None else (fpr, tpr)
        if self.reference is None:
            ax = roc_axes(new_axes(ax))
            ax.plot([], [], " ", label=label)
            if overlay is not None:
                ax.plot(*overlay, color="tab:orange", label=overlay_label, gid="roc-overlay")
            ax.legend(loc="lower right", fontsize=8)
            return ax
        x, y = self.reference.roc_curve()
        return plot_roc(x, y, label=label, overlay=overlay, overlay_label=overlay_label, ax=ax)


@dataclass(frozen=True)
class PlacementMoments:
    """Pooled placement values (Schalk et al. 2024, eqs. 1-2; DeLong 1988): class sizes, the means of
    :math:`V_{10}` and :math:`V_{01}`, and :math:`s^2(V_{10})/n_1 + s^2(V_{01})/n_0`."""

    n1: int
    n0: int
    mean10: float
    mean01: float
    variance: float


def placement_moments(total: dict[str, float]) -> PlacementMoments:
    """The moments from the sites' summed counts, sums and sums of squares of placement values.

    Positives scored 0.9 and 0.4, negatives 0.3 and 0.6: :math:`V_{10} = (1, 0.5)`,
    :math:`V_{01} = (1, 0.5)`; the AUC is 3 of 4 pairs, each sample variance 0.125:

    >>> m = placement_moments({"n1": 2, "n0": 2, "sum_v10": 1.5, "sumsq_v10": 1.25, "sum_v01": 1.5,
    ...                        "sumsq_v01": 1.25})
    >>> m.mean10, m.variance
    (0.75, 0.125)
    """
    n1, n0 = int(round(total["n1"])), int(round(total["n0"]))
    m10, m01 = total["sum_v10"] / n1, total["sum_v01"] / n0
    var10 = (total["sumsq_v10"] - n1 * m10**2) / (n1 - 1)
    var01 = (total["sumsq_v01"] - n0 * m01**2) / (n0 - 1)
    return PlacementMoments(n1, n0, float(m10), float(m01), float(var10 / n1 + var01 / n0))


@validate_params({"alpha": ALPHA})
def ds_auc(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
           reference: NoisyReference | None = None, secure: bool | None = False) -> EmpiricalAUC:
    """Empirical AUC and DeLong variance from the sites' placement-value sums.

    :math:`\\widehat{AUC} = \\bar V_{10}`; :math:`\\widehat{var} = s^2(V_{10})/n_1 + s^2(V_{01})/n_0`
    with sample variances pooled from sums and sums of squares. With noise on,
    :math:`V_{10}` compares each true positive score with the noisy pooled
    negatives, which adds two errors the intervals carry:

    * a bias towards 1/2, estimated by SIMEX (Cook & Stefanski 1994): the AUC between the noisy
      positives and the noisy negatives carries twice the noise variance, and the binormal
      extrapolant through both (:func:`simex_auc`) gives the AUC without noise; its distance from
      the once-noised AUC is ``approximation_error``;
    * a variance over the noise, :math:`n_0^{-2} \\sum_j \\operatorname{var}_e \\hat F_1(x_{0j} + e_j)`
      (:func:`noise_variance_of_placements`: the positives' distribution function at each
      negative's noisy score).

    Where the noise's variance exceeds the scores' own (``swamped``) the bias is too large for one
    extrapolation step to be trusted: the intervals are NaN, a warning names :func:`ds_hist_auc`.

    ``alpha`` sets both intervals (``ci_delong``, ``ci_logit``) at level ``1 - alpha``; it is
    checked, with every other parameter, before any site is contacted. ``secure``: the placement
    sums as a pooled release (:meth:`FederatedSession.aggregation`); the noisy scores are each
    site's own release either way.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eqs. (1)-(2) (placement values and the DeLong variance), eq. (3) (logit interval), "noisy
    scores" (analytic Gaussian mechanism); DeLong et al. (1988).
    """
    ref = reference or pooled_noisy_scores(session, truth, score)
    m = placement_moments(session.aggregation(secure).sum("placementSumsDS", Ref(truth), Ref(score), ref.symbol))
    if ref.noise_off:
        return EmpiricalAUC(m.mean10, m.variance, alpha, m.n1, m.n0, True, 0.0, reference=ref)
    error = abs(m.mean10 - simex_auc(m.mean10, _auc_between(ref.positives, ref.negatives)))
    result = EmpiricalAUC(m.mean10, m.variance, alpha, m.n1, m.n0, False, error,
                          noise_variance_of_placements(ref), ref.reliability, ref)
    if result.swamped:
        warnings.warn(f"ds_auc: {result.note}", stacklevel=2)
    return result


def simex_auc(once: float, twice: float) -> float:
    """The AUC without noise, extrapolated from the AUC under the noise once (``once``: variance
    :math:`\\sigma^2` on the score differences) and twice (``twice``: :math:`2\\sigma^2`). Under noise of
    variance :math:`\\lambda\\sigma^2` on normal score differences, :math:`AUC(\\lambda) = \\Phi(\\mu /
    \\sqrt{s^2 + \\lambda\\sigma^2})`, so :math:`g(\\lambda) = \\Phi^{-1}(AUC(\\lambda))^{-2}` is linear in
    :math:`\\lambda` and :math:`AUC(0) = \\Phi(\\pm (2 g(1) - g(2))^{-1/2})`: SIMEX (Cook & Stefanski 1994)
    with the binormal model's extrapolant (the ROC-GLM's model). NaN where the extrapolant has no
    finite value at 0 (the noise swamps the difference).

    >>> from scipy.stats import norm
    >>> once, twice = (float(norm.cdf(0.8 / np.sqrt(1 + lam * 0.5))) for lam in (1, 2))
    >>> round(simex_auc(once, twice), 10) == round(float(norm.cdf(0.8)), 10)
    True
    """
    z1, z2 = special.ndtri(once), special.ndtri(twice)
    if z1 == 0 or z2 == 0 or np.sign(z1) != np.sign(z2):
        return float("nan")
    g0 = 2 / z1**2 - 1 / z2**2
    return float(special.ndtr(np.sign(z1) / np.sqrt(g0))) if g0 > 0 else float("nan")


def noise_variance_of_placements(ref: NoisyReference, draws: int = 64) -> float:
    """The variance the noise on the negatives adds to :math:`\\bar V_{10} = n_0^{-1} \\sum_j
    (1 - \\hat F_1(\\tilde x_{0j}))`: the noise draws are independent, so it is
    :math:`n_0^{-2} \\sum_j \\operatorname{var}_e \\hat F_1(x_{0j} + e)`, estimated by the plug-in of the
    noisy positives' distribution function for :math:`\\hat F_1` and the noisy negatives for the
    negatives, over ``draws`` fixed normal draws of the noise (post-processing of what the analyst
    holds; no site is asked)."""
    positives = np.sort(ref.positives)
    e = np.random.default_rng(0).standard_normal(draws) * np.sqrt(ref.noise_var_negatives)
    total = 0.0
    for start in range(0, ref.negatives.size, 4096):  # a block of negatives at a time
        block = ref.negatives[start:start + 4096, None] + e[None, :]
        total += float(np.sum(np.var(np.searchsorted(positives, block, side="right"), axis=1, ddof=1)))
    return total / positives.size**2 / ref.negatives.size**2


@result
class ROCGLMFit(Results):
    """A ROC-GLM :math:`ROC(t) = \\Phi(a + b\\,\\Phi^{-1}(t))` fitted by the distributed probit GLM on
    the sites' placement-value tables (or, where the AUC comes from the noisy histograms alone, by a probit GLM on
    their leaves: ``fitted_on``, :func:`~dsfed_client.analyses.curves.histograms_roc_glm`), its AUC
    :math:`\\Phi(a/\\sqrt{1+b^2})` and the interval of Schalk et al. (2024) eq. (3) on ``variance`` (DeLong, of
    the placement values) plus ``noise_variance`` (what DP noise adds, where estimated). :func:`ds_hist_auc` gives
    this fit on histogram placement values; :class:`ROCGLM` extends it with Schalk et al.'s (2024) noisy-score
    reference.

    ``placed``: whose placement values the probit model ``glm`` was fitted on. ``'positives'`` (Schalk et al.):
    :math:`PV = 1 - \\tilde F_0(x)` of the positives, whose distribution is the ROC curve, so ``glm``'s
    coefficients are (a, b). ``'negatives'``: :math:`1 - \\tilde F_1(x)` of the negatives, whose distribution
    is the inverse curve, :math:`\\Phi^{-1}(ROC^{-1}(s)) = c + d\\,\\Phi^{-1}(s)` (Pepe & Cai 2004), so
    ``glm``'s coefficients are (c, d), and :math:`a = -c/d`, :math:`b = 1/d`.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Distributed ROC-GLM" (the probit model on the intermediate data), eq. (3) (the CI); Pepe
    (2000), the ROC-GLM.
    """

    _title: ClassVar[str] = "Distributed ROC-GLM  ROC(t) = Phi(a + b Phi^-1(t))"

    auc: float = stat("AUC = Phi(a / sqrt(1 + b^2))", brief=".4f")
    a: float = stat("a", brief=".4f")
    b: float = stat("b", brief=".4f")
    variance: float = stat("Variance (DeLong)")
    alpha: float = stat()
    n_thresholds: int = stat("Thresholds", brief="")
    glm: GLMResults = hidden()
    noise_variance: float = stat("Noise variance", default=0.0)
    placed: str = stat("Placement values of", default="positives")  # 'negatives': glm fits the inverse curve
    # half the share of pairs in cells the sites merged (curves.merged_pairs): the interval widens by it
    merged_bound: float = stat("Widened for merged cells by", default=0.0)
    fitted_on: str = stat("Fitted on", default="the sites' placement-value tables")  # or the histograms' leaves

    @derived("{level} CI (logit, eq. 3)", brief=".4f")
    def ci(self) -> ConfInt:
        """Schalk et al. (2024) eq. (3) around the ROC-GLM AUC, the noise's variance combined with the
        sampling variance as :func:`logit_ci` says; where the sites merged the reference's cells, widened by
        ``merged_bound``, the bound of what the merging does to the empirical AUC over the same placement values:
        for the fit through them a heuristic, not a proven bound (docs/method.md)."""
        lower, upper = logit_ci(self.auc, self.variance, self.alpha, self.noise_variance)
        return ConfInt(max(lower - self.merged_bound, 0.0), min(upper + self.merged_bound, 1.0))

    @derived("Fisher-scoring iterations")
    def iterations(self) -> int:
        return self.glm.iterations

    def curve(self, t: np.ndarray) -> np.ndarray:
        return stats.norm.cdf(self.a + self.b * stats.norm.ppf(t))

    def _notes(self) -> tuple[str, ...]:
        return (f"Probit fit u ~ x on {self.fitted_on}:", self.glm.to_frame(self.alpha).to_string(
            float_format=lambda v: f"{v:.6g}"))


@result
class ROCGLM(ROCGLMFit):
    """Schalk et al.'s (2024) distributed ROC-GLM: the fit on placement values against the pooled noisy scores
    (``reference``), its AUC also by numerical integration, and the empirical AUC beside it.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Distributed ROC-GLM" steps 1-5; eq. (3).
    """

    _: KW_ONLY
    auc_integral: float = stat("AUC by integration")  # integral of the fitted curve over (0, 1)
    empirical: EmpiricalAUC = stat()
    reference: NoisyReference = hidden()

    @derived("Noise sigma per site", export=False)
    def noise(self) -> str:
        """``off (exact)``, or each site's noise standard deviation."""
        if self.reference.noise_off:
            return "off (exact)"
        return ", ".join(f"{s} {v:.4g}" for s, v in self.reference.sigma.items())

    @derived("Empirical AUC", brief=".4f", export=False)
    def empirical_auc(self) -> float:
        return self.empirical.auc

    @derived(brief="")
    def noise_off(self) -> bool:
        return self.reference.noise_off

    @derived()
    def sigma(self) -> dict[str, float]:
        """Each site's noise standard deviation."""
        return self.reference.sigma

    def empirical_curve(self) -> tuple[np.ndarray, np.ndarray]:
        """(fpr, tpr) of the pooled noisy scores at this fit's threshold grid (no site call)."""
        return self.reference.roc_curve(self.n_thresholds)

    def plot(self, ax: Any = None, *, fpr: Any = None, tpr: Any = None, overlay_label: str = "histogram ROC") -> Any:
        """The fitted ROC-GLM curve over the empirical ROC of the pooled noisy scores, the AUC's CI in
        the legend; ``fpr``, ``tpr`` overlay another curve (e.g. the histogram-based one). Returns the Axes."""
        from dsfed_client.plots import plot_roc  # noqa: PLC0415

        t = np.linspace(0, 1, 201)
        label = "ROC-GLM AUC {:.3f} ({:.0%} CI {:.3f}-{:.3f})".format(self.auc, 1 - self.alpha, *self.ci)
        emp_label = "empirical{} AUC {:.3f}".format("" if self.reference.noise_off else " (noisy scores)",
                                                   self.empirical.auc)
        return plot_roc(t, self.curve(t), label=label, empirical=self.empirical_curve(), empirical_label=emp_label,
                        overlay=None if fpr is None else (fpr, tpr), overlay_label=overlay_label, ax=ax)


@validate_params({"alpha": ALPHA, "n_thresholds": N_THRESHOLDS, "epsilon": PRIVACY, "delta": PRIVACY,
                  "sensitivity": PRIVACY})
def ds_roc_glm(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
               n_thresholds: int = 99, epsilon: float | None = None, delta: float | None = None,
               sensitivity: float | None = None, secure: bool | None = False) -> ROCGLM:
    """Fit the ROC-GLM across sites (Schalk et al. 2024, "Distributed ROC-GLM").

    1. pooled noisy scores give :math:`\\tilde S_0`, sent to every site;
    2. each site builds its intermediate data ``(u, \\Phi^{-1}(t_j))`` with weights over the
       threshold grid :math:`t_j = j/(n_T+1)`;
    3. the distributed probit regression ``u ~ x`` (Fisher scoring, R's rule) gives (a, b);
    4. :math:`AUC = \\Phi(a/\\sqrt{1+b^2})`, also by numerical integration;
    5. the CI of eq. (3) with the variance of the placement values of both classes.

    ``epsilon``, ``delta`` and ``sensitivity`` may only ask for more privacy than
    the sites' rules give; a site refuses a request for less. ``secure``: the probit fit checked
    pooled rather than per site (:func:`~dsfed_client.analyses.glm.ds_glm`), and the placement
    sums a pooled release (:func:`ds_auc`).

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Distributed ROC-GLM" (steps 1-5 above), eqs. (1)-(3);
    Balle & Wang (2018), the analytic Gaussian mechanism the sites use for the noisy scores.
    """
    pooled = session.aggregation(secure).pooled
    # every site takes the threshold grid asked for, before any budget is spent on the noisy scores
    session.require_enabled("rocGlmDataDS", before="ds_roc_glm", within={"rocGlmDataDS": {"thresholds": n_thresholds}})
    with progress("ROC-GLM", total=4) as bar:
        bar.update(description="ROC-GLM: noisy scores")
        ref = pooled_noisy_scores(session, truth, score, epsilon=epsilon, delta=delta, sensitivity=sensitivity)
        bar.update(advance=1, description="ROC-GLM: intermediate data")
        with session.temporary("roc") as roc_data:
            data = session.assign(roc_data, Call("rocGlmDataDS", Ref(truth), Ref(score), ref.symbol, n_thresholds))
            bar.update(advance=1, description="ROC-GLM: probit fit")
            fit = ds_glm(session, "u ~ x", data, family="binomial", link="probit", weights="w", secure=pooled,
                         null_model=False)
        a, b = (float(v) for v in fit.params)
        auc_integral = float(integrate.quad(lambda t: stats.norm.cdf(a + b * stats.norm.ppf(t)), 0, 1,
                                            epsabs=1e-12, epsrel=1e-12)[0])
        bar.update(advance=1, description="ROC-GLM: placement values")
        empirical = ds_auc(session, truth, score, alpha=alpha, reference=ref, secure=pooled)
        bar.advance()
    # the noise's variance and squared bias, as the empirical AUC's interval carries them (NaN: swamped)
    noise = empirical.total_variance - empirical.variance
    return ROCGLM(binormal_auc(a, b), a, b, empirical.variance, alpha, n_thresholds, fit, noise,
                  auc_integral=auc_integral, empirical=empirical, reference=ref)
