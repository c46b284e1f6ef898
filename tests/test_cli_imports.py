"""The command lines start without the heavy libraries: importing ``dsfed_server.cli`` or
``dsfed_client.cli`` (what ``dsfed-server --help`` and ``dsfed --help`` run) loads none of numpy,
pandas, scipy, FastAPI, pydantic, uvicorn, requests, rpy2, ONNX, DuckDB, pyarrow, matplotlib,
cryptography; each command imports what it runs. The time it takes is measured in
bench/cli_start.py (bench/RESULTS.md), not here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sitekit import ROOT

HEAVY = ("numpy", "pandas", "scipy", "fastapi", "starlette", "pydantic", "uvicorn", "requests", "rpy2", "onnx",
         "onnxruntime", "duckdb", "pyarrow", "matplotlib", "cryptography")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nimport json; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["dsfed_server.cli", "dsfed_client.cli"])
def test_the_command_line_parser_loads_no_heavy_library(module: str):
    prog = "dsfed-server" if module.startswith("dsfed_server") else "dsfed"
    code = (f"import {module}, contextlib, io\nwith contextlib.suppress(SystemExit), "
            f"contextlib.redirect_stdout(io.StringIO()) as out:\n    {module}.main(['--help'])\n"
            f"assert 'usage: {prog}' in out.getvalue()")
    assert _loaded_after(code) == []


def test_the_client_names_still_load_on_use():
    """``from dsfed_client import LoginBuilder`` works as before: the name loads its module."""
    assert "requests" in _loaded_after("from dsfed_client import LoginBuilder, Ref, FederatedCallError")


def test_a_command_still_reports_an_unusable_file_in_one_line(tmp_path):
    bad = tmp_path / "site.toml"
    bad.write_text("[site]\nname = 3\n")
    out = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "check", str(bad)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith(f"dsfed-server: {bad}") and "Traceback" not in out.stderr
