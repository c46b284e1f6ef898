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
keeps every cut it has used, and, for scores read from a site table's column or a subset of
it, also the cut in the whole column (so a subset does not start a fresh history; its bins
hold at least as many column records as subset records). For a new reference it

1. refuses it if an end edge's cut is closer than q, but not equal, to a cut used before --
   "no records" and "all records" count as used from the start, so 0 < n < q records outside
   its range are refused too;
2. drops every inner edge whose cut is closer than q, but not equal, to a cut used before
   (in either space);
3. merges what is left from the left, dropping edges until every bin holds 0 or at least q
   records in each space (refused if even the one bin between the end edges holds fewer);
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
    """Per rank: equal to a used cut, or at least q from every used cut (``used`` sorted; the
    used cuts are themselves 0 or at least q apart, so the two nearest decide)."""
    i = np.searchsorted(used, ranks)
    below = used[np.clip(i - 1, 0, used.size - 1)]
    above = used[np.clip(i, 0, used.size - 1)]

    def ok(gap: np.ndarray) -> np.ndarray:
        return (gap == 0) | (gap >= q)

    return ok(np.abs(ranks - below)) & ok(np.abs(above - ranks))


def _allowed(ranks: list[np.ndarray], i: int, k: int, q: int) -> bool:
    """Between candidate edges i and k every space holds 0 or at least q records."""
    return all((r[k] - r[i] == 0) or (r[k] - r[i] >= q) for r in ranks)


def _greedy(ranks: list[np.ndarray], q: int) -> list[int] | None:
    """Positions of the candidate edges to keep (first and last always; ``ranks`` are the
    candidates' cuts in each space, non-decreasing): from the first, the next edge whose bin
    holds, in every space, 0 or at least q records and not 0 in all; the last bin merged
    backwards if it is short. None if even one bin from the first to the last edge is short."""
    last = ranks[0].size - 1
    # per position, in each space: from zero_end on the gap is > 0, from q_start on it is >= q
    zero_end = [np.searchsorted(r, r, "right").tolist() for r in ranks]
    q_start = [np.searchsorted(r, r + q, "left").tolist() for r in ranks]
    kept = [0]
    if len(ranks) == 1:  # one space: the next edge is the first one q records on
        step, k = q_start[0], q_start[0][0]
        while k < last:
            kept.append(k)
            k = step[k]
    else:
        bounds = list(zip(zero_end, q_start))
        i = 0
        while True:
            k = min(z[i] for z in zero_end)
            moved = True
            while moved:  # the first k outside every space's forbidden stretch [zero_end, q_start)
                moved = False
                for z, g in bounds:
                    if z[i] <= k < g[i]:
                        k, moved = g[i], True
            if k >= last:
                break
            kept.append(k)
            i = k
    while len(kept) > 1 and not _allowed(ranks, kept[-1], last, q):
        kept.pop()
    if not _allowed(ranks, kept[-1], last, q):
        return None
    return kept + ([last] if kept[-1] != last else [])


def _cuts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per edge: the sorted ``values`` below it (the last edge: at or below it)."""
    below = np.cumsum(np.bincount(np.searchsorted(edges, values, "right"), minlength=edges.size + 1))[:edges.size]
    below[-1] = np.searchsorted(values, edges[-1], "right")
    return below


class CutHistory:
    """Per analyst x score ordering: the cuts (records below an edge) of every reference
    evaluated so far. A score read from a site table's column (or a subset of it) also has its
    cuts kept against the whole column, so a subset cannot start a fresh history."""

    def __init__(self) -> None:
        self._cuts: dict[tuple[str, str], np.ndarray] = {}
        self._lock = threading.Lock()

    def coarsen(self, analyst: str | None, p: np.ndarray, edges: np.ndarray, q: int,
                root: tuple[str, np.ndarray | None] | None = None, x_sorted: np.ndarray | None = None
                ) -> np.ndarray | str:
        """The mask of ``edges`` to keep (end edges always kept), or the reason to refuse.

        ``p`` are the scores summed over (``x_sorted``: the same, sorted, if the caller has it);
        ``root`` names the table column they come from and holds its values (None: ``p`` is the
        whole column): cuts are then also checked against earlier cuts of that column."""
        if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            return "the reference's edges must be finite and strictly increasing"
        x = np.sort(p) if x_sorted is None else x_sorted
        column = None if root is None or root[1] is None else np.sort(root[1])
        if root is not None and (root[1] is None or (column.size == x.size and np.array_equal(column, x))):
            spaces = [(f"column:{root[0]}", x)]  # the whole column: one space
        else:
            spaces = [(ordering_key(p), x)] + ([] if column is None else [(f"column:{root[0]}", column)])
        cuts = [_cuts(values, edges) for _, values in spaces]
        # runs of edges with the same cuts in every space: no record lies between them
        code = np.zeros(edges.size, dtype=np.int64)
        for r in cuts:
            code = code * (int(r[-1]) + 1) + r
        starts = np.flatnonzero(np.concatenate([[True], code[1:] != code[:-1]]))
        lengths = np.diff(np.append(starts, edges.size))
        run_cuts = [r[starts] for r in cuts]
        with self._lock:
            used = [self._cuts.get((analyst, name)) if analyst is not None else None for name, _ in spaces]
            used = [u if u is not None else np.array([0, values.size], dtype=np.int64)
                    for u, (_, values) in zip(used, spaces)]
            far = np.ones(starts.size, dtype=bool)
            for r, u in zip(run_cuts, used):
                far &= _far(r, u, q)
            if not (far[0] and far[-1]):
                return (f"the reference's range [{edges[0]:g}, {edges[-1]:g}] cuts this site's records within "
                        f"{q} of where this or an earlier reference did; widen it to cover every score")
            candidates = np.flatnonzero(far)
            kept = _greedy([r[candidates] for r in run_cuts], q)
            if kept is None:
                return f"the reference's range holds fewer than {q} of this site's records"
            keep_runs = np.zeros(starts.size, dtype=bool)
            keep_runs[candidates[kept]] = True
            if analyst is not None:
                for (name, _), r, u in zip(spaces, run_cuts, used):
                    self._cuts[(analyst, name)] = np.union1d(u, r[keep_runs])
        return np.repeat(keep_runs, lengths)
