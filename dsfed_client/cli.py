"""``dsfed``: the analyst's command line (a validation report over the sites).

The site tooling (``synth``, ``rules``, ``audit``, ``models``, ``docs``) is ``dsfed-server``'s, and ``demo`` is
:mod:`dsfed_demo`'s (it runs sites and an analyst); ``dsfed`` forwards those commands to them, as processes of their
own, when the server is installed (``pip install 'dsfed[server]'``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

SITE_TOOLS = ("demo", "synth", "rules", "audit", "models", "docs")


def cmd_report(args: argparse.Namespace) -> int:
    from dsfed_client.errors import FederatedCallError  # noqa: PLC0415
    from dsfed_client.report import report_from_sites_file  # noqa: PLC0415

    try:
        result, path = report_from_sites_file(args.sites, args.out, table=args.table, truth=args.truth,
                                              score=args.score, curves=args.curves)
    except (OSError, ValueError, KeyError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except FederatedCallError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(result.summary(), end="")
    print(f"Report written to {path}")
    return 0


def site_tool(argv: list[str]) -> int:
    """Hand a site-tooling command over to ``dsfed-server``, or ``demo`` to ``python -m dsfed_demo``
    (this process becomes it), if the server is installed; the client itself imports neither."""
    if importlib.util.find_spec("fastapi") is None:
        print(f"dsfed {argv[0]} is site tooling, which this installation lacks: "
              "pip install 'dsfed[server]' (or run it where the site server is installed)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    command = ["dsfed_demo", *argv[1:]] if argv[0] == "demo" else ["dsfed_server.cli", *argv]
    os.execv(sys.executable, [sys.executable, "-m", *command])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SITE_TOOLS:
        return site_tool(argv)
    parser = argparse.ArgumentParser(
        prog="dsfed", description="dsfed analyst tools",
        epilog=f"site tooling, with the server installed: {', '.join(SITE_TOOLS)} (as dsfed-server COMMAND)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("report", help="validate a model across sites and write one self-contained HTML report")
    p.add_argument("--sites", type=Path, required=True,
                   help='JSON: {"sites": {"NAME": {"url": ..., "user": ..., "password": ...} or {"url": ..., '
                        '"token": ...}}, optional "table", "truth", "score"}')
    p.add_argument("--out", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--table", help="project.table at every site (default: the sites file's \"table\")")
    p.add_argument("--truth", help="outcome column, 0/1 (default: the sites file's \"truth\", else y)")
    p.add_argument("--score", help="predicted probability column (default: the sites file's \"score\", else score)")
    p.add_argument("--curves", action="store_true",
                   help="add histogram-based ROC and PR curves (one more noisy release per site)")
    p.set_defaults(func=cmd_report)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
