"""Summaries of a variable by the groups of one or two factors: dsBase ``meanSdGpDS``, ``tapplyDS``
and ``tapplyDS.assign`` under their names and signatures (dsfed's own implementation).

The group sizes are a table of counts like ``table1DDS``'s and go through the same release gate
(:class:`~dsfed_server.disclosure.gate.Categories`), released before anything is computed by group: each
function is a generator that declares them (``yield`` :class:`~dsfed_server.disclosure.declared.Groups`)
and receives the groups withheld, the service releasing them (:func:`~dsfed_server.disclosure.declared.run`).
A group holding 0 < n < q records refuses the whole answer (dsBase answers ``Table_valid = FALSE`` or an
error text instead). ``tapplyDS.assign`` applies the same rule although nothing leaves the site --
stricter than dsBase, which applies none there: a group mean of one record is that record's value, and
any later release built on it would release it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Callable

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError, DisclosureRefusal
from dsfed_server.context import CallContext, numeric, r_class
from dsfed_server.disclosure.checks import GATE_RULES, LEVEL_RULES
from dsfed_server.disclosure.declared import Declared, Groups
from dsfed_server.registry import P, Param, register

_CHECKS = (*LEVEL_RULES, *GATE_RULES, "disclosure.sums_per_record")
VALID = "All tables valid"


def _statistic(name: str) -> Callable[[np.ndarray], float]:
    """R's mean, sd (n - 1) and sum by the names ``tapplyDS`` accepts."""
    functions: dict[str, Callable[[np.ndarray], float]] = {
        "mean": lambda v: float(np.mean(v)),
        "sd": lambda v: float(np.std(v, ddof=1)) if v.size > 1 else float("nan"),
        "sum": lambda v: float(np.sum(v)),
    }
    key = name.lower()
    if key not in functions:
        raise CallError(f"FUN.name {name!r} is not offered; use mean, sd or sum (quantiles by group are not offered)")
    return functions[key]


def _groups(ctx: CallContext, X: pd.Series, factors: list[pd.Series]
            ) -> Generator[Declared, Any, tuple[np.ndarray, np.ndarray, list[int], list[int]]]:
    """The values of the records complete in ``X`` and every factor, and each one's cell (column-major
    over the factors' levels), the cell counts declared for release (:class:`~dsfed_server.disclosure.
    declared.Groups`, which the service releases before anything is computed by group); the factors'
    numbers of levels; and the cells the release withholds
    (:meth:`~dsfed_server.disclosure.checks.Guard.release_groups`)."""
    x = numeric(X, "X")
    for factor in factors:
        if r_class(factor) != "factor":
            raise CallError(f"the grouping variables must be factors, got a {r_class(factor)} vector",
                            hint="make one with ds.asFactor")
        if len(factor) != x.size:
            raise CallError("the variable and the grouping factors differ in length")
    complete = ~np.isnan(x)
    for factor in factors:
        complete &= factor.notna().to_numpy()
    shape = [len(f.cat.categories) for f in factors]
    for n_levels in shape:
        ctx.guard.factor_levels(n_levels, x.size, "a grouping factor")
    cells = np.zeros(int(complete.sum()), dtype=np.int64)
    stride = 1
    for factor, n_levels in zip(factors, shape):
        cells += stride * factor.cat.codes.to_numpy()[complete].astype(np.int64)
        stride *= n_levels
    withheld = yield Groups(cells, stride, ctx.record_rows(X, *factors))
    return x[complete], cells, shape, withheld


