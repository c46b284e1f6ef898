"""The differencing audit's core (``differencing.isolated_records``): a record is isolated exactly when
its indicator lies in the span of the released row sets (Chin & Ozsoyoglu 1982). Reference: the
definition itself, by rank over the whole records x sets matrix (``rank([M, e_i]) == rank(M)``),
on random set systems small enough for it, on both sides of the 16 sets up to which the atoms are
coded in 16 bits, with the sets given as boolean arrays and packed as the release history keeps
them; and a hand-made case, also beyond 16 sets and past the 61 doublings after which the atoms'
labels are numbered again."""

from __future__ import annotations

import numpy as np
import pytest
from sitekit import held_by

from dsfed_server.disclosure.differencing import (ATOM_FLOATS, CODED_SETS, MAX_AUDIT_WORK, AuditTooLarge,
                                                 atom_batch, isolated_records, row_set_problem, spanned_gap)


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
    assert isolated_records([table, subset], n).tolist() == [150_001]
    other = np.arange(n) % 3 == 0  # an unrelated set isolates nobody more
    assert isolated_records([table, subset, other], n).tolist() == [150_001]
    # 70 more sets, packed (the labels doubled past 2**61 and numbered again): still that record
    # alone; were the subset's bit shifted out of its label, the record would join the others' atom
    assert isolated_records([table, np.packbits(subset), *[np.packbits(table)] * 70], n).tolist() == [150_001]


@pytest.mark.parametrize("n_sets", [1, 3, 8, CODED_SETS, CODED_SETS + 1, 24, 70])
def test_isolated_records_are_those_in_the_span_of_the_sets(n_sets):
    rng = np.random.default_rng(n_sets)
    for trial in range(25):
        n = int(rng.integers(3, 40))
        density = rng.uniform(0.05, 0.95, n_sets)
        sets = [np.ones(n, dtype=bool), *(rng.uniform(size=n) < d for d in density[1:])]
        expected = _in_span(np.column_stack(sets).astype(float))
        np.testing.assert_array_equal(isolated_records(sets, n), expected, err_msg=f"trial {trial}")
        packed = [np.packbits(rows) for rows in sets]
        np.testing.assert_array_equal(isolated_records(packed, n), expected, err_msg=f"trial {trial}, packed")


def test_the_audit_reads_a_long_history_one_packed_set_at_a_time():
    """``row_set_problem`` against 100 earlier row sets (ten histograms of ten bins on one column, as
    the release history keeps them: packed, 1 bit a record) works a set at a time: its peak stays
    below 48 bytes a record, where a records x sets matrix of the sets alone is 100 (what the audit
    built before, besides unpacking each set to a byte a record). The answer is the definition's:
    a new interval cell one record away from an earlier edge isolates that record."""
    n = 400_000
    x = np.random.default_rng(6).uniform(size=n)
    order = np.argsort(x)
    earlier = []
    for shift in range(10):
        edges = np.linspace(0, 1, 11)[1:-1] + shift * 0.004
        cell = np.digitize(x, edges)
        earlier.extend(np.packbits(cell == k) for k in range(10))
    lowest = 0.2 + 0.004  # the second histogram's first edge: the record just above it is isolated by
    above = order[np.searchsorted(x[order], lowest)]  # a cell from the edge to just past it, as 1 record
    new = (x <= x[above]) & (x > 0.2)  # a cell of the first histogram's edges and the record above: differs by 1
    problems = []
    _, peak = held_by(lambda: problems.append(row_set_problem(earlier, [new], 5)))
    (problem,) = problems
    assert peak < 48 * n  # the sets alone as a records x sets matrix: 100 bytes a record
    assert problem is not None and "single out a record" in problem


def _leverage_one(matrix: np.ndarray) -> np.ndarray:
    """The records whose leverage in ``matrix`` (records x sets, whole) is 1: the definition on the
    records themselves, by one SVD, without atoms or batches."""
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    basis = u[:, s > s[0] * max(matrix.shape) * np.finfo(float).eps * 10]
    return np.flatnonzero(np.einsum("ij,ij->i", basis, basis) > 1 - 1e-8)


