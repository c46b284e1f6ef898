"""Federated recalibration of a binary prediction model (Huang 2020, chapter 4; §3.6.1-3.6.2).

Two calibration models are fitted on the distributed data without pooling a record, then
applied at every site as a registry *assign* function (``recalibrateDS``) that receives the
map as numbers only:

**Platt (logistic) recalibration** (Huang 2020, §3.6.1): :math:`\\tilde p = \\operatorname{expit}(a +
b\\,\\operatorname{logit}(p))`, with :math:`(a, b)` from ``glm(y ~ logit(p), binomial)`` fitted by
the distributed GLM (:func:`~dsfed_client.analyses.calibration.ds_logistic_calibration`: the
calibration intercept and slope). Without noise the coefficients are R's ``glm`` on the pooled
data.

**Smooth isotonic recalibration** (Huang 2020, §4.3-4.6, Algorithm 4.1; Jiang et al. 2011). The
isotonic regression (eq. 3.9 / 4.2)

.. math:: \\hat z = \\arg\\min_z \\sum_i (y_i - z_i)^2 \\quad \\text{s.t.}\\quad z_1 \\le \\dots \\le z_n

(records sorted by score) is solved by the pool-adjacent-violators algorithm on *bins* of the
score: every site returns, per bin :math:`l`, its count :math:`n_l^{(k)}`, sum of scores
:math:`c_{l,p}^{(k)}` and sum of outcomes :math:`c_{l,y}^{(k)}` (registry entry ``groupSumsDS``;
the sites' release gate merges a bin holding fewer than q records with the next, at one site or
pooled over the sites). The analyst pools the sums and runs weighted PAVA
(``scipy.optimize.isotonic_regression``) on the bin means :math:`\\bar y_l = \\sum_k c_{l,y}^{(k)} /
\\sum_k n_l^{(k)}` with weights :math:`\\sum_k n_l^{(k)}`. Each step :math:`s` of the solution
(a maximal run of bins with one fitted value) gives one knot

.. math:: \\bar p_s = \\frac{\\sum_{l \\in s} \\sum_k c_{l,p}^{(k)}}{\\sum_{l \\in s} \\sum_k n_l^{(k)}}, \\qquad
          \\hat z_s = \\frac{\\sum_{l \\in s} \\sum_k c_{l,y}^{(k)}}{\\sum_{l \\in s} \\sum_k n_l^{(k)}}

(eq. 4.5: the step's value is its share of events; the x value is the mean score on the step,
Algorithm 4.1 steps 1-3, here a plain sum of site sums instead of the random-mask ring), and the
smooth isotonic map is the PCHIP through :math:`(\\bar p_s, \\hat z_s)` (step 4), constant
outside the first and last knot.

Exactness. The PAVA solution for binned data is the isotonic regression constrained to be
constant within each bin. If every bin holds the records of one distinct score value (bins
split between the distinct values) and no bin is merged, it *is* the pooled isotonic
regression (with tied scores pooled: the "secondary" treatment of ties, scikit-learn's), and the
knots equal the pooled ones exactly. With fewer bins than distinct scores the steps can only
break at bin boundaries: that binning, and any bins the gate merged, are the whole difference
from the pooled fit; results carry the bins as released (``bins``) to say so.

Disclosure. The bin sums are the ones ``groupSumsDS`` releases for Hosmer-Lemeshow (the release
gate's q-rule); the bin breaks come from one censored ``countBelowDS`` query;
the maps are computed from these aggregates only. Applying a map creates a site-side vector whose
sums are then released by the validation functions; the site passes a map's knots through its
release gate as cuts on the score first (``dsfed_server/functions/recalibration.py``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import special
from scipy.optimize import isotonic_regression

from dsfed_client.analyses.calibration import (
    LogisticCalibration, calibration_errors, ds_brier, ds_hosmer_lemeshow, ds_logistic_calibration,
)
from dsfed_client.calls import Call, Ref
from dsfed_client.aggregation import Aggregation, first_release
from dsfed_client.params import N_GROUPS, Interval, Options, check_params, validate_params
from dsfed_client.results import Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.recalibration import METHODS, apply_map



# --- the map ---------------------------------------------------------------------------------


@result
class RecalibrationMap(Results):
    """A recalibration map as the numbers that travel to the sites (never code).

    ``logistic``: ``coefficients = (a, b)``, :math:`\\operatorname{expit}(a + b\\,\\operatorname{logit}(p))`.
    ``pchip``: smooth isotonic map through ``(knots, values)``, constant outside the knots.
    ``step``: isotonic step function, ``values[s]`` on ``(knots[s-1], knots[s]]``.
    Calling the map evaluates it as ``recalibrateDS`` does at the site.

    References
    ----------
    Platt (1999) and Huang's dissertation (2020), §3.6.1 (logistic); §4.3-4.6 and Algorithm 4.1
    (smooth isotonic, PCHIP through the step knots; Jiang et al. 2011).

    Examples
    --------
    >>> m = RecalibrationMap("step", knots=np.array([0.5, 1.0]), values=np.array([0.2, 0.7]))
    >>> m(np.array([0.1, 0.5, 0.6, 1.0]))
    array([0.2, 0.2, 0.7, 0.7])
    >>> m
    RecalibrationMap(method='step', n_knots=2)
    >>> RecalibrationMap("logistic", coefficients=(0.0, 1.0))(np.array([0.25]))  # the identity
    array([0.25])
    """

    _title: ClassVar[str] = "Recalibration map"

    method: str = stat("Method", brief="")
    coefficients: tuple[float, float] | None = stat("Intercept, slope", default=None)
    knots: np.ndarray | None = stat(default=None)
    values: np.ndarray | None = stat(default=None)

    def __post_init__(self) -> None:
        check_params("RecalibrationMap", {"method": self.method}, {"method": [Options(set(METHODS))]})

    @derived("Knots", brief="")
    def n_knots(self) -> int | None:
        return None if self.knots is None else len(self.knots)

    def __call__(self, p: Any) -> np.ndarray:
        return apply_map(np.asarray(p, dtype=float), self.method, self.coefficients, self.knots, self.values)

    def call(self, score: str) -> Call:
        """The ``recalibrateDS`` call that applies this map to ``score`` at each site."""
        if self.method == "logistic":
            return Call("recalibrateDS", Ref(score), "logistic", coefficients=[float(c) for c in self.coefficients])
        return Call("recalibrateDS", Ref(score), self.method, knots=np.asarray(self.knots, dtype=float),
                    values=np.asarray(self.values, dtype=float))

    def plot(self, ax: Any = None, *, label: str | None = None) -> Any:
        """The map over [0, 1] with the identity (no recalibration) for reference. Returns the Axes."""
        from dsfed_client.plots import new_axes  # noqa: PLC0415

        ax = new_axes(ax)
        grid = np.linspace(0.0, 1.0, 501)
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="identity")
        ax.plot(grid, self(grid), color="tab:blue", linewidth=2, label=label or f"{self.method} map",
                gid="recalibration-map")
        if self.knots is not None and self.method != "logistic":
            ax.plot(self.knots, self.values, "o", color="tab:blue", markersize=3, gid="recalibration-knots")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted probability")
        ax.set_ylabel("recalibrated probability")
        ax.set_title("Recalibration map")
        ax.legend(loc="lower right", fontsize=8)
        return ax

    def max_difference(self, other: "RecalibrationMap", grid: np.ndarray | None = None) -> float:
        """:math:`\\max_t |f(t) - g(t)|` over ``grid`` (default 1001 equidistant points on [0, 1])."""
        grid = np.linspace(0.0, 1.0, 1001) if grid is None else np.asarray(grid, dtype=float)
        return float(np.max(np.abs(self(grid) - other(grid))))

    def _table(self) -> pd.DataFrame | None:
        if self.method == "logistic":
            return None
        return pd.DataFrame({"knot": self.knots, "value": self.values})


# --- Platt ------------------------------------------------------------------------------------


@result
class PlattFit(Results):
    """Platt (logistic) recalibration fitted by the distributed GLM; ``to_frame`` is the GLM's
    coefficient table.

    References
    ----------
    Platt (1999); Huang's dissertation (2020), §3.6.1; the distributed GLM of Schalk et al. (2024) and
    Wu et al. (2012), "Preserving institutional privacy in distributed binary logistic regression".
    """

    _title: ClassVar[str] = "Platt (logistic) recalibration: distributed glm(y ~ logit(p))"

    map: RecalibrationMap = stat()
    calibration: LogisticCalibration = stat()  # glm(y ~ logit(p)) and the calibration-in-the-large fit

    @derived("Intercept", brief=".6g")
    def intercept(self) -> float:
        return self.calibration.intercept

    @derived("Slope", brief=".6g")
    def slope(self) -> float:
        return self.calibration.slope

    @derived("n", brief="")
    def n(self) -> int:
        return self.calibration.fit.nobs

    @derived("Records with p = 0 or 1 left out", export=False)
    def n_excluded(self) -> int:
        return self.calibration.n_excluded

    def _table(self) -> pd.DataFrame:
        return self.calibration.fit.to_frame()


def ds_platt_fit(session: FederatedSession, truth: str, score: str, *, secure: bool | None = False) -> PlattFit:
    """Fit :math:`\\operatorname{logit} P(y=1) = a + b\\,\\operatorname{logit}(p)` by the distributed
    GLM (registry ``calibrationFrameDS`` + ``glmDS2``; R's ``glm.fit`` path, so without noise the
    coefficients are R's ``glm(y ~ qlogis(p), binomial)`` on the pooled records with 0 < p < 1).
    ``secure``: the fit's counts checked pooled (:meth:`FederatedSession.aggregation`).

    References
    ----------
    Platt (1999); Huang's dissertation (2020), §3.6.1.
    """
    cal = ds_logistic_calibration(session, truth, score, secure=secure)
    return PlattFit(RecalibrationMap("logistic", coefficients=(cal.intercept, cal.slope)), cal)


# --- isotonic ---------------------------------------------------------------------------------


@result
class IsotonicFit(Results):
    """Smooth isotonic recalibration from pooled bin sums; ``to_frame`` has one row per step.

    ``map`` is the PCHIP (smooth isotonic) map, ``step`` the isotonic step function.
    ``bins`` holds the pooled per-bin sums that entered PAVA (the bins the sites' release gate
    released: requested bins holding fewer than q records merged with the next, ``merged_bins``
    of them) and the fitted value; every record is used.

    References
    ----------
    Huang's dissertation (2020), eqs. (3.9), (4.2), (4.5), Algorithm 4.1; Jiang et al. (2011),
    smooth isotonic regression; Barlow et al. (1972), PAVA.
    """

    _title: ClassVar[str] = "Smooth isotonic recalibration"

    map: RecalibrationMap = stat()
    step: RecalibrationMap = stat()
    bins: pd.DataFrame = stat()
    steps: pd.DataFrame = hidden()
    merged_bins: int = stat("Requested bins merged by the sites' release gate", brief="")
    n_total: int = stat("n", brief="")

    @derived("Bins", brief="")
    def n_bins(self) -> int:
        return len(self.bins)

    @derived("Steps", brief="")
    def n_steps(self) -> int:
        return len(self.steps)

    def _table(self) -> pd.DataFrame:
        return self.steps


def equal_count_breaks(session: FederatedSession, score: str, n_bins: int, *, grid_size: int = 4000,
                       logit_range: float = 15.0) -> np.ndarray:
    """Breaks ``[0, b_1, ..., 1]`` making about ``n_bins`` groups of equal pooled count.

    One ``countBelowDS`` query on a grid equidistant on the logit scale (``grid_size`` points on
    ``expit([-logit_range, logit_range])``). A site's count that the q-rule censors (fewer than q
    records from either end) is interpolated between its known neighbours, an error below q per
    site. The breaks need not be exact quantiles: any breaks give a valid binned PAVA; near-equal
    counts keep every bin well above q at the sites.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    grid = special.expit(np.linspace(-logit_range, logit_range, grid_size))
    results = session.aggregate("countBelowDS", Ref(score), grid)
    total = np.zeros(grid_size)
    n = 0
    for part in results.values():
        n_k = int(part["n"])
        n += n_k
        counts = np.array([np.nan if c is None else c for c in part["counts"]], dtype=float)
        # a censored count (1..q-1 records from either end) lies between its known neighbours:
        # interpolate it (the counts rise with the threshold; 0 below the grid, n_k above it)
        pos = np.arange(-1, grid_size + 1)
        known = np.r_[0.0, counts, float(n_k)]
        ok = ~np.isnan(known)
        total += np.interp(pos, pos[ok], known[ok])[1:-1]
    mid = total
    targets = n * np.arange(1, n_bins) / n_bins
    idx = np.searchsorted(mid, targets, side="left")
    inner = np.unique(grid[idx[idx < grid_size]])
    return np.concatenate([[0.0], inner[(inner > 0) & (inner < 1)], [1.0]])


