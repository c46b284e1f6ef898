"""Applying a recalibration map at the site (Huang 2020, chapter 4: federated (smooth) isotonic
recalibration; §3.6.1-3.6.2: Platt scaling and isotonic regression).

The analyst fits the map from aggregates (the distributed GLM for Platt scaling; weighted PAVA on
disclosure-checked bin sums for isotonic regression) and sends it back to every site **as numbers
only** -- two coefficients, or the knots of a monotone interpolant -- never as code. The site checks
the numbers (finite, knots strictly increasing inside [0, 1], values in [0, 1] and non-decreasing)
and stores the recalibrated probabilities as a new server-side vector. Nothing leaves the site then;
the recalibrated vector is subject to the same rules as any score when it is validated
(``brierDS``, ``groupSumsDS``, ...).

What the site checks before the vector exists (the site controls every cut). A map is a
monotone transform the analyst chose, so the places where it changes fast are cuts of the analyst's
choosing on the score: a step map with one jump just below a site's highest score is an indicator
of the top record, and ``brierDS`` on it would release that record's outcome. The site therefore
treats a map as ``deriveDS`` treats ``ifelse(D$score > k, ...)`` (:func:`map_cuts`):

- the knots of a step map where its value changes and the midpoint
  :math:`\\operatorname{expit}(-a/b)` of a logistic map (where a steep one jumps) are cuts on the
  score's column: they go through the release gate with every cut released before on that column,
  by any analyst (:meth:`~dsfed_server.disclosure.checks.Guard.derived_cuts`, declared as
  :class:`~dsfed_server.disclosure.declared.DerivedCuts`:
  ``disclosure.cut_history``, ``disclosure.cut_margin``, q records in every cell), and are refused
  otherwise;
- a PCHIP is continuous and flat outside its knots: every interval between two knots over which it
  rises holds no record or at least q (``disclosure.q_threshold``, :func:`check_rises`), so two close
  knots cannot ramp around one record; the isolating maps are refused so
  (``tests/test_adversarial.py``);
- a map that leaves few distinct values (at most n/q) must hold q records on each
  (:meth:`~dsfed_server.disclosure.checks.Guard.distinct_values`), and the records of each value
  are row sets audited with every row set released before from the table
  (``disclosure.subset_min_difference``);
- the vector keeps its records' positions in the table, so every later release from it is audited
  with the table's history.

What remains is what ``deriveDS`` (enabled by default) leaves too: between two cuts the gate passed,
the map's values vary smoothly with the score, so sums of the recalibrated score carry more moments
of the scores within cells of at least q records. ``recalibrateDS`` adds no transform ``deriveDS``
cannot make, under the same checks, so the shipped rules files enable both.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from typing import Any, Callable

import numpy as np
import pandas as pd

from scipy import special

from dsfed_core.errors import CallError, DisclosureRefusal
from dsfed_core.recalibration import METHODS, apply_map
from dsfed_server.context import CallContext, numeric
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.declared import Declared, DerivedCuts
from dsfed_server.disclosure.differencing import ROWS, Rows
from dsfed_server.disclosure.expressions import Fn, Meaning
from dsfed_server.disclosure.gate import cuts_from
from dsfed_server.disclosure.provenance import MEANING, meaning
from dsfed_server.functions.tables import cut_cells
from dsfed_server.registry import P, Param, register

MAX_KNOTS = 10000


def check_map(method: str, coefficients: np.ndarray | None, knots: np.ndarray | None,
              values: np.ndarray | None) -> None:
    """Refuse a map that is not a valid recalibration map, saying what is wrong."""
    if method == "logistic":
        if coefficients is None or coefficients.size != 2:
            raise CallError("method 'logistic' needs coefficients = c(intercept, slope)")
        if knots is not None or values is not None:
            raise CallError("method 'logistic' takes coefficients only, not knots or values")
        if not np.all(np.isfinite(coefficients)):
            raise CallError("coefficients must be finite numbers")
        return
    if coefficients is not None:
        raise CallError(f"method {method!r} takes knots and values, not coefficients")
    if knots is None or values is None:
        raise CallError(f"method {method!r} needs knots and values")
    if knots.size != values.size:
        raise CallError(f"knots and values must have the same length (got {knots.size} and {values.size})")
    if not 1 <= knots.size <= MAX_KNOTS:
        raise CallError(f"a map has between 1 and {MAX_KNOTS} knots (got {knots.size})")
    if not (np.all(np.isfinite(knots)) and np.all(np.isfinite(values))):
        raise CallError("knots and values must be finite numbers")
    bad = np.flatnonzero(np.diff(knots) <= 0)
    if bad.size:
        i = int(bad[0])
        raise CallError(f"knots must be strictly increasing: knot {i + 2} ({knots[i + 1]!r}) is not above "
                        f"knot {i + 1} ({knots[i]!r})")
    if knots[0] < 0 or knots[-1] > 1:
        raise CallError(f"knots must lie in [0, 1] (got {knots[0]!r} .. {knots[-1]!r})")
    outside = np.flatnonzero((values < 0) | (values > 1))
    if outside.size:
        raise CallError(f"values must be probabilities in [0, 1]: value {int(outside[0]) + 1} is "
                        f"{values[outside[0]]!r}")
    down = np.flatnonzero(np.diff(values) < 0)
    if down.size:
        i = int(down[0])
        raise CallError(f"values must be non-decreasing (an isotonic map): value {i + 2} ({values[i + 1]!r}) "
                        f"is below value {i + 1} ({values[i]!r})")


def map_cuts(method: str, coefficients: np.ndarray | None, knots: np.ndarray | None,
             values: np.ndarray | None) -> np.ndarray:
    """Where a (checked) map jumps, as cuts on the score in (0, 1): a step map's knots where its value
    changes, a logistic map's midpoint :math:`\\operatorname{expit}(-a/b)` (where a steep one
    jumps; none for a constant map). A PCHIP is continuous: see :func:`check_rises`."""
    if method == "logistic":
        a, b = coefficients  # type: ignore[misc]
        cuts = np.array([special.expit(-a / b)]) if b != 0 else np.array([])
    elif method == "step":
        cuts = knots[:-1][np.diff(values) != 0]  # type: ignore[index]
    else:
        cuts = np.array([])
    return np.unique(cuts[(cuts > 0) & (cuts < 1)])


def check_rises(ctx: CallContext, p: np.ndarray, knots: np.ndarray, values: np.ndarray) -> None:
    """A PCHIP is flat outside its knots and rises only between knots whose values differ: each
    such interval ``(k_i, k_{i+1}]`` must hold no record or at least q of this site's (two close
    knots around one record with a rise between them would make its value a step of its own)."""
    present = np.sort(p[~np.isnan(p)])
    below = np.searchsorted(present, knots, side="right")
    for i in np.flatnonzero(np.diff(values) > 0):
        what = (f"records between the map's knots {i + 1} and {i + 2} ({knots[i]:.6g} to {knots[i + 1]:.6g}), "
                "where it rises")
        try:
            ctx.guard.min_count(int(below[i + 1] - below[i]), what, allow_zero=True)
        except DisclosureRefusal as refused:
            raise DisclosureRefusal(
                refused.message, site=refused.site, function=refused.function, rule=refused.rule,
                hint="a fitted map's knots are the mean scores of its steps over the bins the sites released for "
                     "the fit, bins their release gates chose with secret draws: with other secrets the sites may "
                     "bin otherwise, place the knots elsewhere and pass the same call; fit over fewer, wider bins "
                     "(ds_recalibrate's n_bins, or breaks) so that the map rises over more records, or use "
                     "method='logistic'") from None


def _array(x: object) -> np.ndarray | None:
    return None if x is None else np.asarray(x, dtype=float).ravel()


@register(
    "recalibrateDS",
    "assign",
    [
        Param("score", P.VECTOR, "the predicted probabilities to recalibrate, e.g. D$score"),
        Param("method", P.STRING, "'logistic' (Platt), 'pchip' (smooth isotonic) or 'step' (isotonic)",
              choices=METHODS),
        Param("coefficients", P.NUMBERS, "logistic: c(intercept, slope) on logit(p)", required=False),
        Param("knots", P.NUMBERS, "pchip/step: strictly increasing knots in [0, 1]", required=False),
        Param("values", P.NUMBERS, "pchip/step: non-decreasing values in [0, 1], one per knot", required=False),
    ],
    checks=GATE_RULES,
)
def recalibrate(ctx: CallContext, score: pd.Series, method: str, coefficients: list[float] | None,
                knots: list[float] | None, values: list[float] | None) -> Generator[Declared, Any, pd.Series]:
    """Recalibrated probabilities of ``score`` under a map given as numbers (Huang 2020, ch. 4).

    ``logistic``: :math:`\\operatorname{expit}(a + b\\,\\operatorname{logit}(p))` with
    ``coefficients = c(a, b)`` (Platt scaling, §3.6.1). ``pchip``: the smooth isotonic regression
    map, a PCHIP through ``(knots, values)`` (§4.6, Algorithm 4.1). ``step``: the isotonic step
    function, ``values[s]`` on ``(knots[s-1], knots[s]]`` (eq. 3.9). Missing scores stay missing.
    The map is checked first: finite numbers, knots strictly increasing in [0, 1], values in
    [0, 1] and non-decreasing; a bad map is refused with the reason. Then the map's cuts and its
    values go through the release gate as a derived column's do (module docstring).
    """
    coefficients_, knots_, values_ = _array(coefficients), _array(knots), _array(values)
    check_map(method, coefficients_, knots_, values_)
    p = numeric(score, "score")
    if np.any((p < 0) | (p > 1)):
        raise CallError("score must be a probability in [0, 1]")
    out = apply_map(p, method, coefficients_, knots_, values_)
    rows = score.attrs.get(ROWS)
    rows = rows if isinstance(rows, Rows) and rows.index.size == len(score) else None
    hint = "use a map with fewer, wider steps (fewer bins), fitted on more records"
    levels = ctx.guard.distinct_values(out, "the recalibration map", "values", hint)
    if method == "pchip":
        check_rises(ctx, p, knots_, values_)  # type: ignore[arg-type]
    cells = cut_cells(ctx, score, cuts_from(map_cuts(method, coefficients_, knots_, values_), True),
                      "recalibration map's knots")
    yield DerivedCuts([cells], levels, rows, what="the recalibration map's knots (or a logistic map's midpoint)",
                      instead=hint)
    result = pd.Series(out, index=score.index, name=f"{score.name or 'score'}.recal", dtype=float)
    if rows is not None:
        result.attrs[ROWS] = rows
    result.attrs[MEANING] = _mapped(meaning(ctx.service.catalog, score), partial(
        apply_map, method=method, coefficients=coefficients_, knots=knots_, values=values_))
    return result


def _mapped(score: Meaning, apply: Callable[[np.ndarray], np.ndarray]) -> Meaning:
    """The recalibrated score as a function of the score's root: the map (non-decreasing, its steps
    and midpoint gated above) after what the score is of its root, so that cuts on it are the root's."""
    if score.function is None or not score.monotone:
        return Meaning(score.roots, indicators=score.indicators)  # its comparisons group it as they group the score
    mapped = Fn("map", (score.function,), apply=apply, increasing=True, label="recalibration")
    return Meaning(score.roots, mapped, score.monotone, indicators=score.indicators)
