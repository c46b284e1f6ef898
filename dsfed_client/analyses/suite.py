"""The whole validation of a binary prediction model across sites, in one call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from dsfed_client.analyses.calibration import (
    Brier, CalibrationCurve, CalibrationErrors, HosmerLemeshow, LogisticCalibration, calibration_errors,
    ds_brier, ds_calibration_curve, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.curves import HistogramAUC, ds_hist_auc
from dsfed_client.analyses.discrimination import ROCGLM, ds_roc_glm
from dsfed_client.errors import FederatedCallError
from dsfed_client.session import FederatedSession

Method = Literal["histogram", "paper"]


@dataclass(frozen=True)
class Discrimination:
    """The discrimination half of a validation, whichever method computed it: the empirical AUC and
    the ROC-GLM AUC (seed 000), each with its interval.

    ``method="histogram"`` (the default): placement values against global CDFs from the sites'
    noisy hierarchical histograms (seed 003); ``auc_ci`` is seed 000's logit interval on the
    DeLong variance plus the variance the noise adds (``noise_variance``), and the ROC-GLM is fitted
    on the same placement values. ``method="paper"``: seed 000's noisy scores, as in the paper;
    ``auc_ci`` is the DeLong interval, which, as the paper's, does not account for the noise."""

    method: str
    auc: float
    auc_ci: tuple[float, float]
    variance: float  # DeLong variance of the empirical AUC
    noise_variance: float  # what the DP noise adds to it (0: not estimated, or noise off)
    roc_glm_auc: float
    roc_glm_ci: tuple[float, float]
    a: float
    b: float
    iterations: int
    n_thresholds: int
    n_positive: int
    n_negative: int
    alpha: float
    noise_off: bool
    noise: str  # how noise entered, in words
    result: HistogramAUC | ROCGLM = field(repr=False)

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
                   g.glm.iterations, g.n_thresholds, h.n_positive, h.n_negative, h.alpha, h.noise_off, noise, h)

    @classmethod
    def from_paper(cls, r: ROCGLM) -> "Discrimination":
        e = r.empirical
        noise = ("off (test profile: exact)" if r.reference.noise_off else
                 "noisy scores per site (seed 000): " + ", ".join(f"{s} sigma {v:.4g}" for s, v in
                                                                   r.reference.sigma.items())
                 + "; the intervals do not account for the noise (as in the paper)")
        return cls("paper", e.auc, e.ci_delong, e.variance, 0.0, r.auc, r.ci, r.a, r.b, r.glm.iterations,
                   r.n_thresholds, e.n_positive, e.n_negative, r.alpha, r.reference.noise_off, noise, r)

    @property
    def mechanism(self) -> dict[str, dict[str, Any]]:
        """Per site (or ``"pooled"``) the mechanism of the noisy release the AUC rests on."""
        r = self.result
        return r.histograms.mechanism if isinstance(r, HistogramAUC) else r.reference.mechanism

    def plot(self, ax: Any = None, **kwargs: Any) -> Any:
        return self.result.plot(ax=ax, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "auc": self.auc, "auc_ci": list(self.auc_ci), "variance": self.variance,
                "noise_variance": self.noise_variance, "roc_glm_auc": self.roc_glm_auc,
                "roc_glm_ci": list(self.roc_glm_ci), "a": self.a, "b": self.b, "iterations": self.iterations,
                "n_thresholds": self.n_thresholds, "n_positive": self.n_positive, "n_negative": self.n_negative,
                "alpha": self.alpha, "noise_off": self.noise_off, "noise": self.noise}


