"""Smooth calibration: logistic calibration on a restricted cubic spline of logit(p), with its
pointwise band, the ICI, E50, E90 and Emax (Austin & Steyerberg 2019), Nagelkerke's R² and the
log loss.

Why splines and not loess (Huang's 2020 dissertation, §3.5.7, smooths with loess): a loess fit at a
point weighs the records of its neighbourhood, so it is not a sum over records that sites could add up; a logistic
regression on a restricted cubic spline basis is a GLM, whose sufficient statistics are sums
(:math:`X^T W X`, :math:`X^T W z`), fitted exactly by the distributed GLM. Austin & Steyerberg
(2019) found the two smoothers give comparable calibration curves and ICI.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import special, stats

from dsfed_client.aggregation import last_release
from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.calls import Call, Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.params import ALPHA, Interval, validate_params
from dsfed_client.results import Results, hidden, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.splines import rcs_design, rcs_term_names


@result
class SplineCalibration(Results):
    """The smooth calibration curve :math:`\\hat c(p) = \\mathrm{expit}(\\beta^T x(\\mathrm{logit}\\,p))`,
    ``x`` the ``rms::rcs`` basis at knots the sites derived, with a pointwise ``1 - alpha`` band;
    ``to_frame`` has the curve on ``grid`` (``p``, ``calibrated``, ``lower``, ``upper``).

    ``emax`` departs from Austin & Steyerberg's maximum over the records (an extreme record's
    error): it is the maximum of :math:`|\\hat c(p) - p|` over the grid between the 1 and 99 % pooled
    quantiles of logit(p) that the sites release (``p_range``); a bound the release gate refuses (it
    would single out fewer than q records beside a knot or an earlier cut) is the outer knot on its
    side instead, and ``range_note`` says so.

    References
    ----------
    Austin & Steyerberg (2019), "The Integrated Calibration Index (ICI) and related metrics for
    quantifying the calibration of logistic regression models", Stat Med 38:4051-4065 (ICI, E50, E90,
    Emax); Harrell (2015), §2.4.5 (restricted cubic splines); Nagelkerke (1991) and ``rms::val.prob``
    (R2); Huang's dissertation (2020), §3.5.7 (smooth calibration curves).
    """

    _title: ClassVar[str] = "Smooth calibration: y ~ rcs(logit(p))"

    ici: float = stat("ICI", brief=".4f")
    e50: float = stat("E50", brief=".4f")
    e90: float = stat("E90", brief=".4f")
    emax: float = stat("Emax (on the released range)", brief=".4f")
    r2: float = stat("Nagelkerke R2", brief=".4f")
    log_loss: float = stat("Log loss", brief=".4f")
    n: int = stat("n used", brief="")
    knots: np.ndarray = hidden()
    p_range: tuple[float, float] = stat("Range of p (1 and 99 % quantiles, or the outer knots)")
    fit: GLMResults = hidden()
    grid: np.ndarray = hidden()
    calibrated: np.ndarray = hidden()
    lower: np.ndarray = hidden()
    upper: np.ndarray = hidden()
    alpha: float = stat(default=0.05)
    range_note: str = stat(default="")  # why a bound of the range is an outer knot, if one is
    knots_note: str = stat(default="")  # which knots moved to cuts released before (not rms's), if any

    def _table(self) -> pd.DataFrame:
        return pd.DataFrame({"p": self.grid, "calibrated": self.calibrated, "lower": self.lower, "upper": self.upper})

    def _notes(self) -> tuple[str, ...]:
        return tuple(note for note in (self.knots_note, self.range_note) if note)

    def plot(self, ax: Any = None) -> Any:
        """The curve with its pointwise band against the diagonal; returns the Axes."""
        from dsfed_client.plots import plot_smooth_calibration  # noqa: PLC0415

        return plot_smooth_calibration(self.grid, self.calibrated, self.lower, self.upper, special.expit(self.knots),
                                       title=f"Smooth calibration: ICI {self.ici:.4f}, E90 {self.e90:.4f}", ax=ax)


def curve_band(fit: GLMResults, knots: np.ndarray, lp: np.ndarray, alpha: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fitted curve at logit(p) = ``lp`` and its pointwise band: the delta method on the logit
    scale, :math:`\\hat\\eta \\pm z_{1-\\alpha/2}\\sqrt{x^T \\hat\\Sigma x}` back-transformed (R's
    ``predict(fit, se.fit = TRUE)`` on the link scale)."""
    x = rcs_design(lp, knots)
    eta = x @ fit.params
    se = np.sqrt(np.einsum("ij,jk,ik->i", x, fit.cov_params_, x))
    z = stats.norm.ppf(1 - alpha / 2)
    return special.expit(eta), special.expit(eta - z * se), special.expit(eta + z * se)


def nagelkerke_r2(n: float, n1: float, loglik: float) -> float:
    """``rms::val.prob``'s R2 of the predictions: :math:`(1 - e^{-LR/n}) / (1 - e^{-L_0/n})` with
    :math:`L_0 = -2\\{n_1 \\log \\bar y + (n - n_1)\\log(1 - \\bar y)\\}` and
    :math:`LR = L_0 + 2\\ell` (Nagelkerke 1991).

    Predictions equal to the event rate explain nothing:

    >>> round(nagelkerke_r2(10, 5, 10 * np.log(0.5)), 12)
    0.0
    """
    ybar = n1 / n
    l0 = -2 * (n1 * np.log(ybar) + (n - n1) * np.log1p(-ybar))
    return float((1 - np.exp(-(l0 + 2 * loglik) / n)) / (1 - np.exp(-l0 / n)))


