"""The differencing audit's core (``differencing.isolated_records``): a record is isolated exactly when
its indicator lies in the span of the released row sets (Chin & Ozsoyoglu 1982). Reference: the
definition itself, by rank over the whole records x sets matrix (``rank([M, e_i]) == rank(M)``),
on random set systems small enough for it, on both sides of the 16 sets up to which the atoms are
coded in 16 bits; and a hand-made case."""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_server.disclosure.differencing import CODED_SETS, isolated_records


def _in_span(matrix: np.ndarray) -> np.ndarray:
    """The records whose indicator is a combination of the columns of ``matrix`` (records x sets)."""
    rank = np.linalg.matrix_rank(matrix)
    out = []
    for i in range(matrix.shape[0]):
        e = np.zeros((matrix.shape[0], 1))
        e[i] = 1.0
        if np.linalg.matrix_rank(np.hstack([matrix, e])) == rank:
            out.append(i)
    return np.array(out, dtype=np.int64)


def test_a_subset_of_all_records_but_one_isolates_that_record():
    n = 200_000  # several batches of rows: the atoms' first records are found batch by batch
    table = np.ones(n, dtype=bool)
    subset = table.copy()
    subset[150_001] = False
    assert isolated_records([table, subset]).tolist() == [150_001]
    other = np.arange(n) % 3 == 0  # an unrelated set isolates nobody more
    assert isolated_records([table, subset, other]).tolist() == [150_001]


@pytest.mark.parametrize("n_sets", [1, 3, 8, CODED_SETS, CODED_SETS + 1, 24])
def test_isolated_records_are_those_in_the_span_of_the_sets(n_sets):
    rng = np.random.default_rng(n_sets)
    for trial in range(25):
        n = int(rng.integers(3, 40))
        density = rng.uniform(0.05, 0.95, n_sets)
        sets = [np.ones(n, dtype=bool), *(rng.uniform(size=n) < d for d in density[1:])]
        expected = _in_span(np.column_stack(sets).astype(float))
        np.testing.assert_array_equal(isolated_records(sets), expected, err_msg=f"trial {trial}")
