"""The site's share of a distributed GLM (Schalk et al. 2024, "Distributed GLM"; Wu et al. 2012, eq. for
Newton-Raphson on summed site parts), with dsBase's names ``glmDS1`` / ``glmDS2``.

For a coefficient vector :math:`\\beta` (or, in the first round, R's
``mustart``) a site returns :math:`X^T W X`, :math:`X^T W z`, the score
:math:`U = X^T W (y - \\mu) / \\mu'(\\eta)` and its deviance, where
:math:`\\eta = X\\beta + \\text{offset}`, :math:`W = w\\,\\mu'(\\eta)^2 / V(\\mu)`
and :math:`z = \\eta - \\text{offset} + (y - \\mu)/\\mu'(\\eta)` exactly as in R's
``glm.fit``. Summed over sites these give the pooled IRLS step
:math:`\\beta_{new} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k`.

Disclosure checks (DataSHIELD ``glmDS1``, :func:`check_frame`): at least q records; at most
``glm_saturation`` x n parameters; factor levels of 0 or at least q records; a binary outcome or
covariate whose smaller level has fewer than q records is refused; so is an outcome computed from a column
that a covariate, the offset or the weights also read (:func:`check_outcome`: separated by construction), and an
outcome that is not a recorded column whose fit of the site's own records gathers its weights on fewer than q.
Coefficients from the analyst (:func:`check_coefficients`) are accepted only where the rules allow them
and only if they keep the linear predictor within ``glm_max_linear_predictor`` over the declared ranges of the data.
"""

from __future__ import annotations

import weakref
from collections.abc import Generator
from dataclasses import dataclass, replace
from functools import partial
from itertools import combinations
from typing import Any, Callable

import numpy as np
import pandas as pd

from dsfed_core.calltree import Column, Formula, Limits
from dsfed_core.parser import parse_expression
from dsfed_server.context import CallContext
from dsfed_server.workspace import Session
from dsfed_server.disclosure.checks import DERIVED_RULES, GATE_RULES, Guard
from dsfed_server.disclosure.declared import Declared, ExactSums
from dsfed_server.disclosure.equations import APART
from dsfed_server.disclosure.differencing import ROWS, Rows, few_levels
from dsfed_server.disclosure.gate import Floor
from dsfed_server.disclosure.expressions import Meaning, forms
from dsfed_server.disclosure.provenance import MEANING, NO_TABLE, PUBLIC_DESIGN
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_core.errors import CallError, DisclosureRefusal, NotFound
from dsfed_server.functions.derive import check_formula
from dsfed_server.families import CLAMPED_BEYOND, FAMILY_NAMES, LINK_NAMES, Family, family as make_family
from dsfed_server.modelframe import COMPUTED, R_NAME, ModelFrame, formula_variable, model_frame
from dsfed_server.registry import P, Param, SecureSum, register
from dsfed_server.rowbatches import row_batches
from dsfed_server.rowsets import RowSet, kept_table
from dsfed_server.summands import columns_read, summands

_CHECKS = ("disclosure.q_threshold", "disclosure.glm_saturation", "disclosure.sums_per_record") + DERIVED_RULES \
    + GATE_RULES
_COEFFICIENT_CHECKS = ("disclosure.glm_analyst_coefficients", "disclosure.glm_max_linear_predictor")
# the parts of a fit that are sums over records (summed over sites by the analyst or securely)
_SUMMED = ("info.matrix", "score.vect", "xwz", "dev", "numsubs", "Nvalid", "Npositive", "Nmissing", "Ntotal")
AFFORDS = "Naffords"  # a protocol's start also sums what each site's count affords over the records it keeps
TAGS = "Ntags"  # and each site's tag of its table (Guard.table_tag): the sum less its own fingerprints the others'



def _frame_of(session: Session, formula: Formula, fam: Family, data: pd.DataFrame | RowSet,
              weights: str | None, offset: str | None, levels: dict[str, list[str]] | None = None) -> ModelFrame:
    """The model frame, built once per session and workspace value (a table, or the subset whose
    table ``data`` is: Fisher scoring asks for the same model again every iteration); the session
    keeps the latest model's only."""
    key = ("glm", formula.to_text(), fam.name, fam.link, weights, offset, repr(levels))
    source = kept_table(session.symbols, data)

    def build() -> ModelFrame:
        try:
            return model_frame(formula, _model_table(source, formula, weights, offset), weights=weights, offset=offset,
                               levels=levels)
        except NotFound:
            if not isinstance(source, RowSet):
                raise
            # a variable the subset lacks: the error names every column it has
            return model_frame(formula, source.frame(), weights=weights, offset=offset, levels=levels)

    return session.memo(key, source, build, one_per_kind=True)


def _model_table(data: pd.DataFrame | RowSet, formula: Formula, weights: str | None, offset: str | None
                 ) -> pd.DataFrame:
    """The table a model reads: ``data``, or of a subset held as its rows only the columns that the
    formula, weights and offset name (a name in their text that is a column, or the column a
    computed column is computed from), built for the call: a GLM of two covariates on a subset of
    ten columns builds two."""
    if not isinstance(data, RowSet):
        return data
    named = set(R_NAME.findall(" ".join(v for v in [formula.to_text(), weights, offset] if v)))
    wanted = {column for name in named for column in data.reads(name)}
    return data.frame([c for c in data.labels if c in wanted])


def _checked_frame(ctx: CallContext, formula: Formula, fam: Family, data: pd.DataFrame | RowSet,
                   weights: str | None, offset: str | None, levels: dict[str, list[str]] | None = None
                   ) -> Generator[Declared, Any, ModelFrame]:
    """The model frame (:func:`_frame_of`), checked against the rules on every call; its computed terms
    read as derived columns are (:func:`~dsfed_server.functions.derive.check_formula`, whose cuts it declares)."""
    yield from check_formula(ctx, formula, data)
    mf = _frame_of(ctx.session, formula, fam, data, weights, offset, levels)
    table = _model_table(data, formula, weights, offset)
    check_frame(ctx.guard, mf, fam, formula, _summand_sets(ctx, mf, table, formula, weights, offset))
    check_outcome(ctx, formula, fam, mf, table, weights, offset)
    return mf


