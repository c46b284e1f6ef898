"""Records whose pattern of missing values few others share: left out of every release of their table.

A column missing at a few records splits its table into two row sets that differ by those records.
Every release over the records complete in the column (its histogram, a complete-case subset, the mean
of ``D$age + 0*D$bmi``) differs from the same release over the whole table by exactly them, and the
difference of two means is their values: one record missing its BMI gives away its age, its income
and its outcome. The row-set audit (:mod:`~dsfed_server.disclosure.differencing`) refuses a release
that would single such records out, which then refuses the honest analyst's histogram of BMI, a
complete-case subset or a two-score comparison, for two missing values, with a reason about earlier
releases that says nothing of the missing values.

Missing values are data, and the site treats them as such: from the moment a table is assigned, for
every analyst and every release, the site leaves out the records whose **missing pattern** (the set
of the table's columns missing in the record) fewer than *m* records of the table share, *m* the
larger of ``disclosure.q_threshold`` and ``disclosure.subset_min_difference``; records with no missing
value are never left out. The records complete in any set of columns then differ from the records
complete in any other set, and from the table, by whole patterns: by nothing or by at least *m*
records. How many records are left out, and why, the site says (it is a count of the table, as its
size is); which records, and their values, it does not. The patterns are read over all the table's
columns, whatever variables an analyst assigns, so that every assignment of the table holds the same
records (two selections that left out different records would differ by them).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

RULES = ("disclosure.q_threshold", "disclosure.subset_min_difference")


def rare_patterns(missing: Iterable[np.ndarray], n: int, minimum: int) -> np.ndarray:
    """The records (boolean, of ``n``) whose missing pattern -- which of the masks ``missing`` (one per
    column, True where the column is missing) hold them -- fewer than ``minimum`` records share; never a
    record with no missing value."""
    label = np.zeros(n, dtype=np.int64)
    top = 1  # every label is below it
    incomplete = np.zeros(n, dtype=bool)
    for mask in missing:
        if not mask.any():
            continue
        if top > 1 << 61:
            label = pd.factorize(label)[0].astype(np.int64)
            top = int(label.max()) + 1
        label = label * 2 + mask
        top *= 2
        incomplete |= mask
    codes = pd.factorize(label)[0]
    return incomplete & (np.bincount(codes)[codes] < minimum)


def note(left_out: int, minimum: int) -> str:
    """What the site says of the records it leaves out of a table."""
    return (f"{left_out} record(s) left out of every release of this table: each has a pattern of missing values "
            f"(the columns missing in it) that fewer than {minimum} records share, and comparing releases with and "
            "without them would give their values (rules disclosure.q_threshold, disclosure.subset_min_difference)")
