"""Rows in batches: the sums a site releases, computed a batch of rows at a time.

A release is a sum over records (counts, sums of products, a deviance). Computing it over the whole
column at once makes a working vector per intermediate step, each as large as the column; over
batches of :data:`BATCH_ROWS` rows the intermediates of one batch are all the memory a call adds
to the columns it reads. The sums are the same up to the order of floating-point additions.
"""

from __future__ import annotations

from typing import Iterator

BATCH_ROWS = 1 << 16  # 65,536 rows: a float64 working vector of 512 KiB


def row_batches(n: int, size: int = BATCH_ROWS) -> Iterator[slice]:
    """Consecutive slices covering rows ``0 .. n - 1``, ``size`` rows each (the last may be shorter)."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))