def _summand_sets(ctx: CallContext, mf: ModelFrame, table: pd.DataFrame, formula: Formula, weights: str | None,
                  offset: str | None) -> list[tuple[str, np.ndarray | None]]:
    """Each summand of each derived variable of the model (``I(high + 1e-13*age)``: ``high`` and ``age``), named by
    the formula, with the model's records its 0/1 factors hold (:meth:`~dsfed_server.context.CallContext.
    summand_sets`; None where the model's records cannot be matched with them here): as many at every site."""
    variables = list(dict.fromkeys(v for product in mf.products for v, _ in product))
    read = {v: _read(ctx, table, v)[0] for v in dict.fromkeys([formula.response, *variables,
                                                                *(n for n in (weights, offset) if n)])}
    rows = ctx.record_rows(*read.values())
    matched = rows is not None and rows.index.size == mf.n
    out: list[tuple[str, np.ndarray | None]] = []
    for v in variables:
        if not pd.api.types.is_numeric_dtype(read[v].dtype):
            continue
        if matched:
            sets: list[np.ndarray | None] = list(ctx.summand_sets(read[v], rows))  # type: ignore[arg-type]
        else:
            found = ctx.meaning(read[v])
            sets = [None] * (len(found.summands()) if found.summands is not None else 0)
        out += [(f"{v} (summand {k + 1})", member) for k, member in enumerate(sets)]
    return out


def check_outcome(ctx: CallContext, formula: Formula, fam: Family, mf: ModelFrame, table: pd.DataFrame,
                  weights: str | None, offset: str | None) -> None:
    """The outcome is computed from no column that a covariate, the offset or the weights read
    (:meth:`~dsfed_server.disclosure.checks.Guard.outcome_roots`): each variable's root columns, a computed
    term's (``log(age)``, ``I(age/10)``) those of the columns its expression reads; and an outcome that is
    not a recorded column is not separated by the covariates on this site's records
    (:meth:`~dsfed_server.disclosure.checks.Guard.foreseen_weights`, :func:`own_fit`)."""
    response = formula.response
    if response is None:
        return
    covariates = dict.fromkeys(v for t in formula.terms for v in t.variables if v != response)
    reads = [(f"covariate {v}", _meaning_of(ctx, table, v)) for v in covariates]
    reads += [(f"{what} {v}", _meaning_of(ctx, table, v)) for what, v in (("offset", offset), ("weights", weights))
              if v]
    outcome = (response, _meaning_of(ctx, table, response))
    ctx.guard.outcome_roots(fam.name, fam.link, outcome, reads)
    key = ("glm own fit", formula.to_text(), fam.name, fam.link, weights, offset)

    def path() -> Generator[float, None, None]:  # fitted only if the guard reads it, once per model frame
        yield from ctx.session.memo(key, mf, lambda: list(own_fit(fam, mf)))

    ctx.guard.foreseen_weights(fam.name, fam.link, outcome, path())


def own_fit(fam: Family, mf: ModelFrame, maxit: int = 25) -> Generator[float, None, None]:
    """The effective sample size of the working weights (:func:`_parts`) at each iterate of the fit of this
    site's records alone, as R's ``glm.fit`` runs it: from the start (``mustart``), Fisher scoring until the
    deviance settles (:math:`|D - D_{old}| / (|D| + 0.1) < 10^{-8}`) or ``maxit`` iterations
    (``glm.control``'s defaults); not a number where the deviance is no longer finite."""
    beta, previous = None, np.inf
    for _ in range(maxit + 1):
        try:
            parts, effective = _parts(fam, mf, beta)
        except CallError:  # the deviance overflowed: the weights have gathered beyond measure
            yield float("nan")
            return
        yield effective
        if abs(parts["dev"] - previous) / (abs(parts["dev"]) + 0.1) < 1e-8:
            return
        previous = parts["dev"]
        try:
            beta = np.linalg.solve(np.asarray(parts["info.matrix"]), np.asarray(parts["xwz"]))
        except np.linalg.LinAlgError:  # collinear covariates: the fit's own steps say so
            return


def _meaning_of(ctx: CallContext, table: pd.DataFrame, name: str) -> Meaning:
    """A model variable as a function of root columns: a column's (a column the table computes when read:
    its source's), a computed term's the roots of every column its expression reads."""
    if "(" in name:
        inner = name[len("factor("):-1] if name.startswith("factor(") else name[2:-1] if name.startswith("I(") \
            else name
        bound = len(inner) + 1  # the term passed the site's limits when the formula was parsed
        node = parse_expression(inner, Limits(max_length=bound, max_name_length=bound, max_depth=bound))
        leaves = [_meaning_of(ctx, table, leaf.column if isinstance(leaf, Column) else leaf.name)
                  for leaf in columns_read(node)]
        return Meaning(frozenset().union(*(m.roots for m in leaves)))
    column = name.split("$", 1)[-1]
    computed = table.attrs.get(COMPUTED, {}).get(column)
    if computed is not None and column not in table.columns:
        return ctx.meaning(table[computed.source])
    return ctx.meaning(formula_variable(table, name))


def check_frame(guard: Guard, mf: ModelFrame, fam: Family, formula: Formula,
                summands: list[tuple[str, np.ndarray | None]]) -> None:
    """DataSHIELD's ``glmDS1`` checks, and more: at least q records; at most ``glm_saturation`` x n
    parameters; every level of a factor covariate, the reference level included, holds 0 or at
    least q records (a small reference level would release its records' outcomes through the
    score and information, although a table would refuse that cell); a binary outcome or covariate
    has at least q records at each level; every two of them, and of the derived variables' ``summands``' 0/1
    factors, differ and agree in 0 or at least q records (:func:`_check_pairs`). In a pooled release every count is
    checked pooled (a covariate counts as 0/1 at a site where it takes no other value)."""
    guard.min_count(mf.n, "complete records for the model")
    guard.saturation(len(mf.names), mf.n)
    problem = fam.validate_y(mf.y)
    if problem:
        raise CallError(problem)
    for variable, columns in mf.factors.items():
        dummies = np.column_stack([mf.columns[j] for j in columns])
        counts = [mf.n - int(dummies.sum())] + [int(c) for c in dummies.sum(axis=0)]
        for level, count in zip(mf.levels[variable], counts):
            guard.min_count(count, f"factor {variable}: level {level}", allow_zero=True)
    factor_columns = {j for columns in mf.factors.values() for j in columns}
    covariates = [(f"covariate {name}", mf.columns[j]) for j, name in enumerate(mf.names)
                  if name != "(Intercept)" and j not in factor_columns]
    if fam.name == "binomial":
        guard.min_count(int(np.sum(mf.y == 1)), f"outcome {formula.response}: level 1")
        guard.min_count(int(np.sum(mf.y == 0)), f"outcome {formula.response}: level 0")
    else:
        covariates.insert(0, (f"outcome {formula.response}", mf.y))
    for what, column in covariates:  # a computed column (modelframe.LazyColumn) is read a batch at a time
        if guard.deferred is not None:  # pooled: the two values a 0/1 variable takes, counted at every site
            counts = [sum(int(np.count_nonzero(column[rows] == value)) for rows in row_batches(mf.n))
                      for value in (0, 1)]
            binary = sum(counts) == mf.n  # no other value here: a 0/1 variable (a continuous one that is 0 at a
            for value, count in zip((0, 1), counts):  # few records is none), as the per-site check reads it
                guard.min_count(count if binary else 0, f"{what}: value {value}", allow_zero=True)
            continue
        levels, counts = np.unique(np.asarray(column), return_counts=True)
        if levels.size == 2:
            guard.min_count(int(counts.min()), f"binary {what}: a level")
    _check_pairs(guard, mf, summands)


