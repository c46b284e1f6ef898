"""The ONNX operators a site runs: the one allowlist ``predictDS`` and ``dsfed models inspect`` apply.

An ONNX graph (https://onnx.ai/onnx/operators/) is data, not code, as long as every node is an
operator of the standard sets whose semantics the ONNX specification fixes. The site runs a graph
only if every node, in every subgraph, is one of :data:`ALLOWED_OPERATORS` of its domain, at an
operator-set version within :data:`OPSETS`. What is allowed is what ``skl2onnx`` emits for the
preprocessing and models a clinical prediction model is made of (imputers, scalers, one-hot and
label encoders, linear and logistic models, decision trees, random forests and gradient boosting)
plus the basic tensor arithmetic those conversions use:

* element-wise arithmetic, comparisons and selections, casts, reshapes, concatenation and
  indexing: each output is at most as large as its inputs and initializers;
* matrix products and reductions of fixed shape;
* the ONNX-ML preprocessing and model operators (``TreeEnsemble*``, ``Linear*``, ``Scaler``,
  ``Imputer``, ``OneHotEncoder``, ``LabelEncoder``, ...), each a fixed function of its attributes.

Left out on purpose: control flow (``If``, ``Loop``, ``Scan``: a loop count read from the data
makes the run time unbounded, and their subgraphs hide further nodes); random generators
(``RandomNormal``, ``Bernoulli``, ...: a prediction must be a function of the record, the same on
every call, or the release history of a column is no longer one column's); operators that grow a
tensor from a shape read at run time (``Expand``, ``Tile``, ``ConstantOfShape``, ``Range``,
``Pad``, ``Resize``: a memory bomb in a few bytes); sequence and map operators (``ZipMap``,
``DictVectorizer``, ``Sequence*``: the site reads plain tensors; export classifiers with
``zipmap=False``); and every other domain (custom operators run code that is not the standard's).
"""

from __future__ import annotations

DEFAULT_DOMAIN = ""
ML_DOMAIN = "ai.onnx.ml"
# "ai.onnx" is another spelling of the default domain
DOMAINS = {DEFAULT_DOMAIN: DEFAULT_DOMAIN, "ai.onnx": DEFAULT_DOMAIN, ML_DOMAIN: ML_DOMAIN}

ALLOWED_OPERATORS: dict[str, frozenset[str]] = {
    DEFAULT_DOMAIN: frozenset({
        # shapes and selections
        "Identity", "Cast", "Concat", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Gather",
        "Slice", "Split", "Shape", "Constant",
        # element-wise arithmetic
        "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Pow", "Sigmoid",
        "Softmax", "Clip", "Max", "Min", "Sum",
        # linear algebra and reductions
        "MatMul", "Gemm", "ArgMax", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp",
        # comparisons, logic, missing values
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where", "IsNaN",
    }),
    ML_DOMAIN: frozenset({
        "ArrayFeatureExtractor", "Binarizer", "CategoryMapper", "FeatureVectorizer", "Imputer", "LabelEncoder",
        "LinearClassifier", "LinearRegressor", "Normalizer", "OneHotEncoder", "Scaler",
        "TreeEnsembleClassifier", "TreeEnsembleRegressor", "TreeEnsemble",
    }),
}

# operator-set versions (lowest, highest) whose semantics of the operators above were reviewed
# (skl2onnx targets these); a later opset may change what an operator computes, so it is refused
OPSETS: dict[str, tuple[int, int]] = {DEFAULT_DOMAIN: (7, 21), ML_DOMAIN: (1, 5)}


def allowed(domain: str, op_type: str) -> bool:
    """Whether the site runs operator ``op_type`` of ``domain``."""
    return domain in DOMAINS and op_type in ALLOWED_OPERATORS[DOMAINS[domain]]
