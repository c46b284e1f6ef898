"""The whole validation of a binary prediction model across sites, in one call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import pandas as pd

from dsfed_client.analyses.calibration import (
    Brier, CalibrationCurve, CalibrationErrors, HosmerLemeshow, LogisticCalibration, calibration_errors,
    ds_brier, ds_calibration_curve, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.curves import HistogramAUC, ds_hist_auc
from dsfed_client.analyses.decision import VALIDATE_GRID, DecisionCurve, ds_decision_curve
from dsfed_client.analyses.heterogeneity import Heterogeneity, ds_heterogeneity, unavailable
from dsfed_client.analyses.discrimination import ROCGLM, ds_roc_glm
from dsfed_client.analyses.smooth_calibration import SKIPPED as SPLINE_SKIPPED, SplineCalibration, spline_section
from dsfed_client.analyses.thresholds import ThresholdMetrics, check_thresholds, ds_threshold_metrics
from dsfed_client.aggregation import first_release
from dsfed_client.params import ALPHA, N_BINS, N_GROUPS, N_THRESHOLDS, PRIVACY, Options, validate_params
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession

Method = Literal["histogram", "paper"]


@result
class Discrimination(Results):
    """The discrimination half of a validation, whichever method computed it: the empirical AUC
    with its interval ``ci`` and the ROC-GLM AUC with ``roc_glm_ci`` (seed 000), at ``alpha``.

    ``method="histogram"`` (the default): placement values against global CDFs from the sites'
    noisy hierarchical histograms (seed 003); ``ci`` is seed 000's logit interval on the
    DeLong variance plus the variance the noise adds (``noise_variance``), and the ROC-GLM is fitted
    on the same placement values. ``method="paper"``: seed 000's noisy scores, as in the paper;
    ``ci`` is the DeLong interval, which, as the paper's, does not account for the noise.

    References
    ----------
    Schalk, Rehms et al. (2024), seed 000, eqs. (1)-(3), "Distributed ROC-GLM"; Xu & Cormode (2025),
    seed 003.
    """

    _title: ClassVar[str] = "Discrimination"

    method: str = stat("Method", brief="")
    auc: float = stat("Empirical AUC", brief=".4f")
    ci: ConfInt = stat("{level} CI", brief=".4f")
    variance: float = stat("Variance (DeLong)")  # DeLong variance of the empirical AUC
    noise_variance: float = stat("Noise variance")  # what the DP noise adds to it (0: not estimated, or noise off)
    roc_glm_auc: float = stat("ROC-GLM AUC", brief=".4f")
    roc_glm_ci: ConfInt = stat("{level} CI (logit, eq. 3)")
    a: float = stat("a")
    b: float = stat("b")
    iterations: int = stat("Fisher-scoring iterations")
    n_thresholds: int = stat("Thresholds")
    n_positive: int = stat("Positives")
    n_negative: int = stat("Negatives")
    alpha: float = stat()
    noise_off: bool = stat()
    noise: str = stat("Noise")  # how noise entered, in words
    result: HistogramAUC | ROCGLM = hidden()

    @classmethod
    def from_histogram(cls, h: HistogramAUC) -> "Discrimination":
        g = h.roc_glm
        assert g is not None
        added = ("summed over the sites, each site adding its share" if "pooled" in h.histograms.mechanism
                 else "each site its own")
        noise = ("off (test profile: exact)" if h.noise_off else
                 f"hierarchical score histograms with Gaussian noise ({added}); the interval includes the noise "
                 "variance")
        return cls("histogram", h.auc, h.ci_logit, h.variance, h.noise_variance, g.auc, g.ci, g.a, g.b,
                   g.iterations, g.n_thresholds, h.n_positive, h.n_negative, h.alpha, h.noise_off, noise, h)

    @classmethod
    def from_paper(cls, r: ROCGLM) -> "Discrimination":
        e = r.empirical
        noise = ("off (test profile: exact)" if r.reference.noise_off else
                 "noisy scores per site (seed 000): " + ", ".join(f"{s} sigma {v:.4g}" for s, v in
                                                                   r.reference.sigma.items())
                 + "; the intervals do not account for the noise (as in the paper)")
        return cls("paper", e.auc, e.ci_delong, e.variance, 0.0, r.auc, r.ci, r.a, r.b, r.iterations,
                   r.n_thresholds, e.n_positive, e.n_negative, r.alpha, r.reference.noise_off, noise, r)

    @derived()
    def mechanism(self) -> dict[str, dict[str, Any]]:
        """Per site (or ``"pooled"``) the mechanism of the noisy release the AUC rests on."""
        r = self.result
        return r.histograms.mechanism if isinstance(r, HistogramAUC) else r.reference.mechanism

    def plot(self, ax: Any = None, **kwargs: Any) -> Any:
        return self.result.plot(ax=ax, **kwargs)


@result
class ValidationReport(Results):
    """Discrimination and calibration of one model over all sites; ``to_frame`` has one row per
    statistic (``estimate``, ``ci_lower``, ``ci_upper`` at ``alpha``, ``pvalue``, ``note``).

    ``mode`` is ``"pooled"`` when every binned release was checked pooled over the sites (secure
    aggregation with pooled thresholds), ``"per-site"`` otherwise; ``mode_note`` says why the
    per-site path was taken.

    References
    ----------
    Schalk, Rehms et al. (2024), seed 000 (AUC, ROC-GLM, Brier, calibration curve); the
    dissertation of seed 001 (calibration measures, ECE/MCE); Wu et al. (2012), seed 002 (H-L,
    distributed GLM); Xu & Cormode (2025), seed 003 (histograms).
    """

    _title: ClassVar[str] = "Federated validation of a binary prediction model"
    _table_fmt: ClassVar[str] = ".4f"

    discrimination: Discrimination = stat()
    brier: Brier = stat()
    curve: CalibrationCurve = stat()
    hl_c: HosmerLemeshow = stat()
    hl_h: HosmerLemeshow = stat()
    errors: CalibrationErrors = stat()
    logistic: LogisticCalibration = stat()
    threshold_metrics: ThresholdMetrics = stat()
    decision_curve: DecisionCurve = stat()
    mode: str = stat(brief="", default="per-site")
    mode_note: str = stat(default="")
    smooth: SplineCalibration | None = hidden(default=None)  # None: skipped, smooth_note says why
    smooth_note: str = stat(default="")
    heterogeneity: Heterogeneity | None = stat(default=None)  # per-site estimates and their meta-analysis

    @derived("n", brief="")
    def n(self) -> int:
        return self.brier.n

    @derived("AUC", brief=".4f", export=False)
    def auc(self) -> float:
        return self.discrimination.auc

    @derived()
    def alpha(self) -> float:
        return self.discrimination.alpha

    @derived("Discrimination", export=False)
    def discrimination_method(self) -> str:
        return f"{self.discrimination.method} method; noise: {self.discrimination.noise}"

    @derived("Disclosure checks", export=False)
    def checks(self) -> str:
        if self.mode == "pooled":
            return "pooled: every binned release checked on the cells pooled over the sites"
        return f"PER SITE: each site checked its own cells ({self.mode_note})"

    def _table(self) -> pd.DataFrame:
        d, lg, nan = self.discrimination, self.logistic, float("nan")
        auc_note = "logit CI (eq. 3), sampling + noise variance" if d.method == "histogram" else "DeLong CI"
        rows = [
            ("empirical AUC", d.auc, *d.ci, nan, auc_note),
            ("ROC-GLM AUC", d.roc_glm_auc, *d.roc_glm_ci, nan, "logit CI (eq. 3)"),
            ("Brier score", self.brier.brier, nan, nan, nan, ""),
            ("Spiegelhalter z", self.brier.spiegelhalter_z, nan, nan, self.brier.spiegelhalter_p, ""),
            ("calibration intercept", lg.intercept, *lg.intercept_ci, nan, "y ~ logit(p), Wald CI"),
            ("calibration slope", lg.slope, *lg.slope_ci, nan, "y ~ logit(p), Wald CI"),
            ("calibration-in-the-large", lg.citl, *lg.citl_ci, nan, "y ~ 1 + offset(logit(p)), Wald CI"),
            ("H-L C", self.hl_c.statistic, nan, nan, self.hl_c.pvalue,
             f"df {self.hl_c.df}" + ("" if self.hl_c.complete else ", groups merged or inexact")),
            ("H-L H", self.hl_h.statistic, nan, nan, self.hl_h.pvalue,
             f"df {self.hl_h.df}" + ("" if self.hl_h.complete else ", groups merged")),
            ("ECE", self.errors.ece, nan, nan, nan, "groups of H-L C"),
            ("MCE", self.errors.mce, nan, nan, nan, "groups of H-L C"),
        ]
        m = self.threshold_metrics
        for metric in ("sensitivity", "specificity"):
            lower, upper = m.interval(metric)
            rows += [(f"{metric} at {t:g}", v, lo, hi, nan, f"score >= {t:g}, {m.ci_method} CI")
                     for t, v, lo, hi in zip(m.thresholds, getattr(m, metric), lower, upper)]
        frame = pd.DataFrame([row[1:] for row in rows], index=pd.Index([row[0] for row in rows], name="statistic"),
                             columns=["estimate", "ci_lower", "ci_upper", "pvalue", "note"])
        frame.attrs["alpha"] = self.alpha
        return frame

    def _notes(self) -> tuple[str, ...]:
        return (f"{self.discrimination.level} intervals", f"calibration curve: {self.curve.bins.note()}",
                f"H-L C: {self.hl_c.note()}", f"H-L H: {self.hl_h.note()}",
                f"metrics at thresholds: {self.threshold_metrics.withheld_note()}",
                f"decision curve: {self.decision_curve.n_thresholds} of {self.decision_curve.counts.requested.size} thresholds "
                "released") + ((f"heterogeneity: {self.heterogeneity.note}",)
                               if self.heterogeneity is not None and self.heterogeneity.note else ())

    def plot(self, ax: Any = None) -> Any:
        """ROC curve, calibration curve and the H-L C bars side by side. ``ax``: three Axes to draw on,
        or None for a new figure. Returns the three Axes."""
        from dsfed_client.plots import _pyplot  # noqa: PLC0415

        if ax is None:
            fig, ax = _pyplot().subplots(1, 3, figsize=(16, 5))
        self.discrimination.plot(ax=ax[0])
        self.curve.plot(ax=ax[1])
        self.hl_c.plot(ax=ax[2])
        return ax


@validate_params({"alpha": ALPHA, "n_bins": N_BINS, "n_groups": N_GROUPS, "n_thresholds": N_THRESHOLDS,
                  "method": [Options({"histogram", "paper"})], "epsilon": PRIVACY, "delta": PRIVACY,
                  "sensitivity": PRIVACY})
def validate(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05, n_bins: int = 10,
             n_groups: int = 10, n_thresholds: int = 99, method: Method = "histogram", secure: bool | None = None,
             epsilon: float | None = None, delta: float | None = None, sensitivity: float | None = None,
             metric_thresholds: Sequence[float] = (0.5,),
             decision_thresholds: Sequence[float] = tuple(VALIDATE_GRID),
             heterogeneity: bool | None = None) -> ValidationReport:
    """The validation of a binary prediction model: AUC with CI and the ROC-GLM, Brier and
    Spiegelhalter, calibration curve, Hosmer-Lemeshow C and H, ECE/MCE, calibration intercept,
    slope and in-the-large, metrics at ``metric_thresholds`` (default 0.5; Wilson intervals) and the
    decision curve over ``decision_thresholds`` (default 0.05, ..., 0.95: each threshold a site
    releases stays a cut in the score column's history for good, so the default asks few; pass
    :data:`~dsfed_client.analyses.decision.DEFAULT_GRID` for 0.01, ..., 0.99): thresholds are cuts
    the sites' release gate checks, and those it does not release are reported.

    ``secure=None`` (the default) uses pooled releases when every site offers them (secure
    aggregation, each site checking the pooled cells: exact at small sites) and falls back to
    per-site checking otherwise, saying why in ``mode_note``; ``True`` insists on pooled releases,
    ``False`` asks per site. ``method="histogram"`` (the default) computes the AUC and the ROC-GLM
    from placement values against the sites' noisy histograms, with an interval that accounts for
    the noise; ``method="paper"`` reproduces seed 000 (per-record noisy scores).

    ``heterogeneity``: each site's AUC, calibration slope and O/E and their random-effects
    meta-analysis (:func:`~dsfed_client.analyses.heterogeneity.ds_heterogeneity`, per-site releases
    each site checks by its rules); ``None`` (the default) asks for them when the validation ran per
    site and otherwise notes that only pooled results were released; ``True`` asks either way,
    ``False`` never.

    ``alpha`` (every interval, at level ``1 - alpha``), ``n_bins`` (calibration curve),
    ``n_groups`` (Hosmer-Lemeshow C and H, ECE/MCE), ``n_thresholds`` (ROC-GLM) and both
    threshold lists are checked before any site is contacted.

    References
    ----------
    Schalk, Rehms et al. (2024), seed 000: eqs. (1)-(3), (5), "Distributed ROC-GLM", "Calibration
    curve"; the dissertation of seed 001, §3.5-3.6 and eq. (3.6); Wu et al. (2012), seed 002;
    Xu & Cormode (2025), seed 003.
    """
    check_thresholds(metric_thresholds)
    check_thresholds(decision_thresholds)
    agg, brier = first_release(session, secure, lambda agg: ds_brier(session, truth, score, secure=agg.pooled))
    pooled = agg.pooled
    # the binned releases in this order: bins of the curve and of H-L H first (the same cuts)
    curve = ds_calibration_curve(session, truth, score, n_bins=n_bins, secure=pooled)
    hl_h = ds_hosmer_lemeshow(session, truth, score, n_groups=n_groups, kind="H", secure=pooled)
    hl_c = ds_hosmer_lemeshow(session, truth, score, n_groups=n_groups, kind="C", secure=pooled)
    logistic = ds_logistic_calibration(session, truth, score, n_complete=brier.n, alpha=alpha, secure=pooled)
    if agg.per_site_parts:  # the sites would refuse the pooled-only protocol: not asked
        smooth, smooth_note = None, f"{SPLINE_SKIPPED}: the validation ran per site"
    else:
        smooth, smooth_note = spline_section(session, truth, score, alpha=alpha, secure=pooled)
    if method == "paper":
        discrimination = Discrimination.from_paper(ds_roc_glm(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, epsilon=epsilon, delta=delta,
            sensitivity=sensitivity, secure=pooled))
    else:
        discrimination = Discrimination.from_histogram(ds_hist_auc(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, secure=pooled, epsilon=epsilon,
            delta=delta))
    # after the bins: a threshold at a bin edge is that edge's cut
    at_thresholds = ds_threshold_metrics(session, truth, score, metric_thresholds, alpha=alpha, secure=pooled)
    decision = ds_decision_curve(session, truth, score, decision_thresholds, secure=pooled)
    if heterogeneity or (heterogeneity is None and agg.per_site_parts):
        sites = ds_heterogeneity(session, truth, score, alpha=alpha, method=method, epsilon=epsilon, delta=delta,
                                 sensitivity=sensitivity)
    else:
        sites = unavailable("not asked: " + ("heterogeneity=False" if heterogeneity is False else
                            "the validation released pooled results only (secure aggregation); heterogeneity=True "
                            "asks each site for its own estimates, where its rules allow per-site releases"),
                            method=method, alpha=alpha)
    return ValidationReport(discrimination, brier, curve, hl_c, hl_h, calibration_errors(hl_c), logistic,
                            at_thresholds, decision, agg.mode, agg.note, smooth, smooth_note, sites)

