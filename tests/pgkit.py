"""A throwaway PostgreSQL cluster for the tests of the postgresql engine (tests/test_postgresql.py)
and for ``bench/suite.py --engine postgresql``.

:func:`cluster` runs Debian's PostgreSQL server binaries (scripts/install-postgresql.sh), as the
``postgres`` OS user when the tests run as root (initdb refuses root): a data directory in a fresh
temporary directory, a server listening on 127.0.0.1 only at a free port picked at run time, its unix socket in the same
directory, fsync off. The tests' superuser connects over the socket (trust, local only); every TCP
login needs a password (scram-sha-256). The cluster is stopped and deleted at the end.
"""

from __future__ import annotations

import glob
import io
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
import psycopg
import pytest

from dsfed_server.engines.sql import ident, literal

READER = "dsfed_reader"  # the read-only login role the sites use


def _bindir() -> Path:
    """The newest installed PostgreSQL's server binaries; fails the test when there are none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found or (_as_root() and shutil.which("runuser") is None):
        pytest.fail("PostgreSQL's server binaries (/usr/lib/postgresql/<version>/bin/initdb) are not installed: "
                    "run scripts/install-postgresql.sh (or make test, which runs it)", pytrace=False)
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A running throwaway cluster: ``port`` on 127.0.0.1, the socket in ``directory``."""

    directory: Path
    port: int

    def superuser(self, dbname: str = "postgres") -> psycopg.Connection:
        """A superuser connection over the unix socket (autocommit)."""
        return psycopg.connect(host=str(self.directory), port=self.port, user="postgres", dbname=dbname,
                               autocommit=True)

    def create_role(self, name: str, password: str, *grants: str) -> None:
        """A login role with ``password``; ``grants``: SQL statements run after (e.g. GRANT ...)."""
        with self.superuser() as db:
            db.execute(f"CREATE ROLE {ident(name)} LOGIN PASSWORD {literal(password)}")
            for grant in grants:
                db.execute(grant)

    def create_database(self, name: str) -> None:
        with self.superuser() as db:
            db.execute(f"CREATE DATABASE {ident(name)}")
            db.execute(f"REVOKE ALL ON DATABASE {ident(name)} FROM PUBLIC")
            db.execute(f"GRANT CONNECT ON DATABASE {ident(name)} TO {ident(READER)}")

    def load(self, dbname: str, schema: str, table: str, frame: pd.DataFrame, types: dict[str, str]) -> None:
        """``frame`` as table ``schema.table`` of database ``dbname`` (superuser-owned schema and
        table, rows in the frame's order, columns typed by ``types``), readable by the reader role."""
        name = f"{ident(schema)}.{ident(table)}"
        with self.superuser(dbname) as db:
            db.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}")
            db.execute(f"GRANT USAGE ON SCHEMA {ident(schema)} TO {ident(READER)}")
            db.execute(f"CREATE TABLE {name} ({', '.join(f'{ident(c)} {types[c]}' for c in frame.columns)})")
            buffer = io.StringIO()
            frame.to_csv(buffer, index=False, header=False)
            with db.cursor() as cursor, cursor.copy(f"COPY {name} FROM STDIN (FORMAT csv)") as copy:
                copy.write(buffer.getvalue())
            db.execute(f"GRANT SELECT ON {name} TO {ident(READER)}")

    def dsn(self, dbname: str, user: str = READER) -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user}"


def column_types(frame: pd.DataFrame, as_text: bool = False) -> dict[str, str]:
    """PostgreSQL column types for ``frame``'s columns (all text when ``as_text``)."""
    def kind(col: pd.Series) -> str:
        if as_text or not pd.api.types.is_numeric_dtype(col):
            return "text"
        return "bigint" if pd.api.types.is_integer_dtype(col) else "double precision"
    return {name: kind(col) for name, col in frame.items()}


def password_file(directory: Path, password: str = "reader-password") -> Path:
    """``password`` in ``directory/reader.password``, readable by its owner only (as a site keeps it)."""
    path = directory / "reader.password"
    path.write_text(password + "\n")
    os.chmod(path, 0o600)
    return path


def _as_root() -> bool:
    return os.geteuid() == 0


def _run_as_postgres(*args: str | Path) -> None:
    """A server binary, as the ``postgres`` OS user when the tests run as root (else as the tests' user)."""
    prefix = ["runuser", "-u", "postgres", "--"] if _as_root() else []
    done = subprocess.run([*prefix, *map(str, args)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({done.returncode}): {done.stdout}{done.stderr}")


@contextmanager
def cluster() -> Iterator[Cluster]:
    """Start a throwaway cluster, with the reader role (password in ``directory/reader.password``);
    stop and delete it at the end."""
    bindir = _bindir()
    directory = Path(tempfile.mkdtemp(prefix="dsfed-pg-"))
    if _as_root():
        postgres = pwd.getpwnam("postgres")
        os.chown(directory, postgres.pw_uid, postgres.pw_gid)
    data, log = directory / "data", directory / "server.log"
    port = _free_port()
    started = False
    try:
        _run_as_postgres(bindir / "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--no-sync",
                         "--auth-local=trust", "--auth-host=scram-sha-256")
        options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={directory} "
                   f"-c fsync=off -c full_page_writes=off -c shared_buffers=32MB")
        _run_as_postgres(bindir / "pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start")
        started = True
        found = Cluster(directory, port)
        found.create_role(READER, "reader-password")
        yield found
    finally:
        if started:
            _run_as_postgres(bindir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(directory, ignore_errors=True)
