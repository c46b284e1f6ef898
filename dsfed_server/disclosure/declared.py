"""Releases a function declares part-way through: the steps of a release of several steps.

Most functions release once, at the end: they return a declaration of cells, a protocol's steps or a
checked value, and the service releases it as the registry entry declares. Some must release something
before they can compute the rest: the table of group sizes before any mean by group (the means are read
only over the groups released), a protocol's cuts and the cells between them before its statistics leave.
Others keep or release what the release history records before anything is read from it (a subset's rows,
a derived column's cuts, an analyst's reference's edges, the functions a release sums exactly or gives
quantiles of), or decide a protocol's cuts on pooled counts. Such a function does not call the gate
either. It is a generator that yields a declaration of what it releases and receives what the release gave
back, then goes on::

    withheld = yield Groups(codes, n_cells, rows)

The service drives it (:func:`run`; ``CallPipeline.invoke`` for a function's own run, ``SecureRounds``
for a pooled protocol's step, whose ``advance`` may be such a generator too): each declaration is
released here, in the disclosure layer (:func:`release`), what it released is sent back, and what the
function finally returns is released as its registry entry declares. A refusal of a step is raised in
the function where it yielded, so a function may catch it (to ask for fewer cells, say); uncaught, it
refuses the call as a refusal raised by the gate always did.

What a function may declare part-way:

- :class:`~dsfed_server.disclosure.gate.Intervals` or :class:`~dsfed_server.disclosure.gate.Categories`:
  cells released by this site alone (:meth:`Guard.release`); sent back: the declaration's ``render`` of
  the released cells;
- :class:`Groups`: the groups of one or two factors, released group by group
  (:meth:`Guard.group_cells`); sent back: the groups withheld;
- :class:`JointCells`: the joint cells of two scores' cells, released as a two-way table, each score's
  cells merged in pairs until it passes (:meth:`Guard.joint_cells`); sent back: the two scores' cuts of the
  joint cells and why they were merged;
- :class:`ProtocolCells`: a pooled protocol's cuts and the cells between them, on the pooled counts
  (:class:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts`); sent back: None, or, where sums over the
  cells leave, the pooled steps of their row-set audit, at whose end the declared result is released;
- :class:`CandidateCuts`: a pooled protocol's candidate cuts, decided on the pooled counts
  (:meth:`ProtocolCuts.fits`); sent back: which of them the gate keeps;
- :class:`PlacedCuts`: a pooled protocol's candidate cuts, each kept, moved onto a cut released before next to
  it or dropped, on the pooled counts (:meth:`ProtocolCuts.placed`); sent back: where each is released;
- :class:`DominatedCells`: the cells between a pooled protocol's cuts, checked for dominance on the pooled
  counts (:meth:`ProtocolCuts.dominated`); sent back: whether one is dominated.

A function that keeps or computes on what it derives declares what that release records too:

- :class:`SubsetRows`: a subset of a table's records (:meth:`Guard.subset_rows`); sent back: the subset's
  rows;
- :class:`DerivedCuts`: a derived column's cuts and the row sets of its cells and few values
  (:meth:`Guard.derived_cuts`); sent back: None;
- :class:`ReferenceEdges`: the edges of an analyst's reference evaluated at this site's scores
  (:meth:`Guard.reference_edges`); sent back: which edges the site keeps;
- :class:`ExactSums`: the functions a release sums exactly over each group of records
  (:meth:`Guard.exact_sums`; :meth:`CallContext.summed` declares a function's sums of columns); sent
  back: None;
- :class:`QuantilesOf`: the function of a column whose quantiles a release gives over its records
  (:meth:`Guard.quantiles_of`; declared by :meth:`CallContext.quantiles`); sent back: None.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import numpy as np

from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.differencing import Rows
from dsfed_server.disclosure.gate import Categories, Cut, Floor, Intervals
from dsfed_server.disclosure.protocol_cuts import ProtocolCuts
from dsfed_server.disclosure.provenance import RootColumn


@dataclass(frozen=True)
class Groups:
    """The groups of one or two factors as a table of counts, released before anything is computed by
    group: each record's cell ``codes`` (column-major over the factors' levels), ``n_cells`` in all, and
    where the records sit in the table (``rows``, for the row-set audit). Released by
    :meth:`Guard.group_cells`: a group of 0 < n < q records refuses the call, a group too close to an
    earlier release over its records is withheld; the withheld groups are sent back."""

    codes: np.ndarray
    n_cells: int
    rows: Rows | None


@dataclass(frozen=True)
class JointCells:
    """The joint cells of two scores of the same records (``xa``, ``xb``): a cell of A's cells between
    ``cuts_a`` with one of B's between ``cuts_b``, released as a two-way table of counts before anything is
    read over them (the cross products of a paired comparison); ``rows``: where the records sit in the
    table, for the row-set audit. Released by :meth:`Guard.joint_cells`: every non-empty joint cell at least
    q records and the row-set audit, else A's and B's cells merged in pairs until they pass (refused where
    even one joint cell does not); sent back: ``(cuts_a, cuts_b, why)``, the cuts of the joint cells
    released and why they were merged (empty where they were not)."""

    xa: np.ndarray
    xb: np.ndarray
    cuts_a: tuple[Cut, ...]
    cuts_b: tuple[Cut, ...]
    rows: Rows | None


@dataclass(frozen=True)
class ProtocolCells:
    """A pooled protocol's release of cuts on a column: ``released``, the column's cuts that join its
    history, and the cells between ``bounds`` (cuts on ``values``, the protocol's records) with their
    pooled ``counts`` (``values`` None: no cells, the cuts alone are recorded, as a histogram reference's
    leaf edges, on whose noisy counts no sum is read).

    ``audited`` False (a release of the counts the cuts' ranks tell, a spline's knots): the cuts join the
    history and this site's records of the cells the table's pooled row sets, for later releases' audits
    in one transaction (:meth:`ProtocolCuts.record_cells`); None is sent back. ``audited`` True
    (sums over the cells leave, Hosmer-Lemeshow's groups): every site's records of the cells first pass the
    row-set audit on pooled objections (:meth:`ProtocolCuts.audited`); the pooled steps of that audit are
    sent back, and at their end the cuts join the history and ``result`` is released."""

    cuts: ProtocolCuts
    released: Sequence[Cut]
    values: np.ndarray | None = None
    bounds: Sequence[Cut] = ()
    counts: np.ndarray | None = None
    audited: bool = False
    result: Any = None


@dataclass(frozen=True)
class CandidateCuts:
    """A pooled protocol's ``candidates`` (the column's cuts, among those it counted,
    :meth:`ProtocolCuts.counted`), decided on the sites' ``pooled_counts`` beside ``history`` (the column's;
    None: all of it) under ``floor``, as every site decides alike. Decided by :meth:`ProtocolCuts.fits`, which
    refuses the protocol where this site cut the column while it ran; nothing is recorded. Sent back: which
    candidates the gate keeps (boolean, one per candidate)."""

    cuts: ProtocolCuts
    candidates: Sequence[Cut]
    pooled_counts: np.ndarray
    floor: Floor
    history: Sequence[Cut] | None = None


@dataclass(frozen=True)
class PlacedCuts:
    """A pooled protocol's ``candidates`` (the column's cuts, increasing, among those it counted), placed on the
    sites' ``pooled_counts`` beside the column's history under ``floor``, as every site places them: each kept,
    moved (``move``) onto the cut released before next to it, or dropped (:meth:`ProtocolCuts.placed`, which
    refuses the protocol where this site cut the column while it ran); nothing is recorded. Sent back: per
    candidate, the cut it is released at (itself, a cut of the history) or None."""

    cuts: ProtocolCuts
    candidates: Sequence[Cut]
    pooled_counts: np.ndarray
    floor: Floor
    move: bool = False


@dataclass(frozen=True)
class DominatedCells:
    """The cells between a pooled protocol's cuts ``kept`` (candidates counted, or the history's), checked on
    the sites' ``pooled_counts`` and ``pooled_squares`` under ``floor``'s dominance rule
    (:meth:`ProtocolCuts.dominated`); nothing is recorded. Sent back: whether a cell holds fewer than q records
    outside its largest sites (the protocol refuses, or merges, as it releases)."""

    cuts: ProtocolCuts
    kept: Sequence[Cut]
    pooled_counts: np.ndarray
    pooled_squares: np.ndarray
    floor: Floor


@dataclass(frozen=True)
class SubsetRows:
    """A subset of a table's records, kept at the site: the records of ``parent`` (a table, a subset held as
    its rows, a vector's table) where ``mask`` holds, and ``condition``, the cells a numeric condition makes
    on its column (None: no numeric condition). Released by :meth:`Guard.subset_rows`: the subset and the
    records it leaves out hold ``subset_min`` records or none, its row set is audited with every subset and
    cell released from the table and the condition's cuts with the column's history, and both are recorded
    if they pass. Sent back: the subset's rows (:class:`~dsfed_server.disclosure.differencing.Rows`)."""

    parent: Any
    mask: np.ndarray
    condition: Intervals | None = None


