"""Federated ROC and PR curves from hierarchical histograms (Xu & Cormode 2025), and
the AUC with DeLong variance and the ROC-GLM from histogram placement values (Schalk et al.'s (2024)
estimators, with Xu & Cormode's (2025) histograms in place of Schalk et al.'s (2024) noisy scores).

Steps (Xu & Cormode 2025, "Methods Overview"):

1. every site counts its negatives' and positives' scores in a hierarchical histogram,
   with Gaussian noise from its own mechanism, or exactly under its small-bin rule when
   noise is off (registry entry ``scoreHistogramDS``);
2. the analyst sums the sites' counts level by level, makes them consistent (weighted
   least squares on the tree: the best linear unbiased leaf counts given every level's
   noisy counts), and makes each class's cumulative counts monotone (isotonic
   regression, pinned at 0 and at the consistent total): two global ECDFs, linear
   inside a leaf;
3. ``n_quantiles`` = Q evenly spaced quantiles of each ECDF;
4. PCHIP through the quantiles (``scipy.interpolate.PchipInterpolator``) gives smooth
   monotone ECDFs :math:`\\Phi^-`, :math:`\\Phi^+`;
5. :math:`T(s) = 1 - \\Phi^+(s)` (TPR, recall), :math:`F(s) = 1 - \\Phi^-(s)` (FPR) and
   :math:`P(s) = T n^+ / (T n^+ + F n^-)` (precision) (Xu & Cormode 2025, eqs. 1-3).

``n_quantiles=None`` skips steps 3-4 and evaluates the ECDFs at the leaf edges: with
noise off and bins that each hold at most one distinct score, the curves are then the
exact pooled empirical ROC and PR curves.

Areas: the ROC AUC is the trapezoidal area under the ROC points; the PR area is the
**average precision** :math:`AP = \\sum_k (R_k - R_{k+1}) P_k` over decreasing thresholds
(step-wise, as ``sklearn.metrics.average_precision_score``), not the trapezoid.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import integrate, interpolate, stats

from dsfed_core.histograms import global_cdfs, level_variances, tree_least_squares

from dsfed_client.analyses.discrimination import AUCIntervals, ROCGLMFit, placement_moments
from dsfed_client.analyses.glm import ConvergenceError, ds_glm, probit_fit
from dsfed_client.calls import Call, Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.params import (
    ALPHA, BRANCHING, DECAY, LEVELS, N_THRESHOLDS, PRIVACY, Interval, Options, validate_params,
)
from dsfed_client.results import ConfInt, Results, derived, hidden, render, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.roc import binormal_auc, roc_glm_rows



# --- pooled histograms ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ScoreHistograms:
    """The pooled, post-processed global CDFs of both classes as cumulative counts at ``edges``."""

    edges: np.ndarray
    cum_negatives: np.ndarray  # non-decreasing, from 0 to n_negative
    cum_positives: np.ndarray
    n_negative: float  # consistent (noisy) totals; exact with noise off
    n_positive: float
    noise_off: bool
    level_variance: np.ndarray  # noise variance of a pooled count on each level 0..L (empty with noise off)
    mechanism: dict[str, dict[str, Any]]
    branching: int = 2
    reference: Ref | None = None  # handle on the reference the sites derived from these (pooled) histograms
    # the consistent cumulative counts before the monotone step (the sites' reference; None: not kept)
    consistent_negatives: np.ndarray | None = None
    consistent_positives: np.ndarray | None = None

    def cdf(self, cls: int, x: np.ndarray) -> np.ndarray:
        """:math:`\\tilde\\Phi` of class ``cls`` (share of its scores below x), linear inside a bin."""
        c = self.cum_positives if cls == 1 else self.cum_negatives
        return np.interp(x, self.edges, c) / c[-1]

    def quantiles(self, cls: int, probs: np.ndarray) -> np.ndarray:
        """The inverse of the piecewise-linear CDF (the smallest x where it reaches p)."""
        c = self.cum_positives if cls == 1 else self.cum_negatives
        return _inverse_cdf(c / c[-1], self.edges, probs)

    def __repr__(self) -> str:
        return (f"ScoreHistograms(bins={self.edges.size - 1}, n_negative={self.n_negative:.1f}, "
                f"n_positive={self.n_positive:.1f}, noise_off={self.noise_off})")


def _inverse_cdf(f: np.ndarray, e: np.ndarray, probs: np.ndarray) -> np.ndarray:
    probs = np.clip(np.asarray(probs, dtype=float), 0.0, 1.0)
    j = np.clip(np.searchsorted(f, probs, side="left"), 1, f.size - 1)  # f[j-1] < p <= f[j]
    lo, hi = f[j - 1], f[j]
    frac = np.where(hi > lo, (probs - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    return e[j - 1] + np.clip(frac, 0.0, 1.0) * (e[j] - e[j - 1])


@validate_params({"levels": LEVELS, "branching": BRANCHING, "decay": DECAY,
                  "totals": [Options({"noisy", "exact"})], "epsilon": PRIVACY, "delta": PRIVACY})
def ds_score_histograms(session: FederatedSession, truth: str, score: str, *, levels: int = 8,
                        branching: int = 2, lower: float = 0.0, upper: float = 1.0, decay: float = 1.0,
                        totals: str = "noisy", epsilon: float | None = None, delta: float | None = None,
                        secure: bool | None = False, edges: np.ndarray | None = None) -> ScoreHistograms:
    """Collect and pool every site's hierarchical histograms into two consistent global CDFs.

    ``epsilon`` and ``delta`` may only ask for more privacy than the sites' rules give.
    With noise on, pooled counts of level ``l`` carry noise variance
    :math:`\\sum_k sd_{k,l}^2`; the leaves are estimated by :func:`tree_least_squares` and
    the cumulative counts by :func:`monotone_cumulative` (the reference the sites derive for the
    histogram AUC under ``secure=True`` skips this step: :mod:`dsfed_core.histograms`).
    ``totals='exact'`` asks the sites for their exact class totals (counts of at least q, as every
    seed-000 function releases them) instead of a noisy level 0, so levels 1..L share the whole budget
    and the totals are known.

    ``secure=True``: a pooled release: the sites sum their noisy counts among themselves and
    release only the sums (secure aggregation). Each site then adds the share :math:`1/h` of its
    noise variance (its rules' ``secure_aggregation.honest_sites`` = h, at most K): with h = K the
    sum carries one site's noise instead of K sites' noise, as accurate as one central curator. The
    sites also derive the global CDFs from the same pooled counts and keep them as the reference
    the result names (``reference``), for :func:`ds_hist_auc`.

    ``edges`` (noise off only: the sites refuse them with noise on): explicit increasing leaf edges
    in place of the equal leaves of ``[lower, upper]``.

    References
    ----------
    Xu & Cormode (2025), "Federated computation of ROC and PR curves", "Methods Overview" steps 1-2
    (hierarchical histograms, noise per bin, consistency); Hay et al. (2010), least-squares consistency on a
    tree.
    """
    explicit = {} if edges is None else {"edges": [float(v) for v in edges]}
    summed = session.aggregation(secure).histogram_levels(
        truth, score, lower=float(lower), upper=float(upper), levels=int(levels), branching=int(branching),
        decay=float(decay), totals=totals, epsilon=epsilon, delta=delta, **explicit)
    if summed.exact is not None:
        return _exact_histograms(summed.exact)
    variances = level_variances(summed.variance, summed.first_level)
    cums = global_cdfs(summed.counts, variances, branching, monotone=True)
    consistent = global_cdfs(summed.counts, variances, branching)
    edges = np.linspace(lower, upper, branching**levels + 1)
    return ScoreHistograms(edges, cums["negatives"], cums["positives"], float(cums["negatives"][-1]),
                           float(cums["positives"][-1]), False, variances, summed.mechanism, branching,
                           summed.reference, consistent["negatives"], consistent["positives"])


def _exact_histograms(results: Any) -> ScoreHistograms:
    """Noise off: sum the sites' exact leaf counts (edges may differ where a site merged small
    bins; every CDF is linear inside a bin, so all are evaluated on the union of edges)."""
    edges = np.unique(np.concatenate([np.asarray(r[c]["edges"], dtype=float)
                                      for r in results.values() for c in ("negatives", "positives")]))
    cums = []
    for cls in ("negatives", "positives"):
        total = np.zeros(edges.size)
        for r in results.values():
            e = np.asarray(r[cls]["edges"], dtype=float)
            c = np.concatenate([[0.0], np.cumsum(r[cls]["counts"])])
            total += np.interp(edges, e, c)
        cums.append(total)
    mech = {s: {"mechanism": "none"} for s in results}
    return ScoreHistograms(edges, cums[0], cums[1], float(cums[0][-1]), float(cums[1][-1]), True,
                           np.empty(0), mech)


# --- ROC and PR curves ---------------------------------------------------------------------


@result
class ROCPRCurves(Results):
    """ROC and PR curves with their areas; arrays run from the highest threshold to the lowest.

    ``fpr``, ``tpr`` (= ``recall``) and ``precision`` are the curves a plot draws; ``roc_auc``
    is the trapezoidal area under (fpr, tpr); ``pr_auc`` is the average precision (step-wise).
    ``to_frame`` gives the points, one row per threshold.

    References
    ----------
    Xu & Cormode (2025), "Federated computation of ROC and PR curves": eqs. (1)-(3) (T, F and P from the
    ECDFs), steps 1-5 of "Methods Overview", Theorem 1 (the area error bound).
    """

    _title: ClassVar[str] = "Federated ROC and PR curves (hierarchical histograms; Xu & Cormode 2025)"

    thresholds: np.ndarray = stat()
    fpr: np.ndarray = stat()
    tpr: np.ndarray = stat()
    precision: np.ndarray = stat()
    roc_auc: float = stat("ROC AUC (trapezoid)", ".4f", brief=".4f")
    pr_auc: float = stat("PR AUC (average precision, step-wise)", ".4f", brief=".4f")
    n_positive: float = stat("Positives", ".1f")
    n_negative: float = stat("Negatives", ".1f")
    n_quantiles: int | None = stat("Quantiles (None: ECDFs at the leaf edges)", brief="")
    noise_off: bool = stat("Noise off (exact counts)", brief="")
    histograms: ScoreHistograms = hidden()

    @property
    def recall(self) -> np.ndarray:
        return self.tpr

    @derived("Leaf bins")
    def n_bins(self) -> int:
        """The histograms' leaf bins."""
        return int(self.histograms.edges.size - 1)

    @derived()
    def mechanism(self) -> dict[str, dict[str, Any]]:
        """Per site (or ``"pooled"``) the mechanism of the histograms' release."""
        return self.histograms.mechanism

    def _notes(self) -> tuple[str, ...]:
        return (f"ROC-GLM not computed: {self.roc_glm_failed}",) if self.roc_glm_failed else ()

    def _table(self) -> pd.DataFrame:
        return pd.DataFrame({"threshold": self.thresholds, "fpr": self.fpr, "tpr": self.tpr,
                             "recall": self.tpr, "precision": self.precision})

    def summary(self) -> str:
        return render(self._title, self._rows())

    def plot(self, ax: Any = None, *, kind: str = "roc") -> Any:
        """The ROC curve (``kind="roc"``, AUC in the legend) or the PR curve (``kind="pr"``, average
        precision in the legend, no-skill line at the prevalence). Returns the Axes."""
        from dsfed_client.plots import plot_pr_curve, plot_roc  # noqa: PLC0415

        if kind == "roc":
            order = np.argsort(self.fpr, kind="stable")
            return plot_roc(self.fpr[order], self.tpr[order], label=f"histogram ROC, AUC {self.roc_auc:.3f}", ax=ax)
        if kind == "pr":
            prevalence = self.n_positive / (self.n_positive + self.n_negative)
            return plot_pr_curve(self.precision, self.recall, prevalence=prevalence,
                                 label=f"PR curve, AP {self.pr_auc:.3f}", ax=ax)
        raise ValueError("kind must be 'roc' or 'pr'")


