"""ONNX graphs as prediction models: read strictly, described for the board, run by onnxruntime.

The second model format (the first is the GLM of :mod:`dsfed_core.models`): an ONNX
graph (https://onnx.ai/onnx/repo-docs/IR.html) as ``skl2onnx`` writes an sklearn pipeline. Nothing
in it is code: the site parses it with the ``onnx`` package, runs ``onnx.checker.check_model``,
and walks every node, subgraphs included, against :mod:`dsfed_server.onnx_ops`. It refuses a graph
with an operator outside that allowlist or of another domain (custom operators), model-local
functions, training information, tensors in external files, or an operator-set version outside
the reviewed range. onnxruntime then runs the parsed model re-serialised, so fields this ``onnx``
version does not know (and so never checked) are dropped, never run.

**Digest.** The SHA-256 of the file's bytes exactly as the analyst uploads them and the site
stores them (``<sha256>.onnx``), not of a re-serialised form: protobuf serialisation is not
canonical across library versions, so a re-serialised digest could differ between the board's
machine and the site's. The same file always has the same digest, and ``sha256sum FILE`` gives
it; the same graph written twice differently is two files, each approved on its own.

**Contract** (what ``predictDS`` reads; :func:`parse_onnx` refuses a graph that breaks it):

* every graph input is a table column of the same name, a tensor of shape ``[N, 1]`` or ``[N]``:
  ``float``, ``double`` or ``int64`` for a numeric column, ``string`` for a categorical one;
* the model declares in its ``metadata_props`` the categories each string input expects,
  ``dsfed.categories.<input>`` = a JSON list of names (checked against any one-hot encoder
  that reads the input), and may declare the unit of any input, ``dsfed.unit.<input>`` (e.g.
  ``years``); the site compares both with its data dictionary;
* the prediction is read from the output ``probabilities`` (``[N, 2]``, a classifier exported
  with ``zipmap=False``), column 1: the probability of the second class of the model's classes,
  ``y = 1`` for a 0/1 outcome.
* each record's prediction comes from its own inputs alone (:func:`probabilities` checks it at
  every run).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Mapping

import numpy as np
import onnx
import onnxruntime
from google.protobuf.message import DecodeError
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from dsfed_core.models import ModelError
from dsfed_server.onnx_ops import DOMAINS, OPSETS, allowed
from dsfed_server.rowbatches import BATCH_ROWS, row_batches

OUTPUT = "probabilities"  # the output the site reads, column POSITIVE
POSITIVE = 1
UNIT_KEY = "dsfed.unit."
CATEGORIES_KEY = "dsfed.categories."
ELEMENTS = {TensorProto.FLOAT: ("float", np.float32), TensorProto.DOUBLE: ("double", np.float64),
            TensorProto.INT64: ("int64", np.int64), TensorProto.STRING: ("string", np.object_)}
log = logging.getLogger("dsfed.site")
_RUNTIME_ERRORS = tuple(getattr(onnxruntime.capi.onnxruntime_pybind11_state, name) for name in (
    "Fail", "InvalidArgument", "InvalidGraph", "RuntimeException", "NotImplemented", "EngineError"))


class ForbiddenGraph(ModelError):
    """A well-formed graph the site does not run: an operator, domain or feature outside its contract."""


@dataclass(frozen=True)
class OnnxInput:
    """One graph input: the table column it reads, its element type, and what the model declares."""

    name: str
    element: str  # "float", "double", "int64" or "string"
    unit: str | None
    categories: tuple[str, ...] | None  # the string inputs' expected categories
    rank: int  # 2: shape [N, 1]; 1: shape [N]

    @property
    def dtype(self) -> type:
        return next(dtype for label, dtype in ELEMENTS.values() if label == self.element)


@dataclass(frozen=True)
class ONNXModel:
    """A checked ONNX graph: its file's bytes and digest, what it reads and outputs, its operators."""

    data: bytes
    runnable: bytes  # the parsed model re-serialised: what onnxruntime runs
    inputs: tuple[OnnxInput, ...]
    outputs: tuple[tuple[str, str], ...]  # (name, type) of every output
    operators: Mapping[str, int]  # "domain:op_type" -> nodes, subgraphs included
    opsets: Mapping[str, int]
    producer: str
    description: str  # the model's doc_string

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _tensors(graph: GraphProto) -> Iterator[TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == AttributeProto.TENSOR:
                yield attribute.t
            yield from attribute.tensors


def _subgraphs(graph: GraphProto) -> Iterator[GraphProto]:
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                yield attribute.g
            yield from attribute.graphs


def _walk(graph: GraphProto, operators: Counter) -> None:
    """Count every node of ``graph`` and its subgraphs; refuse an operator outside the allowlist
    and a tensor kept in an external file."""
    for node in graph.node:
        if not allowed(node.domain, node.op_type):
            where = f"domain {node.domain!r}" if node.domain not in DOMAINS else f"the {node.domain or 'ai.onnx'} set"
            raise ForbiddenGraph(f"node {node.name or '(unnamed)'!r} is operator {node.op_type!r} of {where}, "
                                 "which this site does not run (the standard ONNX and ONNX-ML operators of "
                                 "dsfed_server/onnx_ops.py only: no custom operators)")
        operators[f"{DOMAINS[node.domain] or 'ai.onnx'}:{node.op_type}"] += 1
    for tensor in _tensors(graph):
        if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
            raise ForbiddenGraph(f"tensor {tensor.name!r} is kept in an external file; the site runs "
                                 "self-contained models only")
    for subgraph in _subgraphs(graph):
        _walk(subgraph, operators)


def _metadata(model: ModelProto, names: set[str]) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """The units and categories the model declares per input (``dsfed.unit.X``, ``dsfed.categories.X``)."""
    units: dict[str, str] = {}
    categories: dict[str, tuple[str, ...]] = {}
    for entry in model.metadata_props:
        if not isinstance(entry.key, str) or not isinstance(entry.value, str):  # protobuf's bytes: not UTF-8
            raise ModelError(f"metadata {entry.key!r} is not UTF-8 text")
        if not entry.key.startswith("dsfed."):
            continue
        key = next((k for k in (UNIT_KEY, CATEGORIES_KEY) if entry.key.startswith(k)), None)
        column = entry.key[len(key):] if key else ""
        if key is None or column not in names:
            raise ModelError(f"metadata {entry.key!r} is not {UNIT_KEY}<input> or {CATEGORIES_KEY}<input> of a "
                             f"graph input ({', '.join(sorted(names))})")
        if key == UNIT_KEY:
            units[column] = entry.value
            continue
        try:
            declared = json.loads(entry.value)
        except json.JSONDecodeError:
            declared = None
        if (not isinstance(declared, list) or not declared or len(set(declared)) != len(declared)
                or not all(isinstance(c, str) and c for c in declared)):
            raise ModelError(f"metadata {entry.key!r} must be a JSON list of distinct category names, "
                             f"got {entry.value!r}")
        categories[column] = tuple(declared)
    return units, categories


def _one_hot_categories(graph: GraphProto, name: str) -> Iterator[set[str]]:
    """The categories of every one-hot encoder reading graph input ``name`` directly."""
    for node in graph.node:
        if node.op_type == "OneHotEncoder" and name in node.input:
            for attribute in node.attribute:
                if attribute.name == "cats_strings":
                    yield {s.decode("utf-8", errors="replace") for s in attribute.strings}


def _input(value: onnx.ValueInfoProto, units: dict[str, str], categories: dict[str, tuple[str, ...]],
           graph: GraphProto) -> OnnxInput:
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or tensor.elem_type not in ELEMENTS:
        raise ModelError(f"input {value.name!r} must be a float, double, int64 or string tensor "
                         f"(got {onnx.helper.printable_type(value.type)})")
    dims = tensor.shape.dim
    if not tensor.HasField("shape") or len(dims) not in (1, 2) or dims[0].HasField("dim_value") or (
            len(dims) == 2 and dims[1].dim_value != 1):
        raise ModelError(f"input {value.name!r} must have shape [N, 1] or [N] with N free (one table column), "
                         f"got {onnx.helper.printable_type(value.type)}")
    element = ELEMENTS[tensor.elem_type][0]
    expected = categories.get(value.name)
    if (element == "string") != (expected is not None):
        raise ModelError(f"input {value.name!r}: a string input declares its categories "
                         f"({CATEGORIES_KEY}{value.name} = JSON list), and only a string input does")
    for encoded in _one_hot_categories(graph, value.name):
        if expected is not None and encoded != set(expected):
            raise ModelError(f"input {value.name!r} declares categories {list(expected)}, but its one-hot "
                             f"encoder knows {sorted(encoded)}")
    return OnnxInput(value.name, element, units.get(value.name), expected, len(dims))


def _output(model: ModelProto) -> None:
    for value in model.graph.output:
        if value.name != OUTPUT:
            continue
        tensor = value.type.tensor_type
        dims = tensor.shape.dim
        if (value.type.HasField("tensor_type") and tensor.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE)
                and len(dims) == 2 and dims[1].dim_value in (0, 2)):
            return
    raise ModelError(f"the site reads the output {OUTPUT!r}, a float tensor [N, 2] of class probabilities "
                     "(an sklearn classifier exported by skl2onnx with zipmap=False); the model has "
                     f"{', '.join(v.name for v in model.graph.output) or 'no outputs'}")


