"""Calibration across sites: Brier score, Spiegelhalter's z, the calibration curve,
Hosmer-Lemeshow C and H, ECE and MCE, calibration intercept, slope and in-the-large
(Schalk et al. 2024; Huang 2020; Wu et al. 2012). What leaves the sites are sums over groups of at least q records: per
site, or pooled over the sites under secure aggregation (the sites' release gate checks them).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import special, stats

from dsfed_client.aggregation import BinnedSums, RiskGroups
from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.calls import Call, Ref
from dsfed_client.params import ALPHA, N_BINS, N_GROUPS, Interval, Options, validate_params
from dsfed_client.results import ConfInt, Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession
from dsfed_core.calibration import calibration_errors as errors_of_groups, hosmer_lemeshow


@result
class Brier(Results):
    """Brier score and Spiegelhalter's z-test, from the sites' summed squared errors.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eq. (5) (the Brier score); Huang's dissertation (2020), §3.5.1 (Spiegelhalter's z, as
    ``rms::val.prob``'s S:z); Spiegelhalter (1986).
    """

    _title: ClassVar[str] = "Brier score and Spiegelhalter's z"

    brier: float = stat("Brier score", brief=".4f")
    spiegelhalter_z: float = stat("Spiegelhalter z", brief=".3f")
    n: int = stat("n", brief="")
    mean_outcome: float = stat("Observed event rate")
    mean_prediction: float = stat("Mean prediction")

    @derived("Spiegelhalter p", ".4g", brief=".3g")
    def spiegelhalter_p(self) -> float:
        return float(2 * stats.norm.sf(abs(self.spiegelhalter_z)))

    @derived("Observed - expected")
    def citl_difference(self) -> float:
        """Calibration-in-the-large as observed minus expected event rate."""
        return self.mean_outcome - self.mean_prediction

    def plot(self, ax: Any = None) -> Any:
        """Observed event rate beside the mean prediction (calibration-in-the-large), Brier in the title."""
        from dsfed_client.plots import new_axes  # noqa: PLC0415

        ax = new_axes(ax, figsize=(3.5, 3.5))
        ax.bar([0, 1], [self.mean_outcome, self.mean_prediction], color=["tab:blue", "tab:orange"],
               tick_label=["observed", "predicted"], gid="brier-bars")
        ax.set_ylabel("event rate")
        ax.set_title(f"Brier {self.brier:.4f}; Spiegelhalter z {self.spiegelhalter_z:.2f}")
        return ax


def ds_brier(session: FederatedSession, truth: str, score: str, *, secure: bool | None = False) -> Brier:
    """:math:`BS = n^{-1}\\sum_k \\sum_i (y_i - p_i)^2`;
    :math:`z = \\sum (y-p)(1-2p) / \\sqrt{\\sum (1-2p)^2 p(1-p)}` (``rms::val.prob``'s S:z).
    ``secure``: a pooled release (no site's own sums are seen; the sites check the pooled counts).

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", eq. (5); Spiegelhalter (1986); Huang's dissertation (2020), §3.5.1.
    """
    total = session.aggregation(secure).sum("brierDS", Ref(truth), Ref(score))
    n = int(total["n"])
    return Brier(
        brier=total["sum_sq"] / n,
        spiegelhalter_z=float(total["spiegelhalter_num"] / np.sqrt(total["spiegelhalter_var"])),
        n=n, mean_outcome=total["sum_y"] / n, mean_prediction=total["sum_p"] / n,
    )


@result
class CalibrationCurve(Results):
    """Pooled calibration curve over equal-width bins (``strategy="uniform"``) or quantile groups
    of the scores (``"quantile"``); ``to_frame`` has one row per released bin (``lower``,
    ``upper``, ``n``, ``mean_prediction``, ``mean_outcome``).

    Each point is :math:`(\\sum_k c_{l,pf}^{(k)} / \\sum_k |I_l^{(k)}|,\\ \\sum_k c_{l,tf}^{(k)} / \\sum_k |I_l^{(k)}|)`
    over every site. A bin holding fewer than q records -- pooled over the sites under secure
    aggregation, at one site otherwise -- is merged with the next by the sites' release gate, never
    dropped: ``bins`` says how the released cells were checked and whether they were coarsened.

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Calibration curve" (steps 1-4).
    """

    _title: ClassVar[str] = "Calibration curve"

    edges: np.ndarray = hidden()
    n: np.ndarray = hidden()
    mean_prediction: np.ndarray = hidden()  # NaN for an empty bin
    mean_outcome: np.ndarray = hidden()
    bins: BinnedSums = hidden()
    strategy: str = stat("Bins", brief="", default="uniform")
    exact_grouping: bool = stat("Quantile breaks exact", default=True)  # "quantile": split as R's type-7 breaks

    @derived("Bins released", brief="")
    def n_bins(self) -> int:
        return int(self.n.size)

    @derived("n", brief="")
    def n_total(self) -> int:
        return int(self.n.sum())

    @derived("Checked pooled over the sites", brief="")
    def pooled(self) -> bool:
        return self.bins.pooled

    @derived("Coarsened", brief="")
    def coarsened(self) -> bool:
        return self.bins.was_coarsened

    @derived()
    def requested_edges(self) -> np.ndarray:
        return self.bins.requested

    @derived()
    def not_released(self) -> dict[str, list[float]]:
        """Per site (or ``"pooled"``) the requested edges the release gate did not release."""
        return self.bins.coarsened

    @property
    def per_site(self) -> dict[str, pd.DataFrame]:
        return self.bins.per_site

    def _table(self) -> pd.DataFrame:
        return pd.DataFrame({"lower": self.edges[:-1], "upper": self.edges[1:], "n": self.n,
                             "mean_prediction": self.mean_prediction, "mean_outcome": self.mean_outcome})

    def _notes(self) -> tuple[str, ...]:
        inexact = () if self.exact_grouping else (
            "quantile breaks inexact: the per-site count search left some undecided",)
        return (self.bins.note(), *self._moved_onto_earlier_cuts(), *inexact)

    def _moved_onto_earlier_cuts(self) -> tuple[str, ...]:
        """Why a curve's edges sit a hair from where they were asked: the gate released an edge at, or a
        few records from, a cut released before on the score (an earlier histogram's break, by any
        analyst) at that cut, rather than merge its cell, so the curve keeps its cells."""
        if not any(self.bins.moved.values()):
            return ()
        return ("edges at, or a few records from, a cut released before on the score (by any analyst, e.g. a "
                "histogram's break: R's hist shifts its breaks by 1e-7 of a bin and closes its cells on the right) "
                "are released at that cut, so the curve keeps its cells; records tied at such an edge fall on the "
                "earlier cut's side",)

    def plot(self, ax: Any = None, *, per_site: bool = True) -> Any:
        """Pooled points (sized by n), per-site curves (per-site release only), the diagonal, and a
        histogram of predictions below (from the bin counts)."""
        from dsfed_client.plots import plot_calibration  # noqa: PLC0415

        dropped = sorted({v for values in self.not_released.values() for v in values})
        return plot_calibration(self.edges, self.n, self.mean_prediction, self.mean_outcome,
                                per_site=self.per_site if per_site else None, ax=ax, not_released=dropped)


@validate_params({"n_bins": N_BINS, "strategy": [Options({"uniform", "quantile"})]})
def ds_calibration_curve(session: FederatedSession, truth: str, score: str, *, n_bins: int = 10,
                         strategy: str = "uniform", secure: bool | None = False) -> CalibrationCurve:
    r"""Each point the pooled means of predictions and outcomes in a bin (Schalk et al. 2024, steps 1-4).

    ``strategy="uniform"``: ``n_bins`` equal-width bins on [0, 1], ``[a, b)`` (0 in the first, 1
    in the last), as Schalk et al. (2024). ``strategy="quantile"``: the bins are the
    ``n_bins`` groups of R's type-7 quantiles of the pooled scores, ``(a, b]`` with the first
    closed -- scikit-learn's ``calibration_curve(strategy="quantile")``, whose edges are
    ``np.percentile`` (type 7) and whose bins are ``np.searchsorted`` on the inner edges -- with
    the empty bins of tied edges left out. A released break splits the records as R's quantile
    does (it may lie elsewhere in the same gap between two scores). The breaks are data-dependent,
    so the sites derive them:
    Hosmer-Lemeshow C's groups (:meth:`~dsfed_client.aggregation.Aggregation.risk_groups`: found
    by the sites on pooled counts under secure aggregation, exactly; per site, a count-only search
    that may leave a break undecided, ``exact_grouping``).

    ``secure``: a pooled release (secure aggregation with pooled thresholds): the sites check the
    pooled bins, so a site's own share of a bin may hold fewer than q records and nothing is merged
    unless the pooled bin is small; per-site curves are then not available. Either way a bin below
    q is merged with the next by the sites' release gate (the result says so).

    References
    ----------
    Schalk, Rehms et al. (2024), "Distributed non-disclosive validation of predictive models by a modified
    ROC-GLM", "Calibration curve" (steps 1-4); scikit-learn's ``sklearn.calibration.calibration_curve``;
    Huang's dissertation (2020), §4.4 (federated quantile groups).
    """
    agg = session.aggregation(secure)
    exact = True
    if strategy == "quantile":
        groups = agg.risk_groups(truth, score, n_bins)
        if groups.bins is None:
            raise ValueError(f"the sites released the quantile groups' statistics but not their bins "
                             f"({groups.withheld}); ask per site (secure=False), or use strategy='uniform'")
        b, exact = groups.bins, groups.exact
    else:
        b = agg.bins("calibrationBinsDS", np.arange(n_bins + 1) / n_bins, Ref(truth), Ref(score), n_bins,
                     again=lambda edges: ("thresholdBinsDS", (Ref(truth), Ref(score), edges[1:-1].tolist())))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(b.n > 0, b.sum_p / b.n, np.nan)
        mean_y = np.where(b.n > 0, b.sum_y / b.n, np.nan)
    return CalibrationCurve(b.edges, b.n.astype(int), mean_p, mean_y, b, strategy, exact)


@result
class HosmerLemeshow(Results):
    """Hosmer-Lemeshow statistic with its group table (``to_frame``); unpacks as (statistic, pvalue).

    ``complete``: the groups are the requested ones (R's deciles for C, exactly; the fixed bins for
    H) and no group was merged by the sites' release gate (``cells`` says how the groups were
    checked: pooled over the sites, or per site).

    References
    ----------
    Hosmer & Lemeshow (1980), the C and H statistics (R's ``ResourceSelection::hoslem.test``);
    Wu et al. (2012), "Preserving institutional privacy in distributed binary logistic regression"
    (distributed H-L from summed group counts); Huang (2020) §3.5.3.
    """

    kind: str = stat(brief="")  # "C" (deciles of risk) or "H" (fixed-width bins)
    statistic: float = stat("Statistic", brief=".4f")
    df: int = stat("df", brief="")
    pvalue: float = stat("p-value", ".4g", brief=".4g")
    table: pd.DataFrame = hidden()
    exact_grouping: bool = stat(default=True)
    uncertain_records: int = stat(default=0)
    pooled: bool = stat(default=False)
    coarsened: bool = stat(default=False)
    cells: str = stat(default="")
    group_sizes: tuple[int, ...] = stat(default=())  # records per group (also when the table is withheld)
    errors: tuple[float, float] | None = hidden(default=None)  # ECE and MCE as the sites computed them
    table_withheld: str = stat(default="")  # why the sites released the statistics but not the group table

    @property
    def _title(self) -> str:  # type: ignore[override]
        return "Hosmer-Lemeshow " + ("C (deciles of risk)" if self.kind == "C" else "H (fixed-width bins)")

    @derived("Groups", brief="")
    def n_groups(self) -> int:
        return len(self.group_sizes)

    @derived("Complete", brief="")
    def complete(self) -> bool:
        return self.exact_grouping and not self.coarsened

    @derived("Cells", export=False)
    def cells_note(self) -> str:
        return self.note()

    def note(self) -> str:
        """How the groups were checked, and what was withheld or is uncertain."""
        parts = [self.cells] if self.cells else []
        if self.table_withheld:
            parts.append(f"group table withheld: {self.table_withheld}")
        if not self.exact_grouping and self.uncertain_records:
            parts.append(f"group edges uncertain: at most {self.uncertain_records} records may lie in a neighbouring "
                         "group (counts the sites' release gate withheld)")
        return "; ".join(parts)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter((self.statistic, self.pvalue))

    def _table(self) -> pd.DataFrame:
        return self.table

    def group_labels(self) -> list[str]:
        """Each group's interval: ``(a, b]`` as R's ``cut`` (the first group's lower end closed too), ``[a, b)``
        where the sites moved an edge onto a threshold released before (the table's ``upper_closed``)."""
        closed = (self.table["upper_closed"].tolist() if "upper_closed" in self.table
                  else [True] * len(self.table))
        opens = ["[" if k == 0 or not closed[k - 1] else "(" for k in range(len(closed))]
        return [f"{o}{lo:.3g}, {hi:.3g}{']' if c else ')'}"
                for o, lo, hi, c in zip(opens, self.table.lower, self.table.upper, closed)]

    def plot(self, ax: Any = None) -> Any:
        """Observed against expected events per group, as bars (none where the sites withheld the
        group table); the title says "partial" when the groups are not the requested ones
        (merged or withheld by the sites, or inexact edges). Returns the Axes."""
        from dsfed_client.plots import plot_observed_expected  # noqa: PLC0415

        return plot_observed_expected(
            self.group_labels(), self.table.observed_1.to_numpy(), self.table.expected_1.to_numpy(),
            title=f"{'' if self.complete else 'partial '}Hosmer-Lemeshow {self.kind} = {self.statistic:.2f}, "
                  f"df {self.df}, p = {self.pvalue:.3g}", ax=ax)


_EMPTY_TABLE = pd.DataFrame({name: pd.Series(dtype=float) for name in
                             ("lower", "upper", "n", "observed_1", "expected_1", "observed_0", "expected_0")})


def group_table(b: BinnedSums, upper_closed: tuple[bool, ...] = ()) -> pd.DataFrame:
    """Observed and expected events and non-events per non-empty group; with ``upper_closed`` (per group, the
    sites' side of its upper edge), that too."""
    table = pd.DataFrame({"lower": b.edges[:-1], "upper": b.edges[1:], "n": b.n.astype(int),
                          "observed_1": b.sum_y, "expected_1": b.sum_p, "observed_0": b.n - b.sum_y,
                          "expected_0": b.n - b.sum_p})
    if upper_closed and len(upper_closed) == len(table):
        table["upper_closed"] = list(upper_closed)
    return table[table["n"] > 0].reset_index(drop=True)


def hl_statistic(table: pd.DataFrame) -> float:
    """Hosmer-Lemeshow C of a group table (:func:`dsfed_core.calibration.hosmer_lemeshow`).

    Two groups of 10: 3 events observed, 2 expected; 6 observed, 7 expected. By hand,
    :math:`1/2 + 1/8 + 1/7 + 1/3 = 1.101190`:

    >>> t = pd.DataFrame({"n": [10, 10], "observed_1": [3.0, 6.0], "expected_1": [2.0, 7.0]})
    >>> round(hl_statistic(t), 6)
    1.10119
    """
    return hosmer_lemeshow(table.n, table.observed_1, table.expected_1)


@validate_params({"n_groups": N_GROUPS, "kind": [Options({"C", "H"})]})
def ds_hosmer_lemeshow(session: FederatedSession, truth: str, score: str, *, n_groups: int = 10,
                       kind: str = "C", secure: bool | None = False) -> HosmerLemeshow:
    """Hosmer-Lemeshow C (``n_groups`` groups by quantiles of risk, as ``hoslem.test``) or H
    (``n_groups`` equal-width bins).

    ``secure`` (secure aggregation with pooled thresholds): C's groups are found by the sites on
    pooled counts (``decileGroupsDS``: R's type-7 quantile groups exactly) and H's group sums are a
    pooled release; the sites check the pooled groups, which hold at least q records however the
    records are spread over the sites.

    Otherwise C's groups come from :func:`quantile_groups` on per-site counts (only counts the
    sites' release gate passes cross the wire): where they leave a break undecided,
    ``exact_grouping`` is False and ``uncertain_records`` bounds how many records may sit in the
    neighbouring group. Either way a group holding fewer than q records is merged with the next by
    the sites (the result says so).

    .. math:: C = \\sum_g \\frac{(O_{1g}-E_{1g})^2}{E_{1g}} + \\frac{(O_{0g}-E_{0g})^2}{E_{0g}},
              \\qquad df = G - 2

    References
    ----------
    Hosmer & Lemeshow (1980); Wu et al. (2012), "Preserving institutional privacy in distributed binary
    logistic regression" (distributed H-L from summed group counts);
    Huang's dissertation (2020), §3.5.3 and §4.4 (federated quantile groups).
    """
    agg = session.aggregation(secure)
    if kind == "C":
        groups = agg.risk_groups(truth, score, n_groups)
    else:
        breaks = np.arange(n_groups + 1) / n_groups  # k / g exactly, as the calibration bins' edges
        b = agg.bins("groupSumsDS", breaks, Ref(truth), Ref(score), [float(v) for v in breaks])
        groups = RiskGroups(b, True, 0, b.note(), b.was_coarsened)
    table = _EMPTY_TABLE if groups.bins is None else group_table(groups.bins, groups.upper_closed)
    statistic = hl_statistic(table) if groups.statistic is None else groups.statistic
    df = len(table) - 2 if groups.df is None else groups.df
    sizes = groups.sizes or tuple(int(v) for v in table["n"])
    return HosmerLemeshow(kind, statistic, df, float(stats.chi2.sf(statistic, df)), table, groups.exact,
                          groups.uncertain_records, agg.pooled, groups.coarsened, groups.cells, sizes, groups.errors,
                          groups.withheld)


@result
class CalibrationErrors(Results):
    """ECE and MCE over equal-count groups; ``to_frame`` has one row per group (``lower``,
    ``upper``, ``n``, ``observed_rate``, ``expected_rate``, ``abs_gap``).

    References
    ----------
    Huang's dissertation (2020), eq. (3.6) (ECE, MCE) and §4.8 (federated ECE/MCE); Naeini et al.
    (2015).
    """

    _title: ClassVar[str] = "Expected and maximum calibration error"

    ece: float = stat("ECE", brief=".4f")
    mce: float = stat("MCE", brief=".4f")
    table: pd.DataFrame = hidden()
    exact_grouping: bool = stat("Exact grouping")
    coarsened: bool = stat("Groups merged by the sites", default=False)

    @derived("Groups", brief="")
    def n_groups(self) -> int:
        return len(self.table)

    @derived("Complete")
    def complete(self) -> bool:
        return self.exact_grouping and not self.coarsened

    def _table(self) -> pd.DataFrame:
        t = self.table
        return pd.DataFrame({"lower": t.lower, "upper": t.upper, "n": t.n, "observed_rate": t.observed_1 / t.n,
                             "expected_rate": t.expected_1 / t.n,
                             "abs_gap": (t.observed_1 - t.expected_1).abs() / t.n})

    def plot(self, ax: Any = None) -> Any:
        """The absolute gap per group as bars, ECE as a line; returns the Axes."""
        from dsfed_client.plots import new_axes  # noqa: PLC0415

        frame = self.to_frame()
        ax = new_axes(ax, figsize=(6.0, 3.5))
        x = np.arange(len(frame))
        ax.bar(x, frame.abs_gap, color="tab:purple", gid="ece-gaps")
        ax.axhline(self.ece, color="black", linestyle="--", linewidth=1, label=f"ECE {self.ece:.4f}")
        ax.set_xticks(x, [f"({lo:.3g}, {hi:.3g}]" for lo, hi in zip(frame.lower, frame.upper)], rotation=45,
                      ha="right", fontsize=7)
        ax.set_ylabel("|observed - expected| rate")
        ax.set_title(f"Calibration error per group (MCE {self.mce:.4f})")
        ax.legend(fontsize=8)
        return ax


@validate_params({"n_groups": N_GROUPS})
def ds_ece_mce(session: FederatedSession, truth: str, score: str, *, n_groups: int = 10,
               secure: bool | None = False) -> CalibrationErrors:
    """:math:`ECE = \\sum_g (n_g/n)\\,|\\bar o_g - \\bar e_g|`, :math:`MCE = \\max_g |\\bar o_g - \\bar e_g|`,
    groups by the type-7 quantiles of the predictions (as Hosmer-Lemeshow C).

    References
    ----------
    Huang's dissertation (2020), eq. (3.6) and §4.8; Naeini, Cooper, Hauskrecht (2015).
    """
    return calibration_errors(ds_hosmer_lemeshow(session, truth, score, n_groups=n_groups, kind="C", secure=secure))


def calibration_errors(hl_c: HosmerLemeshow) -> CalibrationErrors:
    """ECE and MCE from the equal-count groups of a Hosmer-Lemeshow C result (no new query): from its
    table, or as the sites computed them where they withheld the table."""
    if hl_c.errors is not None:
        return CalibrationErrors(*hl_c.errors, hl_c.table, hl_c.exact_grouping, hl_c.coarsened)
    table = hl_c.table
    return CalibrationErrors(*errors_of_groups(table.n, table.observed_1, table.expected_1), table,
                             hl_c.exact_grouping, hl_c.coarsened)


@result
class LogisticCalibration(Results):
    """Calibration intercept and slope (logistic recalibration on logit(p)) and calibration-in-the-large,
    with Wald intervals at ``alpha`` (``intercept_ci``, ``slope_ci``, ``citl_ci``); ``to_frame`` has
    one row each, as the GLM tables.

    References
    ----------
    Cox (1958); Huang's dissertation (2020), §3.5.2 and §3.6.1 (calibration intercept and slope,
    as ``rms::val.prob``); the fits by the distributed GLM of Schalk et al. (2024) and Wu et al. (2012),
    "Preserving institutional privacy in distributed binary logistic regression".
    """

    _title: ClassVar[str] = "Logistic calibration: y ~ logit(p); y ~ 1 + offset(logit(p))"

    intercept: float = stat("Calibration intercept", brief=".4f")
    slope: float = stat("Calibration slope", brief=".4f")
    citl: float = stat("Calibration-in-the-large", brief=".4f")  # intercept of y ~ 1 with offset logit(p)
    fit: GLMResults = hidden()
    citl_fit: GLMResults = hidden()
    n_excluded: int = stat("Records with p = 0 or 1 left out")  # as rms::val.prob does
    alpha: float = stat(default=0.05)

    @derived("n used", brief="")
    def n(self) -> int:
        return self.fit.nobs

    @derived("{level} CI of the intercept")
    def intercept_ci(self) -> ConfInt:
        return ConfInt(*self.fit.conf_int(self.alpha).iloc[0])

    @derived("{level} CI of the slope")
    def slope_ci(self) -> ConfInt:
        return ConfInt(*self.fit.conf_int(self.alpha).iloc[1])

    @derived("{level} CI of the calibration-in-the-large")
    def citl_ci(self) -> ConfInt:
        return ConfInt(*self.citl_fit.conf_int(self.alpha).iloc[0])

    def _table(self) -> pd.DataFrame:
        frame = pd.concat([self.fit.to_frame(self.alpha), self.citl_fit.to_frame(self.alpha).iloc[[0]]])
        frame.index = pd.Index(["intercept", "slope", "citl"], name="term")
        frame.attrs["alpha"] = self.alpha
        return frame

    def plot(self, ax: Any = None) -> Any:
        """The recalibration curve :math:`p \\mapsto \\mathrm{expit}(a + b\\,\\mathrm{logit}(p))` against the
        diagonal."""
        from dsfed_client.plots import new_axes  # noqa: PLC0415

        ax = new_axes(ax, figsize=(4.5, 4.5))
        p = np.linspace(0.001, 0.999, 300)
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="ideal")
        ax.plot(p, special.expit(self.intercept + self.slope * special.logit(p)), color="tab:green", linewidth=2,
                label=f"intercept {self.intercept:.3f}, slope {self.slope:.3f}", gid="logistic-calibration")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_aspect("equal")
        ax.set_xlabel("predicted probability")
        ax.set_ylabel("recalibrated probability")
        ax.set_title("Logistic recalibration")
        ax.legend(loc="upper left", fontsize=8)
        return ax


@validate_params({"n_complete": [Interval(int, 0, None), None], "alpha": ALPHA})
def ds_logistic_calibration(session: FederatedSession, truth: str, score: str, *,
                            n_complete: int | None = None, alpha: float = 0.05,
                            secure: bool | None = False) -> LogisticCalibration:
    """``glm(y ~ logit(p))`` by the distributed GLM (``rms::val.prob``'s Intercept and Slope) and
    ``glm(y ~ 1, offset = logit(p))`` for calibration-in-the-large; ``secure``: both fits checked
    pooled rather than per site (:func:`~dsfed_client.analyses.glm.ds_glm`; either way the sites
    derive the coefficients). ``alpha``: the level of the Wald intervals the result reports.

    References
    ----------
    Cox (1958), "Two further applications of a model for binary regression"; the dissertation of
    Huang (2020), §3.5.2 and §3.6.1; R's ``rms::val.prob`` (Intercept, Slope).
    """
    with session.temporary("calib") as name:
        frame = session.assign(name, Call("calibrationFrameDS", Ref(truth), Ref(score)))
        fit = ds_glm(session, "y ~ lp", frame, secure=secure, null_model=False)
        citl = ds_glm(session, "y ~ 1", frame, offset="lp", secure=secure, null_model=False)
    n_all = n_complete if n_complete is not None else ds_brier(session, truth, score, secure=secure).n
    return LogisticCalibration(float(fit.params.iloc[0]), float(fit.params.iloc[1]), float(citl.params.iloc[0]),
                               fit, citl,
                               n_all - fit.nobs, alpha)
