"""Benchmark: the full validation suite over five loopback HTTP sites, against pooled R
(pROC + ci.auc + val.prob + glm) and pooled numpy/scipy, timed in the same run.

    .venv/bin/python bench/suite.py            # n = 1e4, 1e5, 1e6 (a few minutes)
    .venv/bin/python bench/suite.py --n 10000  # one size

Data: the binormal design of ``dsfed synth`` (AUC 0.8, prevalence 0.3), split evenly
over five sites; the sites run the seed-000 privacy settings (epsilon 5, delta 0.01,
sensitivity 0.178, q = 5). Prints wall times, ratios, round trips and bytes per site.
Each timing is the best of ``--repeat`` runs (default 2), for dsfed and R alike.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsfed_client import LoginBuilder  # noqa: E402
from dsfed_server import pooled  # noqa: E402
from dsfed_client.analyses.suite import validate  # noqa: E402
from dsfed_server.launch import LocalSites  # noqa: E402
from dsfed_server import rbridge  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.synthetic import write_sites  # noqa: E402

R_SUITE = """
function(y, p) {
  suppressMessages({library(pROC); library(rms)})
  t0 <- proc.time()[["elapsed"]]
  r <- roc(y, p, levels = c(0, 1), direction = "<", quiet = TRUE)
  a <- auc(r); ci <- ci.auc(r, method = "delong")
  v <- suppressWarnings(val.prob(p, y, pl = FALSE))
  i <- p > 0 & p < 1
  f <- glm(y[i] ~ qlogis(p[i]), family = binomial)
  proc.time()[["elapsed"]] - t0
}
"""


def r_time(y: np.ndarray, p: np.ndarray) -> float:
    ro = rbridge.robjects()
    with rbridge.lock(), ro.default_converter.context():
        fn = ro.r(R_SUITE)
        return float(fn(ro.FloatVector(y.tolist()), ro.FloatVector(p.tolist()))[0])


def http_builder(provisioned: dict, urls: dict[str, str]) -> LoginBuilder:
    """The analyst's login to every running site (the provisioned sites share credentials)."""
    cred = provisioned["site1"].credentials["analyst"]
    builder = LoginBuilder()
    for name, url in urls.items():
        builder.append(name, url, user=cred.user, password=cred.password)
    return builder


def run(n_total: int, workdir: Path, repeat: int) -> dict:
    sites_dir = workdir / f"n{n_total}"
    write_sites(sites_dir, n_sites=5, n_per_site=n_total // 5, design="binormal", seed=7, fmt="parquet")
    rules = ROOT / "disclosure_rules" / "site1.toml"
    provisioned = provision(workdir / f"run{n_total}", {f"site{k}": (sites_dir / f"site{k}", rules) for k in range(1, 6)})
    frames = [pd.read_parquet(sites_dir / f"site{k}" / "SYNTH" / "validation.parquet") for k in range(1, 6)]
    data = pd.concat(frames, ignore_index=True)
    y, p = data["y"].to_numpy(dtype=float), data["score"].to_numpy(dtype=float)

    numpy_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        reference = pooled.suite(y, p)
        numpy_s = min(numpy_s, time.perf_counter() - t0)
    r_s = min(r_time(y, p) for _ in range(repeat))

    with LocalSites(provisioned.values(), workdir / f"proc{n_total}") as local:
        with http_builder(provisioned, local.urls).login() as session:
            session.assign_table("D", "SYNTH.validation")
            dsfed_s = float("inf")
            for _ in range(repeat):
                before = session.transfer_stats()
                t0 = time.perf_counter()
                report = validate(session, "D$y", "D$score")
                dsfed_s = min(dsfed_s, time.perf_counter() - t0)
                after = session.transfer_stats()
    trips = max(after[s]["requests"] - before[s]["requests"] for s in after)
    sent = max(after[s]["bytes_sent"] - before[s]["bytes_sent"] for s in after)
    received = max(after[s]["bytes_received"] - before[s]["bytes_received"] for s in after)
    return {
        "n": n_total, "dsfed_s": dsfed_s, "pooled_r_s": r_s, "pooled_numpy_s": numpy_s,
        "ratio_r": dsfed_s / r_s, "round_trips": trips, "bytes_sent_per_site": sent,
        "bytes_received_per_site": received,
        "auc_dsfed": report.discrimination.auc, "auc_pooled": reference["auc"], "mode": report.mode,
        "brier_dsfed": report.brier.brier, "brier_pooled": reference["brier"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs per timing")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {__import__('os').cpu_count()} cores")
    header = (f"{'n':>9} {'dsfed s':>9} {'R s':>8} {'numpy s':>8} {'dsfed/R':>8} {'trips':>6} "
              f"{'sent/site':>11} {'recv/site':>11} {'AUC dsfed':>10} {'AUC pooled':>10}")
    print(header)
    with tempfile.TemporaryDirectory(prefix="dsfed-bench-") as tmp:
        for n in args.n:
            r = run(n, Path(tmp), args.repeat)
            print(f"{r['n']:>9} {r['dsfed_s']:>9.2f} {r['pooled_r_s']:>8.2f} {r['pooled_numpy_s']:>8.2f} "
                  f"{r['ratio_r']:>8.2f} {r['round_trips']:>6} {r['bytes_sent_per_site']:>11,} "
                  f"{r['bytes_received_per_site']:>11,} {r['auc_dsfed']:>10.4f} {r['auc_pooled']:>10.4f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
