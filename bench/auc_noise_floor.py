"""Benchmark: the noise floor of the histogram AUC -- the standard deviation the sites' DP noise
alone adds to it (:func:`dsfed_client.analyses.curves.noise_variance`), by depth, before any
question of where the leaves lie.

    .venv/bin/python bench/auc_noise_floor.py                 # seconds; the figures in bench/RESULTS.md

Pooled releases (secure aggregation) at five in-process sites of ``default.toml`` (epsilon 1, delta
1e-5) with ``secure_aggregation.honest_sites`` = 1 (shipped) and 5; exact class totals, levels
1..L sharing the budget equally (decay 1); n = 500, one data set per design (binormal risk, AUC 0.75,
prevalence 0.3; that of Schalk et al. 2024). The expected absolute error of a normal error is 0.80 of its sd.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.curves import ds_score_histograms, noise_variance  # noqa: E402
from dsfed_server.synthetic import PROJECT, binormal, seed000_scores  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--levels", type=int, nargs="+", default=[3, 4, 5, 6, 8])
    args = parser.parse_args()
    rng = np.random.default_rng(5)
    data = {"binormal": binormal(args.n, rng, 0.75, 0.3)[["y", "score"]], "seed000": seed000_scores(args.n, rng)}
    print("design    honest_sites " + " ".join(f"{2**L:>7} leaves" for L in args.levels))
    for honest in (1, 5):
        with tempfile.TemporaryDirectory(prefix="dsfed-floor-") as tmp:
            prov, services = inprocess_sites(Path(tmp), 5, data, bench_rules(Path(tmp) / "r.toml", honest))
            with login(prov, services).login() as session:
                for name in data:
                    session.assign_table("D", f"{PROJECT}.{name}")
                    sds = [np.sqrt(noise_variance(ds_score_histograms(session, "D$y", "D$score", levels=L,
                                                                      totals="exact", secure=True)))
                           for L in args.levels]
                    print(f"{name:<9} {honest:>12} " + " ".join(f"{sd:>14.4f}" for sd in sds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
