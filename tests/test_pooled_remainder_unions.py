"""A site's remainder check of pooled cells over cells that overlap at it: ``differencing.pooled_problem_cells``.

One site of 40 records; A holds them all, B the first 20, C records 15 to 37 (B and C share 15 to 19), B and C the
shared 5. A - B - C + (B and C) is A less the union of B and C (inclusion-exclusion; Chin & Ozsoyoglu 1982): the
records left, counted here by set arithmetic on the records, independently of the check.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dsfed_server.disclosure.differencing import PooledCell, pooled_problem_cells

N, Q = 40, 5  # the shipped subset_min_difference


def _cell(records, count_elsewhere: int = 0) -> PooledCell:
    """This site's records ``records`` of a pooled cell, and the pooled count: these and ``count_elsewhere``."""
    rows = np.zeros(N, dtype=bool)
    rows[list(records)] = True
    return PooledCell(np.packbits(rows), len(records) + count_elsewhere)


def _left(a: range, *subtracted: range) -> int:
    """The records of ``a`` in none of ``subtracted``: what the analyst's inclusion-exclusion counts."""
    return len(set(a) - set().union(*subtracted))


@pytest.mark.parametrize("last", ["C", "B and C"])
def test_a_union_of_overlapping_cells_leaving_two_records_is_refused(last):
    """Two records left (38 and 39), in whichever order the cells come: the last of them is refused."""
    a, b, c, bc = range(40), range(20), range(15, 38), range(15, 20)
    assert _left(a, b, c) == 2
    cells = {"A": _cell(a), "B": _cell(b), "C": _cell(c), "B and C": _cell(bc)}
    earlier = [cells[k] for k in ("A", "B", "C", "B and C") if k != last]
    assert pooled_problem_cells(earlier, [cells[last]], Q) == [0]


def test_without_the_intersection_the_union_is_not_released_and_nothing_is_refused():
    """A, B and C alone: B + C counts the 5 shared records twice, and no combination of the three counts the
    union, so A less it is not given; nor is any pair a few records apart."""
    a, b, c = range(40), range(20), range(15, 38)
    assert pooled_problem_cells([_cell(a), _cell(b)], [_cell(c)], Q) == []


def test_a_remainder_of_q_records_is_released():
    """C ends at record 34: A less the union of B and C is 5 records, q: released."""
    a, b, c, bc = range(40), range(20), range(15, 35), range(15, 20)
    assert _left(a, b, c) == Q
    assert pooled_problem_cells([_cell(a), _cell(b), _cell(bc)], [_cell(c)], Q) == []


def test_other_sites_records_in_the_pooled_remainder_decide():
    """The same cells where other sites hold 4 records of A less the union (pooled counts: A 44, the others as
    here): the pooled remainder is 6, q or more, so the pooled difference counts no group below q: released; with 2
    more elsewhere in A alone (A 42) it is 4 and refused."""
    a, b, c, bc = range(40), range(20), range(15, 38), range(15, 20)
    earlier = [_cell(b), _cell(bc)]
    assert pooled_problem_cells([_cell(a, 4), *earlier], [_cell(c)], Q) == []
    assert pooled_problem_cells([_cell(a, 2), *earlier], [_cell(c)], Q) == [0]


@pytest.mark.parametrize("last", ["B", "C", "B and C"])
def test_a_large_cell_holding_a_record_of_the_remainder_does_not_hide_it(last):
    """The cells of the first test and L (records 10 to 38), the largest inside A, which holds record 38 of A less
    the union of B and C (38 and 39). Taken first, L grows the union to all but record 39, and no combination of L
    and the others counts that union (L alone holds record 38, and L and B alone records 10 to 14): the greedy pass
    alone found nothing. Each pass runs again without the cell it took first: B + C - (B and C) leaves the two
    records, refused whichever of the three comes last."""
    a, b, c, bc, big = range(40), range(20), range(15, 38), range(15, 20), range(10, 39)
    assert _left(a, b, c) == 2 and len(big) > len(c) > len(b)
    cells = {"A": _cell(a), "B": _cell(b), "C": _cell(c), "B and C": _cell(bc), "L": _cell(big)}
    earlier = [cells[k] for k in ("A", "L", "B", "C", "B and C") if k != last]
    assert pooled_problem_cells(earlier, [cells[last]], Q) == [0]


def _interval(records, column: str) -> PooledCell:
    return replace(_cell(records), column=column)


def test_a_union_combined_from_intervals_of_the_containers_column_alone_is_left_to_the_cut_history():
    """A (records 0 to 39), I1 (0 to 19) and I2 (20 to 38) are intervals of one column; X (15 to 24), another kind of
    cell, lies inside their union. I1 + I2 is one on every record of it and X is not needed (weight 0: I1 alone holds
    0 to 14, I2 alone 25 to 38), so A - I1 - I2 is a difference of intervals of one column, which the gate's cut
    history keeps q records apart pooled: not refused here. Where X is needed -- I2 ending at 24 and X2 (25 to 38)
    the only cell of the rest -- the same remainder is refused."""
    a, i1, i2, x = range(40), range(20), range(20, 39), range(15, 25)
    assert _left(a, i1, i2) == 1
    column = "P.t$score"
    earlier = [_interval(a, column), _interval(i1, column), _cell(x)]
    assert pooled_problem_cells(earlier, [_interval(i2, column)], Q) == []
    i2_short, x2 = range(20, 25), range(25, 39)
    assert _left(a, i1, i2_short, x2) == 1
    earlier = [_interval(a, column), _interval(i1, column), _interval(i2_short, column)]
    assert pooled_problem_cells(earlier, [_cell(x2)], Q) == [0]
