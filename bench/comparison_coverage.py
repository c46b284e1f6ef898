"""Benchmark: the pooled paired comparison of two models' AUCs in the demo's setting, against pROC's paired
DeLong test on the pooled records.

    .venv/bin/python bench/comparison_coverage.py --runs 20        # the figure in bench/RESULTS.md

Setting: one binormal data set of 250 records (AUC 0.75, prevalence 0.3) split at random over five sites, as
the demo's GBSG2 sites are; the second model's score is the first's latent value plus independent noise (a
correlated, weaker model). Both under ``default.toml`` with a budget that does not stop the loop, every run on
sites provisioned afresh (new site secrets, ledgers and histories). Each run is ``ds_compare_models(secure=True)``:
the sites derive each model's reference from pooled histograms, and read it at the cells a pooled release of its
placement sums released. Reported: the bias of the AUC difference against pROC's pooled difference, with its
standard error, its mean absolute error, and how often the reported interval (sampling and noise variance) and
an interval of the noise variance alone hold the pooled difference.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
from scipy import special

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from curves import bench_rules, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.comparison import ds_compare_models  # noqa: E402
from dsfed_server.dictionary import Variable, write_dictionary  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.synthetic import _VARIABLES as VARIABLES, PROJECT, binormal  # noqa: E402

SITES = 5
SCORE_B = Variable("score_b", "decimal", "", "the second model's predicted probability of y = 1", (), (0.0, 1.0))


def two_scores(n: int, seed: int) -> pd.DataFrame:
    """Binormal scores (AUC 0.75, prevalence 0.3) and a second model's: the first's logit plus N(0, 1)."""
    rng = np.random.default_rng(seed)
    frame = binormal(n, rng, 0.75, 0.3)[["y", "score"]]
    return frame.assign(score_b=special.expit(special.logit(frame["score"]) + rng.normal(0.0, 1.0, n)))


def pooled_difference(frame: pd.DataFrame) -> float:
    """pROC's paired DeLong estimate of AUC(score) - AUC(score_b) on the pooled records."""
    from rpy2 import robjects  # noqa: PLC0415  (R is needed for the reference only)
    from rpy2.robjects import FloatVector  # noqa: PLC0415

    robjects.r("suppressMessages(library(pROC))")
    f = robjects.r("function(y, a, b) { ra <- roc(y, a, levels = c(0, 1), direction = '<', quiet = TRUE); "
                   "rb <- roc(y, b, levels = c(0, 1), direction = '<', quiet = TRUE); "
                   "as.numeric(auc(ra)) - as.numeric(auc(rb)) }")
    return float(f(*(FloatVector(frame[c].to_numpy(dtype=float)) for c in ("y", "score", "score_b")))[0])


def write_sites(data: Path, pooled: pd.DataFrame) -> None:
    parts = np.array_split(np.random.default_rng(0).permutation(len(pooled)), SITES)
    for i, idx in enumerate(parts):
        folder = data / f"site{i + 1}" / PROJECT
        folder.mkdir(parents=True, exist_ok=True)
        pooled.iloc[np.sort(idx)].reset_index(drop=True).to_parquet(folder / "t.parquet", index=False)
        write_dictionary(folder / "t.dictionary.json", PROJECT, "t", [VARIABLES["y"], VARIABLES["score"], SCORE_B])


def fresh_sessions(pooled: pd.DataFrame, runs: int, prefix: str) -> Iterator[Any]:
    """A session per run, with ``D`` assigned, over five sites holding ``pooled`` split as :func:`write_sites` does,
    provisioned afresh each run (new secrets, ledgers and histories), under ``default.toml`` with the budget raised."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        rules = bench_rules(Path(tmp) / "rules.toml")
        write_sites(Path(tmp) / "data", pooled)
        for r in range(runs):
            prov = provision(Path(tmp) / f"run{r}", {f"site{i + 1}": (Path(tmp) / "data" / f"site{i + 1}", rules)
                                                     for i in range(SITES)})
            services = {s: SiteService.from_config_file(p.config) for s, p in prov.items()}
            with login(prov, services).login() as session, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                session.assign_table("D", f"{PROJECT}.t")
                yield session


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--n", type=int, default=250)
    args = parser.parse_args()
    pooled = two_scores(args.n, 7)
    truth = pooled_difference(pooled)
    print(f"binormal n = {args.n} over {SITES} sites, default.toml (budget raised), {args.runs} runs with fresh "
          f"secrets; pooled paired AUC difference (pROC) {truth:+.4f}")
    t0 = time.perf_counter()
    errors, covered, noise_covered, coarsened = [], [], [], []
    for session in fresh_sessions(pooled, args.runs, "dsfed-comparison-"):
        result = ds_compare_models(session, "D$y", "D$score", "D$score_b", secure=True)
        lo, hi = result.ci
        half = 1.959964 * np.sqrt(result.noise_variance)
        errors.append(result.auc_difference - truth)
        covered.append(lo <= truth <= hi)
        noise_covered.append(abs(result.auc_difference - truth) <= half)
        coarsened.append(result.joint_coarsened)
    e = np.asarray(errors)
    print(f"  AUC difference: bias {e.mean():+.4f} (SE {e.std(ddof=1) / np.sqrt(e.size):.4f}), MAE "
          f"{np.abs(e).mean():.4f}; reported interval covers {np.mean(covered):.3f}, the noise-only interval "
          f"{np.mean(noise_covered):.3f}; joint cells coarsened at {np.mean(coarsened):.1f} sites a run")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
