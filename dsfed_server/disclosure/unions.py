"""Unions of a pooled release's cells that a site's own release gives.

A pooled release checks its cells, and the spans of them an analyst can ask a site alone for (each cell, a run of
adjacent intervals, a row or a column of a table of two factors: :func:`~dsfed_server.disclosure.checks.cell_spans`),
against each site's few records. A site alone can still release the records of cells that are not a span: two
intervals apart (a cell of ``abs(D$score - k)`` is the two intervals at the same distance from ``k``), some of a
row's cells, two levels of a factor. The pooled counts of those cells, summed, less the other sites' own releases of
the same records, are the remaining site's records of them (Denning & Schlörer 1983): a union no span stands for.

:func:`union_of_cells` finds the cells whose union a row set is at this site (the cells that hold records here and
lie inside it, where every other cell lies outside it), :func:`spanned` says whether the sites checked that union
as one, and :func:`breaking_cell` names the cell whose merger with the next leaves a union of intervals apart no
union of the coarsened release's cells.

Two pooled releases of intervals of one column over the same records give more: the records below any cut of
either, so the pooled count of every cell of their common refinement (:func:`refinement`), and of every union of
those cells. A cell of ``(D$score - 0.45)^2`` is then the first release's [0.1, 0.2) with the second's [0.7, 0.8),
a union of no one release's cells. :func:`across` finds such cells and unions, and :func:`breaking_cuts` the cuts
of the latest release whose merger leaves one no union of the refinement's cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dsfed_server.disclosure.differencing import bits, set_size

ORDERED, CATEGORIES = "ordered", "categories"  # a release's cells: intervals in order, or categories of one factor


@dataclass(frozen=True)
class Union:
    """A union of a pooled release's cells (or of its refinement with earlier releases of its column) whose records
    here a release of this site alone gave: the release's cells it touches, the cells whose merger with the next
    breaks it, and whether it holds any of this site's records of an earlier pooled span or part another site was
    thin in."""

    touched: tuple[int, ...]
    breaking: tuple[int, ...]  # the cells whose merger with the next breaks it (the cuts above them dropped)
    thin_before: bool = False


@dataclass(frozen=True)
class Layout:
    """A pooled release's cells at this site, as :func:`layout` gives them, and how they lie (:func:`kind_of`)."""

    kind: str
    cell_of: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray


def kind_of(ordered: bool, shape: tuple[int, ...], column: str = "") -> str:
    """How a release's cells lie: in order (intervals; of ``column``, over all its records or a subset's:
    ``"ordered@table$column"``), a table of two factors (``"table:r,c"``), or categories."""
    if ordered:
        return f"{ORDERED}@{column}" if column else ORDERED
    if len(shape) == 2:
        return f"table:{shape[0]},{shape[1]}"
    return CATEGORIES


def in_order(kind: str) -> bool:
    """Whether a release's cells (laid out as ``kind``, :func:`kind_of`) are intervals in order."""
    return kind.split("@", 1)[0] == ORDERED


def column_of(kind: str) -> str:
    """The column a release's cells are intervals of (:func:`kind_of`); "" for none known."""
    return kind.split("@", 1)[1] if in_order(kind) and "@" in kind else ""


def labels(cells: list[np.ndarray], n: int) -> np.ndarray:
    """Per record of the table (``n``), the position of the cell (packed row sets, disjoint) that holds it; -1 for
    none."""
    out = np.full(n, -1, dtype=np.int64)
    for k, cell in enumerate(cells):
        out[bits(cell, n).astype(bool)] = k
    return out


