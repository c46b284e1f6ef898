"""Decision curve analysis across sites (Vickers & Elkin 2006): the model's net benefit over a
grid of threshold probabilities against treating all and treating none, from the confusion
counts at the thresholds the sites' release gate released (:mod:`.thresholds`)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from dsfed_client.analyses.thresholds import ThresholdMetrics, ds_threshold_metrics
from dsfed_client.results import Results, derived, hidden, result
from dsfed_client.session import FederatedSession

DEFAULT_GRID = np.arange(1, 100) / 100  # 0.01, ..., 0.99; 10k/100 is the calibration bins' edge k/10 exactly
# validate()'s grid, 0.05, ..., 0.95: every threshold a site releases stays a cut in the score column's
# history for good (any later analysis of the column is checked against it), so the default spends few
VALIDATE_GRID = np.arange(1, 20) / 20


def net_benefit(tp: np.ndarray, fp: np.ndarray, n: int, t: np.ndarray) -> np.ndarray:
    """:math:`NB(t) = TP/n - FP/n \\cdot t/(1-t)` (Vickers & Elkin 2006, "net benefit").

    100 patients, at t = 0.2 40 true and 20 false positives: 0.4 - 0.2 * 0.25 = 0.35:

    >>> round(float(net_benefit(np.array([40]), np.array([20]), 100, np.array([0.2]))[0]), 12)
    0.35
    """
    return tp / n - fp / n * t / (1 - t)


@result
class DecisionCurve(Results):
    """Net benefit of the model, of treating all and of treating none at every threshold the sites
    released; ``to_frame`` has one row per threshold (``tp``, ``fp``, ``net_benefit``, ``treat_all``,
    ``treat_none``, ``standardized_net_benefit``, ``standardized_treat_all``).

    .. math:: NB(t) = \\frac{TP(t)}{n} - \\frac{FP(t)}{n}\\frac{t}{1-t},\\qquad
              NB_{all}(t) = \\pi - (1 - \\pi)\\frac{t}{1-t},\\qquad NB_{none} = 0,\\qquad
              sNB(t) = NB(t) / \\pi

    with :math:`\\pi` the prevalence; a record is treated when its risk is at least :math:`t`.
    ``not_released`` (per site or ``"pooled"``) lists the grid's thresholds the release gate did not
    release: the curve has no point there, none is interpolated.

    References
    ----------
    Vickers & Elkin (2006), "Decision curve analysis", Med Decis Making 26:565-574 (net benefit);
    Kerr, Brown, Zhu & Janes (2016), J Clin Oncol 34:2534-2540 (standardized net benefit).
    """

    _title: ClassVar[str] = "Decision curve (net benefit; Vickers & Elkin 2006)"

    counts: ThresholdMetrics = hidden()

    @derived("n", brief="")
    def n(self) -> int:
        return self.counts.n_positive + self.counts.n_negative

    @derived("Prevalence", brief=".4f")
    def prevalence(self) -> float:
        return self.counts.n_positive / self.n

    @derived("Thresholds released", brief="")
    def n_thresholds(self) -> int:
        return self.counts.n_thresholds

    @derived()
    def withheld(self) -> tuple[float, ...]:
        return self.counts.withheld

    @derived("Thresholds not released", brief="")
    def n_withheld(self) -> int:
        return self.counts.n_withheld

    @derived()
    def not_released(self) -> dict[str, list[float]]:
        return self.counts.not_released

    @property
    def thresholds(self) -> np.ndarray:
        return self.counts.thresholds

    @property
    def net_benefit(self) -> np.ndarray:
        return net_benefit(self.counts.tp, self.counts.fp, self.n, self.thresholds)

    @property
    def treat_all(self) -> np.ndarray:
        t = self.thresholds
        return self.prevalence - (1 - self.prevalence) * t / (1 - t)

    def _table(self) -> pd.DataFrame:
        frame = pd.DataFrame({"tp": self.counts.tp, "fp": self.counts.fp, "net_benefit": self.net_benefit,
                              "treat_all": self.treat_all, "treat_none": np.zeros(self.thresholds.size)},
                             index=pd.Index(self.thresholds, name="threshold"))
        frame["standardized_net_benefit"] = frame["net_benefit"] / self.prevalence
        frame["standardized_treat_all"] = frame["treat_all"] / self.prevalence
        return frame

    def _notes(self) -> tuple[str, ...]:
        return (textwrap.fill(self.counts.withheld_note(), 100), self.counts.bins.note())

    def plot(self, ax: Any = None) -> Any:
        """The model's net benefit at the released thresholds (the line broken where one was not
        released), treat-all and treat-none."""
        from dsfed_client.plots import plot_decision_curve  # noqa: PLC0415

        requested = self.counts.requested
        grid = np.linspace(requested.min(), requested.max(), 200)
        return plot_decision_curve(requested, self.counts.on_requested(self.net_benefit), self.prevalence, grid=grid,
                                   ax=ax)


def ds_decision_curve(session: FederatedSession, truth: str, score: str,
                      thresholds: Sequence[float] = tuple(DEFAULT_GRID), *, secure: bool | None = False
                      ) -> DecisionCurve:
    """Decision curve analysis of a risk model over ``thresholds`` (default 0.01, 0.02, ..., 0.99):
    the net benefit :math:`TP/n - FP/n \\cdot t/(1-t)` of treating the records whose risk is at
    least t, against treating all and none, and standardized by the prevalence.

    The counts are :func:`~dsfed_client.analyses.thresholds.ds_threshold_metrics`' (the sites'
    ``thresholdBinsDS``): every threshold is a cut the release gate checks, per site or pooled
    (``secure``), and one it does not release is reported in ``not_released``, not interpolated.

    References
    ----------
    Vickers & Elkin (2006), Med Decis Making 26:565-574; Kerr et al. (2016), J Clin Oncol 34:2534-2540.
    """
    return DecisionCurve(ds_threshold_metrics(session, truth, score, thresholds, secure=secure))
