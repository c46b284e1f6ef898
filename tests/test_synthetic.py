"""The synthetic site generator writes sites a server can serve, with the designs' properties."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
from scipy import stats

from dsfed_server.catalog import Catalog
from dsfed_server.synthetic import binormal, seed000_scores


def test_cli_writes_servable_sites(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "dsfed_client.cli", "synth", str(tmp_path), "--sites", "3", "--n", "200",
         "--design", "binormal", "--format", "parquet"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for k in (1, 2, 3):
        catalog = Catalog(tmp_path / f"site{k}")
        frame = catalog.frame("SYNTH.validation")
        assert len(frame) == 200 and list(frame.columns) == ["y", "score", "x1", "x2"]


def test_seed000_design_labels_follow_the_paper():
    rng = np.random.default_rng(3)
    frame = seed000_scores(20000, rng)
    high = frame["score"] >= 0.5
    # a fraction gamma in [0.5, 1] of labels is redrawn from Ber(0.5): P(y=1 | F>=0.5) = 1 - gamma/2
    p_high = frame.loc[high, "y"].mean()
    assert 0.5 - 0.02 <= p_high <= 0.75 + 0.02
    assert abs(frame.loc[~high, "y"].mean() - (1 - p_high)) < 0.03


def test_binormal_design_reaches_the_target_auc():
    frame = binormal(40000, np.random.default_rng(5), auc=0.8, prevalence=0.3)
    u = stats.mannwhitneyu(frame.loc[frame.y == 1, "score"], frame.loc[frame.y == 0, "score"]).statistic
    auc = u / ((frame.y == 1).sum() * (frame.y == 0).sum())
    assert abs(auc - 0.8) < 0.01
    assert abs(frame.y.mean() - 0.3) < 0.01
    assert isinstance(frame, pd.DataFrame)
