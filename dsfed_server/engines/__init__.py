"""Where a site's tables are read from: the engine under the catalog (``[catalog]`` in the site config).

- ``duckdb`` (default): DuckDB scans each table's Parquet or CSV file in place, or reads the tables of
  a DuckDB database file (``database``), one column at a time and only the columns a call asks for.
  The site starts by checking each table's schema against its dictionary and its values in SQL
  inside the engine (ranges, whole numbers, categories, boolean spellings): no row is loaded into
  the site process to start it.
- ``postgresql``: tables of a PostgreSQL database (schema = project), read with a role that can only
  read (:mod:`dsfed_server.engines.postgresql`); the dictionaries stay files under the data directory.
- ``memory``: every table read whole into pandas when the site starts (the first releases' path,
  kept as the reference the other engines are tested against).

An engine hands the catalog *raw* columns: text as a data file holds it, numbers and booleans as the
database types them. The catalog (:mod:`dsfed_server.catalog`) types and checks them against the
dictionary, whichever engine read them, so every engine serves the same values to the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pandas as pd

from dsfed_server.dictionary import TableInfo, Variable

if TYPE_CHECKING:
    from dsfed_server.config import CatalogSection


class Engine(Protocol):
    """What the catalog asks of the engine that holds a site's tables."""

    def source(self, project: str, table: str, dictionary_dir: Path) -> str | None:
        """Where the engine finds table ``project.table`` (a file path or a database name, for
        messages); None when it holds no such table."""

    def absent(self, project: str, table: str) -> str:
        """What to tell the site administrator when :meth:`source` found no table ``project.table``."""

    def column_names(self, info: TableInfo) -> list[str]:
        """The table's columns, in order, without reading rows."""

    def row_count(self, info: TableInfo) -> int:
        """The number of records."""

    def suspect_columns(self, info: TableInfo, variables: tuple[Variable, ...]) -> list[str]:
        """The variables whose values break their dictionary entry, found inside the engine (SQL): the
        catalog then reads those columns to name the first offending row."""

    def read(self, info: TableInfo, columns: list[str]) -> pd.DataFrame:
        """The named columns, raw, in record order (row 1 first)."""

    def close(self) -> None:
        """Release connections and files."""


def open_engine(section: "CatalogSection", base_dir: Path) -> Engine:
    """The engine a site config's ``[catalog]`` names (relative paths from the config's directory)."""
    from dsfed_server.config import read_password, resolve  # noqa: PLC0415

    if section.engine == "memory":
        from dsfed_server.engines.memory import MemoryEngine  # noqa: PLC0415

        return MemoryEngine()
    if section.engine == "postgresql":
        from dsfed_server.engines.postgresql import PostgreSQLEngine  # noqa: PLC0415

        password = read_password(resolve(base_dir, section.password_file)) if section.password_file else None
        return PostgreSQLEngine(section.dsn, password)
    from dsfed_server.engines.duckdb_engine import DuckDBEngine  # noqa: PLC0415

    database = resolve(base_dir, section.database) if section.database else None
    return DuckDBEngine(database, threads=section.threads, memory_limit_mb=section.memory_limit_mb)
