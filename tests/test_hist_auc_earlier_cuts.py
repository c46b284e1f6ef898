"""The histogram AUC's site-derived reference after earlier cuts on the score: the calibration curve's bins
(edges k/10) released pooled before the histograms. The sites drop every leaf edge within q records (and the
margin) of such a cut, merging leaves; the earlier cuts themselves are released, and the reference takes them
as edges (``curves.earlier_edges``), so a merged cell is parted at the earlier cut.

Checked: the reference the sites derive holds the calibration cuts as edges (each named in the release's
``reference_edges_added``), the pooled placement sums release their cells (the gate drops none of them), and,
with the exact counts binned at the released cells (an independent numpy Mann-Whitney count, ties one half,
against R's ``pROC::auc`` on the pooled records), the AUC's positive-negative pairs inside one cell are fewer
than at the leaf edges kept alone (the reference before) and the binned AUC is nearer pROC's.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import dsfed_server.functions.curves as site_curves
from conftest import inprocess_builder
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_client.calls import Ref
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.gate import Cut, cell_index
from dsfed_server.disclosure.provenance import RootColumn, Transform
from rref import r_eval
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

LEVELS = 6  # 64 leaves of about 4 pooled records: leaf edges near the calibration cuts are dropped
BINS = 10


def pairs_within(y: np.ndarray, cell: np.ndarray) -> int:
    """Positive-negative pairs in one cell (each counts one half in a tied placement value)."""
    n1, n0 = (np.bincount(cell[y == c], minlength=cell.max() + 1) for c in (1, 0))
    return int(np.dot(n1, n0))


def binned_auc(y: np.ndarray, cell: np.ndarray) -> float:
    """Mann-Whitney AUC of the cell indices (ties one half), by counting pairs."""
    pos, neg = cell[y == 1], cell[y == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    tied = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * tied) / (pos.size * neg.size))


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("earlier-cuts")
    frames = {f"s{k}": synthetic_frame(40 + k, 90) for k in range(1, 4)}
    derived: list[pd.DataFrame] = []
    derive = site_curves.derived_reference

    def noted(release, kept, added=()):  # noqa: ANN001, ANN202  (the in-process sites' reference, noted)
        reference = derive(release, kept, added)
        derived.append(reference)
        return reference

    with fixed_secrets("earlier cuts"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(site_curves, "derived_reference", noted)
        provisioned, services = make_sites(tmp, frames)
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=BINS, secure=True)
            hist = session.pooled("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=LEVELS, totals="exact")
            sums = session.pooled("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref(hist["reference"]))
    pooled = pd.concat(frames.values())
    return curve, hist, sums, derived[-1], pooled


def test_the_reference_holds_the_calibration_cuts_as_edges(released):
    curve, hist, sums, reference, pooled = released
    added = [Cut(float(v), bool(c)) for v, c in hist["reference_edges_added"]]
    calibration = {Cut(k / BINS, False) for k in range(1, BINS)}
    assert hist["reference_knots_dropped"] > 0  # leaf edges beside the calibration cuts were dropped
    assert added and set(added) <= calibration  # only cuts released before are added
    inner = site_curves.reference_cuts(reference)[1:-1]
    assert set(added) <= set(inner)  # the reference the sites derived has them as edges
    assert len(inner) == len(set(inner)) == (2 ** LEVELS - 1) - hist["reference_knots_dropped"] + len(added)
    # the pooled gate releases the cells beside them: none dropped or moved
    cells = sums["placement_cells"]
    assert not cells["moved"] and not {c.value for c in added} & set(cells["dropped"])


def test_fewer_pairs_within_a_cell_and_the_binned_auc_nearer_pROC(released):
    curve, hist, sums, reference, pooled = released
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    added = {Cut(float(v), bool(c)) for v, c in hist["reference_edges_added"]}
    gone = set(sums["placement_cells"]["dropped"])
    after = [c for c in site_curves.reference_cuts(reference) if c.value not in gone]
    before = [c for c in after if c not in added]  # the leaf edges the sites keep, without the earlier cuts
    cell_after, cell_before = cell_index(p, after), cell_index(p, before)
    within_after, within_before = pairs_within(y, cell_after), pairs_within(y, cell_before)
    auc = float(r_eval("as.numeric(pROC::auc(pROC::roc(y, p, levels = c(0, 1), direction = '<', quiet = TRUE)))",
                       y=y, p=p)[0])
    err_after, err_before = binned_auc(y, cell_after) - auc, binned_auc(y, cell_before) - auc
    print(f"pairs within a cell: {within_before} -> {within_after} of {int(y.sum() * (1 - y).sum())}; "
          f"binned AUC's error against pROC {err_before:+.4f} -> {err_after:+.4f}")
    assert within_after < within_before
    assert abs(err_after) < abs(err_before)
    # the placement sums' counts are the pooled records
    assert (sums["n1"], sums["n0"]) == (int(y.sum()), int((1 - y).sum()))


def earlier(x: np.ndarray, column: RootColumn | None, history: list[Cut], kept_at: list[float]) -> list[Cut]:
    """:func:`curves.earlier_edges` on one site's counts (as pooled), 64 leaves of [0, 1] of which those at
    ``kept_at`` are kept, q = 5 and no margin."""
    cells = gate.Intervals(x, (), render=lambda released: None, column=column)
    leaves = gate.cuts_from(np.linspace(0, 1, 65)[1:-1], inclusive=False)
    root_leaves = cells.to_root(leaves)
    refined = tuple(sorted(set(root_leaves) | set(history)))
    cuts = SimpleNamespace(cells=cells, history=history, refined=refined, key=cells.history_key)
    kept = np.array([c.value in kept_at for c in leaves])
    return site_curves.earlier_edges(cuts, 0.0, 1.0, leaves, root_leaves, kept, gate.cell_sums(cells.root, refined)[0],
                                     gate.Floor(5))


def test_earlier_cuts_mapped_from_a_decreasing_transform_and_without_provenance():
    root = (np.arange(400) + 0.5) / 400  # 25 records per 1/16
    # the score is 1 - x: the column's cut x <= 0.35 is the score's cut score < 0.65
    flip = Transform("one minus", lambda v: 1 - v, increasing=False, inverse_of=lambda v: 1 - v)
    column = RootColumn("D", "x", root, True, flip)
    history = [Cut(0.35, True), Cut(0.7, True), Cut(0.1, True)]
    added = earlier(1 - root, column, history, kept_at=[0.25, 0.5, 0.875])
    assert [c.inclusive for c in added] == [False] * 3
    assert [c.value for c in added] == pytest.approx([0.3, 0.65, 0.9], abs=1e-12)  # in the score's order
    # beside a kept leaf edge by fewer than q records (0.90625 lies 2 records above 0.9): not added
    added = earlier(1 - root, column, history, kept_at=[0.25, 0.5, 0.90625])
    assert [c.value for c in added] == pytest.approx([0.3, 0.65], abs=1e-12)
    # without provenance the history is on the values themselves
    x = 1 - root
    assert earlier(x, None, [Cut(0.3, False), Cut(0.65, True), Cut(0.66, True)], kept_at=[0.5]) == [
        Cut(0.3, False), Cut(0.65, True)]  # 0.66 lies 4 records above 0.65: the first of the two only
