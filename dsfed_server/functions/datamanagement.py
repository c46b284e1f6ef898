"""dsBase's data-management functions under their dsBase names and signatures: factors, numbers,
tables combined from vectors, complete cases, and what a session holds (dsfed's own implementation;
no dsBase code).

What leaves the site is checked by this site's rules, and where dsBase's own behaviour discloses
more, dsfed's stricter rule holds (each function's docs say where):

- ``asFactorDS1`` releases the levels of a variable only when each level holds no record or at
  least q (dsBase releases every distinct value, the extremes of a numeric variable included);
- ``asFactorDS2`` takes levels that cover every value present (the levels ``asFactorDS1`` gave):
  levels that leave values out would make an analyst-chosen cut (dsBase turns them into NA);
- a new table of fewer than ``subset_min`` rows is refused, and the rows ``completeCasesDS`` or
  ``dataFrameDS(completeCases = TRUE)`` drop go through the subset guard (``disclosure.subset_min``,
  ``disclosure.subset_min_difference``) as any subset does;
- ``numNaDS`` releases a count of missing values only when it is 0 or at least q.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from dsfed_core.calltree import r_number
from dsfed_core.errors import CallError
from dsfed_server.context import CallContext, r_class
from dsfed_server.disclosure.checks import LEVEL_RULES
from dsfed_server.disclosure.declared import Declared, SubsetRows
from dsfed_server.disclosure.differencing import ROWS, Rows, mark_rows
from dsfed_server.disclosure.provenance import DERIVED, MEANING, MEANINGS, own_meaning
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet, column_names, complete_rows

_SUBSET = ("disclosure.subset_min", "disclosure.subset_min_difference")
NO_MESSAGES = "ALL OK: there are no studysideMessage(s) on this datasource"


# --- factors and numbers -------------------------------------------------------------------


def r_character(value: Any) -> str:
    """R's ``as.character`` of one number or string: as R writes a number (:func:`r_number`:
    ``100000`` is ``1e+05``, a third ``0.333333333333333``), ``TRUE``/``FALSE``, a string as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return "TRUE" if value else "FALSE"
    return r_number(float(value))


def _present_levels(x: pd.Series) -> list[str]:
    """``levels(factor(x))``: a factor's levels that hold a record (in its order); else the distinct
    values, numbers in numeric order and text in sorted order, as R's ``as.character`` writes them."""
    present = x.dropna()
    if isinstance(x.dtype, pd.CategoricalDtype):
        held = set(present.astype(str))
        return [str(c) for c in x.cat.categories if str(c) in held]
    if r_class(x) == "character":
        return sorted(set(present.astype(str)))
    return [r_character(v) for v in np.unique(present.to_numpy())]


def _as_text(x: pd.Series) -> pd.Series:
    """Each value as R's ``as.character`` writes it (missing stays missing)."""
    if isinstance(x.dtype, pd.CategoricalDtype) or r_class(x) == "character":
        return x.astype("string")
    return pd.Series([None if pd.isna(v) else r_character(v) for v in x], dtype="string")


def _keep_rows(result: pd.Series, source: pd.Series) -> pd.Series:
    """``result`` holds the records of ``source`` in its order: it keeps the record positions."""
    rows = source.attrs.get(ROWS)
    if isinstance(rows, Rows):
        result.attrs[ROWS] = rows
    return result


def covering_factor(ctx: CallContext, x: pd.Series, levels_text: str, what: str) -> pd.Categorical:
    """``factor(x, levels = <the comma-separated levels>)``, refused unless the levels cover every value
    ``x`` holds: levels that leave values out turn those records into NA, a cut the analyst chose."""
    levels = list(dict.fromkeys(s.strip() for s in levels_text.split(",") if s.strip()))
    ctx.guard.factor_levels(len(levels), len(x), what)
    text = _as_text(x)
    missing = sorted(set(text.dropna()) - set(levels))
    if missing:
        raise CallError(f"the levels ({what}) leave out {len(missing)} value(s) the variable holds",
                        hint="give every level asFactorDS1 returned at every site (ds.asFactor and ds.table do)")
    return pd.Categorical(text.astype(object).where(text.notna(), None), categories=levels)


