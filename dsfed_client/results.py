"""One presentation for every result: ``to_dict``, ``to_frame``, ``summary`` and ``repr`` are
driven by the dataclass fields of the result and their metadata, in the spirit of statsmodels'
results classes (the numbers are attributes; presentation is derived from them, never written
by hand per class).

A result class is a frozen dataclass (:func:`result`) deriving from :class:`Results`. Each field
(:func:`stat`) or derived property (:class:`derived`) may carry

- ``label``: the row label in :meth:`Results.summary` (``None``: not shown); ``{level}`` in a
  label becomes the confidence level ``1 - alpha`` of the result, e.g. ``95%``;
- ``fmt``: the format spec of its value in the summary (default ``.6g``);
- ``brief``: the format spec of its value in ``repr`` (``None``: not shown);
- ``export``: whether :meth:`Results.to_dict` and :meth:`Results.to_frame` hold it.

Names are one convention across estimators: a confidence interval is an :class:`ConfInt`
``(lower, upper)`` attribute whose name starts with ``ci`` (``ci``, ``ci_delong``, ``ci_logit``,
``roc_glm_ci``); ``to_dict`` and ``to_frame`` give it as two keys ``<name>_lower`` and
``<name>_upper`` (``ci_lower``, ``ci_upper``, ...), always beside the result's ``alpha``. Counts
of groups are ``n_groups``, of bins ``n_bins``, of thresholds ``n_thresholds``. Values that JSON
cannot hold (NaN, infinities) become ``None`` in ``to_dict``.

Examples
--------
>>> @result
... class Mean(Results):
...     '''A mean with its Wald interval.'''
...     _title = "Mean"
...     mean: float = stat("Mean", brief=".3f")
...     se: float = stat("Std. error")
...     alpha: float = stat(export=True)
...     @derived("{level} CI", brief=".3f")
...     def ci(self) -> ConfInt:
...         return ConfInt(self.mean - 1.959963984540054 * self.se, self.mean + 1.959963984540054 * self.se)
>>> m = Mean(1.0, 0.5, 0.05)
>>> m
Mean(mean=1.000, ci=(0.020, 1.980))
>>> m.to_dict()
{'mean': 1.0, 'se': 0.5, 'alpha': 0.05, 'ci_lower': 0.020018007729972975, 'ci_upper': 1.979981992270027}
>>> print(m.summary(), end="")
                            Mean
============================================================
Mean:                                                      1
Std. error:                                              0.5
95% CI:                                   0.020018 - 1.97998
============================================================
"""

from __future__ import annotations

import dataclasses
import html
import math
import textwrap
from typing import Any, Callable, ClassVar, Iterator, NamedTuple, TypeVar

import numpy as np
import pandas as pd

T = TypeVar("T")


class ConfInt(NamedTuple):
    """A confidence interval; unpacks and compares as the tuple ``(lower, upper)``."""

    lower: float
    upper: float


