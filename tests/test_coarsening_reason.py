"""A release that an earlier one coarsened says so, why, and what to do. Another analyst's exploratory
histogram of the score (the messy corpus's three hospitals, shipped default rules) leaves cuts a few
records from the calibration curve's edges; the curve asked afterwards, per site and pooled, comes
back coarsened: its note names the edges merged or moved, the rule and the site's minimum count,
that cuts released before on the column by any analyst took part, and the remedy. Its cells hold
R's counts and sums on the edges released. On sites with no earlier release, the same curve's note
does not blame one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_server.messy import write_corpus
from rref import R_BINNED, r_reference
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets

EARLIER = "released before on this column by any analyst"
EDGES = (0.2, 0.3, 0.4)  # the curve's edges the exploratory histogram comes near


def _explored(scores: np.ndarray) -> list[float]:
    """An exploratory histogram's breaks: 0, just above each of ``EDGES`` (between the second and
    third score above it: one or two records from the edge at a site, two pooled), and 0.5005 (no
    score lies on a break: the histogram's cells are closed on the right, the curve's on the left)."""
    values = np.unique(scores)
    near = [float(np.mean(values[values > e][1:3])) for e in EDGES]
    return [0.0, *near, 0.5005]


def _frames(tmp: Path) -> dict[str, pd.DataFrame]:
    return {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
            .reset_index(drop=True) for s in write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37)}


def _curves(tmp: Path, frames: dict[str, pd.DataFrame], explore: bool) -> list:
    """The curve per site and pooled, after the other analyst's histogram where ``explore``. The sites' secrets are
    fixed, so each run draws the same margins: with some of them the pooled curve merges the cell at 0.4 (its cells
    a few records from the per-site curve's at a site), with others it moves the edge onto the cut beside it."""
    with fixed_secrets("coarsening reason"):
        provisioned, services = make_sites(tmp, frames)
    if explore:
        with inprocess_builder(provisioned, services, user="analyst2").login() as other:
            other.assign_table("D", "P.t")
            other.aggregate("histogramDS", Ref("D$score"), _explored(pd.concat(frames.values()).score.to_numpy()))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        return [ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=secure) for secure in (False, True)]


def test_a_curve_coarsened_by_another_analysts_histogram_says_why_and_what_to_do(tmp_path):
    frames = _frames(tmp_path)
    pooled = pd.concat(frames.values(), ignore_index=True)
    explored = _curves(tmp_path / "explored", frames, explore=True)
    for curve in explored:
        n, sum_y, _ = r_reference("binned_ref", R_BINNED, y=pooled.y.to_numpy(), p=pooled.score.to_numpy(),
                                  breaks=np.asarray(curve.edges, dtype=float), right=np.array([0.0])).reshape(3, -1)
        np.testing.assert_array_equal(curve.n, n)
        filled = n > 0
        np.testing.assert_allclose(curve.mean_outcome[filled], sum_y[filled] / n[filled], rtol=1e-12)
    per_site = explored[0].bins
    assert per_site.was_coarsened
    note = per_site.note()
    assert "COARSENED" in note and "Why (" in note and EARLIER in note and "disclosure.cut_history" in note
    assert "fewer than 5 records" in note and "To do: ask for fewer, wider bins" in note
    assert "the history is kept for every analyst and does not reset" in note
    for where, text in per_site.why.items():  # a site explains only what it coarsened
        assert bool(text) == bool(per_site.coarsened[where])
    fresh = _curves(tmp_path / "fresh", frames, explore=False)
    for before, after in zip(fresh, explored):  # edges near the earlier cuts: released on fresh sites only
        assert all(np.isclose(before.edges, e).any() for e in EDGES) and EARLIER not in before.bins.note()
        assert not all(np.isclose(after.edges, e).any() for e in EDGES)
    assert not any(np.isclose(explored[0].edges, e).any() for e in EDGES)
    pooled_note = explored[1].bins.note()  # pooled, after the per-site curve: edges moved to the cuts beside them
    assert "checked pooled" in pooled_note and EARLIER in pooled_note and "moved:" in pooled_note
    merged = pooled_note.split("merged with the next at edges pooled: ")[-1].split(";")[0].split(", ")
    for e, c in zip(EDGES[1:], _explored(pooled.score.to_numpy())[2:4]):  # each edge released, moved or merged, said
        released, moved = bool(np.isclose(explored[1].edges, e).any()), f"{e} as {c:.4g}" in pooled_note
        assert released + moved + (f"{e:g}" in merged) == 1, (e, pooled_note)