@register("asFactorDS1", "aggregate",
          [Param("input.var.name", P.VECTOR, "the variable to become a factor, e.g. \"D$tgrade\"")],
          checks=("disclosure.q_threshold", *LEVEL_RULES))
def as_factor_levels(ctx: CallContext, input_var_name: pd.Series) -> list[str]:
    """The levels ``factor(x)`` would have (dsBase ``asFactorDS1``, the first call of ``ds.asFactor``
    and ``ds.table``): a factor's levels that hold records, or the distinct values of a numeric or
    text vector, in R's order.

    Refused when there are more levels than ``max_factor_levels`` or ``factor_levels_density`` x the
    records allow (dsBase's nfilter.levels), and -- stricter than dsBase, which releases every
    distinct value -- when a level holds fewer than q records (a rare value, such as a numeric
    variable's extremes, is not told).
    """
    x = input_var_name
    levels = _present_levels(x)
    ctx.guard.factor_levels(len(levels), len(x), "input.var.name")
    counts = _as_text(x).value_counts()
    for level in levels:
        ctx.guard.min_count(int(counts.get(level, 0)), f"level {level!r} of input.var.name")
    return levels


@register("asFactorDS2", "assign", [
    Param("input.var.name", P.VECTOR, "the variable to become a factor, e.g. \"D$tgrade\""),
    Param("all.unique.levels.transmit", P.STRING, "the levels, comma-separated (asFactorDS1's over all sites)"),
    Param("fixed.dummy.vars", P.BOOLEAN, "TRUE: a matrix of dummy variables (not offered)", required=False,
          default=False),
    Param("baseline.level", P.NUMBER, "the dummy variables' baseline level (not offered)", required=False),
], checks=LEVEL_RULES)
def as_factor(ctx: CallContext, input_var_name: pd.Series, all_unique_levels_transmit: str,
              fixed_dummy_vars: bool, baseline_level: float | None) -> pd.Series:
    """``factor(x, levels = <the levels>)`` (dsBase ``asFactorDS2``, as ``ds.asFactor`` sends it).

    The levels must include every value ``x`` holds (as ``asFactorDS1`` gives them, over all sites):
    levels that leave values out would turn those records into NA, an analyst-chosen cut that
    dsfed does not make (dsBase does). A matrix of dummy variables (``fixed.dummy.vars = TRUE``)
    is not offered.
    """
    if fixed_dummy_vars:
        raise CallError("asFactorDS2: a matrix of dummy variables (fixed.dummy.vars = TRUE) is not offered",
                        hint="make the factor (fixed.dummy.vars = FALSE); model formulas make the dummies")
    x = input_var_name
    factor = pd.Series(covering_factor(ctx, x, all_unique_levels_transmit, "all.unique.levels.transmit"),
                       name=x.name)
    return _keep_rows(factor, x)


@register("asNumericDS", "assign",
          [Param("x.name", P.VECTOR, "the vector to convert, e.g. \"D$tgrade\"")])
def as_numeric(ctx: CallContext, x_name: pd.Series) -> pd.Series:
    """``as.numeric(as.character(x))`` (dsBase ``asNumericDS``): a factor becomes the numbers its
    labels write (``"1"``, ``"2"``), not its level codes; text that is no number becomes NA."""
    numbers = pd.to_numeric(_as_text(x_name).astype(object), errors="coerce").astype(float)
    out = _keep_rows(pd.Series(numbers.to_numpy(), name=x_name.name), x_name)
    if r_class(x_name) in ("numeric", "integer", "logical"):  # the same numbers: the same function of its roots
        out.attrs[MEANING] = ctx.meaning(x_name)
    return out


@register("numNaDS", "aggregate", [Param("xvect", P.VECTOR, "a vector, e.g. D$age")],
          checks=("disclosure.q_threshold",))
