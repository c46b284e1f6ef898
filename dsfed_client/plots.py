"""Plotting helpers shared by the results objects and the HTML report.

matplotlib is imported inside each function, never at module import, so the
library imports (and the estimators run) on a machine where matplotlib is not
set up. Every helper draws on ``ax`` when given, else on a new figure, and
returns the Axes. :func:`figure_svg` and :func:`figure_png_base64` serialise a
figure for embedding in a self-contained HTML page.
"""

from __future__ import annotations

import base64
import io
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _pyplot():  # type: ignore[no-untyped-def]
    """pyplot with the non-interactive Agg backend, unless the caller chose a backend already
    (imported pyplot, or set ``MPLBACKEND`` as Jupyter does)."""
    import matplotlib  # noqa: PLC0415

    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def new_axes(ax: "Axes | None" = None, *, figsize: tuple[float, float] = (5.0, 4.5)) -> "Axes":
    """``ax`` itself, or the Axes of a new figure."""
    if ax is not None:
        return ax
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=figsize)
    return ax


def roc_axes(ax: "Axes") -> "Axes":
    """Square unit axes with the chance diagonal, labelled as a ROC plot."""
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="_chance", gid="chance")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("false positive rate (1 - specificity)")
    ax.set_ylabel("true positive rate (sensitivity)")
    return ax


def plot_roc(fpr_fit: np.ndarray, tpr_fit: np.ndarray, *, label: str,
             empirical: tuple[np.ndarray, np.ndarray] | None = None,
             empirical_label: str = "empirical", overlay: tuple[np.ndarray, np.ndarray] | None = None,
             overlay_label: str = "histogram ROC", ax: "Axes | None" = None) -> "Axes":
    """A fitted ROC curve, optionally over an empirical step curve and one more curve (arrays fpr, tpr)."""
    ax = roc_axes(new_axes(ax))
    if empirical is not None:
        ax.plot(empirical[0], empirical[1], color="tab:grey", linewidth=1, marker="o", markersize=2,
                label=empirical_label, gid="roc-empirical")
    if overlay is not None:
        fpr, tpr = (np.asarray(v, dtype=float) for v in overlay)
        if fpr.shape != tpr.shape:
            raise ValueError(f"overlay fpr and tpr differ in length: {fpr.shape} vs {tpr.shape}")
        order = np.argsort(fpr, kind="stable")
        ax.plot(fpr[order], tpr[order], color="tab:orange", linewidth=1.4, marker="." if fpr.size <= 200 else "",
                markersize=3, label=overlay_label, gid="roc-overlay")
    ax.plot(fpr_fit, tpr_fit, color="tab:blue", linewidth=2, label=label, gid="roc-fit")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("ROC curve")
    return ax


