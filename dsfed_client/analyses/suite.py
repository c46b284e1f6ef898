"""The whole validation of a binary prediction model across sites, in one call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import pandas as pd

from dsfed_client.analyses.calibration import (
    Brier, CalibrationCurve, CalibrationErrors, HosmerLemeshow, LogisticCalibration, calibration_errors,
    ds_brier, ds_calibration_curve, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.curves import HistogramAUC, ds_hist_auc
from dsfed_client.analyses.decision import VALIDATE_GRID, DecisionCurve, ds_decision_curve
from dsfed_client.analyses.heterogeneity import Heterogeneity, ds_heterogeneity, unavailable
from dsfed_client.analyses.discrimination import ROCGLM, ds_roc_glm
from dsfed_client.analyses.glm import ConvergenceError
from dsfed_client.analyses.smooth_calibration import SKIPPED as SPLINE_SKIPPED, SplineCalibration, spline_section
from dsfed_client.analyses.thresholds import ThresholdMetrics, check_thresholds, ds_threshold_metrics
from dsfed_client.aggregation import first_release
from dsfed_client.errors import FederatedCallError
from dsfed_client.params import ALPHA, N_BINS, N_GROUPS, N_THRESHOLDS, PRIVACY, Options, validate_params
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession

Method = Literal["histogram", "paper"]


@result
class Discrimination(Results):
    """The discrimination half of a validation, whichever method computed it: the empirical AUC
    with its interval ``ci`` and the ROC-GLM AUC with ``roc_glm_ci`` (Schalk et al. 2024), at ``alpha``.

    ``method="histogram"`` (the default): placement values against global CDFs from the sites'
    noisy hierarchical histograms (Xu & Cormode 2025); ``ci`` is Schalk et al.'s (2024) logit interval on the
    DeLong variance plus the variance the noise adds (``noise_variance``), and the ROC-GLM is fitted
    on the same placement values. ``method="paper"``: Schalk et al.'s (2024) noisy scores, as in the paper;
    ``ci`` is the DeLong interval widened by the noise's variance and estimated bias, NaN where the
    noise swamps the scores (:class:`~dsfed_client.analyses.discrimination.EmpiricalAUC`).

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eqs. (1)-(3), "Distributed ROC-GLM"; Xu & Cormode (2025), "Federated computation of ROC and PR
    curves".
    """

    _title: ClassVar[str] = "Discrimination"

    method: str = stat("Method", brief="")
    auc: float = stat("Empirical AUC", brief=".4f")
    ci: ConfInt = stat("{level} CI", brief=".4f")
    variance: float = stat("Variance (DeLong)")  # DeLong variance of the empirical AUC
    # what the DP noise adds to it, with the released cells' ties (histogram; 0: not estimated, or noise off)
    noise_variance: float = stat("Noise variance")
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
        g, nan = h.roc_glm, float("nan")
        added = ("summed over the sites, each site adding its share" if "pooled" in h.histograms.mechanism
                 else "each site its own")
        noise = ("off (test profile: exact)" if h.noise_off else
                 f"hierarchical score histograms with Gaussian noise ({added}); the interval includes the noise "
                 "variance and the released cells' ties")
        fit = ((nan, ConfInt(nan, nan), nan, nan, 0, 0) if g is None else
               (g.auc, g.ci, g.a, g.b, g.iterations, g.n_thresholds))
        return cls("histogram", h.auc, h.ci_logit, h.variance, h.noise_error_variance, *fit, h.n_positive, h.n_negative,
                   h.alpha, h.noise_off, noise, h)

    @classmethod
    def from_paper(cls, r: ROCGLM) -> "Discrimination":
        e = r.empirical
        noise = ("off (test profile: exact)" if r.reference.noise_off else
                 "noisy scores per site (Schalk, Rehms et al. 2024): " + ", ".join(f"{s} sigma {v:.4g}" for s, v in
                                                                   r.reference.sigma.items())
                 + ("; " + e.note if e.swamped else "; the intervals carry the noise's variance and estimated bias"))
        return cls("paper", e.auc, e.ci_delong, e.variance, e.total_variance - e.variance, r.auc, r.ci, r.a, r.b,
                   r.iterations, r.n_thresholds, e.n_positive, e.n_negative, r.alpha, r.reference.noise_off, noise, r)

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

    A section that could not be computed (a fit that did not converge, a release the sites refused)
    is None and ``failed`` names it with the reason; the other sections stand, and the summary,
    ``to_frame`` and the report say what is missing.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM" (AUC, ROC-GLM, Brier, calibration curve); Huang's dissertation (2020) (calibration measures,
    ECE/MCE); Wu et al. (2012), "Preserving institutional privacy in distributed binary logistic regression"
    (H-L, distributed GLM); Xu & Cormode (2025), "Federated computation of ROC and PR curves" (histograms).
    """

    _title: ClassVar[str] = "Federated validation of a binary prediction model"
    _table_fmt: ClassVar[str] = ".4f"

    discrimination: Discrimination | None = stat()
    brier: Brier = stat()
    curve: CalibrationCurve | None = stat()
    hl_c: HosmerLemeshow | None = stat()
    hl_h: HosmerLemeshow | None = stat()
    errors: CalibrationErrors | None = stat()
    logistic: LogisticCalibration | None = stat()
    threshold_metrics: ThresholdMetrics | None = stat()
    decision_curve: DecisionCurve | None = stat()
    mode: str = stat(brief="", default="per-site")
    mode_note: str = stat(default="")
    smooth: SplineCalibration | None = hidden(default=None)  # None: skipped, smooth_note says why
    smooth_note: str = stat(default="")
    heterogeneity: Heterogeneity | None = stat(default=None)  # per-site estimates and their meta-analysis
    failed: dict[str, str] = stat(factory=dict)  # section -> why it was not computed
    alpha: float = stat(default=0.05)  # every interval at level 1 - alpha

    @derived("Not computed", export=False)
    def failed_sections(self) -> str:
        return ", ".join(self.failed) or "-"

    @derived("n", brief="")
    def n(self) -> int:
        return self.brier.n

    @derived("AUC", brief=".4f", export=False)
    def auc(self) -> float:
        return self.discrimination.auc if self.discrimination is not None else float("nan")

    @derived("Discrimination", export=False)
    def discrimination_method(self) -> str:
        d = self.discrimination
        return f"{d.method} method; noise: {d.noise}" if d is not None else "not computed"

    @derived("Disclosure checks", export=False)
    def checks(self) -> str:
        if self.mode == "pooled":
            return "pooled: every binned release checked on the cells pooled over the sites"
        return f"PER SITE: each site checked its own cells ({self.mode_note})"

    def _table(self) -> pd.DataFrame:
        d, lg, c, h, e, m, nan = (self.discrimination, self.logistic, self.hl_c, self.hl_h, self.errors,
                                  self.threshold_metrics, float("nan"))
        rows = []
        if d is not None:
            auc_note = "logit CI (eq. 3), sampling + noise variance" if d.method == "histogram" else "DeLong CI"
            rows += [("empirical AUC", d.auc, *d.ci, nan, auc_note),
                     ("ROC-GLM AUC", d.roc_glm_auc, *d.roc_glm_ci, nan,
                      f"not computed: {self.failed['ROC-GLM']}" if "ROC-GLM" in self.failed else "logit CI (eq. 3)")]
        rows += [("Brier score", self.brier.brier, nan, nan, nan, ""),
                 ("Spiegelhalter z", self.brier.spiegelhalter_z, nan, nan, self.brier.spiegelhalter_p, "")]
        if lg is not None:
            rows += [("calibration intercept", lg.intercept, *lg.intercept_ci, nan, "y ~ logit(p), Wald CI"),
                     ("calibration slope", lg.slope, *lg.slope_ci, nan, "y ~ logit(p), Wald CI"),
                     ("calibration-in-the-large", lg.citl, *lg.citl_ci, nan, "y ~ 1 + offset(logit(p)), Wald CI")]
        if c is not None:
            rows.append(("H-L C", c.statistic, nan, nan, c.pvalue,
                         f"df {c.df}" + ("" if c.complete else ", groups merged or inexact")))
        if h is not None:
            rows.append(("H-L H", h.statistic, nan, nan, h.pvalue,
                         f"df {h.df}" + ("" if h.complete else ", groups merged")))
        if e is not None:
            rows += [("ECE", e.ece, nan, nan, nan, "groups of H-L C"), ("MCE", e.mce, nan, nan, nan, "groups of H-L C")]
        for metric in ("sensitivity", "specificity") if m is not None else ():
            lower, upper = m.interval(metric)
            rows += [(f"{metric} at {t:g}", v, lo, hi, nan, f"score >= {t:g}, {m.ci_method} CI")
                     for t, v, lo, hi in zip(m.thresholds, getattr(m, metric), lower, upper)]
        frame = pd.DataFrame([row[1:] for row in rows], index=pd.Index([row[0] for row in rows], name="statistic"),
                             columns=["estimate", "ci_lower", "ci_upper", "pvalue", "note"])
        frame.attrs["alpha"] = self.alpha
        return frame

    def _notes(self) -> tuple[str, ...]:
        notes = [f"{self.level} intervals"]
        if self.curve is not None:
            notes.append(f"calibration curve: {self.curve.bins.note()}")
        notes += [f"H-L {hl.kind}: {hl.note()}" for hl in (self.hl_c, self.hl_h) if hl is not None]
        if self.threshold_metrics is not None:
            notes.append(f"metrics at thresholds: {self.threshold_metrics.withheld_note()}")
        if self.decision_curve is not None:
            dc = self.decision_curve
            notes.append(f"decision curve: {dc.n_thresholds} of {dc.counts.requested.size} thresholds released")
        if self.heterogeneity is not None and self.heterogeneity.note:
            notes.append(f"heterogeneity: {self.heterogeneity.note}")
        return tuple(notes) + tuple(f"NOT COMPUTED: {section}: {why}" for section, why in self.failed.items())

    def plot(self, ax: Any = None) -> Any:
        """ROC curve, calibration curve and the H-L C bars side by side (a section not computed
        leaves its Axes empty, titled so). ``ax``: three Axes to draw on, or None for a new figure.
        Returns the three Axes."""
        from dsfed_client.plots import _pyplot  # noqa: PLC0415

        if ax is None:
            fig, ax = _pyplot().subplots(1, 3, figsize=(16, 5))
        for axes, part, name in ((ax[0], self.discrimination, "discrimination"),
                                 (ax[1], self.curve, "calibration curve"), (ax[2], self.hl_c, "Hosmer-Lemeshow C")):
            if part is not None:
                part.plot(ax=axes)
            else:
                axes.set_title(f"{name}: not computed")
        return ax


