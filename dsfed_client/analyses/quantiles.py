"""Distributed, disclosure-safe search for the groups R's type-7 quantiles define:
the grouping of ``hoslem.test``, ``cut(p, unique(quantile(p, seq(0, 1, 1/g))),
include.lowest = TRUE)``, found without pooling any score (seed 001 §4.4, §4.8).

Only counts cross the wire: each site answers "how many of my values are <= t"
for a batch of thresholds (registry entry ``countBelowDS``). A count is
released only if it is 0 or at least q from both ends; otherwise it comes back
censored, known only to lie in [1, n - 1].

Why counts suffice. With :math:`h_k = (n-1)k/g + 1` and :math:`j_k = \\lfloor h_k \\rfloor`,
the type-7 quantile :math:`Q_k` lies in :math:`[x_{(j_k)}, x_{(j_k+1)}]` and puts at or
below itself exactly the records :math:`\\le x_{(j_k)}`: their number is
:math:`r_k = L(x_{(j_k)})`, :math:`L(v) = \\#\\{i: x_i \\le v\\}`. Any break :math:`b` with
:math:`L(b) = r_k` therefore reproduces R's groups. :math:`Q_k` is a data value (and
then equals every other quantile at the same data value, which ``unique``
merges) exactly when :math:`h_k` is whole or :math:`x_{(j_k)} = x_{(j_k+1)}`, i.e.
:math:`r_k \\ge j_k + 1`; otherwise it lies strictly between two data values and
equals no other break.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dsfed_client.calls import Ref
from dsfed_client.progress import progress
from dsfed_client.session import FederatedSession

POINTS_PER_TARGET = 1000
MAX_ROUNDS = 40


@dataclass(frozen=True)
class QuantileGroups:
    """Breaks that reproduce R's type-7 quantile grouping, and whether they are exact."""

    breaks: np.ndarray  # [lower, inner breaks..., upper]; groups (b[i-1], b[i]], the first closed
    ranks: tuple[int, ...]  # records at or below each inner break (exact ones), then n
    exact: bool
    uncertain_records: int  # bound on records whose group could not be settled (0 if exact)
    empty_groups_dropped: int  # groups R would form empty (its statistic is then NaN)
    rounds: int
    n: int


@dataclass
class _Search:
    """Bisection for the smallest v with L(v) >= j, on surely-known bounds of L."""

    j: int
    a: float  # L(a) < j surely
    b: float  # L(b) >= j surely
    done: bool = False
    exact: bool = True


def _bounds(results: dict) -> list[tuple[int, int]]:
    """Lower and upper bound of the pooled count at each probed threshold."""
    width = len(next(iter(results.values()))["counts"])
    out = []
    for i in range(width):
        lo = hi = 0
        for r in results.values():
            c = r["counts"][i]
            if c is None:
                lo, hi = lo + 1, hi + int(r["n"]) - 1
            else:
                lo, hi = lo + int(c), hi + int(c)
        out.append((lo, hi))
    return out