def _check_pairs(guard: Guard, mf: ModelFrame, summands: list[tuple[str, np.ndarray | None]]) -> None:
    """Every two design columns of two values (a factor's dummies, 0/1 covariates) differ in 0 or at least q records
    and agree in 0 or at least q: nested, ``iii`` inside ``high``, their difference is a group the information and
    the score sum over (``(Intercept) + high`` of ``y ~ iii + high`` is its records' mean outcome, and their number
    is in the information), which neither column's levels show; complements but for a few records likewise. Two
    columns that cross are not checked cell by cell (a two-way table of them would be): the fit sums over no cell
    of theirs on its own. A derived variable's summands count by the records their 0/1 factors hold
    (``I(high + 1e-13*age)`` takes many values, but sums ``high`` over its records). Pooled, the counts are summed
    over the sites (a column counts as 0/1 at a site where it takes no other value; elsewhere its pairs count 0
    there)."""
    pooled = guard.deferred is not None
    sets = []
    for j, name in enumerate(mf.names):
        if name == "(Intercept)":
            continue
        values = _values(mf.columns[j], mf.n)
        distinct = np.unique(values)
        if pooled:
            sets.append((name, values == 1 if np.isin(distinct, (0, 1)).all() else None))
        elif distinct.size == 2:
            sets.append((name, values == distinct[1]))
    sets += [(name, member) for name, member in summands if pooled or member is not None]
    held = [member is not None for _, member in sets]
    matrix = np.column_stack([member if member is not None else np.zeros(mf.n, dtype=bool) for _, member in sets]
                             ) if sets else np.zeros((mf.n, 0))
    both = matrix.T.astype(np.float64) @ matrix.astype(np.float64)  # records in each two sets
    for a, b in combinations(range(len(sets)), 2):
        counted = held[a] and held[b]
        differ = int(round(both[a, a] + both[b, b] - 2 * both[a, b])) if counted else 0
        agree = mf.n - differ if counted else 0
        pair = (f"two-valued covariates {sets[a][0]} and {sets[b][0]} (between them a group the fit would sum over: "
                "fit one of the two, or both as one factor)")
        guard.min_count(differ, f"{pair}: the records where they differ", allow_zero=True)
        guard.min_count(agree, f"{pair}: the records where they agree", allow_zero=True)


def check_coefficients(ctx: CallContext, fam: Family, mf: ModelFrame, data: pd.DataFrame, offset: str | None,
                       beta: np.ndarray) -> None:
    r"""Coefficients the analyst chose (dsBase's ``glmDS2`` protocol) are a differencing tool: a steep
    linear predictor saturates R's inverse link into a step at one record's value, and the
    difference of two deviances gives that record's outcome. They are evaluated only if the rules
    allow analyst coefficients (``disclosure.glm_analyst_coefficients``) and if no record whose
    values lie in the ranges the data dictionary declares could get :math:`|\eta| = |x^T\beta +
    \text{offset}|` above ``disclosure.glm_max_linear_predictor`` (nor above where the link clamps,
    :data:`~dsfed_server.families.CLAMPED_BEYOND`). The bound is interval arithmetic over the declared
    ranges (a factor's dummies one at a time), so it depends on no record: the refusal tells the
    analyst nothing about the data. Within it, the link is smooth and unclamped. A table whose
    covariates the analyst knows (:data:`~dsfed_server.disclosure.provenance.PUBLIC_DESIGN`, the
    ROC-GLM's thresholds) takes no analyst coefficients at all: there, the parts at a few chosen
    coefficient vectors are enough linear equations to solve for the table's counts."""
    if not ctx.guard.rule("disclosure.glm_analyst_coefficients"):
        raise DisclosureRefusal(
            "this site does not evaluate models at coefficients sent by the analyst",
            rule="disclosure.glm_analyst_coefficients",
            hint="fit the model pooled (the sites derive every iterate; the dsfed client does by default)")
    if data.attrs.get(PUBLIC_DESIGN):
        raise DisclosureRefusal(
            "this table's covariates are thresholds the analyst knows: the fit's parts at coefficients of the "
            "analyst's choosing are linear equations in the table's counts, which a few such fits solve",
            rule="disclosure.glm_analyst_coefficients",
            hint="fit the model pooled (the sites derive every iterate; the dsfed client does by default)")
    clamp = CLAMPED_BEYOND[fam.link]
    if clamp is None:
        return
    limit = min(ctx.guard.rule("disclosure.glm_max_linear_predictor"), clamp)

    def declared(variable: str) -> tuple[float, float]:
        if "(" in variable:
            raise DisclosureRefusal(
                f"{variable} is computed in the formula: it has no range declared in the data dictionary, so the "
                "site cannot bound the linear predictor that coefficients from the analyst give",
                rule="disclosure.glm_max_linear_predictor",
                hint="fit the model pooled (the sites derive its coefficients)")
        column = variable.split("$", 1)[-1]
        root = None if column in data.attrs.get(COMPUTED, {}) else ctx.root_column(data[column])
        bounds = root.declared if root is not None else None
        if bounds is None:
            raise DisclosureRefusal(
                f"{column} has no range declared in the site's data dictionary, so the site cannot bound the "
                f"linear predictor that coefficients from the analyst give", rule="disclosure.glm_max_linear_predictor",
                hint="fit the model pooled (the sites derive its coefficients), or ask the site to declare the "
                     "variable's range")
        return bounds

    in_factor = {j for columns in mf.factors.values() for j in columns}
    low = high = 0.0
    for j, product in enumerate(mf.products):
        if j in in_factor:
            continue
        interval = (1.0, 1.0)
        for variable, is_factor in product:
            interval = _times(interval, (0.0, 1.0) if is_factor else declared(variable))
        ends = (beta[j] * interval[0], beta[j] * interval[1])
        low, high = low + min(ends), high + max(ends)
    for columns in mf.factors.values():  # one level at a time: the reference (0) or one dummy
        low, high = low + min(0.0, *beta[columns]), high + max(0.0, *beta[columns])
    if offset:
        lo, hi = declared(offset)
        low, high = low + lo, high + hi
    reach = max(abs(low), abs(high))
    if reach > limit:
        raise DisclosureRefusal(
            f"over the declared ranges of the data these coefficients give a linear predictor up to "
            f"{reach:.4g} in absolute value; the site allows at most {limit:g} (link {fam.link})",
            rule="disclosure.glm_max_linear_predictor",
            hint="fit the model pooled (the sites derive its coefficients); a fit that needs larger values is "
                 "(nearly) separated")