def count_missing(ctx: CallContext, xvect: pd.Series) -> int:
    """The number of missing values of a vector (dsBase ``numNaDS``, which ``ds.quantileMean`` calls).

    Refused -- stricter than dsBase -- when the missing values, or the others, are fewer than q but
    not none: a count is a group of records like any other.
    """
    missing = int(xvect.isna().sum())
    ctx.guard.min_count(missing, "missing values", allow_zero=True)
    ctx.guard.min_count(len(xvect) - missing, "non-missing values", allow_zero=True)
    return missing


# --- tables combined from vectors ----------------------------------------------------------


def _components(ctx: CallContext, names: str, what: str) -> list[tuple[str, Any]]:
    """The workspace values ``"D$age,D$tgrade,T"`` names, each with its name."""
    parts = [p.strip() for p in names.split(",") if p.strip()]
    if not parts:
        raise CallError(f"{what} names no objects")
    return [(p, ctx.resolve(ctx.parse_reference(p))) for p in parts]


def _column_names(given: str | None, count: int, what: str) -> list[str]:
    """dsBase's column names: ``D$age`` gives ``age``; R's ``make.names(unique = TRUE)`` then makes
    them valid names and suffixes repeats with ``.1``, ``.2``."""
    names = [n.strip().split("$")[-1] for n in (given or "").split(",") if n.strip()]
    if len(names) != count:
        raise CallError(f"{what} gives {len(names)} names for {count} columns")
    valid = [re.sub(r"[^A-Za-z0-9._]", ".", n) for n in names]
    valid = [n if re.match(r"^([A-Za-z]|\.(?![0-9]))", n) else f"X{n}" for n in valid]
    out: list[str] = []
    for name in valid:
        unique, k = name, 0
        while unique in out:
            k += 1
            unique = f"{name}.{k}"
        out.append(unique)
    return out


def _combine(ctx: CallContext, names: str, colnames: str | None, what: str) -> pd.DataFrame:
    """``data.frame(<the components>)`` with dsBase's column names. The new table holds the
    components' columns themselves, not copies (pandas' copy-on-write: a change to either would
    copy first). It keeps its rows' positions in the site table when every component holds the
    same records in the same order, and each column remembers the table column it is (release
    history)."""
    columns: list[pd.Series] = []
    for name, value in _components(ctx, names, what):
        if isinstance(value, pd.DataFrame):
            for column in value.columns:
                series = value[column]
                series.attrs = dict(value.attrs)
                columns.append(series)
        elif isinstance(value, pd.Series):
            columns.append(value)
        else:
            raise CallError(f"{name!r} is a {r_class(value)}; {what} takes tables and vectors")
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        raise CallError(f"the components of {what} have different numbers of rows ({sorted(lengths)})")
    labels = _column_names(colnames, len(columns), what)
    frame = pd.DataFrame({label: c.reset_index(drop=True) for label, c in zip(labels, columns)}, copy=False)
    rows = [c.attrs.get(ROWS) for c in columns]
    first = rows[0]
    same = isinstance(first, Rows) and all(
        isinstance(r, Rows) and r.lineage == first.lineage and np.array_equal(r.index, first.index) for r in rows)
    if same:
        mark_rows(frame, first)
        frame.attrs[DERIVED] = {label: c.attrs.get(DERIVED, {}).get(c.name, (str(c.name), "identity"))
                                for label, c in zip(labels, columns) if c.name is not None}
        meanings = {label: found for label, c in zip(labels, columns) if (found := own_meaning(c)) is not None}
        if meanings:  # a derived column answers to its roots inside the table too
            frame.attrs[MEANINGS] = meanings
    frame.attrs.pop(MEANING, None)  # a table is not a derived vector (its columns' attrs came with them)
    return frame


def complete_cases_of(ctx: CallContext, value: pd.DataFrame | RowSet | pd.Series
                      ) -> Generator[Declared, Any, pd.DataFrame | RowSet | pd.Series]:
    """The complete cases of a table, a subset or a vector (R's ``complete.cases``), through the subset guard
    (declared: :class:`~dsfed_server.disclosure.declared.SubsetRows`)."""
    frame = value.to_frame() if isinstance(value, pd.Series) else value
    mask = complete_rows(frame)
    if mask.all():
        ctx.guard.subset(int(mask.sum()), int(mask.size))
        return value
    rows = yield SubsetRows(frame, mask)
    if not isinstance(value, pd.Series):
        return ctx.subset(value, mask, rows)
    kept = value.loc[mask].reset_index(drop=True)
    kept.attrs = {k: v for k, v in value.attrs.items() if k != ROWS}
    return mark_rows(kept, rows)


