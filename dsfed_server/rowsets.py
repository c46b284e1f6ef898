"""Subset symbols held as the positions of their rows in the table they subset, not as copies.

A subset of a workspace table (``dataFrameSubsetDS2``, ``completeCasesDS``, ...) is kept as a
:class:`RowSet`: the parent table (the very object, shared, never modified: workspace values are
replaced, not changed), the positions of the kept rows in it (int32 below 2**31 rows: 4 bytes a
kept record, and none more when the parent is a site table as assigned: the positions are then the
records' own, which the release history's row set holds anyway) and the kept columns. A subset of
1e7 records and ten columns of a site table holds 40 MB of positions instead of 800 MB of columns
(the table's columns are the catalog's, held anyway); a subset of a subset holds positions in the
first parent. A subset keeps its parent alive, all its columns, after the parent's symbol is
removed: a small subset of a large table the analyst derived costs that table.

A call reads a subset as a table built from the parent when the call resolves the symbol
(:meth:`RowSet.frame`; ``S$age`` builds that one column), for the call only: nothing
column-sized is kept between calls. A function whose table parameter takes the subset as it is
held (``Param(rows_only=True)``: ``dimDS``, ``colnamesDS``, the subset functions, the GLM) builds
only what it reads of it (its rows and names, a condition's column, a formula's columns); any
other call that names the subset holds its columns while it runs.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pandas as pd

from dsfed_server.disclosure.differencing import ROWS, Rows, mark_rows
from dsfed_server.modelframe import COMPUTED


class RowSet:
    """Rows ``positions`` and columns ``columns`` (positions; None: all) of table ``parent``, whose
    records are ``rows`` of a site table (the release history's row set, :mod:`~.differencing`)."""

    __slots__ = ("parent", "positions", "columns", "rows", "_built", "__weakref__")

    def __init__(self, parent: pd.DataFrame, positions: np.ndarray, columns: tuple[int, ...] | None,
                 rows: Rows) -> None:
        root = parent.attrs.get(ROWS)
        if isinstance(root, Rows) and root.whole and root.lineage == rows.lineage and len(parent) == root.n_root:
            positions = rows.index  # the parent is its site table in order: positions there are the records'
        else:
            positions = positions.astype(np.int32 if len(parent) < 2**31 else np.int64, copy=False)
        positions.flags.writeable = False
        self.parent = parent
        self.positions = positions
        self.columns = columns
        self.rows = rows
        self._built: weakref.ref | None = None

    def __len__(self) -> int:
        return int(self.positions.size)

    @property
    def shape(self) -> tuple[int, int]:
        """Rows and columns, as the built table's."""
        return len(self), len(self.kept)

    @property
    def attrs(self) -> dict[str, Any]:
        """The built table's attrs (the parent's, with this subset's row set): read-only."""
        return {**self.parent.attrs, ROWS: self.rows}

    @property
    def kept(self) -> tuple[int, ...]:
        """The positions of the kept columns in the parent."""
        return tuple(range(self.parent.shape[1])) if self.columns is None else self.columns

    @property
    def labels(self) -> list[Any]:
        """The column names, as the built table has them."""
        names = list(self.parent.columns)
        return [names[j] for j in self.kept]

    def subset(self, mask: np.ndarray, rows: Rows, columns: list[int] | None = None) -> "RowSet":
        """The rows ``mask`` (over this subset's rows) and columns ``columns`` (positions among this
        subset's columns) of this subset, as positions in its parent."""
        return RowSet(self.parent, self.positions[np.asarray(mask, dtype=bool)],
                      self.columns if columns is None else tuple(self.kept[j] for j in columns), rows)

    def reads(self, column: str) -> list[Any]:
        """The stored columns a read of ``column`` builds: itself, or the column it is computed from
        (``modelframe.COMPUTED``); none when the subset has neither."""
        labels = self.labels
        if column in labels:
            return [column]
        computed = self.parent.attrs.get(COMPUTED, {}).get(column)
        return [computed.source] if computed is not None and computed.source in labels else []

    def complete(self) -> np.ndarray:
        """Which rows have a value in every kept column (R's ``complete.cases``), a column built at a time."""
        mask = np.ones(len(self), dtype=bool)
        for j in self.kept:
            mask &= self.parent.iloc[:, j].take(self.positions).notna().to_numpy()
        return mask

    def frame(self, only: list[Any] | None = None) -> pd.DataFrame:
        """The subset as a table (the parent's rows taken, indexed 0 .. n - 1, with the parent's
        attrs and this subset's row set); ``only``: just those of its columns (not kept for reuse)."""
        if only is None and self._built is not None and (built := self._built()) is not None:
            return built
        labels = self.labels
        wanted = range(len(labels)) if only is None else [labels.index(c) for c in only]
        table = self.parent.iloc[self.positions, [self.kept[j] for j in wanted]].reset_index(drop=True)
        table = mark_rows(table, self.rows)
        if only is None:
            self._built = weakref.ref(table)
        return table

    def built(self, value: Any) -> bool:
        """Whether ``value`` is, itself, the table :meth:`frame` built last (and still in use)."""
        return self._built is not None and self._built() is value


def complete_rows(table: pd.DataFrame | RowSet) -> np.ndarray:
    """Which rows of a table, or of a subset (a column built at a time), have a value in every column."""
    return table.complete() if isinstance(table, RowSet) else table.notna().all(axis=1).to_numpy()


def column_names(table: pd.DataFrame | RowSet) -> list[Any]:
    """A table's column names, or a subset's (without building it)."""
    return table.labels if isinstance(table, RowSet) else list(table.columns)


def kept_table(symbols: dict[str, Any], value: Any) -> Any:
    """What a workspace keeps for ``value``: the subset whose built table ``value`` is, or ``value``."""
    return next((v for v in symbols.values() if isinstance(v, RowSet) and v.built(value)), value)


def subset_of(symbols: dict[str, Any], table: pd.DataFrame | RowSet, mask: np.ndarray, rows: Rows,
              columns: list[int] | None = None) -> RowSet | pd.DataFrame:
    """Rows ``mask`` and columns ``columns`` (positions; None: all) of ``table``, whose records are
    ``rows``: a :class:`RowSet` of the table a workspace symbol holds (or of its parent, for a
    subset or a subset's built table); a copy of a table no symbol holds (one just built: nothing
    to share)."""
    kept = kept_table(symbols, table)
    if isinstance(kept, RowSet):
        return kept.subset(mask, rows, columns)
    subset = RowSet(table, np.flatnonzero(mask), None if columns is None else tuple(columns), rows)
    return subset if any(v is table for v in symbols.values()) else subset.frame()
