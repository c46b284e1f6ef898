"""Benchmark: coverage of the histogram AUC's 95 % interval (DeLong + noise variance) on Schalk et al.'s (2024)
simulation design, the default of ``validate()`` (pooled releases under secure aggregation).

    .venv/bin/python bench/coverage.py --reps 200      # the figure in bench/RESULTS.md (a few minutes)
    .venv/bin/python bench/coverage.py --reps 40       # quicker
    .venv/bin/python bench/coverage.py --design binormal --reps 100   # smooth risk (binormal AUC 0.75)

Design (Schalk et al. 2024, "Data generation"): n drawn from {100, 200, ..., 2500}; scores U[0, 1];
y = 1(score >= 0.5) with a fraction gamma ~ U[0.5, 1] of the labels redrawn from Ber(0.5);
split at random over 5 in-process sites running ``disclosure_rules/default.toml`` (epsilon = 1,
delta = 1e-5, every site adding its full noise) with a budget large enough for the loop. For each
data set: the exact pooled empirical AUC, and whether the interval covers it -- the noise-aware
one ``validate()`` reports, and, for comparison, DeLong's alone. DeLong's variance is the sampling
variance around the population AUC, so for the sample's own AUC it is generous; the noise variance
is checked on its own too: z = (estimate - exact AUC) / noise sd should have sd about 1, and the
bias, mean (estimate - exact AUC), is reported with its standard error. ``--design binormal``: a
smooth risk instead (binormal scores, AUC 0.75, prevalence 0.3, same sizes), where a histogram's
leaves hide pairs of different scores (Schalk et al.'s (2024) risk is flat but for a step at a leaf edge).
"""

from __future__ import annotations

import argparse
import contextlib
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

from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.curves import ds_hist_auc  # noqa: E402
from dsfed_client.analyses.discrimination import logit_ci  # noqa: E402
from dsfed_server.synthetic import PROJECT, binormal, seed000_scores  # noqa: E402


def pooled_auc(y: np.ndarray, p: np.ndarray) -> float:
    """The exact empirical AUC of the pooled records (Mann-Whitney, ties one half)."""
    pos, neg = np.sort(p[y == 1]), np.sort(p[y == 0])
    below = np.searchsorted(neg, pos, "left")
    ties = np.searchsorted(neg, pos, "right") - below
    return float(np.sum(below + 0.5 * ties) / (pos.size * neg.size))


def simulate(reps: int, *, sites: int = 5, epsilon: float = 1.0, delta: float = 1e-5, seed: int = 2024,
             workdir: Path, design: str = "seed000") -> pd.DataFrame:
    """One row per data set: n, the exact AUC, the estimate, its interval, and whether the noise-aware
    interval (and DeLong's alone) covers the exact AUC."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(np.arange(100, 2501, 100), size=reps)
    data = {f"rep{r}": seed000_scores(int(n), rng) if design == "seed000" else
            binormal(int(n), rng, 0.75, 0.3)[["y", "score"]] for r, n in enumerate(sizes)}
    rules = bench_rules(workdir / "rules.toml", epsilon=epsilon, delta=delta)
    prov, services = inprocess_sites(workdir, sites, data, rules, seed=seed)
    rows = []
    with contextlib.ExitStack() as stack:
        for service in services.values():  # closed when done: their DuckDB databases, threads and files
            stack.callback(service.close)
        for rep, pooled in enumerate(data.values()):
            y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
            # a session per data set, an analysis of its own: a session relays every cut history and pooled cell
            # the sites answered it with each pooled release, so one session's releases over 200 tables grew with
            # the tables before (4.5 s a data set at 200 where 1.8 at 20)
            with login(prov, services).login() as session:
                session.assign_table("D", f"{PROJECT}.rep{rep}")
                res = ds_hist_auc(session, "D$y", "D$score", secure=True, roc_glm=False)
            auc = pooled_auc(y, p)
            lo, hi = res.ci_logit
            d_lo, d_hi = logit_ci(res.auc, res.variance, res.alpha)
            noise_sd = float(np.sqrt(res.noise_variance))
            rows.append({"n": len(pooled), "auc": auc, "estimate": res.auc, "lower": lo, "upper": hi,
                         "noise_sd": noise_sd, "delong_sd": np.sqrt(res.variance),
                         "covered": lo <= auc <= hi, "covered_delong_only": d_lo <= auc <= d_hi,
                         "z_noise": (res.auc - auc) / noise_sd})
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--sites", type=int, default=5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--design", choices=("seed000", "binormal"), default="seed000")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; {args.reps} data sets, K = {args.sites}, "
          f"epsilon = {args.epsilon}, delta = {args.delta}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsfed-coverage-") as tmp:
        df = simulate(args.reps, sites=args.sites, epsilon=args.epsilon, delta=args.delta, workdir=Path(tmp),
                      design=args.design)
    signed = df.estimate - df.auc
    err = signed.abs()
    print(f"{args.design}: bias {signed.mean():+.4f} (SE {signed.std(ddof=1) / np.sqrt(len(df)):.4f})")
    print(f"coverage of the exact pooled AUC by the 95% interval: {df.covered.mean():.3f} "
          f"(DeLong alone: {df.covered_delong_only.mean():.3f})")
    print(f"mean |AUC error| {err.mean():.4f}; mean noise sd {df.noise_sd.mean():.4f}; "
          f"mean DeLong sd {df.delong_sd.mean():.4f}; mean interval width {(df.upper - df.lower).mean():.4f}")
    print(f"noise alone: z = (estimate - exact) / noise sd has mean {df.z_noise.mean():.3f}, "
          f"sd {df.z_noise.std():.3f}; "
          f"|z| <= 1.96 in {(df.z_noise.abs() <= 1.959964).mean():.3f} of the data sets")
    for name, part in (("n <= 1000", df[df.n <= 1000]), ("n > 1000", df[df.n > 1000])):
        print(f"  {name}: {len(part)} data sets, coverage {part.covered.mean():.3f} "
              f"(DeLong alone {part.covered_delong_only.mean():.3f})")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
