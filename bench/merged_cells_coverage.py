"""Benchmark: how often the second model's AUC interval holds the pooled AUC where the sites merge its cells.

    .venv/bin/python bench/merged_cells_coverage.py --runs 40        # the figure in bench/RESULTS.md

Setting: ``tests/test_merged_cells_interval.py``'s. One binormal data set of 250 records over five sites
(``bench/comparison_coverage.py``), the second model's score the first's logit plus N(0, 1) noise, ``default.toml``
with a budget that does not stop the loop; a client that relays none of the pooled cells the sites recorded, so
each site decides its second model's cells alone and merges most of them, and the AUC is that of the noisy
histograms alone. Every run on sites provisioned afresh (new secrets, so new noise). Reported: how often the 95%
logit and DeLong intervals hold the pooled AUC (pROC's, the Mann-Whitney statistic), the estimate's bias and MAE.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from comparison_coverage import SITES, fresh_sessions, two_scores  # noqa: E402  (bench/comparison_coverage.py)
from dsfed_client.analyses.curves import ds_hist_auc  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    pooled = two_scores(250, 7)
    y = pooled["y"].to_numpy() == 1
    u = stats.mannwhitneyu(pooled["score_b"][y], pooled["score_b"][~y]).statistic
    truth = float(u / (y.sum() * (~y).sum()))
    print(f"binormal n = 250 over {SITES} sites, second model's pooled AUC {truth:.4f}, {args.runs} runs")
    t0 = time.perf_counter()
    errors, logit, delong, alone = [], [], [], []
    for session in fresh_sessions(pooled, args.runs, "dsfed-merged-"):
        learn = session._learn_histories  # relay no pooled cell: each site decides the pairs alone
        session._learn_histories = lambda answers: [learn(answers), session._pooled_cells.clear()][0]
        ds_hist_auc(session, "D$y", "D$score", secure=True)
        second = ds_hist_auc(session, "D$y", "D$score_b", secure=True)
        errors.append(second.auc - truth)
        logit.append(second.ci_logit.lower <= truth <= second.ci_logit.upper)
        delong.append(second.ci_delong.lower <= truth <= second.ci_delong.upper)
        alone.append(second.estimator.startswith("histograms alone"))
    e = np.asarray(errors)
    print(f"  bias {e.mean():+.4f} (SE {e.std(ddof=1) / np.sqrt(e.size):.4f}), MAE {np.abs(e).mean():.4f}; logit "
          f"interval covers {np.mean(logit):.3f}, DeLong {np.mean(delong):.3f}; histograms alone in "
          f"{np.mean(alone):.2f} of runs")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
