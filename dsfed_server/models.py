"""The site's prediction models: uploaded files stored by their digest, applied only if approved.

An analyst uploads a model file (``POST /v1/models``); the site reads it strictly
(:func:`dsfed_core.models.parse_glm`), refuses it unless its rules file approves its SHA-256
(``models.approved``; or, for a GLM, ``models.analyst_glm``) and stores its canonical bytes as
``<sha256>.json``. ``predictDS`` names a model by its approved name or its digest, and the store
reads the file back and checks its digest again: a file changed on disk is refused, never applied.
"""

from __future__ import annotations

import os
from pathlib import Path

from dsfed_core.errors import CallError, DisclosureRefusal, NotFound
from dsfed_core.models import GLMModel, ModelError, parse_glm
from dsfed_server.disclosure.checks import Guard

_HEX = frozenset("0123456789abcdef")


class ModelStore:
    """Model files under one directory, named by the SHA-256 of their canonical bytes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, sha256: str) -> Path:
        return self.directory / f"{sha256}.json"

    def put(self, model: GLMModel) -> str:
        """Store ``model`` (atomically; the same model twice is one file) and return its digest."""
        self.directory.mkdir(parents=True, exist_ok=True)
        sha256 = model.sha256
        tmp = self.directory / f".{sha256}.{os.getpid()}.tmp"
        tmp.write_bytes(model.canonical())
        tmp.replace(self.path(sha256))
        return sha256

    def get(self, sha256: str, name: str) -> GLMModel:
        """The stored model of digest ``sha256``, checked again against it."""
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            raise NotFound(f"model {name!r} ({sha256[:12]}...) has not been uploaded to this site",
                           hint="upload the model file first (session.upload_model)") from None
        try:
            model = parse_glm(data)
        except ModelError as exc:
            raise CallError(f"the stored file of model {name!r} is not a valid model: {exc}", rule="models.approved",
                            hint="tell the site's administrator: the file under its digest was changed") from None
        if model.sha256 != sha256:
            raise DisclosureRefusal(f"the stored file of model {name!r} does not match its digest {sha256[:12]}...: "
                                    "it was changed after upload, so it is not the approved model",
                                    rule="models.approved", hint="tell the site's administrator; upload it again")
        return model


def read_upload(data: bytes, guard: Guard) -> GLMModel:
    """A model file an analyst uploads: at most ``models.max_bytes``, a valid model, approved
    (``models.approved``) or, a GLM, allowed by ``models.analyst_glm``; refused otherwise."""
    limit = guard.rule("models.max_bytes")
    if len(data) > limit:
        raise CallError(f"the model file has {len(data)} bytes; this site accepts at most {limit}",
                        rule="models.max_bytes", hint="send a smaller model, or ask the site to raise the limit")
    try:
        model = parse_glm(data)
    except ModelError as exc:
        raise CallError(f"not a model this site can apply: {exc}",
                        hint="a GLM model file: format, formula, family, link and coefficients") from None
    approved_digests = {entry.sha256 for entry in guard.rule("models.approved")}
    if model.sha256 not in approved_digests and not guard.rule("models.analyst_glm"):
        raise DisclosureRefusal(f"model {model.sha256} is not approved at this site", rule="models.approved",
                                hint="the site's governance board approves models by this digest "
                                     "(dsfed models approve FILE --rules RULES)")
    return model


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