def pchip_ecdf(quantiles: np.ndarray, probs: np.ndarray) -> interpolate.PchipInterpolator:
    """Xu & Cormode (2025) step 4: a monotone cubic through (quantile, probability), duplicates dropped."""
    x, keep = np.unique(quantiles, return_index=True)
    p = np.maximum.accumulate(np.asarray(probs, dtype=float)[keep])
    return interpolate.PchipInterpolator(x, p, extrapolate=False)


def _evaluate(fn: Any, s: np.ndarray, lo: float, hi: float) -> np.ndarray:
    v = fn(s)
    return np.clip(np.where(s <= lo, 0.0, np.where(s >= hi, 1.0, v)), 0.0, 1.0)


def curve_points(tpr: np.ndarray, fpr: np.ndarray, n_pos: float, n_neg: float
                 ) -> tuple[np.ndarray, float, float]:
    """Precision at each point, trapezoidal ROC area and average precision, for points ordered
    by decreasing threshold (tpr and fpr non-decreasing, from (0, 0) to (1, 1)).

    Positives scored 0.9 and 0.5, negatives 0.5 and 0.1: by hand the AUC counts 3.5 of 4 pairs
    (the tie a half) and the average precision is 0.5 * 1 + 0.5 * 2/3 (``average_precision_score``):

    >>> precision, roc_auc, ap = curve_points(np.array([0, 0.5, 1, 1]), np.array([0, 0, 0.5, 1]), 2, 2)
    >>> precision.round(4).tolist(), roc_auc, round(ap, 6)
    ([1.0, 1.0, 0.6667, 0.5], 0.875, 0.833333)
    """
    tp, fp = tpr * n_pos, fpr * n_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), np.nan)
    first = np.flatnonzero(~np.isnan(precision))
    precision = np.where(np.isnan(precision), precision[first[0]] if first.size else 1.0, precision)
    roc_auc = float(integrate.trapezoid(tpr, fpr))
    ap = float(np.sum(np.diff(tpr) * precision[1:]))
    return precision, roc_auc, ap


@validate_params({"n_quantiles": [Interval(int, 2, 100_000), None], "grid": [Interval(int, 2, None)]})
def curves_from_histograms(hist: ScoreHistograms, n_quantiles: int | None = 128, *, grid: int = 4096
                           ) -> ROCPRCurves:
    """Xu & Cormode (2025) steps 3-5 on pooled histograms (pure function; the benchmark varies Q with it).

    With ``n_quantiles=None`` the ECDFs are the histograms' own (linear inside a bin) and the
    thresholds are the leaf edges. Otherwise Q + 1 quantiles at probabilities ``i / Q`` of
    each class are interpolated by PCHIP and the curves evaluated on the union of both
    classes' quantiles and ``grid`` equally spaced thresholds.
    """
    if n_quantiles is None:
        s = hist.edges[::-1]
        tpr = 1.0 - hist.cdf(1, s)
        fpr = 1.0 - hist.cdf(0, s)
    else:
        probs = np.arange(n_quantiles + 1) / n_quantiles
        q0, q1 = hist.quantiles(0, probs), hist.quantiles(1, probs)
        phi0, phi1 = pchip_ecdf(q0, probs), pchip_ecdf(q1, probs)
        lo, hi = min(q0[0], q1[0]), max(q0[-1], q1[-1])
        s = np.unique(np.concatenate([q0, q1, np.linspace(lo, hi, grid)]))[::-1]
        tpr = 1.0 - _evaluate(phi1, s, q1[0], q1[-1])
        fpr = 1.0 - _evaluate(phi0, s, q0[0], q0[-1])
    tpr, fpr = np.maximum.accumulate(tpr), np.maximum.accumulate(fpr)
    s = np.concatenate([[np.inf], s, [-np.inf]])
    tpr, fpr = np.concatenate([[0.0], tpr, [1.0]]), np.concatenate([[0.0], fpr, [1.0]])
    precision, roc_auc, ap = curve_points(tpr, fpr, hist.n_positive, hist.n_negative)
    return ROCPRCurves(s, fpr, tpr, precision, roc_auc, ap, hist.n_positive, hist.n_negative, n_quantiles,
                       hist.noise_off, hist)


@validate_params({"n_quantiles": [Interval(int, 2, 100_000), None], "levels": LEVELS, "branching": BRANCHING,
                  "decay": DECAY, "epsilon": PRIVACY, "delta": PRIVACY})
def ds_roc_pr_curves(session: FederatedSession, truth: str, score: str, *, n_quantiles: int | None = 128,
                     levels: int = 8, branching: int = 2, lower: float = 0.0, upper: float = 1.0,
                     decay: float = 1.0, epsilon: float | None = None, delta: float | None = None,
                     histograms: ScoreHistograms | None = None, secure: bool | None = False) -> ROCPRCurves:
    """Federated ROC and PR curves with their areas (Xu & Cormode 2025, steps 1-5; see the module docstring).

    Parameters
    ----------
    truth, score
        Server-side references, e.g. ``"D$y"`` and ``"D$score"``.
    n_quantiles
        Q, the number of quantile intervals per class (Xu & Cormode 2025); ``None``: the
        histograms' own ECDFs at the leaf edges (exact with noise off, see above).
    levels, branching, lower, upper, decay
        The hierarchy: ``branching**levels`` equal leaves on ``[lower, upper]``; the
        privacy budget's share of level l is proportional to ``decay**l``.
    epsilon, delta
        Ask the sites for more privacy than their rules (never less).
    histograms
        Reuse histograms already collected (no new query, no new privacy cost).
    secure
        The histograms as a pooled release (:func:`ds_score_histograms`).

    Notes
    -----
    Area error bound (Xu & Cormode 2025, Theorem 1): :math:`O(1/Q)` without noise,
    :math:`\\tilde O(1/Q + 1/(n\\varepsilon))` with noise.

    References
    ----------
    Xu & Cormode (2025), "Federated Computation of ROC and PR Curves": steps 1-5,
    eqs. (1)-(3), Theorem 1.
    """
    hist = histograms or ds_score_histograms(session, truth, score, levels=levels, branching=branching,
                                             lower=lower, upper=upper, decay=decay, epsilon=epsilon, delta=delta,
                                             secure=secure)
    return curves_from_histograms(hist, n_quantiles)


# --- exact pooled references and the area error (Xu & Cormode 2025, Definition 1) ---------------------


