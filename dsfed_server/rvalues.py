"""R values as Opal's DataSHIELD JSON shows them (``jsonlite::toJSON``).

Opal answers a JSON-speaking DataSHIELD client (the PyPI ``datashield`` +
``datashield-opal`` packages) with the R result of a call encoded by
``jsonlite::toJSON(x, auto_unbox = TRUE, null = "null", na = "null", digits = NA)``.
This module gives that encoding for the values dsfed's registry functions
return, so the Opal front door answers in the shape a dsBase server would:

- a named list becomes an object, an unnamed list an array;
- an atomic vector becomes an array, or a bare scalar when it has length 1
  (``auto_unbox``); the names of an atomic vector are dropped;
- a matrix becomes an array of rows (never unboxed; dimnames dropped);
- a data frame becomes an array of row objects, with a ``"_row"`` field when
  it has character row names;
- ``NA``, ``NaN``, ``Inf`` and ``NULL`` become ``null``.

Plain Python values (what the native API returns) are read as the R value
they stand for: a dict is a named list, a list of scalars an atomic vector,
a list of lists a matrix (rows), a list of dicts an unnamed list of named
lists. Where that reading would be wrong, a registry entry's ``opal_shape``
adapter wraps the value in :class:`RVector`, :class:`RMatrix`,
:class:`RDataFrame` or :class:`RList` to say what it is in R. Pure functions,
no I/O. (Python writes doubles with 17 significant digits where jsonlite's
``digits = NA`` writes 15: the same numbers, never fewer digits.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class RVector:
    """An atomic vector; ``names`` (if any) are dropped by jsonlite, as in R's JSON."""

    values: Sequence[Scalar]
    names: Sequence[str] | None = None


@dataclass(frozen=True)
class RMatrix:
    """A matrix given by its rows; encoded row-major, never unboxed."""

    rows: Sequence[Sequence[Scalar]]


@dataclass(frozen=True)
class RDataFrame:
    """A data frame given by its columns (in order) and, optionally, character row names."""

    columns: Mapping[str, Sequence[Scalar]]
    row_names: Sequence[str] | None = None


@dataclass(frozen=True)
class RList:
    """A generic R list: named (a mapping) or unnamed (a sequence)."""

    items: Mapping[str, Any] | Sequence[Any] = field(default_factory=list)


def _scalar(value: Any) -> Scalar:
    """One element of an atomic vector: NA, NaN and +-Inf become null."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if hasattr(value, "item"):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"not an atomic value: {type(value).__name__}")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, str, int, float)) or (
        hasattr(value, "item") and not hasattr(value, "__len__")
    )


def _vector(values: Sequence[Any]) -> Any:
    out = [_scalar(v) for v in values]
    return out[0] if len(out) == 1 else out


def _matrix(rows: Sequence[Sequence[Any]]) -> list[list[Scalar]]:
    return [[_scalar(v) for v in row] for row in rows]


def _data_frame(frame: RDataFrame) -> list[dict[str, Any]]:
    names = list(frame.columns)
    columns = [list(frame.columns[n]) for n in names]
    n_rows = len(columns[0]) if columns else len(frame.row_names or ())
    if any(len(c) != n_rows for c in columns):
        raise ValueError("data frame columns differ in length")
    rows = []
    for i in range(n_rows):
        row: dict[str, Any] = {name: _scalar(col[i]) for name, col in zip(names, columns)}
        if frame.row_names is not None:
            row["_row"] = str(frame.row_names[i])
        rows.append(row)
    return rows


def to_jsonlite(value: Any) -> Any:
    """The JSON value (plain Python) that ``jsonlite::toJSON`` gives for the R value ``value`` stands for."""
    if isinstance(value, RVector):
        return _vector(value.values)
    if isinstance(value, RMatrix):
        return _matrix(value.rows)
    if isinstance(value, RDataFrame):
        return _data_frame(value)
    if isinstance(value, RList):
        if isinstance(value.items, Mapping):
            return {str(k): to_jsonlite(v) for k, v in value.items.items()}
        return [to_jsonlite(v) for v in value.items]
    if isinstance(value, Mapping):
        return {str(k): to_jsonlite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if all(_is_scalar(v) for v in value):
            return _vector(value)
        rows = [v for v in value if isinstance(v, (list, tuple)) and all(_is_scalar(x) for x in v)]
        if len(rows) == len(value) and len({len(r) for r in rows}) == 1:
            return _matrix(rows)
        return [to_jsonlite(v) for v in value]
    return _scalar(value)
