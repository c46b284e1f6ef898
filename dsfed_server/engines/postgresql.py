"""PostgreSQL under the catalog: a site whose tables live in a PostgreSQL database.

Table ``project.table`` is table ``"table"`` of schema ``"project"``; its dictionary stays a file,
``<data_dir>/<project>/<table>.dictionary.json``, with no data file beside it.

Read-only, twice over:

- the site refuses to start (:class:`~dsfed_server.dictionary.CatalogError`) when its role could change
  what it serves, itself or through a role it may become (SET ROLE): a superuser, a role holding
  INSERT, UPDATE, DELETE or TRUNCATE on a served table (or INSERT/UPDATE on any of its columns), or
  CREATE on a served table's schema. Other tables of the database are not checked; the role should
  reach none of them (docs/deployment.md);
- the connection opens with ``default_transaction_read_only=on``: a statement that writes fails
  even if a grant is added while the site runs.

Record order: SQL tables have none, so the engine defines it as the physical order, ``ORDER BY
ctid`` (for a table loaded once, the order it was loaded in). Every read of a table uses it, so the
columns the catalog reads at different times line up -- as long as the table does not change while
the site runs: an UPDATE or VACUUM FULL by the data's owner moves rows, so restart the site after
changing the data (as with a data file replaced in place). Only ordinary tables and materialized
views are served (a view or a partitioned table has no single ctid order).

A read streams ``COPY (SELECT columns ... ORDER BY ctid) TO STDOUT (FORMAT csv)`` into pyarrow's
CSV reader, typed by the columns' PostgreSQL types: no Python object per row, into arrays sized
by the table's count of records. That count is taken once, in the first read's snapshot (one
REPEATABLE READ transaction), and kept: a later read of other than that many rows is refused as
a table changed while the site served it. The dictionary checks
run as one aggregate query (:mod:`dsfed_server.engines.sql`). One connection, one statement at a
time (a lock): the catalog reads one set of columns at a time anyway.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Iterator

import pandas as pd
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

from dsfed_server.dictionary import CatalogError, TableInfo, Variable
from dsfed_server.engines.arrow_columns import ReadError, columns_from_batches
from dsfed_server.engines.sql import ident, literal, violation_counts


_NUMBER = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,4})?$"
"""Text PostgreSQL's ``numeric`` parses without error (the exponent bounded so it cannot overflow)."""

_ARROW_TYPES = {
    "smallint": pa.int64(), "integer": pa.int64(), "bigint": pa.int64(),
    "real": pa.float64(), "double precision": pa.float64(), "numeric": pa.float64(),
    "boolean": pa.bool_(),
}
"""Column types read as numbers or booleans; every other type is read as the text PostgreSQL prints."""

_READ_ONLY = "-c default_transaction_read_only=on"

_ROLES = "pg_has_role(current_user, r.oid, 'MEMBER')"
"""SQL: the roles the site's role is or may become (SET ROLE), whose privileges it therefore holds."""


def _to_number(expr: str) -> str:
    """SQL: text ``expr`` as a number, NULL when it is not one (PostgreSQL has no TRY_CAST)."""
    return f"(CASE WHEN {expr} ~ {literal(_NUMBER)} THEN CAST({expr} AS numeric) END)"


def _arrow_type(pg_type: str) -> pa.DataType:
    return _ARROW_TYPES.get(pg_type.split("(")[0], pa.string())


