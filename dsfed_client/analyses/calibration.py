"""Calibration across sites: Brier score, Spiegelhalter's z, the calibration curve,
Hosmer-Lemeshow C and H, ECE and MCE, calibration intercept, slope and in-the-large
(seeds 000, 001, 002). Every site returns sums over groups of at least q records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from dsfed_client.analyses.discrimination import _text_table
from dsfed_client.analyses.glm import GLMResults, ds_glm
from dsfed_client.analyses.quantiles import QuantileGroups, quantile_groups
from dsfed_client.calls import Call, Ref
from dsfed_client.session import FederatedSession

CALIBRATION_FRAME = "dsfed.calib"


@dataclass(frozen=True)
class Brier:
    """Brier score (seed 000 eq. 5) and Spiegelhalter's z-test (seed 001 §3.5.1)."""

    brier: float
    spiegelhalter_z: float
    n: int
    mean_outcome: float
    mean_prediction: float

    @property
    def spiegelhalter_p(self) -> float:
        return float(2 * stats.norm.sf(abs(self.spiegelhalter_z)))

    @property
    def citl_difference(self) -> float:
        """Calibration-in-the-large as observed minus expected event rate."""
        return self.mean_outcome - self.mean_prediction

    def to_dict(self) -> dict[str, Any]:
        return {"brier": self.brier, "spiegelhalter_z": self.spiegelhalter_z, "spiegelhalter_p": self.spiegelhalter_p,
                "n": self.n, "mean_outcome": self.mean_outcome, "mean_prediction": self.mean_prediction,
                "citl_difference": self.citl_difference}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"brier": self.brier, "spiegelhalter_z": self.spiegelhalter_z,
                              "spiegelhalter_p": self.spiegelhalter_p, "n": self.n, "mean_outcome": self.mean_outcome,
                              "mean_prediction": self.mean_prediction, "citl_difference": self.citl_difference}],
                            index=["Brier"])

    def summary(self) -> str:
        return _text_table("Brier score and Spiegelhalter's z", [
            ("Brier score", f"{self.brier:.6g}"), ("Spiegelhalter z", f"{self.spiegelhalter_z:.6g}"),
            ("Spiegelhalter p", f"{self.spiegelhalter_p:.4g}"), ("n", str(self.n)),
            ("Observed event rate", f"{self.mean_outcome:.6g}"), ("Mean prediction", f"{self.mean_prediction:.6g}"),
            ("Observed - expected", f"{self.citl_difference:.6g}"),
        ])

    def __repr__(self) -> str:
        return (f"Brier(brier={self.brier:.4f}, spiegelhalter_z={self.spiegelhalter_z:.3f}, "
                f"p={self.spiegelhalter_p:.3g}, n={self.n})")

    def plot(self, ax: Any = None) -> Any:
        """Observed event rate beside the mean prediction (calibration-in-the-large), Brier in the title."""
        from dsfed_client.plots import new_axes  # noqa: PLC0415

        ax = new_axes(ax, figsize=(3.5, 3.5))
        ax.bar([0, 1], [self.mean_outcome, self.mean_prediction], color=["tab:blue", "tab:orange"],
               tick_label=["observed", "predicted"], gid="brier-bars")
        ax.set_ylabel("event rate")
        ax.set_title(f"Brier {self.brier:.4f}; Spiegelhalter z {self.spiegelhalter_z:.2f}")
        return ax


def ds_brier(session: FederatedSession, truth: str, score: str, *, secure: bool = False) -> Brier:
    """:math:`BS = n^{-1}\\sum_k \\sum_i (y_i - p_i)^2`;
    :math:`z = \\sum (y-p)(1-2p) / \\sqrt{\\sum (1-2p)^2 p(1-p)}` (``rms::val.prob``'s S:z).
    ``secure``: the sums arrive as secure sums over sites (no site's own sums are seen)."""
    total = session.sum_fields("brierDS", Ref(truth), Ref(score), secure=secure)
    n = int(total["n"])
    return Brier(
        brier=total["sum_sq"] / n,
        spiegelhalter_z=float(total["spiegelhalter_num"] / np.sqrt(total["spiegelhalter_var"])),
        n=n, mean_outcome=total["sum_y"] / n, mean_prediction=total["sum_p"] / n,
    )


