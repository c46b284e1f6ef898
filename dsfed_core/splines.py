"""Restricted cubic splines as ``rms::rcs`` builds them (``Hmisc::rcspline.eval``, ``norm = 2``), and
R's type-7 quantiles from order statistics: evaluated alike by the sites (the basis of their records,
the knots from pooled order statistics) and by the analyst (the basis on a grid of the curve).

References
----------
Harrell (2015), *Regression Modeling Strategies*, 2nd ed., §2.4.5 (restricted cubic splines, eq. 2.25,
and the default knot quantiles of Table 2.3); Hyndman & Fan (1996), definition 7.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def rcs_probs(nk: int) -> tuple[float, ...]:
    """``rcspline.eval``'s knot quantiles for ``nk`` knots: ``seq(outer, 1 - outer, length = nk)`` with
    ``outer`` 0.1 for 3 knots, 0.05 for 4 to 6, 0.025 from 7 (Harrell 2015, Table 2.3).

    >>> rcs_probs(4)
    (0.05, 0.35, 0.65, 0.95)
    """
    outer = 0.1 if nk == 3 else 0.025 if nk > 6 else 0.05
    return tuple(float(round(v, 12)) for v in np.linspace(outer, 1 - outer, nk))


def type7_order(n: int, prob: float) -> tuple[int, float]:
    """The order statistic :math:`j = \\lfloor h \\rfloor` (1-based) and weight :math:`h - j` of R's
    type-7 quantile, :math:`h = (n - 1) p + 1`: :math:`Q(p) = x_{(j)} + (h - j)(x_{(j+1)} - x_{(j)})`.

    >>> type7_order(686, 0.05)
    (35, 0.25)
    """
    h = (n - 1) * prob + 1
    j = min(math.floor(h + 1e-9), n)  # a whole h computed as 34.999999 is 35
    return j, max(h - j, 0.0)


def type7_quantile(order: dict[int, float], n: int, prob: float) -> float:
    """R's ``quantile(x, prob, type = 7)`` from the order statistics ``order`` (1-based) it needs.

    >>> round(type7_quantile({2: 10.0, 3: 20.0}, 5, 0.3), 12)
    12.0
    """
    j, w = type7_order(n, prob)
    return order[j] if w == 0 else order[j] + w * (order[j + 1] - order[j])


def rcs_basis(x: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """The ``nk - 2`` non-linear columns of ``rms::rcs(x, knots)`` (``rcspline.eval(x, knots)``, norm 2):

    .. math:: s_j(x) = (x - t_j)_+^3 + \\frac{(t_{k-1} - t_j)(x - t_k)_+^3 - (t_k - t_j)(x - t_{k-1})_+^3}
              {t_k - t_{k-1}}, \\qquad \\text{all divided by } \\tau^3 = (t_k - t_1)^2 .

    Knots 0, 1, 2, 3 at x = 2 (:math:`\\tau^3 = 9`, the last two knots not reached):
    :math:`s_1 = 2^3/9`, :math:`s_2 = 1^3/9`:

    >>> np.round(rcs_basis(np.array([2.0]), np.array([0.0, 1.0, 2.0, 3.0])), 6)
    array([[0.888889, 0.111111]])
    """
    x = np.asarray(x, dtype=float)
    columns = [rcs_term(x, knots, j) for j in range(len(knots) - 2)]
    return np.column_stack(columns) if columns else np.empty((x.size, 0))


def rcs_term(x: np.ndarray, knots: np.ndarray | Sequence[float], j: int) -> np.ndarray:
    """Column ``j`` (0-based) of :func:`rcs_basis`: :math:`s_{j+1}(x)`."""
    x = np.asarray(x, dtype=float)
    t = np.asarray(knots, dtype=float)
    kd = (t[-1] - t[0]) ** (2 / 3)

    def cube(c: float) -> np.ndarray:
        return np.maximum((x - c) / kd, 0.0) ** 3

    return cube(t[j]) + ((t[-2] - t[j]) * cube(t[-1]) - (t[-1] - t[j]) * cube(t[-2])) / (t[-1] - t[-2])


def rcs_design(lp: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """The design matrix of ``y ~ rms::rcs(lp, knots)``: intercept, ``lp``, then :func:`rcs_basis`."""
    lp = np.asarray(lp, dtype=float)
    return np.column_stack([np.ones(lp.size), lp, rcs_basis(lp, knots)])


def rcs_term_names(nk: int) -> list[str]:
    """The frame's column names of the basis: ``lp``, then ``lp1`` ... ``lp{nk-2}``."""
    return ["lp"] + [f"lp{j}" for j in range(1, nk - 1)]
