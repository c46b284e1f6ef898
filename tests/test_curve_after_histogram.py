"""A DataSHIELD user's first histogram of the score (``ds.histogram``'s ``histogramDS2`` with 10 breaks
over the range ``histogramDS1`` gives, 0 to 1) and then the calibration curve's ten bins, on the
messy corpus's four sites (400, 260, 150 and 90 records, scores rounded to three decimals), shipped
default rules. The histogram's breaks are the curve's edges, but R's ``hist`` shifts its breaks up by
1e-7 of a bin and closes its cells on the right, the curve on the left: each edge parts the records
tied at 0.1, 0.2, ... (0 to 3 at a site) from the histogram's break. Per site the gate used to merge
the cell between the edge and the break (it kept 1 of 10 cells); it now moves the edge onto the break
(dsfed_server/disclosure/snapping.py), so the curve keeps as many cells as on sites with no earlier
histogram (7 or 8 with the secret margin's draw: its top cells hold few records at a site; compared with
the same site secrets, three draws), and its note names the moves. Its
cells hold R's counts and means on the edges released, with or without the histogram."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_server.messy import write_corpus
from rref import R_BINNED, r_reference
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets

WHY = "are released at that cut, so the curve keeps its cells"


def _curve(tmp: Path, frames: dict[str, pd.DataFrame], explore: bool, secrets: str):
    with fixed_secrets(secrets):  # the same secret margins with and without the histogram: its effect alone
        provisioned, services = make_sites(tmp, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        if explore:
            ranges = session.aggregate_expr("histogramDS1(D$score, 1, 3, 0.25)").values()
            lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
            assert (lo, hi) == (0.0, 1.0)
            session.aggregate_expr(f"histogramDS2(D$score, 10, {lo!r}, {hi!r}, 1, 3, 0.25)")
        return ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=False)


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> dict[str, pd.DataFrame]:
    tmp = tmp_path_factory.mktemp("corpus")
    return {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
            .reset_index(drop=True) for s in write_corpus(tmp, dataset="four_mid", seed=37)}


def _check_against_R(curve, pooled: pd.DataFrame) -> None:
    n, sum_y, sum_p = r_reference("binned_ref", R_BINNED, y=pooled.y.to_numpy(), p=pooled.score.to_numpy(),
                                  breaks=np.asarray(curve.edges, dtype=float), right=np.array([0.0])).reshape(3, -1)
    np.testing.assert_array_equal(curve.n, n)
    filled = n > 0
    np.testing.assert_allclose(curve.mean_outcome[filled], sum_y[filled] / n[filled], rtol=1e-12)
    np.testing.assert_allclose(curve.mean_prediction[filled], sum_p[filled] / n[filled], rtol=1e-12)


@pytest.mark.parametrize("secrets", ["first draw", "second draw", "third draw"])
def test_a_curve_after_a_histogram_on_the_same_breaks(tmp_path, frames, secrets):
    pooled = pd.concat(frames.values(), ignore_index=True)
    curve = _curve(tmp_path / "explored", frames, explore=True, secrets=secrets)
    tied = [int(np.sum(np.isclose(pooled.score, e))) for e in np.linspace(0.1, 0.9, 9)]
    assert any(0 < t for t in tied)  # rounded scores: records lie on the shared edges
    # the histogram's breaks bound cells of 11 records or more at every site (q 5 plus a secret margin of at
    # most 5): released whatever the draw; the curve's edges there, 0 to 3 tied records from them at a site,
    # are moved onto them, not merged
    for e in (0.1, 0.2, 0.3):
        assert not np.isclose(curve.edges, e, rtol=0, atol=1e-12).any()
        assert np.isclose(curve.edges, e, rtol=0, atol=1e-6).any()  # the break, 1e-7 of a bin above e
    assert all(moved for moved in curve.bins.moved.values()) and curve.coarsened
    assert any(WHY in note for note in curve._notes())
    assert WHY in " ".join(curve.summary().split())  # the summary wraps its notes
    assert "0.1 as 0.10000001" in curve.bins.note()
    _check_against_R(curve, pooled)
    fresh = _curve(tmp_path / "fresh", frames, explore=False, secrets=secrets)
    assert all(np.isclose(fresh.edges, e, rtol=0, atol=1e-12).any() for e in (0.1, 0.2, 0.3))
    assert fresh.n_bins == curve.n_bins  # the earlier histogram costs the curve no cell (1 of 10 before the move)
    assert not any(WHY in note for note in fresh._notes())
    _check_against_R(fresh, pooled)
