"""Differencing between subsets: the rows of every subset an analyst makes, per table.

``subset_min`` alone only compares a subset with the table it is cut from. Two subsets
that each pass it can still differ by one record (``age >= 50`` and ``age >= 51`` when one
person is 50), and then ``meanDS`` x ``Nvalid`` on both gives that person's value by
subtraction; or two overlapping subsets whose union is the table and whose intersection is
one record (``age >= 50`` and ``age <= 50``) give it by inclusion-exclusion.

So the site keeps, per table lineage and for all analysts together, the row sets (as 0/1
indicator vectors over the table's rows) of every subset made from it (in its release history,
:mod:`dsfed_server.disclosure.history`, which survives restarts), and refuses a new subset (rule
``disclosure.subset_min_difference``) when

* it differs from the table or an earlier subset in fewer than ``subset_min_difference``
  rows (but not zero: the same subset again is fine), or
* some single record's indicator :math:`e_i` lies in the linear span of the indicator
  vectors: then a linear combination of sums over those subsets is that record's value
  (the classical audit of sum queries, Chin & Ozsoyoglu 1982). With an orthonormal basis
  :math:`Q` of the span (SVD), :math:`e_i` is in it iff :math:`\\|Q^T e_i\\|^2 = 1`.

Rows are identified by their position in the site table: ``assignTable`` marks a table's
rows, the subset functions mark each subset's rows (``frame.attrs``); a table derived
otherwise gets a lineage keyed by its content (``calibrationFrameDS`` marks the rows it keeps).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

ROWS = "dsfed.rows"
MAX_SUBSETS = 500  # different subsets of one table, all analysts together


@dataclass(frozen=True, eq=False)  # identity equality: pandas compares attrs when combining frames
class Rows:
    """Which rows of a lineage's root table a frame holds."""

    lineage: str
    index: np.ndarray  # positions in the root table (never modified)
    n_root: int

    def __deepcopy__(self, memo: dict) -> "Rows":
        return self  # immutable: pandas deep-copies attrs on every operation, so share, don't copy

    def __copy__(self) -> "Rows":
        return self


def rows_of(frame: pd.DataFrame) -> Rows:
    info = frame.attrs.get(ROWS)
    if isinstance(info, Rows) and info.index.size == len(frame):
        return info
    digest = hashlib.sha256()
    digest.update(repr(list(map(str, frame.columns))).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return Rows("derived:" + digest.hexdigest()[:24], np.arange(len(frame)), len(frame))


def mark_rows(frame: pd.DataFrame, rows: Rows) -> pd.DataFrame:
    frame.attrs[ROWS] = rows
    return frame


def subset_problem(earlier: list[np.ndarray], new: np.ndarray, min_difference: int) -> str | None:
    """None if a subset with rows ``new`` may be made after the subsets ``earlier`` of the same
    table (boolean row indicators; the table itself counts as one), else the reason to refuse."""
    history = [np.ones(new.size, dtype=bool), *earlier]
    for old in history:
        differ = int(np.count_nonzero(old ^ new))
        if differ == 0:
            return None  # the same rows as before: nothing new
        if differ < min_difference:
            return (f"this subset differs from the table or an earlier subset of it in fewer than "
                    f"{min_difference} rows; comparing the two would single them out")
    if len(history) > MAX_SUBSETS:
        return f"at most {MAX_SUBSETS} different subsets of one table"
    matrix = np.column_stack(history + [new]).astype(float)
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    basis = u[:, s > s[0] * max(matrix.shape) * np.finfo(float).eps * 10]
    leverage = np.einsum("ij,ij->i", basis, basis)
    if np.any(leverage > 1 - 1e-8):
        return ("together with earlier subsets of the same table, this subset would single out a "
                "record (a combination of sums over them is one record's value)")
    return None