@dataclass(frozen=True)
class ValidationReport:
    """Discrimination and calibration of one model over all sites.

    ``mode`` is ``"pooled"`` when every binned release was checked pooled over the sites (secure
    aggregation with pooled thresholds), ``"per-site"`` otherwise; ``mode_note`` says why the
    per-site path was taken."""

    discrimination: Discrimination
    brier: Brier
    curve: CalibrationCurve
    hl_c: HosmerLemeshow
    hl_h: HosmerLemeshow
    errors: CalibrationErrors
    logistic: LogisticCalibration
    mode: str = "per-site"
    mode_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "mode_note": self.mode_note, "discrimination": self.discrimination.to_dict(),
            "brier": self.brier.to_dict(), "calibration_curve": self.curve.to_dict(),
            "hosmer_lemeshow_c": self.hl_c.to_dict(), "hosmer_lemeshow_h": self.hl_h.to_dict(),
            "ece_mce": self.errors.to_dict(), "logistic_calibration": self.logistic.to_dict(),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per statistic: estimate, interval (where there is one), p-value, note."""
        d, level = self.discrimination, f"{1 - self.discrimination.alpha:.0%}"
        slope_ci, citl_ci = self.logistic.fit.conf_int()[1], self.logistic.citl_fit.conf_int()[0]
        nan = float("nan")
        auc_note = (f"{level} logit CI (eq. 3), sampling + noise variance" if d.method == "histogram"
                    else f"{level} DeLong CI")
        rows = [
            ("empirical AUC", d.auc, *d.auc_ci, nan, auc_note),
            ("ROC-GLM AUC", d.roc_glm_auc, *d.roc_glm_ci, nan, f"{level} logit CI (eq. 3)"),
            ("Brier score", self.brier.brier, nan, nan, nan, ""),
            ("Spiegelhalter z", self.brier.spiegelhalter_z, nan, nan, self.brier.spiegelhalter_p, ""),
            ("calibration intercept", self.logistic.intercept, nan, nan, nan, "y ~ logit(p)"),
            ("calibration slope", self.logistic.slope, *slope_ci, nan, "95% Wald CI"),
            ("calibration-in-the-large", self.logistic.citl, *citl_ci, nan, "95% Wald CI"),
            ("H-L C", self.hl_c.statistic, nan, nan, self.hl_c.pvalue,
             f"df {self.hl_c.df}" + ("" if self.hl_c.complete else ", groups merged or inexact")),
            ("H-L H", self.hl_h.statistic, nan, nan, self.hl_h.pvalue,
             f"df {self.hl_h.df}" + ("" if self.hl_h.complete else ", groups merged")),
            ("ECE", self.errors.ece, nan, nan, nan, "groups of H-L C"),
            ("MCE", self.errors.mce, nan, nan, nan, "groups of H-L C"),
        ]
        return pd.DataFrame([row[1:] for row in rows], index=[row[0] for row in rows],
                            columns=["estimate", "lower", "upper", "pvalue", "note"])

    def summary(self) -> str:
        """A text table of every statistic, then how the sites checked the cells they released."""
        title = "Federated validation of a binary prediction model"
        table = self.to_frame().to_string(float_format=lambda v: f"{v:.4f}", na_rep="")
        width = max(len(title), max(len(line) for line in table.splitlines()))
        mode = ("pooled: every binned release checked on the cells pooled over the sites" if self.mode == "pooled"
                else f"PER SITE: each site checked its own cells ({self.mode_note})")
        lines = [title.center(width), "=" * width,
                 f"n = {self.brier.n}; discrimination by {self.discrimination.method} method; noise: "
                 f"{self.discrimination.noise}", f"disclosure checks: {mode}", "=" * width, table, "=" * width,
                 f"calibration curve: {self.curve.bins.note()}",
                 f"H-L C: {self.hl_c.note()}", f"H-L H: {self.hl_h.note()}"]
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        d = self.discrimination
        return (f"ValidationReport(n={self.brier.n}, auc={d.auc:.4f}, ci=({d.auc_ci[0]:.4f}, {d.auc_ci[1]:.4f}), "
                f"roc_glm_auc={d.roc_glm_auc:.4f}, brier={self.brier.brier:.4f}, slope={self.logistic.slope:.4f}, "
                f"hl_c={self.hl_c.statistic:.3f}, ece={self.errors.ece:.4f}, mode={self.mode!r})")

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


_FALLBACK_RULES = ("secure_aggregation.", "functions.enabled")


def no_pooled_release(exc: FederatedCallError) -> bool:
    """Whether a failed pooled release means 'this federation offers no pooled release' (then the
    per-site path is taken), rather than a refusal of this analysis."""
    return all(e.rule is not None and e.rule.startswith(_FALLBACK_RULES) for e in exc.failures.values())


def validate(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05, n_bins: int = 10,
             g: int = 10, n_thresholds: int = 99, method: Method = "histogram", secure: bool | None = None,
             epsilon: float | None = None, delta: float | None = None,
             sensitivity: float | None = None) -> ValidationReport:
    """The validation of a binary prediction model: AUC with CI and the ROC-GLM, Brier and
    Spiegelhalter, calibration curve, Hosmer-Lemeshow C and H, ECE/MCE, calibration intercept,
    slope and in-the-large.

    ``secure=None`` (the default) uses pooled releases when every site offers them (secure
    aggregation, each site checking the pooled cells: exact at small sites) and falls back to
    per-site checking otherwise, saying why in ``mode_note``; ``True`` insists on pooled releases,
    ``False`` asks per site. ``method="histogram"`` (the default) computes the AUC and the ROC-GLM
    from placement values against the sites' noisy histograms, with an interval that accounts for
    the noise; ``method="paper"`` reproduces seed 000 (per-record noisy scores)."""
    if method not in ("histogram", "paper"):
        raise ValueError("method must be 'histogram' or 'paper'")
    note = "asked for per-site checking" if secure is False else ""
    pooled = secure is not False
    if secure is None:
        pooled, note = session.pooled_capability()
    try:
        brier = ds_brier(session, truth, score, secure=pooled)
    except FederatedCallError as exc:
        if secure is not None or not no_pooled_release(exc):
            raise
        pooled, note = False, f"a pooled release was refused: {exc}"
        brier = ds_brier(session, truth, score)
    # the binned releases in this order: bins of the curve and of H-L H first (the same cuts)
    curve = ds_calibration_curve(session, truth, score, n_bins=n_bins, secure=pooled)
    hl_h = ds_hosmer_lemeshow(session, truth, score, g=g, kind="H", secure=pooled)
    hl_c = ds_hosmer_lemeshow(session, truth, score, g=g, kind="C", secure=pooled)
    logistic = ds_logistic_calibration(session, truth, score, n_complete=brier.n, secure=pooled)
    if method == "paper":
        discrimination = Discrimination.from_paper(ds_roc_glm(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, epsilon=epsilon, delta=delta,
            sensitivity=sensitivity, secure=pooled))
    else:
        discrimination = Discrimination.from_histogram(ds_hist_auc(
            session, truth, score, alpha=alpha, n_thresholds=n_thresholds, secure=pooled, epsilon=epsilon,
            delta=delta))
    return ValidationReport(discrimination, brier, curve, hl_c, hl_h, calibration_errors(hl_c), logistic,
                            "pooled" if pooled else "per-site", note)

