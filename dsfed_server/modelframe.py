"""Model formulas to design matrices on the site, as R's ``model.matrix`` builds them.

Numeric and integer variables enter as they are; a factor (or text) variable
enters as treatment-coded dummies for every level but the first, named like
R (``tgradeII``); ``a:b`` is the product of the columns of ``a`` and ``b``.
``factor(x)`` makes ``x`` a factor (levels in increasing order, named as R writes them:
``factor(pnodes)2``); ``I(expr)`` and ``log(expr)`` (also ``exp``, ``sqrt``) are computed by the
site's interpreter of arithmetic (:mod:`dsfed_server.arithmetic`), named as R deparses them
(``I(age^2)``, ``log(pnodes + 1)``). Rows with a missing value in any variable used are left out
(R's ``na.omit``); a transform R gives as NaN or -Inf there (``log(0)``) is missing too (R's
``glm`` would stop on it). ``levels`` (R's ``model.frame(xlev = )``) gives a factor the full set of
levels in a fixed order, the same at every site, so that a level one site lacks is an all-zero
dummy there instead of a missing column (the sites' design matrices then line up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np
import pandas as pd

from dsfed_core.calltree import Column, Formula, Limits, Symbol, r_number
from dsfed_core.errors import CallError, NotFound
from dsfed_core.parser import parse_expression
from dsfed_server.arithmetic import evaluate
from dsfed_server.rowbatches import row_batches


R_NAME = re.compile(r"[A-Za-z.][A-Za-z0-9._]*")  # an R name, as a formula writes a variable
COMPUTED = "dsfed.computed"  # a table's attrs: {column: ComputedColumn}, columns it declares but does not store


@dataclass(frozen=True, eq=False)
class ComputedColumn:
    """A column a table declares but does not store: ``function`` of its stored column ``source``,
    evaluated on the rows a read needs (a spline basis term of ``lp``: 8 bytes a record not held)."""

    source: str
    function: Callable[[np.ndarray], np.ndarray]

    def __deepcopy__(self, memo: dict) -> "ComputedColumn":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy


@dataclass(frozen=True, eq=False)
class LazyColumn:
    """A design column computed from ``values`` (a stored column's) a batch of rows at a time
    (:meth:`ModelFrame.design`); ``np.asarray`` computes it whole, for a check or a prediction."""

    values: np.ndarray
    function: Callable[[np.ndarray], np.ndarray]

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.function(self.values[rows])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = np.empty(self.values.size, dtype=dtype or float)
        for rows in row_batches(self.values.size):  # the function's working arrays are a batch's
            whole[rows] = self[rows]
        return whole


@dataclass(frozen=True)
class ModelFrame:
    """A model's outcome, design columns (the intercept a constant broadcast vector; a float column
    complete in every record a read-only view of the table's column, not a copy), weights and
    offset; :meth:`design` stacks the design rows of a batch."""

    y: np.ndarray  # float64, or int64 for a whole-number outcome
    columns: tuple[np.ndarray | LazyColumn, ...]
    names: tuple[str, ...]
    weights: np.ndarray
    offset: np.ndarray
    n_total: int
    # a factor covariate's dummy columns (main effects) and its levels, the reference first
    factors: dict[str, list[int]] = field(default_factory=dict)
    levels: dict[str, list[str]] = field(default_factory=dict)
    # per design column, the variables it multiplies (as the formula names them) and whether each
    # enters as a factor dummy (0/1) or with its values; the intercept multiplies none
    products: tuple[tuple[tuple[str, bool], ...], ...] = ()

    @property
    def n(self) -> int:
        return int(self.y.size)

    def design(self, rows: slice) -> np.ndarray:
        """The design matrix's ``rows`` (R's ``model.matrix``), as a new array."""
        return np.column_stack([c[rows] for c in self.columns])


def integer_view(values: pd.Series) -> np.ndarray | None:
    """A whole-number column with no missing value as a read-only int64 view of its values, not a
    copy (a 0/1 outcome of 1e7 records is 80 MB as float64, and again as int64); None for any other."""
    if (not pd.api.types.is_integer_dtype(values.dtype) or pd.api.types.is_bool_dtype(values.dtype)
            or values.hasnans):
        return None
    view = values.to_numpy(dtype=np.int64).view()
    view.flags.writeable = False
    return view


def formula_variable(table: pd.DataFrame, name: str) -> pd.Series:
    """The values of a formula's variable ``name`` in ``table``: a column, one it computes (:data:`COMPUTED`), or
    a computed term such as ``log(age)``."""
    if "(" in name:
        return _computed(table, name)
    column = name.split("$", 1)[1] if "$" in name else name
    computed = table.attrs.get(COMPUTED, {})
    if column not in table.columns and column in computed:
        return computed_column(table, column)
    if column not in table.columns:
        raise NotFound(f"the data have no variable {column!r}",
                       hint=f"variables: {', '.join([*map(str, table.columns), *computed])}")
    return table[column]


def computed_column(table: pd.DataFrame, column: str) -> pd.Series:
    """Column ``column`` that ``table`` computes (:data:`COMPUTED`), computed whole, with the table's
    attrs as a stored column has them (its records' positions and provenance: the release history)."""
    computed = table.attrs[COMPUTED][column]
    if computed.source not in table.columns:
        raise NotFound(f"column {column!r} is computed from {computed.source!r}, which this table no longer has",
                       hint=f"keep {computed.source!r} in the table: {column!r} is computed from it when read")
    source = table[computed.source]
    values = np.asarray(LazyColumn(source.to_numpy(dtype=float, na_value=np.nan), computed.function))
    out = pd.Series(values, index=source.index, name=column, copy=False)
    out.attrs = source.attrs
    return out


def _lazy(table: pd.DataFrame, formula: Formula, *, besides: tuple[str | None, ...] = ()
          ) -> dict[str, ComputedColumn]:
    """The formula's terms of one variable that ``table`` computes (:data:`COMPUTED`) and that nothing
    else (``besides``: the response, weights, offset) reads: the design computes them as it reads them."""
    computed = table.attrs.get(COMPUTED, {})
    lazy = {}
    for name in (t.variables[0] for t in formula.terms if len(t.variables) == 1):
        column = computed.get(name.split("$")[-1])
        if ("(" not in name and name not in besides and column is not None and column.source in table.columns
                and name.split("$")[-1] not in table.columns):
            lazy[name] = column
    return lazy


def _computed(table: pd.DataFrame, name: str) -> pd.Series:
    """A formula's ``factor(x)``, ``I(expr)`` or ``log(expr)``, from the table's columns (the parser
    admitted arithmetic only: no comparison, so no cut)."""
    if name.startswith("factor("):
        series = formula_variable(table, name[len("factor("):-1])
        cat = series.astype("category")
        if pd.api.types.is_numeric_dtype(cat.cat.categories.dtype):
            cat = cat.cat.rename_categories([r_number(v) for v in cat.cat.categories])
        return cat
    inner = name[2:-1] if name.startswith("I(") else name
    # the term passed the site's limits when the formula was parsed: re-parsing it needs none
    bound = len(inner) + 1
    node = parse_expression(inner, Limits(max_length=bound, max_name_length=bound, max_depth=bound))

    def read(leaf: Column | Symbol) -> np.ndarray:
        series = formula_variable(table, leaf.column if isinstance(leaf, Column) else leaf.name)
        if _is_factor(series):
            raise CallError(f"{name}: {leaf.to_text()} is a factor, not a number",
                            hint=f"compute {name} from numeric columns only, or enter {leaf.to_text()} as a "
                                 f"factor term of its own (factor({leaf.to_text()}) or {leaf.to_text()})")
        return series.to_numpy(dtype=float, na_value=np.nan)

    return pd.Series(evaluate(node, read, len(table)).values, index=table.index, name=name)


def with_levels(series: pd.Series, levels: list[str], name: str) -> pd.Series:
    """``factor(series, levels = levels)``: refused unless ``series`` is a factor (or text) and
    ``levels`` cover every level it has (a factor's declared categories, else its distinct values):
    a level left out would make its records missing, a cut the analyst chose. The error counts
    what is left out, naming none."""
    if not _is_factor(series):
        raise CallError(f"levels are given for {name}, which is not a factor at this site",
                        hint="give levels for factor or text variables only")
    if isinstance(series.dtype, pd.CategoricalDtype):
        own = [str(c) for c in series.cat.categories]
        text: pd.Series = series.cat.rename_categories(own)
    else:
        own = sorted(set(series.dropna().astype(str)))
        text = series.astype(str).where(series.notna(), None)
    left_out = len(set(own) - set(levels))
    if left_out:
        raise CallError(f"the levels given for {name} leave out {left_out} level(s) it has at this site",
                        hint="give the union of the levels every site declares (levelsDS at each site)")
    return pd.Series(pd.Categorical(text, categories=levels), index=series.index, name=series.name)


def _is_factor(series: pd.Series) -> bool:
    return isinstance(series.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(series.dtype)


def _blocks(series: pd.Series, name: str, function: Callable[[np.ndarray], np.ndarray] | None
            ) -> list[tuple[str, np.ndarray | LazyColumn]]:
    """The design columns of one variable: itself, dummies for levels 2..k, or the column a table
    computes from ``series`` (``function``), computed as it is read."""
    if function is not None:
        return [(name, LazyColumn(series.to_numpy(dtype=float, na_value=np.nan), function))]
    if _is_factor(series):
        cat = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
        levels = [str(c) for c in cat.cat.categories]
        codes = cat.cat.codes.to_numpy()
        return [(f"{name}{lvl}", (codes == i).astype(float)) for i, lvl in enumerate(levels) if i > 0]
    return [(name, series.to_numpy(dtype=float, na_value=np.nan))]


class _Design(NamedTuple):
    columns: list[tuple[str, np.ndarray | LazyColumn]]
    products: list[tuple[tuple[str, bool], ...]]
    factors: dict[str, list[int]]
    levels: dict[str, list[str]]


def _complete_rows(table: pd.DataFrame, names: list[str], lazy: dict[str, ComputedColumn],
                   levels: dict[str, list[str]] | None = None) -> tuple[dict[str, pd.Series], np.ndarray]:
    """The named variables on the records complete in all of them (R's ``na.omit``), and which those
    are; a ``lazy`` variable as the stored column it is computed from (missing where that is); a
    variable ``levels`` names as a factor of those levels (:func:`with_levels`)."""
    series = {name: table[lazy[name].source] if name in lazy else formula_variable(table, name)
              for name in dict.fromkeys(names)}
    for name, given in (levels or {}).items():
        if name not in series:
            raise CallError(f"levels are given for {name!r}, which the model does not read",
                            hint=f"name a variable of the formula: {', '.join(series)}")
        series[name] = with_levels(series[name], given, name)
    complete = np.ones(len(table), dtype=bool)
    for s in series.values():
        complete &= s.notna().to_numpy()
    kept = series if complete.all() else {name: s[complete] for name, s in series.items()}  # all: no copy
    return {name: s.reset_index(drop=True) for name, s in kept.items()}, complete


def _design(formula: Formula, rows: dict[str, pd.Series], n: int, lazy: dict[str, ComputedColumn]) -> _Design:
    """The design columns of the formula's right-hand side over ``rows`` (complete cases), named
    as R's ``model.matrix`` names them; a ``lazy`` variable computed from its source's ``rows`` when
    read (:class:`LazyColumn`)."""
    columns: list[tuple[str, np.ndarray | LazyColumn]] = []
    products: list[tuple[tuple[str, bool], ...]] = []
    if formula.intercept:
        columns.append(("(Intercept)", np.broadcast_to(1.0, (n,))))
        products.append(())
    factors: dict[str, list[int]] = {}
    levels: dict[str, list[str]] = {}
    for term in formula.terms:
        parts = [_blocks(rows[v], v.split("$")[-1], lazy[v].function if v in lazy else None) for v in term.variables]
        if len(term.variables) == 1 and _is_factor(rows[term.variables[0]]):
            name = term.variables[0].split("$")[-1]
            factors[name] = list(range(len(columns), len(columns) + len(parts[0])))
            cat = rows[term.variables[0]]
            cat = cat if isinstance(cat.dtype, pd.CategoricalDtype) else cat.astype("category")
            levels[name] = [str(c) for c in cat.cat.categories]
        combined = parts[0]
        for part in parts[1:]:
            combined = [(f"{a}:{b}", np.asarray(x) * np.asarray(z)) for a, x in combined for b, z in part]
        columns.extend(combined)
        products.extend([tuple((v, _is_factor(rows[v])) for v in term.variables)] * len(combined))
    if not columns:
        raise CallError("the model has no terms")
    return _Design(columns, products, factors, levels)


def design_columns(formula: Formula, table: pd.DataFrame
                   ) -> tuple[list[tuple[str, np.ndarray | LazyColumn]], np.ndarray]:
    """The design columns of the formula's right-hand side (R's ``model.matrix``), named, for the
    records of ``table`` complete in its variables (a prediction needs no response), and which
    records those are; to be read a batch of rows at a time, not stacked whole."""
    lazy = _lazy(table, formula)
    rows, complete = _complete_rows(table, [v for t in formula.terms for v in t.variables], lazy)
    return _design(formula, rows, int(complete.sum()), lazy).columns, complete


def model_frame(
    formula: Formula,
    table: pd.DataFrame,
    *,
    weights: str | None = None,
    offset: str | None = None,
    levels: dict[str, list[str]] | None = None,
) -> ModelFrame:
    if formula.response is None:
        raise CallError("the model formula needs a response (y ~ ...)")
    used = [formula.response, *[v for t in formula.terms for v in t.variables]]
    lazy = _lazy(table, formula, besides=(formula.response, weights, offset))
    rows, complete = _complete_rows(table, used + [v for v in (weights, offset) if v], lazy, levels)
    y_series = rows[formula.response]
    if _is_factor(y_series):
        raise CallError(f"the response {formula.response!r} must be numeric (0/1 for binomial)")
    n = int(complete.sum())
    columns, products, factors, levels = _design(formula, rows, n, lazy)
    names = tuple(c[0] for c in columns)
    # no weights or offset: a constant, read-only vector that takes no memory (numpy broadcasting)
    w = rows[weights].to_numpy(dtype=float) if weights else np.broadcast_to(1.0, (n,))
    if weights and np.any(w < 0):
        raise CallError("weights must be non-negative")
    o = rows[offset].to_numpy(dtype=float) if offset else np.broadcast_to(0.0, (n,))
    y = integer_view(y_series)  # a whole-number outcome as stored (the arithmetic is exact either way)
    return ModelFrame(y_series.to_numpy(dtype=float) if y is None else y, tuple(c[1] for c in columns), names, w, o,
                      len(table), factors, levels, tuple(products))
