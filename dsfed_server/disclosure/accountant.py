"""The accountant: what a noisy release costs, how costs compose, and the budgets they are held to.

Pure math (no storage, no call): :mod:`dsfed_server.disclosure.ledger` stores what was spent and
:mod:`dsfed_server.disclosure.scope` charges one call's releases.

Accountant (``ACCOUNTANT = "rdp"``)
    Two valid bounds are kept for the sequence of releases on one table (all analysts, and
    each analyst's part of it) and the tighter is used:

    * basic composition: :math:`(\\sum_i \\varepsilon_i, \\sum_i \\delta_i)`;
    * Renyi DP of the Gaussian mechanism (Mironov 2017, Prop. 7): release *i* with
      l2-sensitivity :math:`\\Delta_i` and noise :math:`\\sigma_i` has
      :math:`RDP(\\alpha) = \\alpha\\rho_i`, :math:`\\rho_i = \\Delta_i^2 / (2\\sigma_i^2)`; RDP adds
      up, and is converted to :math:`(\\varepsilon, \\delta)` at the budget's delta by
      :math:`\\varepsilon(\\delta) = \\min_{\\alpha > 1} \\alpha\\rho + \\log(1 - 1/\\alpha)
      - (\\log\\delta + \\log\\alpha)/(\\alpha - 1)` (Canonne, Kamath & Steinke 2020, Prop. 12;
      Balle et al. 2020, Thm. 21), the conversion Google's ``dp-accounting`` RDP accountant uses
      (``tests/test_budget.py`` checks the two agree).

    The spending is within budget iff one of the bounds is: basic with
    :math:`\\sum\\varepsilon_i \\le E` and :math:`\\sum\\delta_i \\le D`, or RDP with
    :math:`\\varepsilon(D) \\le E`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

ACCOUNTANT = "rdp"
_SLACK = 1e-9  # relative tolerance on budget comparisons (float sums)


def gaussian_rho(*, sigma: float, sensitivity: float) -> float:
    """zCDP / RDP slope :math:`\\rho = \\Delta^2 / (2\\sigma^2)` of the Gaussian mechanism."""
    return sensitivity**2 / (2.0 * sigma**2)


def _rdp_to_dp(alpha: float, rdp: float, delta: float) -> float:
    """One order's conversion (CKS 2020 Prop. 12), as in dp-accounting's ``compute_epsilon``."""
    if delta**2 + math.expm1(-rdp) > 0:  # delta <= sqrt(1 - exp(-KL)): epsilon 0 suffices
        return 0.0
    return rdp + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)


def rdp_epsilon(rho: float, delta: float) -> float:
    """:math:`\\varepsilon(\\delta)` of a composition with total RDP :math:`\\alpha\\rho`,
    minimised over the order :math:`\\alpha > 1` (grid, then a bounded refinement)."""
    if rho <= 0:
        return 0.0
    alphas = 1.0 + np.logspace(-4, 5, 2000)
    rdp = alphas * rho
    values = rdp + np.log1p(-1.0 / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1.0)
    values = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, values)  # as _rdp_to_dp, vectorised
    i = int(np.argmin(values))
    lo, hi = alphas[max(i - 1, 0)], alphas[min(i + 1, alphas.size - 1)]
    from scipy.optimize import minimize_scalar  # noqa: PLC0415  (0.2 s to import: not on the start-up path)

    best = minimize_scalar(lambda a: _rdp_to_dp(a, a * rho, delta), bounds=(lo, hi), method="bounded",
                           options={"xatol": 1e-10})
    return float(max(0.0, min(values[i], best.fun)))


@dataclass(frozen=True)
class Cost:
    """What one release (or a partition of disjoint releases) costs."""

    epsilon: float
    delta: float
    rho: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    @staticmethod
    def of(mechanism: Any) -> "Cost":
        """The release's guarantee: its (epsilon, delta) and the Renyi cost of the calibrated noise
        (under secure aggregation the analyst sees the sum, which carries the calibrated noise)."""
        return Cost(float(mechanism.epsilon), float(mechanism.delta),
                    gaussian_rho(sigma=float(mechanism.calibrated_sigma), sensitivity=float(mechanism.sensitivity)))


ZERO = Cost(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Guarantee:
    """The tighter (epsilon, delta) bound of a sequence of costs, against a budget."""

    epsilon: float
    delta: float
    accountant: str  # "basic" or "rdp": which bound is the tighter one
    within: bool

    def as_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "accountant": self.accountant}


def guarantee(total: Cost, *, epsilon_budget: float, delta_budget: float) -> Guarantee:
    """Basic composition and RDP at the budget's delta; the tighter one that fits the budget
    (or, when none fits, the one with the smaller epsilon)."""
    basic = (total.epsilon, total.delta)
    rdp = (rdp_epsilon(total.rho, delta_budget), delta_budget) if total.rho > 0 else (0.0, 0.0)
    fits = [(e, d, name) for (e, d), name in ((basic, "basic"), (rdp, "rdp"))
            if e <= epsilon_budget * (1 + _SLACK) and d <= delta_budget * (1 + _SLACK)]
    if fits:
        e, d, name = min(fits, key=lambda t: (t[0], t[1]))
        return Guarantee(e, d, name, True)
    e, d, name = min(((basic[0], basic[1], "basic"), (rdp[0], rdp[1], "rdp")), key=lambda t: t[0])
    return Guarantee(e, d, name, False)


def remaining_budget(spent: Guarantee, epsilon_budget: float, delta_budget: float) -> dict[str, float | None]:
    """What is left: epsilon, and delta under basic composition (under RDP the guarantee is
    stated at the budget's delta, so no delta is 'left'; None)."""
    return {"epsilon": max(0.0, epsilon_budget - spent.epsilon),
            "delta": max(0.0, delta_budget - spent.delta) if spent.accountant == "basic" else None}


def statement(total: Cost, cap: "Cap") -> dict[str, Any]:
    """The one statement of spending every figure shows (``GET /v1/budget``, ``/v1/budget/mine``,
    a cost preview, ``dsfed audit show`` and the report through the analyst's budget): spent is
    the ledger's :func:`guarantee` of ``total`` against ``cap``, remaining is ``cap`` minus it
    (:func:`remaining_budget`), with the basic sums and the Renyi slope beside."""
    spent = guarantee(total, epsilon_budget=cap.epsilon, delta_budget=cap.delta)
    return {"spent": spent.as_dict(), "remaining": remaining_budget(spent, cap.epsilon, cap.delta),
            "basic": {"epsilon": total.epsilon, "delta": total.delta}, "rho": total.rho}


def use_of_remaining(spent: Cost, charge: Cost, cap: "Cap", warn_share: float) -> dict[str, Any]:
    """What ``charge`` would use of what remains of ``cap`` after ``spent``: the increase of the spent
    epsilon (:func:`guarantee` before and after, so the same accounting as the ledger's), that
    epsilon as a share of the remaining one (None when nothing remains), and ``warn`` when it is
    more than ``warn_share`` of it (``budget.warn_share``); ``within`` is False when the ledger
    would refuse the charge."""
    before = guarantee(spent, epsilon_budget=cap.epsilon, delta_budget=cap.delta)
    after = guarantee(spent + charge, epsilon_budget=cap.epsilon, delta_budget=cap.delta)
    remaining = remaining_budget(before, cap.epsilon, cap.delta)["epsilon"]
    uses = max(0.0, after.epsilon - before.epsilon)
    return {"epsilon": uses, "remaining": remaining, "share": uses / remaining if remaining > 0 else None,
            "warn": uses > warn_share * remaining * (1 + _SLACK), "within": after.within}


@dataclass(frozen=True)
class Cap:
    """One budget: at most ``epsilon`` at ``delta`` for whom ``scope`` names, under ``rule``."""

    scope: str  # "table" (all analysts) or "analyst" (one analyst's share of a table)
    epsilon: float
    delta: float

    @property
    def rule(self) -> str:
        return f"budget.epsilon_per_{self.scope}"

    @property
    def delta_rule(self) -> str:
        return f"budget.delta_per_{self.scope}"

    def fits(self, total: Cost) -> bool:
        return guarantee(total, epsilon_budget=self.epsilon, delta_budget=self.delta).within


@dataclass(frozen=True)
class Caps:
    """The two budgets every release on a table is checked against (``[budget]``)."""

    table: Cap
    analyst: Cap

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Caps":
        """The inverse of :meth:`as_dict` (the budget an audit record states)."""
        return cls(*(Cap(scope, float(data[f"per_{scope}"]["epsilon"]), float(data[f"per_{scope}"]["delta"]))
                     for scope in ("table", "analyst")))

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {"per_table": {"epsilon": self.table.epsilon, "delta": self.table.delta},
                "per_analyst": {"epsilon": self.analyst.epsilon, "delta": self.analyst.delta}}