def _withheld_reason(ctx: CallContext, factors: list[pd.Series], withheld: list[int]) -> str:
    """Why the groups ``withheld`` (cells, column-major over the factors' levels) are withheld, naming
    them. The same words whatever the cause (records missing the variable, or another earlier release):
    which it is depends on counts that are not released."""
    shape = tuple(len(f.cat.categories) for f in factors)
    levels = [np.unravel_index(c, shape, order="F") for c in withheld]
    names = ", ".join(".".join(str(f.cat.categories[i]) for f, i in zip(factors, at)) for at in levels)
    minimum = ctx.guard.rule("disclosure.subset_min_difference")
    return (f"{len(withheld)} group(s) withheld ({names}): their records with a value differ from an earlier "
            "release over their records (a table of the factor, an earlier subset or cell, by any analyst), in a "
            f"group or in the withheld groups together, by fewer than {minimum} records, for instance those missing "
            "the variable: the two would give how many they are, and sums over their values "
            "(rule disclosure.subset_min_difference)")


def _by_cell(values: np.ndarray, cells: np.ndarray, n_cells: int, fun: Callable[[np.ndarray], float]
             ) -> list[float | None]:
    """``fun`` over each cell's values; None (R's NA) for an empty cell."""
    return [fun(values[cells == c]) if np.any(cells == c) else None for c in range(n_cells)]


# --- meanSdGpDS ------------------------------------------------------------------------------


@register("meanSdGpDS", "aggregate", [
    Param("X", P.VECTOR, "a numeric vector, e.g. D$age"),
    Param("INDEX", P.VECTOR, "a factor, e.g. D$tgrade"),
], checks=_CHECKS)
def mean_sd_by_group(ctx: CallContext, X: pd.Series, INDEX: pd.Series) -> Generator[Declared, Any, dict[str, Any]]:
    """Mean, standard deviation and size of ``X`` in each group of the factor ``INDEX`` (dsBase
    ``meanSdGpDS``, as ``ds.meanSdGp`` sends it), over the records complete in both.

    Returns dsBase's ``Table_valid``, ``Mean_gp``, ``StDev_gp`` and ``N_gp`` over the groups that
    hold records, ``Nvalid``, ``Nmissing``, ``Ntotal`` and ``Message``, then ``groups``: the groups'
    level numbers, which name them in dsBase's arrays (its ``cbind`` turns the factor into numbers). A group
    of 0 < n < q records refuses the whole answer (``disclosure.q_threshold``), where dsBase answers
    ``Table_valid = FALSE``.

    A group whose records with a value differ from an earlier row set of the table (the group's cell of an
    earlier table of ``INDEX``, say) by fewer than ``disclosure.subset_min_difference`` records -- a few of
    the group's records missing ``X`` -- is withheld and the others released: the withheld group's mean,
    SD and size are None (R's NA), ``Nvalid`` and ``Nmissing`` are None too (with the released groups they
    would give the withheld groups' size), ``withheld`` lists their level numbers and ``Message`` says
    which and why (:meth:`~dsfed_server.disclosure.checks.Guard.release_groups`).
    """
    values, cells, shape, withheld = yield from _groups(ctx, X, [INDEX])
    yield from ctx.summed(X, squares=True, by=(INDEX,), cells=np.where(np.isin(cells, withheld), -1, cells))
    held = [c for c in range(shape[0]) if np.any(cells == c)]
    sd = _statistic("sd")

    def each(statistic: Callable[[np.ndarray], float | int]) -> list[float | int | None]:
        return [None if c in withheld else statistic(values[cells == c]) for c in held]

    return {
        "Table_valid": True,
        "Mean_gp": each(lambda v: float(np.mean(v))),
        "StDev_gp": each(sd),
        "N_gp": each(lambda v: int(v.size)),
        "Nvalid": None if withheld else int(values.size),
        "Nmissing": None if withheld else len(X) - int(values.size),
        "Ntotal": len(X),
        "Message": _withheld_reason(ctx, [INDEX], withheld) if withheld else VALID,
        "groups": [str(c + 1) for c in held],
        "withheld": [str(c + 1) for c in withheld],
    }


# --- tapplyDS, tapplyDS.assign ---------------------------------------------------------------

_TAPPLY = [
    Param("X.name", P.VECTOR, "the numeric variable summarised, e.g. \"D$age\""),
    Param("INDEX.names.transmit", P.STRING, "one or two factors, comma-separated, e.g. \"D$tgrade,D$horTh\""),
    Param("FUN.name", P.STRING, "mean, sd or sum"),
]


