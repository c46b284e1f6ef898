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
text with categories as an ordered-by-dictionary ``category``, other text as ``str``.

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


@dataclass(frozen=True)
class TableInfo:
    project: str
    table: str
    path: Path
    variables: tuple[Variable, ...]

    @property
    def ref(self) -> str:
        return f"{self.project}.{self.table}"

    def describe(self) -> dict:
        return {"name": self.ref, "variables": [v.describe() for v in self.variables]}


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
            }
            for v in variables
        ],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _typed(frame: pd.DataFrame, info: TableInfo) -> pd.DataFrame:
    names = [v.name for v in info.variables]
    if list(frame.columns) != names:
        extra = sorted(set(frame.columns) - set(names))
        missing = sorted(set(names) - set(frame.columns))
        raise CatalogError(
            f"{info.path}: columns do not match the dictionary (missing {missing}, undeclared {extra})"
        )
    out = {}
    for v in info.variables:
        col = frame[v.name]
        where = f"{info.path}: variable {v.name!r}"
        if v.value_type in ("integer", "decimal"):
            values = pd.to_numeric(col, errors="coerce")
            bad = values.isna() & col.notna() & (col.astype("string").str.strip() != "")
            if bad.any():
                raise CatalogError(f"{where}: non-numeric value {col[bad].iloc[0]!r}")
            bounds = v.declared_range
            if bounds is not None and ((values < bounds[0]) | (values > bounds[1])).any():
                raise CatalogError(f"{where}: holds values outside its declared range [{bounds[0]:g}, {bounds[1]:g}]")
            if v.value_type == "integer":
                whole = values.dropna()
                if not np.all(np.equal(np.floor(whole), whole)):
                    raise CatalogError(f"{where}: declared integer but holds fractions")
                out[v.name] = values.astype("Int64")
            else:
                out[v.name] = values.astype("float64")
        elif v.value_type == "boolean":
            mapped = col.map({True: True, False: False, "TRUE": True, "FALSE": False, "true": True, "false": False})
            out[v.name] = mapped.astype("boolean")
        else:
            text = col.astype("string")
            if v.categories:
                unknown = set(text.dropna()) - set(v.categories)
                if unknown:
                    raise CatalogError(f"{where}: values {sorted(unknown)[:5]} are not among its categories")
                out[v.name] = pd.Categorical(text, categories=list(v.categories))
            else:
                out[v.name] = text
    return pd.DataFrame(out)


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

    def frame(self, ref: str) -> pd.DataFrame:
        """The full table as a typed data frame (cached; callers must not modify it)."""
        info = self.info(ref)
        with self._lock:
            if ref not in self._frames:
                if info.path.suffix == ".parquet":
                    raw = pd.read_parquet(info.path)
                else:
                    raw = pd.read_csv(info.path, dtype=str, keep_default_na=False, na_values=[""])
                self._frames[ref] = _typed(raw, info)
            return self._frames[ref]
