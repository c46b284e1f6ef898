"""Where a vector's values come from: the site table column behind it, for the release history.

A cut released on a subset of a column, on a column copied into another table, or on a monotone
transform of a column (``calibrationFrameDS``'s ``lp = logit(score)``, a derived ``D$score*1`` or
``log(D$age)``, a recalibrated score) cuts the same records as a cut on the column itself. The
release gate therefore keeps its history per site table *column*
(``dsfed_server/disclosure/history.py``), and maps every cut back to it: a subset's rows are marked
by position in the site table (:mod:`dsfed_server.disclosure.differencing`); a derived table names,
per column, the table column and the monotone transform it applied (:data:`TRANSFORMS`); a derived or
recalibrated vector carries its :class:`~dsfed_server.disclosure.expressions.Meaning` (:data:`MEANING`),
its expression over its root columns, and a monotone one maps its cuts back through a
:class:`Transform`. A vector with no such provenance (values the analyst supplied, a column of several
roots, a transform that turns) has none: its cuts are kept under its own ordering.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd
from scipy import special

from dsfed_server.disclosure.differencing import ROWS, Rows
from dsfed_server.disclosure.expressions import X, Fn, Meaning, Root
from dsfed_core.errors import SiteError
from dsfed_server.rowbatches import row_batches

if TYPE_CHECKING:
    from dsfed_server.catalog import Catalog

DERIVED = "dsfed.derived"  # frame attribute: {column: (source column, transform name)}
NO_TABLE = "(no table)"  # the table part of a history key of values without a root column (their own ordering)
MEANING = "dsfed.meaning"  # vector attribute: a derived or recalibrated vector's Meaning (its expression over roots)
MEANINGS = "dsfed.meanings"  # frame attribute: {column: Meaning} of the derived columns a table was combined from
# vector attribute: (model name, declared range) of the predictions of a model the site's board approved
MODEL_OUTPUT = "dsfed.model_output"
MODEL_COLUMN = "dsfed.model_column"  # vector attribute: the ModelColumn a model's predictions come from
PUBLIC_DESIGN = "dsfed.public_design"  # frame attribute: its covariates are known to the analyst (thresholds)
STRATA_LEVELS = 10  # a root of at most this many values (declared, or here) groups a column of several roots
STRATA_MOST = 64  # the most groups the few-valued roots of one column may make (beyond, its cells are refused alone)


@dataclass(frozen=True, eq=False)
class Transform:
    """A monotone map from a root column's values to a vector's: ``forward`` (NaN where the vector is
    missing), its direction, and its inverse, exact where known (``inverse_of``) or found by bisection
    over the root's declared range ``domain``. The release gate maps the vector's cuts back to cuts on
    the root with it (:meth:`dsfed_server.disclosure.gate.Intervals.root_cuts`)."""

    name: str
    forward: Callable[[np.ndarray], np.ndarray]
    increasing: bool = True
    inverse_of: Callable[[np.ndarray], np.ndarray] | None = None
    domain: tuple[float, float] | None = None

    @property
    def identity(self) -> bool:
        return self.name == "identity"

    def inverse(self, values: np.ndarray, inclusive: np.ndarray | None = None) -> np.ndarray:
        """Root values where the map crosses ``values`` (-inf/+inf beyond the map's range on the
        domain): where a cut at each value (``inclusive``: at or below it, else below it) parts the
        root's values, also where the map is flat (a step map)."""
        values = np.asarray(values, dtype=float)
        if self.inverse_of is not None:
            return self.inverse_of(values)
        at_or_below = np.zeros(values.shape, dtype=bool) if inclusive is None else np.asarray(inclusive, dtype=bool)
        if self.domain is None:
            raise ValueError(f"transform {self.name} has neither an inverse nor a domain")
        grid = np.linspace(*self.domain, 4097)
        image = self.forward(grid)
        defined = np.flatnonzero(np.isfinite(image))
        if not defined.size:  # defined nowhere on the domain: every cut lies beyond it
            return np.where(values > 0, np.inf, -np.inf)
        lo, hi = grid[defined[0]], grid[defined[-1]]
        f_lo, f_hi = image[defined[0]], image[defined[-1]]
        a, b = np.full(values.shape, lo), np.full(values.shape, hi)
        for _ in range(80):  # bisection to adjacent floats, every value at once
            middle = (a + b) / 2
            at = self.forward(middle)
            if self.increasing:  # the root's values that fall in the cut's lower cell lie below
                up = np.where(at_or_below, at <= values, at < values)
            else:  # ... above: move up while the map is still above the cut
                up = np.where(at_or_below, at > values, at >= values)
            a, b = np.where(up, middle, a), np.where(up, b, middle)
        first, last = (f_lo, f_hi) if self.increasing else (f_hi, f_lo)
        out = np.where(values < first, -np.inf if self.increasing else np.inf, b)
        return np.where(values > last, np.inf if self.increasing else -np.inf, out)


