"""An ONNX model's inputs read from a table: each graph input is the column of the same name, checked
against the site's data dictionary (:mod:`dsfed_server.catalog`) before the model runs.

A string input reads a categorical column (``valueType`` text with categories) and the categories
the model declares (``dsfed.categories.<input>``) must be the dictionary's, name for name: a
category the model does not know would be scored as none of its categories, one the table never
holds is a different coding (``3`` for ``III``). A float, double or int64 input reads a numeric
column (int64 only a whole-number one), and a unit the model declares (``dsfed.unit.<input>``)
must be the dictionary's (``months`` where the site records ``years`` is refused). Each refusal
names the model, the column and the rule (``models.onnx``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError
from dsfed_server.dictionary import Variable
from dsfed_server.onnx_model import ONNXModel, OnnxInput

RULE = "models.onnx"


def _refuse(model: str, column: str, problem: str, hint: str) -> CallError:
    return CallError(f"model {model!r} reads column {column!r}: {problem}", rule=RULE, hint=hint)


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def _check(spec: OnnxInput, variable: Variable, model: str) -> None:
    if spec.element == "string":
        if variable.value_type != "text" or not variable.categories:
            declared = ("a text variable without categories" if variable.value_type == "text"
                        else f"{_article(variable.value_type)} {variable.value_type} variable")
            raise _refuse(model, spec.name, f"the model reads text categories, the data dictionary declares "
                          f"{declared}", "the model's input must be a categorical column of this table")
        if set(spec.categories or ()) != set(variable.categories):
            raise _refuse(model, spec.name, f"the model expects categories {list(spec.categories or ())}, the data "
                          f"dictionary declares {list(variable.categories)}",
                          "the model's categories must be the table's, name for name (re-export the model)")
        return
    if variable.value_type not in ("integer", "decimal") or (spec.element == "int64"
                                                               and variable.value_type != "integer"):
        wanted = "whole numbers" if spec.element == "int64" else "numbers"
        raise _refuse(model, spec.name, f"the model reads {wanted} ({spec.element}), the data dictionary declares "
                      f"{_article(variable.value_type)} {variable.value_type} variable",
                      "the model's input must be a numeric column of this table")
    if spec.unit is not None and spec.unit != variable.unit:
        raise _refuse(model, spec.name, f"the model declares unit {spec.unit!r}, the data dictionary "
                      f"{variable.unit or 'none'!r}", "convert the model to the site's unit (its data dictionary)")


def _values(spec: OnnxInput, column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The column as the input's values, and where it is present."""
    present = column.notna().to_numpy()
    if spec.element == "string":
        return column.astype(object).where(column.notna(), "").astype(str).to_numpy(), present
    return column.to_numpy(dtype=float, na_value=np.nan), present


def table_inputs(model: ONNXModel, name: str, data: pd.DataFrame,
                 variable: Callable[[str], Variable | None]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every input's values from ``data`` (records with a value in every input only) and where those
    records are; ``variable`` gives a column's data dictionary entry (None: the table has none)."""
    columns: dict[str, np.ndarray] = {}
    complete = np.ones(len(data), dtype=bool)
    for spec in model.inputs:
        if spec.name not in data.columns:
            raise _refuse(name, spec.name, f"the table lacks it (its columns: {', '.join(map(str, data.columns))})",
                          "apply the model to a table with every column it reads (dsfed models inspect shows them)")
        entry = variable(spec.name)
        if entry is None:
            raise _refuse(name, spec.name, "the site has no data dictionary entry for it in this table, so it "
                          "cannot check the model's types, categories and units against it",
                          "apply the model to a table the site serves, or a subset of one")
        _check(spec, entry, name)
        columns[spec.name], present = _values(spec, data[spec.name])
        complete &= present
    return {k: v[complete] for k, v in columns.items()}, complete
