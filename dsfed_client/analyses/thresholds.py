"""Metrics at decision thresholds across sites: the confusion matrix, sensitivity, specificity,
PPV, NPV, accuracy and F1 with Wilson or exact intervals (pROC's ``coords``, scikit-learn's
``confusion_matrix``), and Youden's optimal threshold among thresholds the sites derive.

What leaves the sites are counts of records and of positives per cell between thresholds
(``thresholdBinsDS``, or the quantile groups of Hosmer-Lemeshow C), summed on the client. The
analyst's thresholds are cuts on the score: the sites' release gate releases a threshold only if
it leaves 0 or at least q records (and the site's secret margin) to every other cut released on
the score's column, per site or pooled under secure aggregation. A threshold it does not release
is reported (``not_released``), never interpolated.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_client.aggregation import BinnedSums
from dsfed_client.calls import Ref
from dsfed_client.params import ALPHA, N_GROUPS, Options, validate_params
from dsfed_client.results import Results, derived, hidden, result, stat
from dsfed_client.session import FederatedSession

PROPORTIONS = ("sensitivity", "specificity", "ppv", "npv", "accuracy")
CI_METHODS = {"wilson": "wilson", "exact": "exact"}  # dsfed's name -> scipy's proportion_ci method
RULES = {">=": "score >= threshold", ">": "score > threshold"}


def proportion_ci(k: np.ndarray, n: np.ndarray, alpha: float, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Per proportion ``k/n`` its ``1 - alpha`` interval: Wilson's score interval without continuity
    correction (R's ``prop.test(k, n, correct = FALSE)``) or Clopper-Pearson's exact one (R's
    ``binom.test``), by ``scipy.stats.binomtest``; NaN where ``n`` is 0 (the proportion is undefined).

    3 of 10: R's ``prop.test(3, 10, correct = FALSE)$conf.int`` is 0.1077913 - 0.6032219:

    >>> lower, upper = proportion_ci(np.array([3]), np.array([10]), 0.05, "wilson")
    >>> round(float(lower[0]), 7), round(float(upper[0]), 7)
    (0.1077913, 0.6032219)
    """
    lower, upper = np.full(len(k), np.nan), np.full(len(k), np.nan)
    for i, (ki, ni) in enumerate(zip(k, n)):
        if ni > 0:
            ci = stats.binomtest(int(ki), int(ni)).proportion_ci(1 - alpha, method=CI_METHODS[method])
            lower[i], upper[i] = ci.low, ci.high
    return lower, upper