@register("dataFrameDS", "assign", [
    Param("vectors", P.STRING, "the tables and vectors to combine, comma-separated, e.g. \"D$age,D$tgrade\""),
    Param("r.names", P.STRINGS, "row names (not offered)", required=False),
    Param("ch.rows", P.BOOLEAN, "check the rows' consistency", required=False, default=False),
    Param("ch.names", P.BOOLEAN, "make the column names valid and unique", required=False, default=True),
    Param("clnames", P.STRING, "the column names, comma-separated"),
    Param("strAsFactors", P.BOOLEAN, "text columns become factors", required=False, default=True),
    Param("completeCases", P.BOOLEAN, "keep only the rows complete in every column", required=False,
          default=False),
], checks=_SUBSET)
def data_frame(ctx: CallContext, vectors: str, r_names: list[str] | None, ch_rows: bool, ch_names: bool,
               clnames: str, strAsFactors: bool, completeCases: bool) -> Generator[Declared, Any, pd.DataFrame]:
    """A table of the named tables and vectors (dsBase ``dataFrameDS``, as ``ds.dataFrame`` sends it),
    with dsBase's column names (``D$age`` gives ``age``; repeats get ``.1``).

    Refused, as in dsBase, when the table would hold fewer than ``subset_min`` rows; with
    ``completeCases`` the rows dropped go through the subset guard as any subset's do (dsBase
    checks only the size). Row names (``r.names``) are not offered. Text columns become factors
    when ``strAsFactors``.
    """
    if r_names:
        raise CallError("dataFrameDS: row names (r.names) are not offered", hint="leave row.names NULL")
    frame = _combine(ctx, vectors, clnames, "dataFrameDS")
    if strAsFactors:
        for column in frame.columns:
            if r_class(frame[column]) == "character":
                frame[column] = frame[column].astype("category")
    if completeCases:
        return (yield from complete_cases_of(ctx, frame))
    ctx.guard.subset(len(frame), len(frame))
    return frame


@register("cbindDS", "assign", [
    Param("x.names.transmit", P.STRING, "the tables and vectors to bind, comma-separated, e.g. \"D$age,D$y\""),
    Param("colnames.transmit", P.STRING, "the column names, comma-separated"),
], checks=_SUBSET)
def cbind(ctx: CallContext, x_names_transmit: str, colnames_transmit: str) -> pd.DataFrame:
    """The named tables and vectors bound by column into a table (dsBase ``cbindDS``, as ``ds.cbind``
    sends it), with dsBase's column names. Refused -- stricter than dsBase, which checks nothing here --
    when the table would hold fewer than ``subset_min`` rows."""
    frame = _combine(ctx, x_names_transmit, colnames_transmit, "cbindDS")
    ctx.guard.subset(len(frame), len(frame))
    return frame


@register("completeCasesDS", "assign",
          [Param("x1.transmit", P.OBJECT, "the table or vector, e.g. \"D\"")], checks=_SUBSET)
def complete_cases(ctx: CallContext, x1_transmit: Any
                   ) -> Generator[Declared, Any, pd.DataFrame | RowSet | pd.Series]:
    """The rows (of a table) or values (of a vector) with nothing missing (dsBase ``completeCasesDS``).

    The rows dropped go through the subset guard (dsBase checks nothing): refused when the complete
    cases, or the rows dropped, are fewer than ``subset_min`` but not none, or would single out
    records together with subsets made before.
    """
    if not isinstance(x1_transmit, (pd.DataFrame, pd.Series)):
        raise CallError(f"x1.transmit must be a table or a vector, got {r_class(x1_transmit)}")
    return (yield from complete_cases_of(ctx, x1_transmit))


