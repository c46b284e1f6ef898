"""Site parts of a paired comparison of two models on the same patients.

Two scores of the same records (two models applied at the site, ``predictDS``) are compared on
the records complete in the outcome and both scores:

* ``pairedPlacementDS``: each score's placement values against its own global histogram
  CDFs (as ``histPlacementSumsDS``), and the sums of their cross products over the positives and
  over the negatives: the covariance DeLong's paired test needs (DeLong, DeLong & Clarke-Pearson
  1988, eq. for :math:`S_{10}, S_{01}`; pROC ``roc.test(method = "delong", paired = TRUE)``).
* ``pairedBrierDS``: the count, both models' sums of squared errors, and the sum of squares of
  the per-record differences :math:`d_i = (y_i - p_{A,i})^2 - (y_i - p_{B,i})^2`, for the two
  Brier scores and the paired test of their difference.

Only sums over at least q records, positives and negatives leave the site (rule A1); the
references go through the same checks as the single-score placement sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext
from dsfed_server.functions.curves import _WITHIN, hist_placements
from dsfed_server.functions.validation import PlacementSums, outcome_and_scores
from dsfed_server.registry import P, Param, SecureSum, register

_TRUTH = Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y")
_A1 = ("disclosure.q_threshold",)
PAIRED_PLACEMENT_SUMS = SecureSum(tuple(
    f"{field}_{side}" for side in ("a", "b") for field in ("n1", "n0", "sum_v10", "sumsq_v10", "sum_v01", "sumsq_v01")
) + ("cross_v10", "cross_v01"))


@register(
    "pairedPlacementDS",
    "aggregate",
    [
        _TRUTH,
        Param("score_a", P.VECTOR, "the first model's scores, e.g. P$glm"),
        Param("reference_a", P.TABLE, "global CDFs of both classes of score_a, from histReferenceDS"),
        Param("score_b", P.VECTOR, "the second model's scores of the same records, e.g. P$gbm"),
        Param("reference_b", P.TABLE, "global CDFs of both classes of score_b, from histReferenceDS"),
        _WITHIN,
    ],
    checks=_A1 + ("disclosure.cut_history", "disclosure.cut_margin"),
    secure_sum=PAIRED_PLACEMENT_SUMS,
)
def paired_placement_sums(ctx: CallContext, truth: pd.Series, score_a: pd.Series, reference_a: pd.DataFrame,
                          score_b: pd.Series, reference_b: pd.DataFrame, within_bin: str) -> dict[str, Any]:
    """Both scores' placement sums (``_a``, ``_b``) and the cross products
    :math:`\\sum V^A_{10} V^B_{10}` over the positives and :math:`\\sum V^A_{01} V^B_{01}` over
    the negatives, on the records complete in the outcome and both scores."""
    ctx.guard.placement_within_bin(within_bin)
    y, (pa, pb) = outcome_and_scores(ctx, truth, {"score_a": score_a, "score_b": score_b})
    batches_a, batches_b = (hist_placements(ctx, reference_a, y, pa, score_a, within_bin),
                            hist_placements(ctx, reference_b, y, pb, score_b, within_bin))
    sides = {"a": PlacementSums(), "b": PlacementSums()}
    cross = np.zeros(2)
    for (a10, a01), (b10, b01) in zip(batches_a, batches_b):  # the same records' batches, in order
        cross += (np.dot(a10, b10), np.dot(a01, b01))
        sides["a"].add(a10, a01)
        sides["b"].add(b10, b01)
    return {**{f"{k}_{side}": v for side, s in sides.items() for k, v in s.sums.items()},
            "cross_v10": float(cross[0]), "cross_v01": float(cross[1])}


@register(
    "pairedBrierDS",
    "aggregate",
    [
        _TRUTH,
        Param("score_a", P.VECTOR, "the first model's predicted probabilities, e.g. P$glm"),
        Param("score_b", P.VECTOR, "the second model's predicted probabilities of the same records, e.g. P$gbm"),
    ],
    checks=_A1,
    secure_sum=SecureSum(("n", "sum_sq_a", "sum_sq_b", "sumsq_d")),
)
def paired_brier(ctx: CallContext, truth: pd.Series, score_a: pd.Series, score_b: pd.Series) -> dict[str, Any]:
    """Count, :math:`\\sum (y - p_A)^2`, :math:`\\sum (y - p_B)^2` (Schalk et al. 2024, eq. 5 for each Brier
    score) and :math:`\\sum d_i^2`, :math:`d_i = (y_i - p_{A,i})^2 - (y_i - p_{B,i})^2`."""
    y, (pa, pb) = outcome_and_scores(ctx, truth, {"score_a": score_a, "score_b": score_b}, probability=True)
    ea, eb = (y - pa) ** 2, (y - pb) ** 2
    return {"n": int(y.size), "sum_sq_a": float(ea.sum()), "sum_sq_b": float(eb.sum()),
            "sumsq_d": float(np.dot(ea - eb, ea - eb))}
