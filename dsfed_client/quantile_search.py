"""Per-site search for the groups R's type-7 quantiles define (the grouping of ``hoslem.test``,
:mod:`dsfed_core.quantiles`), from counts only (Huang 2020, §4.4, §4.8).

Each site answers "how many of my values are <= t" for a batch of thresholds (``countBelowDS``),
and its release gate withholds a count whose cut would leave fewer than q of the site's records
between it and another cut (the count is then null). What the search knows of a site's count at a
threshold is therefore a pair of bounds: exact where released; otherwise between the released
counts at the neighbouring thresholds (counts rise with the threshold), or 0 and n. (A withheld
count may be "none" too: the gate answers "nothing below t" only once per column, so that nobody
bisects for the smallest value.) Pooled bounds are the sums of the sites' bounds.

This is the per-site path. Under secure aggregation the sites run the same search on exact pooled
counts among themselves (``decileGroupsDS``), which always settles on R's groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from dsfed_client.calls import Ref
from dsfed_client.progress import progress
from dsfed_client.sites import Sites
from dsfed_core.quantiles import Bracket, QuantileGroups, narrow, probes, targets, type7_groups

MAX_ROUNDS = 12


@dataclass
class _SiteCounts:
    """One site's answers: released counts by threshold (a withheld one is null)."""

    n: int
    released: dict[float, int] = field(default_factory=dict)

    def add(self, thresholds: list[float], counts: list[int | None]) -> None:
        self.released.update({t: int(c) for t, c in zip(thresholds, counts) if c is not None})

    def bounds(self, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bound of the site's count at or below each of ``ts``."""
        known = np.array(sorted(self.released), dtype=float)
        counts = np.array([self.released[t] for t in known], dtype=np.int64)
        i = np.searchsorted(known, ts, side="right")  # known[i-1] <= t < known[i]
        lo = np.where(i > 0, counts[np.maximum(i - 1, 0)] if counts.size else 0, 0)
        j = np.searchsorted(known, ts, side="left")  # known[j] >= t
        hi = np.where(j < known.size, counts[np.minimum(j, max(known.size - 1, 0))] if counts.size else self.n,
                      self.n)
        return lo, hi


def _pooled_bounds(sites: dict[str, _SiteCounts], thresholds: list[float]) -> dict[float, tuple[int, int]]:
    ts = np.asarray(thresholds, dtype=float)
    lo, hi = np.zeros(ts.size, dtype=np.int64), np.zeros(ts.size, dtype=np.int64)
    for site in sites.values():
        a, b = site.bounds(ts)
        lo, hi = lo + a, hi + b
    return {t: (int(a), int(b)) for t, a, b in zip(thresholds, lo, hi)}


def quantile_groups(session: Sites, x: str, g: int, *, lower: float = 0.0,
                    upper: float = 1.0) -> QuantileGroups:
    """Breaks reproducing ``cut(x, unique(quantile(x, seq(0, 1, 1/g))), include.lowest = TRUE)``
    where the released counts settle them; the others kept, marked uncertain and bounded
    (:func:`dsfed_core.quantiles.type7_groups`). ``lower`` and ``upper`` must bound every value."""
    ref = Ref(x)
    asked = probes([], first=True, lower=lower, upper=upper)
    first = session.aggregate("countBelowDS", ref, asked)
    sites = {s: _SiteCounts(int(r["n"])) for s, r in first.items()}
    for s, r in first.items():
        sites[s].add(asked, r["counts"])
    n = sum(site.n for site in sites.values())
    brackets = {j: Bracket.start(j, n, lower, upper) for j in targets(n, g)}
    probed = list(asked)
    rounds = 1
    with progress(f"quantile search for {g} groups of {x}", total=len(brackets)) as bar:
        while True:
            before = [(b.a, b.b, b.below_a, b.below_b) for b in brackets.values()]
            known = _pooled_bounds(sites, probed)
            for bracket in brackets.values():
                narrow(bracket, known)
            bar.update(completed=sum(b.settled for b in brackets.values()))
            stalled = before == [(b.a, b.b, b.below_a, b.below_b) for b in brackets.values()] and rounds > 1
            asked = [t for t in probes(list(brackets.values()), first=False, lower=lower, upper=upper)
                     if t not in set(probed)]
            if not asked or stalled or rounds >= MAX_ROUNDS:
                break
            for s, r in session.aggregate("countBelowDS", ref, asked).items():
                sites[s].add(asked, r["counts"])
            probed += asked
            rounds += 1
    return replace(type7_groups(brackets, n, g, lower, upper), rounds=rounds)
