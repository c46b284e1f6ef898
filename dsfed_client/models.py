"""Bringing a model to the data: a GLM written as numbers, or an ONNX graph, uploaded to the sites
and applied there.

A model fitted across the federation (:func:`~dsfed_client.analyses.glm.ds_glm`) or a published
risk score becomes a :class:`~dsfed_core.models.GLMModel` (formula, family, link, coefficients:
no code); a model fitted elsewhere (an sklearn pipeline) travels as an ONNX file, which the client
sends as bytes without reading it (it needs neither ``onnx`` nor ``onnxruntime``: only the sites
parse and run it). Each site's governance board approves a model by its SHA-256
(``dsfed models approve``);
the analyst uploads it (:func:`upload_model`) and each site applies it to its own records
(:func:`ds_predict`, the site's ``predictDS``), where the predictions stay, to be validated as
any score column.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from dsfed_client.calls import Call, Ref
from dsfed_client.session import FederatedSession, SiteResults
from dsfed_core.models import GLMModel, onnx_upload, parse_glm


class FittedGLM(Protocol):
    """A fitted GLM (:class:`~dsfed_client.analyses.glm.GLMResults` is one)."""

    def model(self) -> GLMModel:
        """Its formula, family, link and coefficients by name."""


def glm_model(fit: FittedGLM) -> GLMModel:
    """The model of a distributed GLM fit: its formula, family, link and coefficients by name."""
    return fit.model()


def upload_model(session: FederatedSession, model: GLMModel | bytes | str | os.PathLike[str]) -> SiteResults:
    """Send the model file to every site; each stores it if its rules approve its digest (or allow
    GLMs of the analyst's own) and answers the digest and the approved name(s).

    ``model``: a :class:`~dsfed_core.models.GLMModel`; a GLM model file's path (``.json``); or an
    ONNX model, as the file's path or its bytes (digest: the SHA-256 of exactly these bytes)."""
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        model = parse_glm(path.read_bytes()) if path.suffix == ".json" else path.read_bytes()
    body = onnx_upload(model) if isinstance(model, bytes) else json.loads(model.canonical())
    return SiteResults("uploadModel", session.at_every_site("uploadModel", "POST", "/models", body))


def ds_predict(session: FederatedSession, data: str | Ref, model: str, into: str, *, type: str = "response") -> Ref:
    """Apply the model every site approved under ``model`` (its name there, or its SHA-256) to the
    table ``data`` at every site, as the vector ``into`` (``type``: ``"response"`` or ``"link"``);
    its handle."""
    table = data if isinstance(data, Ref) else Ref(data)
    return session.assign(into, Call("predictDS", table, model, type=type))