# families and links whose start (R's mustart) has constant working weights: binomial's mustart (y + 0.5)/2 at
# a 0/1 outcome gives mu (1 - mu) = 3/16 at every record; the Gaussian identity fit weighs each record 1. Any
# other start weighs each record by a function of its outcome (a log-linked Gaussian by y^2)
CONSTANT_START = {("binomial", "logit"), ("gaussian", "identity")}
# the fewest counted steps of a fit the analyst iterates: R's glm converges in four to six Fisher-scoring iterations
# on ordinary data, the first at a start of constant weights (DataSHIELD's ds.glm starts at beta = 0)
ANALYST_STEPS = 3


def count_sums(ctx: CallContext, fam: Family, mf: ModelFrame, table: pd.DataFrame, formula: Formula,
               beta: np.ndarray | None, weights: str | None, offset: str | None, *, iterates: bool = False
               ) -> Generator[Declared, Any, tuple[SummedEnd | None, float, float]]:
    """The parts are exact sums over the model's records, counted with every sum released from the table
    (rule ``disclosure.sums_per_record``, :meth:`~dsfed_server.disclosure.checks.Guard.exact_sums`; declared as
    :class:`~dsfed_server.disclosure.declared.ExactSums`).

    Where the working weights are constant (a logistic fit of a 0/1 outcome or a Gaussian identity fit at
    its start, or any fit at coefficients with no slope and no offset; without prior weights) the parts
    are sums of the design columns, their squares and their products with each other, with the outcome
    and, at a start, with the offset (another link at the start weighs each record by a function of its
    outcome, counted as below): a mean, variance or covariance of table columns
    is not counted, of derived columns it is (``y ~ s2 + s3`` with ``s2 = s^2``, ``s3 = s^3`` sums
    :math:`s^5`), as ``corDS``'s are. At any other coefficients the analyst sends, the information
    matrix, the score and the deviance are :math:`p(p+1)/2 + p + 1` new functions of every column of the
    model (``exp(k*x)`` summed for k = 1, 2, ... are power sums of ``exp(x)``, whose roots are the
    records' values; Denning & Schlörer 1983), each over the records where it is not 0. Such a step is one of
    a fit the analyst iterates (DataSHIELD's ``ds.glm``): it is refused first where the records could not
    answer :data:`ANALYST_STEPS` of them, so that the count does not stop the fit part-way after spending
    the table's count on it.

    ``iterates``: the start of a fit whose later iterates the sites derive (the pooled or relayed
    protocol, or the site's own fit run to its end, ``glmSLMADS2``). Its end -- the score equations,
    information and deviance at the estimate -- counts as one coefficient vector's :math:`p(p+1)/2 + p + 1`
    functions where the analyst reads this site's own fit (:func:`own_end`: study-level, relayed over fewer than
    ``secure_aggregation.min_sites`` sites, or over a subset of the table's records): a start of moments says
    nothing of them (``y ~ s``, ``y ~ a`` and ``y ~ s + a`` over a subset of ten records are 19 equations in its
    20 values besides its moments). Study-level (or relayed over this site alone), the estimate is its records'
    alone, and the end counts at the
    start named by the fit's model, offset and weights; summed with other sites', the estimate moves with their
    records (the same model relayed beside another site, or beside other subsets of theirs, ends elsewhere), so
    the end is returned (:class:`SummedEnd`) to count in full at the first iterate, named by it too. A
    least-squares fit's end is its start's moments, but for an offset's: its deviance sums :math:`o^2` and
    :math:`y o`. Over the whole table summed over min_sites sites or more, the estimate is the sum's, which the
    other sites' records move (beside other sites, or other subsets of theirs, the same model has another end
    here), so the end is returned (:class:`SummedEnd`) to count at the first iterate, named by it too, each
    function as a share of one, only where the summed start shows the other sites' counts affording much more
    (:meth:`~dsfed_server.disclosure.checks.Guard.peers_outnumber`: their own parts at the estimate, released
    per site, take this site's out of the sum, as many times as the smallest of the table's one set of peers
    affords). With it, what this site's count affords over the records it keeps
    (:meth:`~dsfed_server.disclosure.checks.Guard.affords`) and its tag of its table. A logistic
    fit of a 0/1 outcome with an offset, which starts at moments, also counts as one function of the offset's
    columns at its start: at its first iterate the offset :math:`o = k s` gives
    the information :math:`\\sum_i \\sigma'(\\beta^{(1)}_k + k s_i)` and the score
    :math:`\\sum_i y_i - \\sigma(\\beta^{(1)}_k + k s_i)`, two equations in a group's scores for every k
    (as many as a calibration-in-the-large can afford on a site of 45 records; a family of slopes cannot).
    Where the start is counted, its functions stand for the fit's, named by the family, the model and
    the offset and weights written exactly (:func:`_exactly`), not up to a straight line as a start's
    own sums are: each later step is at an iterate no analyst chose, but the offset and the weights are
    the analyst's and the fit does not absorb them as it absorbs a rescaled covariate, so inside the
    inverse link each slope is another function (at the first iterate of Poisson ``y ~ 1`` with the
    offset :math:`o = k s` the information is :math:`e^{\\beta^{(1)}} \\sum_i e^{k s_i}`, the k-th power sum
    of :math:`e^{s}`; docs/governance.md). The same fit again has the same iterates and counts nothing
    new."""
    if beta is None:  # R's start (mustart): its working weights are constant for a 0/1 logit or an identity fit
        constant = (weights is None and (fam.name, fam.link) in CONSTANT_START
                    and (fam.name != "binomial" or bool(np.isin(mf.y, (0, 1)).all())))
    else:  # no slope: a constant linear predictor, so constant weights, for every family but Poisson's deviance
        slopes = any(b != 0 for b, product in zip(beta, mf.products) if product)
        constant = weights is None and offset is None and not slopes and fam.name != "poisson"
    variables = {formula.response: None, **{v: None for product in mf.products for v, _ in product}}
    read = {v: _read(ctx, table, v) for v in [*variables, *(n for n in (weights, offset) if n)]}
    rows = ctx.record_rows(*(series for series, _ in read.values()))
    if rows is None or rows.index.size != mf.n:
        return None, ctx.guard.affords(None), 0.0
    written = {v: found for v, (_, found) in read.items()}
    design = [[f"{written[v][0]}={name}" if is_factor else written[v][0] for v, is_factor in product]
              for name, product in zip(mf.names, mf.products)]
    roots = [tuple(sorted({r for v, _ in product for r in written[v][1]})) for product in mf.products]
    nonzero = [_nonzero(column, mf.n) for column in mf.columns]
    y = (f"{written[formula.response][0]}", written[formula.response][1], lambda: np.ones(mf.n, dtype=bool))
    functions: list[tuple[str, tuple[str, ...], Callable[[], np.ndarray]]] = []
    if constant:  # sums of the design columns' products with each other and with the outcome
        # a factor's dummy sums a column over the records of one level, as a table by that factor does
        plain = [sorted(written[v][0] for v, _ in product) for product in mf.products]
        terms = [("*".join(d), r, nz) for d, r, nz in zip(plain, roots, nonzero)] + [y]
        if offset and beta is None:  # the start's X'Wz sums each design column times the offset
            # over the records where it is not 0, as a design column's: one function summed over two row sets
            # that differ by a few records (a logit offset is 0 at a score of 0.5) would count on those few
            o = (written[offset][0], written[offset][1], lambda: np.asarray(mf.offset) != 0)
            terms_with = [(t, o) for t in terms[:-1]]
        else:
            terms_with = []
        for (fa, ra, sa), (fb, rb, sb) in terms_with:
            function, over = (fb, sb) if not fa else ("*({}, {})".format(*sorted((fa, fb))), lambda sa=sa: sa())
            functions.append((function, tuple(sorted({*ra, *rb})), over))
        for a in range(len(terms)):
            for b in range(a, len(terms)):
                (fa, ra, sa), (fb, rb, sb) = terms[a], terms[b]
                if not fa or not fb:  # the intercept: the other term's sum
                    function, over = fa or fb, (sa if fa else sb)
                else:
                    function, over = (f"^({fa}, 2.0)" if a == b else "*({}, {})".format(*sorted((fa, fb)))), \
                        (lambda sa=sa, sb=sb: sa() & sb())
                if function:
                    functions.append((function, tuple(sorted({*ra, *rb})), over))
    text = ["*".join(sorted(d)) or "1" for d in design]
    x_roots = tuple(sorted({r for v, (_, rs) in written.items() if v != formula.response for r in rs}))
    all_roots = tuple(sorted({*x_roots, *y[1]}))

    def parts_at(model: str, functions: list = functions) -> None:
        """The deviance, information and score at one coefficient vector, as functions named ``model``."""
        p = len(text)
        functions.append((f"{model}: deviance", all_roots, lambda: np.ones(mf.n, dtype=bool)))
        functions.extend((f"{model}: information {', '.join(sorted((text[j], text[k])))}", x_roots,
                          lambda j=j, k=k: nonzero[j]() & nonzero[k]()) for j in range(p) for k in range(j, p))
        functions.extend((f"{model}: score {text[j]}", all_roots, nonzero[j]) for j in range(p))

    least_squares = (fam.name, fam.link) == ("gaussian", "identity") and not weights
    own = own_end(ctx, rows, all_roots)
    alone = own and not (ctx.pooled or ctx.beside)  # the site's own fit: its estimate is its records' alone
    if iterates:  # one fit: its model, offset and weights written exactly
        exact = {v: _exactly(ctx, read[v][0]) for v in (offset, weights) if v}
        # the end of a fit the analyst reads is another function for every model (its terms in any order), each
        # covariate written exactly: without an intercept (y ~ 0 + I(s + c)) or in a product whose parts the model
        # lacks (y ~ a:I(s + c)) a straight-line change of it is another fit for every c. A fit summed over
        # min_sites sites counts its start, whose functions at constant weights are the prior weights' and offset's
        named = ["*".join(sorted(_exactly(ctx, read[v][0]) + (f"={name}" if is_factor else "")
                                 for v, is_factor in product)) or "1" for name, product in zip(mf.names, mf.products)]
        response = y[0] if fam.name == "binomial" else _exactly(ctx, read[formula.response][0])
        tail = (f" + {exact[offset]}" if offset else "") + (f"; weights {exact[weights]}" if weights else "") + ")"
        end_model = f"glm({fam.name}, {fam.link}; fit {response} ~ {' + '.join(sorted(named))}{tail}"
        model = end_model if alone else f"glm({fam.name}, {fam.link}; fit{tail}"
    # a 0/1 outcome's intercept-only fit without offset: its end is the share of positives, a moment; a
    # least-squares fit's end is its start's moments, but for an offset's (its deviance sums o^2 and y*o)
    share = constant and not offset and fam.name == "binomial" and list(mf.names) == ["(Intercept)"]
    ends = iterates and (not constant or (not (least_squares and not offset) and not share))
    if iterates and (not constant or (alone and ends)):
        # the fit's parts at its end, where the analyst reads this site's own: a start of moments says nothing of
        # them (three logistic fits of a ten-record subset, y ~ s, y ~ a, y ~ s + a, are 19 equations in its 20
        # values besides the moments)
        parts_at(model)
    elif iterates and constant and offset and not least_squares:
        # summed over min_sites sites or more: a logistic fit of a 0/1 outcome with an offset starts at moments,
        # but at its iterates the offset sits inside the inverse link, where each slope is another function
        functions.append((model, all_roots, lambda: np.ones(mf.n, dtype=bool)))
    elif not constant:
        eta = " + ".join(sorted(f"{b:.17g}*{d}" for b, d in zip(beta, text))) if beta is not None else "start"
        parts_at(f"glm({fam.name}, {fam.link}; {eta}" + (f" + {written[offset][0]}" if offset else "")
                 + (f"; weights {written[weights][0]}" if weights else "") + ")")
    analysts = beta is not None and not constant  # one step of a fit the analyst iterates (DataSHIELD's ds.glm)
    fewer = ("fewer models, offsets or prior weights fitted over the same records (each fit's end counts as its "
             "p(p+1)/2 + p + 1 sums), or a fit over more records")
    # a design column of few values: its products' sums give the outcome's and the other columns' over the records
    # at each value; so do a derived variable's over its 0/1 factors' records (``I(high + 1e-13*age)``), the
    # outcome's included
    sets = [level for column in mf.columns for level in few_levels(_values(column, mf.n), 2)] + [
        member for v in variables for member in ctx.indicator_sets(read[v][0], rows)] if ctx.own_sums else []
    yield ExactSums(rows, functions, steps=ANALYST_STEPS if analysts else 1, alone=ctx.own_sums, sets=sets,
                    hint=fewer if iterates else (
                        "fit the model pooled (the sites derive every coefficient: the dsfed client's ds_glm, or "
                        "DataSHIELD's ds.glmSLMA), or over more records"))
    affords, tag = ctx.guard.affords(rows), ctx.guard.table_tag(rows.lineage)
    if not ends or alone:
        return None, affords, tag

    def at(estimate: np.ndarray) -> ExactSums:
        """The end of this fit, named by its model and its first iterate (the sum's, which the other sites'
        records move: beside other sites, or other subsets of theirs, the same model has another end here)."""
        end: list[tuple[str, tuple[str, ...], Callable[[], np.ndarray]]] = []
        parts_at(f"{'' if own else APART}{end_model[:-1]}; from {first_iterate(estimate, named)})", end)
        return ExactSums(rows, end, hint=fewer if own else (
            "the other sites' counts afford on average more than this site's disclosure.glm_peer_ratio times its "
            "own over the records it fits, so its end counts here, for every analyst (their own parts, released per "
            "site, would take it out of the sum): fewer models over this table"))

    return SummedEnd(at, own, rows.lineage), affords, tag


