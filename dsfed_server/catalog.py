"""Tables a site serves: Opal-like projects under the site's data directory.

Layout: ``<data_dir>/<project>/<table>.csv`` (or ``.parquet``) with a data
dictionary ``<table>.dictionary.json`` beside it::

    {"project": "GBSG2", "table": "validation", "entityType": "Participant",
     "variables": [{"name": "age", "valueType": "integer", "unit": "years",
                    "label": "...", "categories": [{"name": "...", "label": "..."}],
                    "range": [18, 100]}]}

Every table is checked against its dictionary when the site starts: the same
variables, whole numbers for ``integer``, declared categories only, values within
the declared ``range``. Integers load as pandas ``Int64``, decimals as ``float64``,
text with categories as an ordered-by-dictionary ``category``, other text as ``str``, booleans
as ``boolean`` from the spellings in :data:`BOOLEAN_SPELLINGS`. A value that does not fit its
variable stops the site with ``file:column:row: value ...`` (row 1 is the first record).

``identifier`` (dsfed's addition, optional, ``true`` or ``false``) marks a column that identifies
records (a patient or sample id): no function may read it. The catalog serves tables without
their identifier columns (:meth:`Catalog.frame`, the only way a function reaches a table), lists
none of them to analysts, and a call naming one is refused (:mod:`dsfed_server.disclosure.identifiers`).

``range`` (dsfed's addition to Opal's dictionary, optional, numeric variables only) is what
the site declares its values can be, independently of the records it holds: the bounds
within which noisy releases clip a column (so the noise is sized for the declared range,
whatever the column holds) and over which the site bounds a model's linear predictor
(:func:`dsfed_server.functions.glm.check_coefficients`). A numeric variable with numeric
categories (a 0/1 outcome) ranges over them.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsfed_core.errors import NotFound

VALUE_TYPES = ("integer", "decimal", "text", "boolean")
_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9._]*$")


class CatalogError(Exception):
    """A data file or dictionary that does not agree with itself; stops the site at start."""


@dataclass(frozen=True)
class Variable:
    name: str
    value_type: str
    unit: str
    label: str
    categories: tuple[str, ...]
    range: tuple[float, float] | None = None
    identifier: bool = False  # identifies records: never served to a function (module docstring)

    @property
    def declared_range(self) -> tuple[float, float] | None:
        """The declared ``range``; for a numeric variable with numeric categories, theirs."""
        if self.range is not None or self.value_type not in ("integer", "decimal") or not self.categories:
            return self.range
        try:
            values = [float(c) for c in self.categories]
        except ValueError:
            return None
        return min(values), max(values)

    def describe(self) -> dict:
        out = {
            "name": self.name,
            "valueType": self.value_type,
            "unit": self.unit,
            "label": self.label,
            "categories": list(self.categories),
        }
        if self.range is not None:
            out["range"] = list(self.range)
        return out


def _range(item: dict, path: Path) -> tuple[float, float] | None:
    declared = item.get("range")
    if declared is None:
        return None
    where = f"{path}: variable {item['name']!r}"
    if item["valueType"] not in ("integer", "decimal"):
        raise CatalogError(f"{where}: only numeric variables declare a range")
    if (not isinstance(declared, list) or len(declared) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in declared)
            or not float(declared[0]) < float(declared[1]) or not all(np.isfinite(declared))):
        raise CatalogError(f"{where}: range must be [lower, upper], two finite numbers with lower < upper")
    return float(declared[0]), float(declared[1])


def _identifier(item: dict, path: Path) -> bool:
    declared = item.get("identifier", False)
    if not isinstance(declared, bool):
        raise CatalogError(f"{path}: variable {item['name']!r}: identifier must be true or false, got {declared!r}")
    return declared


@dataclass(frozen=True)
class TableInfo:
    project: str
    table: str
    path: Path
    variables: tuple[Variable, ...]

    @property
    def ref(self) -> str:
        return f"{self.project}.{self.table}"

    @property
    def identifiers(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variables if v.identifier)

    def describe(self) -> dict:
        """The table as analysts see it listed: its variables but its identifier columns."""
        return {"name": self.ref, "variables": [v.describe() for v in self.variables if not v.identifier]}


def read_dictionary(path: Path) -> tuple[Variable, ...]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        variables = []
        for item in doc["variables"]:
            vt = item["valueType"]
            if vt not in VALUE_TYPES:
                raise CatalogError(f"{path}: variable {item['name']!r} has valueType {vt!r}, not one of {VALUE_TYPES}")
            variables.append(
                Variable(
                    name=str(item["name"]),
                    value_type=vt,
                    unit=str(item.get("unit", "")),
                    label=str(item.get("label", "")),
                    categories=tuple(str(c["name"]) for c in item.get("categories", [])),
                    range=_range(item, path),
                    identifier=_identifier(item, path),
                )
            )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CatalogError(f"{path}: not a valid data dictionary ({exc})") from None
    return tuple(variables)


def write_dictionary(path: Path, project: str, table: str, variables: list[Variable]) -> None:
    doc = {
        "project": project,
        "table": table,
        "entityType": "Participant",
        "variables": [
            {
                "name": v.name,
                "valueType": v.value_type,
                "unit": v.unit,
                "label": v.label,
                "categories": [{"name": c, "label": c} for c in v.categories],
                **({"range": list(v.range)} if v.range is not None else {}),
                **({"identifier": True} if v.identifier else {}),
            }
            for v in variables
        ],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


BOOLEAN_SPELLINGS: dict[str, bool] = {
    "True": True, "False": False,      # pandas' to_csv
    "TRUE": True, "FALSE": False,      # R's write.csv
    "true": True, "false": False,
    "1": True, "0": False,
    "yes": True, "no": False,
}
"""The spellings a boolean column may hold in a data file (docs/site-admin.md); any other value
stops the site, so no value silently becomes missing."""

_NA_HINT = ("R's write.csv writes a missing value as NA: write the file with write.csv(..., na = \"\") "
            "so missing values are empty fields")


class _Column:
    """Where a column's values come from, for messages ``file:column:row: ...`` (row 1 is the first
    record, the line after the header)."""

    def __init__(self, info: TableInfo, variable: Variable, col: pd.Series) -> None:
        self.where = f"{info.path}:{variable.name}"
        self.col = col

    def refuse(self, bad: pd.Series, problem: str) -> CatalogError:
        """An error naming the first offending row and value; the NA hint when the value is R's NA."""
        position = int(np.flatnonzero(bad.to_numpy(dtype=bool))[0])
        value = self.col.iloc[position]
        hint = f"; {_NA_HINT}" if value == "NA" else ""
        others = int(bad.sum()) - 1
        more = f" ({others} more row{'s' if others != 1 else ''} like it)" if others else ""
        return CatalogError(f"{self.where}:{position + 1}: value {value!r} {problem}{more}{hint}")


