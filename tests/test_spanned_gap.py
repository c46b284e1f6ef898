"""How few records a new row set singles out with the row sets released before: ``differencing.spanned_gap`` against
a dense oracle on small tables.

The oracle works on records, not atoms: the combinations of the sets' sums that are 0 outside a group ``S`` of
records make a space of dimension ``rank(A) - rank(A[outside S])`` (``A`` the records x sets indicator matrix); the
new set singles out ``S`` where that dimension grows when its column joins ``A``. It tries every group of fewer than
``below`` records, smallest first. The function under test finds the fewest from the atoms' incidence (union gaps,
small atoms, and the circuits of the combinations that are 0 on every large atom).
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings, strategies as st

from dsfed_server.disclosure.differencing import spanned_gap


def _fewest(sets: list[np.ndarray], member: np.ndarray, below: int, exempt: tuple[np.ndarray, ...] = ()) -> int:
    old = np.column_stack(sets).astype(float)
    new = np.column_stack([*sets, member]).astype(float)
    n = member.size

    def within(matrix: np.ndarray, group: tuple[int, ...]) -> int:
        rest = np.setdiff1d(np.arange(n), group)
        return np.linalg.matrix_rank(matrix) - (np.linalg.matrix_rank(matrix[rest]) if rest.size else 0)

    for size in range(1, below):
        for group in itertools.combinations(range(n), size):
            held = [e for e in exempt if set(np.flatnonzero(e)) <= set(group)]  # as the sets' own there
            if within(new, group) > within(np.column_stack([old, *held]) if held else old, group):
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


@settings(max_examples=200, deadline=None)
@given(family=_families(), which=st.integers(0, 4))
def test_a_values_records_beside_their_group(family, which):
    """A value's records within a group (one of the sets, the table first), whose sums give only their number:
    the records themselves and the group's others are no group singled out (a table of the values gives their
    counts: the oracle counts them as the sets' own in any group of records holding them); any other is."""
    sets, member, below = family
    group = sets[which % len(sets)]
    member = member & group
    old = np.column_stack(sets).astype(float)
    if not member.any() or np.linalg.matrix_rank(np.column_stack([old, member])) == np.linalg.matrix_rank(old):
        return
    got = spanned_gap(np.packbits(member), [np.packbits(s) for s in sets], member.size, below=below,
                      group=np.packbits(group))
    assert got == _fewest(sets, member, below, (member, group & ~member))


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