def stat(label: str | None = None, fmt: str = ".6g", *, brief: str | None = None, export: bool = True,
         default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field of a result with its presentation metadata (see the module docstring);
    ``factory`` makes a mutable default, as ``dataclasses.field``'s ``default_factory``."""
    meta = {"label": label, "fmt": fmt, "brief": brief, "export": export}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def hidden(default: Any = dataclasses.MISSING) -> Any:
    """A field kept for methods (plots, fits behind the numbers) but not presented or exported."""
    return dataclasses.field(default=default, compare=False, metadata={"export": False})


class derived(property):  # noqa: N801 (a decorator, named as property is)
    """A property presented as a field is: ``@derived("Label", fmt=".4g", brief=".4f")``."""

    def __init__(self, label: str | None = None, fmt: str = ".6g", *, brief: str | None = None,
                 export: bool = True) -> None:
        self.meta = {"label": label, "fmt": fmt, "brief": brief, "export": export}

    def __call__(self, fget: Callable[[Any], Any]) -> "derived":
        super().__init__(fget, doc=fget.__doc__)
        return self


def result(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass whose ``repr`` is :meth:`Results.__repr__`."""
    return dataclasses.dataclass(frozen=True, repr=False, eq=False)(cls)


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: results by their ``to_dict``, arrays and frames as lists and
    records, intervals as ``[lower, upper]``, NaN and infinities as ``None``.

    >>> jsonable({"x": np.array([1.0, np.nan]), "n": np.int64(3), "ci": ConfInt(0.1, 0.2)})
    {'x': [1.0, None], 'n': 3, 'ci': [0.1, 0.2]}
    """
    if isinstance(value, Results):
        return value.to_dict()
    if isinstance(value, pd.DataFrame):
        flat = value if isinstance(value.index, pd.RangeIndex) else value.reset_index()
        return [jsonable(r) for r in flat.to_dict(orient="records")]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


MAX_WIDTH = 100
"""The widest line of a text summary: longer values, table notes and notes wrap."""


def render(title: str, rows: list[tuple[str, str]], *, table: pd.DataFrame | None = None,
           notes: tuple[str, ...] = (), fmt: str = ".6g") -> str:
    """The one text layout of every summary: a title centred over label-value rows, then an
    optional table and notes, as statsmodels' summaries; at most :data:`MAX_WIDTH` columns (a long
    value, the table's text columns and the notes wrap).

    >>> print(render("T", [("a", "1"), ("bb", "22")]), end="")
                                 T
    ============================================================
    a:                                                         1
    bb:                                                       22
    ============================================================
    """
    body = "" if table is None else _table_text(table, fmt)
    width = min(MAX_WIDTH, max([60, len(title) + 4, *(len(k) + len(v) + 4 for k, v in rows),
                                *(len(line) for line in body.splitlines())]))
    lines = [title.center(width).rstrip(), "=" * width]
    for k, v in rows:
        if len(k) + len(v) + 2 <= width:
            lines.append(f"{k + ':':<{width - len(v)}}{v}")
        else:
            lines += textwrap.wrap(v, width, initial_indent=f"{k}: ", subsequent_indent=" " * (len(k) + 2))
    lines.append("=" * width)
    if body:
        lines += [body, "=" * width]
    for note in notes:
        lines += textwrap.wrap(note, width, subsequent_indent="  ") or [""]
    return "\n".join(lines) + "\n"


def _table_text(table: pd.DataFrame, fmt: str) -> str:
    """A table as text; where that is wider than :data:`MAX_WIDTH`, its text columns (notes) are
    written left-aligned after the numbers and wrapped under themselves, and a table of numbers
    only is written in blocks of the columns that fit (pandas' ``line_width``)."""
    body = table.to_string(float_format=lambda v: format(v, fmt), na_rep="-")
    text = [c for c in table.columns if not pd.api.types.is_numeric_dtype(table[c])]
    if max(map(len, body.splitlines()), default=0) <= MAX_WIDTH:
        return body
    if not text or len(text) == table.shape[1]:
        blocks = table.to_string(float_format=lambda v: format(v, fmt), na_rep="-", line_width=MAX_WIDTH)
        return "\n".join(line.rstrip() for line in blocks.splitlines())
    numbers = table.drop(columns=text).to_string(float_format=lambda v: format(v, fmt), na_rep="-").splitlines()
    left = max(map(len, numbers))
    room = max(20, MAX_WIDTH - left - 2)
    header = len(numbers) - len(table)
    out = [f"{line:<{left}}  {' / '.join(map(str, text))}" if i == 0 else line
           for i, line in enumerate(numbers[:header])]
    for line, (_, row) in zip(numbers[header:], table[text].iterrows()):
        cell = "; ".join(str(v) for v in row if isinstance(v, str) and v)
        wrapped = textwrap.wrap(cell, room) or [""]
        out.append(f"{line:<{left}}  {wrapped[0]}".rstrip())
        out += [" " * (left + 2) + more for more in wrapped[1:]]
    return "\n".join(out)


def _format(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, (float, int)) for v in value):
        return " - ".join(format(float(v), fmt) for v in value)
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, (int, np.integer)):
        return str(value)
    if isinstance(value, (float, np.floating)):
        return format(float(value), fmt)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_format(v, fmt)}" for k, v in value.items())
    return str(value)


