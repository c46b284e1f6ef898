"""The R/Python bridge: registry entries implemented in R, run through rpy2.

R is started lazily, once per process. rpy2 is not thread-safe and keeps its
conversion rules in a context variable, so every call takes one lock and
enters the default converter. Only R code written here runs; nothing a client
sends reaches R except numbers converted to R vectors.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np

_lock = threading.Lock()
_state: dict[str, Any] = {"tried": False, "ro": None, "reason": ""}
_functions: dict[str, Any] = {}


_EMBEDDING_ENV = ("LD_LIBRARY_PATH",)  # R_HOME stays: R finds its modules by it


def _start() -> None:
    if _state["tried"]:
        return
    _state["tried"] = True
    saved = {k: os.environ.get(k) for k in _EMBEDDING_ENV}
    try:
        import rpy2.robjects as ro  # noqa: PLC0415

        with ro.default_converter.context():
            ro.r("invisible(1)")
        _state["ro"] = ro
    except Exception as exc:  # ImportError, or R missing / failing to start
        _state["reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    finally:
        # Starting R puts its library path into os.environ; child processes (other
        # Python interpreters) would then load the wrong libraries. The running
        # process read LD_LIBRARY_PATH at start and is unaffected by restoring it.
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def robjects() -> Any:
    """The started ``rpy2.robjects`` module (for R reference code in tests), or an error."""
    with _lock:
        _start()
        if _state["ro"] is None:
            raise RuntimeError(f"R is not available: {_state['reason']}")
        return _state["ro"]


def lock() -> threading.Lock:
    """The lock every use of R in this process must hold."""
    return _lock


def available() -> bool:
    with _lock:
        _start()
        return _state["ro"] is not None


def unavailable_reason() -> str:
    with _lock:
        _start()
        return _state["reason"] or "R is available"


def r_function(name: str, source: str) -> Callable[..., Any]:
    """Define (once) an R function from trusted source text in this module's callers.

    The returned Python callable takes numpy float arrays and returns a
    numpy float array.
    """

    def call(*arrays: np.ndarray) -> np.ndarray:
        with _lock:
            _start()
            ro = _state["ro"]
            if ro is None:
                raise RuntimeError(f"R is not available: {_state['reason']}")
            with ro.default_converter.context():
                if name not in _functions:
                    _functions[name] = ro.r(source)
                args = [ro.FloatVector(np.asarray(a, dtype=float).tolist()) for a in arrays]
                return np.asarray(list(_functions[name](*args)), dtype=float)

    return call
