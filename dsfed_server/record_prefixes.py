"""Digests of a column's first records, by which a site tells whether a table that grew kept its earlier
records: the release history's row sets are positions in the table (:mod:`dsfed_server.disclosure.history`).

A digest is SHA-256 over the values as the catalog serves them, in record order, in a form that depends on
no library's hashing: numbers (integers, decimals, booleans) as IEEE 754 doubles (a missing value one NaN);
text and categories as their UTF-8 bytes, one after the other, and apart from them each value's length in
bytes (a missing value a length of -1). A column's digest of its first ``n`` values is the same however
the values before ``n`` are read in parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa


def _parts(values: pd.Series) -> tuple[bytes, bytes]:
    """``values`` (a slice of a served column) as the bytes its digest reads: the values' bytes, and for text
    the lengths of the values."""
    if pd.api.types.is_numeric_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype):
        numbers = values.to_numpy(dtype="float64", na_value=np.nan, copy=True)
        numbers[np.isnan(numbers)] = np.nan  # one NaN, whatever the source's bits
        return numbers.astype("<f8", copy=False).tobytes(), b""
    text = pa.array(values.astype("string").to_numpy(dtype=object, na_value=None), type=pa.large_string())
    offsets = np.frombuffer(text.buffers()[1], dtype="<i8")[text.offset:text.offset + len(text) + 1]
    lengths = np.diff(offsets)
    lengths[text.is_null().to_numpy(zero_copy_only=False)] = -1
    data = text.buffers()[2]
    return (b"" if data is None else data.to_pybytes()[offsets[0]:offsets[-1]]), lengths.astype("<i8").tobytes()


def prefix_digests(column: pd.Series, sizes: Sequence[int]) -> list[str]:
    """The digest (hex) of the first ``n`` values of ``column`` for each ``n`` of ``sizes`` (increasing, at
    most its length), in one pass."""
    values, lengths = hashlib.sha256(), hashlib.sha256()
    out, done = [], 0
    for n in sizes:
        data, sizes_of = _parts(column.iloc[done:n])
        values.update(data)
        lengths.update(sizes_of)
        out.append(hashlib.sha256(values.digest() + lengths.digest()).hexdigest())
        done = n
    return out
