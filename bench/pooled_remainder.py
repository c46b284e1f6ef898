"""What a site's remainder check of a pooled release costs (``differencing.pooled_problem_cells``), with and
without its passes run again without the cell they took first (``REMAINDER_RETRIES``), and without its second pass
over cells that overlap at the site (``_union_remainder``: ``A - B - C + (B and C)``).

One site of ``--n`` records (score uniform, age uniform 20-90). The history: the pooled cells of a 10-bin
histogram of the score over the whole table (intervals of one column), then the same bins over ``--subsets``
subsets ``age >= a`` (cells of no one column), each pooled count three times this site's (two more sites alike).
The release checked: the same bins over ``age >= 45``. Timed: the check of the release against the history, the
best of ``--repeat`` runs; against numpy counting the release's cells over the same records, in the same run.

    .venv/bin/python bench/pooled_remainder.py --n 100000 1000000 --subsets 5 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsfed_server.disclosure import differencing  # noqa: E402
from dsfed_server.disclosure.differencing import PooledCell, pooled_problem_cells  # noqa: E402
from pooled_spans import best  # noqa: E402  (bench/pooled_spans.py, beside this file)

EDGES = np.linspace(0, 1, 11)


def _cells(score: np.ndarray, within: np.ndarray | None, column: str) -> list[PooledCell]:
    out = []
    for lo, hi in zip(EDGES[:-1], EDGES[1:]):
        rows = (score >= lo) & (score < hi)
        if within is not None:
            rows &= within
        out.append(PooledCell(np.packbits(rows), 3 * int(rows.sum()), column))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--subsets", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    union, retries = differencing._union_remainder, differencing.REMAINDER_RETRIES
    print(f"{'n':>10} {'earlier cells':>14} {'check s':>9} {'one pass s':>11} {'disjoint only s':>16} "
          f"{'numpy s':>9}")
    for n in args.n:
        rng = np.random.default_rng(5)
        score, age = rng.uniform(0, 1, n), rng.uniform(20, 90, n)
        for subsets in args.subsets:
            earlier = _cells(score, None, "score")
            for a in np.linspace(25, 85, subsets):
                earlier += _cells(score, age >= a, "")
            new = _cells(score, age >= 45, "")
            with_union = best(args.repeat, lambda: pooled_problem_cells(earlier, new, 5))
            differencing.REMAINDER_RETRIES = 0
            try:
                one_pass = best(args.repeat, lambda: pooled_problem_cells(earlier, new, 5))
                differencing._union_remainder = lambda *a, **k: (False, None)
                without = best(args.repeat, lambda: pooled_problem_cells(earlier, new, 5))
            finally:
                differencing._union_remainder, differencing.REMAINDER_RETRIES = union, retries
            counted = best(args.repeat, lambda: np.histogram(score[age >= 45], EDGES))
            print(f"{n:>10} {len(earlier):>14} {with_union:>9.3f} {one_pass:>11.3f} {without:>16.3f} "
                  f"{counted:>9.4f}")


if __name__ == "__main__":
    main()