def plot_pr_curve(precision: Sequence[float], recall: Sequence[float], *, prevalence: float | None = None,
                  label: str = "PR curve", ax: "Axes | None" = None) -> "Axes":
    """Precision against recall (arrays of equal length, e.g. from the histogram-based curves);
    ``prevalence`` draws the no-skill line."""
    precision, recall = np.asarray(precision, dtype=float), np.asarray(recall, dtype=float)
    if precision.shape != recall.shape:
        raise ValueError(f"precision and recall differ in length: {precision.shape} vs {recall.shape}")
    ax = new_axes(ax)
    order = np.argsort(recall, kind="stable")
    ax.plot(recall[order], precision[order], color="tab:blue", linewidth=2, label=label, gid="pr-curve")
    if prevalence is not None:
        ax.axhline(prevalence, linestyle=":", color="grey", linewidth=1, label=f"no skill ({prevalence:.3f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("recall (sensitivity)")
    ax.set_ylabel("precision (PPV)")
    ax.set_title("Precision-recall curve")
    ax.legend(loc="lower left", fontsize=8)
    return ax


def plot_calibration(edges: np.ndarray, n: np.ndarray, mean_prediction: np.ndarray, mean_outcome: np.ndarray, *,
                     per_site: dict[str, Any] | None = None, ax: "Axes | None" = None,
                     hist_ax: "Axes | None" = None, not_released: Sequence[float] = ()) -> "Axes":
    """Pooled calibration points sized by n, per-site curves, the diagonal, and below it (on
    ``hist_ax``, or an Axes split off ``ax``) a histogram of the predictions from the bins' counts.

    A bin with no released value gets no point (none on the diagonal, which would read as "well
    calibrated here"); the requested edges the sites' release gate did not release
    (``not_released``) are ticks on the x axis with a note, their bins merged with the next."""
    if hist_ax is not None:
        if ax is None:
            raise ValueError("hist_ax needs ax")
        hist = hist_ax
    elif ax is None:
        plt = _pyplot()
        fig, (ax, hist) = plt.subplots(2, 1, figsize=(5.0, 6.0), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1], "hspace": 0.08})
    else:
        from mpl_toolkits.axes_grid1 import make_axes_locatable  # noqa: PLC0415

        hist = make_axes_locatable(ax).append_axes("bottom", size="30%", pad=0.1, sharex=ax)
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="ideal", gid="calibration-diagonal")
    for site, frame in (per_site or {}).items():
        shown = frame[frame["n"] > 0]
        ax.plot(shown["mean_prediction"], shown["mean_outcome"], linewidth=0.8, alpha=0.55, marker=".",
                markersize=3, label=site, gid=f"calibration-site-{site}")
    has = n > 0
    ax.plot(mean_prediction[has], mean_outcome[has], color="black", linewidth=1.5, label="_pooled-line")
    ax.scatter(mean_prediction[has], mean_outcome[has], s=12 + 60 * n[has] / max(n.max(), 1), color="black",
               zorder=3, label="pooled", gid="calibration-pooled")
    dropped = np.unique(np.asarray(not_released, dtype=float))
    if dropped.size:
        ax.plot(dropped, np.zeros(dropped.size), linestyle="", marker="|", markersize=12, color="tab:red",
                clip_on=False, label="edge not released", gid="calibration-edges-not-released")
        ax.text(0.02, 0.95, f"{dropped.size} requested edge(s) not released: bins merged", transform=ax.transAxes,
                fontsize=7, va="top", color="tab:red", gid="calibration-not-released-note")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("observed event rate")
    ax.set_title("Calibration curve" + (" (partial: bins merged)" if dropped.size else ""))
    ax.legend(loc="lower right", fontsize=7)
    ax.tick_params(labelbottom=False)
    hist.bar(edges[:-1], n, width=np.diff(edges), align="edge", color="tab:blue", alpha=0.6, edgecolor="white",
             gid="calibration-histogram")
    hist.set_xlim(0, 1)
    hist.set_xlabel("predicted probability")
    hist.set_ylabel("n")
    return ax


