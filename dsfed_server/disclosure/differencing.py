"""Differencing between subsets: the rows of every subset an analyst makes, per table.

``subset_min`` alone only compares a subset with the table it is cut from. Two subsets
that each pass it can still differ by one record (``age >= 50`` and ``age >= 51`` when one
person is 50), and then ``meanDS`` x ``Nvalid`` on both gives that person's value by
subtraction; or two overlapping subsets whose union is the table and whose intersection is
one record (``age >= 50`` and ``age <= 50``) give it by inclusion-exclusion.

So the site keeps, per table lineage and for all analysts together, the row sets (as 0/1
indicator vectors over the table's rows, packed 1 bit a record) of every subset made from it and of every cell a binned
release or a table released from it (in its release history, :mod:`dsfed_server.disclosure.history`,
which survives restarts), and refuses a new subset, or a release whose cells (rule
``disclosure.subset_min_difference``; the release gate first tries dropping cuts)

* differ from the table or an earlier row set in fewer than ``subset_min_difference``
  rows (but not zero: the same rows again are fine), or
* would put some single record's indicator :math:`e_i` in the linear span of all the indicator
  vectors: then a linear combination of sums over those row sets is that record's value
  (the classical audit of sum queries, Chin & Ozsoyoglu 1982). With an orthonormal basis
  :math:`Q` of the span (SVD), :math:`e_i` is in it iff :math:`\\|Q^T e_i\\|^2 = 1`
  (:func:`isolated_records`, a batch of atoms at a time).

The cells matter across columns and subsets: an age histogram and a score histogram each keep
q records per bin, yet if only one young patient has a low score, "young" minus "high score"
may be exactly that patient (when no old patient has a high score); a score histogram on the
subset ``age >= 30`` against the same histogram on the whole table leaves the young records of
each bin, possibly one. Neither the cut history of one column nor the subsets alone see that.

Rows are identified by their position in the site table: ``assignTable`` marks a table's
rows, the subset functions mark each subset's rows (``frame.attrs``); a table derived
otherwise gets a lineage keyed by its content (``calibrationFrameDS`` marks the rows it keeps).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable, TypeVar

import numpy as np
import pandas as pd

from dsfed_server.rowbatches import row_batches

ROWS = "dsfed.rows"
T = TypeVar("T", pd.DataFrame, pd.Series)
MAX_ROW_SETS = 5000  # different row sets released from one table (subsets and cells), all analysts together
SMALL_GROUPS = 50_000  # groups of few atoms spanned_gap tries (:func:`_new_small_group`)
NEAR_SPACE = 1e-6  # a group's squared distance from a space (:func:`_beyond`) below which its residual is computed
CODED_SETS = 16  # up to this many row sets, a record's atom is a 16-bit code (:func:`_atoms`)
ATOM_FLOATS = 1 << 20  # values of the atoms x sets matrix the audit holds at once (8 MiB; :func:`atom_batch`)
TOLERANCE_FACTOR = 100  # the leverage's tolerance, in eps x W's condition number (:func:`isolated_records`)
# atoms x sets^2 the audit of one release may take (its QR updates' multiply-adds: about a minute on one
# core); a release whose audit would take more is refused
MAX_AUDIT_WORK = 2e11
UNION_SETS = 64  # cells a pooled remainder's union is combined from (:func:`_union_remainder`)
REMAINDER_RETRIES = 2  # a remainder pass run again without the cell it took first, so many times (_small_remainder)


@dataclass(frozen=True, eq=False)  # identity equality: pandas compares attrs when combining frames
class Rows:
    """Which rows of a lineage's root table a frame holds."""

    lineage: str
    index: np.ndarray  # positions in the root table (never modified)
    n_root: int
    whole: bool = False  # index is 0 .. n_root - 1: the root table itself, in order

    def __deepcopy__(self, memo: dict) -> "Rows":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy

    def __copy__(self) -> "Rows":
        return self


def records_digest(rows: Rows | None) -> bytes:
    """Which records of which table (b"" where not known)."""
    if rows is None:
        return b""
    return hashlib.sha256(rows.lineage.encode() + np.ascontiguousarray(rows.index).tobytes()).digest()


@functools.lru_cache(maxsize=8)
def whole_table(lineage: str, n: int) -> Rows:
    """The rows of a whole table of ``n`` records: positions 0 .. n - 1, one read-only array per table
    shared by every session that assigns it (int32 below 2**31 records: 8 bytes per record less)."""
    index = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    index.flags.writeable = False
    return Rows(lineage, index, n, whole=True)


