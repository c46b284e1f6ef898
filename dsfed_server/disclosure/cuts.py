"""Reference cuts: what an analyst-supplied reference CDF may single out at this site.

``histPlacementSumsDS`` and ``histRocGlmDataDS`` evaluate a CDF the analyst sends
(``histReferenceDS``: edges and cumulative counts, linear in between) at the site's exact
scores and release sums over its records. The analyst chooses the edges, so a crafted
reference is a threshold query: a step at *t* makes the sum over positives count the
positives above *t*, and two steps around one record difference out that record's label
(a binary search then finds the top positive's score).

The site therefore evaluates a **coarsened** reference. The *cut* of an edge is the number
of the site's records (of both classes) below it; per analyst and score ordering (the
records' order by score, so a monotone transform of the score is the same ordering) the site
keeps every cut it has used. For a new reference it

1. refuses it if an end edge's cut is closer than q, but not equal, to a cut used before --
   "no records" and "all records" count as used from the start, so 0 < n < q records outside
   its range are refused too;
2. drops every inner edge whose cut is closer than q, but not equal, to a cut used before;
3. merges what is left from the left, dropping edges until every bin holds 0 or at least q
   records (refused if even the one bin between the end edges holds fewer);
4. records the kept edges' cuts.

So the cuts of all references used so far, taken together, split the site's records into
bins of 0 or at least q records, and every released sum is a function of the CDFs on those
bins: differencing two references isolates no fewer than q records -- the group of at least
q records behind every released sum (rule A1), as for the calibration bins. The decisions
depend on the scores' positions only, never on the outcomes, so which edges the site kept
says nothing about a label. Exact histograms under the small-bin rule (noise off) already
have such bins: nothing changes for them.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np


def ordering_key(p: np.ndarray) -> str:
    """The score ordering: record positions sorted by score (ties by position)."""
    digest = hashlib.sha256(np.argsort(p, kind="stable").astype(np.int64).tobytes())
    return f"{p.size}:{digest.hexdigest()[:32]}"


def _far(ranks: np.ndarray, used: np.ndarray, q: int) -> np.ndarray:
    """Per rank: equal to a used cut, or at least q from every used cut."""
    gap = np.abs(ranks[:, None] - used[None, :])
    return np.all((gap == 0) | (gap >= q), axis=1)


class CutHistory:
    """Per analyst x score ordering: the cuts (records below an edge) of every reference
    evaluated so far."""

    def __init__(self) -> None:
        self._cuts: dict[tuple[str, str], set[int]] = {}
        self._lock = threading.Lock()

    def coarsen(self, analyst: str | None, p: np.ndarray, edges: np.ndarray, q: int) -> np.ndarray | str:
        """The mask of ``edges`` to keep (end edges always kept), or the reason to refuse."""
        if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            return "the reference's edges must be finite and strictly increasing"
        x = np.sort(p)
        ranks = np.searchsorted(x, edges, "left")
        ranks[-1] = np.searchsorted(x, edges[-1], "right")
        with self._lock:
            fresh = {0, int(x.size)}
            used = self._cuts.get((analyst or "", ordering_key(p)), fresh) if analyst is not None else fresh
            far = _far(ranks, np.fromiter(used, dtype=np.int64), q)
            if not (far[0] and far[-1]):
                return (f"the reference's range [{edges[0]:g}, {edges[-1]:g}] cuts this site's records within "
                        f"{q} of where this or an earlier reference did; widen it to cover every score")
            keep = np.ones(edges.size, dtype=bool)
            keep[1:-1] = far[1:-1]
            kept = self._merge(np.flatnonzero(keep), ranks, q)
            inside = int(ranks[kept[-1]] - ranks[kept[0]])
            if len(kept) == 2 and 0 < inside < q:
                return f"the reference's range holds fewer than {q} of this site's records"
            if analyst is not None:
                self._cuts.setdefault((analyst, ordering_key(p)), set(fresh)).update(int(r) for r in ranks[kept])
        mask = np.zeros(edges.size, dtype=bool)
        mask[kept] = True
        return mask

    @staticmethod
    def _merge(candidates: np.ndarray, ranks: np.ndarray, q: int) -> list[int]:
        """Edges from ``candidates`` (first and last always) such that every bin holds 0 or at
        least q records."""
        def ok(a: int, b: int) -> bool:
            n = int(ranks[b] - ranks[a])
            return n == 0 or n >= q

        kept = [int(candidates[0])]
        last = int(candidates[-1])
        for j in candidates[1:-1]:
            if ok(kept[-1], int(j)):
                kept.append(int(j))
        while len(kept) > 1 and not ok(kept[-1], last):
            kept.pop()
        return kept + [last]