def plot_observed_expected(labels: Sequence[str], observed: np.ndarray, expected: np.ndarray, *,
                           title: str = "Observed vs expected events", ax: "Axes | None" = None) -> "Axes":
    """Grouped bars of observed and expected events per group (a Hosmer-Lemeshow table)."""
    ax = new_axes(ax, figsize=(6.0, 4.0))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, observed, width=0.4, color="tab:blue", label="observed", gid="hl-observed")
    ax.bar(x + 0.2, expected, width=0.4, color="tab:orange", label="expected", gid="hl-expected")
    ax.set_xticks(x, list(labels), rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("events")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_threshold_metrics(thresholds: np.ndarray, metrics: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], *,
                           title: str = "Metrics at thresholds", ax: "Axes | None" = None) -> "Axes":
    """Each metric (name -> values, lower, upper) against the threshold, its interval as a band (NaN: a gap)."""
    ax = new_axes(ax, figsize=(5.6, 4.2))
    for (name, (value, lower, upper)), color in zip(metrics.items(), ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(thresholds, value, color=color, linewidth=1.6, marker="o" if thresholds.size <= 30 else "",
                markersize=3, label=name, gid=f"threshold-{name}")
        ax.fill_between(thresholds, lower, upper, color=color, alpha=0.2, linewidth=0)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("threshold (released by the sites)")
    ax.set_ylabel("proportion")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax


def plot_decision_curve(thresholds: np.ndarray, net_benefit: np.ndarray, prevalence: float, *,
                        grid: np.ndarray | None = None, ax: "Axes | None" = None) -> "Axes":
    """Net benefit of the model at the thresholds (NaN: not released, the line breaks) against treat-all
    (:math:`\\pi - (1 - \\pi)\\,t/(1-t)`, over ``grid``) and treat-none (0), as decision curves are drawn."""
    ax = new_axes(ax, figsize=(5.6, 4.2))
    t = np.linspace(0.0, 0.99, 199) if grid is None else np.asarray(grid, dtype=float)
    ax.plot(t, prevalence - (1 - prevalence) * t / (1 - t), color="tab:grey", linewidth=1.2, label="treat all",
            gid="dca-treat-all")
    ax.axhline(0.0, color="black", linewidth=1, label="treat none", gid="dca-treat-none")
    ax.plot(thresholds, net_benefit, color="tab:blue", linewidth=1.8, marker="." if thresholds.size <= 120 else "",
            markersize=4, label="model", gid="dca-model")
    ax.set_xlim(float(t.min()) if t.size else 0.0, float(t.max()) if t.size else 1.0)
    ax.set_ylim(-0.05, max(prevalence, 0.01) * 1.1)
    ax.set_xlabel("threshold probability")
    ax.set_ylabel("net benefit")
    ax.set_title("Decision curve")
    ax.legend(fontsize=8)
    return ax


def plot_coefficients(names: Sequence[str], params: np.ndarray, ci: np.ndarray, *,
                      ax: "Axes | None" = None) -> "Axes":
    """A forest plot: each coefficient with its confidence interval."""
    ax = new_axes(ax, figsize=(5.0, 0.5 + 0.4 * len(names)))
    y = np.arange(len(names))[::-1]
    bars = ax.errorbar(params, y, xerr=np.abs(ci.T - params), fmt="o", color="tab:blue", capsize=3)
    bars.lines[0].set_gid("coefficients")
    ax.axvline(0, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(y, list(names))
    ax.set_xlabel("estimate (95% CI)")
    return ax


def plot_smooth_calibration(p: np.ndarray, calibrated: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                            knots: np.ndarray, *, title: str, ax: "Axes | None" = None) -> "Axes":
    """A smooth calibration curve with its pointwise band, the diagonal, and the knots (as ticks on
    the x axis, on the probability scale)."""
    ax = new_axes(ax, figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], linestyle=":", color="grey", linewidth=1, label="ideal")
    ax.fill_between(p, lower, upper, color="tab:blue", alpha=0.2, linewidth=0, label="pointwise CI", gid="spline-band")
    ax.plot(p, calibrated, color="tab:blue", linewidth=2, label="rcs(logit(p)) fit", gid="spline-curve")
    ax.plot(knots, np.zeros_like(knots), linestyle="none", marker="|", markersize=12, color="black", label="knots")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed (smoothed)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    return ax


def plot_forest(meta: Any, *, reference: float | None = None, ax: "Axes | None" = None) -> "Axes":
    """A forest plot of a :class:`~dsfed_client.analyses.meta.MetaAnalysis` on the measure's own
    scale: each site's estimate and interval (square sized by its random-effects weight), the pooled
    estimate as a diamond over its CI, and the prediction interval as a bar beneath; ``reference``:
    a dotted line at the value of no effect (an AUC of 0.5, a slope or O/E of 1)."""
    ax = new_axes(ax, figsize=(5.0, 1.6 + 0.42 * meta.k))
    est, ci = meta.back(meta.yi), meta.back(meta.site_intervals())
    weights = 1.0 / (meta.sei**2 + meta.tau2)
    y = np.arange(meta.k)[::-1] + 2.0
    ax.hlines(y, ci[:, 0], ci[:, 1], color="tab:blue", linewidth=1.2, gid="forest-sites")
    ax.scatter(est, y, s=30 + 170 * weights / weights.max(), marker="s", color="tab:blue", zorder=3)
    lo, hi = meta.ci_back
    ax.fill([lo, meta.estimate_back, hi, meta.estimate_back], [1.0, 1.25, 1.0, 0.75], color="tab:red",
            gid="forest-pooled")
    ax.hlines(0.2, *meta.pi_back, color="tab:red", linewidth=2.5, gid="forest-prediction")
    if reference is not None:
        ax.axvline(reference, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks([*y, 1.0, 0.2], [*meta.labels, "pooled (RE)", "prediction"])
    ax.set_ylim(-0.4, meta.k + 2.6)
    ax.set_xlabel(f"{meta.measure} ({meta.level} CI)")
    ax.set_title(f"{meta.measure}: tau^2 {meta.tau2:.3g}, I^2 {meta.i2:.0f}%", fontsize=10)
    return ax


def figure_svg(fig: "Figure") -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), ready to paste into HTML."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    seen: dict[str, int] = {}

    def unique(match: "re.Match[str]") -> str:  # a gid set on many artists (bars) becomes id, id-2, id-3, ...
        name = match.group(1)
        seen[name] = seen.get(name, 0) + 1
        return f'id="{name}"' if seen[name] == 1 else f'id="{name}-{seen[name]}"'

    return re.sub(r'\bid="([^"]+)"', unique, text[text.index("<svg"):])


def figure_png_base64(fig: "Figure", *, dpi: int = 110) -> str:
    """The figure as a ``data:image/png;base64,...`` URI."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def close(fig: "Figure") -> None:
    _pyplot().close(fig)
