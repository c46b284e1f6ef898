"""Assign functions that create tables on the site: table assignment and subsetting."""

from __future__ import annotations

import operator

import numpy as np
import pandas as pd

from dsfed_server.context import NOTE, CallContext
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure import missingness
from dsfed_server.disclosure.differencing import Rows, mark_rows, whole_table
from dsfed_server.disclosure.gate import Cut, Intervals, condition_cuts
from dsfed_core.errors import CallError, NotFound
from dsfed_server.functions.datamanagement import complete_cases_of
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet, column_names, complete_rows
from dsfed_server.views import read_value

_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@register(
    "assignTable",
    "assign",
    [
        Param("table", P.STRING, "the table, as project.table (e.g. GBSG2.validation)"),
        Param("variables", P.STRINGS, "variables to keep (default: all)", required=False),
    ],
    checks=("disclosure.cut_history", *missingness.RULES),
)
def assign_table(ctx: CallContext, table: str, variables: list[str] | None) -> pd.DataFrame:
    """Load a table of this site's Opal-like projects into the session, optionally only some variables.

    This is what Opal's ``PUT .../symbol/{name}/table/{project.table}`` does. Where the site keeps a
    release history, the records whose pattern of missing values few records of the table share are
    left out, for every analyst (:mod:`dsfed_server.disclosure.missingness`), and the answer says how
    many.
    """
    catalog = ctx.service.catalog
    frame = catalog.frame(table, variables or None)
    ctx.note_source(table)  # provenance: the privacy ledger's table key
    minimum = ctx.guard.leave_out_minimum(ctx.service.rules)
    left_out = catalog.left_out(table, minimum) if minimum else None
    if left_out is None or not left_out.any():
        return mark_rows(frame, whole_table(table, len(frame)))
    kept = np.flatnonzero(~left_out)
    frame = frame.iloc[kept].reset_index(drop=True)
    frame.attrs[NOTE] = missingness.note(int(left_out.sum()), minimum)
    return mark_rows(frame, Rows(table, kept.astype(np.int32 if left_out.size < 2**31 else np.int64), left_out.size))


@register(
    "subsetRowsDS",
    "assign",
    [
        Param("x", P.TABLE, "the table to subset", rows_only=True),
        Param("variable", P.NAME, "the column the condition tests"),
        Param("op", P.STRING, "comparison", choices=tuple(_OPS)),
        Param("value", P.SCALAR, "the value compared with (a number, or a category as a string)"),
    ],
    checks=("disclosure.subset_min", *GATE_RULES),
)
def subset_rows(ctx: CallContext, x: pd.DataFrame | RowSet, variable: str, op: str, value: object
                ) -> pd.DataFrame | RowSet:
    """Rows of table ``x`` where ``variable op value`` holds (rows with the variable missing are dropped).

    Refused when the subset, or the rows it leaves out, would be smaller than
    the site's ``subset_min`` (DataSHIELD nfilter.subset), so that a subset
    cannot be differenced against the full table.
    """
    return _condition_subset(ctx, x, variable, op, value, np.ones(len(x), dtype=bool))


# dsBase subsetDS's codes of its logical operator ``lg``
_DSBASE_OPS = {1: ">", 2: ">=", 3: "<", 4: "<=", 5: "==", 6: "!="}


