"""The engines' Arrow record batches become the columns pyarrow's own ``to_pandas`` gives (the
conversion the catalog typed before it read a batch at a time): same dtypes, values and missing
values, for every fixed-width type with and without nulls across batches, and for text; a row count
that does not match the rows read is an error, not a short or padded column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dsfed_server.engines.arrow_columns import ReadError, columns_from_batches

N = 10_000


@pytest.fixture(scope="module")
def table() -> pa.Table:
    rng = np.random.default_rng(3)
    gaps = rng.random(N) < 0.1
    ints = rng.integers(-5, 5, N)
    return pa.table({
        "int": pa.array(ints),
        "int_na": pa.array(ints, mask=gaps),
        "int8_na": pa.array(ints.astype(np.int8), mask=gaps),
        "float": pa.array(rng.normal(size=N)),
        "float_na": pa.array(rng.normal(size=N), mask=gaps),
        "bool": pa.array(ints > 0),
        "bool_na": pa.array(ints > 0, mask=gaps),
        "text": pa.array([None if g else f"v{i}" for g, i in zip(gaps, ints)]),
    })


@pytest.mark.parametrize("batch_rows", [1000, 4096, N])
def test_columns_equal_to_pandas(table, batch_rows):
    read = columns_from_batches(table.schema, table.to_batches(batch_rows), table.num_rows)
    for name in table.column_names:
        expected = table.column(name).to_pandas()
        assert read[name].dtype == expected.dtype, name
        pd.testing.assert_series_equal(read[name], expected, check_names=False)


def test_a_row_count_that_differs_is_an_error(table):
    with pytest.raises(ReadError, match="not the"):
        columns_from_batches(table.schema, table.to_batches(4096), table.num_rows + 1)
    with pytest.raises(ReadError, match="more than"):
        columns_from_batches(table.schema, table.to_batches(4096), table.num_rows - 1)