def rows_of(frame: pd.DataFrame) -> Rows:
    info = frame.attrs.get(ROWS)
    if isinstance(info, Rows) and info.index.size == len(frame):
        return info
    digest = hashlib.sha256()
    digest.update(repr(list(map(str, frame.columns))).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return whole_table("derived:" + digest.hexdigest()[:24], len(frame))


def mark_rows(frame: T, rows: Rows) -> T:
    """``frame`` (a table or a vector) marked with the site-table rows its records are."""
    frame.attrs[ROWS] = rows
    return frame


def packed_rows(rows: Rows, among: np.ndarray | None = None) -> bytes | None:
    """The records ``rows`` holds (those of them ``among`` marks, boolean over them) as a row set of the
    root table, packed 1 bit a record as the release history keeps it; None when it holds none."""
    full = np.zeros(rows.n_root, dtype=bool)
    full[rows.index if among is None else rows.index[among]] = True
    return np.packbits(full).tobytes() if full.any() else None


def bits(rows: np.ndarray, n: int) -> np.ndarray:
    """Row set ``rows`` as ``n`` bytes of 0 or 1: a boolean array as it is (a view), or one packed by
    ``np.packbits`` (as the release history keeps row sets: 1 bit a record) unpacked."""
    if rows.dtype == bool and rows.size == n:
        return rows.view(np.uint8)
    if rows.dtype == np.uint8 and rows.size == (n + 7) // 8:
        return np.unpackbits(rows, count=n)
    raise ValueError(f"a row set of {n} records is a boolean array of {n} or one packed in {(n + 7) // 8} "
                     f"bytes, not {rows.size} values of {rows.dtype}")


def set_size(packed: np.ndarray) -> int:
    """The number of records in a packed row set."""
    return int(np.bitwise_count(packed).sum(dtype=np.int64))


def _differences(sets: Sequence[np.ndarray], packed: np.ndarray) -> np.ndarray:
    """Per packed row set of ``sets``, the number of records in it or in ``packed`` and not in the other."""
    return _per_set(sets, packed,
                    lambda block: np.bitwise_count(np.bitwise_xor(block, packed)).sum(axis=1, dtype=np.int64))


def _overlaps(sets: Sequence[np.ndarray], packed: np.ndarray) -> np.ndarray:
    """Per packed row set of ``sets``, the number of records in it and in ``packed``."""
    return _per_set(sets, packed,
                    lambda block: np.bitwise_count(np.bitwise_and(block, packed)).sum(axis=1, dtype=np.int64))


def _covering(sets: Sequence[np.ndarray], packed: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Per packed row set of ``sets``, whether it and ``packed`` together are exactly ``group``."""
    return _per_set(sets, packed, lambda block: (np.bitwise_or(block, packed) == group).all(axis=1))


def _per_set(sets: Sequence[np.ndarray], packed: np.ndarray, answer: Callable[[np.ndarray], np.ndarray]
             ) -> np.ndarray:
    """``answer`` of each block of ``sets`` (packed, stacked: about 1 MB at a time, so that a long history is never
    copied whole), one value per set."""
    step = max(1, (1 << 20) // max(1, packed.size))
    return np.concatenate([answer(np.stack(sets[s:s + step])) for s in range(0, len(sets), step)])


def _differing(a: np.ndarray, b: np.ndarray) -> int:
    """The number of records in one of two packed row sets and not the other."""
    return int(np.bitwise_count(np.bitwise_xor(a, b)).sum())


def differs_little(member: np.ndarray, sets: Sequence[np.ndarray], min_difference: int) -> bool:
    """Whether row set ``member`` (packed) differs from one of ``sets`` (packed) it shares a record with in 1 to
    ``min_difference`` - 1 records: the pairwise part of :func:`row_set_problem`, for sets kept apart from the releases
    its span audits."""
    return any(0 < _differing(old, member) < min_difference and np.bitwise_and(old, member).any() for old in sets)


def nearest_sets(member: np.ndarray, sets: Sequence[np.ndarray], limit: int, latest: int) -> list[np.ndarray]:
    """Up to ``limit`` of ``sets`` (packed, the latest last) for an audit of ``member`` (packed) in combination: the
    ``latest`` of them; then those that share records with it; then those that share records with theirs outside it
    (``A - C - G`` where ``C``, inside ``A``, is outside ``G``), first those that meet the smallest of them (the
    unions of the 1, 2, 4, ... smallest, each outside ``member``, rank them: a broad set that touches ``member``
    puts nearly every set in its reach, and the sets beside a small one come before those); then the others. The
    latest first within each tier, kept in their order. Taking the latest alone let an analyst push the cells that
    set a few records apart out of the combination with cells released after them; the latest stay, so the audit
    sees at least what it saw over them."""
    if len(sets) <= limit:
        return list(sets)
    touching = [k for k, s in enumerate(sets) if np.bitwise_and(s, member).any()]
    outside, reach, union = np.bitwise_not(member), [], np.zeros_like(member)
    by_size = sorted(touching, key=lambda k: set_size(sets[k]))
    for rank, k in enumerate(by_size, 1):
        np.bitwise_or(union, sets[k], out=union)
        if rank & (rank - 1) == 0 or rank == len(by_size):  # 1, 2, 4, ... and all
            reach.append(np.bitwise_and(union, outside))
    near = set(touching)
    tier = [1 if k in near else 2 + bisect.bisect_left(reach, True, key=lambda r: bool(np.bitwise_and(s, r).any()))
            for k, s in enumerate(sets)]
    tier[len(sets) - latest:] = [0] * min(latest, len(sets))
    chosen = sorted(range(len(sets)), key=lambda k: (tier[k], -k))[:limit]
    return [sets[k] for k in sorted(chosen)]


def _bit_at(rows: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Whether the records at ``positions`` belong to row set ``rows`` (boolean, or packed)."""
    if rows.dtype == bool:
        return rows[positions]
    return ((rows[positions >> 3] >> (7 - (positions & 7))) & 1).astype(bool)


class AuditTooLarge(Exception):
    """The row sets are too many over too many atoms for :func:`isolated_records` to audit within
    :data:`MAX_AUDIT_WORK`."""


def isolated_records(sets: list[np.ndarray], n: int) -> np.ndarray:
    """The records (positions) whose indicator :math:`e_i` lies in the linear span of the row sets
    ``sets`` (over the table's ``n`` rows, each boolean or packed, :func:`bits`): for each, a
    combination of sums over the sets is that record's value (Chin & Ozsoyoglu 1982).

    The sets are constant on **atoms** (records that belong to the same sets), so the span is computed
    over atoms: with :math:`M` the atoms x sets incidence and :math:`c` the atoms' sizes, :math:`W =
    \\operatorname{diag}(\\sqrt c) M` has the SVD :math:`U S V^T`, and a record of atom *a* the leverage
    :math:`\\|U_a\\|^2 / c_a`; it is 1 exactly when the record's indicator is in the span (then its atom
    holds it alone). :math:`W` is never held whole: the triangular factor :math:`R` of its QR
    decomposition (sets x sets) is updated a batch of atoms at a time (:math:`R` of :math:`[R; W_B]`),
    and :math:`R`'s SVD gives :math:`S` and :math:`V`. A lone record's row of the basis is then
    :math:`W_a V S^{-1}`, which the product gives only to within about :math:`\\epsilon` times
    :math:`W`'s condition number :math:`s_1 / s_r` (an SVD of :math:`W` itself would give it to
    :math:`\\epsilon`): a leverage within :data:`TOLERANCE_FACTOR` :math:`\\epsilon\\, s_1 / s_r` of 1
    (and at least 1e-8) counts as 1, so nearly dependent sets cannot hide a record; they may refuse one
    whose leverage is nearly 1. The audit holds :func:`atom_batch` rows of :math:`W` and a few sets x
    sets matrices, where :math:`W` has as many rows as there are atoms: up to one a record when the sets
    are cells of histograms on independent columns. :class:`AuditTooLarge` when atoms x sets\\ :sup:`2`
    exceeds :data:`MAX_AUDIT_WORK`."""
    if not sets or n == 0:
        return np.zeros(0, dtype=np.int64)
    first, counts = _atoms(sets, n)
    single = np.flatnonzero(counts == 1)
    if single.size == 0:
        return np.zeros(0, dtype=np.int64)
    if first.size * len(sets) ** 2 > MAX_AUDIT_WORK:
        raise AuditTooLarge(f"{len(sets)} row sets over {first.size:,} groups of records")
    batch = atom_batch(len(sets))
    weights = np.sqrt(counts)

    def w(atoms: slice | np.ndarray) -> np.ndarray:
        return _incidence(sets, first[atoms]) * weights[atoms, None]

    r = np.zeros((0, len(sets)))
    for start in range(0, first.size, batch):
        r = np.linalg.qr(np.vstack([r, w(slice(start, start + batch))]), mode="r")
    _, s, vt = np.linalg.svd(r, full_matrices=False)
    if s[0] == 0:
        return np.zeros(0, dtype=np.int64)
    kept = s > s[0] * max(first.size, len(sets)) * np.finfo(float).eps * 10
    to_basis = vt[kept].T / s[kept]  # W_a times it is U_a: the span's orthonormal basis at atom a
    # W_a V S^-1 is U_a to within about eps x the condition number (the product cancels where the kept
    # singular values are small): a leverage that close to 1 counts as 1 (a refusal rather than a miss)
    tolerance = max(1e-8, TOLERANCE_FACTOR * np.finfo(float).eps * s[0] / s[kept][-1])
    isolated = []
    for start in range(0, single.size, batch):
        lone = single[start:start + batch]
        u = w(lone) @ to_basis
        isolated.append(first[lone[np.einsum("ij,ij->i", u, u) > 1 - tolerance]])
    return np.sort(np.concatenate(isolated))


def atom_batch(n_sets: int) -> int:
    """Atoms a pass of :func:`isolated_records` takes at once: :data:`ATOM_FLOATS` values of the atoms x
    sets matrix, and no fewer atoms than sets (each update of :math:`R` factors a matrix of that many
    rows more than the batch: beyond 1,024 sets a batch holds sets\\ :sup:`2` values)."""
    return max(ATOM_FLOATS // n_sets, n_sets)


def _incidence(sets: list[np.ndarray], positions: np.ndarray) -> np.ndarray:
    """Which of ``sets`` the records at ``positions`` belong to (records x sets, float 0/1)."""
    out = np.empty((positions.size, len(sets)))
    for j, rows in enumerate(sets):
        out[:, j] = _bit_at(rows, positions)
    return out


def _atoms(sets: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The atoms of ``sets`` (records that belong to the same sets): each atom's first record
    (position) and its size. The sets are read one at a time (a packed one unpacked for its turn
    only): no records x sets matrix.

    Up to :data:`CODED_SETS` sets, a record's atom is a 16-bit code of the sets it belongs to: 2 bytes
    a record, the atoms' sizes counted by ``np.bincount`` and their first records found a batch of
    rows at a time. Beyond, a record's atom is a 64-bit label, doubled and given the record's bit set
    by set, and numbered 0 .. atoms - 1 again (by a hash table, ``pandas.factorize``) before it would
    overflow and at the end."""
    if len(sets) > CODED_SETS:
        return _labelled_atoms(sets, n)
    code = np.zeros(n, dtype=np.uint16)
    for j, rows in enumerate(sets):
        np.bitwise_or(code, bits(rows, n).astype(np.uint16) << j, out=code)
    counts = np.bincount(code, minlength=1 << len(sets))
    values = np.flatnonzero(counts)
    first = np.full(counts.size, -1, dtype=np.int64)
    unseen = values.size
    for rows in row_batches(code.size):
        seen, at = np.unique(code[rows], return_index=True)
        new = first[seen] < 0
        first[seen[new]] = at[new] + rows.start
        unseen -= int(np.count_nonzero(new))
        if unseen == 0:
            break
    return first[values], counts[values]


def _labelled_atoms(sets: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_atoms` of more than :data:`CODED_SETS` sets: 8 bytes a record for the labels, as many
    for their numbers, and a running maximum of those for the atoms' first records."""
    label = _atom_labels(sets, n)
    counts = np.bincount(label)
    running = np.maximum.accumulate(label)  # atoms are numbered as their first records come
    first = np.flatnonzero(np.concatenate(([True], running[1:] > running[:-1])))
    return first, counts


def _atom_labels(sets: list[np.ndarray], n: int) -> np.ndarray:
    """Each record's atom of ``sets``, numbered 0, 1, ... as the atoms first occur: a 64-bit label doubled
    and given the record's bit set by set, numbered again before it would overflow."""
    label = np.zeros(n, dtype=np.int64)
    top = 1  # every label is below it
    for rows in sets:
        if top > 1 << 61:
            label = _numbered(label)
            top = int(label.max()) + 1
        label <<= 1
        np.bitwise_or(label, bits(rows, n), out=label)
        top <<= 1
    return _numbered(label)


def _numbered(label: np.ndarray) -> np.ndarray:
    """The labels numbered 0, 1, ... in the order they first occur (a hash table: no sort)."""
    return pd.factorize(label)[0]


@dataclass(frozen=True)
class PooledCell:
    """This site's records of a cell (boolean over the table, or packed) and the count the analyst sees of
    it: pooled over the sites for a pooled cell, this site's own for a cell or subset of this site alone.
    ``column``: the table column the cell is an interval of, over all its records ("" for any other cell):
    two such cells of one column are nested or not alike at every site, and the release gate keeps
    nested ones q records apart pooled (:mod:`~dsfed_server.disclosure.gate`)."""

    rows: np.ndarray
    count: int
    column: str = ""
    cell_id: str = ""  # a pooled cell's identity, the same at every site of its release ("": none kept)


@dataclass(frozen=True)
class SharedCell:
    """A pooled cell released before, as the analyst relays it with a pooled release: its identity (the same at
    every site of its release), its pooled count and the column it is an interval of."""

    cell_id: str
    count: int
    column: str


@dataclass(frozen=True)
class SharedPairs:
    """The pairs of a new pooled release's cells and relayed earlier pooled cells every site derives alike from
    the pooled counts and the relay (:func:`shared_pairs`): per pair, the new cell's position and the earlier
    cell's pooled count; and this site's part of the pooled decision on them, as fields of the pooled step."""

    positions: list[int]
    earlier_counts: list[int]
    fields: dict[str, np.ndarray]


def shared_pairs(new: list[PooledCell], relayed: list[SharedCell], held: dict[str, PooledCell], min_difference: int
                 ) -> SharedPairs:
    """What this site adds to the pooled decision on pairs of a new pooled cell and a relayed earlier one. The
    pairs are those whose pooled counts differ by fewer than ``min_difference`` and that are not two intervals of
    one column (which the gate keeps apart). Per pair, this site adds: its records in one of the two cells and
    not the other (its records of the new cell where it holds no records of the earlier one: ``held``, by
    identity); whether it holds the earlier cell and how many records of it; and whether the pair fails its own
    audit (nested here within ``min_difference`` records, the pooled counts as close: :func:`pooled_pair_problem`),
    which decides where the holders' records of the earlier cell do not make up its pooled count
    (:func:`shared_pair_problems`)."""
    if not new or not relayed:
        return SharedPairs([], [], {})
    packed = [packed_set(cell.rows) for cell in new]
    sizes = np.array([set_size(rows) for rows in packed], dtype=np.int64)
    codes: dict[str, int] = {"": -1}
    new_columns = np.array([codes.setdefault(cell.column, len(codes)) for cell in new])
    earlier_columns = np.array([codes.setdefault(shared.column, len(codes)) for shared in relayed])
    earlier = np.array([shared.count for shared in relayed], dtype=np.int64)
    order = np.argsort(earlier, kind="stable")
    new_counts = np.array([cell.count for cell in new], dtype=np.int64)
    starts = np.searchsorted(earlier[order], new_counts - min_difference, "right")  # counts closer than
    ends = np.searchsorted(earlier[order], new_counts + min_difference, "left")  # min_difference to each new cell's
    near = [np.sort(order[a:b]) for a, b in zip(starts, ends)]
    near = [k[earlier_columns[k] != c] if c >= 0 else k for k, c in zip(near, new_columns)]
    new_at = np.repeat(np.arange(len(new)), [len(k) for k in near])
    earlier_at = np.concatenate(near)
    held_ids = [cell_id for cell_id in dict.fromkeys(shared.cell_id for shared in relayed) if cell_id in held]
    held_at = {cell_id: k for k, cell_id in enumerate(held_ids)}
    held_rows = [held[cell_id].rows for cell_id in held_ids]
    held_sizes = np.array([set_size(rows) for rows in held_rows], dtype=np.int64)
    pair_held_at = np.array([held_at.get(relayed[k].cell_id, -1) for k in earlier_at], dtype=np.int64)
    pair_holding = pair_held_at >= 0
    differing = sizes[new_at]
    held_count = np.zeros(len(new_at), dtype=np.int64)
    objects = np.zeros(len(new_at), dtype=bool)
    if pair_holding.any():
        both = np.flatnonzero(pair_holding)
        a, b = new_at[both], pair_held_at[both]
        d = _pairwise_differing(packed, held_rows, a, b)
        differing[both], held_count[both] = d, held_sizes[b]
        objects[both] = (d > 0) & (d < min_difference) & (d == np.abs(held_sizes[b] - sizes[a]))
    positions, counts = [int(j) for j in new_at], [int(c) for c in earlier[earlier_at]]
    fields = {"pair_differing": differing, "pair_holding": pair_holding, "pair_held": held_count,
              "pair_objects": objects}
    return SharedPairs(positions, counts,
                       {name: np.asarray(v, dtype=float) for name, v in fields.items()} if positions else {})


def _pairwise_differing(left: Sequence[np.ndarray], right: Sequence[np.ndarray], a: np.ndarray, b: np.ndarray
                        ) -> np.ndarray:
    """Per pair ``(a[k], b[k])``, the number of records in one of the packed row sets ``left[a[k]]`` and
    ``right[b[k]]`` and not the other; a block of pairs at a time, about 32 MB of copies in all."""
    out = np.empty(len(a), dtype=np.int64)
    step = max(1, (8 << 20) // max(1, left[0].size))
    for s in range(0, len(a), step):
        block = np.bitwise_xor(np.stack([left[k] for k in a[s:s + step]]), np.stack([right[k] for k in b[s:s + step]]))
        out[s:s + step] = np.bitwise_count(block).sum(axis=1, dtype=np.int64)
    return out


def shared_pair_problems(pairs: SharedPairs, pooled: dict[str, np.ndarray], min_difference: int) -> set[int]:
    """The new cells of :func:`shared_pairs` objected to, from the pooled sums of the sites' parts. Where the
    holders' records of the earlier cell make up its pooled count, every site that had records in it holds it,
    so the pooled number of records in one cell and not the other is exact: a cell is objected to where it is 1
    to ``min_difference - 1`` (the difference of the two releases would be those records': Denning & Schlörer
    1983). Where they do not (a site of that release that keeps no history, or whose table has changed since),
    that number may count records the earlier cell held, and each holder's own audit of the pair decides, as
    before the sites shared identities. Pairs no site holds the earlier cell of are no pairs (an identity the
    analyst made up, or a cell of another table)."""
    out: set[int] = set()
    d, holding = np.rint(np.ravel(pooled["pair_differing"])), np.ravel(pooled["pair_holding"])
    held, objects = np.rint(np.ravel(pooled["pair_held"])), np.ravel(pooled["pair_objects"])
    for k, (j, count) in enumerate(zip(pairs.positions, pairs.earlier_counts)):
        if holding[k] < 0.5:
            continue
        if (0 < d[k] < min_difference) if held[k] == count else objects[k] > 0.5:
            out.add(j)
    return out


def packed_set(rows: np.ndarray) -> np.ndarray:
    """A row set packed by ``np.packbits`` (1 bit a record), as the history keeps it."""
    return np.packbits(rows) if rows.dtype == bool else rows


def with_identities(cells: list[PooledCell], tag: np.ndarray) -> list[PooledCell]:
    """``cells`` (a pooled release's, in its order), each with its identity: a digest of the pooled ``tag`` (the
    sum of a random number from every site, the same at each) and the cell's position."""
    seed = ",".join(str(int(v)) for v in np.rint(np.ravel(tag)))
    return [dataclasses.replace(cell, cell_id=hashlib.sha256(f"{seed}:{k}".encode()).hexdigest()[:32])
            for k, cell in enumerate(cells)]


def pooled_pair_problem(earlier: list[PooledCell], new: list[PooledCell], min_difference: int) -> str | None:
    """None if the cells ``new`` may be released after the cells ``earlier`` of the same table, else the
    reason: a new cell and an earlier one whose records here are nested (one holds the other's) and
    differ in fewer than ``min_difference`` rows (but not none), and whose counts differ by fewer too. A
    pooled cell sums each site's records of it, so this site's records of two pooled cells are no
    release of their own; but where the other sites' records of the two are nested alike, the two
    pooled cells differ by a group of these few records and the others', which the difference of their
    counts sizes (differencing, Denning & Schlörer 1983). Two cells whose counts differ by at least
    ``min_difference``, or whose records here are not nested, tell no group below it apart by their
    difference; nor do two intervals of one column over all its records, which the gate keeps apart."""
    cells = _Cells(earlier)
    for cell in new:
        problem = _cell_problem(cell, cells, min_difference)
        if problem:
            return problem
    return None


def pooled_problem_cells(earlier: list[PooledCell], new: list[PooledCell], min_difference: int,
                         shared: Sequence[PooledCell] = ()) -> list[int]:
    """The positions among ``new`` of the cells :func:`pooled_pair_problem` would refuse. Cells in ``shared``
    (pooled cells whose pairs the sites decide on the pooled records: :func:`shared_pairs`) take part in the
    remainders of three or more cells only."""
    cells = _Cells(earlier)
    every = _Cells([*earlier, *shared]) if shared else cells
    return [j for j, cell in enumerate(new) if _cell_problem(cell, cells, min_difference, every)]


class _Cells:
    """Earlier cells' records at this site, packed one cell a row, with their sizes, counts and columns: the
    audits of a new cell against all of them run as array operations. Which cells lie within an earlier
    one is kept once asked (:meth:`inside`)."""

    def __init__(self, cells: Sequence[PooledCell]) -> None:
        self.rows = np.stack([packed_set(c.rows) for c in cells]) if cells else None
        self.sizes = (np.bitwise_count(self.rows).sum(axis=1, dtype=np.int64) if self.rows is not None
                      else np.zeros(0, int))
        self.counts = np.array([c.count for c in cells], dtype=np.int64)
        self.columns = np.array([c.column for c in cells], dtype=object)
        self.by_size = np.argsort(-self.sizes, kind="stable")  # largest first, ties in their order
        self._inside: dict[int, np.ndarray] = {}

    def within(self, container: np.ndarray) -> np.ndarray:
        """Per cell: whether it holds no record ``container`` (packed) does not."""
        return ~np.any(np.bitwise_and(self.rows, np.bitwise_not(container)), axis=1)

    def holding(self, packed: np.ndarray) -> np.ndarray:
        """Per cell: whether it holds every record of ``packed``."""
        return ~np.any(np.bitwise_and(packed, np.bitwise_not(self.rows)), axis=1)

    def inside(self, k: int) -> np.ndarray:
        """:meth:`within` the ``k``-th cell's records, kept."""
        if k not in self._inside:
            self._inside[k] = self.within(self.rows[k])  # type: ignore[index]
        return self._inside[k]


def _cell_problem(cell: PooledCell, earlier: _Cells, min_difference: int, every: _Cells | None = None
                  ) -> str | None:
    packed = packed_set(cell.rows)
    size = set_size(packed)
    if earlier.rows is not None:
        differing = np.bitwise_count(np.bitwise_xor(earlier.rows, packed)).sum(axis=1, dtype=np.int64)
        other_column = ~(earlier.columns == cell.column) if cell.column else np.ones(earlier.counts.size, bool)
        nested = (other_column & (differing > 0) & (differing < min_difference)  # nested: one holds the other
                  & (np.abs(cell.count - earlier.counts) < min_difference)
                  & (differing == np.abs(earlier.sizes - size)))
        if nested.any():
            return (f"a cell's records at this site differ from those of an earlier cell or subset of the same "
                    f"table in fewer than {min_difference} rows, and the counts the analyst sees of the two "
                    "differ by fewer too: comparing the two would single those records out")
    if _small_remainder(packed, size, cell, every or earlier, min_difference):
        return (f"a cell and earlier cells or subsets of the same table, all inside one of them, leave fewer than "
                f"{min_difference} records of it at this site outside the others, and adding and subtracting their "
                "counts as the analyst sees them leaves fewer too: that would single those records out")
    return None


Family = list[tuple[np.ndarray, int, str]]  # row sets (packed), their counts as the analyst sees them, columns


def _small_remainder(packed: np.ndarray, size: int, cell: PooledCell, earlier: _Cells, min_difference: int) -> bool:
    """Whether the new cell and earlier cells, one of them holding the others, leave a remainder of 1 to
    ``min_difference - 1`` records here whose count, the container's less the others' as the analyst sees them, is
    below ``min_difference`` too (three or more cells: ``A - B - C``, where no two differ by few records). The
    family subtracted is chosen greedily, largest first, with the new cell in it (or holding it): first cells
    disjoint here (:func:`_disjoint_remainder`), then cells overlapping here whose union the others' intersections
    give (:func:`_union_remainder`). A large cell taken first may hold a record of the remainder and keep the
    cells that leave it out of the family, so each pass runs again without the cell it took first, up to
    :data:`REMAINDER_RETRIES` times. Cells with no record here, and families of intervals of one column, which the
    gate keeps apart, are left out; where the cells together leave ``min_difference`` or more records of the
    container, no family of them leaves fewer, and nothing is tried."""
    if size == 0 or earlier.rows is None:
        return False

    def remainder(container: np.ndarray, inside: np.ndarray, total: int, count: int, family: Family,
                  columns: set[str]) -> bool:
        candidates = inside & (earlier.sizes > 0) & (earlier.sizes < total)
        order = earlier.by_size[candidates[earlier.by_size]]
        given = [rows for rows, _, _ in family]
        for found in (_disjoint_remainder, _union_remainder):
            tried = order
            for _ in range(REMAINDER_RETRIES + 1):
                if total - _covered(container, given, earlier.rows[tried]) >= min_difference:  # type: ignore[index]
                    break
                hit, first = found(container, tried, total, count, family, columns, earlier, min_difference)
                if hit:
                    return True
                if first is None:
                    break
                tried = tried[tried != first]
        return False

    if remainder(packed, earlier.within(packed), size, cell.count, [], {cell.column}):  # it holds earlier ones
        return True
    holders = np.flatnonzero((earlier.sizes > size) & earlier.holding(packed))
    return any(remainder(earlier.rows[k], earlier.inside(k), int(earlier.sizes[k]),  # type: ignore[index]
                         int(earlier.counts[k]), [(packed, cell.count, cell.column)], {earlier.columns[k]})
               for k in holders)  # an earlier cell holds the new one and others


def _kept_apart(columns: set[str]) -> bool:
    """Whether a family of cells are intervals of one column, which the gate's cut history keeps apart."""
    return len(columns) == 1 and "" not in columns


def _disjoint_remainder(container: np.ndarray, order: np.ndarray, total: int, count: int, family: Family,
                        columns: set[str], earlier: _Cells, min_difference: int) -> tuple[bool, int | None]:
    """:func:`_small_remainder` over the cells of ``order`` (inside ``container``, largest first) disjoint here from
    ``family`` and from those taken before them: the container's count less theirs. Also the cell of ``order`` it
    took first (None: none)."""
    taken = np.zeros_like(container)
    counted, cells, columns = 0, len(family), set(columns)
    first: int | None = None
    for rows, n, column in family:
        taken, counted = np.bitwise_or(taken, rows), counted + n
        columns.add(column)
    for k in order:
        old = earlier.rows[k]  # type: ignore[index]
        if not np.any(np.bitwise_and(old, taken)):
            taken, counted, cells = np.bitwise_or(taken, old), counted + earlier.counts[k], cells + 1
            columns.add(earlier.columns[k])
            first = int(k) if first is None else first
    left = total - set_size(taken)
    if cells < 2 or left <= 0 or left >= min_difference or abs(count - counted) >= min_difference:
        return False, first  # one cell subtracted is a pair, checked above
    return not _kept_apart(columns), first


def _union_remainder(container: np.ndarray, order: np.ndarray, total: int, count: int, family: Family,
                     columns: set[str], earlier: _Cells, min_difference: int) -> tuple[bool, int | None]:
    """:func:`_small_remainder` over cells that overlap here: ``family`` and the cells of ``order`` (inside
    ``container``, largest first) that leave at least one of its records out of their union, taken greedily. Where
    that union leaves 1 to ``min_difference - 1`` records, and a combination of it and the cells inside it (up to
    :data:`UNION_SETS`) is 1 on every record of the union here -- ``B + C - (B and C)`` -- the analyst's count of the
    remainder is the container's less that combination of the cells' counts (inclusion-exclusion; Chin &
    Ozsoyoglu 1982): below ``min_difference`` in size, a problem, unless the cells the combination weighs and the
    container are intervals of one column (the gate keeps those apart). Also the cell of ``order`` it took first (None:
    none)."""
    named = {*columns, *(column for _, _, column in family)}
    if _kept_apart(named) and bool(np.all(earlier.columns[order] == next(iter(named)))):
        return False, None
    taken = np.zeros_like(container)
    for rows, _, _ in family:
        taken = np.bitwise_or(taken, rows)
    chosen, size = [], set_size(taken)
    for k in order:  # the cells that grow the union and leave a record of the container out
        grown = np.bitwise_or(taken, earlier.rows[k])  # type: ignore[index]
        if size < (grown_size := set_size(grown)) < total:
            taken, size = grown, grown_size
            chosen.append(int(k))
    left, first = total - size, (chosen[0] if chosen else None)
    if len(family) + len(chosen) < 2 or not 0 < left < min_difference:
        return False, first
    if size in {int(earlier.sizes[k]) for k in chosen} | {set_size(rows) for rows, _, _ in family}:
        return False, first  # the union is one of the cells: a pair, checked above
    inside, taken_ones = earlier.within(taken), set(chosen)
    within = [int(k) for k in order if inside[k] and int(k) not in taken_ones]
    family = [*family, *((earlier.rows[k], int(earlier.counts[k]), str(earlier.columns[k]))  # type: ignore[index]
                         for k in [*chosen, *within])][:UNION_SETS]
    touched = np.flatnonzero(taken)  # the bytes that hold records of the union
    mask = np.unpackbits(taken[touched]).astype(bool)
    code = np.zeros(size, dtype=np.uint64)
    for j, (rows, _, _) in enumerate(family):  # each record's sets, a bit each (UNION_SETS of them at most)
        np.bitwise_or(code, np.unpackbits(rows[touched])[mask].astype(np.uint64) << np.uint64(j), out=code)
    atoms = np.unique(code)
    incidence = _code_bits(atoms.view(np.int64), len(family))  # bit 63 as the sign: the shift keeps it
    weights = np.linalg.lstsq(incidence, np.ones(atoms.size), rcond=None)[0]
    if not np.allclose(incidence @ weights, 1.0, atol=1e-8):
        return False, first  # no combination of the cells gives their union here
    if _kept_apart({*columns, *(str(c) for (_, _, c), w in zip(family, weights) if abs(w) > 1e-9)}):
        return False, first  # the cells it combines are intervals of one column, as is the container
    counted = float(weights @ np.array([n for _, n, _ in family], dtype=float))
    return abs(count - counted) < min_difference, first


def _covered(container: np.ndarray, given: list[np.ndarray], rows: np.ndarray) -> int:
    """How many records of ``container`` (packed) the row sets ``given`` and the rows of ``rows`` (packed, a set a
    row) hold between them."""
    held = np.bitwise_or.reduce(rows, axis=0) if len(rows) else np.zeros_like(container)
    for other in given:
        held = np.bitwise_or(held, other)
    return set_size(np.bitwise_and(container, held))


def superset_gap(member: np.ndarray, sets: list[np.ndarray]) -> int:
    """How few records tell the row set ``member`` (packed) from the smallest of ``sets`` (packed) that
    holds it: 0 when one of them is the same rows; the table's size when none holds it (``sets`` should
    hold the table's). Withheld groups whose gaps sum to 1 .. ``subset_min_difference`` - 1 would be
    singled out together by a total over the groups less the released ones."""
    size = set_size(member)
    gaps = [set_size(rows) - size for rows in sets if not np.any(np.bitwise_and(member, np.bitwise_not(rows)))]
    return min(gaps, default=member.size * 8)


def spanned_gap(member: np.ndarray, sets: list[np.ndarray], n: int, *, below: int) -> int:
    """How few records (1 .. ``below`` - 1; 0 for none) a combination of the row sets ``sets`` (packed)
    and ``member`` (packed, of a table of ``n`` records) singles out beyond what ``sets`` alone do.

    :func:`superset_gap` and the pairwise check compare ``member`` with one set at a time, and
    :func:`isolated_records` finds a single record in the span: a group of a few records that ``member``
    and two or more sets make (``A + B - G`` for a group ``G`` that is two cells less a few records;
    Chin & Ozsoyoglu 1982) passes all three, and the difference of the sums is the sum over those few. The
    candidates, tested over the atoms (records that belong to the same sets):

    * the atoms of ``sets`` that ``member`` touches, and those it holds whole (``G - A - B``): unions in
      the span of ``sets`` alone, as many records from ``member`` as it lacks of the first or holds
      beyond the second;
    * the fewest records of a group whose sum a combination of ``sets`` and ``member`` is, and no combination
      of ``sets`` alone (:func:`_new_small_group`): the few records of cell ``A`` that ``G`` lacks where an
      earlier subset already set them apart, a part of an atom ``member`` splits, two bins less a subset of 9 of
      each's 10 records (one left out in each).

    :class:`AuditTooLarge` where the atoms are too many to audit within :data:`MAX_AUDIT_WORK`."""
    if not sets:
        return 0
    atoms, counts, held, parts, sizes = _atoms_with(sets, member, n)
    candidates = [(int(counts[held > 0].sum() - held.sum()), held > 0),
                  (int(held.sum() - counts[held == counts].sum()), held == counts)]
    candidates = [(gap, union) for gap, union in candidates if 0 < gap < below and union.any()]
    found = [gap for (gap, _), spanned in zip(candidates, _spanned(atoms, counts, [u for _, u in candidates]))
             if spanned]
    spread = _new_small_group(parts, sizes, below)
    return min([*found, spread] if spread else found, default=0)


def _null(incidence: np.ndarray, width: int) -> np.ndarray:
    """An orthonormal basis (columns) of the combinations of ``width`` sets that are 0 on every atom of
    ``incidence`` (atoms x sets, 0/1)."""
    if not incidence.size:
        return np.eye(width)
    values, vectors = np.linalg.eigh(incidence.T @ incidence)
    return vectors[:, values <= max(values.max(), 1.0) * 1e-10]


def _orthonormal(columns: np.ndarray) -> np.ndarray:
    """An orthonormal basis (columns) of the span of ``columns``."""
    if not columns.size:
        return columns
    u, s, _ = np.linalg.svd(columns, full_matrices=False)
    return u[:, s > 1e-8]


def _new_small_group(parts: np.ndarray, sizes: np.ndarray, below: int) -> int:
    """The fewest records (1 .. ``below`` - 1; 0 for none) of a group whose sum a combination of the sets and a
    member (the last column of ``parts``, the incidence of their atoms, whose sizes are ``sizes``) is, and no
    combination of the sets alone (Chin & Ozsoyoglu 1982: a group of a few records, which need not be one atom).
    Such a group is a union of atoms of fewer than ``below`` records, and its indicator lies in the space of the
    combinations that are 0 on every larger atom; every group of them of fewer than ``below`` records that the
    space reaches is tried, each atom alone and, while they number at most :data:`SMALL_GROUPS`, groups of two,
    three, ... atoms (a bound beyond: a site's validation releases hundreds of small cells). A combination that is
    no group's sum (two records' sum less two others') singles out none."""
    small = np.flatnonzero(sizes < below)
    if not small.size:
        return 0
    large, few, width = parts[sizes >= below], parts[small], parts.shape[1]
    space = _orthonormal(few @ _null(large, width))
    old = _orthonormal(few[:, :-1] @ _null(large[:, :-1], width - 1))
    if space.shape[1] <= old.shape[1]:
        return 0
    reached = np.flatnonzero(np.abs(space).max(axis=1) > 1e-8)
    space, old, weight = space[reached], old[reached], sizes[small][reached]
    records, tried = [], 0
    for k in range(1, below):
        tried += math.comb(reached.size, k)
        if k > 1 and tried > SMALL_GROUPS:
            break  # a bound: groups of one atom are always tried
        groups = np.array(list(itertools.combinations(range(reached.size), k)), dtype=np.int64).reshape(-1, k)
        groups = groups[weight[groups].sum(axis=1) < below]
        if not groups.size:
            continue
        groups = groups[_beyond(space, groups) < NEAR_SPACE]  # the rest are far outside the space
        indicators = np.zeros((len(groups), reached.size))
        np.put_along_axis(indicators, groups, 1.0, axis=1)
        inside = _residual(indicators, space) < 1e-8
        new = inside & (_residual(indicators, old) > 1e-8)
        records += weight[groups[new]].sum(axis=1).tolist()
    return int(min(records, default=0))


def _beyond(basis: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group (a row of atom positions), the squared norm of its indicator less its projection on the columns of
    an orthonormal ``basis`` (atoms x dimensions): the group's size less the squared norm of the sum of its atoms'
    rows of the basis, a gather per atom of the group instead of a product of every indicator with the space. Its
    rounding (the difference of two numbers near the size) is far above a residual's, so it only sorts out the
    groups far from the space (:data:`NEAR_SPACE`); :func:`_residual` decides the others."""
    return groups.shape[1] - np.square(basis[groups].sum(axis=1)).sum(axis=1)


def _residual(vectors: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """The norm of each row of ``vectors`` less its projection on the columns of an orthonormal ``basis``."""
    left = vectors - (vectors @ basis) @ basis.T if basis.size else vectors
    return np.linalg.norm(left, axis=1)


def few_levels(values: np.ndarray, powers: int) -> list[np.ndarray]:
    """The records at each value of a column (boolean over ``values``) whose sums of its first ``powers`` powers
    over all of them give how many hold each: a column of at most ``powers + 1`` values (a 0/1 column's sum is its
    ones; ``D$g + 1`` or ``exp(D$g)`` as well, with the count of records). None for a constant or many-valued one."""
    finite = values[np.isfinite(values)]
    distinct = np.unique(finite)
    if not 2 <= distinct.size <= powers + 1:
        return []
    return [values == v for v in distinct]


SPAN_BATCH = 64  # members whose span combined() tests at once (an atoms x members matrix)


def combined(members: list[np.ndarray], sets: list[np.ndarray], n: int) -> list[bool]:
    """Whether sums over the row sets ``sets`` (packed, over a table of ``n`` records; the table's among them)
    give the sum over each row set of ``members`` (packed) exactly: the member is a union of the sets' atoms that
    lies in their span (Chin & Ozsoyoglu 1982). An empty member is given by none. :class:`AuditTooLarge` where the
    atoms are too many to audit within :data:`MAX_AUDIT_WORK`."""
    if not members or not sets:
        return [False] * len(members)
    label, counts = _audited_atoms(sets, n)
    held = (np.bincount(label[bits(member, n).astype(bool)], minlength=counts.size) for member in members)
    return _spanned_unions(held, len(members), label, counts, sets, n)


def combined_spans(cells: list[np.ndarray], spans: Sequence[Sequence[int]], sets: list[np.ndarray], n: int
                   ) -> list[bool]:
    """:func:`combined` of the union of each span of ``cells`` (disjoint row sets, packed; a span names some of
    them), without building the unions: how many records of each atom of ``sets`` each cell holds, summed over the
    span's cells (a running sum for a run of consecutive cells). :class:`AuditTooLarge` where the atoms are too
    many to audit, or to hold for every cell (16 x :data:`ATOM_FLOATS` values)."""
    if not spans or not sets or not cells:
        return [False] * len(spans)
    label, counts, unions = _span_atoms(cells, spans, sets, n)
    return _spanned_unions(unions, len(spans), label, counts, sets, n)


def near_spans(cells: list[np.ndarray], spans: Sequence[Sequence[int]], sets: list[np.ndarray], n: int, *,
               below: int) -> list[bool]:
    """Whether the union of each span of ``cells`` (disjoint row sets, packed) differs from some union of the atoms
    of ``sets`` (packed; records that belong to the same sets) by 1 to ``below`` - 1 records: the fewest records
    that tell it from any of them, each atom's records in it or out of it, whichever are fewer. A bound of the
    audit of a release alone (:func:`row_set_problem`, :func:`spanned_gap`) for many spans at once: it counts a
    union of atoms the sets' counts do not give (not in their span) as given, so it finds every difference those
    find by pairs and by unions of atoms, but not a few records that the union and the sets together set apart
    inside atoms it splits. :class:`AuditTooLarge` as :func:`combined_spans`."""
    if not spans or not cells:
        return [False] * len(spans)
    _, counts, unions = _span_atoms(cells, spans, sets, n)
    return [bool(0 < np.minimum(held, counts - held).sum() < below) for held in unions]


def _span_atoms(cells: list[np.ndarray], spans: Sequence[Sequence[int]], sets: list[np.ndarray], n: int
                ) -> tuple[np.ndarray, np.ndarray, Iterable[np.ndarray]]:
    """Each record's atom of ``sets``, the atoms' sizes, and per span of ``cells`` how many records of each atom
    its cells hold (a running sum for a run of consecutive cells)."""
    label, counts = _audited_atoms(sets, n)
    if counts.size * len(cells) > 16 * ATOM_FLOATS:
        raise AuditTooLarge(f"{counts.size:,} groups of records in each of {len(cells)} cells")
    held = np.stack([np.bincount(label[bits(c, n).astype(bool)], minlength=counts.size) for c in cells])
    running = np.vstack([np.zeros((1, counts.size), dtype=held.dtype), np.cumsum(held, axis=0)])
    unions = (running[span[-1] + 1] - running[span[0]] if span[-1] - span[0] + 1 == len(span)
              else held[list(span)].sum(axis=0) for span in spans)
    return label, counts, unions


def _audited_atoms(sets: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's atom of ``sets`` and the atoms' sizes; :class:`AuditTooLarge` beyond :data:`MAX_AUDIT_WORK`."""
    label = _atom_labels(sets, n)
    counts = np.bincount(label)
    if counts.size * len(sets) ** 2 > MAX_AUDIT_WORK:
        raise AuditTooLarge(f"{len(sets)} row sets over {counts.size:,} groups of records")
    return label, counts


def _spanned_unions(held: Iterable[np.ndarray], size: int, label: np.ndarray, counts: np.ndarray,
                    sets: list[np.ndarray], n: int) -> list[bool]:
    """Whether each of ``size`` row sets, given as how many records of each atom of ``sets`` it holds (``held``,
    read once), is a union of whole atoms lying in the sets' span (:func:`_spanned`, :data:`SPAN_BATCH` at a
    time)."""
    out = [False] * size
    candidates = [(k, h > 0) for k, h in enumerate(held) if h.any() and not np.any((h > 0) & (h < counts))]
    if not candidates:
        return out
    first = np.full(counts.size, n, dtype=np.int64)
    np.minimum.at(first, label, np.arange(n))
    incidence = _incidence(sets, first)
    for start in range(0, len(candidates), SPAN_BATCH):
        batch = candidates[start:start + SPAN_BATCH]
        for (k, _), spanned in zip(batch, _spanned(incidence, counts, [u for _, u in batch])):
            out[k] = spanned
    return out


def _atoms_with(sets: list[np.ndarray], member: np.ndarray, n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The atoms of ``sets`` (their incidence, atoms x sets, and sizes), how many records of each ``member``
    holds, and the atoms of ``sets`` and ``member`` (incidence and sizes). Up to :data:`CODED_SETS` sets and the
    member, from a 16-bit code a record (2 bytes a record, as :func:`_atoms`); beyond, from :func:`_atom_labels`
    and each atom's first record, and :class:`AuditTooLarge` where the atoms are too many to audit within
    :data:`MAX_AUDIT_WORK` (or to hold 16 x :data:`ATOM_FLOATS` values of their incidence)."""
    everything = [*sets, member]
    if len(everything) <= CODED_SETS:
        code = np.zeros(n, dtype=np.uint16)
        for j, rows in enumerate(everything):
            np.bitwise_or(code, bits(rows, n).astype(np.uint16) << j, out=code)
        both = np.bincount(code, minlength=1 << len(everything))
        half = both.size // 2
        values = np.flatnonzero(both[:half] + both[half:])  # the atoms of the sets: the codes' lower bits
        present = np.flatnonzero(both)
        return (_code_bits(values, len(sets)), both[values] + both[values + half], both[values + half],
                _code_bits(present, len(everything)), both[present])
    label, parts = _atom_labels(sets, n), _atom_labels(everything, n)
    counts, sizes = np.bincount(label), np.bincount(parts)
    if sizes.size * len(everything) ** 2 > MAX_AUDIT_WORK or sizes.size * len(everything) > 16 * ATOM_FLOATS:
        raise AuditTooLarge(f"{len(everything)} row sets over {sizes.size:,} groups of records")
    held = np.bincount(label[bits(member, n).astype(bool)], minlength=counts.size)
    first, first_part = (np.full(c.size, n, dtype=np.int64) for c in (counts, sizes))
    np.minimum.at(first, label, np.arange(n))
    np.minimum.at(first_part, parts, np.arange(n))
    return _incidence(sets, first), counts, held, _incidence(everything, first_part), sizes


def _code_bits(codes: np.ndarray, width: int) -> np.ndarray:
    """The sets each atom code names (atoms x ``width``, float 0/1)."""
    return ((codes[:, None] >> np.arange(width)) & 1).astype(float)


def _span(incidence: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, float]:
    """The map from an atom's weighted row (``incidence`` in the sets, atoms x sets, times the square root of
    its size in ``counts``) to the span's orthonormal basis, and the leverage's tolerance: :math:`R` of
    :math:`W`'s QR a batch of atoms at a time, as in :func:`isolated_records`."""
    weights, batch = np.sqrt(counts), atom_batch(incidence.shape[1])
    r = np.zeros((0, incidence.shape[1]))
    for start in range(0, counts.size, batch):
        r = np.linalg.qr(np.vstack([r, incidence[start:start + batch] * weights[start:start + batch, None]]),
                         mode="r")
    _, s, vt = np.linalg.svd(r, full_matrices=False)
    if s[0] == 0:
        return np.zeros((incidence.shape[1], 0)), 1e-8
    kept = s > s[0] * max(counts.size, incidence.shape[1]) * np.finfo(float).eps * 10
    return vt[kept].T / s[kept], max(1e-8, TOLERANCE_FACTOR * np.finfo(float).eps * s[0] / s[kept][-1])


def _spanned(incidence: np.ndarray, counts: np.ndarray, unions: list[np.ndarray]) -> list[bool]:
    """Whether each of ``unions`` (boolean over the atoms: their ``incidence`` in the sets and sizes
    ``counts``) lies in the span of the sets, over records (:func:`_span`)."""
    if not unions:
        return []
    to_basis, tolerance = _span(incidence, counts)
    wanted = np.column_stack(unions).astype(float) * np.sqrt(counts)[:, None]
    inside = ((incidence * np.sqrt(counts)[:, None]).T @ wanted).T @ to_basis  # unions x basis
    leverage = np.einsum("ij,ij->i", inside, inside) / np.einsum("ij,ij->j", wanted, wanted)
    return [bool(share > 1 - tolerance) for share in leverage]


def row_set_problem(earlier: list[np.ndarray], new: list[np.ndarray], min_difference: int,
                    base: np.ndarray | None = None, within: Sequence[np.ndarray | None] | None = None) -> str | None:
    """None if row sets ``new`` (boolean row indicators) may be released after the row sets ``earlier``
    of the same table (packed, as the history keeps them; the table itself, or the records ``base`` of
    it that its releases are over (packed), counts as one), else
    the reason to refuse: a new set
    that differs from the table or an earlier set it shares a record with in fewer than ``min_difference`` rows
    (but not zero: the same rows again tell nothing new), or a single record isolated by a combination of all
    the sets (:func:`isolated_records`). Each new set is compared with those before it too, but not with
    the group ``within`` names for it (:func:`row_set_audit`)."""
    return row_set_audit(earlier, new, min_difference, base, within)[0]


def row_set_audit(earlier: list[np.ndarray], new: list[np.ndarray], min_difference: int,
                  base: np.ndarray | None = None, within: Sequence[np.ndarray | None] | None = None
                  ) -> tuple[str | None, np.ndarray]:
    """:func:`row_set_problem`'s answer, and the records the sets isolate (positions; empty unless
    that is the reason): the release gate names the record to drop a cut next to without auditing
    the history twice. ``within``: for each new set, the group it is one value's records of (packed; None: none),
    whose sums give only the records' number: not compared with that group, nor with a set of it that covers the
    group with the new one (their differences are the group's records at the other values, whose counts a table of
    the values gives)."""
    none = np.zeros(0, dtype=np.int64)
    n = new[0].size
    history = [base if base is not None else np.packbits(np.ones(n, dtype=bool)), *earlier]
    fresh: list[np.ndarray] = []
    for k, rows in enumerate(new):
        packed = np.packbits(rows)
        differences = _differences(history + fresh, packed)  # the new sets with each other too
        # two sets without a record in common: each one's sums are released, their difference tells nothing more
        differences[_overlaps(history + fresh, packed) == 0] = min_difference
        group = within[k] if within is not None else None
        if group is not None:
            differences[_differences(history + fresh, group) == 0] = min_difference
            differences[_covering(history + fresh, packed, group)] = min_difference
        if (differences == 0).any():
            continue  # the same rows as before: nothing new
        if differences.min() < min_difference:
            return (f"these records differ from the table, an earlier subset of it or an earlier release's cell "
                    f"in fewer than {min_difference} rows; comparing the two would single them out"), none
        fresh.append(packed)
    if not fresh:
        return None, none
    if len(history) + len(fresh) > MAX_ROW_SETS:
        return f"at most {MAX_ROW_SETS} different row sets released from one table", none
    try:
        isolated = isolated_records(history + fresh, n)
    except AuditTooLarge as exc:
        return (f"the release history of this table is too large to audit ({exc}); the site releases no more "
                "from it that adds new groups of records (the same cells again still pass): ask the site's "
                "administrator"), none
    if isolated.size:
        return ("together with what was released before from the same table (by any analyst), this would single "
                "out a record: a combination of the released sums is one record's value"), isolated
    return None, none
