"""Vector symbols held as how the site computes them, not as their values (views).

``deriveDS``'s column and ``predictDS``'s predictions of a GLM (of an ONNX graph too, where the site
asks) are kept as a :class:`ColumnView`: what the computation read, as the workspace held it when
the symbol was made (:class:`Held`: a table, a subset's row ids, a stored vector or another view,
shared, never copied), and the computation (the expression the site's interpreter evaluates; the
approved model). A call that reads the symbol computes its values for that call only (once however
often the call names it): nothing column-sized is kept between calls, where a stored vector of 1e7
records holds 80 MB (unless what it read was made for it alone: ``predictDS`` of a subset made
inside the call holds that subset's built table). A view read through more than :data:`MAX_CHAIN`
views is stored instead. Each read pays the computation again: an expression's arithmetic, a GLM's
:math:`X\\beta`, an ONNX graph's run where the site keeps its predictions as a view (``[catalog]
onnx_predictions = "view"``; by default they are stored: its run costs about a second a million
records; ``bench/subsets.py`` measures each).

The values are the same at every read: what a view read is never modified (workspace values are
replaced, not changed) and the site's arithmetic is deterministic (numpy's; onnxruntime's on one
thread, over the same records in the same batches at every read). The checks made when
the symbol was made (the release gate's cuts and few-values rules) therefore hold for every read,
and every release from it is checked as any other. A view keeps what it read alive: a view of a
table the analyst then removes still holds that table, as R's value semantics ask (the symbol
keeps its values).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from dsfed_core.errors import CallError, NotFound
from dsfed_server.modelframe import COMPUTED, computed_column
from dsfed_server.rowsets import RowSet, kept_table


@dataclass(frozen=True, eq=False)
class Held:
    """The workspace value symbol ``name`` held when a call read it (``value``: a table, a subset, a
    vector or a view), and the ``column`` the call read of it (None: the value itself)."""

    name: str
    value: Any
    column: str | None = None

    def read(self) -> Any:
        """What a call gets: the value, a subset's or a view's built, or the column of it."""
        return read_value(self.name, self.value, self.column)


def read_value(name: str, value: Any, column: str | None = None) -> Any:
    """Symbol ``name``'s value ``value`` as a call reads it (a subset built, a view computed), or its
    ``column`` (``name$column``; a subset builds only the stored column that gives it)."""
    if isinstance(value, ColumnView):
        value = value.series()
    if isinstance(value, RowSet):
        if column is None:
            return value.frame()
        if not value.reads(column) and column not in value.parent.attrs.get(COMPUTED, {}):
            raise NotFound(f"table {name!r} has no column {column!r}",
                           hint=f"columns: {', '.join(map(str, value.labels))}")
        value = value.frame(value.reads(column))  # a computed column's source dropped: the read says so
    if column is None:
        return value
    if not isinstance(value, pd.DataFrame):
        raise CallError(f"{name!r} is not a table, so {(name + '$' + column)!r} has no column")
    if column in value.columns:
        return value[column]
    if column in value.attrs.get(COMPUTED, {}):
        return computed_column(value, column)
    raise NotFound(f"table {name!r} has no column {column!r}", hint=f"columns: {', '.join(map(str, value.columns))}")


MAX_CHAIN = 8  # views computed from views at most this deep: a longer chain is stored (each read would compute it)


class ColumnView:
    """A float64 vector of ``len(index)`` records computed from ``inputs`` when read:
    ``compute(*values)`` over what each input reads, as a Series with ``index``, ``name`` and
    ``attrs`` (its records' positions in the site table and provenance, fixed when it was made);
    ``depth``: 1, or one more than the deepest view it reads."""

    __slots__ = ("inputs", "compute", "index", "name", "attrs", "depth", "_built", "__weakref__")

    def __init__(self, inputs: tuple[Held, ...], compute: Callable[..., np.ndarray], index: pd.Index, name: str,
                 attrs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.compute = compute
        self.index = index
        self.name = name
        self.attrs = attrs
        self.depth = 1 + max((h.value.depth for h in inputs if isinstance(h.value, ColumnView)), default=0)
        self._built: weakref.ref | None = None

    def __len__(self) -> int:
        return len(self.index)

    def series(self) -> pd.Series:
        """The values, computed unless the Series computed last is still in use (by the running call)."""
        if self._built is not None and (built := self._built()) is not None:
            return built
        values = self.compute(*(held.read() for held in self.inputs))
        out = pd.Series(values, index=self.index, name=self.name, copy=False)
        out.attrs = dict(self.attrs)
        self._built = weakref.ref(out)
        return out

    def built(self, value: Any) -> bool:
        """Whether ``value`` is, itself, the Series :meth:`series` computed last (and still in use)."""
        return self._built is not None and self._built() is value


def kept_vector(view: ColumnView, values: np.ndarray) -> ColumnView | pd.Series:
    """``view``, or its ``values`` (computed when it was made) as a stored vector when it reads views
    more than :data:`MAX_CHAIN` deep (``V <- V + 1`` again and again would compute the whole chain
    at every read, and recurse as deep)."""
    if view.depth <= MAX_CHAIN:
        return view
    out = pd.Series(values, index=view.index, name=view.name, copy=False)
    out.attrs = dict(view.attrs)
    return out


def kept_value(symbols: dict[str, Any], value: Any) -> Any:
    """What a workspace keeps for ``value``: the view whose Series, or the subset whose built table,
    ``value`` is (``V2 <- V`` keeps the view), or ``value``."""
    if isinstance(value, pd.Series):
        return next((v for v in symbols.values() if isinstance(v, ColumnView) and v.built(value)), value)
    return kept_table(symbols, value)
