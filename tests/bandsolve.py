"""The equations an attacker solves for a few records' values from their exact sums, with their Jacobian.

The GLM red-team tests read a band of records from what the sites release about it: each column's sum, sum of
squares and sum with the outcome, the columns' cross sums, and for each logistic fit its score equations and
information matrix at the fit's coefficients. The unknowns are each column's values divided by its scale; every
equation is divided by the scales of its terms, so that all are of order one. The Jacobian is the exact one (the
logistic fit's terms differentiated through the mean, McCullagh and Nelder 1989, section 4.4), so that a
trust-region solve (``scipy.optimize.least_squares``) costs one residual and one Jacobian per step instead of one
residual per unknown.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult, least_squares
from scipy.special import expit

_UPPER = {p: np.triu_indices(p) for p in range(1, 6)}  # a fit's information matrix, its upper triangle
Fit = tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]  # columns, coefficients, information, score


@dataclass(frozen=True)
class Band:
    """The released sums of ``n`` records' ``columns`` (``moments[c] = (sum, sum of squares)``,
    ``moments["y", c]`` the sum with the outcome, ``moments[a, b]`` the cross sums, for ``a`` before ``b`` in
    ``columns``) and logistic fits over them; ``scale[c]`` divides column ``c``'s values."""

    n: int
    columns: tuple[str, ...]
    scale: dict[str, float]
    moments: dict
    fits: Sequence[Fit]

    def _values(self, v: np.ndarray) -> dict[str, np.ndarray]:
        return {c: v[i * self.n:(i + 1) * self.n] for i, c in enumerate(self.columns)}

    def residuals(self, v: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The sums of values ``v`` (scaled) and outcomes ``y`` less the released ones, each scaled: 0 at the truth."""
        u, s, m = self._values(v), self.scale, self.moments
        out = []
        for c in self.columns:
            out += [u[c].sum() - m[c][0] / s[c], u[c] @ u[c] - m[c][1] / s[c] ** 2, y @ u[c] - m["y", c] / s[c]]
        for a, b in itertools.combinations(self.columns, 2):
            out.append(u[a] @ u[b] - m[a, b] / (s[a] * s[b]))
        for columns, coef, information, score in self.fits:
            design = np.column_stack([np.ones(self.n)] + [u[c] for c in columns])
            unit = np.array([1.0] + [s[c] for c in columns])
            mu = expit(design @ (coef * unit))
            out += list(design.T @ (y - mu) - score / unit)
            out += list((design.T @ (design * (mu * (1 - mu))[:, None]) - information / np.outer(unit, unit))
                        [_UPPER[len(coef)]])
        return np.array(out)

    def jacobian(self, v: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The derivatives of :meth:`residuals` in ``v``: one row per equation, one column per unknown."""
        n, u = self.n, self._values(v)
        at = {c: slice(i * n, (i + 1) * n) for i, c in enumerate(self.columns)}
        rows = []
        for c in self.columns:
            for d in (np.ones(n), 2 * u[c], y):
                row = np.zeros(v.size)
                row[at[c]] = d
                rows.append(row)
        for a, b in itertools.combinations(self.columns, 2):
            row = np.zeros(v.size)
            row[at[a]], row[at[b]] = u[b], u[a]
            rows.append(row)
        for columns, coef, _, _ in self.fits:
            design = np.column_stack([np.ones(n)] + [u[c] for c in columns])
            slope = coef * np.array([1.0] + [self.scale[c] for c in columns])  # per unit of the scaled values
            mu = expit(design @ slope)
            w = mu * (1 - mu)
            dw = w * (1 - 2 * mu)
            p = len(coef)
            score = np.zeros((p, v.size))
            information = np.zeros((p, p, v.size))
            for k, c in enumerate(columns, start=1):  # column c is the design's k-th
                own = np.zeros((p, n))
                own[k] = 1.0  # d design[:, j] / d u_c = 1 where j = k
                score[:, at[c]] = own * (y - mu) - design.T * (w * slope[k])
                for j in range(p):
                    for i in range(j, p):
                        information[j, i, at[c]] = (own[j] * design[:, i] + design[:, j] * own[i]) * w \
                            + design[:, j] * design[:, i] * dw * slope[k]
            rows += list(score)
            rows += [information[j, i] for j, i in zip(*_UPPER[p])]
        return np.array(rows)

    def solve(self, start: np.ndarray, y: np.ndarray, bounds: tuple[np.ndarray, np.ndarray],
              **options) -> OptimizeResult:
        """Least squares from ``start`` with the outcomes ``y`` fixed."""
        return least_squares(self.residuals, start, jac=self.jacobian, bounds=bounds, args=(y,), **options)

    def solve_first(self, start: np.ndarray, fixed: np.ndarray, y: np.ndarray, **options) -> OptimizeResult:
        """Least squares in the first column's values alone, the others ``fixed`` (scaled), the first in [0, 1]."""
        n = self.n
        return least_squares(lambda f: self.residuals(np.r_[f, fixed], y), start,
                             jac=lambda f: self.jacobian(np.r_[f, fixed], y)[:, :n], bounds=(0, 1), **options)


def outcome_patterns(n: int, k: int) -> Iterator[np.ndarray]:
    """Every way of placing ``k`` positives among ``n`` records, as outcome vectors."""
    for ones in itertools.combinations(range(n), k):
        y = np.zeros(n)
        y[list(ones)] = 1
        yield y
