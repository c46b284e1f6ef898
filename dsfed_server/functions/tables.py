"""Assign functions that create tables on the site: table assignment and subsetting (the native
``subsetDS`` and ``subsetRowsDS``, dsBase's ``dataFrameSubsetDS1``/``dataFrameSubsetDS2``, which also refuse
a subset that leaves out fewer than ``subset_min`` rows)."""

from __future__ import annotations

import operator
from collections.abc import Generator
from typing import Any, Callable

import numpy as np
import pandas as pd

from dsfed_core.calltree import Column, Literal, Symbol
from dsfed_core.errors import CallError, NotFound
from dsfed_core.parser import parse
from dsfed_server.arithmetic import two_columns_compared
from dsfed_server.context import NOTE, CallContext, r_class
from dsfed_server.disclosure import missingness, shared_tables
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.declared import Declared, SubsetRows
from dsfed_server.disclosure.differencing import Rows, mark_rows, whole_table
from dsfed_server.disclosure.gate import Cut, Intervals, condition_cuts
from dsfed_server.functions.datamanagement import complete_cases_of
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet, column_names, complete_rows
from dsfed_server.views import read_value

_OPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


@register(
    "assignTable",
    "assign",
    [
        Param("table", P.STRING, "the table, as project.table (e.g. GBSG2.validation)", required=False),
        Param("variables", P.STRINGS, "variables to keep (default: all)", required=False),
        Param("tables", P.STRINGS, "instead of table: each site's own, as site=project.table (the same list at "
              "every site; pooled releases then name the tables by it)", required=False),
    ],
    checks=("disclosure.cut_history", *missingness.RULES),
)
def assign_table(ctx: CallContext, table: str | None, variables: list[str] | None,
                 tables: list[str] | None = None) -> pd.DataFrame:
    """Load a table of this site's Opal-like projects into the session, optionally only some variables.

    This is what Opal's ``PUT .../symbol/{name}/table/{project.table}`` does. Where the site keeps a
    release history, the records whose pattern of missing values few records of the table share are
    left out, for every analyst (:mod:`dsfed_server.disclosure.missingness`), and the answer says how
    many. With ``tables`` (each site's own table, the same list at every site) this site loads its
    entry, and pooled releases on the table name it by the list's label
    (:mod:`dsfed_server.disclosure.shared_tables`).
    """
    if (table is None) == (tables is None):
        raise CallError("give the table (project.table), or each site's as tables = site=project.table, not both")
    if tables is not None:
        per_site = shared_tables.entries(tables)
        if ctx.service.name not in per_site:
            raise CallError(f"tables names no table for this site ({ctx.service.name})",
                            hint="name every site's table (LoginBuilder.append(..., table=...))")
        table = per_site[ctx.service.name]
        ctx.session.shared_tables[table] = shared_tables.label(per_site)
    else:
        ctx.session.shared_tables.pop(table, None)
    catalog = ctx.service.catalog
    frame = catalog.frame(table, variables or None)
    ctx.note_source(table)  # provenance: the privacy ledger's table key
    ctx.guard.table_unchanged(table, len(frame))  # its earlier records as they were when read before
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
                ) -> Generator[Declared, Any, pd.DataFrame | RowSet]:
    """Rows of table ``x`` where ``variable op value`` holds (rows with the variable missing are dropped).

    Refused when the subset, or the rows it leaves out, would be smaller than
    the site's ``subset_min`` (DataSHIELD nfilter.subset), so that a subset
    cannot be differenced against the full table.
    """
    return (yield from _condition_subset(ctx, x, variable, op, value, np.ones(len(x), dtype=bool)))


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
                  cs: list[str] | None, lg: int | None, th: object, varname: str | None
                  ) -> Generator[Declared, Any, pd.DataFrame | RowSet]:
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
        return (yield from complete_cases_of(ctx, dt))
    if varname is None or lg is None or th is None:
        raise CallError("subsetDS needs varname, lg and th (the condition that selects the rows)")
    keep = complete_rows(dt) if complt else np.ones(len(dt), dtype=bool)
    return (yield from _condition_subset(ctx, dt, varname, _DSBASE_OPS[lg], th, keep))