class _CopyStream(io.RawIOBase):
    """The blocks of a COPY TO STDOUT as a readable binary stream (for pyarrow)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview | bytearray") -> int:  # type: ignore[override]
        while not self._pending:
            block = next(self._blocks, None)
            if block is None:
                return 0
            self._pending = bytes(block)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class PostgreSQLEngine:
    """Tables from a PostgreSQL database, read with a read-only role (``dsn``: a libpq connection
    string without the password; ``password``: from ``[catalog] password_file``, or None for libpq's
    own means: ~/.pgpass, peer authentication)."""

    def __init__(self, dsn: str, password: str | None = None) -> None:
        self.dsn = dsn
        self._password = password
        self._lock = threading.Lock()
        self._tables: dict[str, str] = {}  # project.table -> its oid
        self._counts: dict[str, int] = {}  # project.table -> its records, counted once
        self._connection = self._connect()
        info = self._connection.info
        self._where = f"postgresql://{info.host}:{info.port}/{info.dbname}"
        if self._one(f"SELECT coalesce(bool_or(rolsuper), false) FROM pg_roles r WHERE {_ROLES}"):
            raise self._error(f"role {info.user!r} is (or may become) a superuser: dsfed reads with a role that "
                              f"can only read (docs/deployment.md, 'Data in PostgreSQL')")

    def _error(self, message: str) -> Exception:
        return CatalogError(f"[catalog] dsn {self.dsn!r}: {message}")

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.dsn, password=self._password, options=_READ_ONLY, autocommit=True,
                                   application_name="dsfed")
        except psycopg.Error as exc:
            raise self._error(f"cannot connect to PostgreSQL: {str(exc).strip()}; check the dsn, the "
                              f"password_file and that the server is running") from None

    def _live(self) -> psycopg.Connection:
        """The connection, opened again if it broke (call with the lock held)."""
        if self._connection.closed or self._connection.broken:
            self._connection = self._connect()
        return self._connection

    def _execute(self, query: str, params: tuple = ()) -> list[tuple]:
        """The rows of ``query``."""
        with self._lock:
            return self._live().execute(query, params).fetchall()

    def _one(self, query: str, params: tuple = ()) -> object:
        return self._execute(query, params)[0][0]

    def source(self, project: str, table: str, dictionary_dir: Path) -> str | None:
        rows = self._execute(
            "SELECT c.oid::text, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s", (project, table))
        if not rows:
            return None
        where = f"{self._where}:{project}.{table}"
        oid, kind = rows[0]
        if kind not in ("r", "m"):
            raise self._error(f"{project}.{table} is not a table or materialized view (a view or a "
                              f"partitioned table has no record order dsfed can keep)")
        name = f"{ident(project)}.{ident(table)}"
        can_read, can_write, can_create = self._execute(
            "SELECT has_table_privilege(%s::oid, 'SELECT'), "
            "bool_or(has_table_privilege(r.oid, %s::oid, 'INSERT,UPDATE,DELETE,TRUNCATE') "
            "OR has_any_column_privilege(r.oid, %s::oid, 'INSERT,UPDATE')), "
            f"bool_or(has_schema_privilege(r.oid, %s, 'CREATE')) FROM pg_roles r WHERE {_ROLES}",
            (oid, oid, oid, project))[0]
        user = self._connection.info.user
        if can_write or can_create:
            what = "can write table" if can_write else "can create tables in the schema of"
            raise self._error(
                f"role {user!r} {what} {name}: dsfed reads with a role that can only read; revoke it "
                f"(REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {name} FROM {ident(user)}; REVOKE CREATE ON "
                f"SCHEMA {ident(project)} FROM {ident(user)}) or use a read-only role")
        if not can_read:
            raise self._error(f"role {user!r} may not read {name}: GRANT USAGE ON SCHEMA {ident(project)} "
                              f"TO {ident(user)}; GRANT SELECT ON {name} TO {ident(user)}")
        self._tables[f"{project}.{table}"] = name
        return where

    def absent(self, project: str, table: str) -> str:
        return f"the database {self._where} has no table {project}.{table}"

    def _types(self, info: TableInfo) -> dict[str, str]:
        rows = self._execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = CAST(%s AS regclass) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (self._tables[info.ref],))
        return {str(name): str(kind) for name, kind in rows}

    def column_names(self, info: TableInfo) -> list[str]:
        return list(self._types(info))

    def row_count(self, info: TableInfo) -> int:
        with self._lock:
            return self._count(self._live(), info)

    def _count(self, connection: psycopg.Connection, info: TableInfo) -> int:
        """The table's records, counted when first asked and kept (call with the lock held): a read of
        other than that many rows is refused (the table changed while the site served it)."""
        if info.ref not in self._counts:
            row = connection.execute(f"SELECT count(*) FROM {self._tables[info.ref]}").fetchone()
            self._counts[info.ref] = int(row[0])  # type: ignore[index]
        return self._counts[info.ref]

    def suspect_columns(self, info: TableInfo, variables: tuple[Variable, ...]) -> list[str]:
        types = self._types(info)
        numeric_types = tuple(_ARROW_TYPES)
        unreadable = [v.name for v in variables if v.value_type in ("integer", "decimal")
                      and not types[v.name].startswith(numeric_types + ("text", "character"))]
        checked = tuple(v for v in variables if v.name not in unreadable)
        counts = violation_counts(checked, types, _to_number)
        if not counts:
            return unreadable
        row = self._execute(f"SELECT {', '.join(sql for _, sql in counts)} FROM {self._tables[info.ref]}")[0]
        return unreadable + [name for (name, _), bad in zip(counts, row) if bad]

    def read(self, info: TableInfo, columns: list[str]) -> pd.DataFrame:
        types = self._types(info)
        query = (f"COPY (SELECT {', '.join(map(ident, columns))} FROM {self._tables[info.ref]} ORDER BY ctid) "
                 f"TO STDOUT (FORMAT csv)")
        options = pacsv.ConvertOptions(
            column_types={c: _arrow_type(types[c]) for c in columns}, true_values=["t"], false_values=["f"],
            null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=False)
        try:
            with self._lock:
                connection = self._live()
                with connection.transaction():  # the first count and the rows: one snapshot
                    connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    n = self._count(connection, info)
                    with connection.cursor() as cursor, cursor.copy(query) as copy:
                        stream = io.BufferedReader(_CopyStream(iter(copy)), buffer_size=1 << 20)
                        reader = pacsv.open_csv(stream, read_options=pacsv.ReadOptions(column_names=columns),
                                                convert_options=options)
                        return columns_from_batches(reader.schema, reader, n)
        except (psycopg.Error, pa.ArrowInvalid, ReadError) as exc:
            raise self._error(f"cannot read {', '.join(columns)} of {info.ref}: {str(exc).strip()}") from None

    def close(self) -> None:
        with self._lock:
            self._connection.close()
