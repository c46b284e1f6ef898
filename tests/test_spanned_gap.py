"""How few records a new row set singles out with the row sets released before: ``differencing.spanned_gap`` against
a dense oracle on small tables.

The oracle works on records, not atoms: a group of records is singled out where its indicator is a combination of
the sets' and the new set's indicators (numpy's least squares leaves no residual) and not of the sets' alone. It tries
every group of fewer than ``below`` records, smallest first. The function under test finds the fewest from the
atoms' incidence (union gaps, and the groups of small atoms in the space of combinations that are 0 on every
larger atom).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings, strategies as st

from dsfed_server.disclosure.differencing import spanned_gap


def _fewest(sets: list[np.ndarray], member: np.ndarray, below: int) -> int:
    old = np.column_stack(sets).astype(float)
    new = np.column_stack([*sets, member]).astype(float)

    def spans(matrix: np.ndarray, target: np.ndarray) -> bool:
        coef, *_ = np.linalg.lstsq(matrix, target, rcond=None)
        return bool(np.allclose(matrix @ coef, target, atol=1e-8))

    for size in range(1, below):
        for group in itertools.combinations(range(member.size), size):
            target = np.zeros(member.size)
            target[list(group)] = 1.0
            if spans(new, target) and not spans(old, target):
                return size
    return 0


def _rows(n: int) -> st.SearchStrategy[np.ndarray]:
    return st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, dtype=bool))


@st.composite
def _families(draw: st.DrawFn) -> tuple[list[np.ndarray], np.ndarray, int]:
    n = draw(st.integers(5, 10))
    sets = [np.ones(n, dtype=bool), *draw(st.lists(_rows(n), min_size=1, max_size=4))]
    return sets, draw(_rows(n)), draw(st.integers(2, 5))


@settings(max_examples=300, deadline=None)
@given(family=_families())
def test_the_fewest_records_singled_out_agree_with_the_dense_oracle(family):
    sets, member, below = family
    old = np.column_stack(sets).astype(float)
    if np.linalg.matrix_rank(np.column_stack([old, member])) == np.linalg.matrix_rank(old):
        return  # the sets give the member's sums already: its callers do not ask (``combined``)
    got = spanned_gap(np.packbits(member), [np.packbits(s) for s in sets], member.size, below=below)
    assert got == _fewest(sets, member, below)


def test_two_bins_less_a_subset_of_nine_of_each():
    """A site holds every record of two bins of 10 (and 10 others) and released a subset of 9 of each bin: a bin
    released beside the subset and the other bin gives the 2 left out, one in each bin (parts of one record each,
    which no union of atoms and no single small atom shows); a bin beside an unrelated half of the table gives
    nothing."""
    at = np.arange(30)
    table, low, high = np.ones(30, dtype=bool), at < 10, (at >= 10) & (at < 20)
    subset = (low | high) & (at != 0) & (at != 10)
    packed = [np.packbits(s) for s in (table, subset, high)]
    assert spanned_gap(np.packbits(low), packed, 30, below=5) == 2
    half = np.packbits(at % 2 == 0)
    assert spanned_gap(np.packbits(low), [packed[0], half, packed[2]], 30, below=5) == 0


def test_two_records_less_two_others_single_out_no_group():
    """Premenopausal records (19 of 55) beside the table and those aged 50 or more (36): 2 premenopausal are 50 or
    more and 2 postmenopausal younger, and the sum over the first two less the sum over the others is a combination
    of the three sets' sums, but no group's sum: no record is singled out (the check before this one's first version
    said so too; the first version refused the subset)."""
    at = np.arange(55)
    table, old = np.ones(55, dtype=bool), at < 36
    pre = (at >= 34) & (at < 53)  # 2 of the older records and 17 of the younger
    assert spanned_gap(np.packbits(pre), [np.packbits(table), np.packbits(old)], 55, below=5) == 0