@dataclass(frozen=True)
class DerivedCuts:
    """A derived column's cuts and row sets, before the column is kept: ``conditions``, one declaration of
    cells per column its comparisons (or ``pmin``, ``pmax``, ``abs``, a map's knots) cut, and ``row_sets``,
    the records where each comparison holds and those of each of its few values (boolean over ``rows``, where
    the records sit in the table). Released by :meth:`Guard.derived_cuts`: each cut decided with the column's
    history, the row sets audited with the table's, all recorded if they pass; ``what`` and ``instead`` name
    the cuts and the alternative in a refusal (None: the Guard's words for an expression's). Sent back:
    None."""

    conditions: Sequence[Intervals]
    row_sets: Sequence[np.ndarray]
    rows: Rows | None
    what: str | None = None
    instead: str | None = None
    # the groups (boolean over the table) the column's few-valued roots and comparisons make, where it has several
    # roots (:func:`~dsfed_server.disclosure.provenance.meaning_strata`): the row sets are kept with their parts
    strata: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True)
class ReferenceEdges:
    """The ``edges`` of an analyst's reference CDF, to be evaluated at this site's scores ``p`` (``root``:
    the table column they come from). Released by :meth:`Guard.reference_edges`: the edges are cuts on the
    column, decided with its history (an end edge that does not fit refuses the reference), the kept ones
    recorded. Sent back: which edges the site keeps (boolean, one per edge)."""

    p: np.ndarray
    edges: np.ndarray
    root: RootColumn | None


