"""`dsfed demo` (the README's first command, after installation): exits 0, prints the analysis,
and its --json output parses and agrees with the pooled computation."""

from __future__ import annotations

import json
import subprocess
import sys

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
    refused = data["refused_table"]["refused"]
    assert refused and all(r["rule"] == "disclosure.q_threshold" and r["function"] == "table2DDS" for r in refused)
    assert all(chain["ok"] for chain in data["audit"].values())
    assert "REFUSED" in stdout and "All sites stopped." in stdout


def test_demo_validation_table_matches_pooled_where_exact(demo):
    """Seed 000's table: noise-free estimators (Brier, Spiegelhalter, intercept, slope) equal the
    pooled values; the noisy ROC-GLM AUC stays near the pooled one and carries its CI."""
    stdout, data = demo
    v, ref = data["validation"], data["validation_pooled"]
    assert abs(v["brier"]["brier"] - ref["brier"]) < 1e-12
    assert abs(v["brier"]["spiegelhalter_z"] - ref["spiegelhalter_z"]) < 1e-9
    assert abs(v["logistic_calibration"]["slope"] - ref["calibration_slope"]) < 1e-6
    roc = v["roc_glm"]
    # noisy scores (epsilon 5): the error is of the order of the AUC's standard error at n = 250
    assert abs(roc["auc"] - ref["roc_glm_auc"]) < 3 * roc["variance"] ** 0.5
    assert roc["ci"][0] < roc["auc"] < roc["ci"][1]
    assert max(data["validation_transfer"]["round_trips"].values()) <= 40
    assert "H-L C statistic" in stdout and "ROC-GLM AUC" in stdout


def test_demo_secure_glm_equals_r(demo, gbsg2_pooled):
    """The demo's GLM by secure sums (five site processes) equals R's glm on the pooled records."""
    from test_glm import r_glm

    _, data = demo
    secure = data["secure_glm"]
    ref = r_glm(gbsg2_pooled[["y", "age", "tgrade", "horTh"]], secure["formula"], "binomial", "logit")
    assert list(secure["coefficients"].values()) == pytest.approx(list(ref["coef"]), rel=1e-7, abs=1e-9)
    assert secure["per_site_n"] == {} and len(secure["sites"]) == 5
