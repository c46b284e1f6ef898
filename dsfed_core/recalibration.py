"""Recalibration maps, evaluated alike by the analyst (to show and plot a map) and by a site
(``recalibrateDS``, which applies a map it received as numbers only, never as code)."""

from __future__ import annotations

import numpy as np
from scipy import special
from scipy.interpolate import PchipInterpolator

METHODS = ("logistic", "pchip", "step")


def logistic_map(p: np.ndarray, intercept: float, slope: float) -> np.ndarray:
    """Platt scaling on the logit scale (Huang 2020, §3.6.1; the calibration model of ``rms::val.prob``):
    :math:`\\tilde p = \\operatorname{expit}(a + b \\operatorname{logit}(p))`. For p = 0 or 1 the
    limit is taken (0 or 1 for b > 0, swapped for b < 0, :math:`\\operatorname{expit}(a)` for b = 0)."""
    if slope == 0:
        return np.where(np.isnan(p), np.nan, special.expit(intercept))
    with np.errstate(divide="ignore"):
        return special.expit(intercept + slope * special.logit(p))


def pchip_map(p: np.ndarray, knots: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Smooth isotonic regression (Huang 2020, §4.6, Algorithm 4.1; Jiang et al. 2011): the piecewise
    cubic Hermite interpolant (Fritsch-Carlson, scipy's ``PchipInterpolator``) through one point per
    isotonic step, :math:`(\\bar p_s, \\hat z_s)`. With non-decreasing values it is monotone and stays
    between neighbouring values. Outside ``[knots[0], knots[-1]]`` the end values are kept (constant
    extrapolation, as ``out_of_bounds="clip"`` in scikit-learn's ``IsotonicRegression``)."""
    if knots.size == 1:
        return np.where(np.isnan(p), np.nan, values[0])
    out = PchipInterpolator(knots, values, extrapolate=False)(np.clip(p, knots[0], knots[-1]))
    return np.clip(out, values[0], values[-1])  # only rounding could step outside


def step_map(p: np.ndarray, knots: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The isotonic step function itself (Huang 2020, eq. 3.9 / 4.2): ``values[s]`` for p in
    ``(knots[s-1], knots[s]]`` (the first step closed at 0), ``knots[s]`` being the upper end of
    step s; p above the last knot gets the last value."""
    idx = np.minimum(np.searchsorted(knots, p, side="left"), knots.size - 1)
    return np.where(np.isnan(p), np.nan, values[np.where(np.isnan(p), 0, idx)])


def apply_map(p: np.ndarray, method: str, coefficients: np.ndarray | None, knots: np.ndarray | None,
              values: np.ndarray | None) -> np.ndarray:
    """The recalibrated probabilities of ``p`` under a map given by its numbers (checked before)."""
    if method == "logistic":
        intercept, slope = (float(c) for c in coefficients)  # type: ignore[union-attr]
        return logistic_map(p, intercept, slope)
    evaluate = pchip_map if method == "pchip" else step_map
    return evaluate(p, np.asarray(knots, dtype=float), np.asarray(values, dtype=float))
