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
    return result.stdout, json.loads(out.read_text()), out.with_suffix(".html").read_text()


def test_demo_runs_end_to_end(demo, gbsg2_pooled):
    stdout, data, _ = demo
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
    """The default validation of the demo (pooled releases, histogram AUC), against pooled R: every
    calibration statistic to 1e-8, the curve and H with nothing merged, H-L C, ECE and MCE over R's
    deciles, those beside the curve's edges moved onto them or merged (and said), and the exact pooled AUC inside
    the noise-aware interval."""
    from rref import R_HOSLEM, R_PROC, r_eval, r_hl_on_edges, r_reference

    stdout, data, _ = demo
    v, ref = data["validation"], data["validation_pooled"]
    y, p = gbsg2_pooled.y.to_numpy(), gbsg2_pooled.score.to_numpy()
    assert v["mode"] == "pooled"
    hl_c = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    hl_h = r_reference("hl_h", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    got_c, got_h = v["hl_c"], v["hl_h"]
    # H-L C's groups are R's deciles, those beside the calibration curve's edges k/10 (released first) moved onto
    # them (records below p < k/10) or merged with the next (stated): C, ECE and MCE equal R over the groups
    # released, each group edge found as the decile or the curve's edge with as many records below
    assert hl_c[1] == 8 and got_c["df"] == len(got_c["group_sizes"]) - 2
    r_below = list(np.cumsum(hl_c[3:]))
    deciles = r_eval("unique(quantile(p, 0:10/10))", p=p)
    curve_below = {int(np.sum(p < k / 10)): k / 10 for k in range(1, 10)}
    edges, closed = [deciles[0]], []
    for b in np.cumsum(got_c["group_sizes"])[:-1]:
        assert b in r_below or b in curve_below
        edges.append(deciles[1 + r_below.index(b)] if b in r_below else curve_below[b])
        closed.append(b in r_below)
    edges.append(deciles[-1])
    assert not np.isin(p, [e for e, c in zip(edges[1:-1], closed) if not c]).any()  # none on a moved edge here
    assert got_c["statistic"] == pytest.approx(r_hl_on_edges(y, p, edges, [*closed, True]), rel=1e-8)
    assert got_c["complete"] == (len(edges) == 11 and all(closed)) and (
        got_c["complete"] or "disclosure.cut_history" in got_c["cells"])
    ece, mce = r_eval("g <- cut(p, e, include.lowest = TRUE); d <- abs(tapply(y, g, mean) - tapply(p, g, mean)); "
                      "n <- tapply(p, g, length); k <- !is.na(n); c(sum((n * d)[k]) / length(p), max(d[k]))",
                      y=y, p=p, e=np.asarray(edges))
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
    # where the sites merged the placement cells, the ROC-GLM is fitted on the histograms' leaves like the AUC: its
    # interval as wide as the empirical AUC's (fitted through the merged cells it was 0.05-1.0 in 9 runs of 9)
    assert d["roc_glm_ci_upper"] - d["roc_glm_ci_lower"] < 1.2 * (d["ci_upper"] - d["ci_lower"])
    # a guard against a protocol that loops: the validation's searches, fits and per-site estimates
    # (measured 105 with the smooth calibration and the five sites' meta-analysis, 60 before them)
    assert max(data["validation_transfer"]["round_trips"].values()) <= 130
    assert "smooth calibration (rcs of logit(p), 4 site-derived knots): ICI" in stdout
    assert data["validation"]["heterogeneity"]["auc"]["k"] == 5 and "heterogeneity across sites (random" in stdout
    assert "H-L C statistic" in stdout and "ROC-GLM AUC" in stdout and "difference" in stdout


def test_demo_secure_glm_equals_r(demo, gbsg2_pooled):
    """The demo's GLM as a pooled protocol (five site processes) equals R's glm on the pooled records."""
    from test_glm import r_glm

    _, data, _ = demo
    secure = data["secure_glm"]
    ref = r_glm(gbsg2_pooled[["y", "age", "tgrade", "horTh"]], secure["formula"], "binomial", "logit")
    assert list(secure["coefficients"].values()) == pytest.approx(list(ref["coef"]), rel=1e-7, abs=1e-9)
    assert secure["pooled"] and len(secure["sites"]) == 5


GBSG2_FRAME = ("d <- data.frame(y = y, horTh = factor(horTh, levels = c('no', 'yes')), age = age, "
               "menostat = factor(menostat, levels = c('Pre', 'Post')), tsize = tsize, "
               "tgrade = factor(tgrade, levels = c('I', 'II', 'III')), pnodes = pnodes, progrec = progrec, "
               "estrec = estrec); ")  # factor levels in the data dictionary's order, as the sites code them
COLUMNS = ("y", "horTh", "age", "menostat", "tsize", "tgrade", "pnodes", "progrec", "estrec")


def gbsg2_columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {c: frame[c].to_numpy() for c in COLUMNS}


def test_demo_runs_seed_000s_workflow(demo, gbsg2_pooled):
    """The demo fits the logistic model on the training site (R's glm on the training split), applies
    the approved model file at the five sites and validates it beside the fixture's score: the
    Brier score and calibration of the site-computed predictions equal R's on the predictions R
    computes from the same file on the pooled records, the paired Brier difference equals R's
    t.test, and the HTML report holds the two-model comparison."""
    from dsfed_core.models import parse_glm
    from rref import r_eval

    stdout, data, _ = demo
    fit = data["logistic_fit"]
    train = pd.read_csv(ROOT / "opal_fixtures" / "training" / "GBSG2" / "train.csv").dropna(subset=["y"])
    r_coef = r_eval(GBSG2_FRAME + f"coef(glm({fit['formula']}, family = binomial, data = d))", **gbsg2_columns(train))
    np.testing.assert_allclose(list(fit["coefficients"].values()), r_coef, rtol=1e-8)
    assert fit["max_difference_to_approved"] < 1e-8
    model = parse_glm((ROOT / "opal_fixtures" / "models" / "gbsg2-logit.json").read_bytes())
    assert model.sha256 == fit["sha256"]
    p = r_eval(GBSG2_FRAME + f"X <- model.matrix({model.formula}, d); "
               "as.numeric(plogis(X[, names] %*% setNames(beta, names)))", **gbsg2_columns(gbsg2_pooled),
               beta=np.array(list(model.coefficients.values())), names=np.array(list(model.coefficients)))
    y = gbsg2_pooled.y.to_numpy(dtype=float)
    logistic = data["models"]["logistic (ds_glm)"]
    assert logistic["brier"]["brier"] == pytest.approx(np.mean((y - p) ** 2), rel=1e-10)
    intercept, slope = r_eval("coef(glm(y ~ qlogis(p), family = binomial))", y=y, p=p)
    assert (logistic["logistic"]["intercept"], logistic["logistic"]["slope"]) == pytest.approx((intercept, slope),
                                                                                             rel=1e-7)
    # the ONNX model's predictions by onnxruntime itself on the pooled records (float32 inside)
    import onnxruntime

    graph = onnxruntime.InferenceSession(str(ROOT / "opal_fixtures" / "models" / "gbsg2-gbm.onnx"),
                                         providers=["CPUExecutionProvider"])
    feed = {i.name: (gbsg2_pooled[[i.name]].astype(str).to_numpy(dtype=object) if i.type == "tensor(string)"
                     else gbsg2_pooled[[i.name]].to_numpy(dtype=np.float32)) for i in graph.get_inputs()}
    gbm = graph.run(["probabilities"], feed)[0][:, 1].astype(float)
    assert data["models"]["gradient boosting (ONNX)"]["brier"]["brier"] == pytest.approx(np.mean((y - gbm) ** 2),
                                                                                         rel=1e-6)
    comparison = data["model_comparison"]
    lo, hi = r_eval("t.test((y - a)^2, (y - b)^2, paired = TRUE)$conf.int", y=y, a=p, b=gbm)
    assert (comparison["brier_ci_lower"], comparison["brier_ci_upper"]) == pytest.approx((lo, hi), rel=1e-5)
    auc_gap = r_eval("pROC::auc(y, a, direction = '<', quiet = TRUE) - pROC::auc(y, b, direction = '<', quiet = TRUE)",
                     y=y, a=p, b=gbm)[0]
    assert comparison["ci_lower"] < auc_gap < comparison["ci_upper"]
    assert "paired comparison" in stdout
    html = demo[2]
    for section in ("comparison", "model1-discrimination", "model2-calibration"):
        assert f'<section id="{section}">' in html
    assert 'data-plot="comparison"' in html and "logistic (ds_glm) vs gradient boosting (ONNX)" in html
    # the session's budget figures once, not once per model
    assert html.count("Your privacy budget at each site") == 1 and '<section id="budget">' in html
