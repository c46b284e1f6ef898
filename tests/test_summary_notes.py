"""What a result's text says about its cells and how wide it is: a request of decision thresholds
(inner edges only) that the sites released whole is not called coarsened, a released edge is
told apart from the edge asked to the last digit that differs, the sites' reasons read as
sentences, and a summary whose table holds many numeric columns (metrics at 19 thresholds) stays
within 100 columns and keeps every count. References: the counts by numpy on the records, the
cells asked counted by hand."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from dsfed_client.aggregation import BinnedSums
from dsfed_client.analyses.thresholds import threshold_metrics
from dsfed_client.results import MAX_WIDTH

GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)  # validate()'s decision grid: 19 thresholds


def _bins(y: np.ndarray, p: np.ndarray, edges: np.ndarray, requested: np.ndarray, **kw: object) -> BinnedSums:
    """Binned sums of ``y`` and ``p`` on ``edges`` (cells closed on the left, the last on both
    sides), as the sites release them; ``requested`` as the analysis asked."""
    cell = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2)
    n, sum_p, sum_y = (np.bincount(cell, weights=w, minlength=edges.size - 1) for w in (None, p, y))
    return BinnedSums(edges, n, sum_p, sum_y, requested, True, {"pooled": []}, {}, **kw)


@pytest.fixture
def records() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(37)
    p = np.round(rng.beta(2, 5, 1500), 3)
    return (rng.uniform(size=p.size) < p).astype(float), p


def test_thresholds_released_whole_are_not_called_coarsened(records):
    """Thresholds 0.05 ... 0.95 ask for 20 cells between the score's ends; all released, the note
    says so (it said 'COARSENED to 20 of 18 cells asked: edges differ from those asked')."""
    y, p = records
    b = _bins(y, p, np.concatenate([[0.0], GRID, [1.0]]), GRID)
    assert b.asked.size - 1 == GRID.size + 1
    assert not b.was_coarsened and b.note() == "checked pooled over the sites; released as requested"
    one = _bins(y, p, np.array([0.0, 0.5, 1.0]), np.array([0.5]))
    assert one.note() == "checked pooled over the sites; released as requested"  # was '2 of 0 cells asked'


def test_a_threshold_dropped_is_counted_against_the_cells_asked(records):
    y, p = records
    kept = GRID[GRID != 0.5]
    b = replace(_bins(y, p, np.concatenate([[0.0], kept, [1.0]]), GRID), coarsened={"pooled": [0.5]})
    cells = re.search(r"COARSENED to (\d+) of (\d+) cells asked", b.note())
    assert (int(cells.group(1)), int(cells.group(2))) == (GRID.size, GRID.size + 1)
    assert "cells merged with the next at edges pooled: 0.5" in b.note()


def test_an_edge_moved_by_its_last_bit_is_shown_with_that_bit(records):
    """0.3 asked, released at the earlier cut 0.1 * 3 (0.30000000000000004): the note showed '0.3 as 0.3'."""
    y, p = records
    cut = 0.1 * 3
    edges = np.array([0.0, cut, 1.0])
    b = replace(_bins(y, p, edges, np.array([0.0, 0.3, 1.0])), coarsened={"pooled": [0.3]},
                moved={"pooled": [(0.3, cut)]})
    assert f"0.3 as {cut!r}" in b.note()
    assert float(repr(cut)) == cut != 0.3


def test_each_sites_reason_reads_as_one_sentence(records):
    y, p = records
    b = replace(_bins(y, p, np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.25, 0.5, 1.0])), pooled=False,
                coarsened={"a": [0.25], "b": [0.25]},
                why={"a": "merged: too few records. To do: ask for fewer bins.", "b": "merged: the margin."})
    note = b.note()
    assert ".." not in note
    assert note.endswith("Why (a): merged: too few records. To do: ask for fewer bins. Why (b): merged: the margin")


def test_metrics_at_nineteen_thresholds_fit_100_columns_and_keep_every_count(records):
    """The summary of the metrics at validate()'s 19 decision thresholds: 20 numeric columns (244
    columns wide before); each threshold's TP, FP, TN and FN equal numpy's and appear in the text."""
    y, p = records
    b = _bins(y, p, np.concatenate([[0.0], GRID, [1.0]]), GRID)
    m = threshold_metrics(b, GRID, ">=", 0.05, "wilson")
    text = m.summary()
    assert m.thresholds.size == GRID.size
    assert max(map(len, text.splitlines())) <= MAX_WIDTH, text
    assert "COARSENED" not in text and "every requested threshold released" in text
    for t, tp, fp, tn, fn in zip(m.thresholds, m.tp, m.fp, m.tn, m.fn):
        called = p >= t
        assert (tp, fp, tn, fn) == (np.sum(called & (y == 1)), np.sum(called & (y == 0)),
                                    np.sum(~called & (y == 0)), np.sum(~called & (y == 1)))
    frame = m.to_frame()
    for column in frame.columns:
        assert column in text
        for value in frame[column]:
            assert ("-" if np.isnan(value) else format(value, ".6g")) in text, (column, value)


class _Sites:
    """A stand-in for the sites: each answers ``thresholdBinsDS`` with the cells of its records on
    ``edges``, and reports the asked edges in ``moved`` as moved onto cuts released before."""

    def __init__(self, parts: dict[str, tuple[np.ndarray, np.ndarray]], edges: np.ndarray,
                 moved: list[tuple[float, float]]) -> None:
        self.answers = {site: self._answer(y, p, edges, moved) for site, (y, p) in parts.items()}
        self.whole = self._answer(np.concatenate([y for y, _ in parts.values()]),
                                  np.concatenate([p for _, p in parts.values()]), edges, moved)

    @staticmethod
    def _answer(y: np.ndarray, p: np.ndarray, edges: np.ndarray, moved: list[tuple[float, float]]) -> dict:
        b = _bins(y, p, edges, edges)
        return {"edges": edges.tolist(), "n": b.n.tolist(), "sum_p": b.sum_p.tolist(), "sum_y": b.sum_y.tolist(),
                "dropped": [], "moved": [list(m) for m in moved], "why": ""}

    def aggregate(self, function: str, *args: object) -> dict[str, dict]:
        return self.answers

    def pooled(self, function: str, *args: object) -> dict:
        return self.whole


@pytest.mark.parametrize("strategy", ["PerSite", "Pooled"])
def test_a_threshold_released_at_an_earlier_cut_of_its_own_value_is_released(records, strategy):
    """validate()'s calibration curve releases the cuts 0.8 and 0.9; its decision grid then asks for
    0.85, 0.9 and 0.95, and the sites release the cells at 0.8 and 0.9, reporting 0.85 -> 0.8,
    0.9 -> 0.9 and 0.95 -> 0.9 as moved onto cuts released before (measured on three_hospitals,
    pooled and at every site). 0.9 is released as asked: its metrics are the records' (numpy),
    where it was reported withheld; 0.85 and 0.95 are not released."""
    from dsfed_client import aggregation

    y, p = records
    parts = {"a": (y[:900], p[:900]), "b": (y[900:], p[900:])}
    asked = np.array([0.5, 0.85, 0.9, 0.95])
    sites = _Sites(parts, np.array([0.0, 0.5, 0.8, 0.9, 1.0]), [(0.85, 0.8), (0.9, 0.9), (0.95, 0.9)])
    b = getattr(aggregation, strategy)(sites).bins("thresholdBinsDS", asked)
    m = threshold_metrics(b, asked, ">=", 0.05, "wilson")
    assert list(m.thresholds) == [0.5, 0.9] and m.withheld == (0.85, 0.95)
    called = p >= 0.9
    assert (m.tp[1], m.fp[1], m.tn[1], m.fn[1]) == (np.sum(called & (y == 1)), np.sum(called & (y == 0)),
                                                    np.sum(~called & (y == 0)), np.sum(~called & (y == 1)))
    assert "0.9 as" not in b.note() and "0.95 as 0.9" in b.note()