@dataclass(frozen=True)
class ExactSums:
    """The exact sums a release gives: ``functions`` (each a function's core, its root columns and the
    records of ``rows`` it is summed over, computed when needed) over each of ``groups`` (None: all the
    records together). Released by :meth:`Guard.exact_sums`: counted with every sum released before from the
    table, refused where a group of records would answer more functions than ``disclosure.sums_per_record``
    allows, recorded if not; ``hint``: what a refused analyst can do instead (None: the Guard's); ``steps``: how
    many releases such as this one the analysis needs at the least (a fit at the analyst's coefficients: one
    per iteration), refused where the records could not answer that many even with nothing released before.
    Sent back: None."""

    rows: Rows | None
    functions: Sequence[tuple[str, tuple[str, ...], Callable[[], np.ndarray]]]
    groups: list[np.ndarray] | None = None
    hint: str | None = None
    steps: int = 1
    alone: bool = False  # the analyst reads this site's own sums (CallContext.own_sums)
    levels: Sequence[np.ndarray] = ()  # the records at each value of a summed column of few values (few_levels)
    sets: Sequence[np.ndarray] = ()  # records other functions are summed over (a GLM's levels, a summand's 0/1 factors)


@dataclass(frozen=True)
class QuantilesOf:
    """The quantiles a release gives of ``function`` (a core,
    :func:`~dsfed_server.disclosure.expressions.forms`) of the column ``roots`` over the records ``rows``.
    Released by :meth:`Guard.quantiles_of`: refused where quantiles of another function of the same column
    were released over the same records, recorded if not. Sent back: None."""

    rows: Rows | None
    function: str
    roots: tuple[str, ...]


