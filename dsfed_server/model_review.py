"""Governance's view of a model file: ``dsfed models inspect FILE`` says what the model reads and
computes and its digest, in words a board can review; ``dsfed models approve FILE --rules RULES``
adds it to a rules file's ``models.approved`` (by that digest), keeping the file's comments. A file
named ``*.onnx`` is an ONNX graph (:mod:`dsfed_server.onnx_model`), any other a GLM file."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from dsfed_core.models import GLMModel, ModelError, parse_glm
from dsfed_core.parser import parse_formula
from dsfed_server.disclosure.rules import load_rules
from dsfed_server.models import Model
from dsfed_server.onnx_model import OUTPUT, POSITIVE, ONNXModel, OnnxInput, parse_onnx
from dsfed_server.tomlfile import ConfigFileError

_LINKS = {"logit": "the logistic function (a probability)", "probit": "the normal CDF (a probability)",
          "log": "the exponential (a rate)", "identity": "itself"}


def describe(model: Model, path: Path) -> str:
    """The review text of a model file."""
    return _describe_onnx(model, path) if isinstance(model, ONNXModel) else _describe_glm(model, path)


def _reads(spec: OnnxInput) -> str:
    if spec.categories is not None:
        return f"categorical, categories {', '.join(spec.categories)}"
    kind = "whole number" if spec.element == "int64" else "number"
    return f"{kind} ({spec.element}), unit {spec.unit if spec.unit is not None else 'not declared'}"


def _describe_onnx(model: ONNXModel, path: Path) -> str:
    width = max(len(spec.name) for spec in model.inputs) + 2
    lines = [
        f"Model file {path}",
        f"  SHA-256 (what the rules file approves): {model.sha256}",
        "    (of the file's bytes as they are: sha256sum gives the same)",
        "  Kind: an ONNX graph of standard ONNX / ONNX-ML operators, run by onnxruntime (no code runs at the site)",
        f"  Size: {len(model.data)} bytes; made by {model.producer or 'an unnamed tool'}; operator sets "
        + ", ".join(f"{domain} {version}" for domain, version in sorted(model.opsets.items())),
        *([f"  Description: {model.description}"] if model.description else []),
        "  Reads the table's columns (each checked against the site's data dictionary; records missing one get "
        "no prediction):",
        *(f"    {spec.name:<{width}}{_reads(spec)}" for spec in model.inputs),
        "  Outputs: " + "; ".join(f"{name} ({kind})" for name, kind in model.outputs),
        f"  The site reads {OUTPUT}[:, {POSITIVE}]: the probability of the model's second class (y = 1 for a 0/1 "
        "outcome)",
        "  Operators (nodes of each kind):",
        *(f"    {op:<40}{count}" for op, count in model.operators.items()),
        "  What the site still checks when applying it: the table has every column with these types, categories",
        "  and units, and a model with few distinct outputs puts at least q records on each (disclosure.q_threshold).",
    ]
    return "\n".join(lines) + "\n"


def _describe_glm(model: GLMModel, path: Path) -> str:
    formula = parse_formula(model.formula)
    variables = [v for v in formula.variables if v != formula.response]
    lines = [
        f"Model file {path}",
        f"  SHA-256 (what the rules file approves): {model.sha256}",
        "  Kind: a generalised linear model given by numbers only (no code runs at the site)",
        f"  Formula: {model.formula}  (family {model.family}, link {model.link})",
        f"  Reads the table's variables: {', '.join(variables) or 'none'}",
        *(["  Declares units (checked against the site's data dictionary): "
           + ", ".join(f"{k} in {v}" for k, v in model.units.items())] if model.units else []),
        f"  Computes: x'b over {len(model.coefficients)} coefficients, then {_LINKS[model.link]}",
        "  Coefficients:",
        *(f"    {name:<24} {value: .6g}" for name, value in model.coefficients.items()),
        "  What the site still checks when applying it: the table has exactly these design columns,",
        "  and a model with few distinct outputs puts at least q records on each (disclosure.q_threshold).",
    ]
    return "\n".join(lines) + "\n"


def _approved_block(text: str) -> tuple[int, int]:
    """Where the ``approved = [...]`` value of the [models] table sits in the rules text."""
    start = text.index("\n[models]")
    key = text.index("\napproved = [", start) + 1
    end = text.index("\n", key)
    while True:
        try:
            tomllib.loads(text[key:end])
            return key, end
        except tomllib.TOMLDecodeError:
            end = text.index("\n", end + 1)


def _entry(name: str, sha256: str, note: str) -> str:
    quoted = note.replace("\\", "\\\\").replace('"', '\\"')
    return f'    {{ name = "{name}", sha256 = "{sha256}", note = "{quoted}" }},'


def approve(model: Model, rules_path: Path, name: str, note: str) -> str:
    """Add ``model`` to the rules file's approved models under ``name`` and return the new text's
    entry; refuses a name or digest already there. The file is checked as a site would before it is
    replaced."""
    rules = load_rules(rules_path)
    for entry in rules.models.approved:
        if entry.name == name or entry.sha256 == model.sha256:
            raise ValueError(f"{rules_path}: already approved as {entry.name!r} ({entry.sha256[:12]}...)")
    text = rules_path.read_text(encoding="utf-8")
    start, end = _approved_block(text)
    entries = [_entry(e.name, e.sha256, e.note) for e in rules.models.approved] + [_entry(name, model.sha256, note)]
    updated = text[:start] + "approved = [\n" + "\n".join(entries) + "\n]" + text[end:]
    candidate = rules_path.with_name(f".{rules_path.name}.new")
    candidate.write_text(updated, encoding="utf-8")
    try:
        load_rules(candidate)
    except ConfigFileError:
        candidate.unlink()
        raise
    candidate.replace(rules_path)
    return entries[-1].strip()


def _read(path: Path) -> Model:
    try:
        return parse_onnx(path.read_bytes()) if path.suffix == ".onnx" else parse_glm(path.read_bytes())
    except ModelError as exc:
        raise ValueError(f"{path}: not a model a site can apply: {exc}") from None


def cmd_inspect(args: argparse.Namespace) -> int:
    try:
        print(describe(_read(args.file), args.file), end="")
    except (OSError, ValueError) as exc:
        print(exc)
        return 2
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    try:
        entry = approve(_read(args.file), args.rules, args.name, args.note)
    except (OSError, ValueError, ConfigFileError) as exc:
        print(exc)
        return 2
    print(f"{args.rules}: approved {entry}")
    return 0

