"""Applying a recalibration map at the site (seed 001, chapter 4: federated (smooth) isotonic
recalibration; §3.6.1-3.6.2: Platt scaling and isotonic regression).

The analyst fits the map from aggregates (the distributed GLM for Platt scaling; weighted PAVA on
disclosure-checked bin sums for isotonic regression) and sends it back to every site **as numbers
only** -- two coefficients, or the knots of a monotone interpolant -- never as code. The site checks
the numbers (finite, knots strictly increasing inside [0, 1], values in [0, 1] and non-decreasing)
and stores the recalibrated probabilities as a new server-side vector. Nothing leaves the site, so
no disclosure rule applies here; the recalibrated vector is then subject to the same rules as any
score when it is validated (``brierDS``, ``groupSumsDS``, ...).

For governance -- an open disclosure issue: this is an analyst-parameterised transform of a
record-level value. A step map with one jump just below a site's highest score (or a PCHIP with two
close knots, or a steep logistic map) turns the score into a 0/1 indicator of the top record, and
``brierDS`` on it releases that record's outcome: sum_p counts the records above the threshold (1)
and sum_sq = sum_y + sum_p - 2 * (events among them). Only the site's total n is checked against q.
Checks on the map alone (records per knot interval, slope bounds) either refuse legitimate maps or
are evaded (near-flat maps, linear combinations with the raw-score sums); the protection belongs on
the release side (a dominance rule for sums of transformed scores, or the differencing audit).
Until then only the test profile (``testing-no-noise.toml``) enables ``recalibrateDS``; a site
enables it by adding it to its ``[functions] enabled`` list, accepting this risk.
``tests/test_adversarial.py`` runs the isolating map against the default rules (refused as not enabled).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsfed_core.recalibration import METHODS, apply_map
from dsfed_server.context import CallContext, numeric
from dsfed_core.errors import CallError
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
)
def recalibrate(ctx: CallContext, score: pd.Series, method: str, coefficients: list[float] | None,
                knots: list[float] | None, values: list[float] | None) -> pd.Series:
    """Recalibrated probabilities of ``score`` under a map given as numbers (seed 001, ch. 4).

    ``logistic``: :math:`\\operatorname{expit}(a + b\\,\\operatorname{logit}(p))` with
    ``coefficients = c(a, b)`` (Platt scaling, §3.6.1). ``pchip``: the smooth isotonic regression
    map, a PCHIP through ``(knots, values)`` (§4.6, Algorithm 4.1). ``step``: the isotonic step
    function, ``values[s]`` on ``(knots[s-1], knots[s]]`` (eq. 3.9). Missing scores stay missing.
    The map is checked first: finite numbers, knots strictly increasing in [0, 1], values in
    [0, 1] and non-decreasing; a bad map is refused with the reason.
    """
    coefficients_, knots_, values_ = _array(coefficients), _array(knots), _array(values)
    check_map(method, coefficients_, knots_, values_)
    p = numeric(score, "score")
    if np.any((p < 0) | (p > 1)):
        raise CallError("score must be a probability in [0, 1]")
    out = apply_map(p, method, coefficients_, knots_, values_)
    return pd.Series(out, index=score.index, name=f"{score.name or 'score'}.recal", dtype=float)