IDENTITY = Transform("identity", lambda v: v, True, lambda v: v)
# the monotone increasing transforms a derived table (DERIVED) may name, with their exact inverses
TRANSFORMS: dict[str, Transform] = {
    "identity": IDENTITY,
    "logit": Transform("logit", special.logit, True, special.expit),
}
LOGIT_FN = Fn("log", (Fn("/", (X, Fn("-", (Fn("const", value=1.0), X)))),), label="logit")


@dataclass(frozen=True)
class RootColumn:
    """The site table column a vector's values come from.

    ``table`` and ``column`` name it; ``values`` are all its non-missing values at this site;
    ``whole``: the vector is the whole column (the same records in the same order); ``table_rows``: the vector
    holds every record the site keeps of the table (the table's column, not a subset's); ``transform``:
    the monotone transform the vector applied to the column; ``declared``: the range the data
    dictionary declares for the vector's values (the column's, transformed), or None; ``integer``:
    the dictionary declares whole numbers and the vector is not transformed (``age > 50`` and
    ``age >= 51`` are then one cut)."""

    table: str
    column: str
    values: np.ndarray
    whole: bool
    transform: Transform = IDENTITY
    declared: tuple[float, float] | None = None
    integer: bool = False
    table_rows: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.table, self.column


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
    meaning = own_meaning(vector)
    if meaning is not None:
        return _transformed(catalog, rows, meaning)
    model = vector.attrs.get(MODEL_COLUMN)
    if isinstance(model, ModelColumn):
        return _root(rows, model.column, model.every(), vector.to_numpy(dtype=float, na_value=np.nan), IDENTITY,
                     model.declared, False, catalog.kept(rows.lineage))
    found = _table_column(catalog, rows, vector)
    if found is None:
        return None
    source, transform, integer = found
    return _root(rows, source, catalog.column(rows.lineage, source).to_numpy(dtype=float, na_value=np.nan),
                 transform.inverse(vector.to_numpy(dtype=float, na_value=np.nan)), transform,
                 _declared(catalog, rows.lineage, source, transform), integer and transform.identity,
                 catalog.kept(rows.lineage))


def _table_column(catalog: "Catalog", rows: Rows, vector: pd.Series) -> tuple[str, Transform, bool] | None:
    """The numeric (or boolean: 0 or 1) table column a vector names (through a derived table's DERIVED),
    the transform it applied, and whether the dictionary declares whole numbers; None for any other."""
    derived = vector.attrs.get(DERIVED, {}).get(vector.name)
    source, transform = derived if derived else (vector.name, "identity")
    try:
        variable = catalog.variable(rows.lineage, source)
    except SiteError:
        return None  # a table derived without provenance: its own ordering is the only history
    if variable is None or variable.identifier or variable.value_type not in ("integer", "decimal", "boolean"):
        return None
    return source, TRANSFORMS[transform], variable.value_type in ("integer", "boolean")  # a boolean is 0 or 1


def _transformed(catalog: "Catalog", rows: Rows, meaning: Meaning) -> RootColumn | None:
    """The root a derived or recalibrated vector is a monotone function of, with the map back to it;
    None when it has several roots or turns (its cuts are then kept under its own ordering)."""
    root = meaning.root
    if root is None or root.table == NO_TABLE or meaning.monotone == 0 or meaning.function is None:
        return None
    every = root.every() if root.every is not None else catalog.column(root.table, root.column).to_numpy(
        dtype=float, na_value=np.nan)
    if rows.index.size and rows.index.max() >= every.size:
        return None
    fn = meaning.function
    transform = Transform(fn.label or "derived", fn, meaning.monotone > 0, domain=root.declared)
    declared = None
    if root.declared is not None:
        ends = fn(np.asarray(root.declared, dtype=float))
        declared = (float(ends.min()), float(ends.max())) if np.all(np.isfinite(ends)) else None
    return RootColumn(root.table, root.column, _counted(every, catalog.kept(root.table)), False, transform,
                      declared, False)