def test_nearly_every_record_its_own_atom_isolated_records_are_the_definitions():
    """24 random sets make nearly every one of 100,000 records an atom of its own (as histograms on
    independent columns do), more atoms than one batch of the audit. Among them: three sets of all
    records but one, two pairs of sets one record apart, and one pair two records apart (their sum is
    in the span, neither record is). The isolated records are those of the definition on the whole
    records x sets matrix: exactly the five, not the pair."""
    n = 100_000
    rng = np.random.default_rng(41)
    sets = [np.ones(n, dtype=bool), *(rng.uniform(size=n) < 0.5 for _ in range(24))]
    lone = rng.choice(n, 5, replace=False)
    for record in lone[:3]:
        sets.append(np.arange(n) != record)
    for record in lone[3:]:
        base = rng.uniform(size=n) < 0.3
        base[record] = False
        sets.extend([base, base | (np.arange(n) == record)])
    paired = rng.choice(np.setdiff1d(np.arange(n), lone), 2, replace=False)
    base = rng.uniform(size=n) < 0.3
    base[paired] = False
    with_pair = base.copy()
    with_pair[paired] = True
    sets.extend([base, with_pair])
    matrix = np.column_stack(sets).astype(float)
    assert np.unique(matrix, axis=0).shape[0] > atom_batch(len(sets))  # the atoms take several batches
    expected = _leverage_one(matrix)
    assert expected.tolist() == sorted(lone.tolist())
    np.testing.assert_array_equal(isolated_records(sets, n), expected)
    np.testing.assert_array_equal(isolated_records([np.packbits(rows) for rows in sets], n), expected)


def test_the_audit_of_a_record_per_atom_holds_a_batch_of_the_atoms_matrix():
    """100 row sets (ten histograms of ten bins on ten independent columns, packed) make nearly every
    one of 200,000 records an atom of its own. The audit's peak stays below 40 bytes a record and four
    batches of the atoms x sets matrix (8 MiB each), 41.5 MB; the matrix alone is 808 bytes a record,
    and the audit held 2,500 before (the matrix, its SVD and their copies: 500 MB here). The answer
    is the definition's: a new cell one record away from an earlier one isolates it."""
    n = 200_000
    rng = np.random.default_rng(42)
    earlier = []
    for _ in range(10):
        cell = np.digitize(rng.uniform(size=n), np.linspace(0, 1, 11)[1:-1])
        earlier.extend(np.packbits(cell == k) for k in range(10))
    record = int(np.flatnonzero(np.unpackbits(earlier[0], count=n))[0])
    new = np.unpackbits(earlier[0], count=n).astype(bool)
    new[record] = False
    problems = []
    _, peak = held_by(lambda: problems.append(row_set_problem(earlier, [new], 1)))
    (problem,) = problems
    assert peak < 40 * n + 4 * 8 * ATOM_FLOATS  # 41.5 MB, against 162 MB for the matrix alone
    assert problem is not None and "single out a record" in problem


@pytest.mark.parametrize("k", [100, 140])
def test_nearly_dependent_sets_hide_no_record(k):
    """k sets over k records, record r in set c when r - c is 0, 2 or 3: a unit lower-triangular 0/1
    matrix, so its determinant is 1 and every record's indicator is a combination of the sets (by hand:
    solve from the first record down). The matrix's condition number is 6e8 (k = 100) or 1.5e12 (k =
    140): the basis row computed from R's SVD is off by about eps times that, and the audit still
    finds every record (it found 98 and 126 with the 1e-8 tolerance alone)."""
    rows, columns = np.indices((k, k))
    incidence = np.isin(rows - columns, [0, 2, 3])
    assert round(abs(np.linalg.det(incidence.astype(float)))) == 1
    sets = [incidence[:, c].copy() for c in range(k)]
    np.testing.assert_array_equal(isolated_records(sets, k), np.arange(k))
    np.testing.assert_array_equal(isolated_records([np.packbits(c) for c in sets], k), np.arange(k))


def test_an_audit_beyond_its_work_limit_refuses_the_release():
    """1,500 random row sets over 100,000 records (nearly a record per atom): their audit would take
    atoms x sets^2 = 2.2e11 multiply-adds, beyond MAX_AUDIT_WORK. The audit is not started; the
    release is refused, saying why, instead of holding the site for many minutes."""
    n, k = 100_000, 1_500
    rng = np.random.default_rng(43)
    earlier = [np.packbits(rng.uniform(size=n) < 0.5) for _ in range(k)]
    assert n * k ** 2 > MAX_AUDIT_WORK
    with pytest.raises(AuditTooLarge):
        isolated_records(earlier, n)
    new = rng.uniform(size=n) < 0.5
    problem = row_set_problem(earlier, [new], 5)
    assert problem is not None and "too large to audit" in problem
    with pytest.raises(AuditTooLarge):  # not a gap of 1 record, which the gate reported as "differ by fewer than 5"
        spanned_gap(np.packbits(new), earlier, n, below=5)
