"""A DataSHIELD user's first histogram of the score (``ds.histogram``'s ``histogramDS2`` with 10 breaks
over the range ``histogramDS1`` gives, 0 to 1) and then the calibration curve's ten bins, on the
messy corpus's four sites (400, 260, 150 and 90 records, scores rounded to three decimals), shipped
default rules. The histogram's breaks are the curve's edges, but R's ``hist`` closes its cells on the
right and the curve on the left: each edge parts the records tied at 0.1, 0.2, ... the other way.
Per site the gate merges a cell between a new cut and one released before at, or a few records
from, it, so the per-site curve loses those cells (it kept 1 of 10); its summary says why. Its cells
hold R's counts and means on the edges released. On sites with no earlier histogram the curve keeps
those edges (its top cells, of fewer than q records at a site, merged) and the note does not appear."""

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

WHY = "a histogram's break at the same value (R's hist closes its cells on the right, this curve on the left)"


def _curve(tmp: Path, frames: dict[str, pd.DataFrame], explore: bool):
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


def test_a_curve_after_a_histogram_on_the_same_breaks(tmp_path, frames):
    pooled = pd.concat(frames.values(), ignore_index=True)
    curve = _curve(tmp_path / "explored", frames, explore=True)
    tied = [int(np.sum(np.isclose(pooled.score, e))) for e in np.linspace(0.1, 0.9, 9)]
    assert any(0 < t for t in tied)  # rounded scores: records lie on the shared edges
    # the histogram's breaks 0.1, 0.2 and 0.3 bound cells of 11 records or more at every site (q 5 plus a secret
    # margin of at most 5): released whatever the draw; the curve's edges there are 0 to 3 tied records from
    # them at a site, below q: merged per site
    assert not any(np.isclose(curve.edges, e).any() for e in (0.1, 0.2, 0.3))
    assert curve.n_bins < 10 and curve.coarsened
    assert any(WHY in note for note in curve._notes())
    assert WHY in " ".join(curve.summary().split())  # the summary wraps its notes
    _check_against_R(curve, pooled)
    fresh = _curve(tmp_path / "fresh", frames, explore=False)
    assert all(np.isclose(fresh.edges, e).any() for e in (0.1, 0.2, 0.3)) and fresh.n_bins > curve.n_bins
    assert not any(WHY in note for note in fresh._notes())
    _check_against_R(fresh, pooled)