def own_meaning(vector: pd.Series) -> Meaning | None:
    """The :class:`Meaning` a derived vector carries (:data:`MEANING`), or that its table keeps for it
    (:data:`MEANINGS`: a derived column combined into a table by ``dataFrameDS`` or ``cbindDS``)."""
    found = vector.attrs.get(MEANING)
    if isinstance(found, Meaning):
        return found
    kept = vector.attrs.get(MEANINGS, {}).get(vector.name) if vector.name is not None else None
    return kept if isinstance(kept, Meaning) else None


def strata(catalog: "Catalog", vector: pd.Series) -> tuple[np.ndarray, ...]:
    """The groups of records (boolean over the root table) that ``vector``'s few-valued parts make, where it is a
    derived column of several roots, one of them at least not few-valued: each combination of the values of its
    few-valued roots (a missing value is one of them) and of the comparisons it was computed with (TRUE or not,
    :attr:`Meaning.indicators`). A root is few-valued where the data dictionary declares it boolean or whole-numbered
    over at most :data:`STRATA_LEVELS` values (``sex``, a grade), or where it holds at most that many values here.

    A cut on such a column is a cut on its other roots within each group: ``D$score + D$sex`` below 0.8 is the men
    with a score below 0.8 and the women below -0.2 (``D$score + ifelse(D$age > 50, 1, 0)`` alike, by age). A cell of
    it may therefore be a union of cells that releases over the groups (the men's thresholds, the women's) made
    apart, pooled, while no one release's cells make it up; its count alone at each large site, taken from theirs,
    gives the small site's share of them (Denning & Schlörer 1983, differencing). So the release gate treats a cell
    of such a column released by a site alone as its parts in each group, released alone: audited and kept as those
    (refused alone beyond :data:`STRATA_MOST` groups). Empty where ``vector`` is no such column."""
    found, rows = own_meaning(vector), vector.attrs.get(ROWS)
    return () if found is None or not isinstance(rows, Rows) else meaning_strata(catalog, found, rows)


def meaning_strata(catalog: "Catalog", found: Meaning, rows: Rows) -> tuple[np.ndarray, ...]:
    """:func:`strata` of a column whose meaning is ``found``, over the records ``rows`` (as it is made, before it is
    kept: its row sets are kept with their parts, :meth:`~dsfed_server.disclosure.checks.Guard.derived_cuts`)."""
    if len(found.roots) < 2:
        return ()
    levels = [_levels(catalog, root, rows) for root in sorted(found.roots, key=lambda r: (r.table, r.column))]
    few = [level for level in levels if level is not None]
    if len(few) == len(found.roots):  # its values are few: each one's records are audited as it is made
        return ()
    group = np.zeros(rows.n_root, dtype=np.int64)
    for level in few:
        group = group * (int(level.max(initial=0)) + 1) + level
    for lineage, n_root, sets in (comparisons() for comparisons in found.indicators):
        for packed in sets if (lineage, n_root) == (rows.lineage, rows.n_root) else ():
            holds = np.unpackbits(np.frombuffer(packed, dtype=np.uint8), count=rows.n_root)
            _, group = np.unique(group * 2 + holds, return_inverse=True)  # numbered again: no overflow
    labels = np.unique(group)
    return tuple(group == label for label in labels) if labels.size > 1 else ()


def _levels(catalog: "Catalog", root: Root, rows: Rows) -> np.ndarray | None:
    """Each record's value of a few-valued root column of ``rows``' table, numbered (a missing value one of them):
    a column the data dictionary declares boolean, or whole-numbered over at most :data:`STRATA_LEVELS` values, or
    that holds at most that many values here. None for any other root (a model's predictions, another table's)."""
    if root.every is not None or root.table != rows.lineage:
        return None
    try:
        variable = catalog.variable(root.table, root.column)
        values = catalog.column(root.table, root.column).to_numpy(dtype=float, na_value=np.nan)
    except SiteError:
        return None  # a table derived without a dictionary
    if variable is None or values.size != rows.n_root:
        return None
    declared = variable.value_type == "boolean" or (
        root.integer and root.declared is not None and root.declared[1] - root.declared[0] < STRATA_LEVELS)
    distinct, level = np.unique(np.where(np.isnan(values), np.inf, values), return_inverse=True)
    return level.ravel() if declared or distinct.size <= STRATA_LEVELS else None