def binned_pava(n: np.ndarray, sum_p: np.ndarray, sum_y: np.ndarray, upper: np.ndarray
                ) -> tuple[RecalibrationMap, RecalibrationMap, pd.DataFrame, np.ndarray]:
    """Weighted PAVA on bin means and the knots of its steps (Huang 2020, eqs. 3.9, 4.5; Alg. 4.1).

    Arguments are the pooled sums of the non-empty bins, in score order, and each bin's upper
    break. Returns the PCHIP map, the step map, the step table and each bin's fitted value.
    """
    n, sum_p, sum_y = (np.asarray(v, dtype=float) for v in (n, sum_p, sum_y))
    fitted = isotonic_regression(sum_y / n, weights=n, increasing=True).x
    starts = np.flatnonzero(np.r_[True, np.diff(fitted) != 0])  # a step: a maximal run of one fitted value
    ends = np.r_[starts[1:], n.size] - 1
    n_s, p_s, y_s = (np.add.reduceat(v, starts) for v in (n, sum_p, sum_y))
    knots, values = p_s / n_s, np.clip(y_s / n_s, 0.0, 1.0)
    step_knots = np.clip(np.asarray(upper, dtype=float)[ends], 0.0, 1.0)
    step_knots[-1] = 1.0  # the last step reaches to 1
    steps = pd.DataFrame({"lower": np.r_[0.0, step_knots[:-1]], "upper": step_knots, "n": n_s.astype(int),
                          "mean_score": knots, "value": values, "bins": ends - starts + 1})
    return (RecalibrationMap("pchip", knots=knots, values=values),
            RecalibrationMap("step", knots=step_knots, values=values), steps, fitted)


