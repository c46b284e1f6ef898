"""The in-memory engine: each table's file read whole into pandas when the site starts.

The first releases' path, kept as ``[catalog] engine = "memory"``: the reference the other engines
are tested against (tests/test_engines.py). It holds every table in the site process, so it suits
small tables only.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa

from dsfed_server.dictionary import CatalogError, TableInfo, Variable


def _read_parquet(path: Path) -> pd.DataFrame:
    """A Parquet file read whole, by the calling thread alone. Under an address-space limit
    (``LimitAS=``) with the site's allocators (:mod:`dsfed_server.allocation`), Arrow's reader and
    read-ahead (``pre_buffer``) threads can fail an allocation and leave the read waiting forever:
    measured, 3 of 4 reads of a too-large file hung that way; read by this thread alone, all 4
    failed with Arrow's "malloc of size ... failed" (the site then stops, saying so)."""
    return pd.read_parquet(path, use_threads=False, pre_buffer=False)


class MemoryEngine:
    """Tables read whole with pandas from the Parquet or CSV file beside their dictionary."""

    def __init__(self) -> None:
        self._frames: dict[str, pd.DataFrame] = {}
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()

    def source(self, project: str, table: str, dictionary_dir: Path) -> str | None:
        path = next((p for p in (dictionary_dir / f"{table}.parquet", dictionary_dir / f"{table}.csv") if p.exists()),
                    None)
        if path is not None:
            self._paths[f"{project}.{table}"] = path
        return None if path is None else str(path)

    def absent(self, project: str, table: str) -> str:
        return f"no {table}.csv or {table}.parquet beside the dictionary"

    def _frame(self, info: TableInfo) -> pd.DataFrame:
        with self._lock:
            if info.ref not in self._frames:
                path = self._paths[info.ref]
                try:
                    self._frames[info.ref] = (_read_parquet(path) if path.suffix == ".parquet" else
                                              pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""]))
                except (MemoryError, pa.ArrowMemoryError) as exc:
                    raise CatalogError(f"{path}: the table does not fit in the memory this site may use ({exc}); "
                                       f"engine = \"memory\" reads whole tables: use engine = \"duckdb\", which "
                                       f"reads the columns a call names (docs/site-admin.md)") from None
            return self._frames[info.ref]

    def column_names(self, info: TableInfo) -> list[str]:
        return list(map(str, self._frame(info).columns))

    def row_count(self, info: TableInfo) -> int:
        return len(self._frame(info))

    def suspect_columns(self, info: TableInfo, variables: tuple[Variable, ...]) -> list[str]:
        """Every column: the catalog checks them all in pandas, as the site starts."""
        return [v.name for v in variables]

    def read(self, info: TableInfo, columns: list[str]) -> pd.DataFrame:
        return self._frame(info)[columns]

    def close(self) -> None:
        with self._lock:
            self._frames.clear()