def quantile_groups(session: FederatedSession, x: str, g: int, *, lower: float = 0.0,
                    upper: float = 1.0) -> QuantileGroups:
    """Breaks reproducing ``cut(x, unique(quantile(x, seq(0, 1, 1/g))), include.lowest = TRUE)``.

    ``lower`` and ``upper`` must bound every value (0 and 1 for probabilities).
    """
    ref = Ref(x)
    grid = [float(v) for v in np.linspace(lower, upper, POINTS_PER_TARGET + 2)]
    first = session.aggregate("countBelowDS", ref, grid)
    n = sum(int(r["n"]) for r in first.values())
    known: dict[float, tuple[int, int]] = dict(zip(grid, _bounds(first)))
    h = [(n - 1) * k / g + 1 for k in range(g + 1)]
    # Q(0) = min and Q(1) = max need no search: only whether an inner quantile equals them matters
    searches = {j: _Search(j, float(lower), float(upper)) for j in sorted({math.floor(v) for v in h[1:-1]})}
    for s in searches.values():
        _advance(s, known, probed=True)
    rounds = 1
    with progress(f"quantile search for {g} groups of {x}", total=len(searches)) as bar:
        bar.update(completed=sum(s.done for s in searches.values()))
        while rounds < MAX_ROUNDS:
            active = [s for s in searches.values() if not s.done]
            probes = sorted({float(v) for s in active for v in np.linspace(s.a, s.b, POINTS_PER_TARGET + 2)[1:-1]
                             if s.a < v < s.b} - set(known))
            if not probes:
                break
            known.update(zip(probes, _bounds(session.aggregate("countBelowDS", ref, probes))))
            rounds += 1
            for s in active:
                _advance(s, known, probed=True)
            bar.update(completed=sum(s.done for s in searches.values()))
    for s in searches.values():
        if not s.done:
            s.done, s.exact = True, False
    return _groups(searches, known, h, n, g, lower, upper, rounds)


def _advance(s: _Search, known: dict[float, tuple[int, int]], *, probed: bool) -> None:
    inside = sorted(t for t in known if s.a <= t <= s.b)
    below = [t for t in inside if known[t][1] < s.j]
    above = [t for t in inside if known[t][0] >= s.j]
    s.a, s.b = max(below, default=s.a), min(above, default=s.b)
    lo_a, hi_a = known.get(s.a, (0, 0))
    lo_b, hi_b = known[s.b]
    undecided = any(s.a < t < s.b for t in known)  # probes whose censored counts straddle j
    if lo_a == hi_a and lo_b == hi_b and (lo_b - lo_a == 1 or np.nextafter(s.a, s.b) >= s.b):
        s.done = True  # (a, b] holds one distinct value: x_(j), and L(b) = L(x_(j))
    elif probed and undecided:
        s.done, s.exact = True, False  # censored counts leave the rank of x_(j) undecided


def _groups(searches: dict[int, _Search], known: dict[float, tuple[int, int]], h: list[float], n: int,
            g: int, lower: float, upper: float, rounds: int) -> QuantileGroups:
    keyed: list[tuple[tuple, float, int]] = []  # (identity of the quantile's value, break, rank)
    for k, hk in enumerate(h[1:-1], start=1):
        s = searches[math.floor(hk)]
        r = known[s.b][0]
        at_data_value = hk == math.floor(hk) or r >= s.j + 1
        is_min = at_data_value and known.get(s.a) == (0, 0)  # nothing below x_(j): it is the minimum
        key = ("min",) if is_min else ("data", r) if at_data_value else ("between", k)
        if not keyed or keyed[-1][0] != key:
            keyed.append((key, s.b, r))
    keyed.insert(0, (("min",), float(lower), 0))
    if keyed[1:] and keyed[1][0] == ("min",):  # unique() merges Q(k) = min into Q(0)
        del keyed[1]
    if keyed[-1][0] == ("data", n):  # unique() merges Q(k) = max into Q(1)
        keyed.pop()
    inner = keyed[1:]
    kept: list[tuple[float, int]] = []
    dropped = 0
    previous = 0  # the first group, [min, b1], holds every record <= b1
    for _, b, r in inner:
        if r == previous:  # an empty group in R's cut (different break values, no record between)
            dropped += 1
            continue
        kept.append((b, r))
        previous = r
    uncertain = sum(known[s.b][1] - known[s.b][0] + 1 for s in searches.values() if not s.exact)
    return QuantileGroups(
        breaks=np.array([lower] + [b for b, _ in kept] + [upper], dtype=float),
        ranks=tuple(r for _, r in kept) + (n,),
        exact=all(s.exact for s in searches.values()),
        uncertain_records=uncertain,
        empty_groups_dropped=dropped,
        rounds=rounds,
        n=n,
    )