@validate_params({"n_bins": [Interval(int, 1, 10_000)]})
def ds_isotonic_fit(session: FederatedSession, truth: str, score: str, *, n_bins: int = 50,
                    breaks: Any = None, secure: bool | None = False) -> IsotonicFit:
    """Smooth isotonic recalibration fitted on pooled, disclosure-checked bin sums.

    Parameters
    ----------
    truth, score : str
        The 0/1 outcome and the predicted probability at every site (e.g. ``"D$y"``, ``"D$score"``).
    n_bins : int
        Number of bins of about equal pooled count (:func:`equal_count_breaks`), used when
        ``breaks`` is not given. More bins follow the pooled isotonic fit more closely; each
        bin should still hold well over q records at each site, or the sites merge it with the next.
    breaks : array, optional
        Explicit increasing breaks from ``<= 0`` to ``>= 1``; bins are ``(b[i-1], b[i]]``, the
        first closed (R's ``cut(include.lowest = TRUE)``). With one bin per distinct score value
        the fit is the pooled isotonic regression exactly (when no bin is merged).
    secure : bool or None
        The bin sums as a pooled release, checked on the pooled bins
        (:meth:`FederatedSession.aggregation`). The equal-count breaks come from per-site counts
        (``countBelowDS``) either way.

    Notes
    -----
    Huang (2020) §4.5-4.6 finds the steps by an active-set method on securely sorted records; here
    the sites release only bin sums that pass the q-rule (the same sums as the Hosmer-Lemeshow
    table), PAVA runs at the analyst, and the PCHIP through one knot per step (mean score, share
    of events) is the smooth isotonic map (Algorithm 4.1).

    References
    ----------
    Huang's dissertation (2020), eqs. (3.9), (4.2), (4.5) and Algorithm 4.1; Jiang, Osl, Kim,
    Ohno-Machado (2011), "Smooth isotonic regression".
    """
    if breaks is None:
        edges = equal_count_breaks(session, score, n_bins)
    else:
        edges = np.asarray(breaks, dtype=float)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError("breaks must be at least two strictly increasing numbers")
        if edges[0] > 0 or edges[-1] < 1 or np.any((edges[1:-1] < 0) | (edges[1:-1] >= 1)):
            raise ValueError("breaks must cover [0, 1] (first break <= 0, last >= 1, inner ones in [0, 1))")
    b = session.aggregation(secure).bins("groupSumsDS", edges, Ref(truth), Ref(score), edges)
    bins = pd.DataFrame({"lower": b.edges[:-1], "upper": b.edges[1:], "n": b.n.astype(int), "sum_p": b.sum_p,
                         "sum_y": b.sum_y})
    used = bins["n"].to_numpy() > 0
    pchip, step, steps, fitted = binned_pava(bins["n"][used], bins["sum_p"][used], bins["sum_y"][used],
                                             bins["upper"][used])
    with np.errstate(invalid="ignore", divide="ignore"):
        bins = bins.assign(mean_score=bins.sum_p / bins.n, mean_outcome=bins.sum_y / bins.n)
    bins["fitted"] = np.nan
    bins.loc[used, "fitted"] = fitted
    return IsotonicFit(pchip, step, bins, steps, edges.size - len(bins) - 1, int(bins["n"].sum()))


