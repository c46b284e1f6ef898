"""Benchmark: is the noisy-score AUC (``ds_auc``, the paper's method of Schalk, Rehms et al. 2024)
swamped by the noise the shipped rules demand, at every study size, and what noise scale would
make it usable?

    .venv/bin/python bench/paper_auc.py --reps 10                 # the figures in bench/RESULTS.md
    .venv/bin/python bench/paper_auc.py --reps 4 --epsilon 1      # quicker, shipped epsilon only

Each site adds Gaussian noise of standard deviation sigma(epsilon, delta, Delta) to every score
(the analytic Gaussian; Delta = ``privacy.score_l2_sensitivity``). The reliability ratio of the
pooled noisy scores, 1 - sigma^2 / var(noisy score), does not depend on n: the noise is per
record. Designs: binormal risk (AUC 0.75, prevalence 0.3) and that of Schalk et al. (2024)
(uniform scores, a step at 0.5), five in-process sites of ``default.toml`` (delta 1e-5, Delta 0.2) with a budget that
does not stop the loop; ``--epsilon`` values other than the shipped 1 are what-ifs, never a
shipped value. Per setting: sigma, mean reliability, share of results flagged ``swamped``, share
whose note names ``ds_hist_auc``, mean |ds_auc - pooled AUC|, and coverage of the pooled AUC by
the DeLong interval where one is given.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.discrimination import ds_auc  # noqa: E402
from dsfed_server.disclosure.mechanisms import analytic_gaussian_sigma  # noqa: E402
from dsfed_server.synthetic import PROJECT, binormal, seed000_scores  # noqa: E402

SENSITIVITY = 0.2  # default.toml's privacy.score_l2_sensitivity
DELTA = 1e-5


def tables(reps: int, sizes: list[int]) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(38)
    out = {}
    for n in sizes:
        for r in range(reps):
            out[f"b{n}x{r}"] = binormal(n, rng, 0.75, 0.3)[["y", "score"]]
            out[f"s{n}x{r}"] = seed000_scores(n, rng)
    return out


def simulate(epsilon: float, data: dict[str, pd.DataFrame], workdir: Path) -> pd.DataFrame:
    rules = bench_rules(workdir / "rules.toml", epsilon=epsilon, delta=DELTA)
    prov, services = inprocess_sites(workdir, 5, data, rules)
    rows = []
    with login(prov, services).login() as session, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, pooled in data.items():
            session.assign_table("D", f"{PROJECT}.{name}")
            res = ds_auc(session, "D$y", "D$score")
            auc = pooled_auc(pooled["y"].to_numpy(), pooled["score"].to_numpy())
            lo, hi = res.ci_delong
            rows.append({"design": "binormal" if name[0] == "b" else "seed000", "n": len(pooled), "epsilon": epsilon,
                         "reliability": res.reliability, "swamped": res.swamped,
                         "names_hist_auc": "ds_hist_auc" in res.note, "error": abs(res.auc - auc),
                         "covered": lo <= auc <= hi if np.isfinite(lo) else np.nan})
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 2000, 10000])
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1.0, 4.0, 16.0])
    args = parser.parse_args()
    t0 = time.perf_counter()
    data = tables(args.reps, args.sizes)
    frames = []
    for eps in args.epsilon:
        with tempfile.TemporaryDirectory(prefix="dsfed-paper-auc-") as tmp:
            frames.append(simulate(eps, data, Path(tmp)))
    df = pd.concat(frames)
    summary = df.groupby(["epsilon", "design", "n"]).agg(
        reliability=("reliability", "mean"), swamped=("swamped", "mean"), names_hist_auc=("names_hist_auc", "mean"),
        mae=("error", "mean"), coverage=("covered", "mean"), runs=("error", "size"))
    summary.insert(0, "sigma", [analytic_gaussian_sigma(epsilon=e, delta=DELTA, sensitivity=SENSITIVITY)
                                for e, _, _ in summary.index])
    print(summary.to_string(float_format=lambda v: f"{v:.4f}"))
    for design, part in (("binormal", data[f"b{args.sizes[0]}x0"]), ("seed000", data[f"s{args.sizes[0]}x0"])):
        s = float(part["score"].std())
        need = [e for e in np.geomspace(0.25, 256, 400)
                if analytic_gaussian_sigma(epsilon=float(e), delta=DELTA, sensitivity=SENSITIVITY) <= s]
        print(f"{design}: score sd {s:.3f}; reliability >= 0.5 needs sigma <= {s:.3f}, i.e. epsilon >= "
              f"{need[0]:.1f} per record at delta {DELTA}, Delta {SENSITIVITY}")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
