"""R's type-7 quantile grouping, ``cut(x, unique(quantile(x, seq(0, 1, 1/g), type = 7)),
include.lowest = TRUE)`` (the grouping of ``hoslem.test``), from counts of records below
thresholds only (Huang 2020, §4.4, §4.8).

Why counts suffice. With :math:`h_k = (n-1)k/g + 1` and :math:`j_k = \\lfloor h_k \\rfloor`, the
type-7 quantile :math:`Q_k` lies in :math:`[x_{(j_k)}, x_{(j_k+1)}]` and puts at or below itself
exactly the records :math:`\\le x_{(j_k)}`: their number is :math:`r_k = L(x_{(j_k)})`,
:math:`L(v) = \\#\\{i: x_i \\le v\\}`. Any break :math:`b` with :math:`L(b) = r_k` therefore reproduces
R's groups. :math:`Q_k` is a data value (and then equals every other quantile at the same data
value, which ``unique`` merges) exactly when :math:`h_k` is whole or
:math:`x_{(j_k)} = x_{(j_k+1)}`, i.e. :math:`r_k \\ge j_k + 1`; otherwise it lies strictly between
two data values and equals no other break.

A search for :math:`x_{(j)}` keeps a bracket :math:`(a, b]` with :math:`L(a) < j \\le L(b)` and
narrows it with counts at probes inside it (:func:`probes`). It is *settled* when the bracket
holds one distinct value -- one record, or two floating-point neighbours -- and then
:math:`L(b) = r`. The sites run it on exact pooled counts (every search settles); the per-site
path runs it on counts the sites' release gate may withhold, and a search may end unsettled: its
break is then kept, never merged away, and marked uncertain with the number of records the
bracket may hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POINTS_PER_TARGET = 100  # probes per unsettled search and round (the first round: a grid of 1000)
FIRST_GRID = 1000
MAX_THRESHOLDS = 20_000  # most thresholds one countBelowDS call counts at (a site refuses more)


def type7_positions(n: int, g: int) -> list[float]:
    """:math:`h_k = (n - 1) k / g + 1`, k = 0..g."""
    return [(n - 1) * k / g + 1 for k in range(g + 1)]


def targets(n: int, g: int) -> list[int]:
    """The order statistics :math:`j = \\lfloor h_k \\rfloor` of the inner quantiles (k = 1..g-1)."""
    return sorted({math.floor(h) for h in type7_positions(n, g)[1:-1]})


@dataclass
class Bracket:
    """The search for :math:`x_{(j)}`: :math:`L(a) < j \\le L(b)`; counts of records at or below
    a and b as bounds (equal when known exactly)."""

    j: int
    a: float
    b: float
    below_a: tuple[int, int] = (0, 0)
    below_b: tuple[int, int] = (0, 0)
    settled: bool = False

    @classmethod
    def start(cls, j: int, n: int, lower: float, upper: float) -> "Bracket":
        """The whole range: nothing lies below ``lower`` (just below it, so that records equal to
        ``lower`` are inside), everything at or below ``upper``."""
        return cls(j, float(np.nextafter(lower, -np.inf)), float(upper), (0, 0), (n, n))

    @property
    def uncertain_records(self) -> int:
        """At most how many records lie in (a, b] (0 once settled)."""
        return 0 if self.settled else self.below_b[1] - self.below_a[0]


def narrow(bracket: Bracket, counts: dict[float, tuple[int, int]]) -> None:
    """Narrow a bracket with the (bounds of the) counts at the probes inside it, and settle it
    when it holds one distinct value."""
    for t in sorted(t for t in counts if bracket.a < t < bracket.b):
        lo, hi = counts[t]
        if hi < bracket.j:
            bracket.a, bracket.below_a = t, (lo, hi)
        elif lo >= bracket.j:
            bracket.b, bracket.below_b = t, (lo, hi)
            break
    (lo_a, hi_a), (lo_b, hi_b) = bracket.below_a, bracket.below_b
    exact = lo_a == hi_a and lo_b == hi_b
    if exact and (lo_b - lo_a == 1 or np.nextafter(bracket.a, bracket.b) >= bracket.b):
        bracket.settled = True


def probes(brackets: list[Bracket], first: bool, lower: float, upper: float) -> list[float]:
    """The thresholds to count at next: a grid over the range at first, then points inside every
    unsettled bracket."""
    if first:
        return [float(v) for v in np.linspace(lower, upper, FIRST_GRID + 1)]
    open_ = [b for b in brackets if not b.settled]
    per = max(1, min(POINTS_PER_TARGET, MAX_THRESHOLDS // max(1, len(open_))))  # one call's worth
    out: set[float] = set()
    for b in open_:
        out.update(float(v) for v in np.linspace(b.a, b.b, per + 2)[1:-1] if b.a < v < b.b)
    return sorted(out)


@dataclass(frozen=True)
class QuantileGroups:
    """Breaks that reproduce R's type-7 quantile grouping, and whether they are exact."""

    breaks: np.ndarray  # [lower, inner breaks..., upper]; groups (b[i-1], b[i]], the first closed
    ranks: tuple[int, ...]  # records at or below each inner break (lower bounds where uncertain), then n
    exact: bool
    uncertain_records: int  # at most this many records may sit in a neighbouring group (0 if exact)
    uncertain_breaks: tuple[int, ...]  # positions (1-based, among the inner breaks) of the uncertain ones
    empty_groups_dropped: int  # groups R would form empty (its statistic is then NaN)
    n: int
    rounds: int = 0  # rounds of counts the search took


