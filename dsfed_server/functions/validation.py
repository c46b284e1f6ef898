"""Site parts of the validation of a binary prediction model (Schalk et al. 2024; Huang 2020; Wu et al. 2012).

Every function here takes the outcome ``truth`` (0/1) and the predicted
``score`` of the same records, drops records where either is missing, and
refuses a release resting on fewer than q records, positives or negatives
(rule A1 of Schalk et al. 2024; a binary outcome level below q is refused as in
DataSHIELD's ``glmDS1``): a site's own in a per-site release, the sums over
the sites in a pooled one. A table that stays on the site applies no count
itself; the releases from it do. What leaves the site is a sum over at least q
records, a noisy score under the site's DP mechanism, or a count between
cuts the release gate passed (:mod:`dsfed_server.disclosure.gate`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from dsfed_server.context import RECORDS_BEHIND, CallContext, numeric
from dsfed_server.disclosure.checks import GATE_RULES, NOISE_RULES
from dsfed_server.disclosure.declared import Declared, ReferenceEdges
from dsfed_server.disclosure.mechanisms import content_digest
from dsfed_server.disclosure.gate import Cut, Intervals, Released, cuts_from
from dsfed_server.disclosure.differencing import ROWS, Rows, mark_rows
from dsfed_server.disclosure.expressions import Meaning
from dsfed_server.disclosure.provenance import DERIVED, MEANINGS, MODEL_OUTPUT, PUBLIC_DESIGN, RootColumn, own_meaning
from dsfed_core.errors import CallError, DisclosureRefusal
from dsfed_core.quantiles import MAX_THRESHOLDS
from dsfed_core.roc import roc_glm_rows
from dsfed_core.wire import encode_f64
from dsfed_server.registry import P, Param, SecureSum, register
from dsfed_server.rowbatches import row_batches

_TRUTH = Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y")
_SCORE = Param("score", P.VECTOR, "the predicted score or probability, e.g. D$score")
_A1 = ("disclosure.q_threshold",)
# what evaluating an analyst's reference applies (Guard.reference_edges, declared as ReferenceEdges)
_REFERENCE = _A1 + ("disclosure.cut_history", "disclosure.cut_margin")
# the additive fields of the placement sums and of the binned sums (secure summation over sites)
PLACEMENT_SUMS = SecureSum(("n1", "n0", "sum_v10", "sumsq_v10", "sum_v01", "sumsq_v01"))


def outcome_and_score(ctx: CallContext, truth: pd.Series, score: pd.Series, *, probability: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Complete (y, p) pairs, checked: 0/1 outcome, and at least q records, positives and negatives."""
    y, (p,) = outcome_and_scores(ctx, truth, {"score": score}, probability=probability)
    return y, p


