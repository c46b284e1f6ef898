"""``dsfed``: the analyst command line (the demo, synthetic sites)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsfed", description="dsfed analyst tools")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="start five GBSG2 sites and run an analyst session over HTTP")
    p.add_argument("--json", type=Path, help="write every printed result to this JSON file")
    p.add_argument("--fixtures", type=Path, help="opal_fixtures directory (default: the repository's)")
    p.add_argument("--rules", type=Path, help="disclosure_rules directory (default: the repository's)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (configs, logs, audit)")

    p = sub.add_parser("synth", help="write synthetic sites (opal_fixtures layout) for tests and benchmarks")
    p.add_argument("out", type=Path, help="directory to create the sites in")
    p.add_argument("--sites", type=int, default=5)
    p.add_argument("--n", type=int, default=1000, help="records per site")
    p.add_argument("--design", choices=("seed000", "binormal"), default="seed000")
    p.add_argument("--auc", type=float, default=0.8, help="target AUC for the binormal design")
    p.add_argument("--prevalence", type=float, default=0.3, help="share of positives for the binormal design")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")

    args = parser.parse_args(argv)
    if args.command == "demo":
        from dsfed_client.demo import find_repo_dir, run_demo  # noqa: PLC0415

        try:
            return run_demo(
                args.fixtures or find_repo_dir("opal_fixtures"),
                args.rules or find_repo_dir("disclosure_rules"),
                args.json,
                keep=args.keep,
            )
        except KeyboardInterrupt:
            print("\ninterrupted: sites stopped", file=sys.stderr)
            return 130
    if args.command == "synth":
        from dsfed_server.synthetic import write_sites  # noqa: PLC0415

        paths = write_sites(
            args.out, n_sites=args.sites, n_per_site=args.n, design=args.design, seed=args.seed,
            auc=args.auc, prevalence=args.prevalence, fmt=args.format,
        )
        for path in paths:
            print(path)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
