"""Benchmark: the full validation suite over five loopback HTTP sites, against pooled R
(pROC + ci.auc + val.prob + glm) and pooled numpy/scipy, timed in the same run.

    .venv/bin/python bench/suite.py            # n = 1e4, 1e5, 1e6 (a few minutes)
    .venv/bin/python bench/suite.py --n 10000  # one size
    .venv/bin/python bench/suite.py --n 10000000 --repeat 1 --skip-r --json bench.jsonl  # hospital-sized
    .venv/bin/python bench/suite.py --n 1000000 --engine memory   # the sites' [catalog] engine
    .venv/bin/python bench/suite.py --n 10000000 --repeat 1 --skip-r --engine postgresql
    .venv/bin/python bench/suite.py --n 100000000 --repeat 1 --skip-r   # 1e8: about 12 min, 15 GB

Data: the binormal design of ``dsfed synth`` (AUC 0.8, prevalence 0.3), split evenly
over five sites; the sites run the seed-000 privacy settings (epsilon 5, delta 0.01,
sensitivity 0.178, q = 5). The suite assigns only ``--assign-variables`` (default y,score;
``all``: the whole table). Prints wall times, ratios, round trips and bytes per site; the
sites' start-up (seconds from spawn until the slowest of the five, started together on this
machine, answered; and of site1 started alone, as a site on a machine of its own starts), their
resident memory right after start and at its peak after the runs (VmHWM, the largest site, MB),
the data the validation reads per site (y and score as float64: n_per_site * 16 bytes), and
``growth/read``: the largest site's peak above its own resident memory after start, divided by
the data it reads.
Each timing is the best of ``--repeat`` runs (default 2), for dsfed and R alike; ``--repeat 1``
runs each once (big n). ``--skip-r`` skips pooled R (shown as ``-``). ``--json FILE`` appends
one JSON object per n to FILE.

``--engine`` writes ``[catalog] engine = "<engine>"`` into each site's config file; without
the option the config has no [catalog] section and the site uses its default (duckdb). With
``postgresql`` each site's table is loaded into a database of its own in a throwaway PostgreSQL
cluster on 127.0.0.1 (tests/pgkit.py; scripts/install-postgresql.sh installs the server), which
the sites read with a read-only role; loading is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

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


MB = 1024 * 1024


@contextmanager
def postgresql_tables(sites_dir: Path, workdir: Path) -> Iterator[Callable[[str], dict]]:
    """Each site's table loaded into a database of its own in a throwaway PostgreSQL cluster
    (tests/pgkit.py) for the time of the run; yields each site's ``[catalog]`` section."""
    sys.path.insert(0, str(ROOT / "tests"))
    import pgkit  # noqa: PLC0415

    with pgkit.cluster() as pg:
        secret = pgkit.password_file(workdir)
        for k in range(1, 6):
            frame = pd.read_parquet(sites_dir / f"site{k}" / "SYNTH" / "validation.parquet")
            pg.create_database(f"site{k}")
            pg.load(f"site{k}", "SYNTH", "validation", frame, pgkit.column_types(frame))
            del frame
        yield lambda site: {"engine": "postgresql", "dsn": pg.dsn(site), "password_file": str(secret)}


def run(n_total: int, workdir: Path, repeat: int, *, variables: list[str] | None, engine: str | None,
        skip_r: bool) -> dict:
    sites_dir = workdir / f"n{n_total}"
    n_per_site = n_total // 5
    write_sites(sites_dir, n_sites=5, n_per_site=n_per_site, design="binormal", seed=7, fmt="parquet")
    if engine == "postgresql":
        with postgresql_tables(sites_dir, workdir) as catalog:
            return run_sites(n_total, sites_dir, workdir, repeat, variables=variables, catalog=catalog,
                             engine=engine, skip_r=skip_r)
    return run_sites(n_total, sites_dir, workdir, repeat, variables=variables,
                     catalog=None if engine is None else {"engine": engine}, engine=engine, skip_r=skip_r)


