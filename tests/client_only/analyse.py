"""Run by tests/test_client_only.py with the Python of a virtualenv holding the analyst client
alone (``pip install dsfed``): an analysis over real HTTP sites, its results as JSON on stdout.

It uses nothing but the client and the shared core, and reports which server-side packages the
interpreter could import (none, when the client installs without them).
"""

from __future__ import annotations

import importlib.util
import json
import sys

from dsfed_client import LoginBuilder
from dsfed_client.analyses.calibration import ds_brier
from dsfed_client.analyses.discrimination import ds_auc
from dsfed_client.analyses.glm import ds_glm

SERVER_PACKAGES = ("fastapi", "uvicorn", "starlette", "pydantic", "cryptography", "pyarrow")


def main(sites_file: str) -> None:
    sites = json.load(open(sites_file))
    builder = LoginBuilder()
    for name, site in sites.items():
        builder.append(name, site["url"], user=site["user"], password=site["password"])
    with builder.login() as session:
        session.assign_table("D", "GBSG2.validation")
        auc = ds_auc(session, "D$y", "D$score")
        brier = ds_brier(session, "D$y", "D$score")
        glm = ds_glm(session, "y ~ age + tsize", "D")
    try:
        import dsfed_server  # noqa: F401
        server_import = "imported"
    except ImportError as exc:
        server_import = str(exc)
    json.dump({"auc": auc.auc, "variance": auc.variance, "brier": brier.brier, "glm": list(map(float, glm.params)),
               "importable": [p for p in SERVER_PACKAGES if importlib.util.find_spec(p) is not None],
               "dsfed_server": server_import}, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
