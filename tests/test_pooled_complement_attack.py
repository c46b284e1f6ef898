"""A pooled cell less the other sites' own releases of it: the small site's few records, measured.

A pooled release checks the pooled cells, so a site's share of a cell may hold fewer than q records (the point of
pooling a small hospital's records). Under the shipped rules (``secure_aggregation.require = false``) the large
sites also release their own records of the same cells alone. The analyst asks ``thresholdBinsDS`` at nine
thresholds pooled over a site of 30 and two of 200, then the same thresholds at each large site alone, and
subtracts: the small site's records above each threshold, by outcome. A cell between two thresholds that holds
1 to q - 1 of its records, all with the event or none, gives each of those records' outcome (Denning & Schlörer
1983; the measure of ``test_pooled_row_sets``). The same in the other order: the large sites alone first.

Now each site of a pooled release adds, per released cell, whether it holds 1 to q - 1 records of it and how many
of its records of it no release of its own gives; a cell whose such records are 1 to q - 1 over the sites is
merged, and a site keeps the cells in which another site held 1 to q - 1 records, and does not release its own
records of them alone (``secure_aggregation.pooled_thresholds``). The control switches both checks off in process.
Three in-process sites under the shipped default rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites

THRESHOLDS = np.round(np.linspace(0.1, 0.9, 9), 3)
Q = 5  # disclosure.q_threshold of disclosure_rules/default.toml


def _frames(small: int = 30) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(7)
    frames = {}
    for site, n in (("small", small), ("north", 200), ("south", 200)):
        score = rng.uniform(0, 1, n)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, n) < score).astype(int), "score": score})
    return frames


def _above(frame: pd.DataFrame, t: float) -> tuple[int, int]:
    above = frame["score"] >= t
    return int((above & (frame["y"] == 1)).sum()), int((above & (frame["y"] == 0)).sum())


def outcomes_read(pooled: pd.DataFrame, alone: list[pd.DataFrame], truth: pd.DataFrame) -> int:
    """The small site's records whose outcome the pooled counts less the large sites' own give: per cell between
    consecutive thresholds released in all three answers (and above the last), its positives and negatives by
    subtraction; a cell of 1 to q - 1 records all of one outcome gives each record's. Counted only where the
    subtraction equals the truth."""
    common = sorted(set(pooled.index).intersection(*(set(a.index) for a in alone)))
    rest = {t: (int(pooled.loc[t, "tp"] - sum(a.loc[t, "tp"] for a in alone)),
                int(pooled.loc[t, "fp"] - sum(a.loc[t, "fp"] for a in alone))) for t in common}
    assert all(rest[t] == _above(truth, t) for t in common)  # the subtraction is the small site's share
    read = 0
    for lower, upper in zip(common, [*common[1:], None]):
        pos, neg = (rest[lower][k] - (rest[upper][k] if upper is not None else 0) for k in (0, 1))
        if 0 < pos + neg < Q and min(pos, neg) == 0:
            read += pos + neg
    return read


RULE = "secure_aggregation.pooled_thresholds"


def _attack(tmp: Path, pooled_first: bool, alone_at: np.ndarray = THRESHOLDS, small: int = 30
            ) -> tuple[int, list[int], list[str]]:
    frames = _frames(small)
    provisioned, services = make_sites(tmp, frames)  # disclosure_rules/default.toml
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        why: list[str] = []

        def metrics(on, at: np.ndarray, secure: bool) -> pd.DataFrame:
            result = ds_threshold_metrics(on, "D$y", "D$score", at, secure=secure)
            why.extend(result.bins.why.values())
            return result.to_frame()

        def pooled() -> pd.DataFrame:
            return metrics(session, THRESHOLDS, True)

        def alone() -> list[pd.DataFrame]:
            return [metrics(session.site_view(site), alone_at, False) for site in ("north", "south")]

        if pooled_first:
            together, own = pooled(), alone()
        else:
            own = alone()
            together = pooled()
    released = [len(together), *(len(o) for o in own)]
    return outcomes_read(together, own, frames["small"]), released, why


def _checks_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Guard, "_thin_complement", lambda self, row_sets, rows: None)
    monkeypatch.setattr(Guard, "_shares", lambda self, *args: {})
    # the audit of a summed 0/1 column's values as row sets stops the subsets' meanDS of the outcome too, where one of
    # them holds a single non-event: off, so that the control measures the route the two checks above close
    monkeypatch.setattr(Guard, "_audit_supports", lambda self, supports, rows: None)


@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_pooled_cells_less_the_large_sites_own_read_no_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               pooled_first: bool):
    read, released, why = _attack(tmp_path / "shipped", pooled_first)
    print(f"\n{'pooled first' if pooled_first else 'alone first'}: {read} outcomes read of the small site's "
          f"30 records; thresholds released (pooled, north, south): {released}")
    assert read == 0
    assert any(RULE in text for text in why)  # the result says why it merged
    _checks_off(monkeypatch)
    before, released, _ = _attack(tmp_path / "control", pooled_first)
    print(f"control (both checks off): {before} outcomes read; thresholds released {released}")
    assert before >= 5 and released == [9, 9, 9]


def test_unions_of_pooled_cells_less_the_large_sites_own_read_no_outcome(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """The same with a small site of 12 records and the large sites asked alone at every other threshold (cells of
    two pooled cells, the top one of two): checked per cell only, the small site's records of those unions were the
    analyst's."""
    every_other = THRESHOLDS[1::2]
    read, released, _ = _attack(tmp_path / "shipped", True, every_other, small=12)
    print(f"\nunions: {read} outcomes read; thresholds released (pooled, north, south): {released}")
    assert read == 0
    monkeypatch.setattr("dsfed_server.disclosure.checks.SPAN_CELLS", 1)
    before, released, _ = _attack(tmp_path / "control", True, every_other, small=12)
    print(f"control (single cells only): {before} outcomes read; thresholds released {released}")
    assert before > 0 and released == [9, 4, 4]


