"""Running R reference code through rpy2 (never skipped: R is part of the test set-up)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dsfed_server import rbridge


def r_eval(source: str, **data: Any) -> Any:
    """Evaluate R ``source`` with numeric/character vectors bound as variables; return a numpy array."""
    ro = rbridge.robjects()
    with rbridge.lock(), ro.default_converter.context():
        env = ro.Environment()
        for name, values in data.items():
            arr = np.asarray(values)
            if arr.dtype.kind in "iuf":
                env[name] = ro.FloatVector(arr.astype(float).tolist())
            else:
                env[name] = ro.StrVector([str(v) for v in arr.tolist()])
        result = ro.r["eval"](ro.r["parse"](text=source), envir=env)
        return np.asarray(list(result))