def parse_onnx(data: bytes) -> ONNXModel:
    """Read an ONNX model file strictly (the module's contract); :class:`ForbiddenGraph` for an
    operator or feature the site does not run, :class:`~dsfed_core.models.ModelError` otherwise."""
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError) as exc:
        raise ModelError(f"not an ONNX model file ({exc})") from None
    if len(model.functions):
        raise ForbiddenGraph(f"the model defines its own functions ({', '.join(f.name for f in model.functions)}); "
                             "the site runs standard operators only")
    if len(model.training_info):
        raise ForbiddenGraph("the model carries training information (an update algorithm); the site only predicts")
    opsets = {}
    for entry in model.opset_import:
        bounds = OPSETS.get(DOMAINS.get(entry.domain, "?"))
        if bounds is None:
            raise ForbiddenGraph(f"the model imports operator domain {entry.domain!r}; the site runs the standard "
                                 "ONNX and ONNX-ML operator sets only (no custom operators)")
        if not bounds[0] <= entry.version <= bounds[1]:
            raise ForbiddenGraph(f"operator set {entry.domain or 'ai.onnx'} version {entry.version} is outside the "
                                 f"versions this site runs ({bounds[0]} to {bounds[1]}): export with that target opset")
        opsets[entry.domain or "ai.onnx"] = entry.version
    operators: Counter = Counter()
    _walk(model.graph, operators)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, UnicodeDecodeError) as exc:
        raise ModelError(f"the ONNX checker refuses the model: {str(exc).splitlines()[0]}") from None
    initializers = {t.name for t in model.graph.initializer}
    values = [v for v in model.graph.input if v.name not in initializers]
    units, categories = _metadata(model, {v.name for v in values})
    inputs = tuple(_input(v, units, categories, model.graph) for v in values)
    if not inputs:
        raise ModelError("the model reads no input")
    _output(model)
    outputs = tuple((v.name, onnx.helper.printable_type(v.type)) for v in model.graph.output)
    model.DiscardUnknownFields()
    return ONNXModel(data, model.SerializeToString(), inputs, outputs, dict(sorted(operators.items())), opsets,
                     f"{model.producer_name} {model.producer_version}".strip(), model.doc_string)