@dataclass(frozen=True)
class CalibrationCurve:
    """Pooled calibration curve over equal-width bins (seed 000, "Calibration curve").

    A bin a site suppressed (0 < n < q, or secondary suppression) is left out of
    both numerator and denominator of the pooled point; ``suppressed_sites``
    names those sites and ``suppressed_share_max`` bounds the share of the
    bin's records that were left out (the exact count would itself disclose).
    """

    edges: np.ndarray
    n: np.ndarray
    mean_prediction: np.ndarray  # NaN where no site contributed
    mean_outcome: np.ndarray
    suppressed_sites: list[list[str]]
    suppressed_share_max: np.ndarray
    suppressed_total: int
    n_total: int
    per_site: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def suppressed_share(self) -> float:
        """Share of all records left out of the pooled curve."""
        return self.suppressed_total / self.n_total if self.n_total else 0.0

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({
            "bin_lower": self.edges[:-1], "bin_upper": self.edges[1:], "n": self.n,
            "mean_prediction": self.mean_prediction, "mean_outcome": self.mean_outcome,
            "suppressed_sites": [", ".join(s) for s in self.suppressed_sites],
            "suppressed_share_max": self.suppressed_share_max,
        })

    def to_dict(self) -> dict[str, Any]:
        frame = self.to_frame()
        return {"bins": frame.replace({np.nan: None}).to_dict(orient="records"),
                "suppressed_total": self.suppressed_total, "suppressed_share": self.suppressed_share,
                "n_total": self.n_total}

    def summary(self) -> str:
        frame = self.to_frame()
        head = (f"Calibration curve: {len(self.n)} equal-width bins, n {self.n_total}; "
                f"{self.suppressed_total} records ({self.suppressed_share:.1%}) suppressed at sites\n")
        return head + frame.to_string(float_format=lambda v: f"{v:.4g}", na_rep="-") + "\n"

    def __repr__(self) -> str:
        return (f"CalibrationCurve(bins={len(self.n)}, n_total={self.n_total}, "
                f"suppressed_total={self.suppressed_total}, sites={list(self.per_site)})")

    def plot(self, ax: Any = None, *, per_site: bool = True) -> Any:
        """Pooled points (sized by n), per-site curves, bins with suppressed records circled with the
        bound on their share, the diagonal, and a histogram of predictions below (from the bin counts)."""
        from dsfed_client.plots import plot_calibration  # noqa: PLC0415

        return plot_calibration(self.edges, self.n, self.mean_prediction, self.mean_outcome,
                                suppressed_share_max=self.suppressed_share_max,
                                per_site=self.per_site if per_site else None, ax=ax)


@dataclass(frozen=True)
class _Binned:
    """Per-bin sums pooled over the sites that did not suppress the bin."""

    n: np.ndarray
    sum_p: np.ndarray
    sum_y: np.ndarray
    suppressed_sites: list[list[str]]
    suppressed_share_max: np.ndarray
    suppressed_total: int
    per_site: dict[str, pd.DataFrame]


def _binned(session: FederatedSession, secure: bool, function: str, *args: Any) -> _Binned:
    """A binned-sums function's result pooled over the sites, plainly or as a secure sum."""
    if not secure:
        return _pool_binned(session.aggregate(function, *args))
    s = session.secure_sum(function, *args)
    k = len(s.sites)
    total = int(round(s["suppressed_total"]))
    withheld = [int(round(c)) for c in s["suppressed"]]
    # only sums are seen: a bin withheld by some sites holds at most all the records they suppressed
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(np.asarray(withheld) > 0, total / (s["n"] + total), 0.0)
    return _Binned(np.asarray(s["n"]), np.asarray(s["sum_p"]), np.asarray(s["sum_y"]),
                   [[f"{c} of {k} sites"] if c else [] for c in withheld], share, total, {})


