"""R's ``serialize()`` bytes of the R value a ``/ws`` answer stands for, for R clients.

R's DataSHIELD client (DSOpal over opalr) asks for aggregate results, command results and the
symbol listing with ``Accept: application/octet-stream`` and runs ``unserialize()`` on the answer
(opalr's ``.handleContent``), as Opal's R server sends R's own serialization. This module writes
that format, XDR (big-endian), version 3 (R >= 3.5.0 reads it) or 2, as R Internals, section 1.8
"Serialization Formats" describes it (R Core Team, 2022), from the values
:mod:`dsfed_server.rvalues` already reads as R values for the JSON answers: the same reading, so
the R value and the JSON describe one result.

The byte-level writing is the well-kept ``rdata`` library's (Ramos Carreño & Rossi, rdata 1.1,
MIT: ``ConverterFromPythonToR`` for symbols and their references, strings with their encoding
marks, and its XDR unparser); this module only says which R object each value is:

- ``None``: ``NULL``; a Python scalar: a vector of length 1;
- a list of scalars: an atomic vector, logical (booleans), character (strings), integer (whole
  ``int`` in R's integer range) or double; ``None`` in it is ``NA`` of its type;
- a list of equal-length lists of scalars: a matrix (rows); other lists: an unnamed list; a dict:
  a named list;
- :class:`~dsfed_server.rvalues.RVector`, :class:`~dsfed_server.rvalues.RFactor`,
  :class:`~dsfed_server.rvalues.RMatrix`, :class:`~dsfed_server.rvalues.RArray`,
  :class:`~dsfed_server.rvalues.RDataFrame`, :class:`~dsfed_server.rvalues.RList`: what they say,
  with ``names``, ``dim``, ``dimnames``, ``class``, ``levels``, ``row.names`` and further attributes
  in the order R's own constructors give them (a data frame's default row names in R's compact
  form ``c(NA, -n)``).

A double ``NaN`` stays ``NaN``; ``None`` in a double vector is R's ``NA_real_``. Nothing here reads
R serialization: dsfed never unserializes what a client sends.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from rdata.conversion import ConverterFromPythonToR
from rdata.conversion.to_r import build_r_list, build_r_object
from rdata.missing import R_FLOAT_NA
from rdata.parser import RData, RExtraInfo, RObject, RObjectType, RVersions
from rdata.unparser import unparse_data

from dsfed_server.rvalues import (
    RArray, RDataFrame, RFactor, RList, RMatrix, RVector, is_scalar, r_type,
)

MEDIA_TYPE = "application/octet-stream"
R_VERSION_WRITTEN = 0x040200  # the writer's version in the header: the format of R 4.2's serialize()
_MINIMUM_READER = {2: 0x020300, 3: 0x030500}  # the R version that reads each format version

Storage = Literal["logical", "integer", "double", "character"]
_ARRAY_TYPES = {"logical": np.bool_, "integer": np.int32, "double": np.float64}


def serialize(value: Any, version: int = 3) -> bytes:
    """``serialize(x, NULL, xdr = TRUE, version = version)`` of the R value ``value`` stands for."""
    if version not in (2, 3):
        raise ValueError(f"R serialization version {version} is not written (2 or 3)")
    converter = ConverterFromPythonToR(format_version=version, r_version_serialized=R_VERSION_WRITTEN)
    header = RVersions(version, R_VERSION_WRITTEN, _MINIMUM_READER[version])
    encoding = RExtraInfo("UTF-8" if version >= 3 else None)  # version 3 names the native encoding
    return unparse_data(RData(header, encoding, _Writer(converter).value(value)), file_format="xdr", file_type="rds")


class _Writer:
    """One serialization: R objects built in the order they are written, so each symbol's first
    occurrence is written in full and later ones as references to it (R Internals, 1.8)."""

    def __init__(self, converter: ConverterFromPythonToR) -> None:
        self._converter = converter

    def value(self, value: Any) -> RObject:
        if value is None:
            return build_r_object(RObjectType.NILVALUE)
        if isinstance(value, RVector):
            attributes: dict[str, Any] = {}
            if value.names is not None:
                attributes["names"] = _characters(value.names)
            return self.atomic(value.values, value.type, {**attributes, **(value.attributes or {})})
        if isinstance(value, RFactor):
            return self.atomic(value.codes, "integer", {"levels": _characters(value.levels),
                                                        "class": _characters(["factor"])})
        if isinstance(value, RMatrix):
            return self.matrix(value)
        if isinstance(value, RArray):
            return self.array(value)
        if isinstance(value, RDataFrame):
            return self.data_frame(value)
        if isinstance(value, RList):
            return self.list(value.items, value.r_class, value.attributes)
        if isinstance(value, Mapping):
            return self.list(value, None, None)
        if isinstance(value, (list, tuple)):
            if all(is_scalar(v) for v in value):
                return self.atomic(value, None, {})
            if all(isinstance(v, (list, tuple)) and all(is_scalar(x) for x in v) for v in value) \
                    and len({len(v) for v in value}) == 1:
                return self.matrix(RMatrix(value))
            return self.list(value, None, None)
        if is_scalar(value):
            return self.atomic([value], None, {})
        raise TypeError(f"no R value for a {type(value).__name__}")

    def atomic(self, values: Sequence[Any], storage: str | None, attributes: Mapping[str, Any]) -> RObject:
        """An atomic vector, then its attributes (the order R writes them in)."""
        plain = [v.item() if hasattr(v, "item") else v for v in values]
        storage = storage or r_type(plain)
        base = self._converter.convert_to_r_object(_vector(plain, storage))
        return self._with(base, attributes)

    def list(self, items: Mapping[str, Any] | Sequence[Any], r_class: str | None,
             extra: Mapping[str, Any] | None) -> RObject:
        """A generic list (VECSXP): its elements, then names, class and further attributes."""
        names = [str(k) for k in items] if isinstance(items, Mapping) else None
        elements = [self.value(v) for v in (items.values() if isinstance(items, Mapping) else items)]
        attributes: dict[str, Any] = {}
        if names is not None:
            attributes["names"] = _characters(names)
        if r_class is not None:
            attributes["class"] = _characters([r_class])
        attributes |= dict(extra or {})
        return self._with(build_r_object(RObjectType.VEC, value=elements), attributes)

    def matrix(self, matrix: RMatrix) -> RObject:
        n_rows = len(matrix.rows)
        n_cols = len(matrix.rows[0]) if n_rows else 0
        if any(len(row) != n_cols for row in matrix.rows):
            raise ValueError("matrix rows differ in length")
        columns = [row[j] for j in range(n_cols) for row in matrix.rows]
        attributes: dict[str, Any] = {"dim": RVector([n_rows, n_cols], type="integer")}
        if matrix.dimnames is not None and any(d is not None for d in matrix.dimnames):
            attributes["dimnames"] = RList([None if d is None else _characters(d) for d in matrix.dimnames])
        return self.atomic(columns, None, attributes)

    def array(self, array: RArray) -> RObject:
        attributes: dict[str, Any] = {"dim": RVector(list(array.dim), type="integer")}
        if array.dimnames is not None:
            parts = [None if d is None else _characters(d) for d in array.dimnames]
            attributes["dimnames"] = RList(parts if array.dimnames_names is None
                                           else dict(zip(array.dimnames_names, parts)))
        if array.r_class is not None:
            attributes["class"] = _characters([array.r_class])
        return self.atomic(array.values, array.type, attributes)

    def data_frame(self, frame: RDataFrame) -> RObject:
        """A data frame as ``data.frame()`` makes one: the columns, then names, class, row.names."""
        columns = [c if isinstance(c, (RVector, RFactor)) else RVector(list(c)) for c in frame.columns.values()]
        lengths = [len(c.values) if isinstance(c, RVector) else len(c.codes) for c in columns]
        n_rows = lengths[0] if columns else len(frame.row_names or ())
        if any(n != n_rows for n in lengths):
            raise ValueError("data frame columns differ in length")
        elements = [self.value(c) for c in columns]
        rows = (_characters([str(r) for r in frame.row_names]) if frame.row_names is not None
                else RVector([None, -n_rows] if n_rows else [], type="integer"))
        attributes = {"names": _characters(list(frame.columns)), "class": _characters(["data.frame"]),
                      "row.names": rows}
        return self._with(build_r_object(RObjectType.VEC, value=elements), attributes)

    def _with(self, base: RObject, attributes: Mapping[str, Any]) -> RObject:
        """``base`` with ``attributes`` (a pairlist: each tag, then its value), an object if classed."""
        if not attributes:
            return base
        pairs = []
        for name, value in attributes.items():
            tag = self._converter.convert_to_r_sym(name)  # before the value: the order R writes them in
            pairs.append((tag, self.value(value)))
        return build_r_object(base.info.type, value=base.value, is_object="class" in attributes,
                              attributes=build_r_list(pairs))


def _characters(values: Sequence[Any]) -> RVector:
    return RVector([None if v is None else str(v) for v in values], type="character")


def _vector(values: list[Any], storage: str) -> np.ndarray:
    """The values as the numpy array rdata writes as an R vector of type ``storage`` (NA: masked for
    logical and integer, R's NA_real_ for double, None for character)."""
    if storage == "character":
        if any(v is not None and not isinstance(v, str) for v in values):
            raise TypeError("a character vector holds a value that is not a string")
        return np.array(values, dtype=object)
    if storage not in _ARRAY_TYPES:
        raise ValueError(f"no R vector type {storage!r}")
    if any(isinstance(v, str) for v in values):
        raise TypeError(f"a {storage} vector holds a string")
    if storage == "double":
        return np.array([R_FLOAT_NA if v is None else float(v) for v in values], dtype=np.float64)
    missing = [v is None or (isinstance(v, float) and math.isnan(v)) for v in values]
    filled = [0 if m else v for v, m in zip(values, missing)]
    if storage == "integer" and any(not m and (not float(v).is_integer() or abs(v) > 2**31 - 1)
                                    for v, m in zip(values, missing)):
        raise ValueError("an integer vector holds a value that is not an R integer")
    data = np.array(filled, dtype=_ARRAY_TYPES[storage])
    return np.ma.array(data, mask=missing) if any(missing) else data
