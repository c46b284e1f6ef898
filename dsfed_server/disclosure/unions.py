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
"""

from __future__ import annotations

import numpy as np

from dsfed_server.disclosure.differencing import bits, set_size

ORDERED, CATEGORIES = "ordered", "categories"  # a release's cells: intervals in order, or categories of one factor


def kind_of(ordered: bool, shape: tuple[int, ...]) -> str:
    """How a release's cells lie: in order (intervals), a table of two factors (``"table:r,c"``), or categories."""
    if ordered:
        return ORDERED
    if len(shape) == 2:
        return f"table:{shape[0]},{shape[1]}"
    return CATEGORIES


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


def union_of_cells(member: np.ndarray, cell_of: np.ndarray, sizes: np.ndarray) -> tuple[int, ...] | None:
    """The positions of the cells (``cell_of``: :func:`labels`; ``sizes``: each cell's records here) whose records
    here are exactly those of the row set ``member`` (packed) in any cell, where it is two or more of them; None
    otherwise (a cell it holds part of, or fewer than two). Its records in no cell (an outcome missing, a record
    outside the release) are left out: their count comes apart from the cells' (complete cases, ``Nvalid``)."""
    inside = cell_of[bits(member, cell_of.size).astype(bool)]
    inside = inside[inside >= 0]
    if inside.size == 0:
        return None
    held = np.bincount(inside, minlength=sizes.size)
    touched = np.flatnonzero(held)
    if touched.size < 2 or np.any(held[touched] != sizes[touched]):
        return None
    return tuple(int(k) for k in touched)


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
    if kind == ORDERED:
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