# --- applying and evaluating ----------------------------------------------------------------


def ds_apply_recalibration(session: FederatedSession, score: str, recalibration: RecalibrationMap | PlattFit |
                           IsotonicFit, into: str) -> str:
    """Assign ``into`` at every site: the recalibrated ``score`` (registry ``recalibrateDS``).
    Only the map's numbers travel; each site checks them before use. Returns ``into``."""
    m = recalibration if isinstance(recalibration, RecalibrationMap) else recalibration.map
    session.assign(into, m.call(score))
    return into


@result
class CalibrationMeasures(Results):
    """The calibration measures of one score, all from the existing ds_* estimators (Schalk et al. 2024;
    Huang 2020; Wu et al. 2012).

    References
    ----------
    Schalk et al. (2024) eq. (5) (Brier); Huang's dissertation (2020), §3.5 and eq. (3.6); Hosmer & Lemeshow
    (1980); Cox (1958).
    """

    _title: ClassVar[str] = "Calibration measures"

    brier: float = stat("Brier score", brief=".4g")
    spiegelhalter_z: float = stat("Spiegelhalter z")
    hl_c: float = stat("H-L C", brief=".4g")
    hl_c_pvalue: float = stat("H-L C p-value", ".4g")
    hl_h: float = stat("H-L H", brief=".4g")
    hl_h_pvalue: float = stat("H-L H p-value", ".4g")
    ece: float = stat("ECE", brief=".4g")
    mce: float = stat("MCE")
    intercept: float = stat("Calibration intercept")
    slope: float = stat("Calibration slope", brief=".4g")
    citl: float = stat("Calibration-in-the-large")
    n: int = stat("n", brief="")
    complete: bool = stat("H-L groups complete")  # every group exact and as requested (none merged by the gate)


