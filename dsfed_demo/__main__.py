"""``python -m dsfed_demo``, which ``dsfed demo`` runs: the demo's command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dsfed_demo.demo import find_repo_dir, run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsfed demo",
                                     description="start five GBSG2 sites and run an analyst session over HTTP")
    parser.add_argument("--json", type=Path, help="write every printed result to this JSON file")
    parser.add_argument("--fixtures", type=Path, help="opal_fixtures directory (default: the repository's)")
    parser.add_argument("--rules", type=Path, help="disclosure_rules directory (default: the repository's)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory (configs, logs, audit)")
    parser.add_argument("--report", type=Path, help="write the validation report (HTML) here "
                        "(default: next to --json, else next to the run directory; the path is printed)")
    args = parser.parse_args(argv)
    try:
        return run_demo(args.fixtures or find_repo_dir("opal_fixtures"), args.rules or find_repo_dir("disclosure_rules"),
                        args.json, keep=args.keep, report_path=args.report)
    except KeyboardInterrupt:
        print("\ninterrupted: sites stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