# --- what a session holds ------------------------------------------------------------------


def _glob(pattern: str) -> re.Pattern[str]:
    """R's ``utils::glob2rx``: ``*`` any text, ``?`` one character, everything else literal, anchored."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern) + r"\Z")


@register("lsDS", "aggregate", [
    Param("search.filter", P.STRING, "a name pattern with * wildcards (dsBase writes * as _:A:_)", required=False),
    Param("env.to.search", P.INTEGER, "the environment searched (1: the session's)", choices=(1,)),
])
def list_symbols(ctx: CallContext, search_filter: str | None, env_to_search: int) -> dict[str, Any]:
    """The names of the session's symbols (dsBase ``lsDS``, as ``ds.ls`` sends it): ``environment.searched``,
    ``objects.found`` (R's ``ls`` order) and, given a filter, ``search.filter.final`` (``_:A:_`` read as ``*``)."""
    names = sorted(ctx.session.symbols, key=lambda n: (n.lower(), n.swapcase()))
    out: dict[str, Any] = {"environment.searched": "R_GlobalEnv"}
    if search_filter is None:
        return out | {"objects.found": names}
    final = search_filter.replace("_:A:_", "*")
    pattern = _glob(final)
    return out | {"objects.found": [n for n in names if pattern.match(n)], "search.filter.final": final}


@register("testObjExistsDS", "aggregate", [Param("test.obj.name", P.STRING, "a symbol name, e.g. \"S\"")])
def object_exists(ctx: CallContext, test_obj_name: str) -> dict[str, Any]:
    """Whether the session holds a symbol of that name, and its R class (dsBase ``testObjExistsDS``,
    which dsBaseClient's assign functions call last)."""
    value = ctx.session.symbols.get(test_obj_name)
    if value is None:
        return {"test.obj.exists": False, "test.obj.class": None}
    return {"test.obj.exists": True, "test.obj.class": r_class(value)}


@register("messageDS", "aggregate", [Param("message.obj.name", P.STRING, "a symbol name, e.g. \"S\"")])
def studyside_message(ctx: CallContext, message_obj_name: str) -> str:
    """dsBase ``messageDS``: the studyside message left for an object. dsfed leaves none -- an assign
    function it refuses fails with the error naming the rule, instead of leaving an object and a
    message -- so the answer is always dsBase's "no messages" text."""
    return NO_MESSAGES


@register("rmDS", "aggregate", [Param("x.name.transmit", P.STRING, "symbol names separated by commas, e.g. \"S,T\"")])
def remove_symbols(ctx: CallContext, x_name_transmit: str) -> dict[str, str]:
    """Remove symbols from the session (dsBase ``rmDS``, which ``ds.rm`` calls as an aggregate
    function): ``return.message``, dsBase's text for the last name, ``"Object <S> successfully
    deleted"`` or ``"Object to be deleted, i.e. <S> , does not exist so does not need deleting"``.
    Nothing is released; a removed symbol is gone from the workspace as ``DELETE .../symbol/S`` removes
    it."""
    session = ctx.session
    message = ""
    for name in [n.strip() for n in x_name_transmit.split(",") if n.strip()]:
        if name not in session.symbols:
            message = f"Object to be deleted, i.e. <{name}> , does not exist so does not need deleting"
            continue
        del session.symbols[name]
        session.sources.pop(name, None)
        session.definitions.pop(name, None)
        message = f"Object <{name}> successfully deleted"
    return {"return.message": message}


@register("exists", "aggregate", [
    Param("x", P.STRING, "a symbol name, or a column name with where"),
    Param("where", P.TABLE, "a table whose columns are searched", required=False, rows_only=True),
])
def exists(ctx: CallContext, x: str, where: pd.DataFrame | RowSet | None) -> bool:
    """R's ``exists(x, where)`` as dsBaseClient's ``isDefined`` sends it: whether the session holds a
    symbol ``x``, or, given a table ``where``, whether the table has a column ``x``."""
    if where is not None:
        return x in column_names(where)
    return x in ctx.session.symbols