MEASURES = ("brier", "spiegelhalter_z", "hl_c", "hl_c_pvalue", "hl_h", "hl_h_pvalue", "ece", "mce",
            "intercept", "slope", "citl")


@validate_params({"n_groups": N_GROUPS})
def ds_calibration_measures(session: FederatedSession, truth: str, score: str, *, n_groups: int = 10,
                            secure: bool | None = None) -> CalibrationMeasures:
    """Brier and Spiegelhalter's z (``ds_brier``), Hosmer-Lemeshow C and H (``ds_hosmer_lemeshow``),
    ECE/MCE over the C groups (Huang 2020, eq. 3.6) and calibration intercept, slope and CITL
    (``ds_logistic_calibration``). ``secure=None`` (the default, as ``validate``) releases them
    pooled when every site offers it: the sites then find the deciles among themselves, exact
    whatever cuts the score column released before (a recalibration's bins among them).
    ``n_groups``: the Hosmer-Lemeshow groups.

    References
    ----------
    Schalk et al. (2024) eq. (5); Huang's dissertation (2020), §3.5 and eq. (3.6); Hosmer & Lemeshow (1980).
    """
    agg, b = first_release(session, secure, lambda agg: ds_brier(session, truth, score, secure=agg.pooled))
    pooled = agg.pooled
    c = ds_hosmer_lemeshow(session, truth, score, n_groups=n_groups, kind="C", secure=pooled)
    h = ds_hosmer_lemeshow(session, truth, score, n_groups=n_groups, kind="H", secure=pooled)
    e = calibration_errors(c)
    lc = ds_logistic_calibration(session, truth, score, n_complete=b.n, secure=pooled)
    return CalibrationMeasures(b.brier, b.spiegelhalter_z, c.statistic, c.pvalue, h.statistic, h.pvalue, e.ece,
                               e.mce, lc.intercept, lc.slope, lc.citl, b.n, c.complete and h.complete)


