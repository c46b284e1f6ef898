"""Plots that do not overstate: a calibration bin the sites did not release gets no point
(none on the diagonal), its dropped edge is a tick on the x axis with a note; an incomplete
Hosmer-Lemeshow plot says "partial". Checked on the matplotlib artists."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from dsfed_client.plots import plot_calibration  # noqa: E402


def test_a_merged_bin_gets_no_point_and_its_edge_a_tick():
    # requested edges 0, .2, .4, .6, .8, 1; the gate dropped 0.6 (its bin merged with the next)
    edges = np.array([0.0, 0.2, 0.4, 0.8, 1.0])
    n = np.array([40, 30, 0, 25])  # the third released bin holds no record
    mean_prediction = np.array([0.1, 0.3, np.nan, 0.9])
    mean_outcome = np.array([0.15, 0.25, np.nan, 0.7])
    ax = plot_calibration(edges, n, mean_prediction, mean_outcome, not_released=[0.6])
    pooled = next(c for c in ax.collections if c.get_gid() == "calibration-pooled")
    points = pooled.get_offsets()
    np.testing.assert_allclose(points, [[0.1, 0.15], [0.3, 0.25], [0.9, 0.7]])  # released bins only
    on_diagonal = [p for line in ax.get_lines() if line.get_gid() != "calibration-diagonal"
                   for p in line.get_xydata() if np.isfinite(p).all() and abs(p[0] - p[1]) < 1e-12]
    assert on_diagonal == []  # nothing drawn at (x, x) but the diagonal itself
    tick = next(l for l in ax.get_lines() if l.get_gid() == "calibration-edges-not-released")
    np.testing.assert_allclose(tick.get_xydata(), [[0.6, 0.0]])  # on the axis, not on the diagonal
    note = next(t for t in ax.texts if t.get_gid() == "calibration-not-released-note")
    assert "1 requested edge" in note.get_text() and "partial" in ax.get_title()


def test_a_complete_calibration_plot_has_no_note():
    ax = plot_calibration(np.array([0.0, 0.5, 1.0]), np.array([10, 10]), np.array([0.3, 0.7]), np.array([0.2, 0.8]))
    assert not ax.texts and "partial" not in ax.get_title()


def test_partial_hosmer_lemeshow_plot_says_so():
    """Two H groups of a requested three (the sites merged one): the title says "partial"; the same
    table with every group as requested does not."""
    import pandas as pd  # noqa: PLC0415

    from dsfed_client.analyses.calibration import HosmerLemeshow  # noqa: PLC0415

    table = pd.DataFrame({"lower": [0.0, 0.4], "upper": [0.4, 1.0], "n": [50, 50], "observed_1": [8.0, 30.0],
                          "expected_1": [10.0, 31.0], "observed_0": [42.0, 20.0], "expected_0": [40.0, 19.0]})
    for coarsened in (True, False):
        h = HosmerLemeshow("H", 0.5, 1, 0.48, table, coarsened=coarsened)
        title = h.plot().get_title()
        assert title.startswith("partial Hosmer-Lemeshow H") == coarsened and ("partial" in title) == coarsened
