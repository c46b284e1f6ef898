"""A site's check of remainders (a cell and earlier cells inside another, Chin & Ozsoyoglu 1982) on the
counts the analyst sees: a pooled difference of counts that the family's records outside the container at
other sites bring below this site's remainder is no count of that remainder. Ten records of one site; the
counts are what an analyst would see of each cell, pooled or this site's own."""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_server.disclosure.differencing import PooledCell, pooled_problem_cells

Q = 5


def rows(*index: int, n: int = 20) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[list(index)] = True
    return mask


def family(container_count: int, counts: tuple[int, int, int]) -> tuple[list[PooledCell], PooledCell]:
    """The container A (17 records here: 0-16), earlier cells B (0-6) and C (7-11), and the new cell N
    (12-13): A - B - C - N leaves records 14, 15 and 16 of this site, 3 < q."""
    earlier = [PooledCell(rows(*range(17)), container_count, "T$score", "a"),
               PooledCell(rows(*range(7)), counts[0], "", "b"),
               PooledCell(rows(*range(7, 12)), counts[1], "T$score", "c")]
    return earlier, PooledCell(rows(12, 13), counts[2], "")


@pytest.mark.parametrize(("container", "counts", "refused", "why"), [
    (17, (7, 5, 2), True, "this site alone: the difference is its 3 records"),
    (126, (73, 23, 27), True, "pooled, 3 = this site's 3 if nested everywhere"),
    (127, (73, 23, 27), True, "pooled, 4: this site's 3 and one more"),
    (128, (73, 23, 27), False, "pooled, 5 = q: blended with others' records"),
    (123, (73, 23, 27), False, "pooled, 0: the family holds 3 records outside A elsewhere; no count of these 3"),
    (125, (73, 23, 27), False, "pooled, 2 < 3: not this site's remainder, nor a sum with others'"),
])
def test_a_remainder_is_refused_where_the_counts_could_be_its_own(container, counts, refused, why):
    earlier, new = family(container, counts)
    assert (pooled_problem_cells(earlier, [new], Q) == [0]) == refused, why