@validate_params({"nk": [Interval(int, 3, 7)], "alpha": ALPHA, "n_grid": [Interval(int, 10, 10000)]})
def ds_spline_calibration(session: FederatedSession, truth: str, score: str, *, nk: int = 4, alpha: float = 0.05,
                          n_grid: int = 200, secure: bool | None = True) -> SplineCalibration:
    """``glm(y ~ rms::rcs(qlogis(p), nk), binomial)`` on the pooled records with 0 < p < 1, by the
    distributed GLM, and the measures of its curve.

    1. The sites find the knots (``rcsKnotsDS``: rcs's quantiles of logit(p), exact, from pooled
       order statistics) and keep them; the analyst gets them and a handle.
    2. Every site builds the basis at those knots (``rcsFrameDS``); the distributed GLM fits it.
    3. ``splineErrorsDS``: the sites check that the coefficients are the pooled fit, then release
       :math:`ICI = n^{-1}\\sum_i |\\hat c(p_i) - p_i|` and the type-7 median (E50) and 90th
       percentile (E90) of those errors, exact.
    4. ``calibrationLossDS``: log loss :math:`-\\ell/n` and Nagelkerke's R² from pooled sums.
    5. The curve and its pointwise ``1 - alpha`` band (:func:`curve_band`) on ``n_grid`` points of
       logit(p) evenly spaced between the released 1 and 99 % quantiles; Emax is the largest
       :math:`|\\hat c(p) - p|` there.

    ``secure``: the knots and the errors are protocols on pooled counts only (secure aggregation);
    ``False`` is refused by the sites, naming the function. The GLM and the sums follow ``secure``.

    References
    ----------
    Austin & Steyerberg (2019), Stat Med 38:4051-4065; Harrell (2015), §2.4.5 and ``rms::rcs``;
    Nagelkerke (1991), Biometrika 78:691-692; Schalk et al. (2024) and Wu et al. (2012), "Preserving
    institutional privacy in distributed binary logistic regression" (the distributed GLM).
    """
    agg = session.aggregation(secure)
    knots_release = last_release(agg.steps("rcsKnotsDS", Ref(truth), Ref(score), nk))
    knots = np.asarray(knots_release["knots"], dtype=float)
    handle = Ref(knots_release["knots_symbol"], knots_release["knots_digest"])
    terms = rcs_term_names(knots.size)
    with session.temporary("rcs") as name:
        frame = session.assign(name, Call("rcsFrameDS", Ref(truth), Ref(score), handle))
        fit = ds_glm(session, "y ~ " + " + ".join(terms), frame, secure=secure, null_model=False)
        errors = last_release(agg.steps("splineErrorsDS", frame, [float(b) for b in fit.params]))
        loss = agg.sum("calibrationLossDS", frame)
    lo, hi = knots_release["range"]
    lp = np.linspace(lo, hi, n_grid)
    calibrated, lower, upper = curve_band(fit, knots, lp, alpha)
    grid = special.expit(lp)
    return SplineCalibration(
        ici=float(errors["ici"]), e50=float(errors["e50"]), e90=float(errors["e90"]),
        emax=float(np.max(np.abs(calibrated - grid))), r2=nagelkerke_r2(loss["n"], loss["n1"], loss["loglik"]),
        log_loss=-loss["loglik"] / loss["n"], n=int(loss["n"]), knots=knots,
        p_range=(float(special.expit(lo)), float(special.expit(hi))), fit=fit, grid=grid, calibrated=calibrated,
        lower=lower, upper=upper, alpha=alpha, range_note=knots_release.get("range_withheld") or "",
        knots_note=_moves_note(knots_release.get("knots_moved") or []))


def _moves_note(moved: list[list[float]]) -> str:
    """The knots the release gate moved to cuts released before on the score column, in words
    (``[quantile, to]``: the knot at that quantile of logit(p), the cut it moved onto)."""
    if not moved:
        return ""
    moves = ", ".join(f"the {100 * prob:g} % knot to p = {special.expit(b):.4g}" for prob, b in moved)
    return (f"{len(moved)} knot(s) moved to cuts released before on the score column ({moves}): at rms's quantile "
            "they would single out fewer than q records beside such a cut; the fit is the spline at these knots")


SKIPPED = "smooth calibration skipped (it needs pooled releases of rcsKnotsDS and splineErrorsDS)"


def spline_section(session: FederatedSession, truth: str, score: str, *, alpha: float,
                   secure: bool | None) -> tuple[SplineCalibration | None, str]:
    """:func:`ds_spline_calibration` for :func:`~dsfed_client.analyses.suite.validate`: the result, or
    None and why the sites refused it (per-site checking offers no pooled knots; a rules file that
    does not enable the functions; too few records)."""
    try:
        return ds_spline_calibration(session, truth, score, alpha=alpha, secure=secure), ""
    except FederatedCallError as exc:
        return None, f"{SKIPPED}: {exc}"