SECTION_ERRORS = (ConvergenceError, FederatedCallError)
"""What leaves one section of :func:`validate` out instead of ending it: a fit that did not
converge, a call the sites refused or could not answer."""

T = TypeVar("T")


def _section(failed: dict[str, str], name: str, compute: Callable[[], T]) -> T | None:
    """``compute()``, or None with ``failed[name]`` saying why it raised one of :data:`SECTION_ERRORS`."""
    try:
        return compute()
    except SECTION_ERRORS as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
        return None


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
    the noise; ``method="paper"`` reproduces Schalk et al. (2024) (per-record noisy scores).

    ``heterogeneity``: each site's AUC, calibration slope and O/E and their random-effects
    meta-analysis (:func:`~dsfed_client.analyses.heterogeneity.ds_heterogeneity`, per-site releases
    each site checks by its rules); ``None`` (the default) asks for them when the validation ran per
    site and otherwise notes that only pooled results were released; ``True`` asks either way,
    ``False`` never.

    ``alpha`` (every interval, at level ``1 - alpha``), ``n_bins`` (calibration curve),
    ``n_groups`` (Hosmer-Lemeshow C and H, ECE/MCE), ``n_thresholds`` (ROC-GLM) and both
    threshold lists are checked before any site is contacted.

    A section that cannot be computed -- a fit that does not converge (a score that separates the
    outcomes leaves the calibration slope infinite), a release the sites refuse -- does not end the
    validation: that section is None in the result, ``failed`` names it with the error, and the
    others are computed. The Brier score comes first and decides how the sites are asked; if it is
    refused, the whole call is.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM": eqs. (1)-(3), (5), "Distributed ROC-GLM", "Calibration curve"; Huang's dissertation (2020),
    §3.5-3.6 and eq. (3.6); Wu et al. (2012), "Preserving institutional privacy in distributed binary logistic
    regression"; Xu & Cormode (2025), "Federated computation of ROC and PR curves".
    """
    check_thresholds(metric_thresholds)
    check_thresholds(decision_thresholds)
    agg, brier = first_release(session, secure, lambda agg: ds_brier(session, truth, score, secure=agg.pooled))
    pooled, failed = agg.pooled, {}
    # the binned releases in this order: bins of the curve and of H-L H first (the same cuts)
    curve = _section(failed, "calibration curve",
                     lambda: ds_calibration_curve(session, truth, score, n_bins=n_bins, secure=pooled))
    hl_h = _section(failed, "Hosmer-Lemeshow H", lambda: ds_hosmer_lemeshow(
        session, truth, score, n_groups=n_groups, kind="H", secure=pooled))
    hl_c = _section(failed, "Hosmer-Lemeshow C", lambda: ds_hosmer_lemeshow(
        session, truth, score, n_groups=n_groups, kind="C", secure=pooled))
    logistic = _section(failed, "logistic calibration", lambda: ds_logistic_calibration(
        session, truth, score, n_complete=brier.n, alpha=alpha, secure=pooled))
    if agg.per_site_parts:  # the sites would refuse the pooled-only protocol: not asked
        smooth, smooth_note = None, f"{SPLINE_SKIPPED}: the validation ran per site"
    else:
        spline = _section(failed, "smooth calibration",
                          lambda: spline_section(session, truth, score, alpha=alpha, secure=pooled))
        smooth, smooth_note = spline or (None, f"not computed: {failed.get('smooth calibration')}")
    if method == "paper":
        discrimination = _section(failed, "discrimination", lambda: Discrimination.from_paper(ds_roc_glm(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, epsilon=epsilon, delta=delta,
            sensitivity=sensitivity, secure=pooled)))
    else:
        # the depth from the Brier score's n, released already: no count of the outcome asked after the cells
        hist_auc = _section(failed, "discrimination", lambda: ds_hist_auc(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, secure=pooled, epsilon=epsilon,
            delta=delta, n_complete=brier.n))
        discrimination = None if hist_auc is None else Discrimination.from_histogram(hist_auc)
        if hist_auc is not None and hist_auc.roc_glm_failed:  # the empirical AUC stands without it
            failed["ROC-GLM"] = hist_auc.roc_glm_failed
    # after the bins: a threshold at a bin edge is that edge's cut
    at_thresholds = _section(failed, "metrics at thresholds", lambda: ds_threshold_metrics(
        session, truth, score, metric_thresholds, alpha=alpha, secure=pooled))
    decision = _section(failed, "decision curve", lambda: ds_decision_curve(
        session, truth, score, decision_thresholds, secure=pooled))
    if heterogeneity or (heterogeneity is None and agg.per_site_parts):
        sites = ds_heterogeneity(session, truth, score, alpha=alpha, method=method, epsilon=epsilon, delta=delta,
                                 sensitivity=sensitivity)
    else:
        sites = unavailable("not asked: " + ("heterogeneity=False" if heterogeneity is False else
                            "the validation released pooled results only (secure aggregation); heterogeneity=True "
                            "asks each site for its own estimates, where its rules allow per-site releases"),
                            method=method, alpha=alpha)
    errors = calibration_errors(hl_c) if hl_c is not None else None
    return ValidationReport(discrimination, brier, curve, hl_c, hl_h, errors, logistic, at_thresholds, decision,
                            agg.mode, agg.note, smooth, smooth_note, sites, failed, alpha)
