"""``predictDS``: an approved model's predictions for a table, kept at the site as a new vector.

The model is never code. A GLM is given by numbers (:mod:`dsfed_core.models`): the site builds the
design matrix of its formula from the table as R's ``model.matrix`` would (:mod:`dsfed_server.
modelframe`), checks that the table gives exactly the design columns the model has coefficients
for, and evaluates :math:`g^{-1}(X\\beta)` (``type="response"``) or :math:`X\\beta` (``"link"``). An
ONNX graph of standard operators (:mod:`dsfed_server.onnx_model`) reads the table's columns by name,
checked against the data dictionary (:mod:`dsfed_server.onnx_inputs`), and onnxruntime gives the
probability of the positive class (``"response"``) or its logit (``"link"``); a record missing an
input gets a missing prediction. The predictions stay at the site like any symbol (a GLM's kept as
the model over the table and computed when a call reads them, :mod:`dsfed_server.views`; an ONNX
graph's as values, computed once, unless the site's ``[catalog] onnx_predictions`` asks for a view
too), and every release from them is checked as any other; a model with few distinct outputs (at
most n/q) must put at least q records on each.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import special

from dsfed_core.errors import CallError, DisclosureRefusal, NotFound
from dsfed_core.models import GLMModel, ModelError
from dsfed_core.parser import parse_formula
from dsfed_server.catalog import Catalog
from dsfed_server.context import CallContext
from dsfed_server.dictionary import Variable
from dsfed_server.disclosure.checks import GATE_RULES
from dsfed_server.disclosure.declared import Declared, DerivedCuts
from dsfed_server.disclosure.differencing import ROWS, Rows, mark_rows, whole_table
from dsfed_server.disclosure.provenance import MODEL_COLUMN, MODEL_OUTPUT, ModelColumn
from dsfed_server.families import family
from dsfed_server.modelframe import R_NAME, design_columns
from dsfed_server.models import approved
from dsfed_server.onnx_inputs import table_inputs
from dsfed_server.onnx_model import ONNXModel, probabilities
from dsfed_server.registry import P, Param, register
from dsfed_server.rowbatches import row_batches
from dsfed_server.rowsets import kept_table
from dsfed_server.views import ColumnView, Held

TYPES = ("response", "link")


@register(
    "predictDS",
    "assign",
    [
        Param("data", P.TABLE, "the table to predict for, e.g. D"),
        Param("model", P.STRING, "an approved model's name (the site's models.approved), or its SHA-256"),
        Param("type", P.STRING, "'response' (e.g. probabilities) or 'link' (the linear predictor; for an "
              "ONNX classifier the logit of its probability)",
              required=False, default="response", choices=TYPES),
    ],
    checks=("models.approved", "models.analyst_glm", "models.onnx") + GATE_RULES,
)
def predict(ctx: CallContext, data: pd.DataFrame, model: str, type: str
            ) -> Generator[Declared, Any, ColumnView | pd.Series]:
    """The model's predictions for every record of ``data`` (missing where an input is missing): a
    GLM's kept as the model over the table and computed when read (:mod:`dsfed_server.views`), an
    ONNX graph's kept as values (a graph's run costs about a second a million records) unless the
    site's ``[catalog] onnx_predictions = "view"`` keeps them as a view too.

    The predictions of a model the board approved keep the records' provenance: the site computes
    the model for every record of the table ``data`` comes from
    (:class:`~dsfed_server.disclosure.provenance.ModelColumn`), so cuts on them are checked under one
    history per (table, model), for any subset and analyst, and the sites of a pooled release decide
    them alike. An analyst's own GLM (``models.analyst_glm``) gets none: its cuts are kept under its
    predictions' ordering, which every monotone variant of it shares, so new coefficients do not
    open a fresh history (its binned releases are then decided per site)."""
    name, sha256, by_board = approved(ctx.guard, model)
    stored = ctx.service.models.get(sha256, name)
    if isinstance(stored, ONNXModel):
        _check_onnx(ctx, name, by_board)
    # kept as a view, computed when read: a GLM's always (X beta, a fraction of a second a read at 1e7
    # records); an ONNX graph's where the site says so (about a second a million records for 100 trees)
    view = isinstance(stored, GLMModel) or ctx.service.config.catalog.onnx_predictions == "view"
    prediction = Prediction(stored, name, type, ctx.service.catalog)
    values = prediction(data)
    hint = "a model whose outputs single out records is not applied; ask the board about the model"
    levels = ctx.guard.distinct_values(values, f"model {name!r}", "predictions", hint)
    probability = isinstance(stored, ONNXModel) or stored.family == "binomial"
    declared = (0.0, 1.0) if by_board and type == "response" and probability else None
    attrs: dict[str, Any] = {}
    if declared is not None:
        attrs[MODEL_OUTPUT] = (name, declared)  # a probability from a model the board approved
    rows = data.attrs.get(ROWS)
    rows = rows if isinstance(rows, Rows) and rows.index.size == len(data) else None
    # a model with few outputs (a tree's leaves, a saturated GLM's 0/1) sorts the records into sets:
    # audited with the table's released row sets, as deriveDS's few values are
    yield DerivedCuts([], levels, rows, what=f"model {name!r}'s outputs", instead=hint)
    if rows is not None:
        attrs[ROWS] = rows
        if by_board:
            served = ctx.service.catalog.served(rows.lineage)
            inputs = prediction.reads([c for c in data.columns if c in served])
            every = partial(prediction.every_record, rows.lineage, inputs)
            if not view:  # computed once, kept as the predictions are
                every = partial(np.asarray, values if rows.whole else every())
            attrs[MODEL_COLUMN] = ModelColumn(f"model {sha256[:16]} {type}", every, declared)
    if not view:
        out = pd.Series(values, index=data.index, name=f"{name}.{type}", copy=False)
        out.attrs = attrs
        return out
    held = Held("data", kept_table(ctx.session.symbols, data))
    return ColumnView((held,), prediction, data.index, f"{name}.{type}", attrs)


@dataclass(frozen=True, eq=False)
class Prediction:
    """An approved ``model``'s predictions of ``type`` for a table's records (a view's computation),
    its inputs read as ``catalog``'s data dictionary declares them."""

    model: GLMModel | ONNXModel
    name: str
    type: str
    catalog: Catalog

    def __call__(self, data: pd.DataFrame) -> np.ndarray:
        def variable(column: str) -> Variable | None:
            return _variable(self.catalog, data, column)

        if isinstance(self.model, ONNXModel):
            return _onnx_predictions(self.model, self.name, data, self.type, variable)
        return _glm_predictions(self.model, self.name, data, self.type, variable)

    def reads(self, columns: list[str]) -> list[str]:
        """Those of ``columns`` the model reads: an ONNX graph's inputs, the names in a GLM's formula."""
        if isinstance(self.model, ONNXModel):
            names = {spec.name for spec in self.model.inputs}
        else:
            names = set(R_NAME.findall(self.model.formula))
        return [c for c in columns if c in names]

    def every_record(self, lineage: str, columns: list[str]) -> np.ndarray:
        """The predictions for every record of site table ``lineage``, from its ``columns`` (their
        data dictionary entries the table's)."""
        table = self.catalog.frame(lineage, columns)
        return self(mark_rows(table, whole_table(lineage, len(table))))


def _glm_predictions(glm: GLMModel, name: str, data: pd.DataFrame, type: str,
                     variable: Callable[[str], Variable | None]) -> np.ndarray:
    for column, unit in glm.units.items():
        entry = variable(column)
        if entry is None or entry.unit != unit:
            has = "no data dictionary entry" if entry is None else f"unit {entry.unit or 'none'!r}"
            raise CallError(f"model {name!r} reads column {column!r} in {unit!r}; this table's data dictionary "
                            f"gives it {has}", hint="convert the model to the site's unit (its data dictionary)")
    try:
        design, complete = design_columns(parse_formula(glm.formula), data)
    except NotFound as exc:
        raise CallError(f"model {name!r} reads what the table lacks: {exc.message}", hint=exc.hint) from None
    columns = [c[0] for c in design]
    lacking = [c for c in columns if c not in glm.coefficients]
    unused = [c for c in glm.coefficients if c not in columns]
    if lacking or unused:
        raise CallError(f"model {name!r} does not fit this table: the table gives design columns "
                        f"{', '.join(lacking) or 'none'} the model has no coefficient for, and the model has "
                        f"coefficients for {', '.join(unused) or 'none'} the table does not give",
                        hint="the model's variables and factor levels must be the table's (docs/functions.md)")
    beta = np.array([glm.coefficients[c] for c in columns])
    linkinv = family(glm.family, glm.link).linkinv
    predicted = np.empty(int(complete.sum()))
    for rows in row_batches(predicted.size):  # X beta a batch of rows at a time: no n x p design matrix
        eta = np.column_stack([c[1][rows] for c in design]) @ beta
        predicted[rows] = eta if type == "link" else linkinv(eta)
    if complete.all():
        return predicted
    values = np.full(len(data), np.nan)
    values[complete] = predicted
    return values


def _check_onnx(ctx: CallContext, name: str, by_board: bool) -> None:
    """Whether this site applies ONNX graph ``name`` (its rules, its board's approval)."""
    if not ctx.guard.rule("models.onnx"):
        raise DisclosureRefusal(f"model {name!r} is an ONNX graph, and this site applies no ONNX graphs",
                                rule="models.onnx", hint="ask the site's governance board")
    if not by_board:
        raise DisclosureRefusal(f"model {name!r} is an ONNX graph, which this site applies only with its board's "
                                "approval (models.analyst_glm covers GLM files only)", rule="models.approved",
                                hint="ask the site's governance board to approve the model")


def _onnx_predictions(model: ONNXModel, name: str, data: pd.DataFrame, type: str,
                      variable: Callable[[str], Variable | None]) -> np.ndarray:
    """P(positive class) (``"response"``) or its logit (``"link"``) by the ONNX graph, for the records
    with every input (:func:`~dsfed_server.onnx_inputs.table_inputs`); missing for the others."""
    columns, complete = table_inputs(model, name, data, variable)
    values = np.full(len(data), np.nan)
    if complete.any():
        try:
            p = probabilities(model, columns)
        except ModelError as exc:
            raise CallError(f"model {name!r}: {exc}", rule="models.onnx",
                            hint="tell the site's administrator and the model's author") from None
        if not np.all((p >= 0) & (p <= 1)):
            raise CallError(f"model {name!r} gives values outside [0, 1] as probabilities", rule="models.onnx",
                            hint="the site reads output 'probabilities' column 1: a classifier's probabilities")
        if type == "link" and np.any((p == 0) | (p == 1)):
            raise CallError(f"model {name!r} gives probability 0 or 1 for some records, whose logit is infinite",
                            hint='use type = "response" for this model')
        values[complete] = special.logit(p) if type == "link" else p
    return values


def _variable(catalog: Catalog, data: pd.DataFrame, column: str) -> Variable | None:
    """The data dictionary entry of ``column`` of the site table ``data`` comes from (None if none)."""
    rows = data.attrs.get(ROWS)
    if not isinstance(rows, Rows):
        return None
    try:
        return catalog.variable(rows.lineage, column)
    except NotFound:
        return None