def first_iterate(estimate: np.ndarray, terms: list[str]) -> str:
    """A fit's first iterate, each coefficient beside its term to 12 digits (the same model with its terms in
    another order has the same name: its solve rounds the last digits otherwise)."""
    return " + ".join(sorted(f"{b:.12g}*{term}" for b, term in zip(estimate, terms)))


@dataclass(frozen=True)
class SummedEnd:
    """This site's parts at the end of a fit summed over sites (``at`` the estimate: declared, named by the fit's
    first iterate), counted in full where the analyst reads the site's own (``own``: relayed over fewer than
    ``secure_aggregation.min_sites`` sites, or over a subset of the table's records), else as a share where the
    other sites outnumber it (:meth:`~dsfed_server.disclosure.checks.Guard.peers_outnumber`)."""

    at: Callable[[np.ndarray], ExactSums]
    own: bool
    table: str


def own_end(ctx: CallContext, rows: Rows, roots: tuple[str, ...]) -> bool:
    """Whether the analyst reads this site's own end of a fit over the records ``rows``: study-level, relayed over
    fewer than ``secure_aggregation.min_sites`` sites, or summed over more but over a subset of the table's records
    (:meth:`~dsfed_server.disclosure.checks.Guard.subset_of_table`), which the other sites' own parts over theirs,
    released per site, take out of the sum (three relayed fits of a ten-record subset beside subsets of 163 and
    169 records at two other sites read all ten). The few records a model's own values leave out (a prediction of
    0 or 1 beside a logit) leave it the table's; so do the records missing one of the model's ``roots`` as the
    table stores it (:func:`stored_complete`): no analyst chooses them, and a fit over the rest is weighed beside
    the other sites by the records it fits, as a fit over the whole table is."""
    return ctx.own_sums or ctx.guard.subset_of_table(rows, stored_complete(ctx, rows, roots))