def test_the_cells_kept_pooled_are_released_to_the_honest_analyst(tmp_path: Path):
    """An honest analysis is released: the pooled metrics at the nine thresholds equal pandas' counts on the pooled
    records, and afterwards each large site alone still answers at thresholds 0.3 and 0.7 (cuts released pooled, so
    no secret margin decides them: cells of several pooled cells, in each of which the small site holds 8 records or
    more), equal to pandas' on its own records."""
    frames = _frames()
    provisioned, services = make_sites(tmp_path, frames)
    every = pd.concat(frames.values(), ignore_index=True)
    other = np.array([0.3, 0.7])
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        pooled = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True).to_frame()
        own = {site: ds_threshold_metrics(session.site_view(site), "D$y", "D$score", other, secure=False).to_frame()
               for site in ("north", "south")}
    assert list(pooled.index) == list(THRESHOLDS)
    assert [tuple(pooled.loc[t, ["tp", "fp"]]) for t in THRESHOLDS] == [_above(every, t) for t in THRESHOLDS]
    for site, frame in own.items():
        assert list(frame.index) == list(other)
        assert [tuple(frame.loc[t, ["tp", "fp"]]) for t in other] == [_above(frames[site], t) for t in other]


def _graded(tmp: Path) -> tuple[dict[str, pd.DataFrame], Any]:
    rng = np.random.default_rng(11)
    frames = {}
    for site, n, p in (("small", 30, (0.55, 0.35, 0.10)), ("north", 200, (0.4, 0.4, 0.2)),
                       ("south", 200, (0.4, 0.4, 0.2))):
        grade = rng.choice(["I", "II", "III"], n, p=p)
        frames[site] = pd.DataFrame({"grade": grade, "y": (rng.uniform(0, 1, n) < 0.3).astype(int)})
    frames["small"].loc[frames["small"]["grade"] == "III", "y"] = 1  # its few grade III records all had the event
    return frames, make_sites(tmp, frames)


def _grade_counts(table: dict[str, Any]) -> dict[str, int]:
    return dict(zip(table["levels"], (int(c) for c in table["counts"])))


@pytest.mark.parametrize("checks", ["shipped", "off"])
def test_a_pooled_table_less_the_large_sites_own_tables_reads_no_count(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch, checks: str):
    """A pooled table of grade by outcome (the small site holds 3 records of grade III, all with the event), then
    the table of grade alone at each large site: the pooled row of grade III less theirs is the small site's
    3, each of whom had the event. Now the large sites refuse their tables alone (the pooled table's rows and
    columns are kept with its cells), naming ``secure_aggregation.pooled_thresholds``; the control reads the 3."""
    if checks == "off":
        _checks_off(monkeypatch)
    frames, (provisioned, services) = _graded(tmp_path)
    small = int((frames["small"]["grade"] == "III").sum())
    assert 0 < small < Q
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        pooled = session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
        rows = dict(zip(pooled["rows"], np.asarray(pooled["counts"], dtype=int).sum(axis=1).tolist()))
        if checks == "off":
            own = [_grade_counts(session.site_view(site).aggregate("table1DDS", Ref("D$grade"))[site])
                   for site in ("north", "south")]
            read = rows["III"] - sum(o["III"] for o in own)
            print(f"\ncontrol: the small site's grade III records read: {read} (truth {small})")
            assert read == small
            return
        for site in ("north", "south"):
            with pytest.raises(FederatedCallError) as refused:
                session.site_view(site).aggregate("table1DDS", Ref("D$grade"))
            assert refused.value.failures[site].rule == "secure_aggregation.pooled_thresholds"
    assert rows == pd.concat(frames.values())["grade"].value_counts().to_dict()


@pytest.mark.parametrize("checks", ["shipped", "off"])
def test_subsets_at_the_large_sites_read_no_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks: str):
    """After the pooled release at nine thresholds, the subset ``score >= 0.9`` at each large site and ``meanDS`` of
    its outcome: the pooled top cell less their counts and events is the small site's 3 records there, each with
    the event. Now each large site refuses the subset (``secure_aggregation.pooled_thresholds``); the control
    reads the 3."""
    if checks == "off":
        _checks_off(monkeypatch)
    frames = _frames()
    top = frames["small"][frames["small"]["score"] >= 0.9]
    assert 0 < len(top) < Q and top["y"].nunique() == 1
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        pooled = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True).to_frame()
        records, events = int(pooled.loc[0.9, "tp"] + pooled.loc[0.9, "fp"]), int(pooled.loc[0.9, "tp"])
        for site in ("north", "south"):
            view = session.site_view(site)
            subset = 'dataFrameSubsetDS2("D", "D$score", "0.9", 6, NULL, NULL, FALSE)'  # score >= 0.9
            if checks == "shipped":
                with pytest.raises(FederatedCallError) as refused:
                    view.assign_expr("T", subset)
                assert refused.value.failures[site].rule == "secure_aggregation.pooled_thresholds"
                continue
            view.assign_expr("T", subset)
            mean = view.aggregate_expr("meanDS(T$y)")[site]
            records, events = records - mean["Nvalid"], events - round(mean["EstimatedMean"] * mean["Nvalid"])
    if checks == "off":
        print(f"\ncontrol: the small site's records with score >= 0.9 read: {records}, {events} with the event "
              f"(truth {len(top)}, {int(top['y'].sum())})")
        assert (records, events) == (len(top), int(top["y"].sum()))