def outcome_and_scores(ctx: CallContext, truth: pd.Series, scores: dict[str, pd.Series], *,
                       probability: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
    """The outcome and the scores (named by their parameter) of the records complete in all of
    them, checked: 0/1 outcome, and at least q records, positives and negatives (on the pooled
    counts in a pooled release, :meth:`Guard.min_count`)."""
    y, ps = complete_pairs(ctx, truth, scores, probability=probability)
    for what, n in class_counts(y).items():
        ctx.guard.min_count(n, what)
    return y, ps


def class_counts(y: np.ndarray) -> dict[str, int]:
    """The counts rule A1 applies to: complete records, positives and negatives of the 0/1 outcome ``y``."""
    n1 = int(y.sum())
    return {"complete records": int(y.size), "positives (truth = 1)": n1, "negatives (truth = 0)": int(y.size) - n1}


def complete_pairs(ctx: CallContext, truth: pd.Series, scores: dict[str, pd.Series], *,
                   probability: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
    """The 0/1 outcome and the scores of the records complete in all of them, no count checked: for a
    table that stays on the site, whose releases apply q themselves (a GLM on it, or
    :data:`~dsfed_server.context.RECORDS_BEHIND`)."""
    y = numeric(truth, "truth", whole=True)  # a 0/1 column as stored, not copied
    ps = [numeric(score, name) for name, score in scores.items()]
    keep = np.ones(y.size, dtype=bool) if y.dtype == np.int64 else ~np.isnan(y)
    for name, p in zip(scores, ps):
        if p.size != y.size:
            raise CallError(f"truth and {name} have different lengths ({y.size} and {p.size})")
        keep &= ~np.isnan(p)
        if probability and (np.any(p < 0) or np.any(p > 1)):
            raise CallError(f"{name} must be a probability in [0, 1] here")
    if not keep.all():  # complete columns are served as they are, not copied
        y, ps = y[keep], [p[keep] for p in ps]
    if not np.all((y == 0) | (y == 1)):
        raise CallError("truth must be coded 0/1")
    return y.astype(np.int64, copy=False), ps


@register(
    "noisyScoresDS",
    "aggregate",
    [
        _TRUTH,
        _SCORE,
        Param("epsilon", P.NUMBER, "ask for a smaller epsilon than the site's (never larger)", required=False),
        Param("delta", P.NUMBER, "ask for a smaller delta than the site's (never larger)", required=False),
        Param("sensitivity", P.NUMBER, "ask for a larger l2-sensitivity than the site's", required=False),
    ],
    checks=_A1 + ("privacy.score_columns", *NOISE_RULES),
)
def noisy_scores(ctx: CallContext, truth: pd.Series, score: pd.Series, epsilon: float | None,
                 delta: float | None, sensitivity: float | None) -> dict[str, Any]:
    """The scores of the negatives and of the positives with Gaussian noise, each sorted
    (Schalk et al. 2024, "Approximating the global survivor functions"):
    :math:`\\tilde F^{(k)} = F^{(k)} + r^{(k)}`, :math:`r \\sim N(0, \\tau^2)`, :math:`\\tau` from
    the analytic Gaussian mechanism with the site's epsilon, delta and sensitivity. The two
    classes are disjoint sets of records, so together they cost one (epsilon, delta).

    The sensitivity is the site's statement about its prediction model's scores, so only a column
    the rules declare as scores (``privacy.score_columns``; a subset or monotone transform of one)
    is released, clipped to the range the data dictionary declares for it.
    """
    score_range = declared_score_range(ctx, score)
    y, p = outcome_and_score(ctx, truth, score)
    p = np.clip(p, *score_range)
    mechanism = ctx.guard.mechanism(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    return {
        # disjoint records: one (epsilon, delta) for both classes (parallel composition)
        "negatives": encode_f64(ctx.guard.noisy(p[y == 0], "class=0", mechanism, partition="class")),
        "positives": encode_f64(ctx.guard.noisy(p[y == 1], "class=1", mechanism, partition="class")),
        "sigma": mechanism.sigma if mechanism else 0.0,
        "mechanism": "analytic_gaussian" if mechanism else "none",
        "epsilon": mechanism.epsilon if mechanism else None,
        "delta": mechanism.delta if mechanism else None,
        "sensitivity": mechanism.sensitivity if mechanism else None,
    }


def declared_score_range(ctx: CallContext, score: pd.Series) -> tuple[float, float]:
    """The declared range of ``score``, which must be (a subset or monotone transform of) one of the
    rules file's ``privacy.score_columns``; refused otherwise, naming the rule."""
    declared = ctx.guard.rule("privacy.score_columns")
    model = score.attrs.get(MODEL_OUTPUT)
    if model is not None:
        return model[1]  # the predictions of an approved model (predictDS), in its declared range
    root = ctx.root_column(score)
    if root is None or root.column not in declared:
        what = f"column {root.column!r}" if root is not None else "a vector that is no site table column"
        raise DisclosureRefusal(
            f"the noise is sized for this site's prediction scores ({', '.join(declared) or 'none declared'}); "
            f"{what} is not one of them", rule="privacy.score_columns",
            hint="pass a score column the site declares, e.g. D$score")
    if root.declared is None:
        raise DisclosureRefusal(
            f"score column {root.column!r} has no finite range declared in the data dictionary (through "
            f"its {root.transform.name} transform), so the site cannot clip it", rule="privacy.score_columns",
            hint="pass the score itself, not a transform of it; or ask the site to declare the column's range")
    if not root.transform.identity:
        variable = ctx.service.catalog.variable(root.table, root.column)
        own = variable.declared_range if variable is not None else None
        if own is None or root.declared[1] - root.declared[0] > (own[1] - own[0]) * (1 + 1e-12):
            raise DisclosureRefusal(
                f"the noise is sized for score column {root.column!r} on its declared range; this transform of it "
                "spreads its values wider, so the same noise would hide less of each record",
                rule="privacy.score_columns", hint="pass the score itself, or a map of it onto its own range "
                                                   "(a recalibrated score)")
    return root.declared



@register(
    "referenceScoresDS",
    "assign",
    [
        Param("negatives", P.NUMBERS, "pooled (noisy) scores of all negatives"),
        Param("positives", P.NUMBERS, "pooled (noisy) scores of all positives"),
    ],
)
def reference_scores(ctx: CallContext, negatives: list[float], positives: list[float]) -> pd.DataFrame:
    """Store the pooled (noisy) scores of all sites, as a table (score, class), for the placement
    values (Schalk et al. 2024): the global survivor functions are built from it at the site."""
    if len(negatives) == 0 or len(positives) == 0:
        raise CallError("both negatives and positives must be given")
    parts = [np.asarray(v, dtype=float) for v in (negatives, positives)]
    parts = [v if np.all(v[1:] >= v[:-1]) else np.sort(v) for v in parts]
    return pd.DataFrame({
        "score": np.concatenate(parts),
        "class": np.repeat(np.array([0, 1], dtype=np.int64), [len(negatives), len(positives)]),
    }, copy=False)


def _reference(table: pd.DataFrame, cls: int) -> np.ndarray:
    if not {"score", "class"} <= set(table.columns):
        raise CallError("the reference must be a table made by referenceScoresDS")
    values = table["score"].to_numpy(dtype=float)[table["class"].to_numpy() == cls]
    return values if np.all(values[1:] >= values[:-1]) else np.sort(values)


def _share_below(reference: np.ndarray, x: np.ndarray, ties: float) -> np.ndarray:
    """Share of the reference values below each x, counting values equal to x with weight ``ties``."""
    less = np.searchsorted(reference, x, side="left")
    return (less + ties * (np.searchsorted(reference, x, side="right") - less)) / reference.size


def reference_cdf(ctx: CallContext, table: pd.DataFrame, cls: int, p: np.ndarray, x: np.ndarray, ties: float,
                  root: RootColumn | None = None) -> Generator[Declared, Any, np.ndarray]:
    """Schalk et al.'s (2024) step function :func:`_share_below` of the class-``cls`` reference scores in
    ``table`` at x, as the site's rules let it be evaluated.

    With ``disclosure.cut_history`` the step function is written as a piecewise-linear CDF with
    edges just below and above each distinct reference value (exactly the step; a score equal to a
    reference value gets half of its share), and the site keeps only the edges
    :meth:`Guard.reference_edges` allows (declared as :class:`~dsfed_server.disclosure.declared.ReferenceEdges`):
    a crafted reference cannot put a step between two of this site's records closer than q, with every cut
    released before on the scores' column.
    ``p`` are all the site's scores, ``root`` the table column they come from
    (:meth:`CallContext.root_column`). The kept CDF is built once per session for a reference and
    scores (placement sums and ROC-GLM data share it).
    """
    reference = _reference(table, cls)
    if not ctx.guard.rule("disclosure.cut_history"):
        return _share_below(reference, x, ties)
    key = ("reference_cdf", cls, content_digest(p))
    kept = ctx.session.recall(key, table)
    if kept is None:
        edges, cdf = _step(reference, p)
        keep = yield ReferenceEdges(p, edges, root)
        kept = ctx.session.memo(key, table, lambda: (edges[keep], cdf[keep]))
    edges, cdf = kept
    return np.interp(x, edges, cdf)


def _step(reference: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges and CDF values of :func:`reference_cdf`'s piecewise-linear step, before the site keeps its
    edges."""
    starts = np.flatnonzero(np.concatenate([[True], reference[1:] != reference[:-1]]))  # reference is sorted
    values = reference[starts]
    delta = 1e-9 * max(values[-1] - values[0], 1.0)
    if values.size > 1:
        delta = min(delta, float(np.diff(values).min()) / 4)
    delta = max(delta, 4 * float(np.spacing(np.max(np.abs(values)))))
    # reference values closer than 4 delta (within a few ulps) count as one
    starts = starts[np.concatenate([[True], np.diff(values) > 4 * delta])]
    values = reference[starts]
    ends = np.append(starts[1:], reference.size)
    # between two neighbouring site scores only the first and the last reference value matter (the
    # step is flat at every site score in between); values tied with a site score stay
    x_sorted = np.sort(p)
    gap = np.searchsorted(x_sorted, values, "left")
    tied = x_sorted[np.minimum(gap, x_sorted.size - 1)] == values
    change = gap[1:] != gap[:-1]
    useful = tied | np.concatenate([[True], change]) | np.concatenate([change, [True]])
    values, starts, ends = values[useful], starts[useful], ends[useful]
    # anchors far outside the reference (0 below, 1 above), so that the step's own ends are inner
    # edges the site may drop: a few of its records beyond the reference's range are no reason to refuse
    margin = values[-1] - values[0] + 1.0
    edges = np.concatenate([[values[0] - margin], np.column_stack([values - delta, values + delta]).ravel(),
                            [values[-1] + margin]])
    cdf = np.concatenate([[0.0], np.column_stack([starts, ends]).ravel() / reference.size, [1.0]])
    return edges, cdf


@register(
    "placementSumsDS",
    "aggregate",
    [
        _TRUTH,
        _SCORE,
        Param("reference", P.TABLE, "pooled (noisy) scores of all sites, from referenceScoresDS"),
    ],
    checks=_REFERENCE,
    secure_sum=PLACEMENT_SUMS,
)
def placement_sums(ctx: CallContext, truth: pd.Series, score: pd.Series, reference: pd.DataFrame
                   ) -> Generator[Declared, Any, dict[str, Any]]:
    """Sums and sums of squares of this site's placement values (Schalk et al. 2024, eqs. 1-2; DeLong 1988).

    For a positive with score :math:`x`, :math:`V_{10} = \\tilde S_0(x)` counts the reference
    negatives below :math:`x` (ties one half); for a negative, :math:`V_{01}` counts the reference
    positives above it. The empirical AUC is :math:`\\bar V_{10}` and its DeLong variance is
    :math:`\\widehat{var}(V_{10})/n_1 + \\widehat{var}(V_{01})/n_0` (pROC's ``ci.auc(method =
    "delong")`` when the references are the exact pooled scores).
    """
    y, p = outcome_and_score(ctx, truth, score)
    root = ctx.root_column(score)
    v10 = yield from reference_cdf(ctx, reference, 0, p, np.sort(p[y == 1]), 0.5, root)
    v01 = 1.0 - (yield from reference_cdf(ctx, reference, 1, p, np.sort(p[y == 0]), 0.5, root))
    return placement_sums_result([(v10, v01)])


class PlacementSums:
    """What leaves the site of its placement values: counts, sums and sums of squares per class,
    added up a batch at a time (:meth:`add`: the positives' :math:`V_{10}`, the negatives' :math:`V_{01}`)."""

    def __init__(self) -> None:
        self.sums: dict[str, Any] = {"n1": 0, "n0": 0, "sum_v10": 0.0, "sumsq_v10": 0.0, "sum_v01": 0.0,
                                     "sumsq_v01": 0.0}

    def add(self, v10: np.ndarray, v01: np.ndarray) -> None:
        out = self.sums
        out["n1"] += int(v10.size)
        out["n0"] += int(v01.size)
        out["sum_v10"] += float(v10.sum())
        out["sumsq_v10"] += float(np.dot(v10, v10))
        out["sum_v01"] += float(v01.sum())
        out["sumsq_v01"] += float(np.dot(v01, v01))


def placement_sums_result(batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> dict[str, Any]:
    """:class:`PlacementSums` of ``batches`` of (:math:`V_{10}`, :math:`V_{01}`)."""
    sums = PlacementSums()
    for v10, v01 in batches:
        sums.add(v10, v01)
    return sums.sums


@register(
    "rocGlmDataDS",
    "assign",
    [
        _TRUTH,
        _SCORE,
        Param("reference", P.TABLE, "pooled (noisy) scores of all sites, from referenceScoresDS"),
        Param("thresholds", P.INTEGER, "number of equidistant thresholds t_j = j / (n + 1)", minimum=2,
              maximum=1000),
    ],
    checks=_REFERENCE,
)
def roc_glm_data(ctx: CallContext, truth: pd.Series, score: pd.Series, reference: pd.DataFrame,
                 thresholds: int) -> Generator[Declared, Any, pd.DataFrame]:
    """The site's intermediate ROC-GLM data (Schalk et al. 2024, "The ROC-GLM"), aggregated over thresholds.

    Placement values of the positives :math:`PV_i = \\tilde S_0(F_{1,i})` (share of reference
    negatives above the score), thresholds :math:`t_j = j/(n_T+1)`, responses
    :math:`u_{ij} = 1(PV_i \\le t_j)`; stored as rows ``(u, x = \\Phi^{-1}(t_j), w = count)``
    for a weighted probit regression ``u ~ x``. The table stays on the site.
    """
    y, (p,) = complete_pairs(ctx, truth, {"score": score})
    pv = 1.0 - (yield from reference_cdf(ctx, reference, 0, p, np.sort(p[y == 1]), 1.0, ctx.root_column(score)))
    return roc_glm_table(pv, thresholds, y)


def roc_glm_table(pv: np.ndarray, thresholds: int, y: np.ndarray) -> pd.DataFrame:
    """Schalk et al.'s (2024) ROC-GLM rows from the positives' placement values: thresholds
    :math:`t_j = j/(n_T+1)`, responses :math:`u_{ij} = 1(PV_i \\le t_j)` aggregated as
    ``(u, x = \\Phi^{-1}(t_j), w = count)``. Its counts summarize the site's records of outcome
    ``y``, so every release from it applies rule A1 to those records (:data:`RECORDS_BEHIND`): per
    site, or pooled over the sites in a pooled release."""
    u, x, w = roc_glm_rows(pv, thresholds)
    frame = pd.DataFrame({"u": u, "x": x, "w": w})
    # x are the thresholds, which the analyst knows: a fit at its coefficients would be equations in the counts w
    frame.attrs[PUBLIC_DESIGN] = True
    frame.attrs[RECORDS_BEHIND] = class_counts(y)
    return frame


@register("brierDS", "aggregate", [_TRUTH, _SCORE], checks=_A1,
          secure_sum=SecureSum(("n", "sum_y", "sum_p", "sum_sq", "spiegelhalter_num", "spiegelhalter_var")))
def brier(ctx: CallContext, truth: pd.Series, score: pd.Series) -> dict[str, Any]:
    """Sums for the Brier score (Schalk et al. 2024, eq. 5) and Spiegelhalter's z (Huang 2020, §3.5.1).

    :math:`BS = \\sum (y - p)^2 / n`; :math:`z = \\sum (y - p)(1 - 2p) /
    \\sqrt{\\sum (1 - 2p)^2 p (1 - p)}`.
    """
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    sum_sq = num = var = 0.0
    for rows in row_batches(y.size):
        r, s = y[rows] - p[rows], 1 - 2 * p[rows]
        sum_sq += float(np.dot(r, r))
        num += float(np.dot(r, s))
        var += float(np.sum(s**2 * p[rows] * (1 - p[rows])))
    return {"n": int(y.size), "sum_y": float(y.sum()), "sum_p": float(p.sum()), "sum_sq": sum_sq,
            "spiegelhalter_num": num, "spiegelhalter_var": var}


def calibration_cuts(n_bins: int) -> tuple[Cut, ...]:
    """The inner cuts of ``n_bins`` equal-width bins on [0, 1], closed on the left (the last bin
    also on the right, so 0 is in the first bin and 1 in the last; R: ``cut(p, (0:n_bins) / n_bins,
    right = FALSE, include.lowest = TRUE)``). The edges are k / n_bins as division rounds them (0.3, not
    ``seq``'s or ``linspace``'s 3 * 0.1 = 0.30000000000000004), so a decision threshold of 0.3 is the same
    cut as the bins' edge, not a second cut a float's last bit beside it (which the release gate would
    drop)."""
    return cuts_from(np.arange(1, n_bins) / n_bins, inclusive=False)


def binned_sums(lower: float, upper: float) -> Callable[[Released], dict[str, Any]]:
    """The result of a binned-sums release: the edges of the released cells (from ``lower`` to
    ``upper``), per cell the count, the sum of predictions and of outcomes, and what the release
    gate coarsened (``dropped``: requested edges whose cells it merged with the next; ``moved``:
    edges it released at an earlier cut instead; ``pooled``: cells pooled over sites)."""

    def render(released: Released) -> dict[str, Any]:
        return {"edges": [lower, *(c.value for c in released.cuts), upper], "n": released.counts.tolist(),
                "sum_p": released.sums["sum_p"].tolist(), "sum_y": released.sums["sum_y"].tolist(),
                **released.describe()}

    return render


@register(
    "calibrationBinsDS",
    "aggregate",
    [_TRUTH, _SCORE, Param("bins", P.INTEGER, "number of equal-width bins on [0, 1]", minimum=2, maximum=100)],
    checks=GATE_RULES,
    cells=True,
)
def calibration_bins(ctx: CallContext, truth: pd.Series, score: pd.Series, bins: int) -> Intervals:
    """Per-bin counts, sums of predictions and of outcomes for the calibration curve (Schalk et al. 2024),
    over ``bins`` equal-width bins on [0, 1] (:func:`calibration_cuts`). The release gate
    (:mod:`dsfed_server.disclosure.gate`) merges a bin holding fewer than q records with the next
    (per site, or pooled over the sites under secure aggregation)."""
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    return Intervals(p, calibration_cuts(bins), binned_sums(0.0, 1.0), {"sum_p": p, "sum_y": y},
                     what="calibration bins", column=ctx.root_column(score), rows=ctx.record_rows(truth, score),
                     strata=ctx.strata(score))


MAX_DECISION_THRESHOLDS = 1000  # thresholdBinsDS: thresholds per call


@register(
    "thresholdBinsDS",
    "aggregate",
    [_TRUTH, _SCORE,
     Param("thresholds", P.NUMBERS, "increasing decision thresholds strictly between 0 and 1, e.g. c(0.2, 0.5)")],
    checks=GATE_RULES,
    cells=True,
)
def threshold_bins(ctx: CallContext, truth: pd.Series, score: pd.Series, thresholds: list[float]) -> Intervals:
    """Per cell between decision thresholds: the count, the sum of predictions and of outcomes,
    for metrics at thresholds and decision curves (pROC's ``coords``; Vickers & Elkin 2006).

    The cells are ``[0, t_1), [t_1, t_2), ..., [t_m, 1]``: a record is called positive at ``t``
    when its score is at least ``t``, as ``pROC::roc(direction = "<")`` and the decision curve's
    "treat if p >= t" do, and the same cuts as the calibration curve's bins
    (:func:`calibration_cuts`), so a threshold at a bin edge is that edge. The analyst's
    thresholds are cuts: the release gate keeps only those leaving 0 or at least q records (and
    the site's secret margin) to every other cut released on the score's column, and merges the
    cells of the others (the result lists them, ``dropped``/``moved``)."""
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    asked = np.asarray(thresholds, dtype=float)
    if asked.size > MAX_DECISION_THRESHOLDS:
        raise CallError(f"at most {MAX_DECISION_THRESHOLDS} thresholds per call (got {asked.size})",
                        hint="ask for a coarser grid of thresholds")
    if asked.size == 0 or not np.all(np.isfinite(asked)) or np.any(asked <= 0) or np.any(asked >= 1) \
            or np.any(np.diff(asked) <= 0):
        raise CallError("thresholds must be strictly increasing numbers strictly between 0 and 1",
                        hint="e.g. c(0.1, 0.2, 0.5)")
    return Intervals(p, cuts_from(asked, inclusive=False), binned_sums(0.0, 1.0),
                     {"sum_p": p, "sum_y": y}, what="threshold cells", column=ctx.root_column(score),
                     strata=ctx.strata(score), rows=ctx.record_rows(truth, score))


@register(
    "countBelowDS",
    "aggregate",
    [Param("x", P.VECTOR, "a numeric vector"), Param("thresholds", P.NUMBERS, "values to count below")],
    checks=GATE_RULES,
    cells=True,
)
def count_below(ctx: CallContext, x: pd.Series, thresholds: list[float]) -> Intervals:
    """For each threshold t, the number of values <= t -- or null where the release gate does not
    release that cut (it would leave fewer than q values between it and another cut, or an end).
    Drives the distributed quantile search of the per-site path (only counts cross the wire)."""
    values = numeric(x)
    values = values[~np.isnan(values)]
    ctx.guard.min_count(values.size, "valid values")
    if len(thresholds) > MAX_THRESHOLDS:
        raise CallError(f"at most {MAX_THRESHOLDS} thresholds per call (got {len(thresholds)})",
                        hint="ask in several calls")
    asked = [float(t) for t in thresholds]
    if not all(np.isfinite(asked)):
        raise CallError("thresholds must be finite numbers")
    cuts = cuts_from(sorted(set(asked)), inclusive=True)

    def render(released: Released) -> dict[str, Any]:
        below = dict(zip(released.cuts, np.cumsum(released.counts[:-1]).tolist()))
        return {"n": int(released.counts.sum()), "counts": [below.get(Cut(t, True)) for t in asked],
                **released.describe()}

    return Intervals(values, cuts, render, what="counts below thresholds", column=ctx.root_column(x),
                     strata=ctx.strata(x), rows=ctx.record_rows(x))


@register(
    "groupSumsDS",
    "aggregate",
    [_TRUTH, _SCORE, Param("breaks", P.NUMBERS, "increasing group boundaries covering all scores")],
    checks=GATE_RULES,
    cells=True,
)
def group_sums(ctx: CallContext, truth: pd.Series, score: pd.Series, breaks: list[float]) -> Intervals:
    """Observed and expected events per group for Hosmer-Lemeshow and ECE/MCE (Huang 2020, §3.5.3, §4.8).

    Groups are R's ``cut(score, breaks, include.lowest = TRUE)``: (b0, b1], ..., with the first
    closed. The release gate merges a group holding fewer than q records with the next.
    """
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    edges = np.asarray(breaks, dtype=float)
    if edges.size < 2 or np.any(np.diff(edges) <= 0) or not np.all(np.isfinite(edges)):
        raise CallError("breaks must be at least two strictly increasing finite numbers")
    if p.min() < edges[0] or p.max() > edges[-1]:
        raise CallError("breaks must cover every score (first break <= min, last break >= max)")
    return Intervals(p, cuts_from(edges[1:-1], inclusive=True), binned_sums(float(edges[0]), float(edges[-1])),
                     {"sum_p": p, "sum_y": y}, what="groups", column=ctx.root_column(score), strata=ctx.strata(score),
                     rows=ctx.record_rows(truth, score))


@register("calibrationFrameDS", "assign", [_TRUTH, _SCORE], checks=_A1)
def calibration_frame(ctx: CallContext, truth: pd.Series, score: pd.Series) -> pd.DataFrame:
    """A table (y, lp = logit(p)) for logistic recalibration by the distributed GLM
    (calibration intercept and slope, Huang 2020, §3.5; ``rms::val.prob``'s Intercept and Slope).
    Records with p = 0 or 1 (infinite logit) are left out, as ``val.prob`` does. A table of the
    records themselves: the GLM on it applies q to its records and outcome levels, per site or pooled."""
    y, (p,) = complete_pairs(ctx, truth, {"score": score}, probability=True)
    finite = (p > 0) & (p < 1)
    y, p = kept(y, finite), kept(p, finite)
    lp = np.subtract(1.0, p)  # log(p / (1 - p)) in one array
    np.log(np.divide(p, lp, out=lp), out=lp)
    frame = pd.DataFrame({"y": y, "lp": lp}, copy=False)
    frame = derived_rows(frame, truth, score, finite, {"y": (truth.name, "identity"), "lp": (score.name, "logit")})
    found = own_meaning(score)
    if found is not None and len(found.roots) > 1 and ROWS in frame.attrs:  # the logit of a column of several roots
        frame.attrs[MEANINGS] = {"lp": Meaning(found.roots, indicators=found.indicators)}
    return frame


def kept(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``values[mask]``; ``values`` themselves, not a copy, when the mask keeps them all."""
    return values if mask.all() else values[mask]


def derived_rows(frame: pd.DataFrame, truth: pd.Series, score: pd.Series, kept_rows: np.ndarray,
                 columns: dict[str, tuple[object, str]]) -> pd.DataFrame:
    """Mark a table derived from the complete (truth, score) pairs (``kept_rows`` among them) with the
    site table rows it holds and, per column, the table column and monotone transform it comes from, so
    that its cuts and subsets count in the table's release history (:mod:`~dsfed_server.disclosure.provenance`)."""
    rows_t, rows_s = truth.attrs.get(ROWS), score.attrs.get(ROWS)
    if not (isinstance(rows_t, Rows) and isinstance(rows_s, Rows) and rows_t.lineage == rows_s.lineage
            and (rows_t.index is rows_s.index or np.array_equal(rows_t.index, rows_s.index))
            and rows_s.index.size == len(score)):
        return frame
    complete = ~(truth.isna().to_numpy() | score.isna().to_numpy())
    held = rows_s if complete.all() and kept_rows.all() else Rows(rows_s.lineage, rows_s.index[complete][kept_rows],
                                                                  rows_s.n_root)
    mark_rows(frame, held)
    frame.attrs[DERIVED] = {name: source for name, source in columns.items() if isinstance(source[0], str)}
    return frame
