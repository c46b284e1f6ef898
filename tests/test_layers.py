"""The layers a linter keeps: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml)
pass, and no module takes part in an import circle.

The contracts: the shared core imports neither the client nor the server, the client and the
server never import each other (only the demo, :mod:`dsfed_demo`, imports both), the client's
analyses sit above its session, and on the server the in-process site above the HTTP app, the app
above the service, and the disclosure layer below the functions; in the site service, its parts
above the call pipeline above the site's state. Both
checks read every import, those inside functions and under ``TYPE_CHECKING`` included, with grimp
(the graph import-linter builds).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

from sitekit import ROOT

PACKAGES = ("dsfed_core", "dsfed_client", "dsfed_server", "dsfed_demo")


def test_the_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_is_in_an_import_circle():
    """Every direct import ``a -> b`` where ``b`` also reaches ``a``, i.e. every edge of a circle."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = {(a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
               if graph.find_shortest_chain(importer=b, imported=a) is not None}
    assert circles == set()
