"""What the pooled check of a small site's share costs: 99 pooled thresholds with and without it.

A pooled release of cells also checks, per span of cells (each cell, each run of up to 64 adjacent ones), that no
site's share of it that its own releases alone do not give holds 1 to q - 1 records, and each site keeps the spans
another site was thin in (``Guard._shares``, ``Guard._record_thin``; docs/governance.md, "Such a share stays
pooled"). The span check reads each site's row sets released before; so, before the timed call, each of three
in-process sites (``disclosure_rules/default.toml``) releases alone the outcome counts above nine thresholds and
the mean score of four subsets of ``x1``. Then the analyst asks ``thresholdBinsDS`` at 99 thresholds pooled
(100 cells, 4,096 spans with the runs). Timed on fresh sites with the same history: the pooled call as shipped,
and with the span check switched off in process (what the check costs); pooled numpy's and R's counts of the
outcome per cell over all the records, in the same run. Peak Python memory of the pooled call by tracemalloc
(numpy reports its buffers to it).

    .venv/bin/python bench/pooled_spans.py                     # 10,000 and 100,000 records per site
    .venv/bin/python bench/pooled_spans.py --n 1000000
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsfed_client import Call, LoginBuilder  # noqa: E402
from dsfed_client.analyses.thresholds import ds_threshold_metrics  # noqa: E402
from dsfed_server import rbridge  # noqa: E402
from dsfed_server.disclosure.checks import Guard  # noqa: E402
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.synthetic import write_sites  # noqa: E402

RULES = ROOT / "disclosure_rules" / "default.toml"
SITES = ("site1", "site2", "site3")
THRESHOLDS = np.round(np.linspace(0.01, 0.99, 99), 2)
ALONE = np.round(np.linspace(0.1, 0.9, 9), 2)


def login(work: Path, run: str) -> LoginBuilder:
    provisioned = provision(work / run, {s: (work / "data" / s, RULES) for s in SITES})
    builder = LoginBuilder()
    for name, p in provisioned.items():
        cred = p.credentials["analyst"]
        builder.append_inprocess(in_process(SiteService.from_config_file(p.config)), user=cred.user,
                                 password=cred.password)
    return builder


def pooled_call(work: Path, run: str) -> tuple[float, int, int]:
    """Fresh sites, the history released alone, then the timed pooled call: seconds, peak bytes, cells released."""
    with login(work, run).login() as session:
        session.assign_table("D", "SYNTH.validation")
        for site in SITES:
            view = session.site_view(site)
            ds_threshold_metrics(view, "D$y", "D$score", ALONE, secure=False)
            for k, cut in enumerate((-1.0, -0.5, 0.5, 1.0)):
                view.assign(f"S{k}", Call("dataFrameSubsetDS2", "D", "D$x1", str(cut), 6))
                view.aggregate("meanDS", f"S{k}$score")
        tracemalloc.start()
        try:
            start = time.perf_counter()
            result = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True)
            seconds = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return seconds, peak, len(result.to_frame())


def numpy_counts(score: np.ndarray, y: np.ndarray) -> np.ndarray:
    cell = np.searchsorted(THRESHOLDS, score, side="right")
    return np.stack([np.bincount(cell[y == v], minlength=THRESHOLDS.size + 1) for v in (0, 1)])


def r_counts(score: np.ndarray, y: np.ndarray) -> float:
    """R's ``table(cut(score, ...), y)`` on the pooled records: its own elapsed time."""
    ro = rbridge.robjects()
    with rbridge.lock(), ro.default_converter.context():
        elapsed = ro.r("""function(p, y, t) {
          t0 <- proc.time()[["elapsed"]]
          tab <- table(cut(p, c(-Inf, t, Inf), right = FALSE), y)
          proc.time()[["elapsed"]] - t0
        }""")(ro.FloatVector(score.tolist()), ro.IntVector(y.tolist()), ro.FloatVector(THRESHOLDS.tolist()))
    return float(elapsed[0])


def best(repeat: int, run: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="*", default=[10_000, 100_000], help="records per site")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores; three in-process sites, default.toml; 99 pooled thresholds")
    print(f"{'n/site':>9} {'check':>6} {'dsfed s':>8} {'peak MB':>8} {'cells':>6} {'numpy s':>8} {'R s':>7}")
    shares, thin = Guard._shares, Guard._thin_complement
    with tempfile.TemporaryDirectory(prefix="dsfed-spans-") as tmp:
        work = Path(tmp)
        for n in args.n:
            write_sites(work / "data", n_sites=len(SITES), n_per_site=n, design="binormal", seed=7, fmt="parquet")
            frame = pd.concat([pd.read_parquet(work / "data" / s / "SYNTH" / "validation.parquet") for s in SITES])
            score, y = frame["score"].to_numpy(dtype=float), frame["y"].to_numpy(dtype=int)
            numpy_s = best(3, lambda: numpy_counts(score, y))
            r_s = min(r_counts(score, y) for _ in range(3))
            for check in (True, False):
                if not check:  # the control: the span check and the kept spans off in process
                    Guard._shares = lambda self, *a: {}  # type: ignore[method-assign]
                    Guard._thin_complement = lambda self, row_sets, rows: None  # type: ignore[method-assign]
                try:
                    seconds, peak, cells = pooled_call(work, f"run-{n}-{check}")
                finally:
                    Guard._shares, Guard._thin_complement = shares, thin  # type: ignore[method-assign]
                print(f"{n:>9,} {'on' if check else 'off':>6} {seconds:>8.2f} {peak / 2**20:>8.1f} {cells:>6} "
                      f"{numpy_s:>8.4f} {r_s:>7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