Declared = (Intervals | Categories | Groups | JointCells | ProtocolCells | CandidateCuts | PlacedCuts | DominatedCells
            | SubsetRows | DerivedCuts | ReferenceEdges | ExactSums | QuantilesOf)

T = TypeVar("T")


def release(guard: Guard, declared: Declared) -> Any:
    """What one declared step releases (or decides, or records), through ``guard`` (the call's); a protocol's
    cells and cuts through the guard of the call that began the protocol, which their :class:`ProtocolCuts`
    holds."""
    if isinstance(declared, (Intervals, Categories)):
        return guard.release(declared)
    if isinstance(declared, Groups):
        return guard.group_cells(declared.codes, declared.n_cells, declared.rows)
    if isinstance(declared, JointCells):
        return guard.joint_cells(declared.xa, declared.xb, declared.cuts_a, declared.cuts_b, declared.rows)
    if isinstance(declared, ProtocolCells):
        cuts, values, counts = declared.cuts, declared.values, declared.counts
        if values is None or counts is None:
            cuts.record(declared.released)
            return None
        if declared.audited:
            def agreed() -> Any:
                cuts.record(declared.released)
                return declared.result

            return cuts.audited(values, declared.bounds, counts, agreed)
        cuts.record_cells(declared.released, values, declared.bounds, counts)
        return None
    if isinstance(declared, CandidateCuts):
        return declared.cuts.fits(declared.candidates, declared.pooled_counts, declared.floor, declared.history)
    if isinstance(declared, PlacedCuts):
        return declared.cuts.placed(declared.candidates, declared.pooled_counts, declared.floor, move=declared.move)
    if isinstance(declared, DominatedCells):
        return declared.cuts.dominated(declared.kept, declared.pooled_counts, declared.pooled_squares,
                                       declared.floor)
    if isinstance(declared, SubsetRows):
        return guard.subset_rows(declared.parent, declared.mask, declared.condition)
    if isinstance(declared, DerivedCuts):
        words = {k: v for k, v in (("what", declared.what), ("instead", declared.instead)) if v is not None}
        return guard.derived_cuts(list(declared.conditions), list(declared.row_sets), declared.rows,
                                  strata=declared.strata, **words)
    if isinstance(declared, ReferenceEdges):
        return guard.reference_edges(declared.p, declared.edges, declared.root)
    if isinstance(declared, ExactSums):
        hint = {} if declared.hint is None else {"hint": declared.hint}
        return guard.exact_sums(declared.rows, list(declared.functions), declared.groups, steps=declared.steps,
                                alone=declared.alone, levels=declared.levels, sets=declared.sets, **hint)
    if isinstance(declared, QuantilesOf):
        return guard.quantiles_of(declared.rows, declared.function, declared.roots)
    raise TypeError(f"a function declared {type(declared).__name__}, which is no release of a step")


def run(steps: Generator[Declared, Any, T], guard: Guard) -> T:
    """Drive a function's declared steps: each released (:func:`release`) and what it released sent back,
    a refusal raised in the function where it yielded; returns what the function returns."""
    sent: Any = None
    thrown: Exception | None = None
    while True:
        try:
            declared = steps.send(sent) if thrown is None else steps.throw(thrown)
        except StopIteration as done:
            return done.value
        try:
            sent, thrown = release(guard, declared), None
        except Exception as refused:  # noqa: BLE001  (raised in the function, which may handle it)
            sent, thrown = None, refused
