"""The whole validation of a binary prediction model across sites, in one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from dsfed_client.analyses.calibration import (
    Brier, CalibrationCurve, CalibrationErrors, HosmerLemeshow, LogisticCalibration, calibration_errors,
    ds_brier, ds_calibration_curve, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.analyses.discrimination import ROCGLM, ds_roc_glm
from dsfed_client.session import FederatedSession


@dataclass(frozen=True)
class ValidationReport:
    """Discrimination and calibration of one model over all sites."""

    roc_glm: ROCGLM
    brier: Brier
    curve: CalibrationCurve
    hl_c: HosmerLemeshow
    hl_h: HosmerLemeshow
    errors: CalibrationErrors
    logistic: LogisticCalibration

    def to_dict(self) -> dict[str, Any]:
        return {
            "roc_glm": self.roc_glm.to_dict(), "brier": self.brier.to_dict(), "calibration_curve": self.curve.to_dict(),
            "hosmer_lemeshow_c": self.hl_c.to_dict(), "hosmer_lemeshow_h": self.hl_h.to_dict(),
            "ece_mce": self.errors.to_dict(), "logistic_calibration": self.logistic.to_dict(),
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per statistic: estimate, interval (where there is one), p-value, note."""
        r, level = self.roc_glm, f"{1 - self.roc_glm.alpha:.0%}"
        slope_ci, citl_ci = self.logistic.fit.conf_int()[1], self.logistic.citl_fit.conf_int()[0]
        nan = float("nan")
        rows = [
            ("ROC-GLM AUC", r.auc, *r.ci, nan, f"{level} logit CI (eq. 3)"),
            ("empirical AUC", r.empirical.auc, *r.empirical.ci_delong, nan, f"{level} DeLong CI"),
            ("Brier score", self.brier.brier, nan, nan, nan, ""),
            ("Spiegelhalter z", self.brier.spiegelhalter_z, nan, nan, self.brier.spiegelhalter_p, ""),
            ("calibration intercept", self.logistic.intercept, nan, nan, nan, "y ~ logit(p)"),
            ("calibration slope", self.logistic.slope, *slope_ci, nan, "95% Wald CI"),
            ("calibration-in-the-large", self.logistic.citl, *citl_ci, nan, "95% Wald CI"),
            ("H-L C", self.hl_c.statistic, nan, nan, self.hl_c.pvalue,
             f"df {self.hl_c.df}" + ("" if self.hl_c.complete else ", partial")),
            ("H-L H", self.hl_h.statistic, nan, nan, self.hl_h.pvalue,
             f"df {self.hl_h.df}" + ("" if self.hl_h.complete else ", partial")),
            ("ECE", self.errors.ece, nan, nan, nan, "groups of H-L C"),
            ("MCE", self.errors.mce, nan, nan, nan, "groups of H-L C"),
        ]
        return pd.DataFrame([row[1:] for row in rows], index=[row[0] for row in rows],
                            columns=["estimate", "lower", "upper", "pvalue", "note"])

    def summary(self) -> str:
        """A text table of every statistic, then the suppression the sites applied."""
        title = "Federated validation of a binary prediction model"
        table = self.to_frame().to_string(float_format=lambda v: f"{v:.4f}", na_rep="")
        width = max(len(title), max(len(line) for line in table.splitlines()))
        noise = ("off (test profile: exact)" if self.roc_glm.reference.noise_off else
                 ", ".join(f"{s} sigma {v:.4g}" for s, v in self.roc_glm.reference.sigma.items()))
        lines = [title.center(width), "=" * width, f"n = {self.brier.n}; noise on the scores: {noise}", "=" * width,
                 table, "=" * width,
                 f"calibration curve: {self.curve.suppressed_total} of {self.curve.n_total} records suppressed",
                 f"H-L C: {self.hl_c.suppressed_records} records suppressed; H-L H: {self.hl_h.suppressed_records}"]
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return (f"ValidationReport(n={self.brier.n}, auc={self.roc_glm.auc:.4f}, "
                f"ci=({self.roc_glm.ci[0]:.4f}, {self.roc_glm.ci[1]:.4f}), brier={self.brier.brier:.4f}, "
                f"slope={self.logistic.slope:.4f}, hl_c={self.hl_c.statistic:.3f}, ece={self.errors.ece:.4f})")

    def plot(self, ax: Any = None) -> Any:
        """ROC curve, calibration curve and the H-L C bars side by side. ``ax``: three Axes to draw on,
        or None for a new figure. Returns the three Axes."""
        from dsfed_client.plots import _pyplot  # noqa: PLC0415

        if ax is None:
            fig, ax = _pyplot().subplots(1, 3, figsize=(16, 5))
        self.roc_glm.plot(ax=ax[0])
        self.curve.plot(ax=ax[1])
        self.hl_c.plot(ax=ax[2])
        return ax


def validate(session: FederatedSession, truth: str, score: str, *, alpha: float = 0.05, n_bins: int = 10,
             g: int = 10, n_thresholds: int = 99, epsilon: float | None = None, delta: float | None = None,
             sensitivity: float | None = None) -> ValidationReport:
    """ROC-GLM with AUC and CI (and the empirical AUC with DeLong CI), Brier and Spiegelhalter,
    calibration curve, Hosmer-Lemeshow C and H, ECE/MCE, calibration intercept, slope and in-the-large."""
    roc = ds_roc_glm(session, truth, score, alpha=alpha, n_thresholds=n_thresholds, epsilon=epsilon,
                     delta=delta, sensitivity=sensitivity)
    brier = ds_brier(session, truth, score)
    curve = ds_calibration_curve(session, truth, score, n_bins=n_bins)
    hl_c = ds_hosmer_lemeshow(session, truth, score, g=g, kind="C")
    hl_h = ds_hosmer_lemeshow(session, truth, score, g=g, kind="H")
    logistic = ds_logistic_calibration(session, truth, score, n_complete=brier.n)
    return ValidationReport(roc, brier, curve, hl_c, hl_h, calibration_errors(hl_c), logistic)