class Results:
    """Base of every result class: presentation from the fields' metadata (module docstring).

    A subclass sets ``_title`` (the summary's title and the frame's row label) and may override
    :meth:`_table` (the table under the summary, and ``to_frame``'s value) and :meth:`_notes`.
    """

    _title: ClassVar[str] = ""
    _table_fmt: ClassVar[str] = ".6g"  # the format of the numbers in the summary's table

    def _items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every presented name with its metadata: the fields in order, then derived properties."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            yield f.name, {"label": None, "fmt": ".6g", "brief": None, "export": True, **f.metadata}
        seen: set[str] = set()
        for klass in reversed(type(self).__mro__):
            for name, attr in vars(klass).items():
                if isinstance(attr, derived) and name not in seen:
                    seen.add(name)
                    yield name, attr.meta

    @property
    def level(self) -> str:
        """The confidence level ``1 - alpha`` as a percentage (``95%``)."""
        return f"{1 - getattr(self, 'alpha', 0.05):.0%}"

    def to_dict(self) -> dict[str, Any]:
        """Every exported field and derived value as JSON types; an interval ``ci...`` as
        ``ci..._lower`` and ``ci..._upper``; the result's table, if any, as records under ``table``."""
        out: dict[str, Any] = {}
        for name, meta in self._items():
            if not meta["export"]:
                continue
            value = getattr(self, name)
            if isinstance(value, ConfInt):
                out[f"{name}_lower"], out[f"{name}_upper"] = jsonable(value.lower), jsonable(value.upper)
            else:
                out[name] = jsonable(value)
        table = self._table()
        if table is not None:
            out["table"] = jsonable(table)
        return out

    def _table(self) -> pd.DataFrame | None:
        """The result's table (groups, bins, coefficients), if it has one."""
        return None

    def _notes(self) -> tuple[str, ...]:
        return ()

    def to_frame(self) -> pd.DataFrame:
        """The result's table, or else one row of its scalar values (intervals as ``*_lower`` and
        ``*_upper`` columns), labelled by the result's title."""
        table = self._table()
        if table is not None:
            return table.copy()
        row = {k: np.nan if v is None else v for k, v in self.to_dict().items()
               if v is None or isinstance(v, (int, float, str, bool))}
        return pd.DataFrame([row], index=[self._title or type(self).__name__])

    def _rows(self) -> list[tuple[str, str]]:
        """The summary's label-value rows, from the labelled fields and derived values."""
        return [(meta["label"].format(level=self.level), _format(getattr(self, name), meta["fmt"]))
                for name, meta in self._items() if meta["label"]]

    def summary(self) -> str:
        """A text table: the labelled values, then the result's table and notes."""
        return render(self._title or type(self).__name__, self._rows(), table=self._table(), notes=self._notes(),
                      fmt=self._table_fmt)

    def _repr_html_(self) -> str:
        """The summary as HTML for notebooks (Jupyter calls it): the labelled values, the table, then
        the notes (what the sites withheld or merged, as the text summary says it)."""
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                       for k, v in self._rows())
        table = self._table()
        body = "" if table is None else table.to_html(float_format=lambda v: format(v, self._table_fmt), na_rep="-")
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self._notes())
        return (f"<div><strong>{html.escape(self._title or type(self).__name__)}</strong>"
                f"<table>{rows}</table>{body}{notes}</div>")

    def __repr__(self) -> str:
        parts = []
        for name, meta in self._items():
            if meta["brief"] is None:
                continue
            value = getattr(self, name)
            if value is None:  # e.g. a ROC-GLM AUC where no ROC-GLM was fitted
                shown = "None"
            elif isinstance(value, tuple):
                shown = "(" + ", ".join(format(float(v), meta["brief"]) for v in value) + ")"
            elif isinstance(value, (float, np.floating)):
                shown = format(float(value), meta["brief"])
            else:
                shown = format(value, meta["brief"]) if meta["brief"] else repr(value)
            parts.append(f"{name}={shown}")
        return f"{type(self).__name__}({', '.join(parts)})"
