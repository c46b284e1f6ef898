"""What checking a table's records costs: as a run reads its columns (:meth:`History.columns_read
<dsfed_server.disclosure.history.History.columns_read>`), and the keys by which a reordered table's records are
matched with those of before.

A site table of ``--n`` records and five decimal columns, a CSV file read by the DuckDB engine; the table is
checked (its digests kept) when one column has been read, as a call that assigns some variables does, then the
other four are read: their read's time with the check (each digested as it is kept) and without it, alternately,
and the time the check itself took. Then, the five columns read: their digests alone, with the records' keys
and ranks kept as a new size is recorded, and the digests of the records in another order (a reorder matched).

    .venv/bin/python bench/table_changed_in_run.py --n 1000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsfed_server.catalog import Catalog  # noqa: E402
from dsfed_server.dictionary import Variable, write_dictionary  # noqa: E402
from dsfed_server.disclosure.history import History, _ranks  # noqa: E402
from dsfed_server.record_prefixes import RecordKeys  # noqa: E402

COLUMNS = [f"c{i}" for i in range(5)]


def read_after_the_check(tmp: Path, n: int, run: int, checked: bool) -> tuple[float, float]:
    """Seconds to read four columns after the table was checked, and those the check of them took."""
    catalog = Catalog(tmp / "data")
    history = History(tmp / f"ledger-{run}.sqlite", catalog.prefix_digests)
    spent = [0.0]
    if checked:
        def timed(table: str, columns: list[str]) -> None:
            start = time.perf_counter()
            history.columns_read(table, columns)
            spent[0] += time.perf_counter() - start
        catalog.on_read = timed
    catalog.frame("P.t", COLUMNS[:1])
    history.table_records("P.t", n, 5)
    start = time.perf_counter()
    catalog.frame("P.t")
    took = time.perf_counter() - start
    catalog.close()
    return took, spent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    n, reps = args.n, args.reps
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "data" / "P").mkdir(parents=True)
        rng = np.random.default_rng(0)
        pd.DataFrame({c: np.round(rng.normal(50, 10, n), 3) for c in COLUMNS}).to_csv(tmp / "data/P/t.csv",
                                                                                      index=False)
        write_dictionary(tmp / "data/P/t.dictionary.json", "P", "t",
                         [Variable(c, "decimal", "", c, (), (-100.0, 200.0)) for c in COLUMNS])
        times: dict[bool, list[float]] = {False: [], True: []}
        checks = []
        for run in range(2 * reps):
            took, check = read_after_the_check(tmp, n, run, checked=run % 2 == 1)
            times[run % 2 == 1].append(took)
            if run % 2:
                checks.append(check)
        catalog = Catalog(tmp / "data")
        catalog.frame("P.t")
        plain, keyed, moved = [], [], []
        order = rng.permutation(n)
        for _ in range(reps):
            plain.append(timed(lambda: catalog.prefix_digests("P.t", [n])))
            keyed.append(timed(lambda: _ranks(_keyed(catalog, n))))
            moved.append(timed(lambda: catalog.prefix_digests("P.t", [n], order=order)))
        catalog.close()
    print(f"read 4 columns of {n:,} records after the table was checked: without the check "
          f"{np.median(times[False]):.3f} s, with it {np.median(times[True]):.3f} s (medians of {reps}); "
          f"the check: {np.median(checks):.3f} s ({np.median(checks) / (4 * n) * 1e6:.3f} s per million numbers)")
    print(f"5 columns of {n:,} records, read: digests {np.median(plain):.3f} s; with the records' keys and ranks "
          f"{np.median(keyed):.3f} s; digests of the records in another order {np.median(moved):.3f} s "
          f"(medians of {reps})")


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _keyed(catalog: Catalog, n: int) -> RecordKeys:
    keys = RecordKeys(n)
    catalog.prefix_digests("P.t", [n], keys=keys)
    return keys


if __name__ == "__main__":
    main()
