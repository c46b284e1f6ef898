"""Two models on the same patients: the paired AUC difference (DeLong's test), the paired Brier
difference, and the calibration of both, from sums the sites release.

Each model's scores are a column of the same table at every site (two models applied there with
``predictDS``, or two score columns). The AUCs come from placement values against each model's
global histogram CDFs (:func:`~dsfed_client.analyses.curves.ds_hist_auc`'s estimator); the
sites also return the cross products of the two models' placement values, which give the
covariance DeLong's paired test needs. Only records complete in the outcome and both scores
count.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_client.analyses.calibration import LogisticCalibration, ds_logistic_calibration
from dsfed_client.analyses.curves import (
    ScoreHistograms, auc_levels, ds_score_histograms, histograms_alone, merged_cells, merged_pairs, noise_variance,
    placement_noise_variances, reference_symbol,
)
from dsfed_client.calls import Ref
from dsfed_client.params import ALPHA, LEVELS, validate_params
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession


def paired_delong(total: dict[str, float]) -> tuple[float, float, float]:
    """The two AUCs and the variance of their difference from the summed paired placement sums.

    Per model :math:`\\widehat{AUC} = (\\bar V_{10} + \\bar V_{01})/2`; with
    :math:`S_{10}` and :math:`S_{01}` the 2x2 sample covariances of the two models' placement values
    over the positives and the negatives, :math:`var(\\widehat{AUC}_A - \\widehat{AUC}_B) =
    c^T (S_{10}/n_1 + S_{01}/n_0) c`, :math:`c = (1, -1)` (DeLong et al. 1988; pROC
    ``roc.test(method = "delong", paired = TRUE)``).

    One positive and one negative scored alike by both models (placement values 1 and 0 for
    A, 0.5 and 0.5 for B) is the smallest case by hand: n - 1 = 0 gives no variance, so take two of
    each: positives V10 A (1, 1), B (1, 0); negatives V01 A (1, 1), B (0, 1):

    >>> t = {"n1_a": 2, "n0_a": 2, "sum_v10_a": 2, "sumsq_v10_a": 2, "sum_v01_a": 2, "sumsq_v01_a": 2,
    ...      "sum_v10_b": 1, "sumsq_v10_b": 1, "sum_v01_b": 1, "sumsq_v01_b": 1, "cross_v10": 1, "cross_v01": 1,
    ...      "joint_v10_a": 2, "joint_v10_b": 1, "joint_v01_a": 2, "joint_v01_b": 1}
    >>> paired_delong(t)  # var(B's V10) = var(B's V01) = 0.5, A's constant: (0.5 / 2 + 0.5 / 2)
    (1.0, 0.5, 0.5)
    """
    n1, n0 = total["n1_a"], total["n0_a"]

    def cov(cls: str, n: float, first: str, second: str) -> float:
        if first == second:
            s, squares = total[f"sum_v{cls}_{first}"], total[f"sumsq_v{cls}_{first}"]
            return (squares - s * s / n) / (n - 1)
        # the cross products are over the joint cells the sites released, with each model's sums there
        sa, sb = total[f"joint_v{cls}_{first}"], total[f"joint_v{cls}_{second}"]
        return (total[f"cross_v{cls}"] - sa * sb / n) / (n - 1)

    aucs = [(total[f"sum_v10_{s}"] / n1 + total[f"sum_v01_{s}"] / n0) / 2 for s in ("a", "b")]
    s10 = cov("10", n1, "a", "a") + cov("10", n1, "b", "b") - 2 * cov("10", n1, "a", "b")
    s01 = cov("01", n0, "a", "a") + cov("01", n0, "b", "b") - 2 * cov("01", n0, "a", "b")
    return float(aucs[0]), float(aucs[1]), float(s10 / n1 + s01 / n0)


@result
class ModelComparison(Results):
    """Two models validated on the same records: the AUC difference ``auc_difference`` (A - B)
    with its DeLong CI and p-value, the Brier difference with its paired t interval, and each
    model's logistic calibration (``calibration``).

    With noise on, the variance of the AUC difference adds both histograms' noise variances
    (the two models' noise is independent); with noise off and histogram bins that separate
    all distinct scores, the test is pROC's ``roc.test(method = "delong", paired = TRUE)``.

    References
    ----------
    DeLong, DeLong & Clarke-Pearson (1988), Biometrics 44: the paired test. Schalk, Rehms et al.
    (2024), "Distributed non-disclosive validation of predictive models by a modified ROC-GLM", BMC
    Medical Research Methodology: eqs. (1)-(2) (placement values) and eq. (5) (Brier score). Xu &
    Cormode (2025), "Federated computation of ROC and PR curves" (the histograms).
    """

    _title: ClassVar[str] = "Paired comparison of two models (DeLong)"

    labels: tuple[str, str] = stat("Models (A, B)", brief="")
    auc_a: float = stat("AUC A", brief=".4f")
    auc_b: float = stat("AUC B", brief=".4f")
    variance: float = stat("Variance of the difference (DeLong)")
    noise_variance: float = stat("Noise variance")
    brier_a: float = stat("Brier A")
    brier_b: float = stat("Brier B")
    brier_variance: float = stat("Variance of the Brier difference")
    n: int = stat("Records (complete in both)", brief="")
    n_positive: int = stat("Positives")
    n_negative: int = stat("Negatives")
    alpha: float = stat()
    noise_off: bool = stat("Noise off (exact)")
    calibration: dict[str, LogisticCalibration] = hidden()
    histograms: tuple[ScoreHistograms, ScoreHistograms] = hidden()
    joint_coarsened: int = stat("Sites that merged the joint cells (the covariance read coarser)", default=0)
    # each model's pairs in one released cell but different cells of its reference (curves.merged_pairs)
    merged_pairs: tuple[float, float] = stat("Pairs in merged cells (A, B)", default=(0.0, 0.0))
    estimator: str = stat("Estimator", default="paired placement sums")  # or the histograms alone, and why

    @derived("AUC difference (A - B)", brief=".4f")
    def auc_difference(self) -> float:
        return self.auc_a - self.auc_b

    @derived("{level} CI of the AUC difference")
    def ci(self) -> ConfInt:
        """Wald interval of the difference, with the sampling and the noise variance, widened by half of each
        model's share of pairs the gate's merged cells tie (:func:`~dsfed_client.analyses.curves.merged_pairs`:
        a bound on what the merging can do to each AUC)."""
        half = stats.norm.ppf(1 - self.alpha / 2) * np.sqrt(self.variance + self.noise_variance)
        half += sum(self.merged_pairs) / 2
        return ConfInt(self.auc_difference - half, self.auc_difference + half)

    def _notes(self) -> tuple[str, ...]:
        if self.estimator.startswith("histograms alone"):
            return (f"Estimator: {self.estimator}.",)
        if not any(self.merged_pairs):
            return ()
        return (f"The sites released the models' reference bins merged (cells released before from the same records "
                f"would otherwise single records out): {self.merged_pairs[0]:.1%} and {self.merged_pairs[1]:.1%} of "
                f"the pairs lie in one merged cell and count one half, so the interval is widened by "
                f"+-{sum(self.merged_pairs) / 2:.3f}, and the test's difference moved towards 0 by as much.",)

    @derived("z")
    def z(self) -> float:
        """The difference over its standard error; where the sites merged the models' cells, the difference is
        first moved towards 0 by the merging's bound (half of each model's merged pairs), so the test is
        conservative as the interval is."""
        d = np.sign(self.auc_difference) * max(abs(self.auc_difference) - sum(self.merged_pairs) / 2, 0.0)
        return float(d / np.sqrt(self.variance + self.noise_variance))

    @derived("p-value (two-sided)", brief=".3g")
    def pvalue(self) -> float:
        return float(2 * stats.norm.sf(abs(self.z)))

    @derived("Brier difference (A - B)")
    def brier_difference(self) -> float:
        return self.brier_a - self.brier_b

    @derived("{level} CI of the Brier difference")
    def brier_ci(self) -> ConfInt:
        """Paired t interval on n - 1 degrees of freedom (R's ``t.test(paired = TRUE)``)."""
        half = stats.t.ppf(1 - self.alpha / 2, self.n - 1) * np.sqrt(self.brier_variance)
        return ConfInt(self.brier_difference - half, self.brier_difference + half)

    @derived("p-value of the Brier difference", brief=".3g")
    def brier_pvalue(self) -> float:
        return float(2 * stats.t.sf(abs(self.brier_difference) / np.sqrt(self.brier_variance), self.n - 1))

    def _table(self) -> pd.DataFrame:
        rows = []
        for label, side in zip(self.labels, ("a", "b")):
            cal = self.calibration[label]
            rows.append((label, getattr(self, f"auc_{side}"), getattr(self, f"brier_{side}"), cal.intercept,
                         cal.slope, cal.citl))
        rows.append(("difference (A - B)", self.auc_difference, self.brier_difference, *[float("nan")] * 3))
        return pd.DataFrame([r[1:] for r in rows], index=pd.Index([r[0] for r in rows], name="model"),
                            columns=["auc", "brier", "calibration_intercept", "calibration_slope", "citl"])

    def plot(self, ax: Any = None) -> Any:
        """Both models' ROC curves (from their histogram CDFs) and calibration lines side by side;
        ``ax``: two Axes or None. Returns the Axes."""
        from dsfed_client.analyses.curves import curves_from_histograms  # noqa: PLC0415
        from dsfed_client.plots import _pyplot, roc_axes  # noqa: PLC0415

        if ax is None:
            _, ax = _pyplot().subplots(1, 2, figsize=(11, 4.8))
        roc_axes(ax[0])
        colours = ("tab:blue", "tab:orange")
        for label, hist, colour, auc in zip(self.labels, self.histograms, colours, (self.auc_a, self.auc_b)):
            curves = curves_from_histograms(hist, None)
            order = np.argsort(curves.fpr, kind="stable")
            ax[0].plot(curves.fpr[order], curves.tpr[order], color=colour, label=f"{label}: AUC {auc:.3f}")
        lo, hi = self.ci
        ax[0].set_title(f"AUC difference {self.auc_difference:.3f} ({1 - self.alpha:.0%} CI {lo:.3f} to {hi:.3f}), "
                        f"p = {self.pvalue:.3g}", fontsize=9)
        ax[0].legend(loc="lower right", fontsize=8)
        p = np.linspace(0.01, 0.99, 99)
        ax[1].plot([0, 1], [0, 1], color="grey", linestyle=":", label="ideal")
        for label, colour in zip(self.labels, colours):
            cal = self.calibration[label]
            observed = 1 / (1 + np.exp(-(cal.intercept + cal.slope * np.log(p / (1 - p)))))
            ax[1].plot(p, observed, color=colour,
                       label=f"{label}: intercept {cal.intercept:.2f}, slope {cal.slope:.2f}")
        ax[1].set(xlabel="predicted probability", ylabel="observed (logistic calibration)", xlim=(0, 1), ylim=(0, 1))
        ax[1].legend(loc="upper left", fontsize=8)
        return ax


@validate_params({"alpha": ALPHA, "levels": [*LEVELS, None]})
def ds_compare_models(session: FederatedSession, truth: str, score_a: str, score_b: str, *,
                      labels: tuple[str, str] | None = None, alpha: float = 0.05, levels: int | None = None,
                      histograms: tuple[ScoreHistograms, ScoreHistograms] | None = None,
                      secure: bool | None = False, **histogram_options: Any) -> ModelComparison:
    """Compare two models' predictions ``score_a`` and ``score_b`` of the same records.

    1. each model's global CDFs from :func:`ds_score_histograms` (``levels=None``: depth by
       :func:`auc_levels`; ``histogram_options`` as for :func:`ds_hist_auc`), or the two models'
       ``histograms`` of an earlier analysis (e.g. each :func:`~dsfed_client.analyses.suite.validate`'s
       ``discrimination.result.histograms``), which spends no further privacy budget;
    2. each site returns both models' placement sums and their cross products
       (``pairedPlacementDS``): :func:`paired_delong` gives the AUCs and the variance of
       their difference, to which both histograms' noise variances are added; the cross products are
       over the joint cells of the two models' cells that each site releases (merged in pairs where a
       joint cell would hold fewer than q records: ``joint_coarsened`` counts the sites that did);
    3. the paired Brier difference :math:`\\bar d`, :math:`d = (y - p_A)^2 - (y - p_B)^2`, and its
       variance :math:`s_d^2/n` (``pairedBrierDS``);
    4. each model's logistic calibration (:func:`ds_logistic_calibration`).

    ``secure=True`` makes every step a pooled release (secure aggregation): the sites derive the
    references from the pooled histograms themselves, and read each at the cells a pooled release of its
    placement sums (``histPlacementSumsDS``) released over the same records. Both models must score the same records
    (DeLong's paired test compares the models on the same patients): the record counts of
    ``pairedBrierDS`` and of each model's ``brierDS`` are compared first, before any cut is
    released on the scores, and a record with one score missing gets a clear error saying how
    to compare on the complete records.
    """
    labels = labels or (score_a, score_b)
    histogram_options.setdefault("totals", "exact")
    agg = session.aggregation(secure)
    d = agg.sum("pairedBrierDS", Ref(truth), Ref(score_a), Ref(score_b))
    n = int(round(d["n"]))
    for label, score in zip(labels, (score_a, score_b)):  # before any cut is released on the scores
        own = int(round(agg.sum("brierDS", Ref(truth), Ref(score))["n"]))
        if own != n:
            raise ValueError(
                f"{label} scores {own} records with a known outcome, but only {n} have both models' scores: a "
                "paired comparison needs the same records for both. Make a table of the complete records at the "
                f"sites first, e.g. dataFrameDS(\"{truth},{score_a},{score_b}\", clnames = \"y,a,b\", "
                "completeCases = TRUE) as T, and compare T$a and T$b on T$y")
    if histograms is None and levels is None:
        levels = auc_levels(agg.count(truth), agg.noisy_parts)
    hists = histograms or tuple(
        ds_score_histograms(session, truth, s, levels=levels, secure=agg.pooled, **histogram_options)
        for s in (score_a, score_b))
    with ExitStack() as stack:
        ref_a, ref_b = (stack.enter_context(reference_symbol(session, h)) for h in hists)
        # each score's cells first, as its placement sums release them: a pooled release reads a reference the
        # sites derived at those cells (and a per-site one at the cells each site releases, the same again)
        cells = [agg.sum_described("histPlacementSumsDS", Ref(truth), Ref(score), ref, described="placement_cells")[1]
                 for score, ref in ((score_a, ref_a), (score_b, ref_b))]
        total = agg.sum("pairedPlacementDS", Ref(truth), Ref(score_a), ref_a, Ref(score_b), ref_b)
    merged = tuple(merged_pairs(h, merged_cells(c)) for h, c in zip(hists, cells))
    auc_a, auc_b, variance = paired_delong(total)
    noise, estimator = noise_variance(hists[0]) + noise_variance(hists[1]), "paired placement sums"
    if any(merged) and not any(h.noise_off for h in hists):
        n0, n1 = int(round(total["n0_a"])), int(round(total["n1_a"]))
        alone = [histograms_alone(h, n0, n1, sum(placement_noise_variances(h))) for h in hists]
        z = stats.norm.ppf(1 - alpha / 2)
        if z * np.sqrt(sum(a[1] + a[2] for a in alone)) < z * np.sqrt(variance + noise) + sum(merged) / 2:
            (auc_a, var_a, noise_a), (auc_b, var_b, noise_b) = alone
            variance, noise, merged = var_a + var_b, noise_a + noise_b, (0.0, 0.0)
            estimator = ("histograms alone: the sites merged the models' reference cells for the placement sums, and "
                         "the AUCs of the noisy histograms give the narrower interval; their covariance is left "
                         "out (taken as none), which overstates the variance where, as for two models of one "
                         "outcome on the same patients, their errors go together")
    brier_a, brier_b = d["sum_sq_a"] / n, d["sum_sq_b"] / n
    brier_variance = (d["sumsq_d"] - n * (brier_a - brier_b) ** 2) / (n - 1) / n
    calibration = {label: ds_logistic_calibration(session, truth, score, n_complete=n, alpha=alpha, secure=agg.pooled)
                   for label, score in zip(labels, (score_a, score_b))}
    return ModelComparison(
        tuple(labels), auc_a, auc_b, variance, noise,
        float(brier_a), float(brier_b), float(brier_variance), n, int(round(total["n1_a"])),
        int(round(total["n0_a"])), alpha, all(h.noise_off for h in hists), calibration, hists,
        int(round(total["joint_coarsened"])), merged, estimator)
