"""Snapping (dsfed_server/disclosure/snapping.py): a per-site edge the gate would drop next to a cut
released before is released at that cut, and only where the cells the move makes pass the floor.

The attack: an analyst who knows every record of a column but where one target lies among a subset
asks, over that subset, for an edge a record below a cut released before (dropped: its cell would
hold one record of the column) and a second edge above the target. Moved without the floor's check,
the first edge becomes the earlier cut and the subset's cell between the two holds the target alone:
its count 1 says the target lies there, and the cell's sum its outcome. With the check the move is
undone and the cell merged. The rules are the shipped default.toml's q and margin."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dsfed_server.disclosure import snapping
from dsfed_server.disclosure.gate import Cut, Floor, Intervals, Released, release_local
from dsfed_server.disclosure.provenance import RootColumn
from dsfed_server.disclosure.rules import load_rules

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def floor() -> Floor:
    rules = load_rules(ROOT / "disclosure_rules" / "default.toml")
    return Floor(rules.disclosure.q_threshold, rules.disclosure.cut_margin, key=b"a site's secret")  # cut_history on


def _subset_release(floor: Floor) -> tuple[Released, float, float]:
    """The attack's release: the column is 0, 1, ..., 99; a cut at 40.5 was released before on it;
    the subset holds 0..29, the target (45, outcome 1) and 70..99 (outcome 0); edges at 40 and 60."""
    column = np.arange(100, dtype=float)
    x = np.concatenate([np.arange(30.0), [45.0], np.arange(70.0, 100.0)])
    y = (x == 45.0).astype(float)
    cells = Intervals(x, (Cut(40.0, False), Cut(60.0, False)), render=lambda released: released, sums={"y": y},
                      column=RootColumn("P.t", "score", column, whole=False))
    history = [Cut(40.5, False)]
    return release_local(cells, floor, history, snap=snapping.snap_dropped).result, 45.0, 1.0


def _recovered(released: Released, target: float, outcome: float) -> int:
    """Cells of the release that hold one record: the target's, when its interval holds the target and
    its sum the target's outcome (what the attack reads)."""
    edges = [-np.inf, *(c.value for c in released.cuts), np.inf]
    return sum(1 for k, n in enumerate(released.counts)
               if n == 1 and edges[k] <= target < edges[k + 1] and released.sums["y"][k] == outcome)


def test_a_move_that_would_single_out_a_record_is_undone(floor, monkeypatch) -> None:
    released, target, outcome = _subset_release(floor)
    assert min(released.counts[released.counts > 0]) >= floor.q
    assert _recovered(released, target, outcome) == 0
    assert Cut(40.0, False) in released.dropped and not released.moved
    # without the floor's check after the move, the same request singles out the target
    monkeypatch.setattr(snapping, "unsound_move", lambda *args, **kwargs: None)
    unchecked, target, outcome = _subset_release(floor)
    assert unchecked.moved == {Cut(40.0, False): Cut(40.5, False)}
    assert _recovered(unchecked, target, outcome) == 1


def test_an_edge_beside_an_earlier_cut_moves_onto_it_and_counts_stay_exact(floor) -> None:
    """A whole column of 200 values: an edge 3 records below a cut released before is moved
    onto it (the cells beside it hold q plus the margin or more), an edge far from every earlier cut is
    released as asked; the cells' counts and sums equal numpy's on the released edges."""
    rng = np.random.default_rng(7)
    x = rng.permutation(200) / 200.0
    y = rng.integers(0, 2, 200).astype(float)
    earlier = Cut(float(np.sort(x)[100]) + 0.001, False)  # a cut released before, between two values
    near = Cut(float(np.sort(x)[98]), False)  # 3 records below it: fewer than q
    cells = Intervals(x, (Cut(0.25, False), near, Cut(0.75, False)), render=lambda released: released,
                      sums={"y": y}, column=RootColumn("P.t", "score", np.sort(x), whole=True))
    released = release_local(cells, floor, [earlier], snap=snapping.snap_dropped).result
    assert released.moved == {near: earlier}
    assert released.cuts == (Cut(0.25, False), earlier, Cut(0.75, False))
    assert "moved" in released.why and "disclosure.cut_history" in released.why
    edges = np.array([-np.inf, 0.25, earlier.value, 0.75, np.inf])
    cell = np.searchsorted(edges, x, side="right") - 1
    np.testing.assert_array_equal(released.counts, np.bincount(cell, minlength=4))
    np.testing.assert_array_equal(released.sums["y"], np.bincount(cell, weights=y, minlength=4))
    # an edge the row-set audit objected to (excluded) is dropped, not moved
    again = release_local(cells, floor, [earlier], exclude={near}, snap=snapping.snap_dropped).result
    assert not again.moved and near in again.dropped and earlier not in again.cuts


def test_only_a_nearby_earlier_cut_is_a_target() -> None:
    """Nearby: within half the gap to the neighbouring requested edges; else the edge is dropped."""
    cuts = (Cut(0.2, False), Cut(0.4, False), Cut(0.6, False))
    assert snapping.nearby_history_cut(cuts, 1, [Cut(0.33, False), Cut(0.9, True)]) == Cut(0.33, False)
    assert snapping.nearby_history_cut(cuts, 1, [Cut(0.29, False)]) is None
    assert snapping.nearby_history_cut(cuts, 2, [Cut(0.69, True)]) == Cut(0.69, True)
    assert snapping.nearby_history_cut(cuts, 2, [Cut(0.71, True)]) is None
