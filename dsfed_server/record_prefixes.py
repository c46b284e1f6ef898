"""Digests of a column's first records, by which a site tells whether a table that grew kept its earlier
records: the release history's row sets are positions in the table (:mod:`dsfed_server.disclosure.history`).

A digest is SHA-256 over the values as the catalog serves them, in record order, in a form that depends on
no library's hashing: numbers (integers, decimals, booleans) as IEEE 754 doubles (a missing value one NaN);
text and categories as their UTF-8 bytes, one after the other, and apart from them each value's length in
bytes (a missing value a length of -1). A column's digest of its first ``n`` values is the same however
the values before ``n`` are read in parts.

:class:`RecordKeys` gives each record a key of its values in every served column, by which the site sorts a
table's records into an order that does not depend on the order it holds them in: records equal in every
served column share a key, and are kept in their order (the key decides nothing that matters to a release:
the digests check any order it gives).
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
    numbers = _numbers(values)
    if numbers is not None:
        return numbers.astype("<f8", copy=False).tobytes(), b""
    text = pa.array(values.astype("string").to_numpy(dtype=object, na_value=None), type=pa.large_string())
    offsets = np.frombuffer(text.buffers()[1], dtype="<i8")[text.offset:text.offset + len(text) + 1]
    lengths = np.diff(offsets)
    lengths[text.is_null().to_numpy(zero_copy_only=False)] = -1
    data = text.buffers()[2]
    return (b"" if data is None else data.to_pybytes()[offsets[0]:offsets[-1]]), lengths.astype("<i8").tobytes()


def _numbers(values: pd.Series) -> np.ndarray | None:
    """A numeric or boolean slice's values as IEEE 754 doubles, one NaN for a missing value (None for text)."""
    if not (pd.api.types.is_numeric_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype)):
        return None
    numbers = values.to_numpy(dtype="float64", na_value=np.nan, copy=True)
    numbers[np.isnan(numbers)] = np.nan  # one NaN, whatever the source's bits
    return numbers


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


_MISSING_TEXT = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele, Lea and Flood 2014), element-wise on unsigned 64-bit integers."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _value_hashes(column: pd.Series) -> np.ndarray:
    """Per record, 64 bits of its value in ``column``: a number's IEEE 754 bits mixed, a text's BLAKE2b."""
    numbers = _numbers(column)
    if numbers is not None:
        return _mix(numbers.view(np.uint64))
    codes, uniques = pd.factorize(column.astype("string"), use_na_sentinel=True)
    table = np.array([int.from_bytes(hashlib.blake2b(str(u).encode(), digest_size=8).digest(), "little")
                      for u in uniques] + [int(_MISSING_TEXT)], dtype=np.uint64)
    return table[codes]  # a missing value's code is -1: the last entry


class RecordKeys:
    """Keys of ``n`` records built a column at a time (:meth:`add`), 64 bits each: records equal in every
    column added share a key; two records that differ share one with a chance of about 2^-64 (and are then
    taken as equal: the digests check any order the keys give)."""

    def __init__(self, n: int) -> None:
        self.keys = np.zeros(n, dtype=np.uint64)
        self.columns: list[str] = []  # the names of the columns added, in the order added

    def add(self, column: pd.Series) -> None:
        """Add a column's values, of its first records as many as the keys'."""
        self.keys = _mix(self.keys ^ _value_hashes(column.iloc[:self.keys.size])) + np.uint64(0x9E3779B97F4A7C15)
        self.columns.append(str(column.name))

    def sorted(self) -> np.ndarray:
        """The records' positions sorted by their keys, records of one key in their order (stable)."""
        return np.argsort(self.keys, kind="stable")
