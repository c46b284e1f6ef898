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
import pytest

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_client.analyses.decision import VALIDATE_GRID, ds_decision_curve
from dsfed_server.messy import write_corpus
from sitekit import make_sites
from test_curve_after_histogram import _check_against_R
from test_derived_column_attacks import fixed_secrets


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


def _corpus_curves(tmp: Path, frames: dict[str, pd.DataFrame], secrets: str, explore: bool):
    """The per-site calibration curve on the three hospitals (shipped rules, site secrets fixed by
    ``secrets``), after a DataSHIELD user's histogram of the score (``ds.histogram``'s 10 breaks on
    [0, 1], which R's ``hist`` shifts up by 1e-7 of a bin) or on a fresh ledger; with the histogram
    also the summed cells of the sites' first answer alone (the client before it asked again)."""
    with fixed_secrets(secrets):
        provisioned, services = make_sites(tmp, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        first = None
        if explore:
            session.aggregate_expr("histogramDS2(D$score, 10, 0.0, 1.0, 1, 3, 0.25)")
            first = session.aggregation(False).bins("calibrationBinsDS", np.arange(11) / 10, Ref("D$y"),
                                                    Ref("D$score"), 10)
        return ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=False), first


@pytest.mark.parametrize("secrets", ["b", "c", "e"])
def test_sites_that_snap_an_edge_differently_are_asked_again_at_the_cut(tmp_path: Path, secrets: str):
    """After the histogram, hospital1 and hospital3 move the curve's edge 0.1 onto the histogram's break
    0.10000001 (a few records between them) and hospital2 keeps 0.1 (its margin's draw): summed, the
    cell merged (8 of the 9 cells a fresh ledger gives, at these draws). The client now asks every site
    again at the cut the others moved the edge onto, keeps the fresh ledger's 9 cells, with R's counts and
    means on the edges released, and its note says which edge, at which site, why and what to do; the
    first answer's note names the summed cell the sites' different edges merged."""
    frames = {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
              .reset_index(drop=True) for s in write_corpus(tmp_path / "corpus", dataset="three_hospitals", seed=37)}
    pooled = pd.concat(frames.values(), ignore_index=True)
    fresh, _ = _corpus_curves(tmp_path / "fresh", frames, secrets, explore=False)
    curve, first = _corpus_curves(tmp_path / "explored", frames, secrets, explore=True)
    assert first.edges.size < fresh.edges.size == curve.edges.size == 10
    _check_against_R(curve, pooled)
    assert curve.bins.aligned == {"hospital2": [(0.1, 0.10000001)]}
    note = curve.bins.note()
    assert "edges asked again at every site at the cut other sites had moved them onto" in note
    assert "0.1 as 0.10000001 at hospital2" in note and "hospital1: 0.1 as 0.10000001" in note
    assert "released before on this column by any analyst" in note and "To do:" in note
    merged = first.note()
    assert ("cells merged in the sum over the sites, which released different edges there (0.1: hospital1 at "
            "0.10000001, hospital2 as asked, hospital3 at 0.10000001)") in merged
    assert "ask pooled (secure=True)" in merged
