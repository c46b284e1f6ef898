"""Results objects: repr, summary(), to_frame(), to_dict() and plot() on real sessions (noise off,
so every number is the pooled one), and the progress display (silent unless stderr is a TTY).

References: R's glm (through rpy2) for the GLM table; the pooled numpy computation of the
empirical ROC from the raw scores; the results' own attributes for the frames and plots."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from dsfed_client.analyses.glm import ds_glm  # noqa: E402
from dsfed_client.analyses.suite import validate  # noqa: E402
from dsfed_client.plots import plot_pr_curve  # noqa: E402
from conftest import FIXTURES, GBSG2_SITES, ROOT, inprocess_builder  # noqa: E402
from rref import r_eval  # noqa: E402
from sitekit import make_sites  # noqa: E402

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    return {s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score", "age"]] for s in GBSG2_SITES}


@pytest.fixture(scope="module")
def session(frames, tmp_path_factory):
    provisioned, services = make_sites(tmp_path_factory.mktemp("objects"), frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        yield s


@pytest.fixture(scope="module")
def report(session):
    """The default: pooled releases (every site offers them), AUC and ROC-GLM from histograms."""
    return validate(session, "D$y", "D$score")


@pytest.fixture(scope="module")
def paper(session):
    """Schalk et al.'s (2024) method, checked per site (GBSG2's small sites merge some calibration bins)."""
    return validate(session, "D$y", "D$score", method="paper", secure=False)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _by_gid(ax: Axes, gid: str) -> list:
    return [a for a in ax.get_children() if a.get_gid() == gid]


def _bar_heights(ax: Axes, gid: str) -> list[float]:
    return [p.get_height() for p in ax.patches if p.get_gid() == gid]


def test_glm_summary_frame_plot_match_R(session, frames):
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = r_eval("f <- glm(y ~ score + age, family = binomial); c(coef(f), sqrt(diag(vcov(f))), deviance(f))",
                 y=pooled.y.to_numpy(), score=pooled.score.to_numpy(), age=pooled.age.to_numpy())
    fit = ds_glm(session, "y ~ score + age", "D")
    np.testing.assert_allclose(fit.params, ref[:3], rtol=1e-8)
    text = fit.summary()
    for value in (*ref[:3], *ref[3:6]):  # R's coefficients and standard errors, as the table prints them
        assert f"{value:.5g}"[:-1] in text
    assert "Distributed Generalized Linear Model Results" in text and f"{len(pooled)}" in text
    assert "(Intercept)" in text and "P>|z|" in text
    frame = fit.to_frame()
    np.testing.assert_array_equal(frame["coef"].to_numpy(), fit.params)
    np.testing.assert_array_equal(frame["std err"].to_numpy(), fit.bse)
    np.testing.assert_array_equal(frame[["ci_lower", "ci_upper"]].to_numpy(), fit.conf_int())
    assert frame.attrs["alpha"] == 0.05
    ci90 = fit.to_frame(alpha=0.1)[["ci_lower", "ci_upper"]].to_numpy()  # R's confint.default(f, level = 0.9)
    np.testing.assert_allclose(ci90, np.column_stack([ref[:3] - 1.6448536269514722 * ref[3:6],
                                                      ref[:3] + 1.6448536269514722 * ref[3:6]]), rtol=1e-7)
    assert "y ~ score + age" in repr(fit)
    data = fit.to_dict()
    json.dumps(data, allow_nan=False)
    assert list(data["coefficients"].values()) == fit.params.tolist()
    assert [row["term"] for row in data["table"]] == list(fit.names)
    ax = fit.plot()
    assert isinstance(ax, Axes)
    (points,) = _by_gid(ax, "coefficients")
    np.testing.assert_allclose(points.get_xdata(), fit.params)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(fit.names)


def _pooled_roc(y: np.ndarray, p: np.ndarray, n_thresholds: int) -> np.ndarray:
    """ROC at t_j from the raw pooled scores: share of positives whose placement value is <= t_j."""
    neg, pos = p[y == 0], p[y == 1]
    pv = np.array([np.mean(neg > s) for s in pos])
    t = np.arange(1, n_thresholds + 1) / (n_thresholds + 1)
    return np.array([np.mean(pv <= tj) for tj in t])


def test_roc_glm_presentation(paper, frames):
    r = paper.discrimination.result
    pooled = pd.concat(frames.values(), ignore_index=True)
    fpr, tpr = r.empirical_curve()
    assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1
    np.testing.assert_allclose(tpr[1:-1], _pooled_roc(pooled.y.to_numpy(), pooled.score.to_numpy(), r.n_thresholds))
    row = r.to_frame().iloc[0]
    assert row["auc"] == r.auc and (row["ci_lower"], row["ci_upper"]) == r.ci and row["alpha"] == r.alpha
    assert row["a"] == r.a and row["b"] == r.b and row["auc_integral"] == r.auc_integral
    data = r.to_dict()
    assert (data["ci_lower"], data["ci_upper"]) == r.ci and data["empirical"]["auc"] == r.empirical.auc
    assert (data["empirical"]["ci_delong_lower"], data["empirical"]["ci_delong_upper"]) == r.empirical.ci_delong
    text = r.summary()
    assert f"{r.auc:.6g}" in text and "{:.6g} - {:.6g}".format(*r.ci) in text and "off (exact)" in text
    assert repr(r).startswith(f"ROCGLM(auc={r.auc:.4f}")
    json.dumps(r.to_dict(), allow_nan=False)

    overlay = (np.array([0.0, 0.2, 0.5, 1.0]), np.array([0.0, 0.5, 0.8, 1.0]))
    ax = r.plot(fpr=overlay[0], tpr=overlay[1])
    assert isinstance(ax, Axes)
    (fit,) = _by_gid(ax, "roc-fit")
    np.testing.assert_allclose(fit.get_ydata(), r.curve(fit.get_xdata()))
    (emp,) = _by_gid(ax, "roc-empirical")
    np.testing.assert_array_equal(emp.get_ydata(), tpr)
    (extra,) = _by_gid(ax, "roc-overlay")
    np.testing.assert_array_equal(extra.get_xdata(), overlay[0])
    np.testing.assert_array_equal(extra.get_ydata(), overlay[1])
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("95% CI {:.3f}-{:.3f}".format(*r.ci) in t for t in legend)
    with pytest.raises(ValueError, match="differ in length"):
        r.plot(fpr=[0, 1], tpr=[0, 0.5, 1])


def test_empirical_auc_presentation(paper):
    e = paper.discrimination.result.empirical
    row = e.to_frame().iloc[0]
    assert row["auc"] == e.auc and row["variance"] == e.variance and row["alpha"] == e.alpha
    assert (row["ci_delong_lower"], row["ci_delong_upper"]) == e.ci_delong
    assert (row["ci_logit_lower"], row["ci_logit_upper"]) == e.ci_logit
    assert row["n_positive"] == e.n_positive
    assert "{:.6g} - {:.6g}".format(*e.ci_delong) in e.summary()
    assert f"n_positive={e.n_positive}" in repr(e)
    ax = e.plot()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("CI {:.3f}-{:.3f}".format(*e.ci_delong) in t for t in legend)
    assert _by_gid(ax, "roc-fit")


def test_pr_curve_helper():
    precision, recall = np.array([1.0, 0.9, 0.8, 0.7]), np.array([0.0, 0.4, 0.7, 1.0])
    ax = plot_pr_curve(precision, recall, prevalence=0.7)
    (line,) = _by_gid(ax, "pr-curve")
    np.testing.assert_array_equal(line.get_xdata(), recall)
    np.testing.assert_array_equal(line.get_ydata(), precision)
    with pytest.raises(ValueError, match="differ in length"):
        plot_pr_curve([1.0, 0.5], [0.0])


def test_brier_presentation(report):
    b = report.brier
    frame = b.to_frame()
    for key, value in b.to_dict().items():
        assert frame.iloc[0][key] == value
    assert f"{b.brier:.6g}" in b.summary() and f"{b.spiegelhalter_z:.6g}" in b.summary()
    assert f"brier={b.brier:.4f}" in repr(b)
    ax = b.plot()
    assert _bar_heights(ax, "brier-bars") == [b.mean_outcome, b.mean_prediction]


def test_calibration_curve_presentation(paper, report):
    c = paper.curve  # per site: GBSG2's small sites merge some bins at q = 5, and the result says so
    frame = c.to_frame()
    np.testing.assert_array_equal(frame["n"], c.n)
    assert c.bins.was_coarsened and not c.bins.pooled and c.n.sum() == 250
    assert "COARSENED" in c.summary() and "checked at each site" in c.summary()
    assert "coarsened=True" in repr(c)
    data = c.to_dict()
    json.dumps(data, allow_nan=False)
    assert set(data) == {"table", "n_bins", "n_total", "pooled", "coarsened", "requested_edges", "not_released",
                         "strategy", "exact_grouping"}
    assert [row["n"] for row in data["table"]] == c.n.tolist() and data["n_bins"] == len(c.n)
    assert data["requested_edges"] == (np.arange(11) / 10).tolist() and data["not_released"]
    assert not report.curve.bins.was_coarsened and report.curve.bins.pooled  # pooled: as requested
    ax = c.plot()
    (pooled,) = _by_gid(ax, "calibration-pooled")
    has = c.n > 0
    np.testing.assert_allclose(pooled.get_offsets(), np.column_stack([c.mean_prediction[has], c.mean_outcome[has]]))
    assert len(_by_gid(ax, "calibration-diagonal")) == 1
    assert {f"calibration-site-{s}" for s in c.per_site} <= {a.get_gid() for a in ax.get_lines()}
    hist = [a for a in ax.figure.axes if a is not ax][0]
    np.testing.assert_array_equal(_bar_heights(hist, "calibration-histogram"), c.n)


def test_histogram_discrimination_presentation(report, frames):
    d = report.discrimination
    pooled = pd.concat(frames.values(), ignore_index=True)
    assert d.method == "histogram" and d.noise_off and d.noise_variance == 0.0
    assert (d.n_positive, d.n_negative) == (int(pooled.y.sum()), int((1 - pooled.y).sum()))
    assert d.ci == d.result.ci_logit and d.roc_glm_ci == d.result.roc_glm.ci
    data = d.to_dict()
    json.dumps(data, allow_nan=False)
    assert data["auc"] == d.auc and data["roc_glm_auc"] == d.roc_glm_auc and data["method"] == "histogram"
    assert (data["ci_lower"], data["ci_upper"]) == d.ci
    assert (data["roc_glm_ci_lower"], data["roc_glm_ci_upper"]) == d.roc_glm_ci
    ax = d.plot()
    (fit,) = _by_gid(ax, "roc-fit")
    np.testing.assert_allclose(fit.get_ydata(), d.result.roc_glm.curve(fit.get_xdata()))


@pytest.mark.parametrize("which", ["hl_c", "hl_h"])
def test_hosmer_lemeshow_presentation(report, which):
    hl = getattr(report, which)
    statistic, pvalue = hl
    assert (statistic, pvalue) == (hl.statistic, hl.pvalue)
    pd.testing.assert_frame_equal(hl.to_frame(), hl.table)
    assert f"{hl.statistic:.6g}" in hl.summary() and f"df={hl.df}" in repr(hl)
    json.dumps(hl.to_dict(), allow_nan=False)
    ax = hl.plot()
    np.testing.assert_allclose(_bar_heights(ax, "hl-observed"), hl.table.observed_1)
    np.testing.assert_allclose(_bar_heights(ax, "hl-expected"), hl.table.expected_1)
    assert len(ax.get_xticklabels()) == len(hl.table)


def test_calibration_errors_presentation(report):
    e = report.errors
    frame = e.to_frame()
    assert frame["abs_gap"].max() == pytest.approx(e.mce, rel=1e-12)
    assert (frame["n"] / frame["n"].sum() * frame["abs_gap"]).sum() == pytest.approx(e.ece, rel=1e-12)
    assert f"{e.ece:.6g}" in e.summary() and f"ece={e.ece:.4f}" in repr(e)
    ax = e.plot()
    np.testing.assert_allclose(_bar_heights(ax, "ece-gaps"), frame["abs_gap"])


def test_logistic_calibration_presentation(report):
    lg = report.logistic
    frame = lg.to_frame()
    assert frame.loc["intercept", "coef"] == lg.intercept
    assert frame.loc["slope", "coef"] == lg.slope
    assert frame.loc["citl", "coef"] == lg.citl
    data = lg.to_dict()
    np.testing.assert_allclose(frame.loc["slope", ["ci_lower", "ci_upper"]].to_numpy(dtype=float),
                               [data["slope_ci_lower"], data["slope_ci_upper"]])
    np.testing.assert_allclose(frame.loc["citl", ["ci_lower", "ci_upper"]].to_numpy(dtype=float), lg.citl_ci)
    assert f"{lg.slope:.6g}" in lg.summary() and f"slope={lg.slope:.4f}" in repr(lg)
    ax = lg.plot()
    (line,) = _by_gid(ax, "logistic-calibration")
    x = line.get_xdata()
    np.testing.assert_allclose(line.get_ydata(), 1 / (1 + np.exp(-(lg.intercept + lg.slope * np.log(x / (1 - x))))))


def test_validation_report_presentation(report, paper):
    data = report.to_dict()
    assert set(data) == {"mode", "mode_note", "discrimination", "brier", "curve", "hl_c", "hl_h", "errors",
                         "logistic", "threshold_metrics", "decision_curve", "heterogeneity", "smooth_note", "failed",
                         "n", "alpha", "table"}
    assert data["failed"] == {}
    assert not report.heterogeneity.available and paper.heterogeneity.auc.k == len(paper.heterogeneity.to_frame())
    assert data["mode"] == "pooled" and paper.mode == "per-site" and paper.mode_note == "asked for per-site checking"
    json.dumps(data, allow_nan=False)
    d = report.discrimination
    frame = report.to_frame()
    assert frame.loc["empirical AUC", "estimate"] == d.auc
    assert (frame.loc["empirical AUC", "ci_lower"], frame.loc["empirical AUC", "ci_upper"]) == d.ci
    assert (frame.loc["ROC-GLM AUC", "estimate"], frame.loc["ROC-GLM AUC", "ci_lower"]) == (
        d.roc_glm_auc, d.roc_glm_ci[0])
    assert tuple(frame.loc["calibration slope", ["ci_lower", "ci_upper"]]) == report.logistic.slope_ci
    assert frame.loc["Brier score", "estimate"] == report.brier.brier
    assert frame.loc["H-L C", "pvalue"] == report.hl_c.pvalue
    assert frame.loc["calibration slope", "estimate"] == report.logistic.slope
    text = report.summary()
    assert f"{d.auc:.4f}" in text and f"{report.brier.brier:.4f}" in text
    assert "checked on the cells pooled over the sites" in text and "PER SITE" in paper.summary()
    assert f"auc={d.auc:.4f}" in repr(report)
    axes = report.plot()
    assert len(axes) == 3 and all(isinstance(a, Axes) for a in axes)
    assert _by_gid(axes[0], "roc-fit") and _by_gid(axes[1], "calibration-pooled")


def test_analyses_print_nothing_when_stderr_is_not_a_tty(session, capfd):
    ds_glm(session, "y ~ score", "D")
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_progress_shows_on_a_terminal(tmp_path):
    """A child process whose stderr is a pseudo-terminal sees rich's progress line for the GLM;
    the same run with stderr to a pipe prints nothing there."""
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(f"""
        import sys, pandas as pd
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from pathlib import Path
        from conftest import FIXTURES, GBSG2_SITES, inprocess_builder
        from sitekit import make_sites
        from dsfed_client.analyses.glm import ds_glm
        frames = {{s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score"]] for s in GBSG2_SITES}}
        prov, serv = make_sites(Path({str(tmp_path)!r}) / sys.argv[1], frames)
        with inprocess_builder(prov, serv).login() as s:
            s.assign_table("D", "P.t")
            print("iterations", ds_glm(s, "y ~ score", "D").iterations)
    """))
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, str(script), "tty"], stdout=subprocess.PIPE, stderr=secondary,
                            env=env, cwd=ROOT)
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(primary)
    assert proc.returncode == 0 and b"iterations" in out
    assert b"Fisher scoring" in shown
    piped = subprocess.run([sys.executable, str(script), "pipe"], capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert piped.returncode == 0 and b"iterations" in piped.stdout
    assert b"Fisher scoring" not in piped.stderr
