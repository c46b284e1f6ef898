"""Where a vector's values come from: the site table column behind it, for the release history.

A cut released on a subset of a column, on a column copied into another table, or on a monotone
transform of a column (``calibrationFrameDS``'s ``lp = logit(score)``) cuts the same records as a
cut on the column itself. The release gate therefore keeps its history per site table *column*
(``dsfed_server/disclosure/history.py``), and maps every cut back to it: a subset's rows are
marked by position in the site table (:mod:`dsfed_server.disclosure.differencing`), and a derived
table names, per column, the table column and the monotone transform it applied
(:data:`TRANSFORMS`). A vector with no such provenance (values the analyst supplied, a transform
that is not monotone) has none: its cuts are kept under its own score ordering.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
from scipy import special

from dsfed_server.disclosure.differencing import ROWS, Rows
from dsfed_core.errors import SiteError
from dsfed_server.rowbatches import row_batches

if TYPE_CHECKING:
    from dsfed_server.catalog import Catalog

DERIVED = "dsfed.derived"  # frame attribute: {column: (source column, transform name)}
# vector attribute: (model name, declared range) of the predictions of a model the site's board approved
MODEL_OUTPUT = "dsfed.model_output"
MODEL_COLUMN = "dsfed.model_column"  # vector attribute: the ModelColumn a model's predictions come from
PUBLIC_DESIGN = "dsfed.public_design"  # frame attribute: its covariates are known to the analyst (thresholds)
# monotone increasing transforms a derived column may apply, and their inverse (cut values back to the source)
TRANSFORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda v: v,
    "logit": lambda v: 1.0 / (1.0 + np.exp(-v)),
}
FORWARD: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda v: v,
    "logit": special.logit,
}


@dataclass(frozen=True)
class RootColumn:
    """The site table column a vector's values come from.

    ``table`` and ``column`` name it; ``values`` are all its non-missing values at this site;
    ``whole``: the vector is the whole column (the same records in the same order); ``transform``:
    the monotone transform the vector applied to the column; ``declared``: the range the data
    dictionary declares for the vector's values (the column's, transformed), or None; ``integer``:
    the dictionary declares whole numbers and the vector is not transformed (``age > 50`` and
    ``age >= 51`` are then one cut)."""

    table: str
    column: str
    values: np.ndarray
    whole: bool
    transform: str = "identity"
    declared: tuple[float, float] | None = None
    integer: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.table, self.column

    @property
    def inverse(self) -> Callable[[np.ndarray], np.ndarray]:
        """Maps the vector's values back to the column's (the inverse of the transform)."""
        return TRANSFORMS[self.transform]


@dataclass(frozen=True, eq=False)
class ModelColumn:
    """A model's predictions for every record of a site table (``predictDS``): a column the table
    does not store but the site computes alike for any subset, so its cuts are kept under one
    history per (table, model), by any analyst, as a stored column's are. ``column`` names it by
    the model's digest and output type; ``every`` gives one prediction per table record (NaN
    where an input is missing) when a release needs them (computed then from the model's inputs,
    or kept: an ONNX graph's, unless the site keeps its predictions as a view); ``declared`` is the
    output's range where the model declares one."""

    column: str
    every: Callable[[], np.ndarray]
    declared: tuple[float, float] | None = None

    def __deepcopy__(self, memo: dict) -> "ModelColumn":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy


def ordering_key(p: np.ndarray) -> str:
    """A vector without provenance: identified by its records' order by value (ties by position), so a
    monotone transform of it has the same history."""
    digest = hashlib.sha256(np.argsort(p, kind="stable").astype(np.int64).tobytes())
    return f"ordering:{p.size}:{digest.hexdigest()[:32]}"


def root_column(catalog: "Catalog", vector: pd.Series) -> RootColumn | None:
    """The table column ``vector`` is (a subset of, or a monotone transform of a subset of), or None."""
    rows = vector.attrs.get(ROWS)
    if not isinstance(rows, Rows) or rows.index.size != len(vector) or vector.name is None:
        return None
    model = vector.attrs.get(MODEL_COLUMN)
    if isinstance(model, ModelColumn):
        return _root(rows, model.column, model.every(), vector.to_numpy(dtype=float, na_value=np.nan), "identity",
                     model.declared, False)
    derived = vector.attrs.get(DERIVED, {}).get(vector.name)
    source, transform = derived if derived else (vector.name, "identity")
    try:
        variable = catalog.variable(rows.lineage, source)
    except SiteError:
        return None  # a table derived without provenance: its own ordering is the only history
    if variable is None or variable.identifier or variable.value_type not in ("integer", "decimal"):
        return None
    integer = transform == "identity" and variable.value_type == "integer"
    return _root(rows, source, catalog.column(rows.lineage, source).to_numpy(dtype=float, na_value=np.nan),
                 TRANSFORMS[transform](vector.to_numpy(dtype=float, na_value=np.nan)), transform,
                 _declared(catalog, rows.lineage, source, transform), integer)


def _root(rows: Rows, source: str, column: np.ndarray, values: np.ndarray, transform: str,
          declared: tuple[float, float] | None, integer: bool) -> RootColumn | None:
    """The root column ``source`` of ``rows.lineage`` with every record's ``column`` value, if the
    vector's ``values`` (in the column's units) are the column's at ``rows``; None otherwise."""
    index = rows.index
    if index.size and (index.max() >= column.size or not _agree(column, index, values)):
        return None
    whole = transform == "identity" and index.size == column.size and _all_positions(index)
    missing = np.isnan(column)
    return RootColumn(rows.lineage, source, column[~missing] if missing.any() else column, whole, transform,
                      declared, integer)


def _all_positions(index: np.ndarray) -> bool:
    """Whether ``index`` is 0, 1, ..., n - 1 (compared a batch at a time: no array of its size)."""
    return all(np.array_equal(index[rows], np.arange(rows.start, rows.stop)) for rows in row_batches(index.size))


def _agree(column: np.ndarray, index: np.ndarray, values: np.ndarray) -> bool:
    """Whether ``values`` are the column's at ``index`` (to 1e-12, relative), a batch at a time."""
    return all(np.allclose(column[index[rows]], values[rows], rtol=1e-12, atol=0, equal_nan=True)
               for rows in row_batches(index.size))


def _declared(catalog: "Catalog", table: str, column: str, transform: str) -> tuple[float, float] | None:
    """The dictionary's declared range of ``table.column`` through ``transform`` (None when the
    dictionary declares none, or the transform maps it out of the finite numbers)."""
    variable = catalog.variable(table, column)
    bounds = variable.declared_range if variable is not None else None
    if bounds is None:
        return None
    with np.errstate(divide="ignore"):
        lo, hi = (float(v) for v in FORWARD[transform](np.asarray(bounds, dtype=float)))
    return (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else None