def empirical_curves(y: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact empirical ROC points (fpr, tpr) over the distinct scores, from (0,0) to (1,1),
    and the thresholds; a pooled numpy reference for tests and benchmarks."""
    y, p = np.asarray(y), np.asarray(p, dtype=float)
    s = np.unique(p)[::-1]
    pos, neg = np.sort(p[y == 1]), np.sort(p[y == 0])
    tpr = (pos.size - np.searchsorted(pos, s, side="left")) / pos.size
    fpr = (neg.size - np.searchsorted(neg, s, side="left")) / neg.size
    return np.concatenate([[0.0], fpr, [1.0]]), np.concatenate([[0.0], tpr, [1.0]]), s


def _roc_at(fpr: np.ndarray, tpr: np.ndarray, f: np.ndarray) -> np.ndarray:
    """T(f) of a piecewise-linear ROC curve (the upper value where the curve is vertical)."""
    order = np.lexsort((tpr, fpr))
    fx, ty = fpr[order], tpr[order]
    keep = np.r_[fx[1:] != fx[:-1], True]
    return np.interp(f, fx[keep], ty[keep])


def _fpr_at(fpr: np.ndarray, tpr: np.ndarray, t: np.ndarray) -> np.ndarray:
    """F(T^{-1}(t)): the smallest FPR at which the ROC curve reaches TPR t."""
    order = np.lexsort((fpr, tpr))
    ty, fx = tpr[order], fpr[order]
    keep = np.r_[True, ty[1:] != ty[:-1]]
    return np.interp(t, ty[keep], fx[keep])


def area_errors(exact: tuple[np.ndarray, np.ndarray, float, float], estimate: ROCPRCurves,
                grid: int = 20001) -> dict[str, float]:
    """Xu & Cormode (2025) Definition 1: :math:`AE_{ROC} = \\int_0^1 |T(f) - \\hat T(f)|\\,df` and
    :math:`AE_{PR} = \\int_0^1 |P(t) - \\hat P(t)|\\,dt` with :math:`P(t) = t n^+ / (t n^+ +
    F(T^{-1}(t)) n^-)`, by the trapezoid rule on ``grid`` points. ``exact`` is
    (fpr, tpr, n_pos, n_neg) of the pooled empirical curve."""
    fpr, tpr, n_pos, n_neg = exact
    u = np.linspace(0.0, 1.0, grid)
    ae_roc = integrate.trapezoid(np.abs(_roc_at(fpr, tpr, u) - _roc_at(estimate.fpr, estimate.tpr, u)), u)
    t = u[1:]
    p_true = t * n_pos / (t * n_pos + _fpr_at(fpr, tpr, t) * n_neg)
    p_hat = t * estimate.n_positive / (t * estimate.n_positive + _fpr_at(estimate.fpr, estimate.tpr, t)
                                       * estimate.n_negative)
    ae_pr = integrate.trapezoid(np.abs(p_true - p_hat), t)
    return {"ae_roc": float(ae_roc), "ae_pr": float(ae_pr)}


# --- AUC, DeLong variance and ROC-GLM from histogram placement values ------------------------


@result
class HistogramAUC(AUCIntervals):
    """Empirical AUC with DeLong variance from placement values against histogram CDFs, its
    logit interval ``ci_logit`` (with the noise variance; the one reported) and ``ci_delong``,
    and the ROC-GLM fitted on the same placement values (``roc_glm``).

    ``auc`` weighs the two placement estimates, :math:`w \\bar V_{10} + (1 - w) \\bar V_{01}`:
    :math:`\\bar V_{10}` rests on the negatives' CDF, :math:`\\bar V_{01}` on the positives'. With exact
    references both equal the Mann-Whitney AUC (``weight`` one half); with noisy ones their noise is
    independent, and ``weight`` is the inverse-variance weight (:func:`placement_weight`) that makes
    the noise's variance least. Under the noise each mean is first corrected by its class's own mean
    placement against the same reference (``mean_v00``, ``mean_v11``; one half without noise), with the
    coefficients ``beta10``, ``beta01`` of :func:`control_variates`; ``estimator`` says whether it was,
    and why not (noise off: nothing to correct; sites that do not return the own-class sums; per site, a site that
    merged or moved cells of its own, where the own-class means are not one half without noise).

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eqs. (1)-(3) and "Distributed ROC-GLM", on the histograms of Xu & Cormode (2025), "Federated
    computation of ROC and PR curves"; DeLong et al. (1988).
    """

    _title: ClassVar[str] = ("AUC from histogram placement values (Schalk, Rehms et al. 2024 on Xu & Cormode 2025 "
                             "histograms)")

    auc: float = stat("AUC", brief=".4f")
    auc_positives: float = stat("Mean V10")
    auc_negatives: float = stat("Mean V01")
    variance: float = stat("Variance (DeLong)")
    alpha: float = stat()
    n_positive: int = stat("Positives", brief="")
    n_negative: int = stat("Negatives", brief="")
    within_bin: str = stat("Within-bin CDF")
    noise_off: bool = stat("Noise off (exact)", brief="")
    roc_glm: ROCGLMFit | None = stat()
    histograms: ScoreHistograms = hidden()
    noise_variance: float = stat("Noise variance", default=0.0)  # what the histograms' DP noise adds
    roc_glm_failed: str = stat(default="")  # why the ROC-GLM was not fitted ("": fitted, or not asked)
    weight: float = stat("Weight of mean V10", default=0.5)  # auc = weight * V10c + (1 - weight) * V01c
    mean_v00: float = stat("Mean V00 (own class)", default=float("nan"))  # NaN: the sites did not return it
    mean_v11: float = stat("Mean V11 (own class)", default=float("nan"))
    beta10: float = stat("Control variate beta (V10)", default=0.0)  # V10c = V10 - beta10 (V00 - 1/2)
    beta01: float = stat("Control variate beta (V01)", default=0.0)  # V01c = V01 - beta01 (V11 - 1/2)
    estimator: str = stat("Estimator", default="weighted means")  # which one, and why not the other
    # pairs in one released cell but different leaves (merged_pairs): the intervals widen by half their share
    merged_pairs: float = stat("Pairs in merged cells", default=0.0)
    # the variance of the error the ties within the released cells leave (tie_variance); in the intervals too
    tie_variance: float = stat("Variance of the cells' ties", default=0.0)
    # the noise variance's effective degrees of freedom (Satterthwaite; inf: known, or not estimated)
    noise_df: float = stat("Noise variance's degrees of freedom", default=float("inf"))

    @property
    def noise_error_variance(self) -> float:
        """The variance of the error that is not the records' sampling: the histograms' noise
        (``noise_variance``), widened for its own estimation from the noisy counts (``noise_df`` degrees of
        freedom: times :math:`(t_{\\nu, 1 - \\alpha/2} / z_{1 - \\alpha/2})^2`, so that the normal interval
        on it is the t interval; :func:`_noise_df`), and the ties within the released cells (``tie_variance``,
        :func:`tie_variance`)."""
        return self.noise_variance * noise_df_factor(self.noise_df, self.alpha) + self.tie_variance

    @derived("ROC-GLM AUC", brief=".4f", export=False)
    def roc_glm_auc(self) -> float | None:
        return None if self.roc_glm is None else self.roc_glm.auc

    @derived()
    def mechanism(self) -> dict[str, dict[str, Any]]:
        """Per site (or ``"pooled"``) the mechanism of the histograms' release."""
        return self.histograms.mechanism

    @derived("{level} CI (DeLong)")
    def ci_delong(self) -> ConfInt:
        """The Wald interval with the noise variance (:meth:`AUCIntervals.ci_delong`), widened by half the share
        of pairs the gate's merged cells tie (:func:`merged_pairs`)."""
        return _widened(AUCIntervals.ci_delong.fget(self), self.merged_pairs / 2)

    @derived("{level} CI (logit, eq. 3)")
    def ci_logit(self) -> ConfInt:
        """Schalk et al. (2024) eq. (3) with the noise variance (:meth:`AUCIntervals.ci_logit`), widened by half
        the share of pairs the gate's merged cells tie (:func:`merged_pairs`)."""
        return _widened(AUCIntervals.ci_logit.fget(self), self.merged_pairs / 2)

    def _notes(self) -> tuple[str, ...]:
        fallback = self.estimator.startswith(("weighted means (", "histograms alone"))
        notes = (f"Estimator: {self.estimator}.",) if fallback else ()
        if self.merged_pairs > 0:
            notes += (f"The sites released the reference's bins merged (cells released before from the same records "
                      f"would otherwise single records out): {self.merged_pairs:.1%} of the pairs lie in one merged "
                      f"cell and count one half, so the intervals are widened by +-{self.merged_pairs / 2:.3f}. Ask "
                      "for this model's AUC first on these records, or on fresh sites, for the leaves' resolution.",)
        return notes

    def plot(self, ax: Any = None, *, fpr: Any = None, tpr: Any = None, overlay_label: str = "histogram ROC") -> Any:
        """The ROC-GLM fitted on the histogram placement values (its CI in the legend) over the ROC
        of the histogram CDFs; ``fpr``, ``tpr`` overlay another curve (e.g. the finer histogram-based
        one of :func:`ds_roc_pr_curves`). Returns the Axes."""
        from dsfed_client.plots import plot_roc  # noqa: PLC0415

        curves = curves_from_histograms(self.histograms, None)
        order = np.argsort(curves.fpr, kind="stable")
        empirical = (curves.fpr[order], curves.tpr[order])
        label = "histogram AUC {:.3f} ({:.0%} CI {:.3f}-{:.3f})".format(self.auc, 1 - self.alpha, *self.ci_logit)
        overlay = None if fpr is None else (fpr, tpr)
        if self.roc_glm is None:
            return plot_roc(*empirical, label=label, overlay=overlay, overlay_label=overlay_label, ax=ax)
        t = np.linspace(0, 1, 201)
        fit = "ROC-GLM AUC {:.3f} (CI {:.3f}-{:.3f})".format(self.roc_glm.auc, *self.roc_glm.ci)
        return plot_roc(t, self.roc_glm.curve(t), label=fit, empirical=empirical, empirical_label=label,
                        overlay=overlay, overlay_label=overlay_label, ax=ax)


def noise_df_factor(df: float, alpha: float) -> float:
    """:math:`(t_{\\nu, 1 - \\alpha/2} / z_{1 - \\alpha/2})^2`: what a variance estimated with ``df`` degrees of
    freedom is multiplied by so that the normal interval on it is Student's (1 where ``df`` is infinite)."""
    if not np.isfinite(df) or df <= 0:
        return 1.0
    return float((stats.t.ppf(1 - alpha / 2, df) / stats.norm.ppf(1 - alpha / 2)) ** 2)


def _widened(ci: ConfInt, by: float) -> ConfInt:
    """``ci`` widened by ``by`` on both sides, within [0, 1] (NaN stays NaN)."""
    if by <= 0 or not np.all(np.isfinite(ci)):
        return ci
    return ConfInt(max(ci.lower - by, 0.0), min(ci.upper + by, 1.0))


@contextmanager
def reference_symbol(session: FederatedSession, hist: ScoreHistograms) -> Iterator[Ref]:
    """A handle on the reference the sites evaluate: the one they derived themselves from pooled
    histograms, or else the global CDFs (edges and cumulative counts only) sent to every site for
    the ``with`` block."""
    if hist.reference is not None:
        yield hist.reference
        return
    with session.temporary("href") as name:
        yield session.assign(name, Call("histReferenceDS", hist.edges, hist.cum_negatives, hist.cum_positives))


def auc_levels(n: int, n_sites: int, per_leaf: float = 16.0, min_levels: int = 6) -> int:
    """Binary depth for the AUC: a leaf holds about ``per_leaf`` records of one class at one
    site (``n / n_sites / 2 / per_leaf`` leaves), between ``min_levels`` and 10 levels.

    Deeper trees spread the budget over more levels, but a positive and a negative in one leaf
    count as tied (``within_bin='tied'``), which biases the AUC by
    :math:`-\\sum_j n_{0j} n_{1j} / (n_0 n_1) \\, (AUC_j - 1/2)`: the share of pairs in a leaf falls
    like the leaf width and the AUC within it less one half too, so the bias falls like its square,
    whatever the study's size (binormal scores, AUC 0.75, exact counts: -0.0087, -0.0023, -0.0005,
    -0.0001 at 8, 16, 32, 64 leaves, at n = 500 and 2,500 alike), hence at least 64 leaves
    (docs/method.md; bench/hist_auc.py). Leaves holding fewer than q records pooled are merged by
    the release gate, so in the sparse tails the leaves widen where few pairs are."""
    return int(np.clip(np.floor(np.log2(max(n / n_sites / 2 / per_leaf, 1.0))), min_levels, 10))


def _deepest_histograms(session: FederatedSession, truth: str, score: str, levels: int, pooled: bool,
                        options: dict[str, Any]) -> ScoreHistograms:
    """The histograms at ``levels``, or, where the sites refuse exact leaves (noise off) holding
    fewer than q records under their ``bins.small_bin_policy``, at the deepest level down to 3 they
    release: with noise on no leaf is refused, so this asks once."""
    while True:
        try:
            return ds_score_histograms(session, truth, score, levels=levels, secure=pooled, **options)
        except FederatedCallError as exc:
            if levels <= 3 or any(e.rule != "bins.small_bin_policy" for e in exc.failures.values()):
                raise
            levels -= 1


MAX_EXACT_LEAVES = 4096  # the leaves a site counts in one scoreHistogramDS call
MAX_REFINEMENTS = 64  # each at least halves every leaf that holds both classes: one float apart within 64


def separating_leaves(session: FederatedSession, truth: str, score: str, hist: ScoreHistograms, pooled: bool,
                      options: dict[str, Any]) -> ScoreHistograms:
    """Noise off: exact histograms whose every leaf that holds both classes holds one distinct score,
    so that the tied placement values are DeLong's and the AUC is the Mann-Whitney AUC exactly.

    Every round splits each such leaf ``[a, b)`` wider than one float (``nextafter(a) < b``) into as
    many equal parts as :data:`MAX_EXACT_LEAVES` leaves allow, asks the sites for the exact counts
    at all the edges (``scoreHistogramDS(edges=)``, through their release gate as any cuts), and
    stops when no leaf holds both classes over more than one float. Only where the sites' rules
    release cells of one record (``disclosure.q_threshold = 1``) does the gate release every edge
    asked for; where it drops one (a larger q: an edge between two records is released once, and a
    small leaf merged), the sites' leaves would no longer line up, and the histograms of the round
    before are kept. Empty leaves are merged with a neighbour before the next round, so a round's
    edges stay within the limit; once more leaves hold records than that, refining stops."""
    for _ in range(MAX_REFINEMENTS):
        e = hist.edges
        n0, n1 = np.diff(hist.cum_negatives), np.diff(hist.cum_positives)
        mixed = np.flatnonzero((n0 > 0) & (n1 > 0) & (np.nextafter(e[:-1], np.inf) < e[1:]))
        if mixed.size == 0:
            return hist
        occupied = (n0 + n1) > 0
        kept = np.concatenate([[True], occupied[:-1] | occupied[1:], [True]])  # an edge beside a record
        spare = MAX_EXACT_LEAVES - (int(kept.sum()) - 1)
        if spare < 1:  # more leaves hold records than one call counts
            return hist
        mixed = mixed[:spare]
        parts = max(2, spare // mixed.size + 1)
        finer = np.unique(np.concatenate([e[kept], *(np.linspace(e[j], e[j + 1], parts + 1)[1:-1] for j in mixed)]))
        refined = ds_score_histograms(session, truth, score, edges=finer, secure=pooled, **options)
        if not np.isin(finer, refined.edges).all():
            return hist
        hist = refined
    return hist


def _placement_gradients(hist: ScoreHistograms) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    r"""The noise of the four mean placement values as linear functions of the pooled noisy counts: the
    gradients :math:`g` of :math:`\bar V_{10}, \bar V_{00}` (both on the negatives' counts) and
    :math:`\bar V_{01}, \bar V_{11}` (on the positives'), and each count's noise variance; None with noise off.

    Class c's mean placement against the negatives' reference is :math:`N_0^{-1} \sum_k a_{c,k} \hat\ell_{0,k}`
    (:math:`\bar V_{10}` for the positives, :math:`\bar V_{00}` for the negatives), :math:`a_{c,k}` the share of
    class c above leaf k plus half its share inside it (from the released histograms), and
    :math:`\hat\ell = T z` (:func:`tree_least_squares`, computed column by column), divided by the reference's
    total :math:`\hat N_0 = \sum_k \hat\ell_{0,k}` (:func:`_centred_placements`); so
    :math:`g_{10} = T^T (a_1 - \bar V_{10}) / N_0`, :math:`g_{00} = T^T (a_0 - \tfrac12) / N_0`,
    :math:`g_{01} = -T^T (a_0 - 1 + \bar V_{01}) / N_1`, :math:`g_{11} = T^T (a_1 - \tfrac12) / N_1`, the means
    from the same shares."""
    if hist.noise_off or hist.level_variance.size == 0:
        return None
    leaves = hist.edges.size - 1
    T, per_count = _tree_map(hist)

    def shares(cum: np.ndarray) -> np.ndarray:
        share = np.clip(np.diff(cum), 0.0, None)
        return share / share.sum() if share.sum() > 0 else np.full(leaves, 1.0 / leaves)

    u = _centred_placements(shares(hist.cum_negatives), shares(hist.cum_positives), hist.n_negative,
                            hist.n_positive)
    return {name: v @ T for name, v in u.items()}, per_count


def _centred_placements(s0: np.ndarray, s1: np.ndarray, n0: float, n1: float) -> dict[str, np.ndarray]:
    r"""The gradients of the four mean placement values in their reference's leaf estimates, from each class's
    shares by leaf ``s0``, ``s1`` (each summing to one) and totals ``n0``, ``n1``.

    The sites divide a reference's cumulative counts by its total, :math:`\tilde F_0(x) = \hat C_0(x) / \hat N_0`
    with :math:`\hat N_0 = \sum_k \hat\ell_{0,k}`, so :math:`\bar V_{10} = \sum_k a_{1,k} \hat\ell_{0,k} / \hat N_0`
    (:math:`a_{1,k}` the positives' share above leaf k plus half their share inside it) has the gradient
    :math:`(a_{1,k} - \bar V_{10}) / N_0`; likewise :math:`\bar V_{00}` with :math:`a_0` (its mean one half),
    :math:`\bar V_{01} = 1 - \sum_k a_{0,k} \hat\ell_{1,k} / \hat N_1` and :math:`\bar V_{11}`. With exact class
    totals the leaf estimates' noise sums to zero and the centring changes nothing; with noisy totals it is
    the CDF's normalisation (a shift of every leaf alike moves no placement value)."""
    a0, a1 = (1.0 - np.cumsum(s) + 0.5 * s for s in (s0, s1))
    return {"v10": (a1 - a1 @ s0) / n0, "v00": (a0 - a0 @ s0) / n0, "v01": -(a0 - a0 @ s1) / n1,
            "v11": (a1 - a1 @ s1) / n1}


def placement_noise_variances(hist: ScoreHistograms) -> tuple[float, float]:
    r"""The variances the histograms' DP noise adds to the two mean placement values,
    :math:`\bar V_{10}` and :math:`\bar V_{01}` (to first order; both 0 with noise off).

    The leaf estimates are linear in the noisy counts of every level,
    :math:`\hat\ell = T z` (:func:`tree_least_squares`, computed here column by column), and the
    mean placement value of the positives is a linear function of the negatives' leaf estimates:
    :math:`\bar V_{10} = N_0^{-1} \sum_k a_k \hat\ell_{0,k}` with :math:`a_k` the share of positives
    above leaf k plus half the share inside it (uniform within a leaf, as the linear CDF assumes),
    estimated from the positives' histogram. So its noise variance is
    :math:`N_0^{-2} \sum_i (T^T a)_i^2 \sigma_i^2`, :math:`\sigma_i^2` the pooled noise variance of
    count i's level; likewise for :math:`\bar V_{01}` on the positives' counts. The two classes' counts
    carry independent noise, so the two errors are independent. The isotonic step and the sampling of
    the scores are left out (the latter is DeLong's variance)."""
    grads = _placement_gradients(hist)
    if grads is None:
        return 0.0, 0.0
    g, per_count = grads
    return float(np.sum(g["v10"] ** 2 * per_count)), float(np.sum(g["v01"] ** 2 * per_count))


@dataclass(frozen=True)
class ControlVariates:
    """The control variates' coefficients, the noise variances of the two corrected means, the weight of the
    first and the estimated bias of the weighted corrected means (:func:`control_variates`)."""

    beta10: float
    beta01: float
    variance10: float
    variance01: float
    weight: float = 0.5
    bias: float = 0.0
    df: float = float("inf")  # the reported noise variance's effective degrees of freedom (Satterthwaite)


COARSE_NODES = 8  # the class shares behind beta, the weight and the noise variance: at most this many nodes


def _tree_map(hist: ScoreHistograms) -> tuple[np.ndarray, np.ndarray]:
    """The tree's least-squares map :math:`T` (leaves by counts of every level, :func:`tree_least_squares`,
    computed column by column) and each count's noise variance."""
    b, leaves = hist.branching, hist.edges.size - 1
    sizes = [b**lv for lv in range(hist.level_variance.size)]
    if sizes[-1] != leaves:
        raise ValueError("the histograms' level variances do not match their leaves")
    unit = np.eye(sum(sizes))
    offsets = np.cumsum([0] + sizes)
    T = tree_least_squares([unit[offsets[lv]:offsets[lv + 1]] for lv in range(len(sizes))],
                           hist.level_variance, b)
    return T, np.repeat(hist.level_variance, sizes)


def _coarse_shares(leaves: np.ndarray, group: int) -> np.ndarray:
    """A class's shares by leaf from its leaf estimates summed over nodes of ``group`` leaves and spread evenly
    inside each: linear in the leaves (up to the total they are divided by)."""
    return np.repeat(leaves.reshape(-1, group).sum(axis=1) / group, group) / leaves.sum()


def _coarse_gradients(l0: np.ndarray, l1: np.ndarray, group: int) -> dict[str, np.ndarray]:
    """:func:`_centred_placements` from the two classes' coarse shares (:func:`_coarse_shares`)."""
    return _centred_placements(_coarse_shares(l0, group), _coarse_shares(l1, group), l0.sum(), l1.sum())


def _nuisance(l0: np.ndarray, l1: np.ndarray, T: np.ndarray, per: np.ndarray, group: int) -> np.ndarray:
    r""":math:`(w, \beta_{10}, \beta_{01}, r_{10}, r_{01})` from the two classes' leaf estimates: with the means'
    gradients in the counts :math:`g = T^T u` (:func:`_coarse_gradients`) and D the counts' noise variances,
    :math:`\beta_{10} = g_{10}^T D g_{00} / g_{00}^T D g_{00}`, :math:`r_{10} = g_{10}^T D g_{10} - \beta_{10}
    g_{10}^T D g_{00}`, likewise :math:`\beta_{01}, r_{01}` with :math:`g_{01}, g_{11}`, and
    :math:`w = r_{01} / (r_{10} + r_{01})`."""
    g = {name: u @ T for name, u in _coarse_gradients(l0, l1, group).items()}
    A, C = np.sum(g["v00"] ** 2 * per), np.sum(g["v11"] ** 2 * per)
    if A <= 0 or C <= 0:
        return np.array([0.5, 0.0, 0.0, 0.0, 0.0])
    b10, b01 = np.sum(g["v10"] * g["v00"] * per) / A, np.sum(g["v01"] * g["v11"] * per) / C
    r10 = max(np.sum(g["v10"] ** 2 * per) - b10**2 * A, 0.0)
    r01 = max(np.sum(g["v01"] ** 2 * per) - b01**2 * C, 0.0)
    w = 0.5 if r10 + r01 <= 0 else r01 / (r10 + r01)
    return np.array([w, b10, b01, r10, r01])


def control_variates(hist: ScoreHistograms, *, coarse_nodes: int = COARSE_NODES, stein: bool = True,
                     consistent: bool = True) -> ControlVariates:
    r"""Each class's own mean placement as a control variate of the other mean on the same counts, and the
    bias that estimating the coefficients from the same counts leaves, estimated and returned.

    :math:`\bar V_{00}`, the negatives against their own CDF, is one half without noise (ties one half,
    the reference's edges as cells: :math:`\sum_c n_c (C_{c-1} + n_c / 2) = N^2 / 2`), and its noise comes
    from the same leaf estimates as :math:`\bar V_{10}`'s: a shift of the negatives' reference moves both
    alike. So :math:`\bar V_{10} - \beta_{10} (\bar V_{00} - \tfrac12)` keeps the AUC and drops the noise the
    two share, least at :math:`\beta_{10} = \mathrm{cov}(\bar V_{10}, \bar V_{00}) / \mathrm{var}(\bar V_{00})
    = \sum_i g_{10,i} g_{00,i} \sigma_i^2 / \sum_i g_{00,i}^2 \sigma_i^2` (the control variate with known mean;
    Glynn & Szechtman 2002), its noise variance :math:`\sum_i (g_{10,i} - \beta_{10} g_{00,i})^2 \sigma_i^2`;
    likewise :math:`\bar V_{01}` with :math:`\bar V_{11}` on the positives' counts; the two corrected means are
    weighted by their inverse noise variances (:func:`_nuisance`).

    The gradients :math:`g` rest on each class's shares, which only the released counts give. Two steps keep
    that from biasing the AUC or inflating its reported variance:

    * the shares are read from the tree's consistent (not monotone) estimates at its level of at most
      :data:`COARSE_NODES` nodes, even inside each: linear in the noisy counts, and with a relative noise
      far below the leaves' (the leaves' own, at n = 500 and 64 leaves, put the reported variance 25-30 %
      above the error's; a quadratic form of noisy gradients is inflated by their noise);
    * :math:`\hat\beta` and :math:`\hat w` still depend on the noise :math:`\varepsilon` they multiply, so
      :math:`E[\hat c(\varepsilon)\, u^T \varepsilon] \ne 0`. For Gaussian noise of covariance S (the
      leaf estimates' :math:`T D T^T`) Stein's lemma (Stein 1981) gives it exactly,
      :math:`E[\nabla \hat c]^T S u`, estimated by the gradient at the released counts, a directional
      derivative in the direction :math:`S u` (central differences of :func:`_nuisance`). ``bias`` sums those
      of the four terms, :math:`\hat w u_{10}^T\varepsilon_0`, :math:`\hat w \hat\beta_{10} u_{00}^T\varepsilon_0`,
      :math:`(1 - \hat w) u_{01}^T\varepsilon_1`, :math:`(1 - \hat w)\hat\beta_{01} u_{11}^T\varepsilon_1`, with
      the :math:`u` (the means' gradients in the leaves) from the coarse shares too. The AUC is
      :math:`\hat w \bar V_{10}^c + (1 - \hat w) \bar V_{01}^c - \mathrm{bias}`.

    All of it comes from the released counts (post-processing: no budget). Noise off, everything is 0 and
    the weight one half: the estimator is the mean of the two, pROC's AUC. Histograms without their
    consistent counts (built by hand) use the monotone ones.

    ``coarse_nodes``, ``stein`` and ``consistent`` are there to compare: the leaves' own shares of the monotone
    CDFs, no bias correction (``coarse_nodes`` = the leaves, ``stein=False``, ``consistent=False``) is the
    estimator before (``bench/hist_auc.py``'s rows ``_leaves``).

    >>> edges = np.linspace(0.0, 1.0, 5)
    >>> hist = ScoreHistograms(edges, np.array([0., 2, 3, 7, 9]), np.array([0., 1, 4, 5, 9]), 9.0, 9.0, True,
    ...                        np.empty(0), {})
    >>> control_variates(hist)
    ControlVariates(beta10=0.0, beta01=0.0, variance10=0.0, variance01=0.0, weight=0.5, bias=0.0, df=inf)
    """
    if hist.noise_off or hist.level_variance.size == 0:
        return ControlVariates(0.0, 0.0, 0.0, 0.0)
    T, per = _tree_map(hist)
    c0 = hist.cum_negatives if hist.consistent_negatives is None or not consistent else hist.consistent_negatives
    c1 = hist.cum_positives if hist.consistent_positives is None or not consistent else hist.consistent_positives
    l0, l1 = np.diff(np.asarray(c0, dtype=float)), np.diff(np.asarray(c1, dtype=float))
    leaves, b = l0.size, hist.branching
    group = leaves // b ** min(int(np.floor(np.log(coarse_nodes) / np.log(b) + 1e-9)), hist.level_variance.size - 1)
    w, beta10, beta01, r10, r01 = _nuisance(l0, l1, T, per, group)
    if not stein:
        return ControlVariates(float(beta10), float(beta01), float(r10), float(r01), float(w))
    S = (T * per) @ T.T
    n0, n1 = l0.sum(), l1.sum()
    u = _coarse_gradients(l0, l1, group)
    zero = np.zeros(leaves)

    def slope(index: Any, d0: np.ndarray, d1: np.ndarray) -> float:
        """The directional derivative of a function of the nuisance (central differences; it is smooth)."""
        scale = max(np.abs(d0).max(), np.abs(d1).max())
        if scale <= 0:
            return 0.0
        step = 1e-4 * max(1.0, (n0 + n1) / (2 * leaves)) / scale
        up, down = _nuisance(l0 + step * d0, l1 + step * d1, T, per, group), \
            _nuisance(l0 - step * d0, l1 - step * d1, T, per, group)
        return float((index(up) - index(down)) / (2 * step))

    bias = (slope(lambda v: v[0], S @ u["v10"], zero) - slope(lambda v: v[0] * v[1], S @ u["v00"], zero)
            - slope(lambda v: v[0], zero, S @ u["v01"]) - slope(lambda v: (1 - v[0]) * v[2], zero, S @ u["v11"]))
    return ControlVariates(float(beta10), float(beta01), float(r10), float(r01), float(w), bias,
                           _noise_df(l0, l1, T, per, S, group))


def _noise_df(l0: np.ndarray, l1: np.ndarray, T: np.ndarray, per: np.ndarray, S: np.ndarray, group: int) -> float:
    r"""The effective degrees of freedom of the reported noise variance :math:`\hat v = \hat w^2 r_{10} + (1 -
    \hat w)^2 r_{01}` (:func:`_nuisance`), by Satterthwaite's (1946) match :math:`\nu = 2 \hat v^2 /
    \widehat{\mathrm{var}}(\hat v)`.

    :math:`\hat v` is a smooth function of the two classes' leaf estimates through their sums over the coarse
    nodes alone (:func:`_coarse_shares`), so its gradient is constant inside a node: one central difference per
    node and class. To first order :math:`\mathrm{var}(\hat v) = \nabla_0^T S \nabla_0 + \nabla_1^T S
    \nabla_1` (S the leaf estimates' noise covariance, each class's alike; the classes' noise independent).
    Infinite where :math:`\hat v` does not move with the counts."""
    leaves = l0.size
    base = _nuisance(l0, l1, T, per, group)
    v = base[0] ** 2 * base[3] + (1 - base[0]) ** 2 * base[4]
    step = 1e-4 * max(1.0, (l0.sum() + l1.sum()) / (2 * leaves))
    spread = 0.0
    for cls in (0, 1):
        grad = np.zeros(leaves)
        for j in range(leaves // group):
            d = np.zeros(leaves)
            d[j * group:(j + 1) * group] = step
            up = _nuisance(l0 + d, l1, T, per, group) if cls == 0 else _nuisance(l0, l1 + d, T, per, group)
            down = _nuisance(l0 - d, l1, T, per, group) if cls == 0 else _nuisance(l0, l1 - d, T, per, group)
            vu = up[0] ** 2 * up[3] + (1 - up[0]) ** 2 * up[4]
            vd = down[0] ** 2 * down[3] + (1 - down[0]) ** 2 * down[4]
            grad[j * group:(j + 1) * group] = (vu - vd) / (2 * step * group)
        spread += float(grad @ S @ grad)
    return float(2 * v * v / spread) if spread > 0 and v > 0 else float("inf")


def placement_weight(hist: ScoreHistograms) -> float:
    r"""The weight :math:`w` of :math:`\bar V_{10}` in the AUC :math:`w \bar V_{10} + (1 - w) \bar V_{01}`
    that makes the noise's variance least: :math:`w = v_{01} / (v_{10} + v_{01})` (inverse-variance
    weights of two unbiased estimates with independent errors, the variances of
    :func:`placement_noise_variances`); one half with noise off, where both means are the
    Mann-Whitney AUC.

    :math:`\bar V_{10}` carries the noise of the negatives' counts divided by :math:`N_0`,
    :math:`\bar V_{01}` that of the positives' divided by :math:`N_1`: the mean over the larger class
    is the better one (prevalence 0.3: :math:`v_{01} \approx 5 v_{10}`), and the equal mean has
    :math:`(v_{10} + v_{01}) / 4`, :math:`(v_{10} + v_{01})^2 / (4 v_{10} v_{01})` times the least variance
    :math:`v_{10} v_{01} / (v_{10} + v_{01})` (1.8 at :math:`v_{01} = 5 v_{10}`).
    The weight is computed from the released counts only (post-processing: no budget)."""
    v10, v01 = placement_noise_variances(hist)
    return 0.5 if v10 + v01 <= 0 else v01 / (v10 + v01)


def noise_variance(hist: ScoreHistograms, weight: float = 0.5) -> float:
    r"""The variance the histograms' DP noise adds to the histogram AUC
    :math:`w \bar V_{10} + (1 - w) \bar V_{01}` (to first order; 0 with noise off):
    :math:`w^2 v_{10} + (1 - w)^2 v_{01}` from :func:`placement_noise_variances`; ``weight`` one half
    for the equal mean of the two (a paired comparison's AUCs), :func:`placement_weight` for
    :func:`ds_hist_auc`'s."""
    v10, v01 = placement_noise_variances(hist)
    return float(weight**2 * v10 + (1.0 - weight) ** 2 * v01)


@validate_params({"alpha": ALPHA, "within_bin": [Options({"tied", "linear"})], "n_thresholds": N_THRESHOLDS,
                  "levels": [*LEVELS, None]})
def ds_hist_auc(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05,
                within_bin: str = "tied", roc_glm: bool = True, n_thresholds: int = 99,
                levels: int | None = None, histograms: ScoreHistograms | None = None, secure: bool | None = False,
                n_complete: int | None = None, **histogram_options: Any) -> HistogramAUC:
    """AUC, DeLong variance, logit CI and ROC-GLM from placement values against histogram CDFs.

    1. the global CDFs :math:`\\tilde F_0, \\tilde F_1` come from :func:`ds_score_histograms`
       (noisy under each site's mechanism, or exact with noise off);
    2. each site evaluates them at its own exact scores: :math:`V_{10} = \\tilde F_0(x)` for
       its positives, :math:`V_{01} = 1 - \\tilde F_1(x)` for its negatives, and returns only
       the counts, sums and sums of squares (rule A1);
    3. :math:`\\widehat{AUC} = w \\bar V_{10} + (1 - w) \\bar V_{01}`, ``w`` the inverse-variance weight of
       the two means under the noise (:func:`placement_weight`; one half with noise off, where both are the
       Mann-Whitney AUC), :math:`\\widehat{var} = s^2(V_{10})/n_1 + s^2(V_{01})/n_0` (DeLong 1988; Schalk et
       al. 2024, eqs. 1-2), plus the variance the histograms' noise adds (:func:`noise_variance`); CI by
       Schalk et al. (2024) eq. (3) with both. Under the noise each mean is first corrected by its class's
       own mean placement, :math:`\\bar V_{10} - \\beta_{10} (\\bar V_{00} - \\tfrac12)` and
       :math:`\\bar V_{01} - \\beta_{01} (\\bar V_{11} - \\tfrac12)` (:func:`control_variates`; Glynn &
       Szechtman 2002), which halves the noise's standard deviation; the weights and the noise variance are
       then those of the corrected means, from the classes' shares at a coarse level of the tree, and the bias
       that estimating them from the same counts leaves is taken out (Stein's lemma; Stein 1981).
       Noise off, :math:`\\beta = 0`. Sites that do not return the
       own-class sums (a server before them) get the weighted means as before, and ``estimator`` says so;
    4. the ROC-GLM (Schalk et al. 2024) by the distributed probit GLM on each site's table of
       :math:`u_{ij} = 1(1 - V_{10,i} \\le t_j)`; where the negatives' reference carries more noise than the
       positives' (:math:`v_{10} > v_{01}`: fewer negatives), on the negatives' table of
       :math:`1(V_{01,j} \\le s_k)` instead, whose probit line is the inverse curve's (Pepe & Cai 2004;
       ``roc_glm.placed``): the curve's noise, and the bias a nonlinear fit makes of it, are then those of the
       larger class's reference. Noise off, the positives' (Schalk et al.'s). Where the sites merged the
       reference's cells so far that the AUC is the histograms' alone (:func:`histograms_alone`), the ROC-GLM is
       fitted on those histograms' leaves too (:func:`histograms_roc_glm`): a fit through one merged cell's single
       placement value would say nothing of the curve.

    A ROC-GLM that cannot be fitted (scores that separate the classes make its slope infinite: the
    fit does not converge or its information matrix is singular) leaves ``roc_glm`` None and
    ``roc_glm_failed`` saying why; the empirical AUC and its interval stand.

    Exact (pROC's AUC and DeLong variance) when noise is off and the bins separate all
    distinct scores, with ``within_bin='tied'`` (the default: sites that keep a cut history
    evaluate the reference as a step inside its bins, so that no placement sum gives a record's
    score away); with ``'linear'`` when moreover every score lies at its bin's mid-point.
    With noise off the histograms are refined until they do (:func:`separating_leaves`; where the
    sites release cells of one record).
    ``levels=None`` picks the depth by :func:`auc_levels` from the record count: ``n_complete`` where the
    caller has it released already (``validate()``: the Brier score's n), else asked (per site ``lengthDS``;
    pooled, the total of a pooled ``table1DDS`` of the outcome, a release the sites' row-set audit may refuse
    after the cells released before over the same records);
    ``histogram_options`` go to :func:`ds_score_histograms` (branching, lower, upper, decay,
    totals, epsilon, delta). The class totals are exact by default (``totals='exact'``): the
    placement sums release n1 and n0 anyway, so a noisy level 0 would only waste budget.

    ``secure=True`` does every step as a pooled release (secure aggregation with pooled
    thresholds): the analyst sees only sums over sites, the histogram noise is split between the
    sites, the reference CDFs are the ones the sites derived themselves from the pooled histograms
    (the analyst sends none), and the ROC-GLM's iterates come from the sites too.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM": eqs. (1)-(2) (placement values, DeLong variance), eq. (3) (logit CI), "Distributed ROC-GLM";
    Xu & Cormode (2025), "Federated computation of ROC and PR curves": the histograms.
    """
    histogram_options.setdefault("totals", "exact")
    if roc_glm:  # every site that offers the ROC-GLM's data takes the threshold grid, before the histograms' budget
        session.require_enabled(before="ds_hist_auc", within={"histRocGlmDataDS": {"thresholds": n_thresholds}})
    agg = session.aggregation(secure)
    if histograms is not None:
        hist = histograms
    elif levels is not None:
        hist = ds_score_histograms(session, truth, score, levels=levels, secure=agg.pooled, **histogram_options)
    else:
        # a leaf holds about as many noisy parts as the strategy sums (one under pooled releases)
        n = agg.count(truth) if n_complete is None else int(n_complete)
        hist = _deepest_histograms(session, truth, score, auc_levels(n, agg.noisy_parts),
                                   agg.pooled, histogram_options)
    if histograms is None and hist.noise_off:
        hist = separating_leaves(session, truth, score, hist, agg.pooled, histogram_options)
    with reference_symbol(session, hist) as reference:
        args = (Ref(truth), Ref(score), reference)
        sums, described = agg.sum_described("histPlacementSumsDS", *args, described="placement_cells",
                                             within_bin=within_bin)
        dropped = merged_cells(described)
        m = placement_moments(sums)
        v10, v01 = placement_noise_variances(hist)
        own = (sums["sum_v00"] / m.n0, sums["sum_v11"] / m.n1) if {"sum_v00", "sum_v11"} <= sums.keys() \
            else (float("nan"), float("nan"))
        merged = sums.get("own_cells_coarsened", 0.0) > 0  # per site: a site's gate coarsened the cells of its own
        mean10, mean01, betas, why = m.mean10, m.mean01, (0.0, 0.0), _estimator(hist, within_bin, own, merged)
        df = float("inf")  # the weighted means' noise variance: its estimation is not accounted for
        if not why:  # each mean corrected by its class's own mean placement (one half without noise)
            cv = control_variates(hist)
            betas, r10, r01, weight, bias = (cv.beta10, cv.beta01), cv.variance10, cv.variance01, cv.weight, cv.bias
            df = cv.df
            mean10, mean01 = mean10 - cv.beta10 * (own[0] - 0.5), mean01 - cv.beta01 * (own[1] - 0.5)
        else:
            r10, r01, bias = v10, v01, 0.0
            weight = 0.5 if r10 + r01 <= 0 else r01 / (r10 + r01)  # placement_weight
        auc = float(np.clip(weight * mean10 + (1.0 - weight) * mean01 - bias, 0.0, 1.0))
        noise = weight**2 * r10 + (1.0 - weight) ** 2 * r01
        variance, tied, fit, failed = m.variance, merged_pairs(hist, dropped), None, ""
        # the ties within the released cells (the reference's, where the gate merged some: merged_pairs bounds those)
        ties = cell_ties = max(tie_variance(hist, cuts) for cuts in released_cell_cuts(hist, described))
        alone = histograms_alone(hist, m.n0, m.n1, v10 + v01) if tied > 0 and not hist.noise_off else None
        leaf_ties = 0.0 if alone is None else tie_variance(hist, hist.edges[1:-1])  # the histograms' own cells
        if alone is not None and (_half_width(alone[1], alone[2] + leaf_ties, alpha)
                                  < _half_width(variance, noise * noise_df_factor(df, alpha) + ties, alpha) + tied / 2):
            # the placement sums over merged cells bound the AUC less tightly than the histograms alone do
            (auc, variance, noise), weight, ties, df = alone, 0.5, leaf_ties, float("inf")
            m = replace(m, mean10=auc, mean01=auc)  # both classes' means are the histograms' AUC here
            why = (f"histograms alone: the sites merged the reference's cells, {tied:.1%} of the pairs in one merged "
                   "cell, and the placement sums' interval widened by half that share would be wider than this one")
        bound = tied / 2  # what the merged cells can do to an AUC over the placement values (the ROC-GLM's too)
        if why.startswith("histograms alone"):
            tied = 0.0
        if roc_glm and why.startswith("histograms alone"):  # its fit on those histograms too: no site asked
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # as the sites' fit: a nearly separated curve says so by failing
                    fit = histograms_roc_glm(hist, n_thresholds, alpha, variance, noise + ties,
                                             "negatives" if v10 > v01 else "positives")
            except (ConvergenceError, np.linalg.LinAlgError) as exc:
                failed = f"{type(exc).__name__} (on the histograms alone): {exc}"
        elif roc_glm:
            try:
                with session.temporary("hroc") as roc_data, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    # the placement values against the reference of less noise (noise off: the positives')
                    inverse = {"placed": "negatives"} if v10 > v01 else {}
                    data = session.assign(roc_data, Call("histRocGlmDataDS", *args, n_thresholds,
                                                         within_bin=within_bin, pooled=agg.pooled, **inverse))
                    glm = ds_glm(session, "u ~ x", data, family="binomial", link="probit", weights="w",
                                 secure=agg.pooled, null_model=False)
            except (ConvergenceError, FederatedCallError) as exc:  # e.g. scores that separate the classes
                failed = f"{type(exc).__name__}: {exc}"
            else:
                a, b = (float(v) for v in glm.params)
                if inverse:  # the inverse curve's coefficients (c, d): Phi^-1(t) = c + d Phi^-1(ROC(t))
                    a, b = -a / b, 1.0 / b
                # the ROC-GLM rests on one class's placement values alone: their noise, and the cells' ties
                fit = ROCGLMFit(binormal_auc(a, b), a, b, m.variance, alpha, n_thresholds, glm,
                                (v01 if inverse else v10) + cell_ties, "negatives" if inverse else "positives", bound)
    estimator = "control variates" if not why else why if why.startswith("histograms alone") else \
        f"weighted means ({why})"
    return HistogramAUC(auc, m.mean10, m.mean01, variance, alpha, m.n1, m.n0, within_bin, hist.noise_off, fit,
                        hist, noise, failed, weight, *own, *betas, estimator, tied, ties, df)


def _half_width(variance: float, noise: float, alpha: float) -> float:
    return float(stats.norm.ppf(1 - alpha / 2) * np.sqrt(variance + noise))


def histograms_alone(hist: ScoreHistograms, n0: int, n1: int, noise: float) -> tuple[float, float, float]:
    """The Mann-Whitney AUC of the two classes' histograms, pairs in one leaf counting one half (Xu & Cormode
    2025: the area under the ROC curve of the histograms' CDFs), its DeLong variance from the histograms' own
    placement values (a leaf's positives all at :math:`\\tilde F_0` below it plus half its negatives' share, its
    negatives likewise; DeLong et al. 1988) at the exact class counts ``n0``, ``n1``, and ``noise``: the variance
    the histograms' noise adds, both classes' (to first order the placement means' two,
    :func:`placement_noise_variances`). A post-processing of the released histograms only, so no cell of the
    scores is read: the estimate where the sites merged the reference's cells for the exact placement sums. Like
    the placement sums' estimate, it leaves the leaves' own ties out of its interval."""
    l0, l1, v10, v01 = leaf_placements(hist)
    s0, s1 = l0 / l0.sum(), l1 / l1.sum()
    a = float(np.clip(np.dot(s1, v10), 0.0, 1.0))
    variance = np.dot(s1, (v10 - a) ** 2) * n1 / max(n1 - 1, 1) / n1 + np.dot(s0, (v01 - a) ** 2) * n0 / max(
        n0 - 1, 1) / n0
    return a, float(variance), float(noise)


def leaf_placements(hist: ScoreHistograms) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per leaf of the histograms: the noisy counts of negatives and positives (below 0 read as 0), a positive's
    share of the negatives below it (:math:`\\tilde F_0`, half its own leaf's negatives counted) and a negative's
    share of the positives above it (:math:`1 - \\tilde F_1`, likewise): the placement values of records at the
    leaf, their order within it unknown (pairs in one leaf count one half; Xu & Cormode 2025)."""
    l0, l1 = (np.clip(np.diff(c), 0.0, None) for c in (hist.cum_negatives, hist.cum_positives))
    s0, s1 = l0 / l0.sum(), l1 / l1.sum()
    v10 = np.concatenate([[0.0], np.cumsum(s0)[:-1]]) + s0 / 2
    v01 = 1.0 - (np.concatenate([[0.0], np.cumsum(s1)[:-1]]) + s1 / 2)
    return l0, l1, v10, v01


def histograms_roc_glm(hist: ScoreHistograms, n_thresholds: int, alpha: float, variance: float, noise: float,
                       placed: str) -> ROCGLMFit:
    """The ROC-GLM (Schalk et al. 2024) on the noisy histograms alone: the records of a leaf at the leaf's placement
    value (:func:`leaf_placements`), weighted by its noisy count, in Schalk et al.'s table
    :math:`u_j = 1(PV \\le t_j)` (``placed``: the positives' values, or the negatives' for the inverse curve, as
    :func:`ds_hist_auc` picks them), fitted by R's probit GLM (:func:`~dsfed_client.analyses.glm.probit_fit`). A
    post-processing of the released histograms: no site is asked and no cell of the scores is read. Its interval
    is eq. (3) on ``variance`` and ``noise`` (:func:`histograms_alone`'s, the leaves' ties included)."""
    l0, l1, v10, v01 = leaf_placements(hist)
    pv, weight = (1.0 - v10, l1) if placed == "positives" else (v01, l0)
    u, x, w = roc_glm_rows(pv, n_thresholds, weight)
    glm = probit_fit(x, u, w)
    a, b = (float(v) for v in glm.params)
    if placed == "negatives":  # the inverse curve's coefficients (c, d): Phi^-1(t) = c + d Phi^-1(ROC(t))
        a, b = -a / b, 1.0 / b
    return ROCGLMFit(binormal_auc(a, b), a, b, variance, alpha, n_thresholds, glm, noise, placed,
                     fitted_on="the released histograms' leaves (no cell of the scores read)")


def merged_cells(described: list[dict[str, Any]]) -> list[tuple[list[float], list[float]]]:
    """Per release of the reference's cells (a site's, or the pooled one: ``placement_cells``) that dropped or
    moved edges: the released cells' inner cuts, and the reference's as far as the release tells them (the
    dropped edges back, a moved edge where it was; the cut it moved onto kept too, which it may have been
    already: the finer of the two readings, so the share of pairs the merging ties is not understated)."""
    out = []
    for cells in described:
        moved = [float(a) for a, b in cells.get("moved", []) if a != b]
        dropped = [float(v) for v in cells.get("dropped", [])]
        if (dropped or moved) and "cuts" in cells:
            released = [float(v) for v in cells["cuts"]]
            out.append((released, sorted(set(released + moved + dropped))))
    return out


def merged_pairs(hist: ScoreHistograms, releases: list[tuple[list[float], list[float]]]) -> float:
    """The share of positive-negative pairs that lie in one released cell but would lie in different cells of the
    reference had the gate not merged them (:func:`merged_cells`: the released cells' cuts and the reference's):
    their order is lost to the cells, where each counts one half. With exact counts each such pair moves the
    Mann-Whitney AUC by at most :math:`\\pm 1/(2 n_0 n_1)`, so half this share bounds what the merging can do to
    it (a bound, not a variance: the pairs' order within a cell is unknown). Computed from the histograms' counts
    at their leaves, a leaf counted in the cell of its mid-point: under the noise an estimate of that bound.
    Per site, each site's records are read at its own cells, and the errors of the sites add: the sum of the
    sites' shares (each with the global counts, which hold any site's), at most 1."""
    n0, n1 = (np.clip(np.diff(c), 0.0, None) for c in (hist.cum_negatives, hist.cum_positives))
    total = n0.sum() * n1.sum()
    if total <= 0 or not releases:
        return 0.0
    mid = (hist.edges[:-1] + hist.edges[1:]) / 2

    def tied(cuts: list[float]) -> float:
        cell = np.searchsorted(np.sort(np.asarray(cuts, dtype=float)), mid)
        return float(np.dot(np.bincount(cell, n0), np.bincount(cell, n1)))

    return float(np.clip(sum(max(tied(cuts) - tied(reference), 0.0) / total for cuts, reference in releases), 0.0,
                         1.0))


def released_cell_cuts(hist: ScoreHistograms, described: list[dict[str, Any]]) -> list[np.ndarray]:
    """The inner cuts of the reference's cells each release of the placement sums read at (``placement_cells``: a
    site's, or the pooled one), the edges the gate dropped or moved back (:func:`merged_cells`: what the merging
    ties, :func:`merged_pairs` bounds); the histograms' inner leaf edges where no release names its cuts."""
    out = []
    for cells in described:
        if "cuts" in cells:
            moved = [float(a) for a, b in cells.get("moved", []) if a != b]
            out.append(np.unique(np.asarray([float(v) for v in cells["cuts"]]
                                            + moved + [float(v) for v in cells.get("dropped", [])], dtype=float)))
    return out or [np.asarray(hist.edges[1:-1], dtype=float)]


def tie_variance(hist: ScoreHistograms, cuts: np.ndarray) -> float:
    r"""The variance of the error the ties within the released cells leave in the histogram AUC: an unbiased
    estimate, from the histograms' counts, of
    :math:`\sum_c n_{0c} n_{1c} (n_{0c} + n_{1c} + 1) / (12 N_0^2 N_1^2)` over the cells between ``cuts``.

    A tied placement value counts each positive-negative pair in one cell one half, so the estimate is off the
    pooled Mann-Whitney AUC by :math:`D = -\sum_c \pi_c (A_c - \tfrac12)`, :math:`\pi_c = n_{0c} n_{1c} /
    (N_0 N_1)` the cell's share of the pairs and :math:`A_c` the AUC of the pairs inside it (docs/method.md).
    No released count holds the order of the records inside a cell. Taken as exchangeable there, :math:`A_c` is a
    Mann-Whitney statistic under the null, of mean one half and variance :math:`(n_{0c} + n_{1c} + 1) / (12 n_{0c}
    n_{1c})` (Mann & Whitney 1947), independent between cells: :math:`E[D] = 0` and :math:`E[D^2]` the sum above.
    A risk that is smooth inside a cell adds a systematic part of the order of the cell's width squared
    (:func:`auc_levels`), which this leaves out.

    The cells' counts come from each class's consistent leaf estimates, linear inside a leaf (as the reference
    reads them); under the noise :math:`E[\hat n_0 \hat n_1 (\hat n_0 + \hat n_1 + 1)] = n_0 n_1 (n_0 + n_1 +
    1) + n_1 s_0^2 + n_0 s_1^2` (the classes' noise independent, Gaussian, of mean 0; :math:`s^2` a cell count's
    noise variance, from the tree's least squares map), so those terms are taken off, the sum kept at least 0.
    Noise off it is 0: :func:`ds_hist_auc` refines the leaves until each that holds both classes holds one
    distinct score (:func:`separating_leaves`), whose pairs are ties in the data too, and the AUC is pROC's; the
    counts cannot tell such a cell from one of several scores, where the sites refuse the finer edges."""
    e = np.asarray(hist.edges, dtype=float)
    cuts = np.asarray(cuts, dtype=float)
    bounds = np.concatenate([[e[0]], cuts[(cuts > e[0]) & (cuts < e[-1])], [e[-1]]])
    c0 = hist.cum_negatives if hist.consistent_negatives is None else hist.consistent_negatives
    c1 = hist.cum_positives if hist.consistent_positives is None else hist.consistent_positives
    n0, n1 = (np.diff(np.interp(bounds, e, np.asarray(c, dtype=float))) for c in (c0, c1))
    big0, big1 = float(hist.n_negative), float(hist.n_positive)
    if big0 <= 0 or big1 <= 0:
        return 0.0
    if hist.noise_off or hist.level_variance.size == 0:
        return 0.0
    T, per = _tree_map(hist)
    # a cell's count as a linear map of the leaf estimates (a leaf cut by a cell's bound: its share of the width)
    left = np.clip((bounds[1:, None] - e[None, :-1]) / np.diff(e)[None, :], 0.0, 1.0)
    right = np.clip((bounds[:-1, None] - e[None, :-1]) / np.diff(e)[None, :], 0.0, 1.0)
    s2 = np.einsum("ck,kl,cl->c", left - right, (T * per) @ T.T, left - right)
    term = n0 * n1 * (n0 + n1 + 1.0) - n1 * s2 - n0 * s2
    return float(max(term.sum(), 0.0) / (12.0 * big0**2 * big1**2))


def _estimator(hist: ScoreHistograms, within_bin: str, own: tuple[float, float], merged: bool) -> str:
    """Why :func:`ds_hist_auc` keeps the plain weighted means instead of the control variates ("": it does not).

    The own-class means are one half without noise where every record's cell is bounded by the reference's edges
    at every site alike (:math:`\\sum_c n_c (C_{c-} + n_c/2) = N^2/2` over the pooled cells); where a site
    merged or moved cells of its own (``merged``: per site, the sites' ``own_cells_coarsened``), each site's sum is
    that of its own cells, and the total is one half only on average over how the records fall in them: the
    correction would add
    :math:`\\beta (\\bar V_{00} - \\tfrac12)` of that, so there is none."""
    if hist.noise_off:
        return "noise off: nothing to correct, beta = 0"
    if not np.isfinite(own).all():
        return ("the sites did not return the own-class placement sums sum_v00, sum_v11 (a server before "
                "them): the noise's variance is about twice that of the control variates'")
    if within_bin != "tied":
        return "within_bin = 'linear': the own-class means are not one half without noise"
    if merged:
        return ("a site merged or moved cells of the reference of its own (per site): the own-class means are not "
                "one half without noise; secure=True releases the cells pooled")
    return ""
