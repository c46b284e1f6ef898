"""Paired comparison of two models on the same patients, against R.

References, on the pooled data: pROC's ``roc.test(method = "delong", paired = TRUE)`` (AUCs,
z, p-value and the CI of the difference), R's ``t.test(paired = TRUE)`` on the squared errors
(the Brier difference, its CI and p-value), and R's ``glm(y ~ qlogis(p), binomial)`` (each
model's calibration intercept and slope).

Exactness condition (noise off), as in tests/test_curves.py: both scores lie on the 16 leaf
centres of a 4-level binary histogram, so the histogram CDFs are the pooled empirical ones. The
second model's scores are the first's grid cells relabelled by a fixed permutation that swaps
neighbouring cells: correlated with the first, but a different ranking, and every (site, class,
cell) count stays 0 or at least 5.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.comparison import ModelComparison, ds_compare_models
from dsfed_client.calls import Call
from conftest import audit_records, inprocess_builder
from rref import r_reference
from sitekit import make_sites
from test_curves import GRID, NO_NOISE, grid_frames

R_PAIRED = """
paired_ref <- function(y, a, b) {
  ra <- pROC::roc(y, a, levels = c(0, 1), direction = "<", quiet = TRUE)
  rb <- pROC::roc(y, b, levels = c(0, 1), direction = "<", quiet = TRUE)
  t <- pROC::roc.test(ra, rb, method = "delong", paired = TRUE)
  bt <- t.test((y - a)^2, (y - b)^2, paired = TRUE)
  ca <- coef(glm(y ~ qlogis(a), family = binomial))
  cb <- coef(glm(y ~ qlogis(b), family = binomial))
  c(t$estimate, t$statistic, t$p.value, t$conf.int, mean((y - a)^2), mean((y - b)^2), bt$conf.int, bt$p.value,
    ca, cb)
}
"""
SWAP = np.array([1, 0, 3, 2, 4, 6, 5, 8, 7, 9, 11, 10, 12, 14, 13, 15])  # neighbouring cells swapped


def two_model_frames() -> dict[str, pd.DataFrame]:
    frames = {}
    for site, frame in grid_frames().items():
        cell = np.floor(frame["score"].to_numpy() * GRID).astype(int)
        frames[site] = frame.assign(score_b=(SWAP[cell] + 0.5) / GRID)
    return frames


@pytest.fixture(scope="module")
def paired_sites(tmp_path_factory):
    frames = two_model_frames()
    provisioned, services = make_sites(tmp_path_factory.mktemp("paired"), frames, rules=NO_NOISE)
    session = inprocess_builder(provisioned, services).login()
    session.assign_table("D", "P.t")
    pooled = pd.concat(frames.values(), ignore_index=True)
    yield session, provisioned, pooled
    session.close()


@pytest.mark.parametrize("secure", [False, True])
def test_paired_comparison_equals_pROC_roc_test(paired_sites, secure):
    session, _, pooled = paired_sites
    y, a, b = (pooled[c].to_numpy(dtype=float) for c in ("y", "score", "score_b"))
    ref = r_reference("paired_ref", R_PAIRED, y=y, a=a, b=b)
    auc_a, auc_b, z, pvalue, lo, hi, brier_a, brier_b, blo, bhi, bp, ia, sa, ib, sb = ref
    result = ds_compare_models(session, "D$y", "D$score", "D$score_b", labels=("A", "B"), levels=4, secure=secure)
    assert isinstance(result, ModelComparison) and result.noise_off and result.noise_variance == 0
    assert (result.auc_a, result.auc_b) == pytest.approx((auc_a, auc_b), rel=1e-12)
    assert result.auc_a != pytest.approx(result.auc_b, abs=1e-3)  # the two models do differ
    assert result.z == pytest.approx(z, rel=1e-9)
    assert result.pvalue == pytest.approx(pvalue, rel=1e-9)
    assert result.ci == pytest.approx((lo, hi), rel=1e-9)
    assert (result.brier_a, result.brier_b) == pytest.approx((brier_a, brier_b), rel=1e-12)
    assert result.brier_ci == pytest.approx((blo, bhi), rel=1e-9)
    assert result.brier_pvalue == pytest.approx(bp, rel=1e-8)
    assert (result.calibration["A"].intercept, result.calibration["A"].slope) == pytest.approx((ia, sa), rel=1e-8)
    assert (result.calibration["B"].intercept, result.calibration["B"].slope) == pytest.approx((ib, sb), rel=1e-8)
    assert (result.n, result.n_positive) == (y.size, int(y.sum()))
    frame = result.to_frame()
    assert list(frame.index) == ["A", "B", "difference (A - B)"]
    assert frame.loc["difference (A - B)", "auc"] == pytest.approx(auc_a - auc_b, rel=1e-12)
    assert "AUC difference" in result.summary()


def test_paired_comparison_is_audited_and_plots(paired_sites):
    session, provisioned, _ = paired_sites
    result = ds_compare_models(session, "D$y", "D$score", "D$score_b", levels=4)
    axes = result.plot()
    assert len(axes[0].get_lines()) == 3 and "AUC difference" in axes[0].get_title()  # diagonal + two ROCs
    for site in provisioned.values():
        functions = {r["function"] for r in audit_records(site) if r.get("outcome") == "ok"}
        assert {"pairedPlacementDS", "pairedBrierDS"} <= functions


def test_paired_comparison_refuses_records_missing_a_score(tmp_path):
    """A record scored by one model only would enter one model's reference but not the pairs: the
    comparison says so instead of comparing different records."""
    frames = two_model_frames()
    for frame in frames.values():  # every record in the top cell (positives only) loses the second score
        frame.loc[frame["score"] == 15.5 / GRID, "score_b"] = np.nan
    rules = tmp_path / "rules.toml"  # the no-noise rules with dsBase's dataFrameDS, which the error suggests
    rules.write_text(NO_NOISE.read_text().replace('    "pairedBrierDS",\n',
                                                  '    "pairedBrierDS",\n    "dataFrameDS",\n'))
    provisioned, services = make_sites(tmp_path, frames, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        missing = sum(int(f["score_b"].isna().sum()) for f in frames.values())
        assert missing > 0
        with pytest.raises(ValueError, match="same records for both") as refused:
            ds_compare_models(session, "D$y", "D$score", "D$score_b", levels=4)
        assert 'dataFrameDS("D$y,D$score,D$score_b", clnames = "y,a,b", completeCases = TRUE)' in str(refused.value)
        # what the error says to do: compare on the complete records, as R does on the complete pairs
        session.assign("T", Call("dataFrameDS", "D$y,D$score,D$score_b", clnames="y,a,b", completeCases=True))
        result = ds_compare_models(session, "T$y", "T$a", "T$b", levels=4)
    pooled = pd.concat(frames.values(), ignore_index=True).dropna()
    y, a, b = (pooled[c].to_numpy(dtype=float) for c in ("y", "score", "score_b"))
    ref = r_reference("paired_ref", R_PAIRED, y=y, a=a, b=b)
    assert result.n == y.size and (result.auc_a, result.auc_b, result.z) == pytest.approx(tuple(ref[:3]), rel=1e-9)


def test_two_models_in_one_report(paired_sites, tmp_path):
    """validate() of each model and their comparison side by side in one page: each number on the
    page is the result's own, and every section and plot is there."""
    from dsfed_client.analyses.suite import validate
    from dsfed_client.report import collect_study_info, write_models_report

    session, _, pooled = paired_sites
    reports = {label: validate(session, "D$y", score, secure=True) for label, score in
               (("model A", "D$score"), ("model B", "D$score_b"))}
    comparison = ds_compare_models(session, "D$y", "D$score", "D$score_b", labels=("model A", "model B"),
                                   histograms=tuple(r.discrimination.result.histograms for r in reports.values()))
    y, a, b = (pooled[c].to_numpy(dtype=float) for c in ("y", "score", "score_b"))
    ref = r_reference("paired_ref", R_PAIRED, y=y, a=a, b=b)
    assert (comparison.brier_a, comparison.brier_b) == pytest.approx((ref[6], ref[7]), rel=1e-12)
    study = collect_study_info(session, "D$y", table="P.t", score="D$score")
    text = write_models_report(reports, tmp_path / "models.html", comparison, **study).read_text()
    for section in ("setup", "models", "comparison", "model1-discrimination", "model2-calibration", "software"):
        assert f'<section id="{section}">' in text
    assert 'data-plot="comparison"' in text and text.count('data-plot="roc"') == 2
    assert f"{comparison.brier_difference:.4f}"[:6] in text and "DeLong&#x27;s paired test" in text
