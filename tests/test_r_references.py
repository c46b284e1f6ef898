"""Distributed results against R on the pooled GBSG2 data (R through rpy2, in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from rref import r_eval


def test_pooled_mean_and_var_equal_R(gbsg2_session, gbsg2_pooled):
    for column in ("age", "score", "progrec"):
        x = gbsg2_pooled[column].to_numpy()
        assert gbsg2_session.mean(f"D${column}").mean == pytest.approx(r_eval("mean(x)", x=x)[0], rel=1e-12)
        assert gbsg2_session.var(f"D${column}").variance == pytest.approx(r_eval("var(x)", x=x)[0], rel=1e-12)


def test_pooled_histogram_equals_R_hist(gbsg2_session, gbsg2_pooled):
    breaks = [20, 42.5, 50.5, 58.5, 85]
    counts = r_eval("hist(x, breaks = b, plot = FALSE)$counts", x=gbsg2_pooled["age"].to_numpy(), b=np.array(breaks))
    np.testing.assert_array_equal(gbsg2_session.histogram("D$age", breaks).counts, counts)


def test_pooled_tables_equal_R_table(gbsg2_session, gbsg2_pooled):
    counts = r_eval("as.vector(table(factor(x, levels = c('no', 'yes'))))", x=gbsg2_pooled["horTh"].to_numpy())
    np.testing.assert_array_equal(gbsg2_session.table1d("D$horTh").counts, counts)
    two = r_eval("as.vector(t(table(y, c)))", y=gbsg2_pooled["y"].to_numpy(), c=gbsg2_pooled["cens"].to_numpy())
    np.testing.assert_array_equal(gbsg2_session.table2d("D$y", "D$cens").counts.ravel(), two)


def test_site_quantiles_equal_R_quantile(gbsg2_session, gbsg2_frames):
    result = gbsg2_session.aggregate_expr("quantileMeanDS(D$age)")
    for site, frame in gbsg2_frames.items():
        expected = r_eval("quantile(x, c(.05, .1, .25, .5, .75, .9, .95), type = 7, names = FALSE)",
                          x=frame["age"].to_numpy())
        got = [v for k, v in result[site].items() if k != "Mean"]
        np.testing.assert_allclose(got, expected, rtol=1e-14)
