"""The calibration bins' edges and validate()'s decision thresholds are the same cuts.

validate() releases its calibration curve's ten bins first, then the decision curve at 0.05, ..., 0.95.
Every released edge stays a cut in the score column's history, and a later cut with no record between it
and an earlier one is dropped. The bins' edges were ``linspace``'s (3 * 0.1 = 0.30000000000000004), the
thresholds k / 20 (0.3): a float's last bit apart, so the thresholds 0.3, 0.6 and 0.7 were dropped
beside the curve's own edges at every site. The edges are now k / 10 as division rounds them, so each of
those thresholds is the curve's edge itself and is released, with the counts of the records (numpy).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from conftest import inprocess_builder
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_client.analyses.decision import VALIDATE_GRID, ds_decision_curve
from sitekit import make_sites


def test_decision_thresholds_at_the_calibration_edges_are_released_after_the_curve(tmp_path: Path):
    rng = np.random.default_rng(11)
    frames = {}
    for k in range(1, 4):  # shipped rules; 600 records a site, about 30 between two thresholds
        score = np.round(rng.uniform(0.01, 0.99, 600), 6)
        frames[f"s{k}"] = pd.DataFrame({"score": score, "y": (rng.uniform(size=600) < score).astype(np.int64)})
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10)
        decision = ds_decision_curve(session, "D$y", "D$score", tuple(VALIDATE_GRID))
    assert not curve.bins.was_coarsened
    assert decision.counts.not_released == {s: [] for s in frames}  # every threshold, 0.3, 0.6 and 0.7 too
    pooled = pd.concat(frames.values(), ignore_index=True)
    at = {float(t): i for i, t in enumerate(decision.thresholds)}
    for t in (0.3, 0.6, 0.7):
        treated = pooled.score >= t
        assert decision.counts.tp[at[t]] == np.sum(treated & (pooled.y == 1))
        assert decision.counts.fp[at[t]] == np.sum(treated & (pooled.y == 0))
