"""Releases a function declares part-way through: the steps of a release of several steps.

Most functions release once, at the end: they return a declaration of cells, a protocol's steps or a
checked value, and the service releases it as the registry entry declares. Some must release something
before they can compute the rest: the table of group sizes before any mean by group (the means are read
only over the groups released), a protocol's cuts and the cells between them before its statistics leave.
Such a function does not call the gate either. It is a generator that yields a declaration of what it
releases and receives what the release gave back, then goes on::

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
  cells leave, the pooled steps of their row-set audit, at whose end the declared result is released.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.differencing import Rows
from dsfed_server.disclosure.gate import Categories, Cut, Intervals
from dsfed_server.disclosure.protocol_cuts import ProtocolCuts


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
    (:meth:`ProtocolCuts.record`, :meth:`ProtocolCuts.record_cells`); None is sent back. ``audited`` True
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


Declared = Intervals | Categories | Groups | JointCells | ProtocolCells

T = TypeVar("T")


def release(guard: Guard, declared: Declared) -> Any:
    """What one declared step releases, through ``guard`` (the call's); a protocol's cells through the
    guard of the call that began the protocol, which their :class:`ProtocolCuts` holds."""
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
        cuts.record(declared.released)
        cuts.record_cells(values, declared.bounds, counts)
        return None
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
