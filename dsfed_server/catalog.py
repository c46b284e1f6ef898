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

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dsfed_core.errors import BackendUnavailable, InsufficientMemory, NotFound
from dsfed_server.allocation import room
from dsfed_server.dictionary import (BOOLEAN_SPELLINGS, CatalogError, EngineOutOfMemory, TableInfo, Variable,
                                     read_dictionary)
from dsfed_server.disclosure.missingness import rare_patterns
from dsfed_server.engines import Engine
from dsfed_server.engines.duckdb_engine import DuckDBEngine
from dsfed_server.record_prefixes import RecordKeys, prefix_digests

_IDENT = re.compile(r"^[A-Za-z][A-Za-z0-9._]*$")


_NA_HINT = ("R's write.csv writes a missing value as NA: write the file with write.csv(..., na = \"\") "
            "so missing values are empty fields")


class _Column:
    """Where a column's values come from, for messages ``file:column:row: ...`` (row 1 is the first
    record, the line after the header)."""

    def __init__(self, info: TableInfo, variable: Variable, col: pd.Series) -> None:
        self.where = f"{info.source}:{variable.name}"
        self.col = col

    def refuse(self, bad: pd.Series, problem: str) -> CatalogError:
        """An error naming the first offending row and value; the NA hint when the value is R's NA."""
        position = int(np.flatnonzero(bad.to_numpy(dtype=bool))[0])
        value = self.col.iloc[position]
        value = value.item() if isinstance(value, np.generic) else value  # 150, not np.int64(150)
        hint = f"; {_NA_HINT}" if value == "NA" else ""
        others = int(bad.sum()) - 1
        more = f" ({others} more row{'s' if others != 1 else ''} like it)" if others else ""
        return CatalogError(f"{self.where}:{position + 1}: value {value!r} {problem}{more}{hint}")


def _check_columns(columns: list[str], info: TableInfo) -> None:
    names = [v.name for v in info.variables]
    if columns == names:
        return
    if sorted(columns) == sorted(names):
        raise CatalogError(
            f"{info.source}: the columns are those of the dictionary in a different order (file: {columns}; "
            f"dictionary: {names}); reorder the file's columns or the dictionary's variables"
        )
    extra = sorted(set(columns) - set(names))
    missing = sorted(set(names) - set(columns))
    raise CatalogError(
        f"{info.source}: columns do not match the dictionary (missing {missing}, undeclared {extra})"
    )


def _numeric(column: _Column, v: Variable) -> pd.Series:
    col = column.col
    if pd.api.types.is_numeric_dtype(col.dtype) and not pd.api.types.is_bool_dtype(col.dtype):
        values = col  # typed by the file or database: every value is a number
    else:
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


def _typed(raw: pd.Series, info: TableInfo, v: Variable) -> pd.Series:
    """Column ``v`` of table ``info`` as functions read it, from the engine's raw column; raises
    :class:`CatalogError` naming the first value that does not fit the dictionary."""
    column = _Column(info, v, raw.reset_index(drop=True))
    if v.value_type in ("integer", "decimal"):
        typed = _numeric(column, v)
    elif v.value_type == "boolean":
        typed = _boolean(column)
    else:
        typed = _text(column, v)
    return pd.Series(typed, name=v.name, copy=False)


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


BYTES_PER_VALUE = 8  # a column as the site holds it: float64 or int64 values, or category codes and labels


def too_large(info: TableInfo, columns: list[str], need: int, limit: str, rule: str | None = None
              ) -> InsufficientMemory:
    """The refusal of a read that does not fit: the table, how much the columns take, the limit, and
    what to do instead (read fewer columns; or the administrator gives the site more memory)."""
    return InsufficientMemory(
        f"reading {len(columns)} column(s) of table {info.ref} (about {need >> 20:,} MB as the site holds them) "
        f"does not fit in the memory this site may use: {limit}", rule=rule,
        hint="assign only the variables the analysis reads (assign_table(symbol, table, variables=[...]); in R, "
             "datashield.assign.table(..., variables = ...)), or ask the site's administrator for more memory "
             "([catalog] memory_limit_mb is the engine's; the process's own limit is set where the site runs)")


def _disagrees(info: TableInfo, exc: CatalogError) -> BackendUnavailable:
    """The refusal of a call that reads table ``info`` once its data stopped agreeing with its dictionary."""
    return BackendUnavailable(
        f"table {info.ref} at this site does not agree with its data dictionary (changed since the site "
        f"started?): {exc}",
        hint="nothing was read; the site administrator corrects the data, runs 'dsfed-server check CONFIG' "
             "and restarts the site")