def probabilities(model: ONNXModel, columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """Column :data:`POSITIVE` of output :data:`OUTPUT` for the records of ``columns`` (one array
    per input, complete records only), run by onnxruntime on one thread a batch of
    :data:`~dsfed_server.rowbatches.BATCH_ROWS` records at a time (the graph's working tensors, a
    tree ensemble's per record and tree, stay a batch's size); ModelError if it fails.

    Each record's prediction must come from its own values alone: the first batch is run again in
    two halves, and a record whose prediction changes with the records it is run with (a graph that
    reduces, sorts or reshapes across records) refuses the graph. The predictions of a subset then
    equal those of the same records in the whole table (one cut history per table and model), and a
    graph cannot fold other records' values into a record's prediction unnoticed."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4  # its errors become the refusal's message, not server log lines
    n = len(next(iter(columns.values())))
    predicted = np.empty(n)
    try:
        session = onnxruntime.InferenceSession(model.runnable, options, providers=["CPUExecutionProvider"])
        for rows in row_batches(n):
            predicted[rows] = _run(session, model, columns, rows)
        first = min(n, BATCH_ROWS)
        for half in (slice(0, first // 2), slice(first // 2, first)):
            if half.stop > half.start and not np.array_equal(_run(session, model, columns, half), predicted[half]):
                raise ModelError("the graph's prediction for a record changes with the other records it is run "
                                 "with; the site applies models that predict each record from its own values")
    except _RUNTIME_ERRORS as exc:
        # onnxruntime's message can name the batch's shape, which would tell the records' count: the
        # site's log keeps it, the analyst is told where to find it
        log.warning("onnxruntime could not run a model: %s", exc)
        raise ModelError("onnxruntime could not run the model (its message is in the site's log)") from None
    return predicted


def _run(session: onnxruntime.InferenceSession, model: ONNXModel, columns: Mapping[str, np.ndarray],
         rows: slice) -> np.ndarray:
    """The graph's P(positive class) for records ``rows`` of ``columns``, run together."""
    feed = {}
    for spec in model.inputs:
        values = np.asarray(columns[spec.name][rows]).astype(spec.dtype)
        feed[spec.name] = values.reshape(-1, 1) if spec.rank == 2 else values.reshape(-1)
    (out,) = session.run([OUTPUT], feed)
    if out.ndim != 2 or out.shape != (rows.stop - rows.start, 2):  # the shape would tell the records' count
        raise ModelError(f"output {OUTPUT!r} is not one row of two class probabilities per record; "
                         "the site reads [N, 2]")
    return out[:, POSITIVE]
