"""DuckDB under the catalog: Parquet and CSV files scanned in place, or a DuckDB database file.

Each table is a relation DuckDB reads on demand: ``read_parquet(file)``, ``read_csv(file)`` with every
field as text (as the file holds it; the catalog types it), or ``"project"."table"`` in the database
file, opened read-only. A read selects only the columns asked for; the dictionary checks run as one
aggregate query inside DuckDB (:mod:`dsfed_server.engines.sql`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from dsfed_server.dictionary import CatalogError, EngineOutOfMemory, TableInfo, Variable
from dsfed_server.engines.arrow_columns import ReadError, columns_from_batches
from dsfed_server.engines.sql import ident, literal, violation_counts
from dsfed_server.rowbatches import BATCH_ROWS


def _to_number(expr: str) -> str:
    """SQL: text ``expr`` as a finite number, NULL when it is none (``nan`` and ``inf`` are no
    numbers in a data file, as for the catalog's pandas typing)."""
    return f"(CASE WHEN isfinite(TRY_CAST({expr} AS DOUBLE)) THEN TRY_CAST({expr} AS DOUBLE) END)"


CHECK_COLUMNS = 8  # columns checked per scan: a scan holds a row group of each column it reads


class DuckDBEngine:
    """Tables from files beside their dictionaries, or from ``database`` (a DuckDB file)."""

    def __init__(self, database: Path | None = None, threads: int = 1, memory_limit_mb: int = 1024) -> None:
        self.database = database
        self.memory_limit_mb = memory_limit_mb
        config = {"threads": threads, "memory_limit": f"{memory_limit_mb}MB"}
        if database is not None:
            self._connection = duckdb.connect(str(database), read_only=True, config=config)
        else:
            self._connection = duckdb.connect(":memory:", config=config)
        self._relations: dict[str, str] = {}
        self._counts: dict[str, int] = {}  # project.table -> its records, counted once
        self._local = threading.local()
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor (a DuckDB connection is shared across threads through cursors)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._lock:
                cursor = self._local.cursor = self._connection.cursor()
                self._cursors.append(cursor)
        return cursor

    def source(self, project: str, table: str, dictionary_dir: Path) -> str | None:
        if self.database is not None:
            found = self._connection.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [project, table]).fetchall()[0][0]
            if not found:
                return None
            self._relations[f"{project}.{table}"] = f"{ident(project)}.{ident(table)}"
            return f"{self.database}:{project}.{table}"
        for suffix, reader in ((".parquet", "read_parquet({})"),
                               (".csv", "read_csv({}, all_varchar = true, header = true)")):
            path = dictionary_dir / f"{table}{suffix}"
            if path.exists():
                self._relations[f"{project}.{table}"] = reader.format(literal(str(path)))
                return str(path)
        return None

    def absent(self, project: str, table: str) -> str:
        if self.database is not None:
            return f"the database {self.database} has no table {project}.{table}"
        return f"no {table}.csv or {table}.parquet beside the dictionary"

    def _relation(self, info: TableInfo) -> str:
        return self._relations[info.ref]

    def _types(self, info: TableInfo) -> dict[str, str]:
        rows = self._cursor().execute(f"DESCRIBE SELECT * FROM {self._relation(info)}").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def column_names(self, info: TableInfo) -> list[str]:
        return list(self._types(info))

    def row_count(self, info: TableInfo) -> int:
        """The table's records, counted when first asked (for a CSV file, a parse) and kept: a read of
        other than that many rows is refused (the file changed while the site served it)."""
        if info.ref not in self._counts:
            self._counts[info.ref] = int(
                self._cursor().execute(f"SELECT count(*) FROM {self._relation(info)}").fetchall()[0][0])
        return self._counts[info.ref]

    def suspect_columns(self, info: TableInfo, variables: tuple[Variable, ...]) -> list[str]:
        counts = violation_counts(variables, self._types(info), _to_number)
        suspects = []
        for at in range(0, len(counts), CHECK_COLUMNS):  # a few columns per scan: bounded working memory
            chunk = counts[at:at + CHECK_COLUMNS]
            try:
                row = self._cursor().execute(
                    f"SELECT {', '.join(sql for _, sql in chunk)} FROM {self._relation(info)}").fetchall()[0]
            except duckdb.OutOfMemoryException as exc:
                raise CatalogError(
                    f"{info.source}: checking {', '.join(name for name, _ in chunk)} against the dictionary needs more "
                    f"than DuckDB's memory_limit of {self.memory_limit_mb} MB ({str(exc).splitlines()[0]}): raise "
                    "[catalog] memory_limit_mb, or write the table in smaller row groups") from None
            suspects += [name for (name, _), bad in zip(chunk, row) if bad]
        return suspects

    def read(self, info: TableInfo, columns: list[str]) -> pd.DataFrame:
        query = f"SELECT {', '.join(map(ident, columns))} FROM {self._relation(info)}"
        try:
            n = self.row_count(info)
            reader = self._cursor().sql(query).to_arrow_reader(BATCH_ROWS)
            return columns_from_batches(reader.schema, reader, n)
        except duckdb.OutOfMemoryException as exc:
            raise EngineOutOfMemory(f"DuckDB: {str(exc).splitlines()[0]} (its memory_limit is "
                                    f"{self.memory_limit_mb} MB)") from None
        except (duckdb.Error, pa.ArrowException, OSError, ReadError) as exc:
            raise CatalogError(f"{info.source}: cannot read {', '.join(columns)}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            for cursor in self._cursors:
                cursor.close()
            self._connection.close()
