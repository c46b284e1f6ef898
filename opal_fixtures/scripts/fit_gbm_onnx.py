"""fit_gbm_onnx.py -- the demo's second model: gradient boosting on the GBSG2 training split, as ONNX.

Fits an sklearn GradientBoostingClassifier (100 trees of depth 2, learning rate 0.1, fixed
``random_state``) on ``opal_fixtures/training/GBSG2/train.csv`` (predictors horTh, age, menostat,
tsize, tgrade, pnodes, progrec, estrec; outcome y, recurrence-free at 730 days; the 39 rows
censored before 730 days, y missing, dropped), inside a Pipeline that one-hot encodes the three
factors with the data dictionary's categories. Exports it with skl2onnx (one graph input per
column, ``zipmap=False`` so the output ``probabilities`` is a plain [N, 2] tensor) and declares in
the model's metadata what dsfed's sites check against their data dictionary
(``dsfed.categories.<factor>``, ``dsfed.unit.<numeric>``; dsfed_server/onnx_model.py). Writes
``opal_fixtures/models/gbsg2-gbm.onnx``.

Deterministic: the fit has a fixed seed and the export fixes what skl2onnx leaves to chance (the
graph's name, a random UUID, and the order of the operator-set imports), so running it twice
writes the same bytes and the same SHA-256 (with the same scikit-learn and skl2onnx versions).

Run from the repository root:
    python opal_fixtures/scripts/fit_gbm_onnx.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "opal_fixtures" / "training" / "GBSG2" / "train.csv"
DICTIONARY = ROOT / "opal_fixtures" / "training" / "GBSG2" / "train.dictionary.json"
OUT = ROOT / "opal_fixtures" / "models" / "gbsg2-gbm.onnx"
PREDICTORS = ["horTh", "age", "menostat", "tsize", "tgrade", "pnodes", "progrec", "estrec"]
SEED = 2024
TARGET_OPSET = {"": 21, "ai.onnx.ml": 3}


def dictionary() -> dict[str, dict]:
    """The training table's data dictionary entries by variable name."""
    return {v["name"]: v for v in json.loads(DICTIONARY.read_text())["variables"]}


def fit(train: pd.DataFrame) -> Pipeline:
    """The pipeline fitted on the rows of ``train`` with an outcome."""
    variables = dictionary()
    factors = [c for c in PREDICTORS if variables[c]["valueType"] == "text"]
    encoder = OneHotEncoder(categories=[[c["name"] for c in variables[f]["categories"]] for f in factors])
    pipeline = Pipeline([
        ("encode", ColumnTransformer([("factors", encoder, factors)], remainder="passthrough")),
        ("gbm", GradientBoostingClassifier(n_estimators=100, max_depth=2, learning_rate=0.1, random_state=SEED)),
    ])
    rows = train.dropna(subset=["y"])
    return pipeline.fit(rows[PREDICTORS], rows["y"].astype(int))


def export(pipeline: Pipeline) -> bytes:
    """The ONNX bytes of ``pipeline``: one input per column (string for a factor, float otherwise),
    output ``probabilities`` (no ZipMap), the dictionary's categories and units as metadata."""
    variables = dictionary()
    types = [(c, StringTensorType([None, 1]) if variables[c]["valueType"] == "text" else FloatTensorType([None, 1]))
             for c in PREDICTORS]
    model = convert_sklearn(pipeline, initial_types=types, target_opset=TARGET_OPSET,
                            options={id(pipeline): {"zipmap": False}})
    model.graph.name = "gbsg2_gbm"
    imports = sorted(((o.domain, o.version) for o in model.opset_import))
    del model.opset_import[:]
    for domain, version in imports:
        model.opset_import.add(domain=domain, version=version)
    for c in PREDICTORS:
        v = variables[c]
        if v["valueType"] == "text":
            entry = model.metadata_props.add(key=f"dsfed.categories.{c}")
            entry.value = json.dumps([k["name"] for k in v["categories"]])
        elif v["unit"]:
            model.metadata_props.add(key=f"dsfed.unit.{c}", value=v["unit"])
    model.doc_string = ("GradientBoostingClassifier(100 trees, depth 2) on GBSG2 training split; "
                        "P(recurrence-free at 730 days) = probabilities[:, 1]")
    return model.SerializeToString(deterministic=True)


def main() -> None:
    data = export(fit(pd.read_csv(TRAIN)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(data)
    print(f"{OUT.relative_to(ROOT)}: {len(data)} bytes, SHA-256 {hashlib.sha256(data).hexdigest()}")


if __name__ == "__main__":
    main()
