"""Which kept row sets an audit combines where they are more than it can: ``differencing.nearest_sets``.

A site keeps its records of pooled cells and audits each later release alone against a combination of them
(``spanned_gap``), a bounded number of them. Taking the latest let an analyst push the cells that set a few records
apart out of the combination with cells released after them. The attack here knows the truth: ``A`` (20 records)
and ``C`` (6 of them) are kept cells; the member is ``A`` less ``C`` less 2 records, so ``A - C - member`` is those
2 records' indicator, exactly; 40 cells kept after them lie elsewhere. The audit combines the latest few kept cells
and, up to its bound, those nearest the audited set.
"""

from __future__ import annotations

import numpy as np

from dsfed_server.disclosure.differencing import nearest_sets, spanned_gap

N, BELOW, LIMIT, LATEST = 400, 5, 32, 8


def _packed(records) -> np.ndarray:
    rows = np.zeros(N, dtype=bool)
    rows[list(records)] = True
    return np.packbits(rows)


def _history() -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(7)
    a, c = _packed(range(20)), _packed(range(6))
    blocks = np.arange(100, N).reshape(-1, 5)  # 60 blocks of 5, none of A's records
    later = [_packed(blocks[rng.choice(60, 12, replace=False)].ravel()) for _ in range(40)]
    member = _packed(range(8, 20))
    return member, [a, c, *later], _packed(range(N))


def test_the_two_records_are_what_the_cells_less_the_member_give():
    member, (a, c, *_), _ = _history()
    read = np.unpackbits(a).astype(int) - np.unpackbits(c) - np.unpackbits(member)
    assert set(np.flatnonzero(read)) == {6, 7} and set(read[read != 0]) == {1}


def test_the_latest_cells_alone_miss_them_and_the_nearest_find_them():
    member, kept, table = _history()
    latest = kept[-LIMIT:]
    assert spanned_gap(member, [table, *latest], N, below=BELOW) == 0  # the audit before: A and C pushed out
    near = nearest_sets(member, kept, LIMIT, LATEST)
    assert len(near) == LIMIT and near[0] is kept[0] and near[1] is kept[1]  # A touches it, C the rest of A
    assert spanned_gap(member, [table, *near], N, below=BELOW) == 2
    assert spanned_gap(member, [table, *kept], N, below=BELOW) == 2  # every cell: the same answer


def test_within_the_limit_every_set_in_its_order():
    member, kept, _ = _history()
    assert [id(s) for s in nearest_sets(member, kept[:LIMIT], LIMIT, LATEST)] == [id(s) for s in kept[:LIMIT]]


def test_the_latest_stay_however_many_older_sets_share_records_with_the_member():
    """A and C kept last, after 40 older cells that each share records with the member (half of it and a block
    elsewhere): ranked by nearness alone C, outside the member, came after all of them (a review's case); the latest
    stay, so the audit sees at least what the latest alone showed it."""
    member, (a, c, *_), table = _history()
    older = [_packed([*(range(8, 14) if j % 2 else range(14, 20)), *range(100 + 5 * j, 105 + 5 * j)])
             for j in range(40)]
    kept = [*older, a, c]
    near = nearest_sets(member, kept, LIMIT, LATEST)
    assert any(s is c for s in near) and any(s is a for s in near)
    assert spanned_gap(member, [table, *near], N, below=BELOW) == 2
    assert spanned_gap(member, [table, *nearest_sets(member, kept, LIMIT, 0)], N, below=BELOW) == 0


def test_a_broad_set_touching_the_member_does_not_put_every_later_set_beside_it():
    """A and C, then a broad kept cell that shares one record with the member and holds most of the table, then 40
    small cells inside it: each later cell shares records with the broad cell outside the member, as C does with A.
    The sets beside the smaller touching cell come first (a review's case: by one union of every touching cell, C
    fell behind the later cells)."""
    member, (a, c, *_), table = _history()
    broad = _packed([12, *range(100, N)])
    later = [_packed(range(100 + 5 * j, 105 + 5 * j)) for j in range(40)]
    kept = [a, c, broad, *later]
    near = nearest_sets(member, kept, LIMIT, LATEST)
    assert any(s is c for s in near)
    assert spanned_gap(member, [table, *near], N, below=BELOW) == 2
