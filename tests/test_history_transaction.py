"""A release's records in a site's release history are kept whole or not at all.

A pooled release records, at each site, the cuts it released, its records of every cell, the release, and its shares
of the cells it keeps as exposed: several writes. Here the last of them fails at every site (the disk full, say, as
the test makes it): the analyst gets an error, and no site keeps part of the release, which a later audit would
otherwise read as released (its cuts, its cells) or not (the rest). The same release asked again is released and kept
whole. What the history holds is read from its SQLite file directly, not through the code under test.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_client.errors import FederatedCallError
from dsfed_server.disclosure.history import History
from dsfed_server.record_prefixes import RecordKeys
from sitekit import make_sites

TABLES = ("released_cuts", "pooled_rows", "pooled_cells", "pooled_releases", "thin_cells", "exposed_cells",
          "exposed_parts")


def _held(path: Path) -> dict[str, int]:
    """The rows of each table of a release history that a pooled release writes to."""
    with sqlite3.connect(path) as db:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}


def test_a_pooled_release_whose_records_fail_part_way_leaves_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    rng = np.random.default_rng(11)
    frames = {f"s{k}": pd.DataFrame({"y": rng.integers(0, 2, 200), "score": rng.uniform(0, 1, 200)})
              for k in (1, 2, 3)}
    provisioned, services = make_sites(tmp_path, frames)
    paths = {name: service.history.path for name, service in services.items()}

    def disk_full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        before = {name: _held(path) for name, path in paths.items()}
        with monkeypatch.context() as patched:
            patched.setattr(History, "record_exposed_row_sets", disk_full)  # the release's last write
            with pytest.raises(FederatedCallError, match="internal error"):
                session.pooled("histogramDS", Ref("D$score"), [0.0, 0.25, 0.5, 0.75, 1.0])
        assert {name: _held(path) for name, path in paths.items()} == before
        counts = session.pooled("histogramDS", Ref("D$score"), [0.0, 0.25, 0.5, 0.75, 1.0])
    pooled = np.concatenate([frame["score"].to_numpy() for frame in frames.values()])
    assert np.asarray(counts["counts"]).tolist() == np.histogram(pooled, [0.0, 0.25, 0.5, 0.75, 1.0])[0].tolist()
    for name, path in paths.items():
        after = _held(path)
        # the five edges, this site's records of the four cells at least (runs of them kept too), the release
        added = {table: after[table] - before[name][table] for table in TABLES}
        assert added["released_cuts"] == 5 and added["pooled_releases"] == 1, (name, added)
        assert added["pooled_rows"] + added["pooled_cells"] >= 4, (name, added)
        # its share of each cell, kept as exposed (the other sites may release theirs alone later)
        assert added["exposed_cells"] == 4, (name, added)


def _digests(table: str, sizes: list[int], columns: list[str] | None = None, order: np.ndarray | None = None,
             keys: RecordKeys | None = None) -> dict[int, dict[str, str]]:
    """A site's digests of a table's first records at each size: one column, the same records at every run."""
    if keys is not None:
        keys.add(pd.Series(np.arange(keys.keys.size, dtype=float), name="x"))
    return {size: {"x": f"first {size} records"} for size in sizes}


def test_a_table_size_decided_in_a_transaction_that_fails_is_decided_again(tmp_path: Path):
    """The site decides once a run whether a table at a size holds the records it held before, and keeps its digests
    at that size; where that was done inside a transaction that failed, the digests were not kept, and the decision is
    made (and its digests kept) again, not taken as made."""
    history = History(tmp_path / "history.sqlite", _digests)
    with pytest.raises(RuntimeError, match="a later step failed"):
        with history.transaction():
            history.table_records("P.t", 100, 0)
            raise RuntimeError("a later step failed")
    assert _count(history.path, "table_records") == 0
    history.table_records("P.t", 100, 0)
    assert _count(history.path, "table_records") == 1


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
