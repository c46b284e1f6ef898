"""R values as Opal's DataSHIELD JSON shows them (``jsonlite::toJSON``, or ``serializeJSON``).

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
adapter wraps the value in :class:`RVector`, :class:`RMatrix`, :class:`RArray`,
:class:`RFactor`, :class:`RDataFrame` or :class:`RList` to say what it is in R. The same
values are written in R's own serialization format for an R client that asks for it
(:mod:`dsfed_server.opal.rserialize`). Pure functions,
no I/O. A value holding an S3-classed list (:class:`RList` with ``r_class``), which ``toJSON``
refuses, is sent in ``serializeJSON``'s typed form instead, as Opal's R server does
(:func:`opal_json`). (Python writes doubles with 17 significant digits where jsonlite's
``digits = NA`` writes 15: the same numbers, never fewer digits.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class RVector:
    """An atomic vector; ``names`` (if any) are dropped by jsonlite, as in R's JSON. ``type``: R's
    storage type (``double``, ``integer``, ``logical``, ``character``) where the Python values
    would read as another (``0`` where R holds the double ``0``). ``attributes``: further
    attributes (name -> a value read as this module reads values), after ``names``; jsonlite's
    ``toJSON`` drops them, ``serializeJSON`` keeps them."""

    values: Sequence[Scalar]
    names: Sequence[str] | None = None
    type: str | None = None
    attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RFactor:
    """A factor: ``codes`` index ``levels`` from 1 (None: NA), as R stores it (an integer vector
    with attributes ``levels`` and ``class = "factor"``); jsonlite's ``toJSON`` writes its labels."""

    codes: Sequence[int | None]
    levels: Sequence[str]

    def labels(self) -> list[str | None]:
        return [None if c is None else self.levels[c - 1] for c in self.codes]


@dataclass(frozen=True)
class RMatrix:
    """A matrix given by its rows; encoded row-major, never unboxed. ``dimnames`` (row names,
    column names; either None) are dropped by jsonlite, kept by serializeJSON."""

    rows: Sequence[Sequence[Scalar]]
    dimnames: tuple[Sequence[str] | None, Sequence[str] | None] | None = None


@dataclass(frozen=True)
class RArray:
    """An array (``tapply``'s result, a ``table``): ``values`` in R's column-major order, ``dim``,
    ``dimnames`` (per dimension, labels or None), the names of the dimnames (``table(group)`` names
    its one ``group``) and an S3 class (``table``, which ``jsonlite::toJSON`` refuses). jsonlite
    writes a 1-d array as an array (never unboxed), a 2-d one as rows."""

    values: Sequence[Scalar]
    dim: Sequence[int]
    dimnames: Sequence[Sequence[str] | None] | None = None
    dimnames_names: Sequence[str] | None = None
    r_class: str | None = None
    type: str | None = None


@dataclass(frozen=True)
class RDataFrame:
    """A data frame given by its columns (in order: plain values, or an :class:`RVector` or
    :class:`RFactor` saying the column's R type) and, optionally, character row names."""

    columns: Mapping[str, Sequence[Scalar] | RVector | RFactor]
    row_names: Sequence[str] | None = None


def column_values(column: Sequence[Scalar] | RVector | RFactor) -> list[Scalar]:
    """A data frame column's values as jsonlite writes them (a factor's labels)."""
    if isinstance(column, RVector):
        return list(column.values)
    if isinstance(column, RFactor):
        return column.labels()
    return list(column)


@dataclass(frozen=True)
class RList:
    """A generic R list: named (a mapping) or unnamed (a sequence); ``r_class``: its S3 class
    (``histogram``, ``family``), which ``jsonlite::toJSON`` refuses to encode."""

    items: Mapping[str, Any] | Sequence[Any] = field(default_factory=list)
    r_class: str | None = None
    attributes: Mapping[str, Any] | None = None  # further attributes, after names and class


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


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is one element of an atomic vector (None for NA, a number, a string, a bool)."""
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
    columns = [column_values(frame.columns[n]) for n in names]
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


def _array(array: RArray) -> list[Any]:
    if len(array.dim) == 1:
        return [_scalar(v) for v in array.values]
    if len(array.dim) == 2:
        n_rows, n_cols = array.dim
        return [[_scalar(array.values[i + j * n_rows]) for j in range(n_cols)] for i in range(n_rows)]
    raise ValueError("arrays of more than two dimensions are not encoded")


def to_jsonlite(value: Any) -> Any:
    """The JSON value (plain Python) that ``jsonlite::toJSON`` gives for the R value ``value`` stands for."""
    if isinstance(value, RArray):
        return _array(value)
    if isinstance(value, RVector):
        return _vector(value.values)
    if isinstance(value, RFactor):
        return _vector(value.labels())
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
        if all(is_scalar(v) for v in value):
            return _vector(value)
        rows = [v for v in value if isinstance(v, (list, tuple)) and all(is_scalar(x) for x in v)]
        if len(rows) == len(value) and len({len(r) for r in rows}) == 1:
            return _matrix(rows)
        return [to_jsonlite(v) for v in value]
    return _scalar(value)


# --- Opal's fallback: serializeJSON's typed form -------------------------------------------------


def opal_json(value: Any) -> Any:
    """What Opal's R server sends for the R value ``value`` stands for:
    ``tryCatch(jsonlite::toJSON(x, ...), error = function(e) jsonlite::serializeJSON(x))``.
    ``toJSON`` refuses a value holding an S3-classed list (a ``histogram``, a ``family``), so such
    a value comes in ``serializeJSON``'s typed form (:func:`serialize_json`); any other in
    :func:`to_jsonlite`'s form."""
    return serialize_json(value) if _has_class(value) else to_jsonlite(value)


