"""Progress of multi-round analyses (rich): on a terminal, in a Jupyter notebook, or when forced.

``with progress("GLM: Fisher scoring", total=25) as bar: ... bar.advance()``.
Nested uses (the ROC-GLM's inner GLM) add a line to the display already shown
instead of opening a second one. Shown when stderr is a terminal (transient: removed when
done), in a Jupyter kernel (rich renders it in the cell's output; the final state stays), or
when ``DSFED_PROGRESS=1`` (plain text on stderr, the final state of each line printed at the
end: for logs and tests). ``DSFED_PROGRESS=0`` turns it off everywhere. Elsewhere (pipes, CI,
the demo's output captured to a file) nothing is printed.

A loop that may stop early (the GLM stops at convergence) sets the total to the rounds it ran
(``bar.update(total=n)``), so the bar ends full at its real count rather than at 4/25.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

_lock = threading.Lock()
_live: list[Any] = []  # the rich Progress on screen, if any
ENV = "DSFED_PROGRESS"


class Bar:
    """One line of the display; a no-op when progress is off."""

    def __init__(self, display: Any = None, task: Any = None) -> None:
        self._display, self._task = display, task

    def advance(self, steps: float = 1) -> None:
        if self._display is not None:
            self._display.advance(self._task, steps)

    def update(self, **fields: Any) -> None:
        """``description=``, ``total=``, ``completed=`` as rich takes them."""
        if self._display is not None:
            self._display.update(self._task, **fields)


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython's ZMQ shell), where stderr is no terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _terminal() -> bool:
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


def enabled() -> bool:
    """``DSFED_PROGRESS`` (1/0) if set, else on an interactive stderr or in a notebook."""
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("1", "true", "on", "yes"):
        return True
    if forced in ("0", "false", "off", "no"):
        return False
    return _terminal() or in_notebook()


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Bar]:
    """A progress line for one multi-round analysis (transient on a terminal)."""
    if not enabled():
        yield Bar()
        return
    with _lock:
        outer = _live[-1] if _live else None
    if outer is not None:  # nested: a line in the display already shown
        task = outer.add_task(description, total=total)
        try:
            yield Bar(outer, task)
        finally:
            if _terminal():
                outer.remove_task(task)
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,  # noqa: PLC0415
                               TextColumn, TimeElapsedColumn)

    display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=Console(file=sys.stderr), transient=_terminal())
    with display:
        with _lock:
            _live.append(display)
        try:
            yield Bar(display, display.add_task(description, total=total))
        finally:
            with _lock:
                _live.remove(display)
