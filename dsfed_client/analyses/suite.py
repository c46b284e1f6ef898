"""The whole validation of a binary prediction model across sites, in one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
