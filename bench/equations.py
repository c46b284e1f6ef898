"""What counting the functions each group of records answers costs a site (``disclosure.sums_per_record``).

Every exact sum (``meanDS``, ``varDS``, ``corDS``, group means) is recorded as a function over a row set
of the table, for all analysts, and a new sum is checked against all of them: the groups the row sets
single out (the sets, the differences of nested ones, the atoms in their span) and, per function, which
of them its own row sets' span holds. This times that check (``equations.too_many``) and its peak
memory for a table of ``--n`` records after ``--subsets`` subsets (age bands of random width), each
summarised through ``--functions`` functions of one column, against one more function over one more
subset; and, at one in-process site of ``--n`` records with the shipped rules, ``meanDS`` of a column
(the whole call: read, sum, ledger; the table read once before) with a fresh history, and of a new
derived column after that history, against numpy's mean of the same column in the same run.

    .venv/bin/python bench/equations.py --n 10000000 --subsets 20 --functions 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dsfed_server.disclosure.equations import Summed, too_many  # noqa: E402


def history(n: int, subsets: int, functions: int, rng: np.random.Generator
            ) -> tuple[list[Summed], list[Summed]]:
    """Sums of ``functions`` functions of x over the table and ``subsets`` age bands, and one more."""
    age = rng.integers(18, 95, n)
    earlier = [Summed(f"f{k}(x)", ("x",), np.packbits(np.ones(n, dtype=bool)).tobytes()) for k in range(functions)]
    for _ in range(subsets):
        lo = int(rng.integers(18, 80))
        rows = np.packbits((age >= lo) & (age < lo + int(rng.integers(5, 15)))).tobytes()
        earlier += [Summed(f"f{k}(x)", ("x",), rows) for k in range(functions)]
    new = [Summed(f"f{functions}(x)", ("x",), np.packbits((age >= 40) & (age < 47)).tobytes())]
    return earlier, new


def site_means(n: int, subsets: int) -> tuple[float, float, float]:
    """meanDS at one in-process site: fresh, after ``subsets`` subsets each with a mean and a variance of
    a log; numpy's mean of the same column."""
    from conftest import inprocess_builder
    from sitekit import make_sites

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.integers(18, 95, n), "x": rng.uniform(1, 2, n)})
    with tempfile.TemporaryDirectory() as tmp:
        provisioned, services = make_sites(Path(tmp), {"s1": frame})
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            session.aggregate_expr("meanDS(D$age)")  # the table read once
            start = time.perf_counter()
            session.aggregate_expr("meanDS(D$x)")
            fresh = time.perf_counter() - start
            for k in range(subsets):
                session.assign_expr("S", f'dataFrameSubsetDS2("D", "D$age", "{20 + 3 * k}", 6, NULL, NULL, FALSE)')
                session.derive("L", "log(S$x)")
                session.aggregate_expr("meanDS(S$x)")
                session.aggregate_expr("varDS(L)")
            session.derive("E", "exp(D$x/2)")
            session.aggregate_expr("meanDS(E)")  # the view computed once
            session.derive("F", "sqrt(D$x)")
            start = time.perf_counter()
            session.aggregate_expr("meanDS(F)")
            after = time.perf_counter() - start
    start = time.perf_counter()
    float(frame["x"].to_numpy().mean())
    return fresh, after, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="records in the table")
    parser.add_argument("--subsets", type=int, default=20, help="earlier subsets, each summarised")
    parser.add_argument("--functions", type=int, default=5, help="functions summed over each subset")
    args = parser.parse_args()
    earlier, new = history(args.n, args.subsets, args.functions, np.random.default_rng(6))
    tracemalloc.start()
    start = time.perf_counter()
    found = too_many(earlier, new, args.n, 0.25)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"n = {args.n:,}: {len(earlier)} earlier sums over {args.subsets + 1} row sets; one more function: "
          f"{seconds:.2f} s, peak {peak / 2**20:.0f} MB (answer: {found})")
    fresh, after, numpy_mean = site_means(args.n, args.subsets)
    print(f"meanDS at one in-process site of {args.n:,}: {fresh:.3f} s of a column, history fresh; {after:.3f} s of "
          f"a derived column after {args.subsets} summarised subsets; numpy mean {numpy_mean:.3f} s")


if __name__ == "__main__":
    main()
