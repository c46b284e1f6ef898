"""``deriveDS``: a new column computed at the site from columns and numbers (a published score from
covariates; dsBaseClient's ``ds.make``/``ds.assign``).

``deriveDS(log(D$pnodes + 1) * 0.5 + ifelse(D$age > 50, 0.3, 0))``, or the expression alone as an
assign text (``datashield.assign(conns, "age2", "D$age*2")``, as ``ds.make`` sends it), which the
site reads as this call. The expression is a call tree (:class:`~dsfed_core.calltree.Arith`,
parsed by :mod:`dsfed_core.parser` within the site's limits) that the site's own interpreter
(:mod:`dsfed_server.arithmetic`) evaluates over numpy; nothing is evaluated as code.

What the site checks before the column exists (the site controls every cut):

- every comparison and every ``pmin``/``pmax``/``abs`` kink cuts one column at a value the analyst
  chose: the cuts of each column go through the release gate as a subset condition's do
  (:meth:`~dsfed_server.disclosure.checks.Guard.derived_cuts`, declared as
  :class:`~dsfed_server.disclosure.declared.DerivedCuts`): each cell between them and every
  cut released before on the column holds q records and the secret margin
  (``disclosure.cut_history``, ``disclosure.cut_margin``), and the records where each comparison
  holds are a row set audited with every row set released before from the table
  (``disclosure.subset_min_difference``): ``ifelse(D$age > 61.5, 1, 0)`` after
  ``ifelse(D$age > 62.5, 1, 0)`` cannot isolate the one record aged 62;
- every part of the expression is read before it is computed
  (:meth:`~dsfed_server.disclosure.checks.Guard.derived_expression`): a cut in disguise (a sign written
  with ``sqrt``, a steep ``exp``, a bump, a spike) is refused, whatever negligible term is added to it;
- a column of several roots or of comparisons with few distinct values (at most n/q) must hold q
  records on each (:meth:`~dsfed_server.disclosure.checks.Guard.distinct_values`, as ``predictDS``
  does for models), and the records of each value are row sets audited likewise; a gentle function of
  one root (``D$age*2``) takes few values only where its root does, and is not held to it.

The new column is kept as the expression over the columns it read, computed when a call reads it
(:mod:`dsfed_server.views`: no 8 bytes a record held between calls). It keeps the records'
positions in the table (row provenance), so subsets of it and every release from it are audited
with the table's history, and its meaning (:class:`~dsfed_server.disclosure.expressions.Meaning`): a
monotone function of one root answers to that root's cut history and has the image of the root's
declared range; a column of several roots has no declared range, so releases that need one (DP noise
on scores, coefficients from the analyst in ``glmDS2``) refuse it, naming the rule.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from functools import partial
from itertools import chain
from typing import Any, Callable

import numpy as np
import pandas as pd

from dsfed_core.calltree import Column, Formula, Limits, Node
from dsfed_core.errors import CallError
from dsfed_core.parser import parse_expression
from dsfed_server.arithmetic import Condition, Leaf, evaluate
from dsfed_server.context import CallContext, r_class
from dsfed_server.disclosure.checks import DERIVED_RULES, GATE_RULES
from dsfed_server.disclosure.declared import Declared, DerivedCuts
from dsfed_server.disclosure.differencing import ROWS, Rows
from dsfed_server.disclosure.expressions import X, Classified, Meaning
from dsfed_server.disclosure.gate import condition_cuts
from dsfed_server.disclosure.provenance import MEANING, meaning, meaning_strata
from dsfed_server.functions.tables import cut_cells
from dsfed_server.registry import P, Param, register
from dsfed_server.rowsets import RowSet
from dsfed_server.summands import columns_read, packed_rows, summands
from dsfed_server.views import ColumnView, Held, kept_vector


def _read(ctx: CallContext, leaves: list[Leaf]) -> tuple[tuple[Held, ...], dict[Leaf, pd.Series]]:
    """What the expression reads as the workspace holds it (the view keeps it), and the columns it
    reads: numeric, of one table's records in the same order."""
    held: list[Held] = []
    columns: dict[Leaf, pd.Series] = {}
    for leaf in leaves:
        kept, value = ctx.held(leaf)
        held.append(kept)
        if not isinstance(value, pd.Series):
            raise CallError(f"{leaf.to_text()!r} is a {r_class(value)}, not a column; an expression reads columns "
                            "(D$age) and numbers")
        if isinstance(value.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(value.dtype):
            raise CallError(f"column {leaf.to_text()!r} is {r_class(value)}, not numeric; an expression computes "
                            "with numbers")
        columns[leaf] = value
    first = next(iter(columns.values()))
    if any(len(c) != len(first) for c in columns.values()):
        lengths = ", ".join(f"{leaf.to_text()} has {len(c)}" for leaf, c in columns.items())
        raise CallError(f"the columns of an expression come from one table: {lengths} records",
                        hint="use columns of one table, e.g. D$age and D$pnodes")
    return tuple(held), columns


def _rows(columns: dict[Leaf, pd.Series]) -> Rows | None:
    """The records' positions in the site table, shared by every column read (None: not known)."""
    found = [c.attrs.get(ROWS) for c in columns.values()]
    first = found[0]
    if not isinstance(first, Rows):
        return None
    if not all(isinstance(r, Rows) and r.lineage == first.lineage and np.array_equal(r.index, first.index)
               for r in found):
        raise CallError("the columns of an expression come from one table (the same records in the same order)",
                        hint="use columns of one table, e.g. D$age and D$pnodes")
    return first


@register(
    "deriveDS",
    "assign",
    [Param("expression", P.EXPRESSION,
           "arithmetic over columns and numbers: + - * / ^, log (base), exp, sqrt, abs, pmin, pmax and "
           "ifelse on comparisons (< <= > >= == !=, & | !), e.g. log(D$pnodes + 1)")],
    checks=GATE_RULES + DERIVED_RULES,
)
def derive(ctx: CallContext, expression: Node) -> Generator[Declared, Any, ColumnView | pd.Series]:
    """A new numeric column computed from columns of one table and numbers (R's semantics: NA
    propagates; what R gives as NaN, Inf or -Inf is missing), kept as the expression over what it
    reads and computed when read (:mod:`dsfed_server.views`). Every comparison and pmin/pmax/abs
    kink is a cut the release gate checks; a column with few values holds q records on each. Also
    reached by an assign text that is an expression (``D$age * 2``)."""
    leaves = columns_read(expression)
    if not leaves:
        raise CallError(f"{expression.to_text()[:80]!r} reads no column", hint="e.g. log(D$pnodes + 1)")
    held, columns = _read(ctx, leaves)
    guard = ctx.guard
    meanings = {leaf: meaning(ctx.service.catalog, column) for leaf, column in columns.items()}
    classified = guard.derived_expression(expression, meanings.__getitem__)
    n = len(next(iter(columns.values())))
    compute = partial(_values, expression, tuple(leaves), n)
    evaluated = evaluate(expression, _numbers(columns), n)
    first = next(iter(columns.values()))
    rows = _rows(columns)
    # a gentle function of one root column (D$age*2, log(D$age)) takes few values only where its root
    # does, and tells no more of them than the root's own sums; cuts hide in combinations and comparisons
    levels = [] if classified.meaning.function is not None else guard.distinct_values(
        evaluated.values, "the expression", "values",
        "a column whose values single out records is not made; use wider cuts or more records")
    row_sets = evaluated.row_sets + levels + _made_missing(columns, evaluated.values)
    conditions = evaluated.conditions + _missing_conditions(classified, meanings, expression)
    found, groups = classified.meaning, ()
    if rows is not None:  # its row sets are kept with their parts in the groups its columns' comparisons make
        theirs = tuple(dict.fromkeys(chain.from_iterable(m.indicators for m in meanings.values())))
        groups = meaning_strata(ctx.service.catalog, replace(found, indicators=theirs), rows)
        compares = evaluated.row_sets or any(c.kink for c in evaluated.conditions)
        own = (partial(_comparisons, expression, tuple(leaves), held, n, rows),) if compares else ()
        found = replace(found, indicators=theirs + own)
    yield DerivedCuts(_cells(ctx, columns, conditions), row_sets, rows, strata=groups)
    if rows is not None and found.function is None:  # a sum of summands, each counted over its own records
        found = replace(found, summands=partial(_summands, expression, meanings, tuple(leaves), held, n, rows))
    attrs = {MEANING: found} if rows is None else {ROWS: rows, MEANING: found}
    view = ColumnView(held, compute, first.index, expression.to_text()[:200], attrs)
    return kept_vector(view, evaluated.values)


def _summands(expression: Node, meanings: dict[Leaf, Meaning], leaves: tuple[Leaf, ...], held: tuple[Held, ...],
              n: int, rows: Rows) -> tuple[tuple[str, tuple[str, ...], bytes, bytes], ...]:
    """The expression's summands (:func:`~dsfed_server.summands.summands`) over what its leaves read now."""
    return summands(expression, meanings, _numbers(dict(zip(leaves, (h.read() for h in held)))), n, rows)


def _comparisons(expression: Node, leaves: tuple[Leaf, ...], held: tuple[Held, ...], n: int, rows: Rows
                 ) -> tuple[str, int, tuple[bytes, ...]]:
    """The records where each comparison of the expression holds, and those below each kink of its ``abs``, ``pmin``
    and ``pmax`` (``pmin(D$region, 1)`` is 0 or 1 on whole numbers), over what its leaves read now: the root table,
    its size, and each row set of it packed (what :func:`~dsfed_server.disclosure.provenance.strata` groups by).
    Kept as this, not as row sets: a derived column holds no values of its own (:mod:`dsfed_server.views`)."""
    read = _numbers(dict(zip(leaves, (h.read() for h in held))))
    evaluated = evaluate(expression, read, n)
    kinks = [read(c.leaf) < c.value for c in evaluated.conditions if c.kink]
    return rows.lineage, rows.n_root, tuple(packed_rows(member, rows) for member in [*evaluated.row_sets, *kinks])


def _numbers(columns: dict[Leaf, pd.Series]) -> Callable[[Leaf], np.ndarray]:
    return lambda leaf: columns[leaf].to_numpy(dtype=float, na_value=np.nan)


def _values(expression: Node, leaves: tuple[Leaf, ...], n: int, *columns: pd.Series) -> np.ndarray:
    """The expression's values over ``columns``, what its ``leaves`` read now (a view's read)."""
    return evaluate(expression, _numbers(dict(zip(leaves, columns))), n).values


def _made_missing(columns: dict[Leaf, pd.Series], values: np.ndarray) -> list[np.ndarray]:
    """Where the expression itself makes a value missing (a division by zero, ``log`` or ``sqrt``
    outside its domain, an overflow) it cuts the records as a comparison does: ``0/(D$age - 62)``
    leaves out the one patient aged 62, and the sums of the column and of ``D$age`` would difference
    that patient out. The records it keeps are then a row set the gate audits (None made missing:
    no row set)."""
    inputs = np.logical_and.reduce([c.notna().to_numpy() for c in columns.values()])
    made = inputs & np.isnan(values)
    return [~made] if made.any() else []


def _missing_conditions(classified: Classified, meanings: dict[Leaf, Meaning], expression: Node) -> list[Condition]:
    """Where a part of the expression is missing over a root's declared range (``log(D$pnodes)`` at 0) it
    cuts the root's records as a comparison does: the cut on a leaf that reads the root (itself, or a
    monotone function of it), for the gate; refused when no leaf reads the root so."""
    out = []
    for root, op, value in classified.missing_cuts:
        for leaf, found in meanings.items():
            if found.root == root and found.function is X:
                out.append(Condition(leaf, op, value))
                break
            if found.root == root and found.monotone and found.function is not None:
                mapped = float(found.function(np.array([value]))[0])
                if np.isfinite(mapped):
                    flipped = op if found.monotone > 0 else {">": "<", "<": ">"}[op]
                    out.append(Condition(leaf, flipped, mapped))
                    break
        else:
            raise CallError(f"{expression.to_text()[:60]!r} is missing for part of the declared range of "
                            f"{root.column}, which it reads only through a column of several roots",
                            hint=f"say where with a comparison on {root.column} itself (ifelse(...))")
    return out


def _cells(ctx: CallContext, columns: dict[Leaf, pd.Series], conditions: list[Condition]) -> list:
    """One declaration of cells per column the expression cuts, with all its cuts."""
    by_leaf: dict[Leaf, list[Condition]] = {}
    for condition in conditions:
        by_leaf.setdefault(condition.leaf, []).append(condition)
    cells = []
    for leaf, found in by_leaf.items():
        cuts = tuple(sorted(set(chain.from_iterable(condition_cuts(c.op, c.value) for c in found))))
        kinks = {cut for c in found if c.kink for cut in condition_cuts(c.op, c.value)}
        cells.append(ctx.guard.kinks_as_released(cut_cells(ctx, columns[leaf], cuts, "expression's cuts"), kinks))
    return cells


def check_formula(ctx: CallContext, formula: Formula, data: pd.DataFrame | RowSet
                  ) -> Generator[Declared, Any, None]:
    """The terms a model formula computes (``I(expr)``, ``log(expr)``, ``exp(expr)``, ``sqrt(expr)``)
    are derived columns the model's sums read: each is read as ``deriveDS`` reads its expression
    (:meth:`~dsfed_server.disclosure.checks.Guard.derived_expression`: a step in disguise inside ``I()``
    would be a cut in every sum of the fit), and where one is missing over a column's declared range
    (``log(tsize)`` at 0), that cut goes through the gate as a comparison's would (declared:
    :class:`~dsfed_server.disclosure.declared.DerivedCuts`). Interactions (``a:b``) are products of columns,
    read as such."""
    computed = [v for t in formula.terms for v in t.variables if "(" in v and not v.startswith("factor(")]
    for variable in dict.fromkeys(computed):
        inner = variable[2:-1] if variable.startswith("I(") else variable
        bound = len(inner) + 1  # the term passed the site's limits when the formula was parsed
        node = parse_expression(inner, Limits(max_length=bound, max_name_length=bound, max_depth=bound))
        leaves = columns_read(node)
        columns = {leaf: _formula_column(data, leaf) for leaf in leaves}
        if any(c is None for c in columns.values()):
            continue  # a variable the table lacks: the model frame names it
        meanings = {leaf: meaning(ctx.service.catalog, c) for leaf, c in columns.items()}  # type: ignore[arg-type]
        classified = ctx.guard.derived_expression(node, meanings.__getitem__)
        conditions = _missing_conditions(classified, meanings, node)
        if conditions:
            yield DerivedCuts(_cells(ctx, columns, conditions), [], _rows(columns),  # type: ignore[arg-type]
                              what=f"where {variable} is missing", instead="or a term defined on the whole range")


def _formula_column(data: pd.DataFrame | RowSet, leaf: Leaf) -> pd.Series | None:
    """The numeric column a formula term reads (a subset builds that column only), or None."""
    name = leaf.column if isinstance(leaf, Column) else leaf.name
    if isinstance(data, RowSet):
        if name not in data.labels:
            return None
        data = data.frame([name])
    if name not in data.columns or not pd.api.types.is_numeric_dtype(data[name].dtype):
        return None
    return data[name]
