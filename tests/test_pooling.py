"""Pooling arithmetic on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_client import pooling


def test_pooled_mean_and_variance_by_hand():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0])
    results = {
        "a": {"EstimatedMean": 2.0, "Nvalid": 3, "Nmissing": 1, "Ntotal": 4, "Sum": 6.0, "SumOfSquares": 14.0},
        "b": {"EstimatedMean": 15.0, "Nvalid": 2, "Nmissing": 0, "Ntotal": 2, "Sum": 30.0, "SumOfSquares": 500.0},
    }
    m = pooling.pooled_mean(results)
    assert (m.mean, m.n_valid, m.n_missing, m.n_total) == (36.0 / 5, 5, 1, 6)
    v = pooling.pooled_variance(results)
    assert v.variance == pytest.approx(np.var(np.concatenate([a, b]), ddof=1), rel=1e-14)


def test_pooled_histogram_on_common_edges():
    # site a merged (0,1] and (1,2]; site b kept them; pooled keeps only the common edges
    results = {
        "a": {"edges": [0, 2, 3], "counts": [7, 5], "Nmissing": 0},
        "b": {"edges": [0, 1, 2, 3, None], "counts": [5, 6, 9, 5], "Nmissing": 2},
    }
    h = pooling.pooled_histogram(results)
    np.testing.assert_array_equal(h.edges, [0, 2, 3, np.inf])
    np.testing.assert_array_equal(h.counts, [18, 14, 5])
    assert h.n_missing == 2


def test_pooled_tables_align_levels():
    t = pooling.pooled_table1d({"a": {"levels": ["x", "y"], "counts": [5, 6]},
                                "b": {"levels": ["y", "z"], "counts": [7, 8]}})
    assert t.as_dict() == {"x": 5, "y": 13, "z": 8}
