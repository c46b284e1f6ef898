"""The site config file: who the site is, where its data and rules are, who may log in.

Example (``dsfed-server init`` writes one)::

    [site]
    name = "site1"
    data_dir = "../opal_fixtures/site1"        # relative paths are relative to this file
    rules = "../disclosure_rules/default.toml"
    audit_log = "site1-audit.jsonl"
    access_log = "site1-access.log"            # one line per HTTP request; "-": standard error (optional)
    secret_file = "site1.secret"               # >= 32 random bytes, mode 600 (dsfed-server new-secret)
    ledger = "site1-ledger.sqlite"             # privacy budget spent per analyst x table (append-only)
    session_idle_timeout_s = 1800
    max_sessions_per_user = 8
    session_reclaim_after_s = 60               # at the limit, a session idle this long is reclaimed

    [catalog]                                  # optional: the engine that reads the tables (default shown)
    engine = "duckdb"                          # duckdb | postgresql | memory (dsfed_server/engines)
    database = ""                              # duckdb: a database file instead of files beside the dictionaries
    threads = 1                                # the engine's threads
    memory_limit_mb = 1024                     # the engine's working memory (DuckDB spills beyond it)
    onnx_predictions = "values"                # values | view: an ONNX graph's predictions kept, or run at each read
    # engine = "postgresql": the tables in a PostgreSQL database, read with a read-only role
    # dsn = "host=127.0.0.1 port=5432 dbname=hospital user=dsfed_reader"   # libpq, without the password
    # password_file = "site1.pgpass"          # the role's password, mode 600 (optional: else ~/.pgpass)

    [listen]
    host = "127.0.0.1"
    port = 0                                   # 0: any free port (see --ready-file)
    max_body_mb = 256                          # largest request body (pooled noisy scores can be large)
    api_docs = false                           # serve /docs and /openapi.json (without credentials)

    [login]                                    # optional: failed logins before a 429 (defaults shown)
    failures_per_address = 20
    failures_per_user = 50
    window_s = 60
    concurrent_checks = 1                      # password checks at once (default: half the cores)
    check_wait_s = 2                           # a login past them waits this long, then gets 429
    signin_wait_s = 30                         # ... a sign-in at /ws (DataSHIELD's clients give up at a 429)
    check_queue = 32                           # logins waiting at once; past them, 429 at once

    [[users]]
    name = "analyst"
    role = "analyst"                           # analyst | governance
    password_hash = "scrypt$16384$8$1$<salt>$<hash>"   # dsfed-server hash-password
    token_hashes = []                          # sha256 of API tokens (dsfed-server hash-token)

    [federation]                               # optional: peers for secure aggregation
    peers.site2 = "<base64 Ed25519 key>"       # the line 'dsfed-server identity CONFIG' prints at site2
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from dsfed_server.tomlfile import HIDDEN_VALUE, ConfigFileError, load_toml_model


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SiteSection(_Section):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
    data_dir: str
    rules: str
    audit_log: str
    secret_file: str
    ledger: str = Field(description="SQLite file of the privacy-budget ledger (append-only spend records)")
    access_log: str = Field("", description="one line per HTTP request (dsfed_server/access_log.py): a file, or "
                                            "\"-\" for standard error (default: <site name>-access.log beside the "
                                            "audit log)")
    models_dir: str = Field("", description="directory of uploaded prediction models, stored by their SHA-256 "
                                            "(default: <ledger file name>-models beside the ledger)")
    session_idle_timeout_s: float = Field(gt=0, le=7 * 24 * 3600)
    max_sessions_per_user: int = Field(ge=1, le=1000)
    session_reclaim_after_s: float = Field(
        60.0, gt=0, le=7 * 24 * 3600,
        description="at the session limit, a new session reclaims the account's session idle longest if idle this long")


class CatalogSection(_Section):
    """The engine under the catalog (:mod:`dsfed_server.engines`)."""

    engine: Literal["duckdb", "postgresql", "memory"] = Field(
        "duckdb", description="duckdb: Parquet/CSV files scanned in place or a DuckDB database file; postgresql: a "
                              "database read with a read-only role; memory: every table read whole at start")
    database: str = Field("", description="duckdb: a DuckDB database file holding the tables as project.table "
                                          "(opened read-only); empty: the files beside the dictionaries")
    threads: int = Field(1, ge=1, le=256, description="threads the engine may use")
    memory_limit_mb: int = Field(1024, ge=64, le=1_048_576, description="the engine's working memory, in MiB")
    onnx_predictions: Literal["values", "view"] = Field(
        "values", description="an ONNX graph's predictions (predictDS) kept as values (8 bytes a record, the graph "
                              "run once) or as a view (nothing kept, the graph run at every read, and over the "
                              "whole table for a release whose cuts the history checks)")
    dsn: str = Field("", description="postgresql: a libpq connection string without the password, e.g. "
                                     "\"host=127.0.0.1 port=5432 dbname=hospital user=dsfed_reader\"")
    password_file: str = Field("", description="postgresql: a file holding the role's password, readable by its "
                                               "owner only (empty: libpq's own means, ~/.pgpass or peer)")

    @model_validator(mode="after")
    def _engine_settings(self) -> "CatalogSection":
        postgresql = self.engine == "postgresql"
        if postgresql and not self.dsn:
            raise ValueError('engine = "postgresql" needs dsn, a libpq connection string such as '
                             '"host=127.0.0.1 port=5432 dbname=hospital user=dsfed_reader"')
        if not postgresql and (self.dsn or self.password_file):
            raise ValueError('dsn and password_file are for engine = "postgresql"')
        if postgresql:
            from psycopg import ProgrammingError  # noqa: PLC0415
            from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

            try:
                keys = conninfo_to_dict(self.dsn)
            except ProgrammingError as exc:
                raise ValueError(f"dsn is not a libpq connection string: {exc}") from None
            if "password" in keys:
                raise ValueError("dsn holds a password: put it in password_file (mode 600) instead")
        return self


class ListenSection(_Section):
    host: str
    port: int = Field(ge=0, le=65535)
    max_body_mb: int = Field(ge=1, le=4096, description="largest request body accepted, in MiB")
    api_docs: bool = Field(False, description="serve /docs and /openapi.json; they need no credentials, so off "
                                              "by default")


class LoginLimits(_Section):
    """Failed logins a site accepts before it refuses a client address or a user name for the rest of
    the window (HTTP 429, no password checked, one audit record per refusal streak; a name only to
    addresses that failed, see ``auth.Throttle``), and how many password checks run at once, so
    that a flood of guesses leaves the site's cores to the analysts' calls."""

    failures_per_address: int = Field(20, ge=1, le=100_000, description="failed logins per client address and window")
    failures_per_user: int = Field(50, ge=1, le=100_000, description="failed logins per user name and window")
    window_s: float = Field(60.0, gt=0, le=24 * 3600, description="the sliding window, in seconds")
    concurrent_checks: int = Field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), ge=1, le=256,
                                   description="password checks (scrypt) at once; default half the cores")
    check_wait_s: float = Field(2.0, ge=0, le=10, description="how long a login waits for a check, then gets 429")
    signin_wait_s: float = Field(30.0, ge=0, le=120,
                                 description="how long a sign-in at the Opal door (/ws, DataSHIELD's clients, which "
                                             "give up at a 429) waits for a check, then gets 429")
    check_queue: int = Field(32, ge=0, le=1024, description="logins waiting for a check at once; past them a login "
                                                            "gets 429 at once (each waits in one of the server's "
                                                            "worker threads)")


_SCRYPT = re.compile(r"scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9+/]+={0,2})\$([A-Za-z0-9+/]+={0,2})")

def _credential_error(what: str, command: str) -> PydanticCustomError:
    return PydanticCustomError(HIDDEN_VALUE, f"{what} is not a hash made by '{command}' (its value is not "
                                              f"shown here); run '{command}' and paste what it prints")


def _scrypt_hash(value: str) -> bool:
    """Whether ``value`` is a usable ``scrypt$N$r$p$salt$hash`` (:func:`dsfed_server.auth.hash_password`):
    N a power of two above 1, r and p at least 1, salt and a 32-byte hash in base64."""
    match = _SCRYPT.fullmatch(value)
    if match is None:
        return False
    n, r, p = (int(match.group(i)) for i in (1, 2, 3))
    try:
        salt = base64.b64decode(match.group(4), validate=True)
        digest = base64.b64decode(match.group(5), validate=True)
    except ValueError:
        return False
    return n > 1 and n & (n - 1) == 0 and r >= 1 and p >= 1 and len(salt) >= 8 and len(digest) == 32


class User(_Section):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.@-]{0,63}$")
    role: Literal["analyst", "governance"]
    password_hash: str = ""
    token_hashes: tuple[str, ...] = ()

    @field_validator("password_hash")
    @classmethod
    def _password_format(cls, value: str) -> str:
        if value and not _scrypt_hash(value):
            raise _credential_error("password_hash", "dsfed-server hash-password")
        return value

    @field_validator("token_hashes")
    @classmethod
    def _token_format(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            if not re.fullmatch(r"sha256\$[0-9a-f]{64}", item):
                raise _credential_error("an entry of token_hashes", "dsfed-server hash-token")
        return value

    @model_validator(mode="after")
    def _can_log_in(self) -> "User":
        if not self.password_hash and not self.token_hashes:
            raise ValueError("this user has neither a password_hash nor token_hashes; run 'dsfed-server "
                             "hash-password' (or hash-token) and add what it prints")
        return self


class FederationSection(_Section):
    peers: dict[str, str] = Field(
        default_factory=dict,
        description="identity keys of the sites this site joins in secure sums: name -> base64 Ed25519 "
                    "public key (each site prints its own with 'dsfed-server identity CONFIG')",
    )

    @field_validator("peers")
    @classmethod
    def _peer_keys(cls, peers: dict[str, str]) -> dict[str, str]:
        from dsfed_server.disclosure.secure_sum import parse_identity  # noqa: PLC0415
        from dsfed_core.errors import SiteError  # noqa: PLC0415

        for name, key in peers.items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,63}", name):
                raise ValueError(f"peer name {name!r} is not a site name")
            try:
                parse_identity(key)
            except (ValueError, SiteError):
                raise ValueError(f"peer {name}: not a base64 Ed25519 public key (32 bytes)") from None
        return peers


def peer_line(name: str, key: str) -> str:
    """One peer's entry as ``dsfed-server identity`` prints it: a TOML dotted key that adds ``name`` to
    ``peers`` when pasted under ``[federation]`` (a name holding a dot is quoted, as TOML needs)."""
    return f"peers.{name if '.' not in name else json.dumps(name)} = {json.dumps(key)}"


class SiteConfig(_Section):
    site: SiteSection
    catalog: CatalogSection = Field(default_factory=CatalogSection)
    listen: ListenSection
    login: LoginLimits = Field(default_factory=LoginLimits)
    federation: FederationSection = Field(default_factory=FederationSection)
    users: tuple[User, ...] = Field(min_length=1)

    @field_validator("users")
    @classmethod
    def _unique_users(cls, users: tuple[User, ...]) -> tuple[User, ...]:
        names = [u.name for u in users]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"user names must be unique; {', '.join(map(repr, twice))} appears more than once")
        return users


def load_site_config(path: str | Path) -> tuple[SiteConfig, Path]:
    """Read a site config; returns it with the directory its relative paths start from."""
    path = Path(path).resolve()
    return load_toml_model(path, SiteConfig), path.parent


def read_secret(path: Path) -> bytes:
    """The site's secret (seeds DP noise); refuses a missing, short or world-readable file."""
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        raise ConfigFileError(f"{path}:0: cannot read the site secret: {exc.strerror}") from None
    if len(data) < 32:
        raise ConfigFileError(f"{path}:0: the site secret must hold at least 32 random bytes")
    if mode & 0o077:
        raise ConfigFileError(f"{path}:0: the site secret is readable by others; run chmod 600 {path}")
    return data


def read_password(path: Path) -> str:
    """A database role's password (``[catalog] password_file``): the file's first line; refuses a
    missing, empty or group/world-readable file, as the site secret."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}:0: cannot read the database password: {exc}") from None
    password = text.splitlines()[0] if text.strip() else ""
    if not password:
        raise ConfigFileError(f"{path}:0: the database password file is empty")
    if mode & 0o077:
        raise ConfigFileError(f"{path}:0: the database password file is readable by others; run chmod 600 {path}")
    return password


def resolve(base: Path, value: str) -> Path:
    p = Path(value)
    return p if p.is_absolute() else (base / p).resolve()
