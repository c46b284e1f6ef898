"""A table beyond the memory a site may use is refused at once, not read until the site runs short: a
call that reads more columns than fit is refused before the site reads them (the process's
address-space limit, RLIMIT_AS, as ``ulimit -v`` or a container sets it), or as soon as the engine
runs out of its own working memory (``[catalog] memory_limit_mb``, DuckDB's limit), naming the table,
the size, the limit and what to read instead. Before, the engine's out-of-memory error came back as
"table P.t at this site does not agree with its data dictionary (changed since the site started?)".
The same site then serves the columns an analysis reads, equal to pandas. A start-up check beyond
the engine's memory stops the site saying so. Shipped default rules."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder, inprocess_builder
from dsfed_client.errors import FederatedCallError
from dsfed_server.dictionary import CatalogError, Variable, write_dictionary
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import DEFAULT_RULES
from test_engines import _idle_address_space

HEADROOM = 768 << 20  # the site's address space beyond an idle site's: the columns y and score fit, the table not


def _parquet_site(tmp: Path, frame: pd.DataFrame, row_group_size: int | None = None) -> Path:
    folder = tmp / "data" / "P"
    folder.mkdir(parents=True)
    frame.to_parquet(folder / "t.parquet", index=False, row_group_size=row_group_size)
    write_dictionary(folder / "t.dictionary.json", "P", "t", [
        Variable("y", "integer", "", "outcome", ("0", "1")),
        Variable("score", "decimal", "", "predicted probability", (), (0.0, 1.0)),
        *(Variable(name, "decimal", "", name, (), (-1.0, 1.0)) for name in frame.columns[2:])])
    return folder.parent


def _frame(n: int, columns: int, rng: np.random.Generator, fill: bool) -> pd.DataFrame:
    extra = {f"v{j}": rng.uniform(-1, 1, n) if fill else np.zeros(n) for j in range(columns)}
    return pd.DataFrame({"y": rng.integers(0, 2, n), "score": rng.uniform(0, 1, n), **extra})


def _refusal(exc: pytest.ExceptionInfo[FederatedCallError]) -> object:
    (failure,) = exc.value.failures.values()
    assert failure.kind == "insufficient_memory" and failure.function == "assignTable"
    assert "variables=[...]" in failure.hint and "memory_limit_mb" in failure.hint
    assert "does not agree with its data dictionary" not in failure.message
    return failure


def test_a_table_beyond_the_address_space_limit_is_refused_at_once(tmp_path):
    limit = _idle_address_space(tmp_path / "idle") + HEADROOM
    n, wide = 1_000_000, 120  # 122 columns of 8 MB: about 976 MB as the site holds them, beyond the headroom
    frame = _frame(n, wide, np.random.default_rng(5), fill=False)  # zeros: a small file, the same size held
    provisioned = provision(tmp_path / "run", {"s1": (_parquet_site(tmp_path, frame), DEFAULT_RULES)},
                            catalog={"engine": "duckdb"})
    with LocalSites(provisioned.values(), tmp_path / "proc", start_timeout=300, address_space={"s1": limit}) as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            started = time.monotonic()
            with pytest.raises(FederatedCallError) as refused:
                session.assign_table("D", "P.t")
            took = time.monotonic() - started
            session.assign_table("D", "P.t", variables=["y", "score"])
            mean = session.aggregate("meanDS", "D$score")["s1"]["EstimatedMean"]
    failure = _refusal(refused)
    assert failure.message.startswith(f"reading {wide + 2} column(s) of table P.t (about {(wide + 2) * n * 8 >> 20:,} "
                                      "MB as the site holds them) does not fit in the memory this site may use: ")
    assert (f"address-space limit (RLIMIT_AS: ulimit -v or the container's limit) of {limit >> 20:,} MB"
            in failure.message)
    assert failure.rule is None  # no rules key sets it: the process's own limit
    assert took < 10  # refused before reading (measured 0.2 s), not when the site runs short
    assert mean == pytest.approx(frame["score"].mean(), rel=1e-12)


def test_the_engines_memory_limit_is_named(tmp_path):
    n, columns = 1_000_000, 40
    # a row group of 40 columns (250,000 records) is 80 MB in DuckDB, beyond its 64: the site's start-up check
    # scans 8 columns at a time, and 2 columns are read within it
    frame = _frame(n, columns - 2, np.random.default_rng(6), fill=True)
    provisioned = provision(tmp_path / "run", {"s1": (_parquet_site(tmp_path, frame, 250_000), DEFAULT_RULES)},
                            catalog={"engine": "duckdb", "memory_limit_mb": 64})
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    with inprocess_builder(provisioned, services).login() as session:
        with pytest.raises(FederatedCallError) as refused:
            session.assign_table("D", "P.t")
        session.assign_table("D", "P.t", variables=["y", "score"])
        mean = session.aggregate("meanDS", "D$score")["s1"]["EstimatedMean"]
    failure = _refusal(refused)
    assert failure.rule == "catalog.memory_limit_mb"
    assert failure.message.startswith(f"reading {columns} column(s) of table P.t "
                                      f"(about {columns * n * 8 >> 20:,} MB as "
                                      "the site holds them) does not fit in the memory this site may use: DuckDB: "
                                      "Out of Memory Error: ")
    assert failure.message.endswith("(its memory_limit is 64 MB)")
    assert mean == pytest.approx(frame["score"].mean(), rel=1e-12)


def test_a_start_up_check_beyond_the_engines_memory_limit_stops_the_site_saying_why(tmp_path):
    """The start-up check scans 8 columns at a time; a row group of 2,000,000 records is 16 MB a column,
    beyond DuckDB's 64 MB for 8. The site stops naming the table, the columns, the key and the remedy
    (it used to stop with DuckDB's exception and its traceback)."""
    frame = _frame(2_000_000, 10, np.random.default_rng(7), fill=True)
    provisioned = provision(tmp_path / "run", {"s1": (_parquet_site(tmp_path, frame), DEFAULT_RULES)},
                            catalog={"engine": "duckdb", "memory_limit_mb": 64})
    with pytest.raises(CatalogError) as stopped:
        SiteService.from_config_file(provisioned["s1"].config)
    message = str(stopped.value)
    assert message.startswith(f"{tmp_path / 'data' / 'P' / 't.parquet'}: checking y, score, v0, v1, v2, v3, v4, v5 "
                              "against the dictionary needs more than DuckDB's memory_limit of 64 MB (Out of Memory ")
    assert message.endswith("raise [catalog] memory_limit_mb, or write the table in smaller row groups")
