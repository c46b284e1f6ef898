"""Progress of multi-round analyses on the terminal (rich), silent unless stderr is a TTY.

``with progress("GLM: Fisher scoring", total=25) as bar: ... bar.advance()``.
Nested uses (the ROC-GLM's inner GLM) add a line to the display already shown
instead of opening a second one. When stderr is not a terminal (pipes, CI,
tests, the demo's output captured to a file) nothing is ever printed.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

_lock = threading.Lock()
_live: list[Any] = []  # the rich Progress on screen, if any


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


def enabled() -> bool:
    """Progress shows only on an interactive stderr."""
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Bar]:
    """A progress line for one multi-round analysis (transient: removed when done)."""
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
            outer.remove_task(task)
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    with display:
        with _lock:
            _live.append(display)
        try:
            yield Bar(display, display.add_task(description, total=total))
        finally:
            with _lock:
                _live.remove(display)
