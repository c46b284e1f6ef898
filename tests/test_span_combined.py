"""Whether sums over released row sets give the sum over another row set: ``differencing.combined`` against a dense
least-squares oracle.

The oracle builds the records x sets indicator matrix and asks numpy whether the member's indicator is a
combination of its columns (the residual of ``lstsq``). The function under test works on atoms (records in the same
sets) and packed row sets.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dsfed_server.disclosure.differencing import combined, combined_spans

N = 24


def _oracle(member: np.ndarray, sets: list[np.ndarray]) -> bool:
    if not member.any():
        return False
    matrix = np.column_stack(sets).astype(float)
    coef, *_ = np.linalg.lstsq(matrix, member.astype(float), rcond=None)
    return bool(np.allclose(matrix @ coef, member, atol=1e-8))


rows = st.lists(st.booleans(), min_size=N, max_size=N).map(lambda v: np.array(v, dtype=bool))


@settings(max_examples=300, deadline=None)
@given(sets=st.lists(rows, min_size=1, max_size=6), members=st.lists(rows, min_size=1, max_size=4),
       unions=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), max_size=3))
def test_combined_agrees_with_least_squares(sets, members, unions):
    sets = [np.ones(N, dtype=bool), *sets]  # the table's records are always a released set
    # members that are unions or differences of the sets, so that "in the span" is often true
    for picked in unions:
        chosen = [sets[k % len(sets)] for k in picked]
        members.append(np.logical_or.reduce(chosen) & ~(chosen[0] & chosen[-1] if len(chosen) > 1 else False))
    got = combined([np.packbits(m) for m in members], [np.packbits(s) for s in sets], N)
    assert got == [_oracle(m, sets) for m in members]


def test_a_cell_of_two_releases_is_given_and_a_part_of_one_is_not():
    """Cells [0, 8) and [8, 16) of 24 records, and the table: [8, 16) and [16, 24) (the table less both) are given;
    [0, 24) less [4, 8), [0, 8) less one record, [0, 4) and no record are not."""
    at = np.arange(N)
    table, low, mid = np.ones(N, bool), at < 8, (at >= 8) & (at < 16)
    members = [mid, at >= 16, ~((at >= 4) & (at < 8)), low & (at != 0), at < 4, np.zeros(N, bool)]
    got = combined([np.packbits(m) for m in members], [np.packbits(s) for s in (table, low, mid)], N)
    assert got == [True, True, False, False, False, False]


@settings(max_examples=200, deadline=None)
@given(sets=st.lists(rows, min_size=0, max_size=5), cuts=st.lists(st.integers(1, N - 1), max_size=6, unique=True),
       extra=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True), max_size=3))
def test_spans_of_cells_agree_with_their_unions(sets, cuts, extra):
    """``combined_spans`` (a running sum of each cell's atoms) against the oracle on each span's union built
    whole: the cells are intervals of the records between ``cuts``; the spans every run of them and a few other
    groups of cells."""
    sets = [np.ones(N, dtype=bool), *sets]
    bounds = [0, *sorted(cuts), N]
    cells = [(np.arange(N) >= a) & (np.arange(N) < b) for a, b in zip(bounds[:-1], bounds[1:])]
    k = len(cells)
    spans = [tuple(range(a, b)) for a in range(k) for b in range(a + 1, k + 1)]
    spans += [tuple(sorted({c % k for c in group})) for group in extra]
    got = combined_spans([np.packbits(c) for c in cells], spans, [np.packbits(s) for s in sets], N)
    assert got == [_oracle(np.logical_or.reduce([cells[c] for c in span]), sets) for span in spans]
