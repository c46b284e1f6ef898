"""What the differencing audit costs a site whose table has a long release history.

Every subset and every cell of a binned release from a table is a row set the site keeps, packed
(1 bit a record), for all analysts (``disclosure.subset_min_difference``). A new release is audited
against all of them (``differencing.row_set_problem``): its sets are compared with each earlier one,
and the records isolated by a combination of all of them are sought over the sets' atoms. This
times that audit, and its peak memory (tracemalloc; numpy reports its buffers to it), for a table
of ``--n`` records after ``--histograms`` histograms of ten bins (ten row sets each), against a
new cell that isolates one record (so the audit runs to the end). The histograms are on one column
with shifted edges (about a hundred atoms: records that belong to the same sets), or with
``--columns`` on that many independent columns (nearly a record per atom: the audit's atoms x sets
matrix as large as it gets).

    .venv/bin/python bench/audit.py --n 10000000 --histograms 10
    .venv/bin/python bench/audit.py --n 10000000 --histograms 10 --columns
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsfed_server.disclosure.differencing import row_set_problem  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="records in the table")
    parser.add_argument("--histograms", type=int, default=10, help="earlier histograms of ten bins")
    parser.add_argument("--columns", action="store_true", help="each histogram on a column of its own")
    args = parser.parse_args()
    n = args.n
    rng = np.random.default_rng(6)
    x = rng.uniform(size=n)
    earlier = []
    for shift in range(args.histograms):
        column = rng.uniform(size=n) if args.columns and shift else x
        cell = np.digitize(column, np.linspace(0, 1, 11)[1:-1] + (0 if args.columns else shift * 0.004))
        earlier.extend(np.packbits(cell == k) for k in range(10))
    if args.columns:  # the first histogram's first cell, but for its record of smallest x
        new = x <= 0.1
        new[np.argmin(x)] = False
    else:
        above = np.min(x[x > 0.204])  # the record just above the second histogram's first edge
        new = (x <= above) & (x > 0.2)  # a cell from the first histogram's edge to that record
    tracemalloc.start()
    start = time.perf_counter()
    problem = row_set_problem(earlier, [new], 1 if args.columns else 5)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    history = sum(p.nbytes for p in earlier)
    layout = f"on {args.histograms} columns" if args.columns else "on one column"
    print(f"n = {n:,}; {len(earlier)} earlier row sets ({layout}, {history / 1e6:.0f} MB packed); audit of one new "
          f"cell: {seconds:.2f} s, peak {peak / 1e6:.0f} MB ({peak / n:.0f} bytes a record); "
          f"refused: {problem is not None}")


if __name__ == "__main__":
    main()