def _has_class(value: Any) -> bool:
    """Whether ``value`` holds, at any depth, a list with an S3 class."""
    if isinstance(value, RArray):
        return value.r_class is not None
    if isinstance(value, RList):
        return value.r_class is not None or _has_class(value.items)
    if isinstance(value, Mapping):
        return any(_has_class(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_class(v) for v in value)
    return False


def serialize_json(value: Any) -> dict[str, Any]:
    """``jsonlite::serializeJSON``'s typed form of the R value ``value`` stands for (read as
    :func:`to_jsonlite` reads it): ``{"type", "attributes", "value"}`` at every level. Numbers keep
    Python's 17 digits where serializeJSON's default writes 8: the same numbers, never fewer digits."""
    if value is None:
        return {"type": "NULL"}
    if isinstance(value, RVector):
        attributes = {} if value.names is None else {"names": _typed(list(value.names), "character")}
        attributes |= {str(k): serialize_json(v) for k, v in (value.attributes or {}).items()}
        return _typed(list(value.values), value.type, attributes)
    if isinstance(value, RFactor):
        return _typed(list(value.codes), "integer", {"levels": _typed(list(value.levels), "character"),
                                                     "class": _typed(["factor"], "character")})
    if isinstance(value, RArray):
        return _typed_array(value)
    if isinstance(value, RMatrix):
        columns = [v for column in zip(*value.rows) for v in column]
        attributes = {"dim": _typed([len(value.rows), len(value.rows[0]) if value.rows else 0], "integer")}
        if value.dimnames is not None:
            attributes["dimnames"] = _typed_list([None if n is None else RVector(list(n), type="character")
                                                  for n in value.dimnames], None)
        return _typed(columns, None, attributes)
    if isinstance(value, RDataFrame):
        return _typed_data_frame(value)
    if isinstance(value, RList):
        return _typed_list(value.items, value.r_class, value.attributes)
    if isinstance(value, Mapping):
        return _typed_list(value, None)
    if isinstance(value, (list, tuple)):
        if all(is_scalar(v) for v in value):
            return _typed(list(value), None)
        if all(isinstance(v, (list, tuple)) for v in value) and len({len(v) for v in value}) == 1:
            return serialize_json(RMatrix(value))
        return _typed_list(value, None)
    return _typed([value], None)


def _typed_list(items: Mapping[str, Any] | Sequence[Any], r_class: str | None,
                extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A generic list: its names (if named) and class as attributes, each element typed."""
    attributes: dict[str, Any] = {}
    if isinstance(items, Mapping):
        attributes["names"] = _typed([str(k) for k in items], "character")
        items = list(items.values())
    if r_class is not None:
        attributes["class"] = _typed([r_class], "character")
    attributes |= {str(k): serialize_json(v) for k, v in (extra or {}).items()}
    return {"type": "list", "attributes": attributes, "value": [serialize_json(v) for v in items]}


def _typed_array(array: RArray) -> dict[str, Any]:
    """An array: ``dim``, then ``dimnames`` (a list, named when its dimensions are), then ``class``."""
    attributes: dict[str, Any] = {"dim": _typed(list(array.dim), "integer")}
    if array.dimnames is not None:
        names = ({} if array.dimnames_names is None
                 else {"names": _typed(list(array.dimnames_names), "character")})
        attributes["dimnames"] = {"type": "list", "attributes": names, "value": [
            serialize_json(None if d is None else RVector(list(d), type="character")) for d in array.dimnames]}
    if array.r_class is not None:
        attributes["class"] = _typed([array.r_class], "character")
    return _typed(list(array.values), array.type, attributes)


def _typed_data_frame(frame: RDataFrame) -> dict[str, Any]:
    """A data frame: names, class and row names (1..n unless given) as attributes, columns typed."""
    columns = list(frame.columns.values())
    n_rows = len(column_values(columns[0])) if columns else len(frame.row_names or ())
    rows = (_typed(list(frame.row_names), "character") if frame.row_names is not None
            else _typed(list(range(1, n_rows + 1)), "integer"))
    attributes = {"names": _typed(list(frame.columns), "character"),
                  "class": _typed(["data.frame"], "character"), "row.names": rows}
    return {"type": "list", "attributes": attributes,
            "value": [serialize_json(c) if isinstance(c, (RVector, RFactor)) else _typed(list(c), None)
                      for c in columns]}


def _typed(values: list[Any], storage: str | None, attributes: dict[str, Any] | None = None) -> dict[str, Any]:
    """An atomic vector of R type ``storage`` (read from the values when None), with its attributes."""
    values = [v.item() if hasattr(v, "item") else v for v in values]
    storage = storage or r_type(values)
    return {"type": storage, "attributes": attributes or {}, "value": [_typed_scalar(v, storage) for v in values]}


INT_MAX = 2**31 - 1  # R's integers are 32-bit, -2^31 being NA


def r_type(values: Sequence[Any]) -> str:
    """R's storage type for Python scalars: all booleans (or only NA) logical, any string character,
    all whole ``int`` within R's integer range integer, otherwise double."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present):
        return "logical"
    if any(isinstance(v, str) for v in present):
        return "character"
    whole = all(isinstance(v, int) and not isinstance(v, bool) and -INT_MAX <= v <= INT_MAX for v in present)
    return "integer" if whole else "double"


def _typed_scalar(value: Any, r_type: str) -> Any:
    """One element as serializeJSON writes it: numeric NA, NaN and +-Inf as strings, other NA null."""
    if r_type in ("logical", "character"):
        return value
    if value is None:
        return "NA"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Inf" if value > 0 else "-Inf")
    return float(value) if r_type == "double" else value
