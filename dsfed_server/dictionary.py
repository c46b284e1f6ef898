"""A table's data dictionary (Opal's ``<table>.dictionary.json``): its variables, their types,
categories, declared ranges and identifier marks, read and written; and the error a data file or
dictionary that does not agree with itself raises.

It sits below both the catalog (:mod:`dsfed_server.catalog`) and the engines that read the tables
(:mod:`dsfed_server.engines`); the catalog's module docstring describes the format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

VALUE_TYPES = ("integer", "decimal", "text", "boolean")


class CatalogError(Exception):
    """A data file or dictionary that does not agree with itself; stops the site at start."""


class EngineOutOfMemory(Exception):
    """The engine ran out of the memory it may use while reading columns (its message says which limit)."""


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
        """The declared ``range``; for a numeric variable with numeric categories, theirs; for a
        boolean, [0, 1] (its values as numbers: public by its type)."""
        if self.value_type == "boolean":
            return (0.0, 1.0)
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
    source: str  # where the engine reads it: a file path, or database:project.table (for messages)
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