def _tapply(ctx: CallContext, x_name: pd.Series, index_names: str, fun_name: str
            ) -> Generator[Declared, Any, dict[str, Any]]:
    """``tapply(X, INDEX, FUN)`` and ``tapply(X, INDEX, length)`` over the complete records, each
    flat in R's column-major order (empty cells None, R's NA), with ``dim`` and ``dimnames`` (each
    dimension's names ``<factor>.<level>``, as dsBase names them)."""
    fun = _statistic(fun_name)
    names = [n.strip() for n in index_names.split(",") if n.strip()]
    if not 1 <= len(names) <= 2:
        raise CallError(f"INDEX.names.transmit names {len(names)} factors; tapplyDS takes one or two")
    factors = [ctx.resolve(ctx.parse_reference(n)) for n in names]
    if not all(isinstance(f, pd.Series) for f in factors):
        raise CallError("INDEX.names.transmit must name factors (vectors), e.g. \"D$tgrade\"")
    values, cells, shape, withheld = yield from _groups(ctx, x_name, factors)
    if withheld:
        raise DisclosureRefusal(_withheld_reason(ctx, factors, withheld),
                                rule="disclosure.subset_min_difference",
                                hint="ds.meanSdGp of one factor releases the other groups and withholds these")
    yield from ctx.summed(x_name, squares=fun_name.lower() == "sd", by=tuple(factors), cells=cells)
    n_cells = int(np.prod(shape))
    label = {"mean": "Mean", "sd": "SD", "sum": "Sum"}[fun_name.lower()]
    return {label: _by_cell(values, cells, n_cells, fun),
            "N": [int(n) if n else None for n in np.bincount(cells, minlength=n_cells)],
            "dim": shape,
            "dimnames": [[f"{n}.{level}" for level in f.cat.categories] for n, f in zip(names, factors)]}


@register("tapplyDS", "aggregate", _TAPPLY, checks=_CHECKS)
def tapply(ctx: CallContext, X_name: pd.Series, INDEX_names_transmit: str, FUN_name: str
           ) -> Generator[Declared, Any, dict[str, Any]]:
    """A summary (mean, sd or sum) of a variable in each cell of one or two factors, and the cells'
    sizes (dsBase ``tapplyDS``, as ``ds.tapply`` sends it): ``Mean`` (or ``SD``, ``Sum``) and ``N``,
    flat in R's column-major order, with ``dim`` and ``dimnames`` (``<factor>.<level>``); through
    the DataSHIELD door, dsBase's ``list(Mean = <array>, N = <array>)``. A cell of 0 < n < q records refuses the answer
    (``disclosure.q_threshold``; dsBase answers an error text). Quantiles by group are not offered."""
    return (yield from _tapply(ctx, X_name, INDEX_names_transmit, FUN_name))


@register("tapplyDS.assign", "assign", _TAPPLY, checks=_CHECKS)
def tapply_assign(ctx: CallContext, X_name: pd.Series, INDEX_names_transmit: str, FUN_name: str
                  ) -> Generator[Declared, Any, pd.DataFrame]:
    """``tapplyDS``'s summary kept on the site (dsBase ``tapplyDS.assign``, as ``ds.tapply.assign``
    sends it), as a table with one row per cell (R's column-major order over the factors' levels)
    and the columns ``<Mean|SD|Sum>`` and ``N`` (dsBase keeps an R list of two arrays).

    Its cells pass the same rule as ``tapplyDS``'s although nothing leaves the site -- stricter than
    dsBase, which checks nothing: a cell summary of fewer than q records would be released by any
    later function that reads it.
    """
    summary = yield from _tapply(ctx, X_name, INDEX_names_transmit, FUN_name)
    return pd.DataFrame({label: pd.Series(values, dtype="Int64" if label == "N" else "float64")
                         for label, values in summary.items() if label not in ("dim", "dimnames")})