class Catalog:
    """The projects and tables under one site's data directory, read through the site's engine
    (:mod:`dsfed_server.engines`) one column at a time, and shared read-only.

    A column is typed and checked against the dictionary the first time a call reads it, and kept;
    a call reads only the columns it names (:meth:`frame`, :meth:`column`). ``on_read``, where set, is
    called with a table and the columns just read from the engine and kept, outside the catalog's lock, and
    may refuse the call, the columns then not kept (the release history checks them against the table's
    digests: :meth:`History.columns_read <dsfed_server.disclosure.history.History.columns_read>`); no call is
    served a column before its check is done (a call naming it meanwhile waits for the check, and reads it
    again where it refused)."""

    def __init__(self, data_dir: str | Path, engine: Engine | None = None) -> None:
        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise CatalogError(f"{self.data_dir}: data directory does not exist")
        self.engine = engine if engine is not None else DuckDBEngine()
        self._tables: dict[str, TableInfo] = {}
        self._columns: dict[tuple[str, str], pd.Series] = {}
        self._left_out: dict[str, tuple[int, np.ndarray]] = {}  # per table: the minimum, the records left out
        self._checking: set[tuple[str, str]] = set()  # kept, not yet checked by on_read: served to no call
        self._reads: dict[str, threading.Lock] = {}  # per table: held by a read from the engine through its check
        self._lock = threading.Lock()
        self.on_read: Callable[[str, list[str]], None] | None = None
        for dictionary in sorted(self.data_dir.glob("*/*.dictionary.json")):
            project = dictionary.parent.name
            table = dictionary.name[: -len(".dictionary.json")]
            for name in (project, table):
                if not _IDENT.match(name):
                    raise CatalogError(f"{dictionary}: {name!r} is not a valid project or table name")
            source = self.engine.source(project, table, dictionary.parent)
            if source is None:
                raise CatalogError(f"{dictionary}: {self.engine.absent(project, table)}")
            info = TableInfo(project, table, source, read_dictionary(dictionary))
            self._tables[info.ref] = info
        if not self._tables:
            raise CatalogError(f"{self.data_dir}: no tables found (expected <project>/<table>.csv with a dictionary)")

    def validate_all(self) -> None:
        """Check every table's columns and values against its dictionary (what the site does as it
        starts); raises :class:`CatalogError` on the first mismatch. The engine counts the values
        that break the dictionary; only a column it finds fault with is read, to name the row."""
        for info in self._tables.values():
            _check_columns(self.engine.column_names(info), info)
            for name in self.engine.suspect_columns(info, info.variables):
                self._read(info, [name])

    def _served(self, info: TableInfo, names: list[str]) -> list[pd.Series]:
        """Columns ``names`` of ``info`` for a call: data that stopped agreeing with its dictionary
        after the site started (a file replaced in place, a database changed) refuses the call."""
        try:
            return self._read(info, names)
        except CatalogError as exc:
            raise _disagrees(info, exc) from None

    def _ready(self, ref: str, names: list[str]) -> list[pd.Series] | None:
        """Columns ``names`` of table ``ref`` where each is kept and checked; None where one is not (under the
        catalog's lock)."""
        if all((ref, n) in self._columns and (ref, n) not in self._checking for n in names):
            return [self._columns[(ref, n)] for n in names]
        return None

    def _read(self, info: TableInfo, names: list[str]) -> list[pd.Series]:
        """Columns ``names`` of ``info``, typed and checked (each read from the engine once); a read
        that would not fit in the memory the site may use is refused (:func:`too_large`). A column is served
        once ``on_read`` checked it: a read of the table from its engine holds the table's read lock through
        the check, and a call that names a column not yet kept, or kept and not yet checked, waits for it."""
        with self._lock:
            kept = self._ready(info.ref, names)
            reads = self._reads.setdefault(info.ref, threading.Lock())
        if kept is not None:
            return kept
        with reads:
            with self._lock:
                missing = [n for n in names if (info.ref, n) not in self._columns]
                if missing:
                    self._from_engine(info, missing)
                    self._checking.update((info.ref, n) for n in missing)
                kept = [self._columns[(info.ref, n)] for n in names]
            try:
                if missing and self.on_read is not None:  # outside the catalog's lock: the history reads columns
                    self.on_read(info.ref, missing)
            except Exception:  # refused: not kept, so the next read is checked again
                with self._lock:
                    for name in missing:
                        self._columns.pop((info.ref, name), None)
                raise
            finally:
                with self._lock:
                    self._checking.difference_update((info.ref, n) for n in missing)
        return kept

    def _from_engine(self, info: TableInfo, missing: list[str]) -> None:
        """Read columns ``missing`` of ``info`` from the engine, typed and checked, into the columns kept (under
        the catalog's lock)."""
        need = self.engine.row_count(info) * len(missing) * BYTES_PER_VALUE
        free = room()
        if free is not None and need > free[0]:
            raise too_large(info, missing, need, f"{free[1]} leaves {free[0] >> 20:,} MB")
        try:
            raw = self.engine.read(info, missing)
            variables = {v.name: v for v in info.variables}
            typed = {(info.ref, name): _typed(raw[name], info, variables[name]) for name in missing}
        except EngineOutOfMemory as exc:
            raise too_large(info, missing, need, str(exc), rule="catalog.memory_limit_mb") from None
        except MemoryError:
            raise too_large(info, missing, need, "the site process could not allocate it") from None
        self._columns.update(typed)  # all or none: a column that does not fit its dictionary keeps none

    def tables(self) -> list[TableInfo]:
        return list(self._tables.values())

    def left_out(self, ref: str, minimum: int) -> np.ndarray:
        """The records of table ``ref`` whose pattern of missing values over all its served columns fewer
        than ``minimum`` records share (:func:`~dsfed_server.disclosure.missingness.rare_patterns`),
        boolean, kept per table (the site's minimum is fixed). A column not yet read is read for its
        missing values only and not kept."""
        found = self._left_out.get(ref)
        if found is None or found[0] != minimum:
            missing = (self._once(ref, name).isna().to_numpy() for name in self.served(ref))
            found = minimum, rare_patterns(missing, self.row_count(ref), minimum)
            with self._lock:
                self._left_out[ref] = found
        return found[1]

    def _once(self, ref: str, name: str) -> pd.Series:
        """Column ``name`` of table ``ref`` as served: the one kept (also while ``on_read`` checks it: what the
        check digests), or read for the caller only and not kept."""
        kept = self._columns.get((ref, name))
        if kept is not None:
            return kept
        info = self.info(ref)
        variable = next(v for v in info.variables if v.name == name)
        try:
            return _typed(self.engine.read(info, [name])[name], info, variable)
        except CatalogError as exc:
            raise _disagrees(info, exc) from None

    def prefix_digests(self, ref: str, sizes: list[int], columns: list[str] | None = None,
                       order: np.ndarray | None = None, keys: RecordKeys | None = None
                       ) -> dict[int, dict[str, str]] | None:
        """For each of ``sizes`` (increasing, at most the table's records), a digest of each served column's
        values (or those of ``columns``) in the first that many records of table ``ref``, or of the records
        at positions ``order``, in that order (:func:`~dsfed_server.record_prefixes.prefix_digests`); each
        column added to ``keys`` too, where given, in the table's order. None where ``ref`` is no table of this
        site (a table derived in a session, keyed by its content). Reads every served column once (as
        :meth:`left_out` does), keeping none it had not kept."""
        if ref not in self._tables:
            return None
        out: dict[int, dict[str, str]] = {n: {} for n in sizes}
        for name in self.served(ref) if columns is None else columns:
            values = self._once(ref, name)
            if keys is not None:
                keys.add(values)
            for n, digest in zip(sizes, prefix_digests(values if order is None else values.iloc[order], sizes)):
                out[n][name] = digest
        return out

    def kept(self, ref: str) -> np.ndarray | None:
        """The records of table ``ref`` its releases are over (boolean), where the site leaves some out
        (:meth:`left_out`); None where it leaves none out."""
        found = self._left_out.get(ref)
        return None if found is None or not found[1].any() else ~found[1]

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

    def served(self, ref: str) -> list[str]:
        """The columns of table ``ref`` functions may read: all but its identifier columns."""
        return [v.name for v in self.info(ref).variables if not v.identifier]

    def row_count(self, ref: str) -> int:
        return self.engine.row_count(self.info(ref))

    def column(self, ref: str, name: str) -> pd.Series:
        """Column ``name`` of table ``ref``, typed and checked against its dictionary (kept; callers
        must not modify it); an identifier column is never served."""
        if name not in self.served(ref):
            raise NotFound(f"table {ref!r} has no variable {name!r}", hint=f"variables: {', '.join(self.served(ref))}")
        return self._served(self.info(ref), [name])[0]

    def frame(self, ref: str, columns: list[str] | None = None) -> pd.DataFrame:
        """The table as functions may read it, or only ``columns`` of it (default: every column but
        the identifier columns): typed, checked against its dictionary; the columns are shared
        (pandas copy-on-write: a caller's change copies, the catalog's columns stay as read)."""
        served = self.served(ref)
        names = served if columns is None else list(dict.fromkeys(columns))
        unknown = [n for n in names if n not in served]
        if unknown:
            raise NotFound(f"table {ref!r} has no variable(s) {', '.join(unknown)}",
                           hint=f"variables: {', '.join(served)}")
        return pd.DataFrame(dict(zip(names, self._served(self.info(ref), names))), copy=False)

    def close(self) -> None:
        """Close the engine and drop the columns read."""
        with self._lock:
            self._columns.clear()
        self.engine.close()
