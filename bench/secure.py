"""Benchmark: what secure aggregation costs. A logistic GLM over five loopback HTTP sites,
summed plainly and by pairwise-masked secure sums, against pooled R (glm) and pooled numpy
(the same IRLS in one process), timed in the same run.

    .venv/bin/python bench/secure.py                 # n = 1e4, 1e5, 1e6
    .venv/bin/python bench/secure.py --n 100000      # one size

Data: the binormal design of ``dsfed synth`` (y, x1 continuous, x2 binary), split evenly over
five site processes running ``disclosure_rules/site1.toml``; model ``y ~ x1 + x2``. Prints
wall times (best of ``--repeat``), round trips and bytes per site, and the largest coefficient
difference to R.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from dsfed_client.analyses.glm import ds_glm  # noqa: E402
from dsfed_server.launch import LocalSites  # noqa: E402
from dsfed_server import rbridge  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.synthetic import write_sites  # noqa: E402
from suite import http_builder  # noqa: E402  (bench/suite.py)

FORMULA = "y ~ x1 + x2"


def r_glm(data: pd.DataFrame) -> tuple[np.ndarray, float]:
    """R's glm on the pooled data: coefficients and its own elapsed time."""
    ro = rbridge.robjects()
    with rbridge.lock(), ro.default_converter.context():
        fit = ro.r("""function(y, x1, x2) {
          t0 <- proc.time()[["elapsed"]]
          f <- glm(y ~ x1 + x2, family = binomial)
          c(coef(f), proc.time()[["elapsed"]] - t0)
        }""")(*(ro.FloatVector(data[c].to_numpy(dtype=float).tolist()) for c in ("y", "x1", "x2")))
        out = np.asarray(list(fit))
    return out[:3], float(out[3])


def numpy_glm(data: pd.DataFrame) -> np.ndarray:
    """Pooled IRLS in numpy (R's start and convergence rule), the in-process baseline."""
    X = np.column_stack([np.ones(len(data)), data["x1"], data["x2"]])
    y = data["y"].to_numpy(dtype=float)
    mu = (y + 0.5) / 2
    eta = np.log(mu / (1 - mu))
    dev_old = np.inf
    for _ in range(25):
        w = mu * (1 - mu)
        z = eta + (y - mu) / w
        beta = np.linalg.solve(X.T @ (X * w[:, None]), X.T @ (w * z))
        eta = X @ beta
        mu = 1 / (1 + np.exp(-eta))
        dev = -2 * np.sum(y * np.log(mu) + (1 - y) * np.log(1 - mu))
        if abs(dev - dev_old) / (abs(dev) + 0.1) < 1e-8:
            break
        dev_old = dev
    return beta


def best(repeat: int, run) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; model {FORMULA}, five HTTP sites")
    print(f"{'n':>9} {'mode':>7} {'dsfed s':>8} {'R s':>7} {'numpy s':>8} {'trips':>6} {'sent/site':>10} "
          f"{'recv/site':>10} {'max |b - R|':>12}")
    with tempfile.TemporaryDirectory(prefix="dsfed-secure-") as tmp:
        work = Path(tmp)
        for n in args.n:
            sites_dir = work / f"n{n}"
            write_sites(sites_dir, n_sites=5, n_per_site=n // 5, design="binormal", seed=7, fmt="parquet")
            data = pd.concat([pd.read_parquet(sites_dir / f"site{k}" / "SYNTH" / "validation.parquet")
                              for k in range(1, 6)], ignore_index=True)
            coef_r, r_s = min((r_glm(data) for _ in range(args.repeat)), key=lambda t: t[1])
            numpy_s, _ = best(args.repeat, lambda: numpy_glm(data))
            rules = ROOT / "disclosure_rules" / "site1.toml"
            prov = provision(work / f"run{n}", {f"site{k}": (sites_dir / f"site{k}", rules) for k in range(1, 6)})
            with LocalSites(prov.values(), work / f"proc{n}") as local:
                with http_builder(prov, local.urls).login() as session:
                    session.assign_table("D", "SYNTH.validation")
                    for secure in (False, True):
                        before = session.transfer_stats()
                        s, fit = best(args.repeat, lambda: ds_glm(session, FORMULA, "D", secure=secure))
                        after = session.transfer_stats()
                        per = {k: {m: (after[k][m] - before[k][m]) // args.repeat for m in after[k]} for k in after}
                        print(f"{n:>9} {'secure' if secure else 'plain':>7} {s:>8.3f} {r_s:>7.3f} {numpy_s:>8.3f} "
                              f"{max(v['requests'] for v in per.values()):>6} "
                              f"{max(v['bytes_sent'] for v in per.values()):>10,} "
                              f"{max(v['bytes_received'] for v in per.values()):>10,} "
                              f"{float(np.max(np.abs(fit.params - coef_r))):>12.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
