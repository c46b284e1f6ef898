"""Snapping: a requested cut the per-site gate would drop is released at a nearby cut released before.

An earlier release on a column (an exploratory histogram, by any analyst) leaves cuts in the
column's history (:mod:`dsfed_server.disclosure.history`). A later release whose requested edge lies
at, or a few records from, such a cut would make a cell of fewer than q records between the two:
:func:`~dsfed_server.disclosure.gate.decide` drops the edge and merges its cell with the next, so the
later report loses resolution because of a release it may not know of. Yet the earlier cut is
already public, and the cells on both sides of it were checked when it was released. So instead of
dropping the edge, the gate may *move* it onto the earlier cut (the cut is then released again,
nothing new is said about where records lie), provided the cells the move makes -- between the
earlier cut and the released cuts beside it, in the release's own records and in the column's --
pass the same floor as any new cell (q records, plus the site's secret margin: :class:`Floor`).
This is what a pooled release already does with a requested cut it does not keep
(:func:`~dsfed_server.disclosure.gate.release_pooled`), and what statistical agencies call
"consistent" secondary cell suppression: cells are aligned with those published before rather than
published on a fresh grid that can be differenced against the old one (Hundepool et al. 2012,
*Statistical Disclosure Control*, sec. 5.4; Salazar-Gonzalez 2005 on linked tables).

Which earlier cut: the nearest in value, and only a *nearby* one -- nearer to the dropped edge than
to any other requested edge (within half the gap to its neighbours), so the report's cells keep
their order and each edge stays near where it was asked. The target depends on the request and
the public history only, never on the data; whether the move survives the floor is the same kind of
answer the gate gives for any requested cut.
"""

from __future__ import annotations

import bisect
import collections
from typing import Any, Collection, Sequence

import numpy as np

from dsfed_server.disclosure.gate import KEEP, Cut, Floor, Intervals, ranks


def nearby_history_cut(cuts: Sequence[Cut], i: int, history: Sequence[Cut]) -> Cut | None:
    """The cut of ``history`` (finite cuts in the values' units, sorted) nearest in value to the requested
    cut ``cuts[i]`` and nearer to it than to any other requested cut (half the gap to each neighbour;
    ties: the lower), or None."""
    value = cuts[i].value
    low = (value + cuts[i - 1].value) / 2 if i > 0 else -np.inf
    high = (value + cuts[i + 1].value) / 2 if i + 1 < len(cuts) else np.inf
    if i == 0 and len(cuts) > 1:  # an end edge: no farther out than the gap to its neighbour
        low = value - (cuts[1].value - value) / 2
    if i == len(cuts) - 1 and len(cuts) > 1:
        high = value + (value - cuts[i - 1].value) / 2
    if np.isnan(low) or np.isnan(high):
        return None  # a bound undefined (a neighbouring cut at infinity): no history cut is near
    near = history[bisect.bisect_left(history, low, key=lambda h: h.value):
                   bisect.bisect_right(history, high, key=lambda h: h.value)]
    return min(near, key=lambda h: (abs(h.value - value), h), default=None)


def snap_dropped(cells: Intervals, floor: Floor, history: Sequence[Cut], decided: list[Any],
                 exclude: Collection[Cut] = ()) -> tuple[list[Any], dict[Cut, Cut]]:
    """:func:`~dsfed_server.disclosure.gate.decide_local`'s answers with each dropped requested cut
    (None; not a twin of a kept cut) moved onto its :func:`nearby_history_cut` where the cells beside
    the moved cut, among every cut released, hold enough records in the release's own records and in
    the column's (``floor``, as :func:`~dsfed_server.disclosure.gate.decide` checks a new cell; an
    empty cell at an end of the range is that end's answer); the moves that fail are undone (the cut
    dropped) one at a time, lowest first, until every move passes. ``history``: the column's cuts
    released before (its units). A cut in ``exclude`` (one the row-set audit objected to) is not
    moved. Also returns each move's target mapped to the column's cut, for the history."""
    roots = cells.from_root(history)  # history cut in the values' units -> the column's cut
    out = list(decided)
    targets: dict[int, Cut] = {}
    finite = sorted(h for h in roots if np.isfinite(h.value))
    for i, d in enumerate(decided):
        if d is None and cells.cuts[i] not in exclude:
            target = nearby_history_cut(cells.cuts, i, finite)
            if target is not None:
                targets[i] = target
    if not targets:
        return out, {}
    while targets:
        failing = unsound_move(cells, floor, roots, out, targets)
        if failing is None:
            break
        del targets[failing]
    for i, target in targets.items():
        out[i] = target
    return out, {t: roots[t] for t in targets.values()}


def unsound_move(cells: Intervals, floor: Floor, roots: dict[Cut, Cut], decided: Sequence[Any],
                 targets: dict[int, Cut]) -> int | None:
    """The first requested cut (its index) whose move onto ``targets[i]`` makes a cell that does not
    hold enough records (``floor``, drawn for the column's cells as :func:`decide` draws them) beside
    the moved cut, among the cuts kept (``decided``) and moved, in the release's own records or in the
    column's, or parts the records where another released cut does; None when every move passes."""
    x = np.sort(cells.x)
    same_values = cells.column is None or (not cells.subset and cells.column.transform.identity)
    root = x if same_values else cells.root_values()
    root_of = dict(zip(cells.cuts, cells.root_cuts()))
    on_column = floor.on(*cells.history_key)
    kept = {cells.cuts[i]: root_of[cells.cuts[i]] for i, d in enumerate(decided) if d is KEEP}
    released = {**kept, **{t: roots[t] for t in targets.values()}}

    def sound(a: int, b: int, n: int) -> bool:
        return on_column.holds(a, b) or (a == b and a in (0, n))

    spaces = []  # per space: its records, the records below each released cut, how many cuts are at each rank
    for values, own in ((x, True), (root, False)):
        rank = dict(zip(released, ranks(values, list(released) if own else list(released.values()))))
        used = collections.Counter(rank.values())
        spaces.append((int(values.size), rank, used, sorted({0, int(values.size), *used})))
    for i, target in sorted(targets.items()):
        if target in kept:
            continue  # released anyway, as requested: no new cell
        for n, rank, used, edges in spaces:
            r = rank[target]
            if 0 < r < n and used[r] > 1:
                return i  # another released cut parts the records where this one would: an empty cell
            lower = edges[bisect.bisect_left(edges, r) - 1] if r > 0 else 0
            upper = edges[bisect.bisect_right(edges, r)] if r < n else n
            if not (sound(lower, r, n) and sound(r, upper, n)):
                return i
    return None
