"""Benchmark: refusals of an honest small study -- ``validate()`` on Schalk et al.'s (2024) design at n = 100 over five
sites, where the pooled cells hold at least q records, counting every refusal and its message.

    .venv/bin/python bench/small_study.py --reps 40          # about 2-5 min
    .venv/bin/python bench/small_study.py --reps 40 --secure false   # per site, for contrast

Design (Schalk et al. 2024, "Data generation"): scores U[0, 1]; y = 1(score >= 0.5) with a fraction
gamma ~ U[0.5, 1] of the labels redrawn from Ber(0.5); ``--n`` records split at random over five in-process sites
(so a site holds about 20 records, and often fewer than q = 5 of one class), ``default.toml`` with the budget
raised (:func:`curves.bench_rules`), ``secure_aggregation.honest_sites`` 1. Each data set on fresh sites is
validated by ``validate()`` (``secure=None``: pooled releases when every site offers them). A whole call refused
(the Brier score, asked first) and each section ``validate()`` reports as not computed are counted with their
messages, and the smallest class count of a site and of the pooled data are printed beside them: a refusal where
the pooled data hold at least q of each class protects no record (a pooled cell holds q or more).
"""

from __future__ import annotations

import argparse
import collections
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

from curves import bench_rules, inprocess_sites, login  # noqa: E402  (bench/curves.py)
from dsfed_client import FederatedCallError  # noqa: E402
from dsfed_client.analyses.suite import validate  # noqa: E402
from dsfed_server.synthetic import PROJECT, seed000_scores  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--sites", type=int, default=5)
    parser.add_argument("--secure", choices=("none", "true", "false"), default="none",
                        help="validate()'s secure (none: pooled where every site offers it)")
    args = parser.parse_args()
    secure = {"none": None, "true": True, "false": False}[args.secure]
    rng = np.random.default_rng(100)
    frames = {f"rep{r}": seed000_scores(args.n, rng) for r in range(args.reps)}
    refused, sections, pooled_min = [], collections.Counter(), []
    hl_c: list[tuple[int, int, int]] = []  # H-L C released: groups, smallest group, breaks at the curve's cuts
    messages: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dsfed-small-") as tmp:
        rules = bench_rules(Path(tmp) / "rules.toml", 1)
        prov, services = inprocess_sites(Path(tmp), args.sites, frames, rules, seed=7)
        with login(prov, services).login() as session, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(args.reps):
                session.assign_table("D", f"{PROJECT}.rep{r}")
                y = frames[f"rep{r}"]["y"].to_numpy()
                pooled_min.append(int(min((y == 0).sum(), (y == 1).sum())))
                try:
                    report = validate(session, "D$y", "D$score", secure=secure)
                except FederatedCallError as exc:
                    refused.append((r, str(exc).splitlines()[0][:200]))
                    continue
                if report.hl_c is not None and report.curve is not None:
                    breaks = report.hl_c.table.upper.to_numpy()[:-1]
                    at_curve = int(np.isin(breaks, report.curve.edges[1:-1]).sum())
                    hl_c.append((len(report.hl_c.table), int(report.hl_c.table.n.min()), at_curve))
                for section, why in report.failed.items():
                    sections[section] += 1
                    messages[section][" | ".join(line.strip() for line in why.splitlines()[:3])[:400]] += 1
        site_min = [min(int(min((f["y"] == 0).sum(), (f["y"] == 1).sum()))  # a site's smallest class count
                        for f in (pd.read_parquet(Path(tmp) / "data" / f"site{i + 1}" / PROJECT / f"rep{r}.parquet")
                                  for i in range(args.sites)))
                    for r in range(args.reps)]
    print(f"Schalk et al.'s (2024) design, n = {args.n}, {args.sites} sites, default.toml (budget raised, "
          f"honest_sites 1), "
          f"secure={secure}, {args.reps} data sets; pooled smallest class {min(pooled_min)}-{max(pooled_min)}; "
          f"a site's smallest class below q = 5 in {sum(m < 5 for m in site_min)} data sets")
    print(f"whole calls refused: {len(refused)} of {args.reps}")
    for r, why in refused:
        print(f"  data set {r}: {why}")
    print(f"sections not computed: {sum(sections.values())} in {args.reps} data sets")
    for section, count in sections.most_common():
        print(f"  {section}: {count}")
        for why, k in messages[section].most_common():
            print(f"      {k} x {why}")
    if hl_c:
        groups, smallest, at_curve = (np.array(v) for v in zip(*hl_c))
        print(f"Hosmer-Lemeshow C released in {len(hl_c)} data sets: {groups.min()}-{groups.max()} groups "
              f"(median {np.median(groups):g}), the smallest group {smallest.min()} records; breaks at the "
              f"calibration curve's cuts {at_curve.min()}-{at_curve.max()} (median {np.median(at_curve):g})")
    print(f"wall time {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