def layout(cells: list[np.ndarray], counts: list[int], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of a pooled release's cells (this site's records of each, packed, over a table of ``n`` records; ``counts``:
    their pooled counts): per record the cell that holds it (:func:`labels`), this site's records of each, and the
    pooled counts, as :func:`union_of_cells` and :func:`spanned` take them."""
    return labels(cells, n), np.array([set_size(c) for c in cells]), np.array(counts)


def whole_cells(member: np.ndarray, cell_of: np.ndarray, sizes: np.ndarray) -> tuple[int, ...] | None:
    """The positions of the cells (``cell_of``: :func:`labels`; ``sizes``: each cell's records here) whose records
    here are exactly those of the row set ``member`` (packed) in any cell; None where it holds part of a cell, or
    none. Its records in no cell (an outcome missing, a record outside the release) are left out: their count comes
    apart from the cells' (complete cases, ``Nvalid``)."""
    inside = cell_of[bits(member, cell_of.size).astype(bool)]
    inside = inside[inside >= 0]
    if inside.size == 0:
        return None
    held = np.bincount(inside, minlength=sizes.size)
    touched = np.flatnonzero(held)
    if np.any(held[touched] != sizes[touched]):
        return None
    return tuple(int(k) for k in touched)


def union_of_cells(member: np.ndarray, cell_of: np.ndarray, sizes: np.ndarray) -> tuple[int, ...] | None:
    """:func:`whole_cells`, where they are two or more."""
    positions = whole_cells(member, cell_of, sizes)
    return positions if positions is not None and len(positions) > 1 else None


def spanned(positions: tuple[int, ...], counts: np.ndarray, kind: str, here: np.ndarray) -> bool:
    """Whether the cells at ``positions`` (of a release of ``counts.size`` cells laid out as ``kind``; ``counts``:
    their pooled counts; ``here``: this site's records of each) are a union the sites checked as one: adjacent
    intervals (a run longer than the runs checked is left, as the documented bound of the check), a whole row or
    column of a table, or, with the cells this site holds no record of, every cell the pooled release holds records
    of (this site's total, which the others' totals and the pooled total give anyway; what the pooled release
    adds is checked where a site's share of a span is exposed, :meth:`~dsfed_server.disclosure.checks.Guard.
    _fails_alone`). A cell empty here fills no run, row or column: the others' records of the union would be the
    span's less that cell's, a difference no check saw. Cells apart, some of a row's, or two categories are not."""
    chosen = set(positions)
    if chosen | set(np.flatnonzero(here == 0).tolist()) >= set(np.flatnonzero(counts).tolist()):
        return True
    if in_order(kind):
        return max(positions) - min(positions) + 1 == len(positions)
    if kind.startswith("table:"):
        rows, cols = (int(v) for v in kind.split(":", 1)[1].split(","))
        grid = np.arange(rows * cols).reshape(rows, cols)
        return any(chosen == set(line.tolist()) for line in (*grid, *grid.T))
    return False


def breaking_cell(positions: tuple[int, ...]) -> int:
    """Of a union of intervals apart (``positions``), the cell whose merger with the next breaks it: the last of its
    first run, whose next cell lies outside the union."""
    ordered = sorted(positions)
    for a, b in zip(ordered, ordered[1:]):
        if b != a + 1:
            return a
    return ordered[-1]


@dataclass(frozen=True)
class Refined:
    """Pooled releases of intervals of one column, and per record its cell of their common refinement (the records in
    the same cell of every release share one; -1: in no cell of any) with each such cell's records here."""

    releases: tuple[Layout, ...]
    cell_of: np.ndarray
    sizes: np.ndarray


def refinement(releases: Sequence[Layout]) -> Refined:
    """The common refinement of ``releases``' cells at this site (:class:`Refined`)."""
    out = np.zeros(releases[0].cell_of.size, dtype=np.int64)
    inside = np.zeros(out.size, dtype=bool)
    for release in releases:
        inside |= release.cell_of >= 0
        _, out = np.unique(out * (int(release.cell_of.max(initial=0)) + 2) + release.cell_of + 1, return_inverse=True)
    out = np.where(inside, out, -1)
    return Refined(tuple(releases), out, np.bincount(out[inside], minlength=1))


def strays(member: np.ndarray, cell_of: np.ndarray, universe: np.ndarray) -> bool:
    """Whether the row set ``member`` (packed) holds records of ``universe`` (per record) in no cell of a release
    (``cell_of``): records of another release over another subset, which a union of this one's cells leaves out."""
    return bool(np.any(bits(member, cell_of.size).astype(bool) & universe & (cell_of < 0)))


def _covered(member: np.ndarray, release: Layout, universe: np.ndarray) -> bool:
    """Whether ``member`` is, here, one cell of ``release`` or a union of its cells that the sites checked as one,
    with no record of ``universe`` outside them."""
    positions = whole_cells(member, release.cell_of, release.sizes)
    return positions is not None and not strays(member, release.cell_of, universe) and (
        len(positions) == 1 or spanned(positions, release.counts, release.kind, release.sizes))


def across(member: np.ndarray, refined: Refined) -> bool:
    """Whether the row set ``member`` (packed) is, here, one or more cells of the common refinement of pooled releases
    of intervals of one column (``refined``) that are no cell of one of them nor a union of one's cells the sites
    checked as one, nor all of them (this site's total over the releases, as :func:`spanned` has it). Over the same
    records such cells' pooled count is the pooled releases' (the records below the cuts that bound them); over two
    disjoint subsets, the sum of cells of each (where the subsets overlap, a cell of the refinement is no pooled cell:
    taken as one, the check refuses more, never less). No check of a release's spans saw them."""
    universe = refined.cell_of >= 0
    positions = whole_cells(member, refined.cell_of, refined.sizes)
    return (positions is not None and len(positions) < np.count_nonzero(refined.sizes)
            and not any(_covered(member, release, universe) for release in refined.releases))


def breaking_cuts(member: np.ndarray, earlier: Refined, cell_of: np.ndarray) -> list[tuple[int, ...]]:
    """The cuts of a release (cut ``j`` between its cells ``j`` and ``j + 1``; ``cell_of``: per record its cell) whose
    merger leaves ``member`` (packed; a union of cells of the refinement of the release with ``earlier`` ones) no
    such union: where a cell of the earlier ones holds records of the union in one cell of the release and records
    outside it in the next that holds any of its records here, the cuts between the two (one, unless the cells
    between hold none of them here). Empty: the union is whole in every cell of the earlier ones, which no cut of the
    release makes."""
    inside = cell_of >= 0
    held = bits(member, cell_of.size).astype(np.int64)
    o, c, s = np.unique(np.stack([earlier.cell_of[inside], cell_of[inside], held[inside]]), axis=1)
    breaks = (o[1:] == o[:-1]) & (s[1:] != s[:-1])
    return sorted({tuple(range(int(a), int(b))) for a, b in zip(c[:-1][breaks], c[1:][breaks])})
