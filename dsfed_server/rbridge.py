"""The R/Python bridge: registry entries implemented in R, run through rpy2.

R is started lazily, once per process, by the first call that needs it (starting it takes
0.35 s, which a site does not spend on its start-up: :func:`installed` looks for R and rpy2
without starting R). rpy2 is not thread-safe and keeps its
conversion rules in a context variable, so every call takes one lock and
enters the default converter. Only R code written here runs; nothing a client
sends reaches R except numbers converted to R vectors.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
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
    _state["reason"] = _missing()
    if _state["reason"]:
        return
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
    """Whether R runs in this process (starting it, once)."""
    with _lock:
        _start()
        return _state["ro"] is not None


def _missing() -> str:
    """Why R cannot start here, found without starting it ('' when R and rpy2 are installed)."""
    if importlib.util.find_spec("rpy2") is None:
        return "the Python package rpy2 is not installed"
    if not os.environ.get("R_HOME") and shutil.which("R") is None:
        return "R is not installed (no R_HOME, no R on the PATH)"
    return ""


def installed() -> bool:
    """Whether R and rpy2 are installed, without starting R; once R was started, whether it runs."""
    with _lock:
        return _state["ro"] is not None if _state["tried"] else not _missing()


def unavailable_reason() -> str:
    """Why R does not run here; before R was started, only what :func:`installed` finds."""
    with _lock:
        if _state["tried"]:
            return _state["reason"] or "R is available"
        return _missing() or "R is installed (not started yet)"


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
