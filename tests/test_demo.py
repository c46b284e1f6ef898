"""`dsfed demo` (the README's first command, after installation): exits 0, prints the analysis,
and its --json output parses and agrees with the pooled computation."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    result = subprocess.run(
        [sys.executable, "-m", "dsfed_client.cli", "demo", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, json.loads(out.read_text())


def test_demo_runs_end_to_end(demo, gbsg2_pooled):
    stdout, data = demo
    assert data["n"]["pooled"] == len(gbsg2_pooled)
    assert abs(data["mean_age"]["pooled"] - gbsg2_pooled["age"].mean()) < 1e-12
    refused = data["refused_table"]["refused"]  # per site: sites 2 and 4 hold a cell below q
    assert {r["site"] for r in refused} == {"site2", "site4"}
    assert all(r["rule"] == "disclosure.q_threshold" and r["function"] == "table2DDS" for r in refused)
    # the same table pooled over the sites (R's table() on the pooled records)
    expected = pd.crosstab(gbsg2_pooled.menostat, gbsg2_pooled.y)
    assert data["pooled_table_menostat_y"] == {m: {str(y): int(expected.loc[m, y]) for y in (0, 1)}
                                               for m in ("Pre", "Post")}
    subset = data["refused_subset_age50"]["refused"]  # age >= 50 after the histogram's age <= 50
    assert {r["rule"] for r in subset} == {"disclosure.cut_history"} and len(subset) == 5
    older = gbsg2_pooled[gbsg2_pooled.age > 50]
    assert data["mean_score_age50"]["n"] == len(older)
    assert abs(data["mean_score_age50"]["pooled"] - older.score.mean()) < 1e-12
    glm = data["refused_glm"]["refused"]  # tumour grade I: 3 patients at site3
    assert [(r["site"], r["rule"]) for r in glm] == [("site3", "disclosure.q_threshold")]
    assert all(chain["ok"] for chain in data["audit"].values())
    assert "REFUSED" in stdout and "All sites stopped." in stdout


def test_demo_calibration_equals_pooled_and_the_auc_ci_covers_it(demo, gbsg2_pooled):
    """The default validation of the demo (pooled releases, histogram AUC), against pooled R:
    every calibration statistic to 1e-8 with nothing merged, H-L C over R's deciles with df 8,
    and the exact pooled AUC inside the noise-aware interval."""
    from rref import R_HOSLEM, R_PROC, r_reference

    stdout, data = demo
    v, ref = data["validation"], data["validation_pooled"]
    y, p = gbsg2_pooled.y.to_numpy(), gbsg2_pooled.score.to_numpy()
    assert v["mode"] == "pooled"
    hl_c = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    hl_h = r_reference("hl_h", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    ece, mce = r_reference("ece_ref", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    got_c, got_h = v["hl_c"], v["hl_h"]
    assert got_c["statistic"] == pytest.approx(hl_c[0], rel=1e-8) and got_c["df"] == hl_c[1] == 8
    assert got_c["group_sizes"] == list(hl_c[3:]) and got_c["complete"]
    assert got_h["statistic"] == pytest.approx(hl_h[0], rel=1e-8) and got_h["df"] == hl_h[1] and got_h["complete"]
    assert v["errors"]["ece"] == pytest.approx(ece, rel=1e-8) and v["errors"]["mce"] == pytest.approx(mce, rel=1e-8)
    curve = v["curve"]
    assert not curve["coarsened"] and curve["n_total"] == len(y)
    observed = [b["mean_outcome"] for b in curve["table"]]
    np.testing.assert_allclose([o for o in observed if o is not None],
                               [r for r in ref["calibration_curve"] if r == r], rtol=1e-8)
    assert abs(v["brier"]["brier"] - ref["brier"]) < 1e-12
    assert abs(v["logistic"]["slope"] - ref["calibration_slope"]) < 1e-8
    d = v["discrimination"]
    auc = r_reference("proc_ref", R_PROC, y=y, p=p)[0]
    assert d["method"] == "histogram" and d["noise_variance"] > 0
    assert d["ci_lower"] < auc < d["ci_upper"] and d["roc_glm_ci_lower"] < auc < d["roc_glm_ci_upper"]
    assert max(data["validation_transfer"]["round_trips"].values()) <= 60
    assert "H-L C statistic" in stdout and "ROC-GLM AUC" in stdout and "difference" in stdout


def test_demo_secure_glm_equals_r(demo, gbsg2_pooled):
    """The demo's GLM as a pooled protocol (five site processes) equals R's glm on the pooled records."""
    from test_glm import r_glm

    _, data = demo
    secure = data["secure_glm"]
    ref = r_glm(gbsg2_pooled[["y", "age", "tgrade", "horTh"]], secure["formula"], "binomial", "logit")
    assert list(secure["coefficients"].values()) == pytest.approx(list(ref["coef"]), rel=1e-7, abs=1e-9)
    assert secure["pooled"] and len(secure["sites"]) == 5
