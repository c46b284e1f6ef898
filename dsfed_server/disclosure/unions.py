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
union of the coarsened release's cells. :func:`union_across` finds a row set that is a union of cells of two or more
pooled releases and of no one release's (the men's bin [0.7, 0.8) of thresholds over the men and the women's
[0.2, 0.3) of thresholds over the women, in one cell of ``abs(D$score + D$sex - 1)``): the pooled counts of the
cells, summed, less the other sites' own releases of the row set are the remaining site's records of it too, and no
release's check saw that sum.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dsfed_server.disclosure.differencing import PooledCell, bits, packed_set, set_size

ORDERED, CATEGORIES = "ordered", "categories"  # a release's cells: intervals in order, or categories of one factor


class AloneUnion(NamedTuple):
    """A union that a site released alone before of a pooled release's cells, alone or with cells of earlier pooled
    releases: the release's cells in it; whether the earlier cells make another site's share of it 1 to q - 1
    records (:func:`thin_part`); and whether this release's cells in it are a span (:func:`spanned`), which makes
    the other sites' shares of the union thin only where that span is."""

    positions: tuple[int, ...]
    thin_before: bool
    span: bool


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
    their pooled counts; ``here``: this site's records of each) are a union the sites checked as one: one cell,
    adjacent intervals (a run longer than the runs checked is left, as the documented bound of the check), a whole
    row or column of a table, or, with the cells this site holds no record of, every cell the pooled release holds
    records of (this site's total, which the others' totals and the pooled total give anyway; what the pooled
    release adds is checked where a site's share of a span is exposed, :meth:`~dsfed_server.disclosure.checks.
    Guard._fails_alone`). A cell empty here fills no run, row or column: the others' records of the union would be the
    span's less that cell's, a difference no check saw. Cells apart, some of a row's, or two categories are not."""
    if len(positions) == 1 or whole(positions, counts, here):
        return True
    if kind == ORDERED:
        return max(positions) - min(positions) + 1 == len(positions)
    if kind.startswith("table:"):
        rows, cols = (int(v) for v in kind.split(":", 1)[1].split(","))
        grid = np.arange(rows * cols).reshape(rows, cols)
        return any(set(positions) == set(line.tolist()) for line in (*grid, *grid.T))
    return False


def whole(positions: tuple[int, ...], counts: np.ndarray, here: np.ndarray) -> bool:
    """Whether the cells at ``positions``, with those this site holds no record of (``here``: its records of each),
    are every cell the pooled release holds records of (``counts``): this site's records of the whole release, a
    total."""
    return set(positions) | set(np.flatnonzero(here == 0).tolist()) >= set(np.flatnonzero(counts).tolist())


class ReleaseCells:
    """A pooled release's cells at this site, packed a cell a row, with this site's records of each, their pooled
    counts, how they lie (:func:`kind_of`), and every record here that one of them holds."""

    def __init__(self, kind: str, cells: list[PooledCell]) -> None:
        self.kind = kind
        self.rows = np.stack([packed_set(c.rows) for c in cells])
        self.sizes = np.bitwise_count(self.rows).sum(axis=1, dtype=np.int64)
        self.counts = np.array([c.count for c in cells], dtype=np.int64)
        self.held = np.bitwise_or.reduce(self.rows, axis=0)

    def inside(self, member: np.ndarray) -> np.ndarray:
        """The positions of the cells that hold records here, all of them in ``member`` (packed)."""
        return np.flatnonzero((self.sizes > 0) & ~np.any(np.bitwise_and(self.rows, np.bitwise_not(member)), axis=1))


def union_across(member: np.ndarray, releases: list[ReleaseCells], needed: int | None = None
                 ) -> list[tuple[int, ...]] | None:
    """Per release of ``releases``, the positions of its cells that lie inside the row set ``member`` (packed),
    where those of two or more releases together hold every record of it that any of their cells holds and no one
    release's cells do (with ``needed``, nor the others' without that release's): the pooled counts of those cells,
    summed (disjoint here) or by inclusion and exclusion, less the other sites' own releases of the row set are the
    remaining site's records of it (Denning & Schlörer 1983), a sum no release's check saw as one. None where there
    is no such union, or where it takes each release whole (:func:`whole`: a sum of totals, as :func:`spanned` takes
    one). As :func:`union_of_cells`, its records in no cell are left out."""
    if needed is not None and not releases[needed].inside(member).size:
        return None  # that release's cells take no part in it
    anywhere = np.bitwise_and(member, np.bitwise_or.reduce([release.held for release in releases]))
    if not set_size(anywhere):
        return None
    parts = [release.inside(member) for release in releases]
    covered = [np.bitwise_or.reduce(release.rows[p], axis=0) if p.size else np.zeros_like(member)
               for release, p in zip(releases, parts)]

    def leaves(taken: list[np.ndarray]) -> int:  # records of the row set in some cell that ``taken`` leave out
        held = np.bitwise_or.reduce(taken, axis=0) if taken else np.zeros_like(member)
        return set_size(np.bitwise_and(anywhere, np.bitwise_not(held)))

    if leaves(covered) or any(leaves([c]) == 0 for c in covered):
        return None
    if needed is not None and not leaves([c for j, c in enumerate(covered) if j != needed]):
        return None
    out = [tuple(int(k) for k in p) for p in parts]
    if all(not p or whole(p, release.counts, release.sizes) for p, release in zip(out, releases)):
        return None  # a sum of this site's totals of releases (its whole table, the men and the women)
    return out


def thin_part(parts: list[tuple[int, ...]], releases: list[ReleaseCells], thin: list[np.ndarray]
              ) -> np.ndarray | None:
    """Of a union across releases (:func:`union_across`: per release of ``releases`` its cells in it), a row set of
    ``thin`` (this site's records, packed, of spans of pooled cells another site held 1 to q - 1 records of) that
    makes the other site's share of it 1 to q - 1 records: one inside a part that no span stands for
    (:func:`spanned`), or a part that is a span and was thin itself. A part that is a span and was not thin holds 0 or
    q or more records of each site's, whatever cells of it were thin, and so does a sum of such parts. None if there
    is none."""
    for positions, release in zip(parts, releases):
        if not positions:
            continue
        records = np.bitwise_or.reduce(release.rows[list(positions)], axis=0)
        span = spanned(positions, release.counts, release.kind, release.sizes)
        for t in thin:
            if set_size(t) and not np.any(np.bitwise_and(t, np.bitwise_not(records))) and (
                    not span or np.array_equal(t, records)):
                return t
    return None


def breaking_cell(positions: tuple[int, ...]) -> int:
    """Of a union of intervals apart (``positions``), the cell whose merger with the next breaks it: the last of its
    first run, whose next cell lies outside the union."""
    ordered = sorted(positions)
    for a, b in zip(ordered, ordered[1:]):
        if b != a + 1:
            return a
    return ordered[-1]