def _condition_subset(ctx: CallContext, x: pd.DataFrame | RowSet, variable: str, op: str, value: object,
                      keep: np.ndarray) -> Generator[Declared, Any, pd.DataFrame | RowSet]:
    """Rows of ``x`` (a table, or a subset held as its rows: only the condition's column is built)
    among ``keep`` where ``variable op value`` holds, through the subset guard (declared:
    :class:`~dsfed_server.disclosure.declared.SubsetRows`)."""
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
    return ctx.subset(x, mask, (yield SubsetRows(x, mask, condition)))


def condition_cells(ctx: CallContext, column: pd.Series, op: str, value: float) -> Intervals:
    """The cells a numeric subset condition makes on its column: its cuts go into the column's cut
    history like a bin edge's (:meth:`Guard.subset_rows`, declared as
    :class:`~dsfed_server.disclosure.declared.SubsetRows`)."""
    return cut_cells(ctx, column, condition_cuts(op, value), "subset condition")


def cut_cells(ctx: CallContext, column: pd.Series, cuts: tuple[Cut, ...], what: str) -> Intervals:
    """The cells ``cuts`` (sorted) make on a numeric column's non-missing values, checked against the
    cut history of the site table column it comes from."""
    values = column.to_numpy(dtype=float, na_value=np.nan)
    present = ~np.isnan(values)
    return Intervals(values if present.all() else values[present], cuts, render=lambda released: None, what=what,
                     column=ctx.root_column(column), strata=ctx.strata(column))


# --- subsetting ----------------------------------------------------------------------------

_OPERATORS: dict[int, tuple[str, Callable[[Any, Any], Any]]] = {
    1: ("==", operator.eq), 2: ("!=", operator.ne), 3: ("<", operator.lt),
    4: ("<=", operator.le), 5: (">", operator.gt), 6: (">=", operator.ge),
}


def _operand(ctx: CallContext, text: str, n_rows: int) -> Any:
    """``V1.name`` / ``V2.name``: a number or quoted string, or a vector named like ``D$age``."""
    node = parse(text, ctx.limits)
    if isinstance(node, Literal) and node.value is not None:
        return node.value
    if isinstance(node, (Symbol, Column)):
        value = ctx.resolve(node)
        if not isinstance(value, pd.Series):
            raise CallError(f"{text!r} must name a vector, got a {r_class(value)}")
        if len(value) not in (1, n_rows):
            raise CallError(f"{text!r} must have length 1 or the table's {n_rows} rows")
        return value.reset_index(drop=True) if len(value) == n_rows else value.iloc[0]
    raise CallError(f"{text!r} must be a number, a quoted string or the name of a vector")


def _comparable(value: Any) -> Any:
    if isinstance(value, pd.Series):
        if isinstance(value.dtype, pd.CategoricalDtype) or r_class(value) == "character":
            return value.astype("string")
        return value.astype("Float64")
    return value


def _columns(spec: list[float] | None, n_cols: int, what: str) -> list[int]:
    index = [int(c) for c in spec or []]
    if any(c != v or not 1 <= c <= n_cols for c, v in zip(index, spec or [])):
        raise CallError(f"{what} must be column numbers between 1 and {n_cols}")
    return [c - 1 for c in index]


_SUBSET_PARAMS = [
        Param("df.name", P.TABLE, "the table to subset, e.g. \"D\"", rows_only=True),
        Param("V1.name", P.STRING, "the vector compared, e.g. \"D$age\" (or \"ONES\" to keep every row)"),
        Param("V2.name", P.STRING,
              "what it is compared with: a number (\"50\"), a quoted string, or a text or factor vector"),
        Param("Boolean.operator.n", P.INTEGER, "1 ==, 2 !=, 3 <, 4 <=, 5 >, 6 >=", choices=tuple(_OPERATORS)),
        Param("keep.cols", P.NUMBERS, "column numbers to keep, e.g. \"1,3\"", required=False),
        Param("rm.cols", P.NUMBERS, "column numbers to drop, e.g. \"2\"", required=False),
        Param("keep.NAs", P.BOOLEAN, "keep rows where the comparison is NA", required=False, default=False),
]
SUBSET_DONE = "Subsetting undertaken without problems"