def type7_groups(brackets: dict[int, Bracket], n: int, g: int, lower: float, upper: float) -> QuantileGroups:
    """The breaks and ranks of R's grouping from the searches for each :func:`targets` order statistic.

    Settled searches give R's breaks exactly (merged as ``unique`` merges them, empty groups
    dropped as ``cut`` leaves them empty). An unsettled search keeps its break as a group edge of
    its own, marked uncertain, unless that edge is a break already (or the upper end): its groups
    are then one."""
    keyed: list[tuple[tuple, float, int, bool]] = []  # (identity of the quantile's value, break, rank, settled)
    for k, hk in enumerate(type7_positions(n, g)[1:-1], start=1):
        s = brackets[math.floor(hk)]
        r = s.below_b[0]
        if s.settled:
            at_data_value = hk == math.floor(hk) or r >= s.j + 1
            is_min = at_data_value and s.below_a == (0, 0)  # nothing below x_(j): it is the minimum
            key: tuple = ("min",) if is_min else ("data", r) if at_data_value else ("between", k)
        else:
            key = ("uncertain", s.j)
        if not keyed or keyed[-1][0] != key:
            keyed.append((key, s.b, r, s.settled))
    keyed.insert(0, (("min",), float(lower), 0, True))
    if keyed[1:] and keyed[1][0] == ("min",):  # unique() merges Q(k) = min into Q(0)
        del keyed[1]
    if keyed[-1][0] == ("data", n):  # unique() merges Q(k) = max into Q(1)
        keyed.pop()
    kept: list[tuple[float, int, bool]] = []
    dropped = 0
    previous = 0  # the first group, [min, b1], holds every record <= b1
    for _, b, r, settled in keyed[1:]:
        if settled and r == previous:  # an empty group in R's cut (different break values, no record between)
            dropped += 1
            continue
        if not settled and (b >= upper or (kept and b <= kept[-1][0])):  # its bracket's edge is a break already
            continue
        kept.append((b, r, settled))
        previous = r
    unsettled = [s for s in brackets.values() if not s.settled]
    return QuantileGroups(
        breaks=np.array([lower] + [b for b, _, _ in kept] + [upper], dtype=float),
        ranks=tuple(r for _, r, _ in kept) + (n,),
        exact=not unsettled,
        uncertain_records=sum(s.uncertain_records for s in unsettled),
        uncertain_breaks=tuple(i + 1 for i, (_, _, settled) in enumerate(kept) if not settled),
        empty_groups_dropped=dropped,
        n=n,
    )