def meaning(catalog: "Catalog", vector: pd.Series) -> Meaning:
    """What ``vector`` is as a function of root columns: a derived or recalibrated vector's own
    :data:`MEANING`; a table column (or a model's predictions, or a subset of one) is its own root; a
    derived table's ``logit`` column the logit of its root. A vector without provenance stands for a root
    of its own, with no declared range (identified by its ordering)."""
    found = own_meaning(vector)
    if found is not None:
        return found
    rows = vector.attrs.get(ROWS)
    column = root_column(catalog, vector) if isinstance(rows, Rows) else None
    if column is None:
        values = vector.to_numpy(dtype=float, na_value=np.nan) if pd.api.types.is_numeric_dtype(vector.dtype) \
            else np.zeros(len(vector))
        return Meaning.of_root(Root(NO_TABLE, ordering_key(values)))
    model = vector.attrs.get(MODEL_COLUMN)
    every = model.every if isinstance(model, ModelColumn) else None
    if column.transform.identity:
        return Meaning.of_root(Root(column.table, column.column, column.declared, column.integer, every))
    source = _table_column(catalog, rows, vector)  # a derived table's transformed column
    integer = source is not None and source[2]
    root = Root(column.table, column.column, _declared(catalog, column.table, column.column, IDENTITY), integer)
    return Meaning(frozenset([root]), LOGIT_FN if column.transform.name == "logit" else None,
                   1 if column.transform.name == "logit" else 0)


def _root(rows: Rows, source: str, column: np.ndarray, values: np.ndarray, transform: Transform,
          declared: tuple[float, float] | None, integer: bool, kept: np.ndarray | None) -> RootColumn | None:
    """The root column ``source`` of ``rows.lineage`` with every record's ``column`` value, if the
    vector's ``values`` (in the column's units) are the column's at ``rows``; None otherwise."""
    index = rows.index
    same = rows.whole and values.shape == column.shape and np.array_equal(column, values, equal_nan=True)
    if index.size and not same and (index.max() >= column.size or not _agree(column, index, values)):
        return None
    whole = transform.identity and index.size == column.size and (rows.whole or _all_positions(index))
    return RootColumn(rows.lineage, source, _counted(column, kept), whole, transform, declared, integer,
                      _every_kept(rows, kept))


def _every_kept(rows: Rows, kept: np.ndarray | None) -> bool:
    """Whether ``rows`` are every record the site keeps of their table (``kept``: the others are left out)."""
    if kept is None or kept.size != rows.n_root:
        return rows.whole or (rows.index.size == rows.n_root and _all_positions(rows.index))
    return rows.index.size == int(np.count_nonzero(kept)) and bool(kept[rows.index].all())


def _counted(every: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
    """The values of a root column the release gate counts: every record's, but those missing and those
    the site leaves out of the table (``kept``: the others; :mod:`~dsfed_server.disclosure.missingness`),
    whose presence between two cuts no decision may depend on."""
    counted = ~np.isnan(every)
    if kept is not None and kept.size == every.size:
        counted &= kept
    return every if counted.all() else every[counted]


def _all_positions(index: np.ndarray) -> bool:
    """Whether ``index`` is 0, 1, ..., n - 1 (compared a batch at a time: no array of its size)."""
    return all(np.array_equal(index[rows], np.arange(rows.start, rows.stop)) for rows in row_batches(index.size))


def _agree(column: np.ndarray, index: np.ndarray, values: np.ndarray) -> bool:
    """Whether ``values`` are the column's at ``index`` (to 1e-12, relative), a batch at a time."""
    return all(np.allclose(column[index[rows]], values[rows], rtol=1e-12, atol=0, equal_nan=True)
               for rows in row_batches(index.size))


def _declared(catalog: "Catalog", table: str, column: str, transform: Transform) -> tuple[float, float] | None:
    """The dictionary's declared range of ``table.column`` through ``transform`` (None when the
    dictionary declares none, or the transform maps it out of the finite numbers)."""
    variable = catalog.variable(table, column)
    bounds = variable.declared_range if variable is not None else None
    if bounds is None:
        return None
    with np.errstate(divide="ignore"):
        lo, hi = (float(v) for v in transform.forward(np.asarray(bounds, dtype=float)))
    return (lo, hi) if np.isfinite(lo) and np.isfinite(hi) else None