@register("dataFrameSubsetDS2", "assign", _SUBSET_PARAMS, checks=("disclosure.subset_min", *GATE_RULES))
def data_frame_subset(ctx: CallContext, df_name: pd.DataFrame | RowSet, V1_name: str, V2_name: str,
                      Boolean_operator_n: int, keep_cols: list[float] | None, rm_cols: list[float] | None,
                      keep_NAs: bool) -> Generator[Declared, Any, pd.DataFrame | RowSet]:
    """Rows of a table where ``V1 <op> V2`` holds, optionally some columns (dsBase ``dataFrameSubsetDS2``).

    Refused when the subset, or the rows it leaves out, would hold fewer than
    the site's ``subset_min`` rows (dsBase's nfilter.subset checks the subset only). A numeric condition is a
    cut on ``V1`` at the number ``V2``, which the release gate checks; two numeric vectors are not compared (as in
    an expression: a cut on their combination, which no cut history holds).
    """
    n_rows = len(df_name)
    if keep_cols is not None and rm_cols is not None:
        raise CallError("give keep.cols or rm.cols, not both")
    if "ONES" in (V1_name, V2_name):
        mask = np.ones(n_rows, dtype=bool)
    else:
        symbol, compare = _OPERATORS[Boolean_operator_n]
        left = _comparable(_operand(ctx, V1_name, n_rows))
        right = _comparable(_operand(ctx, V2_name, n_rows))
        if not isinstance(left, pd.Series):
            raise CallError(f"V1.name {V1_name!r} must name a vector of the table's length")
        text = pd.api.types.is_string_dtype(left.dtype)
        other_text = isinstance(right, str) or (isinstance(right, pd.Series)
                                                 and pd.api.types.is_string_dtype(right.dtype))
        if text != other_text:
            raise CallError(f"{V1_name!r} and {V2_name!r} are not both numbers or both text/factor values")
        if text and symbol not in ("==", "!="):
            raise CallError(f"text and factor values can only be compared with == or !=, not {symbol}")
        if not text and isinstance(right, pd.Series):
            raise two_columns_compared(f"{V1_name} {symbol} {V2_name}")
        result = pd.array(compare(left, right), dtype="boolean")
        mask = result.fillna(keep_NAs).to_numpy(dtype=bool)
    numeric = "ONES" not in (V1_name, V2_name) and not text  # then a number on the right: a cut on the left
    condition = condition_cells(ctx, left, symbol, float(right)) if numeric else None
    n_cols = df_name.shape[1]
    columns = None
    if keep_cols is not None:
        columns = _columns(keep_cols, n_cols, "keep.cols")
    elif rm_cols is not None:
        drop = set(_columns(rm_cols, n_cols, "rm.cols"))
        columns = [j for j in range(n_cols) if j not in drop]
    return ctx.subset(df_name, mask, (yield SubsetRows(df_name, mask, condition)), columns)


@register("dataFrameSubsetDS1", "aggregate", _SUBSET_PARAMS, checks=("disclosure.subset_min", *GATE_RULES))
def data_frame_subset_check(ctx: CallContext, df_name: pd.DataFrame | RowSet, V1_name: str, V2_name: str,
                            Boolean_operator_n: int, keep_cols: list[float] | None, rm_cols: list[float] | None,
                            keep_NAs: bool) -> Generator[Declared, Any, str]:
    """The checks of ``dataFrameSubsetDS2`` with the same arguments, its subset not kept (dsBase
    ``dataFrameSubsetDS1``, the first call of ``ds.dataFrameSubset``): a subset the site refuses is
    refused here with the rule's name, before the assign call; otherwise dsBase's
    ``"Subsetting undertaken without problems"`` (dsBase's warning about a subset close to the
    table's size never arises: such a subset is refused by ``subset_min``)."""
    yield from data_frame_subset(ctx, df_name, V1_name, V2_name, Boolean_operator_n, keep_cols, rm_cols, keep_NAs)
    return SUBSET_DONE
