"""The analyst client installs and runs without the site server.

``make test`` builds a virtualenv holding ``pip install dsfed`` alone (``.venv-client``, from PyPI,
as an analyst would install it; ``DSFED_CLIENT_PYTHON`` names another interpreter). Its Python
runs an analysis against three real GBSG2 site servers (noise off) over HTTP; the results must
equal R's on the pooled data, and none of the server's packages (FastAPI, uvicorn, ...) may be
importable there.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from packaging.requirements import Requirement

from conftest import FIXTURES, ROOT
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision
from rref import R_PROC, r_eval, r_reference

SITES = ("site1", "site2", "site3")
NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
CLIENT_PYTHON = Path(os.environ.get("DSFED_CLIENT_PYTHON", ROOT / ".venv-client" / "bin" / "python"))
WEB_SERVER = {"fastapi", "uvicorn", "starlette"}
ONNX = {"onnx", "onnxruntime"}  # only sites parse and run ONNX models; the client sends their bytes


def _closure(requirements: list[Requirement], extras: set[str]) -> set[str]:
    """Every distribution the requirements pull in (as installed here), transitively."""
    seen: set[str] = set()
    todo = [r for r in requirements if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)]
    while todo:
        name = todo.pop().name.lower()
        if name in seen:
            continue
        seen.add(name)
        todo += [r for r in map(Requirement, metadata.requires(name) or [])
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    return seen


def test_client_and_core_never_import_the_server():
    """No module of the client or the shared core imports dsfed_server (or a web framework, or the
    ONNX packages), at any level: the modules' import statements, read with ``ast``."""
    offending = []
    for package in ("dsfed_client", "dsfed_core"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                offending += [f"{path.relative_to(ROOT)}: {n}" for n in names
                              if n.split(".")[0] in {"dsfed_server", *WEB_SERVER, *ONNX, "pydantic"}]
    assert offending == []


def test_the_client_extra_pulls_in_no_web_server():
    """dsfed's declared dependencies, resolved through what each of them requires: the client
    (no extra, or ``client``) reaches no web framework and no ONNX package; ``server`` does (so the
    check can fail)."""
    requirements = [Requirement(r) for r in metadata.requires("dsfed") or []]
    assert not _closure(requirements, {"", "client"}) & (WEB_SERVER | ONNX)
    assert {"fastapi", "uvicorn", "starlette"} <= _closure(requirements, {"server"})


@pytest.fixture(scope="module")
def http_sites(tmp_path_factory):
    run = tmp_path_factory.mktemp("client-only")
    provisioned = provision(run, {s: (FIXTURES / s, NO_NOISE) for s in SITES})
    with LocalSites(provisioned.values(), run / "run") as sites:
        yield provisioned, sites.urls, run


def test_the_client_alone_analyses_http_sites_as_R_does(http_sites):
    assert CLIENT_PYTHON.exists(), (f"no client-only interpreter at {CLIENT_PYTHON}: `make test` builds "
                                    ".venv-client (pip install dsfed), or set DSFED_CLIENT_PYTHON")
    provisioned, urls, run = http_sites
    sites_file = run / "sites.json"
    sites_file.write_text(json.dumps({name: {"url": url, "user": provisioned[name].credentials["analyst"].user,
                                             "password": provisioned[name].credentials["analyst"].password}
                                      for name, url in urls.items()}))
    done = subprocess.run([str(CLIENT_PYTHON), str(ROOT / "tests" / "client_only" / "analyse.py"), str(sites_file)],
                          capture_output=True, text=True, timeout=240, cwd=run)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["importable"] == [], f"server packages importable in the client's environment: {got['importable']}"
    assert "pip install 'dsfed[server]'" in got["dsfed_server"]

    pooled = pd.concat([pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv") for s in SITES], ignore_index=True)
    y, p = pooled.y.to_numpy(float), pooled.score.to_numpy(float)
    auc, _, _, variance = r_reference("proc_ref", R_PROC, y=y, p=p)
    assert got["auc"] == pytest.approx(auc, rel=1e-12)
    assert got["variance"] == pytest.approx(variance, rel=1e-9)
    assert got["brier"] == pytest.approx(float(np.mean((y - p) ** 2)), rel=1e-12)
    coefficients = r_eval("coef(glm(y ~ age + tsize, family = binomial))", y=y, age=pooled.age, tsize=pooled.tsize)
    np.testing.assert_allclose(got["glm"], coefficients, rtol=1e-9)