def run_sites(n_total: int, sites_dir: Path, workdir: Path, repeat: int, *, variables: list[str] | None,
              catalog: dict | Callable[[str], dict] | None, engine: str | None, skip_r: bool) -> dict:
    n_per_site = n_total // 5
    rules = ROOT / "disclosure_rules" / "site1.toml"
    provisioned = provision(workdir / f"run{n_total}",
                            {f"site{k}": (sites_dir / f"site{k}", rules) for k in range(1, 6)}, catalog=catalog)
    frames = [pd.read_parquet(sites_dir / f"site{k}" / "SYNTH" / "validation.parquet", columns=["y", "score"])
              for k in range(1, 6)]
    data = pd.concat(frames, ignore_index=True)
    del frames
    y, p = data["y"].to_numpy(dtype=float), data["score"].to_numpy(dtype=float)
    del data

    numpy_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        reference = pooled.suite(y, p)
        numpy_s = min(numpy_s, time.perf_counter() - t0)
    r_s = None if skip_r else min(r_time(y, p) for _ in range(repeat))
    del y, p

    with LocalSites([provisioned["site1"]], workdir / f"alone{n_total}") as alone:  # a site on a machine of its own
        startup_alone_s = alone.processes["site1"].ready_after or 0.0
    with LocalSites(provisioned.values(), workdir / f"proc{n_total}") as local:
        processes = local.processes.values()
        startup_s = max(proc.ready_after or 0.0 for proc in processes)
        rss_each = [proc.peak_rss() for proc in processes]
        rss_start = max(rss_each)
        with http_builder(provisioned, local.urls).login() as session:
            session.assign_table("D", "SYNTH.validation", variables=variables)
            dsfed_s = float("inf")
            for _ in range(repeat):
                before = session.transfer_stats()
                t0 = time.perf_counter()
                report = validate(session, "D$y", "D$score")
                dsfed_s = min(dsfed_s, time.perf_counter() - t0)
                after = session.transfer_stats()
        rss_peak = max(proc.peak_rss() for proc in processes)
        growth = max(proc.peak_rss() - rss0 for proc, rss0 in zip(processes, rss_each))
    trips = max(after[s]["requests"] - before[s]["requests"] for s in after)
    sent = max(after[s]["bytes_sent"] - before[s]["bytes_sent"] for s in after)
    received = max(after[s]["bytes_received"] - before[s]["bytes_received"] for s in after)
    return {
        "n": n_total, "dsfed_s": dsfed_s, "pooled_r_s": r_s, "pooled_numpy_s": numpy_s,
        "ratio_r": None if r_s is None else dsfed_s / r_s, "round_trips": trips, "bytes_sent_per_site": sent,
        "bytes_received_per_site": received,
        "auc_dsfed": report.discrimination.auc, "auc_pooled": reference["auc"], "mode": report.mode,
        "brier_dsfed": report.brier.brier, "brier_pooled": reference["brier"],
        "startup_s": startup_s, "startup_alone_s": startup_alone_s, "rss_start_mb": rss_start / MB,
        "rss_peak_mb": rss_peak / MB, "peak_over_start_per_read": growth / (n_per_site * 16),
        "data_read_per_site": n_per_site * 16, "repeat": repeat,
        "assign_variables": variables or "all", "engine": engine or "site default",
    }


def append_json(path: str | None, record: dict) -> None:
    """Append ``record``, with the machine's name and cores, as one JSON line to ``path`` (None: don't)."""
    if path is not None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({**record, "machine": platform.node(), "cores": os.cpu_count()}) + "\n")


def _fixed(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs per timing (1: once)")
    parser.add_argument("--assign-variables", default="y,score",
                        help="comma-separated columns the suite assigns as D (all: the whole table)")
    parser.add_argument("--engine", choices=["memory", "duckdb", "postgresql"], default=None,
                        help="the sites' table engine, written as [catalog] engine = ... into each site's "
                             "config (default: no [catalog] section; the sites' default engine, duckdb); "
                             "postgresql: each site's table in a database of a throwaway local cluster")
    parser.add_argument("--skip-r", action="store_true", help="skip pooled R (printed as -)")
    parser.add_argument("--json", type=Path, default=None, help="append one JSON object per n to this file")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    variables = None if args.assign_variables == "all" else [
        v.strip() for v in args.assign_variables.split(",") if v.strip()]
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; assign {args.assign_variables}; "
          f"engine {args.engine or 'site default'}; repeat {args.repeat}")
    header = (f"{'n':>9} {'dsfed s':>9} {'R s':>8} {'numpy s':>8} {'dsfed/R':>8} {'trips':>6} "
              f"{'sent/site':>11} {'recv/site':>11} {'AUC dsfed':>10} {'AUC pooled':>10} "
              f"{'start s':>8} {'alone s':>8} {'RSS0 MB':>8} {'peak MB':>8} {'read/site':>13} {'growth/read':>11}")
    print(header)
    with tempfile.TemporaryDirectory(prefix="dsfed-bench-") as tmp:
        for n in args.n:
            r = run(n, Path(tmp), args.repeat, variables=variables, engine=args.engine, skip_r=args.skip_r)
            print(f"{r['n']:>9} {r['dsfed_s']:>9.2f} {_fixed(r['pooled_r_s'], 8)} {r['pooled_numpy_s']:>8.2f} "
                  f"{_fixed(r['ratio_r'], 8)} {r['round_trips']:>6} {r['bytes_sent_per_site']:>11,} "
                  f"{r['bytes_received_per_site']:>11,} {r['auc_dsfed']:>10.4f} {r['auc_pooled']:>10.4f} "
                  f"{r['startup_s']:>8.2f} {r['startup_alone_s']:>8.2f} {r['rss_start_mb']:>8.0f} "
                  f"{r['rss_peak_mb']:>8.0f} {r['data_read_per_site']:>13,} {r['peak_over_start_per_read']:>11.1f}",
                  flush=True)
            append_json(args.json, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
