"""An engine's Arrow record batches into the pandas columns the catalog types, one batch at a time.

Materialising a query's whole result as an Arrow table and then converting it (``to_pandas``)
holds the columns twice at the peak, and the engine's allocator may keep the first copy's memory
after it is freed (DuckDB's jemalloc kept 1.2 x the columns read at 2e7 rows). Here a fixed-width
column (integers, floats, booleans) is copied a batch at a time into one array of the table's
length, allocated once: the peak is the columns plus a batch. The values are those ``to_pandas``
gives: an integer column with missing values becomes float64 with NaN, a boolean one object with
None; any other type (text, dates) is converted as before, from its batches at the end.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa


class ReadError(Exception):
    """The engine's rows do not match the count it gave (the table changed while it was read)."""


class _Sink:
    """One column's values, filled a batch at a time."""

    def __init__(self, field: pa.Field, n: int) -> None:
        self.type = field.type
        fixed = pa.types.is_integer(self.type) or pa.types.is_floating(self.type) or pa.types.is_boolean(self.type)
        self.values = np.empty(n, dtype=self.type.to_pandas_dtype()) if fixed else None  # None: kept as chunks
        self.missing: np.ndarray | None = None  # where an integer or boolean is null, once one is
        self.chunks: list[pa.Array] = []

    def add(self, chunk: pa.Array, at: int) -> None:
        if self.values is None:
            self.chunks.append(chunk)
            return
        rows = slice(at, at + len(chunk))
        if chunk.null_count and pa.types.is_floating(self.type):
            chunk = chunk.fill_null(np.nan)
        elif chunk.null_count:
            if self.missing is None:
                self.missing = np.zeros(self.values.size, dtype=bool)
            self.missing[rows] = chunk.is_null().to_numpy(zero_copy_only=False)
            chunk = chunk.fill_null(False if pa.types.is_boolean(self.type) else 0)
        self.values[rows] = chunk.to_numpy(zero_copy_only=False)

    def series(self) -> pd.Series:
        if self.values is None:
            return pa.chunked_array(self.chunks, type=self.type).to_pandas()
        if self.missing is None:
            return pd.Series(self.values, copy=False)
        boolean = pa.types.is_boolean(self.type)  # an integer column's floats, as to_pandas
        out = self.values.astype(object if boolean else np.float64)
        out[self.missing] = None if boolean else np.nan
        return pd.Series(out, copy=False)


def columns_from_batches(schema: pa.Schema, batches: Iterable[pa.RecordBatch], n: int) -> pd.DataFrame:
    """The columns of ``batches`` (``n`` rows in all, as the engine counted them when it first read
    the table) as a frame; other than ``n`` rows is a :class:`ReadError`."""
    sinks = [_Sink(field, n) for field in schema]
    at = 0
    for batch in batches:
        if at + batch.num_rows > n:
            raise ReadError(f"more than the {n} rows it had when first read: the table changed while the site "
                            "served it")
        for sink, chunk in zip(sinks, batch.columns):
            sink.add(chunk, at)
        at += batch.num_rows
    if at != n:
        raise ReadError(f"{at} rows, not the {n} it had when first read: the table changed while the site served it")
    return pd.DataFrame({field.name: sink.series() for field, sink in zip(schema, sinks)}, copy=False)
