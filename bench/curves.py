"""Benchmark: federated ROC and PR curves from noisy hierarchical histograms (Xu & Cormode 2025) against
the exact pooled empirical curves: area error (Xu & Cormode 2025, Definition 1) over Q and epsilon.

    .venv/bin/python bench/curves.py                          # K = 1 and 5 sites, 20 data sets
    .venv/bin/python bench/curves.py --sites 5 --reps 5       # quicker

Data: binormal design of ``dsfed synth`` (AUC 0.8, prevalence 0.3), n = 20 000 records per data
set split evenly over K in-process sites (the same service code as over HTTP). Each site runs a
copy of ``disclosure_rules/default.toml`` (analytic Gaussian, delta 1e-5, q = 5) with a budget
large enough for the loop; the analyst asks for epsilon in {0.1, 0.3, 1} and delta = 1e-5.
Every site noises its own histograms, so with K sites the pooled counts carry K times the noise
variance of one central release; K = 1 is the central-noise case. ``--secure`` sums the
histograms by secure aggregation with each site adding 1/K of the noise variance (the paper's
distributed DP), which should match K = 1. Q = number of
quantile intervals per class; "edges" = the histogram's own ECDFs at the leaf edges (no PCHIP).
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

from dsfed_client import LoginBuilder  # noqa: E402
from dsfed_client.analyses.curves import (  # noqa: E402
    area_errors, curves_from_histograms, ds_score_histograms, empirical_curves,
)
from dsfed_server.inprocess import in_process  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.dictionary import write_dictionary  # noqa: E402
from dsfed_server.synthetic import _VARIABLES as VARIABLES, PROJECT, binormal  # noqa: E402

QS = [8, 16, 32, 64, 128, 256, 512, 1024, None]
DELTA = 1e-5


def bench_rules(path: Path, honest_sites: int = 1, **settings: float) -> Path:
    """default.toml with a budget that does not stop a simulation loop, the honest sites assumed
    when noise is split under secure aggregation, and other ``key = value`` lines replaced
    (``epsilon``, ``delta``, ``score_l2_sensitivity``)."""
    text = (ROOT / "disclosure_rules" / "default.toml").read_text()
    text = re.sub(r"(?m)^honest_sites = .*$", f"honest_sites = {honest_sites}", text)
    text = re.sub(r"(?m)^epsilon_per_(analyst|table) = .*$", r"epsilon_per_\1 = 1000000.0", text)
    text = re.sub(r"(?m)^delta_per_(analyst|table) = .*$", r"delta_per_\1 = 0.5", text)
    for key, value in settings.items():
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    path.write_text(text)
    return path


def write_tables(data: Path, k: int, tables: dict[str, pd.DataFrame], seed: int) -> None:
    """Split each pooled table at random over K sites: ``data/site<i>/SYNTH/<table>.parquet``."""
    rng = np.random.default_rng(seed)
    for name, pooled in tables.items():
        parts = np.array_split(rng.permutation(len(pooled)), k)
        for i, idx in enumerate(parts):
            folder = data / f"site{i + 1}" / PROJECT
            folder.mkdir(parents=True, exist_ok=True)
            part = pooled.iloc[np.sort(idx)].reset_index(drop=True)
            part.to_parquet(folder / f"{name}.parquet", index=False)
            write_dictionary(folder / f"{name}.dictionary.json", PROJECT, name, [VARIABLES[c] for c in part.columns])


def inprocess_sites(workdir: Path, k: int, tables: dict[str, pd.DataFrame], rules: Path, seed: int = 0):
    """K in-process sites holding the given tables (each split at random); (provisioned, services)."""
    data = workdir / "data"
    write_tables(data, k, tables, seed)
    prov = provision(workdir / "run", {f"site{i + 1}": (data / f"site{i + 1}", rules) for i in range(k)})
    return prov, {s: SiteService.from_config_file(p.config) for s, p in prov.items()}


def login(prov, services, user: str = "analyst") -> LoginBuilder:
    builder = LoginBuilder()
    for name, service in services.items():
        cred = prov[name].credentials[user]
        builder.append_inprocess(in_process(service), user=cred.user, password=cred.password)
    return builder


def run(args: argparse.Namespace, k: int, tmp: Path) -> pd.DataFrame:
    honest = args.honest_sites if args.honest_sites is not None else (k if args.secure else 1)
    rules = bench_rules(tmp / f"bench-rules-{k}.toml", min(honest, k))
    data = {f"rep{r}": binormal(args.n, np.random.default_rng(1000 + r), 0.8, 0.3)[["y", "score"]]
            for r in range(args.reps)}
    prov, services = inprocess_sites(tmp / f"k{k}", k, data, rules)
    rows = []
    with login(prov, services).login() as session:
        for rep, pooled in enumerate(data.values()):
            y, p = pooled["y"].to_numpy(), pooled["score"].to_numpy()
            fpr, tpr, _ = empirical_curves(y, p)
            exact = (fpr, tpr, float(y.sum()), float(y.size - y.sum()))
            auc = float(np.trapezoid(tpr, fpr))
            session.assign_table("D", f"{PROJECT}.rep{rep}")
            for eps in args.eps:
                for levels in args.levels:
                    for decay in args.decay:
                        hist = ds_score_histograms(session, "D$y", "D$score", levels=levels, branching=args.branching,
                                                   decay=decay, totals=args.totals, epsilon=eps, delta=DELTA,
                                                   secure=args.secure)
                        for q in QS:
                            est = curves_from_histograms(hist, q)
                            ae = area_errors(exact, est)
                            rows.append({"K": k, "rep": rep, "eps": eps, "levels": levels, "decay": decay,
                                         "Q": "edges" if q is None else q, **ae,
                                         "auc_err": abs(est.roc_auc - auc)})
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--sites", type=int, nargs="*", default=[1, 5])
    parser.add_argument("--reps", type=int, default=20, help="data sets (each with its own noise)")
    parser.add_argument("--eps", type=float, nargs="*", default=[0.1, 0.3, 1.0])
    parser.add_argument("--levels", type=int, nargs="*", default=[6, 8, 10])
    parser.add_argument("--branching", type=int, default=2)
    parser.add_argument("--decay", type=float, nargs="*", default=[1.0])
    parser.add_argument("--totals", default="noisy", choices=("noisy", "exact"),
                        help="class totals as a noisy level 0 (pure DP release) or exact counts (rule A1)")
    parser.add_argument("--show", default="ae_roc,ae_pr", help="columns to tabulate")
    parser.add_argument("--secure", action="store_true",
                        help="secure sums of the histograms, each site adding 1/K of the noise variance "
                             "(rules: secure_aggregation.honest_sites = K; needs K >= 3)")
    parser.add_argument("--honest-sites", type=int, default=None,
                        help="secure_aggregation.honest_sites of the rules (default: K with --secure, else 1)")
    args = parser.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {platform.python_implementation()} "
          f"{platform.python_version()}, {os.cpu_count()} cores; n = {args.n}, delta = {DELTA}, "
          f"{args.reps} data sets per K, branching {args.branching}, totals {args.totals}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsfed-curves-") as tmp:
        frames = [run(args, k, Path(tmp)) for k in args.sites]
    df = pd.concat(frames, ignore_index=True)
    pd.set_option("display.width", 200)
    for col in args.show.split(","):
        table = df.groupby(["K", "levels", "decay", "eps", "Q"], sort=False)[col].mean().unstack("Q")
        print(f"\nmean {col} over {args.reps} data sets (rows: K sites, levels, decay, epsilon; columns: Q)")
        print(table.map(lambda v: f"{v:.4f}").to_string())
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