def _ratio(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``k / n``, NaN where ``n`` is 0 (as pROC's ``coords`` gives an undefined PPV or NPV)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, k / np.where(n > 0, n, 1), np.nan)


def released_thresholds(b: BinnedSums, asked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The requested thresholds the sites released as asked, with the records and the positives
    below each, from binned sums on the released cells (every record in exactly one cell).

    A threshold is released when it is one of the released cells' edges and no site (nor the
    pooled check) dropped it or moved it to another cut.

    Cells [0, 0.5) and [0.5, 1] of 4 and 6 records, 1 and 5 of them positive; 0.3 was dropped:

    >>> b = BinnedSums(np.array([0, 0.5, 1]), np.array([4.0, 6]), np.array([1.0, 4]), np.array([1.0, 5]),
    ...                np.array([0, 0.3, 0.5, 1]), False, {"a": [0.3]}, {})
    >>> released_thresholds(b, np.array([0.3, 0.5]))
    (array([0.5]), array([4]), array([1]))
    """
    edges = np.asarray(b.edges, dtype=float)
    withheld = {float(v) for values in b.coarsened.values() for v in values}
    below_n = np.concatenate([[0], np.cumsum(np.rint(b.n).astype(np.int64))])
    below_pos = np.concatenate([[0], np.cumsum(np.rint(b.sum_y).astype(np.int64))])
    keep = [i for i, t in enumerate(asked) if t not in withheld and np.count_nonzero(edges[1:-1] == t) == 1]
    at = np.array([int(np.flatnonzero(edges == asked[i])[0]) for i in keep], dtype=np.int64)
    return asked[keep], below_n[at], below_pos[at]


@result
class ThresholdMetrics(Results):
    """The confusion matrix and its rates at every threshold the sites released; ``to_frame`` has
    one row per threshold: ``tp``, ``fp``, ``tn``, ``fn``, ``sensitivity``, ``specificity``,
    ``ppv``, ``npv``, ``accuracy`` (each with ``*_lower`` and ``*_upper`` at ``alpha``) and ``f1``.

    .. math:: \\mathrm{sens} = \\frac{TP}{TP + FN},\\quad \\mathrm{spec} = \\frac{TN}{TN + FP},\\quad
              \\mathrm{PPV} = \\frac{TP}{TP + FP},\\quad \\mathrm{NPV} = \\frac{TN}{TN + FN},\\quad
              F_1 = \\frac{2\\,TP}{2\\,TP + FP + FN}

    A rate whose denominator is 0 (no record called positive: PPV) is NaN, as in pROC.
    ``not_released``: per site (or ``"pooled"``) the requested thresholds the release gate did not
    release; ``requested`` holds them all.

    References
    ----------
    pROC's ``coords`` (Robin et al. 2011); Wilson (1927); Clopper & Pearson (1934); scikit-learn's
    ``confusion_matrix`` (rows truth 0/1, columns predicted 0/1).
    """

    _title: ClassVar[str] = "Metrics at decision thresholds"

    thresholds: np.ndarray = hidden()  # released, increasing
    tp: np.ndarray = hidden()
    fp: np.ndarray = hidden()
    tn: np.ndarray = hidden()
    fn: np.ndarray = hidden()
    rule: str = stat("Called positive when", brief="")
    ci_method: str = stat("Intervals", brief="")  # "wilson" or "exact"
    alpha: float = stat()
    n_positive: int = stat("Positives")
    n_negative: int = stat("Negatives")
    requested: np.ndarray = hidden()
    bins: BinnedSums = hidden()

    @derived("Thresholds released", brief="")
    def n_thresholds(self) -> int:
        return int(self.thresholds.size)

    @derived("Checked pooled over the sites")
    def pooled(self) -> bool:
        return self.bins.pooled

    @derived()
    def not_released(self) -> dict[str, list[float]]:
        """Per site (or ``"pooled"``) the requested thresholds the release gate did not release."""
        return {site: [v for v in values if v in set(self.requested.tolist())]
                for site, values in self.bins.coarsened.items()}

    @derived()
    def withheld(self) -> tuple[float, ...]:
        """Every requested threshold the sites did not release (dropped, or moved to another cut)."""
        return tuple(float(t) for t in np.setdiff1d(self.requested, self.thresholds))

    @derived("Thresholds not released", brief="")
    def n_withheld(self) -> int:
        return len(self.withheld)

    def withheld_note(self) -> str:
        """One line naming the requested thresholds the sites did not release."""
        if not self.withheld:
            return "every requested threshold released"
        return f"not released: {', '.join(f'{t:g}' for t in self.withheld)}"

    def _fractions(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each proportion as (successes, trials)."""
        tp, fp, tn, fn = self.tp, self.fp, self.tn, self.fn
        return {"sensitivity": (tp, tp + fn), "specificity": (tn, tn + fp), "ppv": (tp, tp + fp),
                "npv": (tn, tn + fn), "accuracy": (tp + tn, tp + tn + fp + fn)}

    sensitivity = property(lambda self: _ratio(*self._fractions()["sensitivity"]), doc="TP / (TP + FN)")
    specificity = property(lambda self: _ratio(*self._fractions()["specificity"]), doc="TN / (TN + FP)")
    ppv = property(lambda self: _ratio(*self._fractions()["ppv"]), doc="TP / (TP + FP)")
    npv = property(lambda self: _ratio(*self._fractions()["npv"]), doc="TN / (TN + FN)")
    accuracy = property(lambda self: _ratio(*self._fractions()["accuracy"]), doc="(TP + TN) / n")
    f1 = property(lambda self: _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn), doc="2 TP / (2 TP + FP + FN)")

    def interval(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """The ``1 - alpha`` interval of one of :data:`PROPORTIONS` at every released threshold."""
        if metric not in PROPORTIONS:
            raise ValueError(f"metric must be one of {', '.join(PROPORTIONS)}; got {metric!r}")
        return proportion_ci(*self._fractions()[metric], self.alpha, self.ci_method)

    def confusion_matrix(self, threshold: float) -> pd.DataFrame:
        """The 2 x 2 counts at a released threshold, laid out as scikit-learn's ``confusion_matrix``:
        rows the truth (0, 1), columns the prediction (0, 1): ``[[TN, FP], [FN, TP]]``."""
        hit = np.flatnonzero(self.thresholds == threshold)
        if hit.size == 0:
            released = ", ".join(f"{t:g}" for t in self.thresholds) or "none"
            raise ValueError(f"threshold {threshold:g} was not released by the sites' release gate "
                             f"(released: {released}); ask for the matrix at a released threshold")
        i = int(hit[0])
        return pd.DataFrame([[int(self.tn[i]), int(self.fp[i])], [int(self.fn[i]), int(self.tp[i])]],
                            index=pd.Index([0, 1], name="truth"), columns=pd.Index([0, 1], name="predicted"))

    def _table(self) -> pd.DataFrame:
        frame = pd.DataFrame({"tp": self.tp, "fp": self.fp, "tn": self.tn, "fn": self.fn},
                             index=pd.Index(self.thresholds, name="threshold"))
        for metric in PROPORTIONS:
            frame[metric] = getattr(self, metric)
            frame[f"{metric}_lower"], frame[f"{metric}_upper"] = self.interval(metric)
        frame["f1"] = self.f1
        frame.attrs["alpha"] = self.alpha
        return frame

    def _notes(self) -> tuple[str, ...]:
        return (f"{self.level} {self.ci_method} intervals", textwrap.fill(self.withheld_note(), 100),
                self.bins.note())

    def on_requested(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per released threshold) over the requested thresholds, NaN where not
        released: a plot breaks its line there rather than draw across a withheld threshold."""
        out = np.full(self.requested.size, np.nan)
        out[np.isin(self.requested, self.thresholds)] = values
        return out

    def plot(self, ax: Any = None) -> Any:
        """Sensitivity and specificity against the threshold, with their intervals as bands (gaps
        where a requested threshold was not released)."""
        from dsfed_client.plots import plot_threshold_metrics  # noqa: PLC0415

        return plot_threshold_metrics(
            self.requested, {m: tuple(self.on_requested(v) for v in (getattr(self, m), *self.interval(m)))
                             for m in ("sensitivity", "specificity")},
            title=f"Sensitivity and specificity ({self.level} {self.ci_method} CI)", ax=ax)


def threshold_metrics(b: BinnedSums, asked: np.ndarray, rule: str, alpha: float, ci: str) -> ThresholdMetrics:
    """:class:`ThresholdMetrics` from binned sums between thresholds: at a released threshold the
    records below it are called negative (``FN`` the positives among them, ``TN`` the others)."""
    thresholds, below_n, below_pos = released_thresholds(b, asked)
    n_pos = int(np.rint(b.sum_y.sum()))
    n_neg = int(np.rint(b.n.sum())) - n_pos
    fn, tn = below_pos, below_n - below_pos
    return ThresholdMetrics(thresholds, n_pos - fn, n_neg - tn, tn, fn, RULES[rule], ci, alpha, n_pos, n_neg,
                            asked, b)


def check_thresholds(thresholds: Sequence[float] | float) -> np.ndarray:
    """The requested thresholds, sorted and unique; a ValueError unless all lie strictly between 0 and 1."""
    asked = np.unique(np.atleast_1d(np.asarray(thresholds, dtype=float)))
    if asked.size == 0 or not np.all(np.isfinite(asked)) or asked[0] <= 0 or asked[-1] >= 1:
        raise ValueError(f"thresholds must be finite numbers strictly between 0 and 1; got {thresholds!r}")
    return asked


@validate_params({"alpha": ALPHA, "ci": [Options(set(CI_METHODS))]})
def ds_threshold_metrics(session: FederatedSession, truth: str, score: str, thresholds: Sequence[float] | float, *,
                         alpha: float = 0.05, ci: str = "wilson", secure: bool | None = False) -> ThresholdMetrics:
    """TP, FP, TN, FN, sensitivity, specificity, PPV, NPV, accuracy and F1 at ``thresholds``
    (strictly between 0 and 1), with Wilson (``ci="wilson"``) or Clopper-Pearson (``"exact"``)
    intervals at level ``1 - alpha`` for the proportions.

    Convention: a record is called positive when its score is **at least** the threshold, as
    ``pROC::coords(roc(y, p, direction = "<"), x = t, input = "threshold")``: a score tied with the
    threshold counts as positive (in R, with cases 0.3, 0.5 and a control 0.3, ``t = 0.3`` gives
    ``tp`` 2 and ``fp`` 1). With every threshold released and noise off, the numbers are pROC's
    on the pooled data.

    The thresholds are cuts the sites' release gate checks (``thresholdBinsDS``): one that would
    leave fewer than q records (plus the site's margin) between it and another cut -- of this call
    or released before on the score's column -- is not released; ``not_released`` says which.
    ``secure``: checked pooled over the sites (secure aggregation) rather than per site.

    References
    ----------
    Robin et al. (2011), pROC (``coords``); Wilson (1927); Clopper & Pearson (1934).
    """
    asked = check_thresholds(thresholds)
    b = session.aggregation(secure).bins("thresholdBinsDS", asked, Ref(truth), Ref(score), asked.tolist())
    return threshold_metrics(b, asked, ">=", alpha, ci)


@result
class YoudenThreshold(Results):
    """Youden's optimal threshold among site-derived candidates: the inner breaks of the pooled
    type-7 quantile groups of the score (Hosmer-Lemeshow C's groups). At a candidate ``c`` a
    record is called positive when its score is **above** ``c`` (the groups are ``(a, c]``).
    ``to_frame``: every candidate's metrics and ``youden_j``.

    References
    ----------
    Youden (1950), :math:`J = \\mathrm{sens} + \\mathrm{spec} - 1`; Fluss, Faraggi & Reiser (2005).
    """

    _title: ClassVar[str] = "Youden's optimal threshold (among the sites' quantile breaks)"

    threshold: float = stat("Threshold (positive when score > threshold)", brief=".4g")
    youden_j: float = stat("Youden's J = sens + spec - 1", brief=".4f")
    sensitivity: float = stat("Sensitivity", brief=".4f")
    specificity: float = stat("Specificity", brief=".4f")
    n_groups: int = stat("Quantile groups asked")
    exact_grouping: bool = stat("Breaks split as R's type-7 quantiles")
    cells: str = stat("Groups")
    candidates: ThresholdMetrics = hidden()

    @derived("Candidates", brief="")
    def n_candidates(self) -> int:
        return self.candidates.n_thresholds

    def _table(self) -> pd.DataFrame:
        """Per candidate the counts, sensitivity, specificity and J (every metric with its interval:
        ``candidates.to_frame()``)."""
        frame = self.candidates.to_frame()[["tp", "fp", "tn", "fn", "sensitivity", "specificity"]]
        frame["youden_j"] = frame["sensitivity"] + frame["specificity"] - 1
        return frame

    def plot(self, ax: Any = None) -> Any:
        """The candidates' sensitivity and specificity, the optimum marked."""
        ax = self.candidates.plot(ax=ax)
        ax.set_title("Youden's threshold among the sites' quantile breaks")
        ax.axvline(self.threshold, color="black", linestyle="--", linewidth=1, gid="youden-threshold",
                   label=f"Youden {self.threshold:.3g} (J {self.youden_j:.3f})")
        ax.legend(fontsize=8)
        return ax


@validate_params({"n_groups": N_GROUPS, "alpha": ALPHA, "ci": [Options(set(CI_METHODS))]})
def ds_youden_threshold(session: FederatedSession, truth: str, score: str, *, n_groups: int = 20,
                        alpha: float = 0.05, ci: str = "wilson", secure: bool | None = False) -> YoudenThreshold:
    """The threshold maximising Youden's :math:`J = \\mathrm{sens} + \\mathrm{spec} - 1` among
    candidates the sites derive: the inner breaks of ``n_groups`` quantile groups of the pooled
    scores (splitting the records as R's ``quantile(p, seq(0, 1, 1/g), type = 7)`` does; found by
    the sites on pooled counts under secure aggregation, or by the count-only search per site),
    whose group sums the release gate passed. Ties: the lowest threshold.

    How it differs from ``pROC::coords(roc, "best", best.method = "youden")``: pROC searches every
    midpoint between two distinct scores, i.e. it reads the data at record resolution, which no
    site releases; here the optimum is over at most ``n_groups - 1`` breaks, each leaving at least
    q records between it and the next, so J is at most pROC's (equal when pROC's optimum lies in
    a gap containing a break). The classification rule at a break ``c`` is ``score > c`` (the
    quantile groups are ``(a, c]``, as ``cut``), where pROC calls ``score >= t`` positive; the two
    agree unless a score equals ``c``. Also note that pROC's ``"youden"`` column is sens + spec
    (without the - 1).

    References
    ----------
    Youden (1950); Fluss, Faraggi & Reiser (2005); Huang's dissertation (2020), §4.4 (federated
    quantile groups); Robin et al. (2011), pROC.
    """
    groups = session.aggregation(secure).risk_groups(truth, score, n_groups)
    if groups.bins is None:
        raise ValueError(f"the sites released the quantile groups' statistics but not their breaks "
                         f"({groups.withheld}); Youden's threshold needs the breaks: ask per site (secure=False) "
                         "or with fewer groups")
    b = groups.bins
    candidates = threshold_metrics(b, b.edges[1:-1], ">", alpha, ci)
    if candidates.n_thresholds == 0:
        raise ValueError(f"the sites released no break of the {n_groups} quantile groups ({b.note()}); "
                         "ask for fewer groups")
    j = candidates.sensitivity + candidates.specificity - 1
    best = int(np.nanargmax(j))
    return YoudenThreshold(float(candidates.thresholds[best]), float(j[best]), float(candidates.sensitivity[best]),
                           float(candidates.specificity[best]), n_groups, groups.exact, groups.cells, candidates)
