"""Cuts a pooled protocol derives on a column: the breaks of Hosmer-Lemeshow's groups, a spline's
knots, the leaf edges of a histogram reference. No analyst chooses them -- the sites find them on
pooled counts -- but each is still a cut on the column it parts: beside a cut released before on
that column (a threshold, a calibration bin) it would single out the records between the two. So
the release gate decides on them as it decides on an analyst's cuts released pooled
(:mod:`dsfed_server.disclosure.gate`, "Pooled"), in three steps every protocol shares:

1. this site counts the column's records between the candidates and every cut of the column's
   relayed history (:meth:`ProtocolCuts.counted`; a field of the protocol's pooled vector);
2. on the pooled counts, every site keeps the same candidates: those leaving 0 or at least q
   records (and the secret margin) beside every cut (:meth:`ProtocolCuts.fits`); what a protocol
   does with a candidate the gate does not keep is its own (move a break onto the earlier cut next to
   it, :meth:`ProtocolCuts.placed`, or merge its groups; move a knot onto an earlier cut; drop a leaf
   edge);
3. the cuts released join every site's history (:meth:`ProtocolCuts.record`), after this site's
   records of the cells between them have passed the row-set audit where the protocol releases sums
   over them (:meth:`ProtocolCuts.audited`), or, where it releases only the counts its ranks tell (a
   spline's knots), have joined the table's pooled row sets for later releases' audits
   (:meth:`ProtocolCuts.record_cells`).

A cut this site releases on the column while the protocol runs (another analyst's call) was not in
the history the pooled counts were taken with: the protocol is refused, and asked again, checks it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from dsfed_core.errors import DisclosureRefusal
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.differencing import PooledCell, Rows
from dsfed_server.disclosure.provenance import RootColumn
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_server.disclosure.snapping import nearby_history_cut


REFINED = "refined"  # a protocol's pooled field: the column's records between its candidates and the history's cuts


class ProtocolCuts:
    """One site's side of the cuts a pooled protocol puts on the column ``column`` its ``values``
    come from (None: values without provenance, whose cuts are kept under their own ordering).
    Made at the protocol's first step: it reads the column's relayed history then
    (:meth:`Guard.pooled_history`, which asks the analyst to relay a history that misses one of this
    site's cuts). ``rows``: where ``values``' records sit in the table, for the row-set audit."""

    def __init__(self, guard: Guard, values: np.ndarray, column: RootColumn | None, rows: Rows | None = None
                 ) -> None:
        self.guard, self.rows = guard, rows
        self.cells = gate.Intervals(values, (), render=lambda released: None, column=column)
        self.key = self.cells.history_key
        self.history = guard.pooled_history(self.key)
        self.refined: tuple[gate.Cut, ...] = ()
        self.whole_column = False  # until the pooled vector says so (:meth:`pooled_counts`): paired as a subset's

    def to_root(self, cuts: Sequence[gate.Cut]) -> tuple[gate.Cut, ...]:
        """Cuts on the values as the column's cuts (a monotone transform mapped back)."""
        return self.cells.to_root(cuts)

    def counted(self, candidates: Sequence[gate.Cut]) -> dict[str, np.ndarray]:
        """This site's counts of the column's records between ``candidates`` (the column's cuts) and every
        cut of its history (:data:`REFINED`), the fields the sites pool before :meth:`fits`; and whether the
        protocol's values are not all of the column's records here (:func:`gate.subset_share`: a condition, or a
        missing value in another column of the call), so that every site knows whether they are at any site."""
        self.refined = tuple(sorted(set(candidates) | set(self.history)))
        return {REFINED: gate.cell_sums(self.cells.root, self.refined)[0], gate.SUBSET: gate.subset_share(self.cells)}

    def pooled_counts(self, pooled: dict[str, np.ndarray]) -> np.ndarray:
        """The pooled counts of :meth:`counted`; on reading them, every site takes the protocol's cells for
        intervals of the column alike (none of the sites' values a subset) or for a subset's alike."""
        self.whole_column = self.cells.column is not None and float(np.ravel(pooled[gate.SUBSET])[0]) < 0.5
        return pooled[REFINED]

    def fits(self, cuts: Sequence[gate.Cut], pooled_counts: np.ndarray, floor: gate.Floor,
             history: Sequence[gate.Cut] | None = None) -> np.ndarray:
        """Which of ``cuts`` (among the candidates counted) the gate keeps beside ``history`` (the
        column's; default: all of it), on the sites' pooled ``counted`` vector: no moving, and of cuts
        with no record between them the first (:func:`gate.fits_pooled`)."""
        since = set(self.guard.released_cuts(self.key)) - set(self.history)
        if since:
            raise DisclosureRefusal(
                "a release cut this score column at this site while the pooled protocol ran: the pooled counts "
                "were taken without that cut, and a cut near it could single out the records between the two",
                rule="disclosure.cut_history", hint="ask again: the sites then count with every cut released")
        history = self.history if history is None else list(history)
        return gate.fits_pooled(cuts, self.refined, history, pooled_counts, floor, self.key)

    def placed(self, candidates: Sequence[gate.Cut], pooled_counts: np.ndarray, floor: gate.Floor, *, move: bool
               ) -> list[gate.Cut | None]:
        """Where each of ``candidates`` (the column's cuts, increasing, among those counted) is released, on the
        sites' pooled ``counted`` vector: at itself where the gate keeps it beside the history (:meth:`fits`);
        else, with ``move``, at the cut released before next to it
        (:func:`~dsfed_server.disclosure.snapping.nearby_history_cut`, the rule a per-site release snaps a
        dropped cut by: nearer to it than to the next candidate, so the order stays) -- a cut public already,
        so the move makes no new cut to difference against the history (Hundepool et al. 2012, sec. 5.4,
        consistent suppression); else None (dropped: its cells merged with the next). A cut released before,
        among the candidates or moved to, stays only where the cells beside it among the cuts placed hold q
        records and the secret margin on the pooled counts (:func:`gate.sound_cells`: the history's cuts were
        checked where they were released, not beside each other pooled); of two candidates moving onto one
        cut, the second is dropped."""
        kept = self.fits(candidates, pooled_counts, floor)
        released = set(self.history)
        decided: list[Any] = [gate.KEEP if k else None for k in kept]
        if move:
            targets = sorted(h for h in self.cells.from_root(self.history).values() if np.isfinite(h.value))
            taken = {c for c, k in zip(candidates, kept) if k}
            for i in np.flatnonzero(~kept):
                target = None if candidates[i] in released else nearby_history_cut(candidates, int(i), targets)
                if target is not None and target not in taken:
                    decided[i] = target
                    taken.add(target)
        checked = {c for c, k in zip(candidates, kept) if k and c not in released}
        counts = np.rint(np.asarray(pooled_counts, dtype=float)).astype(np.int64)
        decided = gate.sound_cells(self.refined, candidates, counts, floor.on(*self.key), checked, decided)
        return [c if d is gate.KEEP else d if isinstance(d, gate.Cut) else None for c, d in zip(candidates, decided)]

    def on_values(self, cut: gate.Cut) -> gate.Cut:
        """A cut of the column's history (or one :meth:`to_root` made of ``cut``) on the protocol's values: the
        cut that parts them as it parts the column's records (:meth:`Intervals.from_root`)."""
        return {root: own for own, root in self.cells.from_root([cut]).items()}.get(cut, cut)

    def squares(self, counts: np.ndarray) -> np.ndarray:
        """This site's share of the pooled squares of ``counted`` (:func:`gate.squares`; zeros where
        its rules do not apply ``secure_aggregation.dominance_sites``)."""
        return gate.squares(counts, self.guard.rule("secure_aggregation.dominance_sites") > 0)

    def dominated(self, kept: Sequence[gate.Cut], pooled_counts: np.ndarray, pooled_squares: np.ndarray,
                  floor: gate.Floor) -> bool:
        """Whether a cell between ``kept`` (candidates counted, or the history's) holds fewer than q of the
        column's records outside its ``floor.dominance`` largest sites (:func:`gate.largest_sites`, summed
        over the counted cells it spans): a member that made up its records could place the cuts among
        the others' few."""
        if not floor.dominance:
            return False
        position = {cut: i for i, cut in enumerate(self.refined)}
        bounds = [0] + [position[c] + 1 for c in sorted(set(kept))] + [len(self.refined) + 1]
        counts = np.rint(np.asarray(pooled_counts, dtype=float))
        largest = gate.largest_sites(pooled_squares, floor)
        for a, b in zip(bounds[:-1], bounds[1:]):
            n = counts[a:b].sum()
            if n > 0 and n - min(largest[a:b].sum(), n) < floor.q:
                return True
        return False

    def cell_counts(self, kept: Sequence[gate.Cut], pooled_counts: np.ndarray) -> np.ndarray:
        """The pooled count of each cell between ``kept`` (candidates counted), from the counted vector."""
        position = {cut: i for i, cut in enumerate(self.refined)}
        bounds = [0] + [position[c] + 1 for c in kept] + [len(self.refined) + 1]
        counts = np.rint(np.asarray(pooled_counts, dtype=float)).astype(np.int64)
        return np.array([counts[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])

    def audited(self, values: np.ndarray, cuts: Sequence[gate.Cut], counts: np.ndarray,
                release: Callable[[], Any]) -> PooledSteps:
        """The last step: ``release()`` runs if no site's records of the cells between ``cuts`` (on
        ``values``, the protocol's records) with their pooled ``counts`` fail its row-set audit against
        the cells and subsets released before from the table (:meth:`Guard.agreed`); every site refuses
        alike otherwise."""
        return self.guard.agreed(self._own_cells(values, cuts, counts), self.rows, release, len(cuts) + 1)

    def record_cells(self, released: Sequence[gate.Cut], values: np.ndarray, cuts: Sequence[gate.Cut],
                     counts: np.ndarray) -> None:
        """The ``released`` cuts join this site's history of the column (:meth:`record`) and this site's
        records of the cells between ``cuts`` (on ``values``) with their pooled ``counts`` join the table's
        pooled row sets, unaudited, in one transaction of the history: every later release of the table is
        audited against them (a release of counts only, whose cuts the history kept apart on the column)."""
        with self.guard.recording():
            self.record(released)
            self.guard.record_pooled_cells(self._own_cells(values, cuts, counts), self.rows)

    def _own_cells(self, values: np.ndarray, cuts: Sequence[gate.Cut], counts: np.ndarray) -> list[PooledCell]:
        column = "$".join(self.key) if self.whole_column else ""
        return gate.own_cells(self.rows, gate.cell_index(values, cuts), counts, column)

    def record(self, cuts: Sequence[gate.Cut]) -> None:
        """The released cuts (the column's) join this site's history of the column."""
        self.guard.record_pooled(self.key, list(cuts))