@result
class Recalibration(Results):
    """A recalibration fitted, applied at the sites (as ``symbol``) and evaluated before and after;
    ``to_frame`` has one row per measure: before, after, and after - before.

    The measures after are computed on the records the map was fitted on (in-sample, so
    optimistic); to validate on other records, apply ``fit`` to another score with
    :func:`ds_apply_recalibration` and call :func:`ds_calibration_measures`.

    References
    ----------
    Huang's dissertation (2020), chapter 4 and §3.6.1-3.6.2.
    """

    method: str = stat("Method", brief="")  # "logistic" or "isotonic"
    fit: PlattFit | IsotonicFit = stat()
    map: RecalibrationMap = stat()  # the map applied at the sites (for isotonic: the PCHIP or the step function)
    symbol: str = stat("Applied at the sites as", brief="")
    before: CalibrationMeasures = stat()
    after: CalibrationMeasures = stat()

    @property
    def _title(self) -> str:  # type: ignore[override]
        return f"Federated {self.method} recalibration (Huang 2020, ch. 4), in-sample"

    @derived("H-L C before -> after", brief="", export=False)
    def hl_c_change(self) -> str:
        return f"{self.before.hl_c:.4g} -> {self.after.hl_c:.4g}"

    @derived("ECE before -> after", brief="", export=False)
    def ece_change(self) -> str:
        return f"{self.before.ece:.4g} -> {self.after.ece:.4g}"

    def _table(self) -> pd.DataFrame:
        b, a = self.before.to_dict(), self.after.to_dict()
        return pd.DataFrame({"before": [b[m] for m in MEASURES], "after": [a[m] for m in MEASURES]},
                            index=pd.Index(MEASURES, name="measure")).assign(change=lambda f: f.after - f.before)

    def plot(self, ax: Any = None) -> Any:
        """The map applied at the sites, labelled with the H-L C and ECE before and after. Returns the Axes."""
        label = (f"{self.method}: H-L C {self.before.hl_c:.3g} -> {self.after.hl_c:.3g}, "
                 f"ECE {self.before.ece:.3g} -> {self.after.ece:.3g}")
        return self.map.plot(ax, label=label)


@validate_params({"method": [Options({"logistic", "isotonic"})], "n_bins": [Interval(int, 1, 10_000)],
                  "n_groups": N_GROUPS})
def ds_recalibrate(session: FederatedSession, truth: str, score: str, *, method: str = "isotonic",
                   into: str = "p.recal", n_bins: int = 50, breaks: Any = None, smooth: bool = True,
                   n_groups: int = 10, secure: bool | None = None) -> Recalibration:
    """Fit a recalibration (``"logistic"``: Platt, Huang 2020, §3.6.1; ``"isotonic"``: smooth isotonic
    regression, §4.3-4.6), apply it at every site as the new vector ``into`` and compare the
    calibration measures of ``score`` and ``into``. ``smooth=False`` applies the isotonic step
    function instead of its PCHIP smoothing; ``n_groups``: the Hosmer-Lemeshow groups;
    ``secure``: how every release is checked (:meth:`FederatedSession.aggregation`; ``None``, the
    default: pooled where every site offers it).

    Raises
    ------
    FederatedCallError
        Before anything is fitted, naming every site whose rules do not enable ``recalibrateDS``
        (rule ``functions.enabled``): the fit's releases (and budget) would be spent for a map no
        site could apply.

    References
    ----------
    Huang's dissertation (2020), chapter 4 (Algorithm 4.1) and §3.6.1.
    """
    session.require_enabled("recalibrateDS", before="ds_recalibrate")

    def fit_map(agg: Aggregation) -> PlattFit | IsotonicFit:
        if method == "logistic":
            return ds_platt_fit(session, truth, score, secure=agg.pooled)
        return ds_isotonic_fit(session, truth, score, n_bins=n_bins, breaks=breaks, secure=agg.pooled)

    agg, fit = first_release(session, secure, fit_map)
    m = fit.step if isinstance(fit, IsotonicFit) and not smooth else fit.map
    before = ds_calibration_measures(session, truth, score, n_groups=n_groups, secure=agg.pooled)
    ds_apply_recalibration(session, score, m, into)
    after = ds_calibration_measures(session, truth, into, n_groups=n_groups, secure=agg.pooled)
    return Recalibration(method, fit, m, into, before, after)
