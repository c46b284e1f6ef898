"""What auditing the records a summed 0/1 column is over costs a site (``Guard._audit_supports``).

A sum of a 0/1 column, a GLM's sum of a 0/1 design column and a derived column's sum of a summand with a 0/1 factor
each give a group's count, so the site audits those records as row sets with every subset and cell of the table
(``disclosure.subset_min_difference``). This times, at one in-process site of ``--n`` records with the shipped rules,
after ``--subsets`` subsets (age bands) each with the mean of the outcome, ``meanDS`` of a 0/1 column and one step of
a per-site logistic GLM with a 0/1 covariate (``glmDS2`` at coefficients 0, DataSHIELD's first iteration), with the
audit ("on") and without it ("off": ``_audit_supports`` a no-op, no release compared with those records), against
numpy's mean and R's ``glm`` of the same columns in the same run.

    .venv/bin/python bench/summed_levels.py --n 10000 100000 1000000 --subsets 20
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
sys.path.insert(0, str(ROOT / "tests"))

from dsfed_server.disclosure.checks import Guard  # noqa: E402

GLM = 'glmDS2(y ~ age + high, "binomial", "0,0,0", NULL, NULL, "D")'


def frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    age = rng.integers(18, 95, n)
    high = (rng.uniform(size=n) < 0.3).astype(int)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(-2 + 0.02 * age + high)))).astype(int)
    return pd.DataFrame({"age": age, "high": high, "y": y})


def site(data: pd.DataFrame, subsets: int, audit: bool) -> tuple[float, float]:
    """Seconds of meanDS(D$high) and of one GLM step after ``subsets`` subsets with the outcome's mean."""
    from conftest import inprocess_builder
    from sitekit import make_sites

    saved = Guard._audit_supports, Guard._earlier
    if not audit:
        Guard._audit_supports = lambda self, supports, rows: None  # type: ignore[method-assign]
        Guard._earlier = lambda self, rows: self.history.row_sets(rows.lineage, rows.n_root)  # type: ignore
    try:
        with tempfile.TemporaryDirectory() as tmp:
            provisioned, services = make_sites(Path(tmp), {"s1": data})
            with inprocess_builder(provisioned, services).login() as session:
                session.assign_table("D", "P.t")
                session.aggregate_expr("meanDS(D$age)")  # the table read once
                for k in range(subsets):
                    session.assign_expr("S", f'dataFrameSubsetDS2("D", "D$age", "{20 + 3 * k}", 6, NULL, NULL, '
                                             'FALSE)')
                    session.aggregate_expr("meanDS(S$y)")
                start = time.perf_counter()
                session.aggregate_expr("meanDS(D$high)")
                mean = time.perf_counter() - start
                start = time.perf_counter()
                session.aggregate_expr(GLM)
                return mean, time.perf_counter() - start
    finally:
        Guard._audit_supports, Guard._earlier = saved  # type: ignore[method-assign]


def references(data: pd.DataFrame) -> tuple[float, float]:
    """numpy's mean of the 0/1 column and R's glm of the model, seconds each."""
    import rpy2.robjects as ro
    from rpy2.robjects import numpy2ri

    start = time.perf_counter()
    float(data["high"].to_numpy().mean())
    numpy_mean = time.perf_counter() - start
    with (ro.default_converter + numpy2ri.converter).context():
        ro.globalenv["age"], ro.globalenv["high"], ro.globalenv["y"] = (data[c].to_numpy(dtype=float)
                                                                         for c in ("age", "high", "y"))
    start = time.perf_counter()
    ro.r("coef(glm(y ~ age + high, family = binomial))")
    return numpy_mean, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000], help="records at the site")
    parser.add_argument("--subsets", type=int, default=20, help="earlier subsets, each with the outcome's mean")
    args = parser.parse_args()
    print("| records | audit | meanDS(D$high) s | glmDS2 step s | numpy mean s | R glm s |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        data = frame(n)
        numpy_mean, r_glm = references(data)
        for audit in (True, False):
            mean, step = site(data, args.subsets, audit)
            print(f"| {n:,} | {'on' if audit else 'off'} | {mean:.3f} | {step:.3f} | {numpy_mean:.4f} | "
                  f"{r_glm:.3f} |")


if __name__ == "__main__":
    main()
