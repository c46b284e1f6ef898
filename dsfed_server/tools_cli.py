"""The site's tooling on the command line: synthetic sites, the rules file and the audit
log explained and checked, the function reference generated. ``dsfed-server`` serves these
(:func:`add_commands`); the analyst's ``dsfed`` forwards them when the server is installed.

Each subcommand is a parser built in :func:`add_commands` and a ``cmd_*`` function that
receives the parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_synth(args: argparse.Namespace) -> int:
    from dsfed_server.synthetic import write_sites  # noqa: PLC0415

    paths = write_sites(
        args.out, n_sites=args.sites, n_per_site=args.n, design=args.design, seed=args.seed,
        auc=args.auc, prevalence=args.prevalence, fmt=args.format,
    )
    for path in paths:
        print(path)
    return 0


def _unusable(error: Exception) -> int:
    """Report a file that cannot be used (``file:line: reason``) and return the exit status."""
    print(error, file=sys.stderr)
    return 2


def cmd_rules_explain(args: argparse.Namespace) -> int:
    from dsfed_server.governance import explain_rules  # noqa: PLC0415
    from dsfed_server.tomlfile import ConfigFileError  # noqa: PLC0415

    try:
        print(explain_rules(args.file), end="")
    except ConfigFileError as exc:
        return _unusable(exc)
    return 0


def cmd_rules_check(args: argparse.Namespace) -> int:
    from dsfed_server.governance import check_rules, weak_settings  # noqa: PLC0415
    from dsfed_server.tomlfile import ConfigFileError  # noqa: PLC0415

    status = 0
    for path in args.files:
        try:
            rules = check_rules(path)
        except ConfigFileError as exc:
            status = _unusable(exc)
            continue
        print(f"{path}: valid ({len(rules.functions.enabled)} functions enabled; "
              f"profiles: {', '.join(rules.profile_names)})")
        for warning in weak_settings(rules):
            print(f"{path}: warning: {warning}")
    return status


def cmd_audit_show(args: argparse.Namespace) -> int:
    from dsfed_server.audit_summary import Selection, parse_time, summarize_audit  # noqa: PLC0415

    try:
        selection = Selection(analysts=tuple(args.analyst), outcomes=tuple(args.outcome),
                              since=parse_time(args.since) if args.since else None,
                              until=parse_time(args.until, end=True) if args.until else None)
        print(summarize_audit(args.logs, by=args.by, selection=selection, fmt=args.format), end="")
    except (OSError, ValueError) as exc:
        return _unusable(exc)
    return 0


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from dsfed_server.audit import verify_file  # noqa: PLC0415
    from dsfed_server.tomlfile import ConfigFileError  # noqa: PLC0415

    try:
        report = verify_file(args.log, args.secret, expect=tuple(args.expect))
    except (OSError, ValueError, ConfigFileError) as exc:
        return _unusable(exc)
    print(f"{args.log}: {report}")
    return 0 if report.ok else 1


def cmd_docs_functions(args: argparse.Namespace) -> int:
    from dsfed_server.function_docs import render_function_docs  # noqa: PLC0415

    print(render_function_docs(), end="")
    return 0


def cmd_docs_rules(args: argparse.Namespace) -> int:
    from dsfed_server.governance import rules_tables  # noqa: PLC0415
    from dsfed_server.site_init import packaged_rules  # noqa: PLC0415

    keys, profiles = rules_tables(packaged_rules())
    print(keys, profiles, sep="\n", end="")
    return 0


def cmd_models_inspect(args: argparse.Namespace) -> int:
    from dsfed_server.model_review import cmd_inspect  # noqa: PLC0415

    return cmd_inspect(args)


def cmd_models_approve(args: argparse.Namespace) -> int:
    from dsfed_server.model_review import cmd_approve  # noqa: PLC0415

    return cmd_approve(args)


def add_commands(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """The site tooling's subcommands, added to a command line's subparsers."""
    p = sub.add_parser("synth", help="write synthetic sites (opal_fixtures layout) for tests and benchmarks")
    p.add_argument("out", type=Path, help="directory to create the sites in")
    p.add_argument("--sites", type=int, default=5)
    p.add_argument("--n", type=int, default=1000, help="records per site")
    p.add_argument("--design", choices=("seed000", "binormal"), default="seed000")
    p.add_argument("--auc", type=float, default=0.8, help="target AUC for the binormal design")
    p.add_argument("--prevalence", type=float, default=0.3, help="share of positives for the binormal design")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=("csv", "parquet"), default="csv")
    p.set_defaults(func=cmd_synth)

    rules = sub.add_parser("rules", help="explain or check a site's disclosure rules file").add_subparsers(
        dest="action", required=True)
    p = rules.add_parser("explain", help="print what every key of a rules file allows and refuses")
    p.add_argument("file", type=Path, help="a rules file (disclosure_rules/*.toml)")
    p.set_defaults(func=cmd_rules_explain)
    p = rules.add_parser("check", help="validate rules files as a site does at start (file:line: reason)")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE", help="rules file(s) (disclosure_rules/*.toml)")
    p.set_defaults(func=cmd_rules_check)

    audit = sub.add_parser("audit", help="summarise or verify a site's audit log").add_subparsers(
        dest="action", required=True)
    p = audit.add_parser("show", help="calls by analyst, function or outcome; refusals; privacy budget spent and "
                                      "remaining, in the site ledger's accounting")
    p.add_argument("logs", type=Path, nargs="+", metavar="LOG", help="audit log(s) (JSON lines)")
    p.add_argument("--by", choices=("analyst", "function", "outcome"), default="function",
                   help="how to group the call counts (default: function)")
    p.add_argument("--analyst", action="append", default=[], metavar="NAME",
                   help="only this analyst's calls (repeat for several)")
    p.add_argument("--outcome", action="append", default=[], metavar="OUTCOME",
                   help="only calls with this outcome: ok, refused, ... (repeat for several)")
    p.add_argument("--since", metavar="WHEN", help="only calls at or after this date or date-time (UTC unless stated)")
    p.add_argument("--until", metavar="WHEN", help="only calls before this date-time, or up to the end of this date")
    p.add_argument("--format", choices=("text", "json", "csv"), default="text",
                   help="text (default); json: the whole summary; csv: the budget lines, one per site x table and "
                        "per site x analyst x table")
    p.set_defaults(func=cmd_audit_show)
    p = audit.add_parser("verify", help="verify an audit log's keyed hash chain and its sealed head")
    p.add_argument("log", type=Path, help="audit log (JSON lines; its sealed head <log>.head beside it)")
    p.add_argument("--secret", type=Path, required=True, help="the site secret file (the chain's key comes from it)")
    p.add_argument("--expect", action="append", default=[], metavar="SEQ:MAC",
                   help="a head copy seen earlier (response header X-Dsfed-Audit-Head); the log must still hold it")
    p.set_defaults(func=cmd_audit_verify)

    models = sub.add_parser("models", help="review and approve prediction models").add_subparsers(
        dest="action", required=True)
    p = models.add_parser("inspect", help="what a model file reads and computes, and its SHA-256")
    p.add_argument("file", type=Path, help="a model file: a GLM (JSON: format, formula, family, link, coefficients) "
                                           "or an ONNX graph (*.onnx)")
    p.set_defaults(func=cmd_models_inspect)
    p = models.add_parser("approve", help="add a model to a rules file's models.approved, by its SHA-256")
    p.add_argument("file", type=Path, help="the model file")
    p.add_argument("--rules", type=Path, required=True, help="the site's rules file")
    p.add_argument("--name", required=True, help="the short name analysts give predictDS")
    p.add_argument("--note", required=True, help="what the model is and why the board approves it")
    p.set_defaults(func=cmd_models_approve)

    docs = sub.add_parser("docs", help="generate documentation").add_subparsers(dest="action", required=True)
    p = docs.add_parser("functions", help="print docs/functions.md, generated from the function registry")
    p.set_defaults(func=cmd_docs_functions)
    p = docs.add_parser("rules", help="print docs/governance.md's two tables of rules-file keys (under 'The rules "
                                      "file' and 'Profiles'), generated from the schema and default.toml")
    p.set_defaults(func=cmd_docs_rules)