def _pool_binned(results: dict[str, dict[str, Any]]) -> _Binned:
    bins = len(next(iter(results.values()))["n"])
    n, sum_p, sum_y = np.zeros(bins), np.zeros(bins), np.zeros(bins)
    suppressed_sites: list[list[str]] = [[] for _ in range(bins)]
    totals: dict[str, int] = {}
    per_site = {}
    for site, part in results.items():
        n_k, p_k, y_k = (np.asarray(part[key], dtype=float) for key in ("n", "sum_p", "sum_y"))
        n, sum_p, sum_y = n + n_k, sum_p + p_k, sum_y + y_k
        for i, flag in enumerate(part["suppressed"]):
            if flag:
                suppressed_sites[i].append(site)
        totals[site] = int(part["suppressed_total"])
        with np.errstate(invalid="ignore", divide="ignore"):
            per_site[site] = pd.DataFrame({"n": n_k.astype(int), "mean_prediction": np.where(n_k > 0, p_k / n_k, np.nan),
                                           "mean_outcome": np.where(n_k > 0, y_k / n_k, np.nan),
                                           "suppressed": part["suppressed"]})
    # the suppressed records of bin i are at most the suppressed totals of the sites that withheld it
    bound = np.array([sum(totals[k] for k in sites) for sites in suppressed_sites], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(bound > 0, bound / (n + bound), 0.0)
    return _Binned(n, sum_p, sum_y, suppressed_sites, share, sum(totals.values()), per_site)


def ds_calibration_curve(session: FederatedSession, truth: str, score: str, *, n_bins: int = 10,
                         secure: bool = False) -> CalibrationCurve:
    r"""Equal-width bins on [0, 1] (0 in the first, 1 in the last); each pooled point is
    :math:`(\sum_k c_{l,pf}^{(k)} / \sum_k |I_l^{(k)}|,\ \sum_k c_{l,tf}^{(k)} / \sum_k |I_l^{(k)}|)`
    over the sites that did not suppress bin l (seed 000, steps 1-4).

    ``secure``: the bin sums arrive as secure sums over sites; per-site curves are then not
    available, and a withheld bin names how many sites withheld it, not which."""
    b = _binned(session, secure, "calibrationBinsDS", Ref(truth), Ref(score), n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(b.n > 0, b.sum_p / b.n, np.nan)
        mean_y = np.where(b.n > 0, b.sum_y / b.n, np.nan)
    return CalibrationCurve(np.linspace(0, 1, n_bins + 1), b.n.astype(int), mean_p, mean_y, b.suppressed_sites,
                            b.suppressed_share_max, b.suppressed_total, int(b.n.sum()) + b.suppressed_total,
                            b.per_site)


@dataclass(frozen=True)
class HosmerLemeshow:
    """Hosmer-Lemeshow statistic with its group table; unpacks as (statistic, pvalue)."""

    kind: str  # "C" (deciles of risk) or "H" (fixed-width bins)
    statistic: float
    df: int
    pvalue: float
    table: pd.DataFrame
    exact_grouping: bool = True
    uncertain_records: int = 0
    suppressed_records: int = 0  # left out by sites' small-group suppression (0: complete)

    @property
    def complete(self) -> bool:
        return self.exact_grouping and self.suppressed_records == 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter((self.statistic, self.pvalue))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "statistic": self.statistic, "df": self.df, "pvalue": self.pvalue,
                "exact_grouping": self.exact_grouping, "uncertain_records": self.uncertain_records,
                "suppressed_records": self.suppressed_records, "complete": self.complete,
                "groups": self.table.to_dict(orient="records")}

    def to_frame(self) -> pd.DataFrame:
        """The group table: bounds, n, observed and expected events and non-events, suppression."""
        return self.table.copy()

    def summary(self) -> str:
        name = "C (deciles of risk)" if self.kind == "C" else "H (fixed-width bins)"
        rows = [("Statistic", f"{self.statistic:.6g}"), ("df", str(self.df)), ("p-value", f"{self.pvalue:.4g}"),
                ("Groups", str(len(self.table))), ("Complete", "yes" if self.complete else "NO (partial)")]
        if self.suppressed_records:
            rows.append(("Records suppressed at sites", str(self.suppressed_records)))
        if not self.exact_grouping:
            rows.append(("Records with uncertain group", f"<= {self.uncertain_records}"))
        table = self.table[["lower", "upper", "n", "observed_1", "expected_1", "observed_0", "expected_0"]]
        return (_text_table(f"Hosmer-Lemeshow {name}", rows)
                + table.to_string(float_format=lambda v: f"{v:.4g}") + "\n")

    def __repr__(self) -> str:
        return (f"HosmerLemeshow(kind={self.kind!r}, statistic={self.statistic:.4f}, df={self.df}, "
                f"pvalue={self.pvalue:.4g}, groups={len(self.table)}, complete={self.complete})")

    def group_labels(self) -> list[str]:
        return [f"({lo:.3g}, {hi:.3g}]" for lo, hi in zip(self.table.lower, self.table.upper)]

    def plot(self, ax: Any = None) -> Any:
        """Observed against expected events per group, as bars; returns the Axes."""
        from dsfed_client.plots import plot_observed_expected  # noqa: PLC0415

        return plot_observed_expected(
            self.group_labels(), self.table.observed_1.to_numpy(), self.table.expected_1.to_numpy(),
            title=f"Hosmer-Lemeshow {self.kind} = {self.statistic:.2f}, df {self.df}, p = {self.pvalue:.3g}", ax=ax)


def _group_table(session: FederatedSession, truth: str, score: str, breaks: np.ndarray, secure: bool = False
                 ) -> tuple[pd.DataFrame, int]:
    """Pooled observed/expected per group, and the number of records sites suppressed."""
    b = _binned(session, secure, "groupSumsDS", Ref(truth), Ref(score), [float(v) for v in breaks])
    table = pd.DataFrame({"lower": breaks[:-1], "upper": breaks[1:], "n": b.n.astype(int),
                          "observed_1": b.sum_y, "expected_1": b.sum_p, "observed_0": b.n - b.sum_y,
                          "expected_0": b.n - b.sum_p, "suppressed_sites": [", ".join(x) for x in b.suppressed_sites],
                          "suppressed_share_max": b.suppressed_share_max})
    return table[table["n"] > 0].reset_index(drop=True), b.suppressed_total


def hl_statistic(table: pd.DataFrame) -> float:
    """:math:`C = \\sum_g (O_{1g}-E_{1g})^2/E_{1g} + (O_{0g}-E_{0g})^2/E_{0g}` (seed 002; ``hoslem.test``)."""
    return float(((table.observed_1 - table.expected_1) ** 2 / table.expected_1
                  + (table.observed_0 - table.expected_0) ** 2 / table.expected_0).sum())


def ds_hosmer_lemeshow(session: FederatedSession, truth: str, score: str, *, g: int = 10,
                       kind: str = "C", secure: bool = False) -> HosmerLemeshow:
    """Hosmer-Lemeshow C (groups by deciles of risk, as ``hoslem.test``) or H (g equal-width bins).

    C's groups come from :func:`quantile_groups` (only censored counts cross the
    wire). If censoring left some group boundaries undecided, ``exact_grouping``
    is False and ``uncertain_records`` bounds how many records may sit in the
    neighbouring group. A site suppresses a group holding fewer than q of its
    records; the statistic then covers the records that remain and
    ``suppressed_records`` says how many were left out. df = groups - 2.
    ``secure``: the group sums arrive as secure sums over sites (C's quantile search still
    counts per site, censored at q).
    """
    exact, uncertain = True, 0
    if kind == "C":
        groups: QuantileGroups = quantile_groups(session, score, g)
        breaks, exact, uncertain = groups.breaks, groups.exact, groups.uncertain_records
    elif kind == "H":
        breaks = np.linspace(0.0, 1.0, g + 1)
    else:
        raise ValueError("kind must be 'C' or 'H'")
    table, suppressed = _group_table(session, truth, score, breaks, secure)
    statistic = hl_statistic(table)
    df = len(table) - 2
    return HosmerLemeshow(kind, statistic, df, float(stats.chi2.sf(statistic, df)), table, exact, uncertain,
                          suppressed)


@dataclass(frozen=True)
class CalibrationErrors:
    """ECE and MCE over equal-count groups (seed 001 eq. 3.6)."""

    ece: float
    mce: float
    table: pd.DataFrame
    exact_grouping: bool
    suppressed_records: int

    def to_dict(self) -> dict[str, Any]:
        return {"ece": self.ece, "mce": self.mce, "exact_grouping": self.exact_grouping,
                "suppressed_records": self.suppressed_records, "groups": self.table.to_dict(orient="records")}

    def to_frame(self) -> pd.DataFrame:
        """Per group: n, mean observed and expected event rate and their absolute gap."""
        t = self.table
        return pd.DataFrame({"lower": t.lower, "upper": t.upper, "n": t.n, "observed_rate": t.observed_1 / t.n,
                             "expected_rate": t.expected_1 / t.n,
                             "abs_gap": (t.observed_1 - t.expected_1).abs() / t.n})

    def summary(self) -> str:
        return _text_table("Expected and maximum calibration error", [
            ("ECE", f"{self.ece:.6g}"), ("MCE", f"{self.mce:.6g}"), ("Groups", str(len(self.table))),
            ("Exact grouping", "yes" if self.exact_grouping else "no"),
            ("Records suppressed at sites", str(self.suppressed_records)),
        ]) + self.to_frame().to_string(float_format=lambda v: f"{v:.4g}") + "\n"

    def __repr__(self) -> str:
        return f"CalibrationErrors(ece={self.ece:.4f}, mce={self.mce:.4f}, groups={len(self.table)})"

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


def ds_ece_mce(session: FederatedSession, truth: str, score: str, *, n_groups: int = 10,
               secure: bool = False) -> CalibrationErrors:
    """:math:`ECE = \\sum_g (n_g/n)\\,|\\bar o_g - \\bar e_g|`, :math:`MCE = \\max_g |\\bar o_g - \\bar e_g|`,
    groups by the type-7 quantiles of the predictions (as Hosmer-Lemeshow C)."""
    return calibration_errors(ds_hosmer_lemeshow(session, truth, score, g=n_groups, kind="C", secure=secure))


def calibration_errors(hl_c: HosmerLemeshow) -> CalibrationErrors:
    """ECE and MCE from the equal-count group table of a Hosmer-Lemeshow C result (no new query)."""
    table = hl_c.table
    gap = (table.observed_1 - table.expected_1).abs() / table.n
    return CalibrationErrors(float((table.n / table.n.sum() * gap).sum()), float(gap.max()), table,
                             hl_c.exact_grouping, hl_c.suppressed_records)


@dataclass(frozen=True)
class LogisticCalibration:
    """Calibration intercept and slope (logistic recalibration on logit(p)) and calibration-in-the-large."""

    intercept: float
    slope: float
    citl: float  # intercept of y ~ 1 with offset logit(p)
    fit: GLMResults
    citl_fit: GLMResults
    n_excluded: int  # records with p = 0 or 1, left out as rms::val.prob does

    def to_dict(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "slope": self.slope, "citl": self.citl,
                "slope_ci": self.fit.conf_int()[1].tolist(), "citl_ci": self.citl_fit.conf_int()[0].tolist(),
                "n_excluded": self.n_excluded}

    def to_frame(self) -> pd.DataFrame:
        """Intercept, slope and calibration-in-the-large with standard errors and Wald intervals."""
        fit, citl = self.fit.to_frame(), self.citl_fit.to_frame()
        frame = pd.concat([fit, citl.iloc[[0]]])
        frame.index = ["intercept", "slope", "citl"]
        return frame

    def summary(self) -> str:
        ci_slope, ci_citl = self.fit.conf_int()[1], self.citl_fit.conf_int()[0]
        return _text_table("Logistic calibration: y ~ logit(p); y ~ 1 + offset(logit(p))", [
            ("Calibration intercept", f"{self.intercept:.6g}"),
            ("Calibration slope", f"{self.slope:.6g}  (95% CI {ci_slope[0]:.4g} - {ci_slope[1]:.4g})"),
            ("Calibration-in-the-large", f"{self.citl:.6g}  (95% CI {ci_citl[0]:.4g} - {ci_citl[1]:.4g})"),
            ("n used / excluded (p = 0 or 1)", f"{self.fit.nobs} / {self.n_excluded}"),
        ]) + self.to_frame().to_string(float_format=lambda v: f"{v:.6g}") + "\n"

    def __repr__(self) -> str:
        return (f"LogisticCalibration(intercept={self.intercept:.4f}, slope={self.slope:.4f}, citl={self.citl:.4f}, "
                f"n={self.fit.nobs})")

    def plot(self, ax: Any = None) -> Any:
        """The recalibration curve :math:`p \\mapsto \\mathrm{expit}(a + b\\,\\mathrm{logit}(p))` against the diagonal."""
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


def ds_logistic_calibration(session: FederatedSession, truth: str, score: str, *,
                            n_complete: int | None = None) -> LogisticCalibration:
    """``glm(y ~ logit(p))`` by the distributed GLM (``rms::val.prob``'s Intercept and Slope) and
    ``glm(y ~ 1, offset = logit(p))`` for calibration-in-the-large."""
    session.assign(CALIBRATION_FRAME, Call("calibrationFrameDS", Ref(truth), Ref(score)))
    fit = ds_glm(session, "y ~ lp", CALIBRATION_FRAME)
    citl = ds_glm(session, "y ~ 1", CALIBRATION_FRAME, offset="lp")
    n_all = n_complete if n_complete is not None else ds_brier(session, truth, score).n
    return LogisticCalibration(float(fit.params[0]), float(fit.params[1]), float(citl.params[0]), fit, citl,
                               n_all - fit.nobs)