def stored_complete(ctx: CallContext, rows: Rows, roots: tuple[str, ...]) -> np.ndarray | None:
    """The records of ``rows``' table that hold a value of every one of ``roots`` as the table stores them (the
    complete cases a model of them is fitted over, where no derived column or subset drops more); None where a root
    is not a column of the table (a column without provenance, or one from another table)."""
    present = np.ones(rows.n_root, dtype=bool)
    for root in roots:
        try:
            column = ctx.service.catalog.column(rows.lineage, root)
        except NotFound:
            return None
        if column.size != rows.n_root:
            return None
        present &= column.notna().to_numpy()
    return present


def _exactly(ctx: CallContext, vector: pd.Series) -> str:
    """``vector`` as the function of its root columns it is, constants and all (not up to a straight line:
    inside a link, :math:`e^{k o}` is another function for every k); its core where the site cannot write
    it so (:meth:`~dsfed_server.context.CallContext.written`)."""
    found = ctx.meaning(vector)
    written = forms(found)
    known = written is not None and not any(r.table == NO_TABLE for r in found.roots)
    return written[0] if known else ctx.written(vector)[0]  # type: ignore[index]


def _read(ctx: CallContext, table: pd.DataFrame, name: str) -> tuple[pd.Series, tuple[str, tuple[str, ...]]]:
    """A model variable's records (its source column's, for a column the table computes when read) and
    the function of root columns it is (:meth:`~dsfed_server.context.CallContext.written`)."""
    computed = table.attrs.get(COMPUTED, {}).get(name.split("$", 1)[-1])
    if "(" not in name and computed is not None and name.split("$", 1)[-1] not in table.columns:
        source = table[computed.source]
        core, roots = ctx.written(source)
        return source, (f"{computed.function!r}({core})", roots)
    series = formula_variable(table, name)
    if "(" in name:  # a computed term: its records' positions and what it is, as a derived column's
        inner = name[len("factor("):-1] if name.startswith("factor(") else name[2:-1] if name.startswith("I(") \
            else name
        bound = len(inner) + 1  # the term passed the site's limits when the formula was parsed
        node = parse_expression(inner, Limits(max_length=bound, max_name_length=bound, max_depth=bound))
        leaves = {leaf: formula_variable(table, leaf.column if isinstance(leaf, Column) else leaf.name)
                  for leaf in columns_read(node)}
        rows = ctx.record_rows(*leaves.values(), missing=True) if leaves else None
        attrs: dict[str, Any] = {} if rows is None else {ROWS: rows}
        stored = all((leaf.column if isinstance(leaf, Column) else leaf.name) in table.columns for leaf in leaves)
        if stored and not name.startswith("factor("):  # as check_formula reads it: a computed leaf has no meaning
            meanings = {leaf: ctx.meaning(column) for leaf, column in leaves.items()}
            found = ctx.guard.derived_expression(node, meanings.__getitem__).meaning
            if rows is not None and found.function is None:  # a sum of summands, as a derived column's
                values = {leaf: column.to_numpy(dtype=float, na_value=np.nan) for leaf, column in leaves.items()}
                found = replace(found, summands=partial(summands, node, meanings, values.__getitem__, len(series),
                                                        rows))
            attrs[MEANING] = found
        series = series.copy(deep=False)
        series.attrs = attrs
    return series, ctx.written(series)


def _values(column: np.ndarray | Any, n: int) -> np.ndarray:
    """A design column's values (a computed column read a batch at a time)."""
    return np.concatenate([np.asarray(column[rows], dtype=float) for rows in row_batches(n)]) if n else np.zeros(0)


def _nonzero(column: np.ndarray | Any, n: int) -> Callable[[], np.ndarray]:
    """Where a design column is not 0, computed when asked for (a computed column is read a batch at a time)."""
    def where() -> np.ndarray:
        return np.concatenate([np.asarray(column[rows]) != 0 for rows in row_batches(n)]) if n else \
            np.zeros(0, dtype=bool)
    return where


