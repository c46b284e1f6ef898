"""How long the command lines take to start: ``dsfed-server --help`` and ``dsfed --help`` against a
bare ``python -c pass``, each a fresh process (median and maximum of ``--repeat`` runs, wall clock).

    .venv/bin/python bench/cli_start.py --repeat 20

The commands run as the installed entry points do (``python -m dsfed_server.cli``, ``python -m
dsfed_client.cli``) with this interpreter; also printed: the heavy modules each one imports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "pandas", "scipy", "fastapi", "starlette", "pydantic", "uvicorn", "requests", "rpy2", "onnx",
         "onnxruntime", "duckdb", "pyarrow", "matplotlib", "cryptography")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "dsfed-server --help": [sys.executable, "-m", "dsfed_server.cli", "--help"],
    "dsfed --help": [sys.executable, "-m", "dsfed_client.cli", "--help"],
}


def seconds(command: list[str]) -> float:
    """Wall-clock seconds of one run of ``command`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heavy_imports(module: str) -> list[str]:
    """The modules of :data:`HEAVY` that importing ``module`` loads, in a fresh interpreter."""
    probe = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], check=True, cwd=ROOT, capture_output=True, text=True)
    return json.loads(out.stdout.replace("'", '"'))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    for name, command in COMMANDS.items():
        seconds(command)  # warm the file cache
        runs = [seconds(command) for _ in range(args.repeat)]
        print(f"{name:<22} median {statistics.median(runs) * 1e3:7.1f} ms   max {max(runs) * 1e3:7.1f} ms")
    for module in ("dsfed_server.cli", "dsfed_client.cli"):
        print(f"import {module}: heavy modules loaded: {heavy_imports(module) or 'none'}")


if __name__ == "__main__":
    main()
