"""The site's prediction models: uploaded files stored by their digest, applied only if approved.

An analyst uploads a model file (``POST /v1/models``): a GLM file as JSON, or an ONNX file as
``{"format": "onnx/base64", "model": ...}`` (:func:`dsfed_core.models.onnx_upload`). The site
checks the body's size before reading it, reads the model strictly (:func:`dsfed_core.models.
parse_glm`, :func:`dsfed_server.onnx_model.parse_onnx`), refuses it unless its rules file
approves its SHA-256 (``models.approved``; a GLM also under ``models.analyst_glm``, an ONNX graph
never without approval) and stores it as ``<sha256>.json`` (a GLM's canonical bytes) or
``<sha256>.onnx`` (the ONNX file's bytes as uploaded). ``predictDS`` names a model by its approved
name or its digest, and the store reads the file back and checks its digest again: a file changed
on disk is refused, never applied.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dsfed_core.errors import CallError, DisclosureRefusal, NotFound
from dsfed_core.models import GLMModel, ModelError, onnx_upload_bytes, parse_glm, read_onnx_upload
from dsfed_server.disclosure.checks import Guard
from dsfed_server.onnx_model import ForbiddenGraph, ONNXModel, parse_onnx

_HEX = frozenset("0123456789abcdef")
Model = GLMModel | ONNXModel
SUFFIXES = (".json", ".onnx")


def _stored(model: Model) -> tuple[bytes, str]:
    """The bytes a model is stored as, and the file suffix saying its format."""
    return (model.canonical(), ".json") if isinstance(model, GLMModel) else (model.data, ".onnx")


def _parse(data: bytes, suffix: str) -> Model:
    return parse_glm(data) if suffix == ".json" else parse_onnx(data)


class ModelStore:
    """Model files under one directory, each named by its model's SHA-256: a GLM's canonical bytes
    (``<sha256>.json``), an ONNX file's bytes as uploaded (``<sha256>.onnx``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, sha256: str, suffix: str = ".json") -> Path:
        return self.directory / f"{sha256}{suffix}"

    def put(self, model: Model) -> str:
        """Store ``model`` (atomically; the same model twice is one file) and return its digest."""
        self.directory.mkdir(parents=True, exist_ok=True)
        sha256 = model.sha256
        data, suffix = _stored(model)
        tmp = self.directory / f".{sha256}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(self.path(sha256, suffix))
        return sha256

    def get(self, sha256: str, name: str) -> Model:
        """The stored model of digest ``sha256``, checked again against it (an ONNX file's bytes
        before they are parsed)."""
        suffix = next((s for s in SUFFIXES if self.path(sha256, s).exists()), None)
        if suffix is None:
            raise _not_uploaded(name, sha256)
        try:
            data = self.path(sha256, suffix).read_bytes()
        except FileNotFoundError:  # removed since the check above
            raise _not_uploaded(name, sha256) from None
        if suffix == ".onnx" and hashlib.sha256(data).hexdigest() != sha256:
            raise _changed(name, sha256)
        try:
            model = _parse(data, suffix)
        except ModelError as exc:
            raise CallError(f"the stored file of model {name!r} is not a valid model: {exc}", rule="models.approved",
                            hint="tell the site's administrator: the file under its digest was changed") from None
        if model.sha256 != sha256:
            raise _changed(name, sha256)
        return model


def _not_uploaded(name: str, sha256: str) -> NotFound:
    return NotFound(f"model {name!r} ({sha256[:12]}...) has not been uploaded to this site",
                    hint="upload the model file first (dsfed_client.models.upload_model)")


def _changed(name: str, sha256: str) -> DisclosureRefusal:
    return DisclosureRefusal(f"the stored file of model {name!r} does not match its digest {sha256[:12]}...: "
                             "it was changed after upload, so it is not the approved model",
                             rule="models.approved", hint="tell the site's administrator; upload it again")


def _too_large(size: int | str, limit: int) -> CallError:
    return CallError(f"the model file has {size} bytes; this site accepts at most {limit}",
                     rule="models.max_bytes", hint="send a smaller model, or ask the site to raise the limit")


def read_upload(data: bytes, guard: Guard) -> Model:
    """A model file an analyst uploads: at most ``models.max_bytes`` (the body's size is checked
    before anything is parsed), a valid model, approved (``models.approved``) or, a GLM, allowed by
    ``models.analyst_glm``; an ONNX graph only where ``models.onnx`` and within its contract."""
    limit = guard.rule("models.max_bytes")
    if len(data) > onnx_upload_bytes(limit):
        raise _too_large(f"more than {limit}", limit)
    try:
        document = json.loads(data)
    except ValueError:
        document = None  # not JSON: parse_glm says what is wrong
    try:
        onnx_bytes = read_onnx_upload(document)
    except ModelError as exc:
        raise CallError(f"not a model this site can apply: {exc}", rule="models.onnx",
                        hint="send the .onnx file itself with dsfed_client.models.upload_model(session, path), "
                             "which builds this body (dsfed_core.models.onnx_upload)") from None
    model = _read_onnx(onnx_bytes, limit, guard) if onnx_bytes is not None else _read_glm(data, limit)
    approved_digests = {entry.sha256 for entry in guard.rule("models.approved")}
    if model.sha256 not in approved_digests and (isinstance(model, ONNXModel) or not guard.rule("models.analyst_glm")):
        raise DisclosureRefusal(f"model {model.sha256} is not approved at this site", rule="models.approved",
                                hint="the site's governance board approves models by this digest "
                                     "(dsfed models approve FILE --rules RULES)")
    return model


def _read_glm(data: bytes, limit: int) -> GLMModel:
    if len(data) > limit:
        raise _too_large(len(data), limit)
    try:
        return parse_glm(data)
    except ModelError as exc:
        raise CallError(f"not a model this site can apply: {exc}",
                        hint="a GLM model file: format, formula, family, link and coefficients") from None


def _read_onnx(data: bytes, limit: int, guard: Guard) -> ONNXModel:
    if len(data) > limit:
        raise _too_large(len(data), limit)
    if not guard.rule("models.onnx"):
        raise DisclosureRefusal("this site applies no ONNX graphs, only GLM model files", rule="models.onnx",
                                hint="send the model as a GLM file, or ask the site's governance board")
    sha256 = hashlib.sha256(data).hexdigest()  # named in the refusal, so the audit record holds it
    try:
        return parse_onnx(data)
    except ForbiddenGraph as exc:
        raise DisclosureRefusal(f"ONNX model {sha256} is outside what this site runs: {exc}", rule="models.onnx",
                                hint="export with standard operators only (skl2onnx, zipmap=False)") from None
    except ModelError as exc:
        raise CallError(f"ONNX model {sha256} is not one this site can apply: {exc}", rule="models.onnx",
                        hint="the site's contract for ONNX models is in docs/analyst.md") from None


def approved(guard: Guard, reference: str) -> tuple[str, str, bool]:
    """(name, digest, approved by the board) of the model ``reference`` names: an approved model's
    name or digest, or the digest of an uploaded GLM where ``models.analyst_glm`` allows one."""
    for entry in guard.rule("models.approved"):
        if reference in (entry.name, entry.sha256):
            return entry.name, entry.sha256, True
    if len(reference) == 64 and set(reference) <= _HEX and guard.rule("models.analyst_glm"):
        return reference[:12], reference, False
    names = ", ".join(entry.name for entry in guard.rule("models.approved")) or "none"
    raise DisclosureRefusal(f"model {reference!r} is not approved at this site (approved: {names})",
                            rule="models.approved", hint="name an approved model, or ask the site's governance board")