def _check_columns(frame: pd.DataFrame, info: TableInfo) -> None:
    names = [v.name for v in info.variables]
    if list(frame.columns) == names:
        return
    if sorted(frame.columns) == sorted(names):
        raise CatalogError(
            f"{info.path}: the columns are those of the dictionary in a different order (file: {list(frame.columns)}; "
            f"dictionary: {names}); reorder the file's columns or the dictionary's variables"
        )
    extra = sorted(set(frame.columns) - set(names))
    missing = sorted(set(names) - set(frame.columns))
    raise CatalogError(
        f"{info.path}: columns do not match the dictionary (missing {missing}, undeclared {extra})"
    )


def _numeric(column: _Column, v: Variable) -> pd.Series:
    col = column.col
    values = pd.to_numeric(col, errors="coerce")
    bad = values.isna() & col.notna() & (col.astype("string").str.strip() != "")
    if bad.any():
        raise column.refuse(bad, "is not a number")
    bounds = v.declared_range
    if bounds is not None:
        outside = ((values < bounds[0]) | (values > bounds[1])).fillna(False)
        if outside.any():
            raise column.refuse(outside, f"is outside the declared range [{bounds[0]:g}, {bounds[1]:g}]")
    if v.value_type == "decimal":
        return values.astype("float64")
    fraction = (values.notna() & (np.floor(values) != values)).fillna(False)
    if fraction.any():
        raise column.refuse(fraction, "is not a whole number (the variable is declared integer)")
    return values.astype("Int64")


def _boolean(column: _Column) -> pd.Series:
    col = column.col
    if pd.api.types.is_bool_dtype(col):  # parquet
        return col.astype("boolean")
    text = col.astype("string")
    mapped = text.map(BOOLEAN_SPELLINGS, na_action="ignore")
    bad = (mapped.isna() & text.notna()).fillna(False)
    if bad.any():
        raise column.refuse(bad, f"is not a boolean (accepted: {'/'.join(BOOLEAN_SPELLINGS)}; missing: an empty field)")
    return mapped.astype("boolean")


def _text(column: _Column, v: Variable) -> pd.Series | pd.Categorical:
    text = column.col.astype("string")
    if not v.categories:
        return text
    bad = (~text.isin(v.categories) & text.notna()).fillna(False)
    if bad.any():
        raise column.refuse(bad, f"is not among the categories {list(v.categories)}")
    return pd.Categorical(text, categories=list(v.categories))