@register(
    "subsetDS",
    "assign",
    [
        Param("dt", P.TABLE, "the table to subset, e.g. \"D\"", rows_only=True),
        Param("complt", P.BOOLEAN, "keep complete cases only", required=False, default=False),
        Param("rs", P.NUMBERS, "row numbers (not offered: rows chosen by position)", required=False),
        Param("cs", P.STRINGS, "columns (not offered)", required=False),
        Param("lg", P.INTEGER, "1 >, 2 >=, 3 <, 4 <=, 5 ==, 6 !=", required=False, choices=tuple(_DSBASE_OPS)),
        Param("th", P.SCALAR, "the value compared with (a number, or a category as a string)", required=False),
        Param("varname", P.NAME, "the column the condition tests", required=False),
    ],
    checks=("disclosure.subset_min", *GATE_RULES),
)
def subset_dsbase(ctx: CallContext, dt: pd.DataFrame | RowSet, complt: bool, rs: list[float] | None,
                  cs: list[str] | None, lg: int | None, th: object, varname: str | None) -> pd.DataFrame | RowSet:
    """Rows of table ``dt`` where ``varname <lg> th`` holds, of its complete cases if ``complt``
    (dsBase ``subsetDS`` in the form ``ds.subset(..., logicalOperator, threshold)`` sends it).

    The same guarded subset as ``subsetRowsDS``: refused (not filled with NA as in dsBase) when the
    subset, or the rows it leaves out, is smaller than ``subset_min``. Without a condition,
    ``complt = TRUE`` keeps the complete cases (``ds.subset(x, completeCases = TRUE)``), through the
    same guard. Rows or columns by position (``rs``, ``cs``) are not offered.
    """
    if rs is not None or cs is not None:
        raise CallError("subsetDS: rows and columns by position (rs, cs) are not offered; subset by a "
                        "condition (varname, lg, th)")
    if complt and varname is None and lg is None and th is None:
        return complete_cases_of(ctx, dt)
    if varname is None or lg is None or th is None:
        raise CallError("subsetDS needs varname, lg and th (the condition that selects the rows)")
    keep = complete_rows(dt) if complt else np.ones(len(dt), dtype=bool)
    return _condition_subset(ctx, dt, varname, _DSBASE_OPS[lg], th, keep)


def _condition_subset(ctx: CallContext, x: pd.DataFrame | RowSet, variable: str, op: str, value: object,
                      keep: np.ndarray) -> pd.DataFrame | RowSet:
    """Rows of ``x`` (a table, or a subset held as its rows: only the condition's column is built)
    among ``keep`` where ``variable op value`` holds, through the subset guard."""
    names = column_names(x)
    if variable not in names:
        raise NotFound(f"table has no column {variable!r}", hint=f"columns: {', '.join(map(str, names))}")
    column = read_value("x", x, variable)
    numeric_column = pd.api.types.is_numeric_dtype(column.dtype) and not isinstance(column.dtype, pd.CategoricalDtype)
    if numeric_column != (isinstance(value, (int, float)) and not isinstance(value, bool)):
        kind = "a number" if numeric_column else "a string (category or text)"
        raise CallError(f"column {variable!r} must be compared with {kind}, got {value!r}")
    if isinstance(column.dtype, pd.CategoricalDtype):
        if op not in ("==", "!="):
            raise CallError(f"column {variable!r} is a factor: only == and != apply")
        values = column.astype("string")
    else:
        values = column
    mask = _OPS[op](values, value)
    mask = (np.asarray(mask.fillna(False) if hasattr(mask, "fillna") else mask, dtype=bool)
            & column.notna().to_numpy() & keep)
    condition = condition_cells(ctx, column, op, float(value)) if numeric_column else None
    return ctx.subset(x, mask, ctx.guard.subset_rows(x, mask, condition))


def condition_cells(ctx: CallContext, column: pd.Series, op: str, value: float) -> Intervals:
    """The cells a numeric subset condition makes on its column: its cuts go into the column's cut
    history like a bin edge's (:meth:`Guard.subset_rows`)."""
    return cut_cells(ctx, column, condition_cuts(op, value), "subset condition")


def cut_cells(ctx: CallContext, column: pd.Series, cuts: tuple[Cut, ...], what: str) -> Intervals:
    """The cells ``cuts`` (sorted) make on a numeric column's non-missing values, checked against the
    cut history of the site table column it comes from."""
    values = column.to_numpy(dtype=float, na_value=np.nan)
    present = ~np.isnan(values)
    return Intervals(values if present.all() else values[present], cuts, render=lambda released: None, what=what,
                     column=ctx.root_column(column))
