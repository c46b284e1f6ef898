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

Only sums over at least q records, positives and negatives leave the site; each score's reference is
read at the cells the release gate passes, as for the single-score placement sums, and the cross
products at the joint cells of the two, released as a two-way table is. ``pairedPlacementDS`` releases
those cells before it reads the sums over them: it yields their declarations
(:mod:`~dsfed_server.disclosure.declared`) and the service releases them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.context import CallContext
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.declared import Declared, JointCells
from dsfed_server.disclosure.differencing import Rows
from dsfed_server.disclosure.gate import Cut
from dsfed_server.functions.curves import _WITHIN, SITE_DERIVED, placement_cells, placements, pooled_cells
from dsfed_server.functions.validation import PlacementSums, outcome_and_scores
from dsfed_server.registry import P, Param, SecureSum, register

_TRUTH = Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y")
_A1 = ("disclosure.q_threshold",)
PAIRED_PLACEMENT_SUMS = SecureSum(tuple(
    f"{field}_{side}" for side in ("a", "b") for field in ("n1", "n0", "sum_v10", "sumsq_v10", "sum_v01", "sumsq_v01")
) + ("cross_v10", "cross_v01", "joint_v10_a", "joint_v10_b", "joint_v01_a", "joint_v01_b", "joint_coarsened"))


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
    checks=GATE_RULES,
    secure_sum=PAIRED_PLACEMENT_SUMS,
)
def paired_placement_sums(ctx: CallContext, truth: pd.Series, score_a: pd.Series, reference_a: pd.DataFrame,
                          score_b: pd.Series, reference_b: pd.DataFrame, within_bin: str
                          ) -> Generator[Declared, Any, dict[str, Any]]:
    """Both scores' placement sums (``_a``, ``_b``) and the cross products :math:`\\sum V^A_{10} V^B_{10}`
    over the positives and :math:`\\sum V^A_{01} V^B_{01}` over the negatives, on the records complete in the
    outcome and both scores.

    Each score's sums are read at the cells of its reference's bins this site releases
    (:func:`~dsfed_server.functions.curves.placement_cells`), as ``histPlacementSumsDS``'s are (in a pooled
    release, a reference the sites derived at its leaves: :func:`side_cells`).
    The cross products depend on a record through the pair of its cells, so they are sums over the **joint cells**
    (a cell of A's with one of B's), released as a two-way table is: every non-empty joint cell holds at
    least q records, and their row sets pass the audit (:meth:`Guard.joint_cells`). Where they do not, A's and
    B's cells are merged in pairs until they do (at worst one joint cell: no covariance between the models is
    released). The cross
    products and each score's sums over the same joint cells (``joint_v10_a``, ...: the covariance's means)
    are computed there; ``joint_coarsened`` is 1 where this site merged them, and ``joint_cells`` names the
    joint cells' cuts and why."""
    ctx.guard.placement_within_bin(within_bin)
    y, (pa, pb) = outcome_and_scores(ctx, truth, {"score_a": score_a, "score_b": score_b})
    rows = ctx.record_rows(truth, score_a, score_b)
    cuts_a, cells_a = yield from side_cells(ctx, pa, reference_a, score_a, rows)
    cuts_b, cells_b = yield from side_cells(ctx, pb, reference_b, score_b, rows)
    joint_a, joint_b, why = yield JointCells(pa, pb, cuts_a, cuts_b, rows)
    out: dict[str, Any] = {"placement_cells_a": cells_a, "placement_cells_b": cells_b}
    for side, p, ref, cuts in (("a", pa, reference_a, cuts_a), ("b", pb, reference_b, cuts_b)):
        sums = PlacementSums()
        sums.add(*placements(ref, cuts, y, p, within_bin))
        out |= {f"{k}_{side}": v for k, v in sums.sums.items()}
    for cls, a, b in zip(("v10", "v01"), placements(reference_a, joint_a, y, pa, within_bin),
                         placements(reference_b, joint_b, y, pb, within_bin)):
        out |= {f"cross_{cls}": float(np.dot(a, b)), f"joint_{cls}_a": float(a.sum()),
                f"joint_{cls}_b": float(b.sum())}
    out["joint_coarsened"] = float(bool(why))
    out["joint_cells"] = {"a": [[c.value, c.inclusive] for c in joint_a],
                          "b": [[c.value, c.inclusive] for c in joint_b], "why": why}
    return out


def side_cells(ctx: CallContext, p: np.ndarray, reference: pd.DataFrame, score: pd.Series, rows: Rows | None
               ) -> Generator[Declared, Any, tuple[tuple[Cut, ...], dict[str, Any]]]:
    """The cells one score's sums are read at: in a pooled release of a reference the sites derived, the cells
    a pooled release of its placement sums over the same records released (``histPlacementSumsDS`` pooled:
    the pooled gate, the row-set audit against every cell and subset released before, the dominance rule),
    else the cells this site releases (:func:`~dsfed_server.functions.curves.placement_cells`, declared
    part-way).

    The reference's leaves alone are not enough: their edges were released on the pooled counts of the records
    the reference was derived from, so references derived on each of two nested subsets pass them, and the
    sums at the leaves over the two subsets tell, by difference, the records between them leaf by leaf. The
    pooled placement sums' cells are audited by row sets against the cells released before; these sums are
    read at the same cells, over the same records, and tell no more than those cells' counts."""
    if ctx.guard.deferred is not None and ctx.session.derived_by_sites(reference, SITE_DERIVED):
        return pooled_cells(ctx, reference, rows, p)
    return (yield from placement_cells(ctx, p, reference, score, rows))


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
