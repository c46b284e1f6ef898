"""What reading a derived expression costs a site, against computing the column itself.

Before ``deriveDS`` computes a column the site classifies its expression over the root columns'
declared ranges (``dsfed_server/disclosure/expressions.py``): a grid of 1,024 cells per function of one
root, refined where interval enclosures leave room for a narrower feature. The cost does not depend on
the table's size. This times the classification of the transforms analysts write and of the cuts in
disguise the site refuses (median of ``--repeat`` runs), and, for scale, numpy computing the same
column over ``--n`` records.

    .venv/bin/python bench/expressions.py --n 1000000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dsfed_core.calltree import Limits  # noqa: E402
from dsfed_core.parser import parse_expression  # noqa: E402
from dsfed_server.disclosure.expressions import ExpressionRefused, Meaning, Root, classify  # noqa: E402

ROOTS = {"age": Root("t", "age", (18.0, 100.0), True), "pnodes": Root("t", "pnodes", (0.0, 100.0), True),
         "score": Root("t", "score", (0.0, 1.0)), "income": Root("t", "income", (0.0, 1e6)),
         "weight": Root("t", "weight", (30.0, 200.0)), "height": Root("t", "height", (120.0, 220.0))}
EXPRESSIONS = {  # text -> numpy of the same column, on columns named as the roots
    "log(D$age)": lambda c: np.log(c["age"]),
    "log(D$pnodes + 1)": lambda c: np.log(c["pnodes"] + 1),
    "D$weight/(D$height/100)^2": lambda c: c["weight"] / (c["height"] / 100) ** 2,
    "log(D$income + 1)": lambda c: np.log(c["income"] + 1),
    "1/(1 + exp(-10*(D$score - 0.5)))": lambda c: 1 / (1 + np.exp(-10 * (c["score"] - 0.5))),
    "(D$score - 0.5)/sqrt((D$score - 0.5)^2) + 1e-13*D$income": None,
    "2/(1 + exp(1e9*(0.5 - D$score))) - 1": None,
    "exp(-1e12*(D$score - 0.3)^2)": None,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="records numpy computes the column over")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(35)
    columns = {"age": rng.integers(18, 101, args.n).astype(float), "pnodes": rng.integers(0, 101, args.n).astype(float),
               "score": rng.uniform(size=args.n), "income": rng.uniform(0, 1e6, args.n),
               "weight": rng.uniform(30, 200, args.n), "height": rng.uniform(120, 220, args.n)}
    limits = Limits(max_length=200, max_name_length=50, max_depth=20)
    print(f"{'expression':58} {'classify (ms)':>13} {'verdict':>28} {'numpy, n=' + str(args.n) + ' (ms)':>22}")
    for text, numpy_fn in EXPRESSIONS.items():
        node = parse_expression(text, limits)
        times, verdict = [], ""
        for _ in range(args.repeat):
            start = time.perf_counter()
            try:
                found = classify(node, lambda leaf: Meaning.of_root(ROOTS[leaf.column]), 3.0, 20.0)
                verdict = f"passes ({found.concentration:.2f}, {found.dominance:.1f})"
            except ExpressionRefused as refused:
                verdict = f"refused ({refused.rule.split('_')[-1]})"
            times.append(time.perf_counter() - start)
        numpy_ms = ""
        if numpy_fn is not None:
            start = time.perf_counter()
            numpy_fn(columns)
            numpy_ms = f"{(time.perf_counter() - start) * 1e3:.1f}"
        print(f"{text:58} {statistics.median(times) * 1e3:13.2f} {verdict:>28} {numpy_ms:>22}")


if __name__ == "__main__":
    main()