def _times(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """The product of two intervals."""
    ends = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
    return min(ends), max(ends)


_FORMULA = Param("formula", P.FORMULA, "model formula, e.g. y ~ age + tgrade")
_FAMILY = Param("family", P.STRING, "binomial, poisson or gaussian", choices=FAMILY_NAMES)
_LINK = Param("link", P.STRING, "link function (default: the family's canonical link)", required=False,
              choices=LINK_NAMES)
_WEIGHTS = Param("weights", P.NAME, "column of prior weights", required=False)
_OFFSET = Param("offset", P.NAME, "column of offsets", required=False)
_XLEV = Param("xlev", P.STRINGS, "a factor's levels, the same at every site (R's model.frame xlev): one "
              "\"variable=level1,level2,...\" per factor, covering the levels it has here", required=False)


def factor_levels(xlev: list[str] | None) -> dict[str, list[str]] | None:
    """``xlev``'s entries (``"ward=icu,medicine,surgery"``) as variable -> levels, in the order given."""
    if not xlev:
        return None
    out: dict[str, list[str]] = {}
    for entry in xlev:
        name, sep, text = entry.partition("=")
        levels = [level.strip() for level in text.split(",")]
        if not sep or not name.strip() or "" in levels or len(set(levels)) != len(levels) or name.strip() in out:
            raise CallError(f"xlev entry {entry!r} is not \"variable=level1,level2,...\" with distinct levels, "
                            "one entry per variable")
        out[name.strip()] = levels
    return out


@register("glmDS1", "aggregate",
          [_FORMULA, _FAMILY, _WEIGHTS, _OFFSET, Param("data", P.TABLE, "the table", rows_only=True), _LINK, _XLEV],
          checks=_CHECKS)
def glm_check(ctx: CallContext, formula: Formula, family: str, weights: str | None, offset: str | None,
              data: pd.DataFrame | RowSet, link: str | None, xlev: list[str] | None
              ) -> Generator[Declared, Any, dict[str, Any]]:
    """Check a model against the site's rules and return its dimensions and coefficient names."""
    mf = yield from _checked_frame(ctx, formula, make_family(family, link), data, weights, offset, factor_levels(xlev))
    return {"dimX": [mf.n, len(mf.names)], "coef.names": list(mf.names), "errorMessage": "No errors"}


@register(
    "glmDS2",
    "aggregate",
    [
        _FORMULA,
        _FAMILY,
        Param("beta.vect", P.NUMBERS, "current coefficients (omit for R's starting values)", required=False),
        _OFFSET,
        _WEIGHTS,
        Param("dataName", P.TABLE, "the table", rows_only=True),
        _LINK,
        _XLEV,
    ],
    checks=_CHECKS + _COEFFICIENT_CHECKS + ("disclosure.glm_peer_ratio",),
    secure_sum=SecureSum(fields=_SUMMED, public=("family", "link", "coef.names")),
    relayable=True,
)
def glm_parts(ctx: CallContext, formula: Formula, family: str, beta_vect: list[float] | None,
              offset: str | None, weights: str | None, dataName: pd.DataFrame | RowSet, link: str | None,
              xlev: list[str] | None) -> Generator[Declared, Any, dict[str, Any] | PooledSteps]:
    """This site's IRLS parts at ``beta.vect``: information matrix, score, X'Wz and deviance.

    As a pooled or relayed release without ``beta.vect``, the whole fit is a protocol of several
    steps (:func:`irls_steps`): the sites derive every iterate from the summed parts themselves.
    ``xlev`` gives factors the same levels at every site (a level a site lacks is an all-zero
    dummy there), so that the sites' parts line up."""
    fam = make_family(family, link)
    levels = factor_levels(xlev)
    mf = yield from _checked_frame(ctx, formula, fam, dataName, weights, offset, levels)
    table = _model_table(dataName, formula, weights, offset)
    if (ctx.pooled or ctx.relayed) and beta_vect is None:
        end, affords, tag = yield from count_sums(ctx, fam, mf, table, formula, None, weights, offset, iterates=True)
        return irls_steps(fam, _weak_frame(ctx.session, formula, fam, dataName, weights, offset, levels), None,
                          guard=ctx.guard, end=end, affords=affords, tag=tag)
    beta = None if beta_vect is None else np.asarray(beta_vect, dtype=float)
    if beta is not None:
        if beta.size != len(mf.names):
            raise CallError(f"beta.vect has {beta.size} values; the model has {len(mf.names)} coefficients")
        if not np.all(np.isfinite(beta)):
            raise CallError("beta.vect must be finite numbers")
        check_coefficients(ctx, fam, mf, table, offset, beta)
    yield from count_sums(ctx, fam, mf, table, formula, beta, weights, offset)
    return {"family": fam.name, "link": fam.link, "coef.names": list(mf.names),
            **checked_parts(ctx.guard, fam, mf, beta),
            "disclosure.risk": 0, "errorMessage2": "No errors"}


WEIGHTS_HINT = ("a model whose covariates do not separate the outcome, a less steep offset or weights, or more "
                "records; a fit that does not converge: use the last iterate released")


def checked_parts(guard: Guard, fam: Family, mf: ModelFrame, beta: np.ndarray | None, *,
                  hint: str = WEIGHTS_HINT) -> dict[str, Any]:
    """:func:`_parts`' quantities, refused where its working weights rest on fewer than q records
    (:meth:`~dsfed_server.disclosure.checks.Guard.working_weights`)."""
    found, effective = _parts(fam, mf, beta)
    guard.working_weights(fam.name, effective, hint=hint)
    return found


def _parts(fam: Family, mf: ModelFrame, beta: np.ndarray | None) -> tuple[dict[str, Any], float]:
    """R's ``glm.fit`` quantities at ``beta`` (or, for None, at the family's ``mustart``), summed over rows in
    batches of :data:`~dsfed_server.rowbatches.BATCH_ROWS` (the working vectors of a batch are all the memory a
    call adds to the model frame), and how many records the working weights :math:`W` rest on: Kish's effective
    sample size :math:`(\\sum_i W_i)^2 / \\sum_i W_i^2` (Kish 1965; 0 where every weight is 0)."""
    p = len(mf.names)
    info, score, xwz, dev = np.zeros((p, p)), np.zeros(p), np.zeros(p), 0.0
    total = squares = 0.0
    for rows in row_batches(mf.n):
        X, y, weights, offset = mf.design(rows), mf.y[rows], mf.weights[rows], mf.offset[rows]
        if beta is None:
            mu = fam.mustart(y, weights)
            eta = fam.linkfun(mu)
            mu = fam.linkinv(eta)
        else:
            eta = X @ beta + offset
            mu = fam.linkinv(eta)
        mu_eta = fam.mu_eta(eta)
        variance = fam.variance(mu)
        good = (weights > 0) & (mu_eta != 0)
        w = np.where(good, weights * mu_eta**2 / np.where(good, variance, 1.0), 0.0)
        resid = (y - mu) / mu_eta
        z = eta - offset + resid
        total, squares = total + float(w.sum()), squares + float(np.dot(w, w))
        xw = X * w[:, None]
        info += xw.T @ X
        score += xw.T @ resid
        xwz += xw.T @ z
        dev += float(np.sum(fam.dev_resids(y, mu, weights)))
    if not np.isfinite(dev):
        raise CallError("the deviance is not finite at these coefficients; try other starting values")
    return ({
        "info.matrix": info.tolist(),
        "score.vect": score.tolist(),
        "xwz": xwz.tolist(),
        "dev": dev,
        "numsubs": mf.n,
        "Nvalid": mf.n,
        "Npositive": int(np.count_nonzero(mf.weights > 0)),
        "Nmissing": mf.n_total - mf.n,
        "Ntotal": mf.n_total,
    }, total**2 / squares if squares > 0 else 0.0)


FIRST_HEADROOM = 24  # bits to spare for the parts of the first iterate after the start


def pooled_frac_bits(info: np.ndarray, xwz: np.ndarray, dev: float, n_sites: int = 16, headroom: int = 8) -> int:
    """Fixed-point bits for the next step: as many as the 64-bit range allows for sums of the size
    the pooled parts have (derived alike at every site), ``headroom`` bits to spare, 24 to 40."""
    size = max(float(np.abs(info).max()), float(np.abs(xwz).max()), abs(dev), 1.0)
    return int(np.clip(63 - headroom - np.ceil(np.log2(size * n_sites)), 24, 40))


def _weak_frame(session: Session, formula: Formula, fam: Family, data: pd.DataFrame | RowSet,
                weights: str | None, offset: str | None, levels: dict[str, list[str]] | None
                ) -> Callable[[], ModelFrame]:
    """The model frame of ``data`` on demand, holding the workspace value it is (the table, or the
    subset whose table it is) by a weak reference: a step the analyst never opens (the last one
    sealed after the fit converged) keeps no table or model frame alive once the symbol is removed
    or reassigned."""
    table = weakref.ref(kept_table(session.symbols, data))

    def frame() -> ModelFrame:
        data = table()
        if data is None:
            raise CallError("the table of this fit was removed or reassigned since its previous step",
                            hint="fit the model again")
        return _frame_of(session, formula, fam, data, weights, offset, levels)

    return frame


def irls_steps(fam: Family, frame: Callable[[], ModelFrame], beta: np.ndarray | None, *, guard: Guard,
               end: SummedEnd | None = None, affords: float = 0.0, tag: float = 0.0) -> PooledSteps:
    """The distributed Fisher scoring as a pooled protocol (the iterates come from the sites).

    Step t seals this site's parts at :math:`\\beta^{(t)}`; pooled, the sites release the summed
    parts (what the analyst needs to follow the fit and to stop it: the deviance) and every site
    derives :math:`\\beta^{(t+1)} = (\\sum_k X_k^T W_k X_k)^{-1} \\sum_k X_k^T W_k z_k` itself (Wu et al. 2012,
    Newton-Raphson on summed parts). No coefficient comes from the analyst, so none can saturate
    the linear predictor into a step around a record. ``frame`` gives the model frame
    (:func:`_weak_frame`).

    But the data steer the iterates, and the analyst chooses the data: where the covariates separate
    a binary outcome (the outcome ``ifelse(s > t, 1, 0)`` against ``s``), Fisher scoring does not converge
    and the slope grows at every step (Albert & Anderson 1984). At a steep step the weights
    :math:`W_i = \\mu_i(1 - \\mu_i)` vanish but at the records next to the boundary, and the information's
    three sums :math:`\\sum_i W_i (1, s_i, s_i^2)` are three equations in those two or three records' values,
    the steep smooth step that :mod:`~dsfed_server.disclosure.expressions` refuses as a derived column. So a
    step whose weights rest on fewer than q records (:meth:`Guard.working_weights`; Kish's effective sample
    size, :func:`_parts`) is refused: a binomial fit is then (nearly) separated, and R's ``glm`` would warn
    that fitted probabilities of 0 or 1 occurred. Every family's steps, the start included, are checked: a
    Poisson fit weighs each record by its mean :math:`e^{\\eta_i}`, which a steep offset (``1000*score``)
    puts on one record.

    ``end``: this site's parts at the end of a fit summed over the sites (:func:`count_sums`), counted at the first
    iterate and named by it: in full where the analyst reads the site's own; over its whole table, each function as
    a share of one, where the summed start shows the other sites keeping so many more records that their own parts
    could take this site's out of the sum (:meth:`Guard.peers_outnumber`), and where they afford less, over the
    same tables of theirs every time (:meth:`Guard.same_peer_tables`); the start sums ``affords``, what each
    site's count affords over the records it keeps (:meth:`Guard.affords`), and ``tag``, its tag of its table."""
    mf = frame()
    n = mf.n
    mine, effective = _parts(fam, mf, beta)
    guard.working_weights(fam.name, effective, hint=WEIGHTS_HINT)
    names = list(mf.names)
    del mf  # the next step asks ``frame`` again
    fields = {name: np.asarray(mine[name], dtype=float) for name in _SUMMED}
    if beta is None:
        fields[AFFORDS], fields[TAGS] = np.asarray(float(affords)), np.asarray(tag)

    def advance(pooled: dict[str, np.ndarray], floor: Floor
                ) -> Generator[Declared, Any, tuple[dict[str, Any], PooledSteps]]:
        release = {"family": fam.name, "link": fam.link, "coef.names": names, "pooled": True,
                   **{name: v.tolist() if v.ndim else float(v) for name, v in pooled.items()
                      if name not in (AFFORDS, TAGS)}}  # the sites' own, for the count
        try:
            following = np.linalg.solve(pooled["info.matrix"], pooled["xwz"])
        except np.linalg.LinAlgError:
            raise CallError("the pooled information matrix is singular: the model cannot be fitted "
                            "(a covariate constant over all records, collinear covariates, or covariates that "
                            "separate the outcomes, whose fitted probabilities then reach 0 or 1)") from None
        if end is not None and (end.own or guard.peers_outnumber(n, affords, float(pooled[AFFORDS]), floor.sites)):
            yield end.at(following)
        elif end is not None:  # the other sites' counts bound its taking apart: per table they keep
            guard.same_peer_tables(end.table, float(pooled[TAGS]) - tag)
        step = irls_steps(fam, frame, following, guard=guard)
        # from the start (beta 0) the first iterate's parts can be thousands of times larger (a weighted
        # probit ROC-GLM: 4e3 to 6e6, which overflowed at 40 bits); later iterates change little, and
        # an identity-link gaussian model's X'WX and X'Wz do not depend on beta at all
        grows = beta is None and not (fam.name == "gaussian" and fam.link == "identity")
        step.frac_bits = pooled_frac_bits(pooled["info.matrix"], pooled["xwz"], float(pooled["dev"]),
                                          headroom=FIRST_HEADROOM if grows else 8)
        return release, step

    return PooledSteps(fields, advance, frac_bits=24 if beta is None else None)
