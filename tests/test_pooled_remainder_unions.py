"""A site's pooled remainder check on overlapping families, cell by cell (no sites, no HTTP).

One site holds records 0..99 of a table; each pooled cell is given by its records here and its pooled count. The
analyst reads a signed sum of pooled counts (inclusion-exclusion, Chin & Ozsoyoglu 1982); each test computes that
sum and this site's part of it from the cells themselves, and asserts the site objects to the last cell released
exactly where the sum is a remainder of 1 to q - 1 records here whose pooled value is below q too. The other sites'
records are folded into the pooled counts: each cell's pooled count is its records here, two like each of them at the
other sites but for the remainder's, and ``extra`` records of the remainder there.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dsfed_server.disclosure.differencing import PooledCell, pooled_problem_cells

Q = 5
N = 100
A = frozenset(range(N))
C = frozenset(range(2, 52))
D = frozenset(range(40, 100))
CD = C & D
B = frozenset(range(20, 81))  # a large subset inside A crossing C and D: its overlaps with them are no cell's


def cell(records: frozenset[int], count: int) -> PooledCell:
    member = np.zeros(N, dtype=bool)
    member[sorted(records)] = True
    return PooledCell(np.packbits(member), count)


R = frozenset({0, 1})  # the remainder here: in A, in none of C, D and E


def pooled(records: frozenset[int], extra: int = 0) -> int:
    """A cell's pooled count: its records here, two like each of them at the other sites but for the remainder's,
    and ``extra`` there."""
    return len(records) + 2 * len(records - R) + extra


def objected(earlier: list[tuple[frozenset[int], int]], new: tuple[frozenset[int], int]) -> bool:
    return pooled_problem_cells([cell(r, c) for r, c in earlier], [cell(*new)], Q) == [0]


def family(extra: int) -> dict[str, tuple[frozenset[int], int]]:
    """A less the union of C and D: 2 records here, ``extra`` more at the other sites."""
    return {"A": (A, pooled(A, extra)), "C": (C, pooled(C)), "D": (D, pooled(D)), "CD": (CD, pooled(CD))}


SIGNS = {"A": 1, "C": -1, "D": -1, "CD": 1}


def read(cells: dict[str, tuple[frozenset[int], int]]) -> tuple[int, int]:
    """The analyst's signed sum of pooled counts, and this site's records in the same signed sum."""
    here = np.zeros(N, dtype=int)
    for name, sign in SIGNS.items():
        here[sorted(cells[name][0])] += sign
    assert set(np.unique(here)) <= {0, 1}  # a group of records here, not a mixture
    return sum(sign * cells[name][1] for name, sign in SIGNS.items()), int(here.sum())


B2 = frozenset(range(15, 90))  # a larger subset inside A crossing C and D, holding B


@pytest.mark.parametrize("last", list(SIGNS))
@pytest.mark.parametrize("crossing", [(), (B,), (B, B2), (B2, B)])
def test_a_less_the_union_of_two_overlapping_cells_is_objected_to_whichever_comes_last(last, crossing):
    """``A - C - D + CD`` is this site's 2 records, pooled 2: the last of the four is objected to, with or without
    large subsets released first whose overlaps with C and D are no cell's (a greedy family that takes them first
    leaves C and D out; the check tries again without each, and without the first ones together)."""
    cells = family(extra=0)
    value, here = read(cells)
    assert (value, here) == (2, 2)
    earlier = [(records, pooled(records)) for records in crossing] + [cells[k] for k in SIGNS if k != last]
    assert objected(earlier, cells[last])


@pytest.mark.parametrize("last", list(SIGNS))
def test_the_same_family_with_the_remainder_pooled_over_q_is_released(last):
    """The same cells where the other sites hold 5 records of the remainder: the signed sum is 7 >= q, and no cell
    is objected to."""
    cells = family(extra=5)
    assert read(cells) == (7, 2)
    assert not objected([cells[k] for k in SIGNS if k != last], cells[last])


@pytest.mark.parametrize(("decoy", "last"), [(d, k) for d in SIGNS for k in SIGNS if k != d])
def test_a_decoy_of_the_same_records_here_released_first_hides_nothing(decoy, last):
    """A cell with the same records here as one of the family, released before it, whose pooled count is of no use
    (its records at the other sites differ: 40 more): the analyst uses the real one, and the check tries every count
    of cells of the same records."""
    cells = family(extra=0)
    records, count = cells[decoy]
    earlier = [(records, count + 40)] + [cells[k] for k in SIGNS if k != last]
    assert read(cells) == (2, 2)
    assert objected(earlier, cells[last])


E = frozenset(range(10, 95, 2))  # a third set, overlapping C and D


def three_way(extra: int) -> dict[tuple[str, ...], tuple[frozenset[int], int, int]]:
    """A and the sets C, D, E and their overlaps, with their signs in A less the union of the three."""
    sets = {"C": C, "D": D, "E": E}
    out = {("A",): (A, pooled(A, extra), 1)}
    for r in (1, 2, 3):
        for names in itertools.combinations(sets, r):
            records = frozenset.intersection(*(sets[name] for name in names))
            out[names] = (records, pooled(records), (-1) ** r)
    return out


@pytest.mark.parametrize("last", [("A",), ("C",), ("E",), ("C", "D"), ("D", "E"), ("C", "D", "E")])
@pytest.mark.parametrize(("extra", "expected"), [(0, True), (5, False)])
def test_three_overlapping_sets_and_their_overlaps(last, extra, expected):
    """A less the union of C, D and E, by the signed sum of the eight cells: this site's 2 records (0, 1), pooled
    2 + ``extra``: objected to where that is below q, whichever cell comes last."""
    cells = three_way(extra)
    here = np.zeros(N, dtype=int)
    for records, _, sign in cells.values():
        here[sorted(records)] += sign
    value = sum(count * sign for _, count, sign in cells.values())
    assert sorted(np.flatnonzero(here)) == [0, 1] and set(np.unique(here)) == {0, 1}
    assert value == 2 + extra
    earlier = [(records, count) for names, (records, count, _) in cells.items() if names != last]
    assert objected(earlier, cells[last][:2]) == expected
