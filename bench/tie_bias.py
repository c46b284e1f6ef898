"""Benchmark: the bias of the histogram AUC's tie rule alone (exact counts, no noise, no gate):
a positive and a negative in one leaf count one half (``within_bin='tied'``).

    .venv/bin/python bench/tie_bias.py --reps 400          # the table in bench/RESULTS.md (seconds)

Binormal scores (AUC 0.75, prevalence 0.3; :func:`dsfed_server.synthetic.binormal`), 2^L equal
leaves on [0, 1]: mean of (tied AUC - empirical AUC) over the data sets, with its standard error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from dsfed_server.synthetic import binormal  # noqa: E402


def tied_auc(y: np.ndarray, p: np.ndarray, leaves: int) -> float:
    """The AUC with every pair inside one of ``leaves`` equal leaves on [0, 1] counted one half."""
    leaf = np.clip(np.floor(p * leaves), 0, leaves - 1).astype(int)
    n0, n1 = (np.bincount(leaf[y == c], minlength=leaves) for c in (0, 1))
    return float(np.sum(n1 * (np.cumsum(n0) - n0 + 0.5 * n0)) / (n0.sum() * n1.sum()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--n", type=int, nargs="+", default=[500, 2500])
    args = parser.parse_args()
    print("| n | " + " | ".join(f"{2**lv} leaves" for lv in range(3, 9)) + " |")
    for n in args.n:
        frames = [binormal(n, np.random.default_rng(r), 0.75, 0.3) for r in range(args.reps)]
        cells = []
        for levels in range(3, 9):
            e = np.array([tied_auc(f.y.to_numpy(), f.score.to_numpy(), 2**levels)
                          - pooled_auc(f.y.to_numpy(), f.score.to_numpy()) for f in frames])
            cells.append(f"{e.mean():+.5f} ({e.std(ddof=1) / np.sqrt(e.size):.5f})")
        print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
