"""dsfed-server: run a site, check its files, make credentials; the site's tooling (synthetic
sites, the rules file and audit log explained and checked, generated docs).

The parser imports nothing heavy (pandas, numpy, FastAPI, ONNX): each command imports what it
runs, so ``dsfed-server --help`` starts at once (bench/cli_start.py)."""

from __future__ import annotations

import argparse
import errno
import getpass
import json
import logging
import os
import re
import socket
import sys
from pathlib import Path

from dsfed_server import audit, tools_cli


class ListenError(Exception):
    """The site cannot listen where its config (or --port) says."""


_LISTEN_ADVICE = {
    errno.EADDRINUSE: "the address is in use (another server, or this site already running); stop it or "
                      "choose another port (--port, or [listen] port)",
    errno.EACCES: "permission denied (ports below 1024 need privileges); choose a port above 1023 behind the "
                  "reverse proxy",
    errno.EADDRNOTAVAIL: "this machine has no such address; set [listen] host to one of its addresses",
}


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit this: no Nagle delay between a response's header and body writes
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        reason = _LISTEN_ADVICE.get(exc.errno or 0, exc.strerror or str(exc))
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    return sock


def run(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415

    from dsfed_server.allocation import bound_allocations  # noqa: PLC0415
    from dsfed_server.api import create_app  # noqa: PLC0415
    from dsfed_server.service import SiteService  # noqa: PLC0415

    bound_allocations()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    service = SiteService.from_config_file(args.config)
    listen = service.config.listen
    sock = _bind(listen.host, args.port if args.port is not None else listen.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    if args.ready_file:
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(json.dumps({"site": service.name, "url": url, "pid": os.getpid()}))
        tmp.replace(args.ready_file)
    logging.getLogger("dsfed.site").info("site %s listening on %s", service.name, url)
    if host in ("127.0.0.1", "::1"):  # R's opalr refuses plain http to any host but localhost
        logging.getLogger("dsfed.site").info("site %s: R's DataSHIELD client on this machine connects to "
                                             "http://localhost:%s (opalr refuses plain http to other hosts)",
                                             service.name, port)
    config = uvicorn.Config(create_app(service), log_level=args.log_level, access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def check(args: argparse.Namespace) -> int:
    from dsfed_server.catalog import summarize  # noqa: PLC0415
    from dsfed_server.service import SiteService  # noqa: PLC0415

    service = SiteService.from_config_file(args.config)
    for info in service.catalog.tables():
        print(f"table {info.ref} ({info.source})")
        for column in summarize(service.catalog.frame(info.ref), info):
            print(f"  {column.line()}")
    tables = ", ".join(t.ref for t in service.catalog.tables())
    print(f"site {service.name}: config, rules and data are valid; tables: {tables}")
    return 0


def init(args: argparse.Namespace) -> int:
    from dsfed_server.site_init import init_site  # noqa: PLC0415

    directory = Path(args.dir)
    site = init_site(directory, [Path(c) for c in args.csv], name=args.name or _site_name(directory),
                     project=args.project, port=args.port)
    print(f"wrote {site.config}, {directory / 'rules.toml'} (the packaged defaults; its score_columns "
          f"below) and {directory / 'site.secret'}")
    for ref, dictionary in site.tables.items():
        print(f"table {ref}: data dictionary inferred in {dictionary}")
        for column, why in site.identifiers[ref].items():
            print(f"  {column}: marked \"identifier\": true ({why}): no function may read it; REVIEW, and set it "
                  "to false if the column does not identify anyone")
        for line in site.review[ref]:
            print(f"  REVIEW {line}")
    for line in site.review["rules.toml"]:
        print(f"rules.toml: REVIEW {line}")
    print("REVIEW before serving: each variable's type, unit, label and categories, and replace every "
          "'range' (written as the observed bounds) by what the field can hold; have the rules reviewed")
    print("credentials (shown once; only their hashes are in the config):")
    for c in site.credentials:
        print(f"  {c.user} ({c.role}): password {c.password}  token {c.token}")
    print(f"then: dsfed-server check {site.config} && dsfed-server run {site.config}")
    return 0


def _site_name(directory: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", directory.resolve().name)
    return name if name[:1].isalpha() else "site"


def do_hash_password(args: argparse.Namespace) -> int:
    from dsfed_server.auth import hash_password  # noqa: PLC0415

    password = sys.stdin.readline().rstrip("\n") if args.stdin else getpass.getpass("password: ")
    if len(password) < 12:
        print("refusing a password shorter than 12 characters", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def do_hash_token(args: argparse.Namespace) -> int:
    from dsfed_server.auth import hash_token, new_token  # noqa: PLC0415

    token = new_token()
    print(f"token (give to the user once): {token}")
    print(f"token_hashes entry for the site config: {hash_token(token)}")
    return 0


def new_secret(args: argparse.Namespace) -> int:
    from dsfed_server.provision import write_secret  # noqa: PLC0415

    path = Path(args.path)
    if path.exists():
        print(f"{path} exists; not overwriting a site secret", file=sys.stderr)
        return 2
    write_secret(path)
    print(f"wrote 32 random bytes to {path} (mode 600); set [site] secret_file to it")
    return 0


def identity(args: argparse.Namespace) -> int:
    from dsfed_server.config import load_site_config, peer_line, read_secret, resolve  # noqa: PLC0415
    from dsfed_server.disclosure.secure_sum import public_identity  # noqa: PLC0415

    config, base = load_site_config(args.config)
    key = public_identity(read_secret(resolve(base, config.site.secret_file)))
    print(f"# site {config.site.name}'s identity key: paste the next line under [federation] in each peer's "
          f"site config\n{peer_line(config.site.name, key)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsfed-server", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    tools_cli.add_commands(sub)

    p = sub.add_parser("run", help="run a site server")
    p.add_argument("config", help="site config file (TOML)")
    p.add_argument("--port", type=int, help="override the config's port (0: any free port)")
    p.add_argument("--ready-file", help="write {site, url, pid} as JSON here once listening")
    p.add_argument("--log-level", default="warning")
    p.set_defaults(func=run)

    p = sub.add_parser("init", help="write a new site (config, rules, dictionaries inferred from CSVs) for review")
    p.add_argument("dir", help="an empty or new directory")
    p.add_argument("--csv", nargs="+", required=True, metavar="FILE", help="each CSV becomes a table")
    p.add_argument("--name", help="the site's name (default: the directory's)")
    p.add_argument("--project", default="main", help="the project the tables belong to (default: main)")
    p.add_argument("--port", type=int, default=8001, help="the port in the config (default: 8001)")
    p.set_defaults(func=init)

    p = sub.add_parser("check", help="validate a site config with its rules and data, then exit")
    p.add_argument("config")
    p.set_defaults(func=check)

    p = sub.add_parser("hash-password", help="print a password hash for a site config")
    p.add_argument("--stdin", action="store_true", help="read the password from standard input")
    p.set_defaults(func=do_hash_password)

    p = sub.add_parser("hash-token", help="make a new API token and print its hash")
    p.set_defaults(func=do_hash_token)

    p = sub.add_parser("new-secret", help="write a new site secret file (seeds DP noise)")
    p.add_argument("path")
    p.set_defaults(func=new_secret)

    p = sub.add_parser("identity", help="print this site's identity key, which its secure-aggregation peers pin")
    p.add_argument("config")
    p.set_defaults(func=identity)

    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        if not isinstance(exc, _unusable_files()):
            raise
        print(f"dsfed-server: {exc}", file=sys.stderr)
        return 2


def _unusable_files() -> tuple[type[Exception], ...]:
    """The errors a command reports as ``dsfed-server: file: reason`` (exit 2): a config, rules file,
    data file or audit log that cannot be used, or an address the site cannot listen on. Imported
    when a command has failed, so that the parser stays light."""
    from dsfed_server.dictionary import CatalogError  # noqa: PLC0415
    from dsfed_server.tomlfile import ConfigFileError  # noqa: PLC0415

    return ConfigFileError, CatalogError, ListenError, audit.AuditChainError


if __name__ == "__main__":
    sys.exit(main())
