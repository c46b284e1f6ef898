"""Benchmark: ``validate()`` exact, pooled, on tied scores -- the release gate's audits of hundreds of pooled
releases, each against the cells released before.

Noise off and q = 1 (``disclosure_rules/testing-no-noise.toml`` with ``q_threshold = 1``), so that every section
equals pooled R: five in-process sites of ``--n`` records each, the outcome at prevalence 0.4 and a logistic
model's risk rounded to two decimals (many ties across both classes). The histogram AUC refines its leaves until
every leaf holding both classes holds one distinct score: hundreds of pooled histogram releases, each relaying
the cells released before, which every site audits against its records of them. Timed: ``validate(secure=True)``
on fresh sites; pooled numpy's exact AUC and Brier score, and R's ``pROC::roc`` with ``ci.auc(method = "delong")``
and ``rms::val.prob``, over all the records, in the same run.

    .venv/bin/python bench/exact_ties.py                 # 100 and 500 records per site
    .venv/bin/python bench/exact_ties.py --n 1000
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from curves import inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.suite import validate  # noqa: E402
from dsfed_server.synthetic import PROJECT  # noqa: E402
from suite import r_time  # noqa: E402  (bench/suite.py: pROC, ci.auc, val.prob and glm, timed in R)

SITES = 5


def tied_table(n: int, seed: int) -> pd.DataFrame:
    """``SITES * n`` records: y at prevalence 0.4, a logistic model's risk of a binormal latent score, rounded to
    two decimals."""
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=SITES * n) < 0.4).astype(int)
    risk = 1 / (1 + np.exp(-(rng.normal(size=y.size) + 1.1 * y - 0.8)))
    return pd.DataFrame({"y": y, "score": np.round(risk, 2)})


def exact_rules(path: Path) -> Path:
    """The no-noise rules with ``q_threshold = 1``: every distributed estimator exact."""
    text = (ROOT / "disclosure_rules" / "testing-no-noise.toml").read_text()
    path.write_text(re.sub(r"(?m)^q_threshold = .*$", "q_threshold = 1", text))
    return path


def dsfed_time(table: pd.DataFrame, workdir: Path) -> tuple[float, float]:
    """Seconds of ``validate(secure=True)`` on fresh in-process sites, and its AUC."""
    prov, services = inprocess_sites(workdir, SITES, {"ties": table}, exact_rules(workdir / "rules.toml"))
    try:
        with login(prov, services).login() as session:
            session.assign_table("D", f"{PROJECT}.ties")
            t0 = time.perf_counter()
            report = validate(session, "D$y", "D$score", secure=True)
            took = time.perf_counter() - t0
    finally:
        for service in services.values():
            service.close()
    assert report.failed == {}, report.failed
    return took, report.discrimination.result.auc


def numpy_time(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    t0 = time.perf_counter()
    auc = pooled_auc(y, p)
    float(np.mean((p - y) ** 2))
    return time.perf_counter() - t0, auc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 500], help="records per site")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores; {SITES} in-process sites, testing-no-noise.toml with q_threshold = 1")
    print(f"{'n/site':>8} {'distinct':>8} {'dsfed s':>8} {'numpy s':>8} {'R s':>7}  AUC (dsfed = numpy)")
    for n in args.n:
        table = tied_table(n, seed=500 + n)
        y, p = table["y"].to_numpy(), table["score"].to_numpy(dtype=float)
        with tempfile.TemporaryDirectory(prefix="dsfed-ties-") as tmp:
            took, auc = dsfed_time(table, Path(tmp))
        np_took, exact = numpy_time(y, p)
        assert abs(auc - exact) < 1e-12, (auc, exact)
        print(f"{n:>8,} {np.unique(p).size:>8} {took:>8.2f} {np_took:>8.4f} {r_time(y, p):>7.3f}  {auc:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