def _typed(frame: pd.DataFrame, info: TableInfo) -> pd.DataFrame:
    _check_columns(frame, info)
    out = {}
    for v in info.variables:
        column = _Column(info, v, frame[v.name])
        if v.value_type in ("integer", "decimal"):
            out[v.name] = _numeric(column, v)
        elif v.value_type == "boolean":
            out[v.name] = _boolean(column)
        else:
            out[v.name] = _text(column, v)
    return pd.DataFrame(out)


@dataclass(frozen=True)
class ColumnSummary:
    """What ``dsfed-server check`` prints per column: records, missing, type and levels."""

    name: str
    value_type: str
    n: int
    missing: int
    levels: dict[str, int]
    identifier: bool = False

    def line(self) -> str:
        if self.identifier:
            return f"{self.name:<16} {self.value_type:<8} identifier: no function may read it"
        shown = ", ".join(f"{k} {c}" for k, c in self.levels.items())
        return f"{self.name:<16} {self.value_type:<8} n {self.n:<7} missing {self.missing:<7} {shown}".rstrip()


def summarize(frame: pd.DataFrame, info: TableInfo) -> list[ColumnSummary]:
    """One :class:`ColumnSummary` per variable of a served table (levels: categories and booleans);
    an identifier column, which the table is served without, is named as one."""
    out = []
    for v in info.variables:
        if v.identifier:
            out.append(ColumnSummary(v.name, v.value_type, len(frame), 0, {}, identifier=True))
            continue
        col = frame[v.name]
        levels: dict[str, int] = {}
        if v.value_type == "boolean":
            levels = {"True": int((col == True).sum()), "False": int((col == False).sum())}  # noqa: E712
        elif isinstance(col.dtype, pd.CategoricalDtype):
            levels = {str(k): int(c) for k, c in col.value_counts(sort=False).items()}
        out.append(ColumnSummary(v.name, v.value_type, len(col), int(col.isna().sum()), levels))
    return out


class Catalog:
    """The projects and tables under one site's data directory, loaded once and shared read-only."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise CatalogError(f"{self.data_dir}: data directory does not exist")
        self._tables: dict[str, TableInfo] = {}
        self._frames: dict[str, pd.DataFrame] = {}
        self._lock = threading.Lock()
        for dictionary in sorted(self.data_dir.glob("*/*.dictionary.json")):
            project = dictionary.parent.name
            table = dictionary.name[: -len(".dictionary.json")]
            data = next(
                (p for p in (dictionary.with_name(table + ".parquet"), dictionary.with_name(table + ".csv")) if p.exists()),
                None,
            )
            if data is None:
                raise CatalogError(f"{dictionary}: no {table}.csv or {table}.parquet beside the dictionary")
            for name in (project, table):
                if not _IDENT.match(name):
                    raise CatalogError(f"{dictionary}: {name!r} is not a valid project or table name")
            info = TableInfo(project, table, data, read_dictionary(dictionary))
            self._tables[info.ref] = info
        if not self._tables:
            raise CatalogError(f"{self.data_dir}: no tables found (expected <project>/<table>.csv with a dictionary)")

    def validate_all(self) -> None:
        """Load every table once; raises :class:`CatalogError` on the first mismatch."""
        for ref in self._tables:
            self.frame(ref)

    def tables(self) -> list[TableInfo]:
        return list(self._tables.values())

    def variable(self, ref: str, name: str) -> Variable | None:
        """The dictionary entry of ``name`` in table ``ref`` (None if the table has no such variable)."""
        return next((v for v in self.info(ref).variables if v.name == name), None)

    def info(self, ref: str) -> TableInfo:
        try:
            return self._tables[ref]
        except KeyError:
            raise NotFound(
                f"no table {ref!r} here", hint=f"tables at this site: {', '.join(sorted(self._tables))}"
            ) from None

    def identifiers(self) -> dict[str, list[str]]:
        """Each identifier column's name, with the tables (project.table) that declare it."""
        out: dict[str, list[str]] = {}
        for info in self._tables.values():
            for name in info.identifiers:
                out.setdefault(name, []).append(info.ref)
        return out

    def frame(self, ref: str) -> pd.DataFrame:
        """The table as functions may read it: typed, checked against its dictionary, without its
        identifier columns (cached; callers must not modify it)."""
        info = self.info(ref)
        with self._lock:
            if ref not in self._frames:
                if info.path.suffix == ".parquet":
                    raw = pd.read_parquet(info.path)
                else:
                    raw = pd.read_csv(info.path, dtype=str, keep_default_na=False, na_values=[""])
                self._frames[ref] = _typed(raw, info).drop(columns=list(info.identifiers))
            return self._frames[ref]
