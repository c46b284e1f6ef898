"""``predictDS``: an approved model's predictions for a table, kept at the site as a new vector.

The model is a GLM given by numbers (:mod:`dsfed_core.models`), never code: the site builds the
design matrix of its formula from the table as R's ``model.matrix`` would (:mod:`dsfed_server.
modelframe`), checks that the table gives exactly the design columns the model has coefficients
for, and evaluates :math:`g^{-1}(X\\beta)` (``type="response"``) or :math:`X\\beta` (``"link"``).
The predictions stay at the site like any symbol and every release from them is checked as any
other; a model with few distinct outputs (at most n/q) must put at least q records on each.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError, NotFound
from dsfed_core.models import GLMModel
from dsfed_core.parser import parse_formula
from dsfed_server.context import CallContext
from dsfed_server.disclosure.differencing import ROWS, Rows
from dsfed_server.disclosure.provenance import MODEL_COLUMN, MODEL_OUTPUT, ModelColumn
from dsfed_server.families import family
from dsfed_server.modelframe import design_matrix
from dsfed_server.models import approved
from dsfed_server.registry import P, Param, register

TYPES = ("response", "link")


@register(
    "predictDS",
    "assign",
    [
        Param("data", P.TABLE, "the table to predict for, e.g. D"),
        Param("model", P.STRING, "an approved model's name (the site's models.approved), or its SHA-256"),
        Param("type", P.STRING, "'response' (e.g. probabilities) or 'link' (the linear predictor)",
              required=False, default="response", choices=TYPES),
    ],
    checks=("models.approved", "models.analyst_glm", "disclosure.q_threshold"),
)
def predict(ctx: CallContext, data: pd.DataFrame, model: str, type: str) -> pd.Series:
    """The model's predictions for every record of ``data`` (missing where an input is missing).

    The predictions of a model the board approved keep the records' provenance: the site computes
    the model for every record of the table ``data`` comes from
    (:class:`~dsfed_server.disclosure.provenance.ModelColumn`), so cuts on them are checked under one
    history per (table, model), for any subset and analyst, and the sites of a pooled release decide
    them alike. An analyst's own GLM (``models.analyst_glm``) gets none: its cuts are kept under its
    predictions' ordering, which every monotone variant of it shares, so new coefficients do not
    open a fresh history (its binned releases are then decided per site)."""
    name, sha256, by_board = approved(ctx.guard, model)
    glm = ctx.service.models.get(sha256, name)
    values = _apply(glm, name, data, type)
    ctx.guard.distinct_values(values, f"model {name!r}", "predictions",
                              "a model whose outputs single out records is not applied; ask the board about the model")
    out = pd.Series(values, index=data.index, name=f"{name}.{type}")
    declared = (0.0, 1.0) if by_board and type == "response" and glm.family == "binomial" else None
    if declared is not None:
        out.attrs[MODEL_OUTPUT] = (name, declared)  # a probability from a model the board approved
    rows = data.attrs.get(ROWS)
    if isinstance(rows, Rows) and rows.index.size == len(data):
        out.attrs[ROWS] = rows
    if isinstance(rows, Rows) and rows.index.size == len(data) and by_board:
        table = ctx.service.catalog.frame(rows.lineage)
        everyone = values if len(table) == len(data) and np.array_equal(rows.index, np.arange(len(table))) \
            else _apply(glm, name, table, type)
        out.attrs[MODEL_COLUMN] = ModelColumn(f"model {sha256[:16]} {type}", everyone, declared)
    return out


def _apply(glm: GLMModel, name: str, data: pd.DataFrame, type: str) -> np.ndarray:
    """:math:`g^{-1}(X\\beta)` (``"response"``) or :math:`X\\beta` (``"link"``) for every record of
    ``data``, missing where an input is; refused when the table's design columns are not the model's."""
    try:
        X, columns, complete = design_matrix(parse_formula(glm.formula), data)
    except NotFound as exc:
        raise CallError(f"model {name!r} reads what the table lacks: {exc.message}", hint=exc.hint) from None
    lacking = [c for c in columns if c not in glm.coefficients]
    unused = [c for c in glm.coefficients if c not in columns]
    if lacking or unused:
        raise CallError(f"model {name!r} does not fit this table: the table gives design columns "
                        f"{', '.join(lacking) or 'none'} the model has no coefficient for, and the model has "
                        f"coefficients for {', '.join(unused) or 'none'} the table does not give",
                        hint="the model's variables and factor levels must be the table's (docs/functions.md)")
    eta = X @ np.array([glm.coefficients[c] for c in columns])
    values = np.full(len(data), np.nan)
    values[complete] = eta if type == "link" else family(glm.family, glm.link).linkinv(eta)
    return values
