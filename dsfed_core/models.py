"""Prediction models that carry no code: a GLM given by its formula, family, link and coefficients,
or an ONNX graph (read and run only by the site: :mod:`dsfed_server.onnx_model`).

The analyst's client writes a model (from a ``ds_glm`` fit, or a published risk score written by
hand); a site's governance board approves it by the SHA-256 of its canonical bytes; the site
reads it back strictly (nothing but these fields, finite numbers) and applies it (``predictDS``).
Both sides compute the digest here, from the same canonical form: JSON with sorted keys, no
spaces, numbers as Python's shortest round-trip repr.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from dsfed_core.errors import CallError
from dsfed_core.parser import parse_formula

GLM_FORMAT = "dsfed.glm/1"
# an ONNX file on the wire: {"format": ONNX_UPLOAD, "model": base64 of the file's bytes}; JSON like
# every other request body, so both transports and the audit carry it unchanged
ONNX_UPLOAD = "onnx/base64"
FAMILIES = {"binomial": ("logit", "probit"), "poisson": ("log",), "gaussian": ("identity",)}
MAX_COEFFICIENTS = 1000
_KEYS = {"format", "formula", "family", "link", "coefficients"}
_OPTIONAL = {"units"}  # written only when not empty, so a GLM without units keeps its digest


class ModelError(ValueError):
    """A model file that is not a valid model; the message says what is wrong."""


@dataclass(frozen=True)
class GLMModel:
    """:math:`g(E[y]) = x^T \\beta`: ``coefficients`` by design-column name as R's ``model.matrix``
    names them (``(Intercept)``, ``age``, ``tgradeII``, ``age:tsize``). ``units``: optionally, the
    unit of a variable the formula reads as the model expects it (``{"age": "years"}``); the site
    refuses the model on a table whose data dictionary gives that variable another unit."""

    formula: str
    family: str
    link: str
    coefficients: Mapping[str, float]
    units: Mapping[str, str] = field(default_factory=dict)

    def canonical(self) -> bytes:
        """The bytes the digest is taken of (``units`` only if any are declared)."""
        document = {"format": GLM_FORMAT, "formula": self.formula, "family": self.family, "link": self.link,
                    "coefficients": {k: float(v) for k, v in self.coefficients.items()}}
        if self.units:
            document["units"] = dict(self.units)
        return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()

    @property
    def inputs(self) -> list[str]:
        """The design columns the model reads (the intercept aside)."""
        return [name for name in self.coefficients if name != "(Intercept)"]


def _text(document: dict[str, Any], key: str, limit: int = 2000) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ModelError(f"{key!r} must be a non-empty string of at most {limit} characters")
    return value


def _no_constant(name: str) -> float:
    raise ModelError(f"{name} is not a number a model may hold")


def parse_glm(data: bytes) -> GLMModel:
    """Read a GLM model file strictly: exactly the fields of :class:`GLMModel` (and ``format``), a
    family and link R's ``glm`` fits, 1 to 1000 finite coefficients by name."""
    try:
        document = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"not a JSON model file ({exc})") from None
    if not isinstance(document, dict) or not _KEYS <= set(document) <= _KEYS | _OPTIONAL:
        got = sorted(document) if isinstance(document, dict) else type(document).__name__
        raise ModelError(f"a GLM model file holds exactly {sorted(_KEYS)} (and optionally {sorted(_OPTIONAL)}); "
                         f"got {got}")
    if document["format"] != GLM_FORMAT:
        raise ModelError(f"format must be {GLM_FORMAT!r}, got {document['format']!r}")
    family, link = _text(document, "family", 20), _text(document, "link", 20)
    if link not in FAMILIES.get(family, ()):
        fits = "; ".join(f"{name}: {' or '.join(links)}" for name, links in FAMILIES.items())
        raise ModelError(f"family {family!r} with link {link!r} is not a GLM this site fits ({fits})")
    coefficients = document["coefficients"]
    if not isinstance(coefficients, dict) or not 1 <= len(coefficients) <= MAX_COEFFICIENTS:
        raise ModelError(f"coefficients must be an object of 1 to {MAX_COEFFICIENTS} name: number entries")
    for name, value in coefficients.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ModelError(f"coefficient {name!r} must be a finite number, got {value!r}")
    formula = _text(document, "formula")
    return GLMModel(formula, family, link, {k: float(v) for k, v in coefficients.items()},
                    _units(document["units"], formula) if "units" in document else {})


def _units(units: Any, formula: str) -> dict[str, str]:
    """The ``units`` of a GLM file: a non-empty object naming variables of the formula, units as text."""
    try:
        variables = set(parse_formula(formula).variables)
    except CallError as exc:
        raise ModelError(f"formula {formula!r}: {exc.message}") from None
    if not isinstance(units, dict) or not units or not all(
            k in variables and isinstance(v, str) and 0 < len(v) <= 100 for k, v in units.items()):
        raise ModelError(f"units must be an object giving variables of the formula ({', '.join(sorted(variables))}) "
                         f"a unit each, got {units!r}")
    return units


def digest(data: bytes) -> str:
    """The SHA-256 a site approves a model file by: of its canonical form."""
    return parse_glm(data).sha256


def onnx_upload(data: bytes) -> dict[str, str]:
    """The upload body of an ONNX model file's bytes."""
    return {"format": ONNX_UPLOAD, "model": base64.b64encode(data).decode("ascii")}


def onnx_upload_bytes(max_bytes: int) -> int:
    """The largest upload body that can carry an ONNX file of ``max_bytes`` bytes."""
    return 4 * -(-max_bytes // 3) + len(json.dumps(onnx_upload(b""))) + 64


def read_onnx_upload(document: Any) -> bytes | None:
    """The ONNX file's bytes an upload body carries; None for a body that is no ONNX upload (a GLM
    file); ModelError for an ONNX upload that is not exactly ``{"format", "model"}`` with base64."""
    if not isinstance(document, dict) or document.get("format") != ONNX_UPLOAD:
        return None
    if set(document) != {"format", "model"} or not isinstance(document["model"], str):
        raise ModelError(f"an ONNX upload is exactly {{'format': {ONNX_UPLOAD!r}, 'model': base64 text}}; "
                         f"got keys {sorted(document)}")
    try:
        return base64.b64decode(document["model"], validate=True)
    except binascii.Error as exc:
        raise ModelError(f"the ONNX upload's model is not base64 ({exc})") from None
