"""Metrics at thresholds, Youden's threshold, decision curves and quantile-binned calibration,
against pooled references: pROC's ``coords``, R's ``prop.test`` and
``binom.test``, scikit-learn's ``confusion_matrix`` and ``calibration_curve``, the net-benefit
formula on the pooled data. Real sites over loopback (the GBSG2 fixtures, both transports; a
larger synthetic federation as server processes) and an attack on the thresholds' cells."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import confusion_matrix

from conftest import http_builder, inprocess_builder
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_client.analyses.decision import DEFAULT_GRID, ds_decision_curve
from dsfed_client.analyses.thresholds import ds_threshold_metrics, ds_youden_threshold
from dsfed_server.launch import LocalSites
from rref import R_BINOM_CI, R_COORDS, r_eval, r_reference
from sitekit import NO_NOISE, make_sites, rules_variant

COLUMNS = ["tp", "fp", "tn", "fn", "sensitivity", "specificity", "ppv", "npv", "accuracy"]
MODES = pytest.mark.parametrize("secure", [True, False], ids=["pooled", "per-site"])


def coords(y: np.ndarray, p: np.ndarray, thresholds: np.ndarray) -> pd.DataFrame:
    """pROC::coords on the pooled data, one row per threshold."""
    values = r_reference("coords_ref", R_COORDS, y=y, p=p, t=np.asarray(thresholds, dtype=float))
    return pd.DataFrame(values.reshape(-1, len(COLUMNS)), columns=COLUMNS, index=thresholds)


def binom_ci(k: np.ndarray, n: np.ndarray, alpha: float, exact: bool) -> np.ndarray:
    """R's interval per proportion (2 columns; NaN where n is 0)."""
    out = r_reference("binom_ci_ref", R_BINOM_CI, k=k, n=n, alpha=np.array([alpha]),
                      exact=np.array([1.0 if exact else 0.0]))
    return np.array([np.nan if v is None else v for v in out], dtype=float).reshape(-1, 2)


@pytest.fixture(scope="module")
def gbsg2(gbsg2_pooled):
    return gbsg2_pooled["y"].to_numpy(), gbsg2_pooled["score"].to_numpy()


# --- metrics at thresholds -------------------------------------------------------------------


@MODES
def test_threshold_metrics_equal_pROC_coords(gbsg2_session, gbsg2, secure):
    """Every released threshold's confusion counts and rates are pROC's on the pooled data, a
    threshold tied with scores included (pROC calls a score equal to the threshold positive)."""
    y, p = gbsg2
    values, counts = np.unique(p, return_counts=True)
    tied = float(values[(counts >= 2) & (values > 0.6) & (values < 0.99)][0])  # several records score exactly this
    asked = np.array([0.5, tied, 0.75, 0.85, 0.9])
    m = ds_threshold_metrics(gbsg2_session, "D$y", "D$score", asked, secure=secure)
    assert m.n_positive == y.sum() and m.n_negative == (1 - y).sum()
    ref = coords(y, p, m.thresholds)
    frame = m.to_frame()
    # pROC gives its counts as sensitivity times cases (within an ulp of a whole number)
    np.testing.assert_allclose(frame[COLUMNS[:4]].to_numpy(), ref[COLUMNS[:4]].to_numpy(), rtol=1e-14)
    np.testing.assert_allclose(frame[COLUMNS[4:]].to_numpy(), ref[COLUMNS[4:]].to_numpy(), rtol=1e-12)
    tp, fp, fn = ref["tp"].to_numpy(), ref["fp"].to_numpy(), ref["fn"].to_numpy()
    np.testing.assert_allclose(frame["f1"], 2 * tp / (2 * tp + fp + fn), rtol=1e-12)  # F1 by its formula
    for t in m.thresholds:  # scikit-learn's layout and counts
        np.testing.assert_array_equal(m.confusion_matrix(t).to_numpy(), confusion_matrix(y, (p >= t).astype(int)))
    # what was not released is said, per site or pooled, and nothing else is missing
    said = {t for values in m.not_released.values() for t in values}
    assert set(m.withheld) == said and set(m.withheld) | set(m.thresholds) == set(asked)
    if secure:  # pooled cells of 250 records: every asked threshold leaves at least q on each side
        assert m.pooled and m.withheld == () and tied in m.thresholds
    else:
        assert m.n_thresholds >= 1
    with pytest.raises(ValueError, match="not released"):
        m.confusion_matrix(0.123)


@pytest.mark.parametrize("ci", ["wilson", "exact"])
def test_threshold_intervals_equal_R(gbsg2_session, gbsg2, ci):
    """Wilson intervals are R's prop.test(correct = FALSE), exact ones binom.test's (Clopper-Pearson),
    for every proportion at every threshold, at alpha 0.1."""
    m = ds_threshold_metrics(gbsg2_session, "D$y", "D$score", [0.45, 0.7, 0.95], alpha=0.1, ci=ci, secure=True)
    assert m.n_thresholds == 3
    frame = m.to_frame()
    tp, fp, tn, fn = (frame[c].to_numpy() for c in ("tp", "fp", "tn", "fn"))
    fractions = {"sensitivity": (tp, tp + fn), "specificity": (tn, tn + fp), "ppv": (tp, tp + fp),
                 "npv": (tn, tn + fn), "accuracy": (tp + tn, tp + tn + fp + fn)}
    for metric, (k, n) in fractions.items():
        ref = binom_ci(k, n, 0.1, exact=ci == "exact")
        got = frame[[f"{metric}_lower", f"{metric}_upper"]].to_numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12, err_msg=metric)


def test_youden_threshold_is_the_best_pooled_quantile_break(gbsg2_session, gbsg2):
    """Pooled: the candidates split the pooled scores as R's type-7 quantile breaks do (found by
    the sites; each a released cut with the same records on either side as R's break), and the
    threshold maximises sens + spec - 1 among them with the rule score > break (computed on the
    pooled data at R's breaks); pROC's search over every midpoint reaches at least that J."""
    y, p = gbsg2
    g = 20
    youden = ds_youden_threshold(gbsg2_session, "D$y", "D$score", n_groups=g, secure=True)
    breaks = r_eval("unique(quantile(p, probs = seq(0, 1, 1 / g), type = 7))", p=p, g=[g])[1:-1]
    candidates = youden.candidates.thresholds
    assert candidates.size == breaks.size and youden.exact_grouping
    np.testing.assert_array_equal([np.sum(p <= c) for c in candidates], [np.sum(p <= b) for b in breaks])
    j = np.array([np.mean(p[y == 1] > b) + np.mean(p[y == 0] <= b) - 1 for b in breaks])
    np.testing.assert_allclose(youden.candidates.sensitivity + youden.candidates.specificity - 1, j, rtol=1e-12)
    assert youden.threshold == candidates[int(np.argmax(j))]
    assert youden.youden_j == pytest.approx(j.max(), rel=1e-12)
    best = r_eval("r <- pROC::roc(y, p, levels = c(0, 1), direction = '<', quiet = TRUE); "
                  "max(pROC::coords(r, 'best', best.method = 'youden', ret = 'youden', transpose = FALSE)$youden)",
                  y=y, p=p)[0]
    assert youden.youden_j <= best - 1 + 1e-12


# --- decision curves and quantile bins on a larger federation ---------------------------------


def _frames() -> dict[str, pd.DataFrame]:
    """Five sites of 600 records: risks on a 0.001 grid (ties with the thresholds), outcomes drawn from them."""
    rng = np.random.default_rng(16)
    frames = {}
    for k in range(5):
        p = np.round(rng.uniform(0.001, 0.999, 600), 3)
        frames[f"s{k + 1}"] = pd.DataFrame({"y": (rng.uniform(size=p.size) < p).astype(int), "score": p})
    return frames


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """The five synthetic sites as server processes on loopback (no noise, no cut history)."""
    frames = _frames()
    tmp = tmp_path_factory.mktemp("thresholds")
    provisioned, _ = make_sites(tmp, frames, rules=NO_NOISE)
    with LocalSites(provisioned.values(), tmp / "run") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            pooled = pd.concat(frames.values(), ignore_index=True)
            yield session, pooled["y"].to_numpy(), pooled["score"].to_numpy()


@MODES
def test_net_benefit_equals_the_pooled_formula(federation, secure):
    """NB(t) = TP/n - FP/n t/(1-t) on the pooled data (risk >= t treated) at every threshold the
    sites released; pooled, that is every threshold of the default grid; treat-all and the
    standardized net benefit by their formulas."""
    session, y, p = federation
    curve = ds_decision_curve(session, "D$y", "D$score", secure=secure)
    n, prevalence = y.size, y.mean()
    t = curve.thresholds
    tp = np.array([np.sum((p >= v) & (y == 1)) for v in t])
    fp = np.array([np.sum((p >= v) & (y == 0)) for v in t])
    nb = tp / n - fp / n * t / (1 - t)
    frame = curve.to_frame()
    np.testing.assert_allclose(frame["net_benefit"], nb, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(frame["treat_all"], prevalence - (1 - prevalence) * t / (1 - t), rtol=1e-12)
    np.testing.assert_allclose(frame["standardized_net_benefit"], nb / prevalence, rtol=1e-12, atol=1e-15)
    assert (frame["treat_none"] == 0).all() and curve.prevalence == pytest.approx(prevalence, rel=1e-15)
    assert set(curve.withheld) | set(t) == set(DEFAULT_GRID)
    if secure:
        assert curve.n_thresholds == DEFAULT_GRID.size
    else:  # each site's share of a 0.01-wide cell is a handful of records: the sites dropped some
        assert 0 < curve.n_thresholds < DEFAULT_GRID.size and curve.withheld


def test_per_site_youden_reports_exact_metrics_at_its_threshold(federation):
    """Per site the candidates are the breaks every site released; at the chosen one the
    sensitivity and specificity are the pooled data's exactly (rule score > threshold)."""
    session, y, p = federation
    youden = ds_youden_threshold(session, "D$y", "D$score", n_groups=10, secure=False)
    t = youden.threshold
    assert youden.sensitivity == pytest.approx(np.mean(p[y == 1] > t), rel=1e-12)
    assert youden.specificity == pytest.approx(np.mean(p[y == 0] <= t), rel=1e-12)
    assert youden.to_frame()["youden_j"].max() == pytest.approx(youden.youden_j, rel=1e-12)


@MODES
def test_quantile_calibration_equals_sklearn(federation, secure):
    """strategy="quantile": scikit-learn's calibration_curve(strategy="quantile") on the pooled
    data where the sites found R's breaks and merged no bin (always, pooled); per site otherwise
    the bins' means are the pooled data's on the released edges."""
    session, y, p = federation
    curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10, strategy="quantile", secure=secure)
    filled = curve.n > 0
    if curve.exact_grouping and not curve.coarsened:
        prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="quantile")
        np.testing.assert_allclose(curve.mean_outcome[filled], prob_true, rtol=1e-12)
        np.testing.assert_allclose(curve.mean_prediction[filled], prob_pred, rtol=1e-12)
    else:
        assert not secure
    cell = np.searchsorted(curve.edges[1:-1], p, side="left")  # (a, b], the first closed
    np.testing.assert_array_equal(curve.n, np.bincount(cell, minlength=curve.n.size))
    np.testing.assert_allclose(curve.mean_outcome[filled], (np.bincount(cell, y) / np.bincount(cell))[filled],
                               rtol=1e-12)
    assert curve.strategy == "quantile" and curve.n.sum() == y.size


def test_quantile_calibration_on_gbsg2_equals_sklearn(gbsg2_session, gbsg2):
    y, p = gbsg2
    curve = ds_calibration_curve(gbsg2_session, "D$y", "D$score", n_bins=8, strategy="quantile", secure=True)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=8, strategy="quantile")
    filled = curve.n > 0
    np.testing.assert_allclose(curve.mean_outcome[filled], prob_true, rtol=1e-12)
    np.testing.assert_allclose(curve.mean_prediction[filled], prob_pred, rtol=1e-12)


# --- the attack ------------------------------------------------------------------------------------


def _attack_site(tmp_path, **rules):
    rng = np.random.default_rng(7)
    n = 200
    p = np.sort(rng.uniform(0.05, 0.95, n))  # distinct scores, known to the analyst (e.g. from a published model)
    y = (rng.uniform(size=n) < p).astype(int)
    frame = pd.DataFrame({"y": y, "score": p})
    tmp_path.mkdir(parents=True)
    path = rules_variant(tmp_path / "rules.toml", **rules) if rules else None
    provisioned, services = make_sites(tmp_path, {"a": frame}, rules=path)
    return provisioned, services, p, y


def _bracket_attack(provisioned, services, p: np.ndarray, targets: list[int], *, split: bool):
    """For each target, thresholds just below and just above its score (one call, or two calls when
    ``split``): the positives between them, where both were released, else None. Also every
    (threshold, records below) pair released along the way."""
    read, released = [], {}
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        for k in targets:
            pair = [(p[k - 1] + p[k]) / 2, (p[k] + p[k + 1]) / 2]
            results = ([ds_threshold_metrics(s, "D$y", "D$score", [t]) for t in pair] if split
                       else [ds_threshold_metrics(s, "D$y", "D$score", pair)])
            fn = {}
            for m in results:
                below = m.tn + m.fn
                fn.update(zip(m.thresholds.tolist(), m.fn.tolist()))
                released.update(zip(m.thresholds.tolist(), below.tolist()))
            read.append(fn[pair[1]] - fn[pair[0]] if all(t in fn for t in pair) else None)
    return read, released


@pytest.mark.parametrize("split", [False, True], ids=["one-call", "two-calls"])
def test_bracketing_one_record_reads_nothing_beyond_q(tmp_path, split):
    """An analyst who knows every score asks for two thresholds around one record's score, in one
    call or two: the positives between them would be that record's class. With q = 1 (no gate to
    speak of) the attack reads every targeted class; with the default rules (q = 5, a secret
    margin, the cut history) it reads none, and every cell between any two thresholds released
    over the whole attack holds at least q records: the finest thing learnt about a record is the
    positive share of a cell of q or more."""
    targets = list(range(40, 160, 4))
    provisioned, services, p, y = _attack_site(tmp_path / "open", q_threshold=1, cut_margin=0)
    read, _ = _bracket_attack(provisioned, services, p, targets, split=split)
    assert read == [int(y[k]) for k in targets]  # the attack works where the gate lets single records through

    provisioned, services, p, y = _attack_site(tmp_path / "gated")
    read, released = _bracket_attack(provisioned, services, p, targets, split=split)
    recovered = [k for k, r in zip(targets, read) if r is not None]
    assert recovered == []
    below = np.array([released[t] for t in sorted(released)])
    cells = np.diff(np.concatenate([[0], below, [p.size]]))
    assert cells.min() >= 5, cells  # q of the default rules


# --- presentation and errors ---------------------------------------------------------------------


def test_results_present_and_plot_what_was_released(federation):
    """summary, to_dict (JSON), repr and plot of the three results; the plots draw the released
    values and break the line at a withheld threshold."""
    import json

    from dsfed_client.plots import _pyplot

    session, y, p = federation
    m = ds_threshold_metrics(session, "D$y", "D$score", [0.2, 0.5, 0.501, 0.8], secure=True)
    assert m.withheld == (0.501,) and m.not_released == {"pooled": [0.501]}  # one record-width from 0.5
    assert "not released: 0.501" in m.summary() and "n_withheld=1" in repr(m)
    json.dumps(m.to_dict(), allow_nan=False)
    ax = m.plot()
    (line,) = [a for a in ax.get_lines() if a.get_gid() == "threshold-sensitivity"]
    np.testing.assert_array_equal(line.get_xdata(), [0.2, 0.5, 0.501, 0.8])
    np.testing.assert_allclose(line.get_ydata(), [*m.sensitivity[:2], np.nan, m.sensitivity[2]])
    curve = ds_decision_curve(session, "D$y", "D$score", [0.1, 0.3, 0.5], secure=True)
    assert "Thresholds released:" in curve.summary() and curve.to_dict()["n_thresholds"] == 3
    ax = curve.plot()
    (model,) = [a for a in ax.get_lines() if a.get_gid() == "dca-model"]
    np.testing.assert_allclose(model.get_ydata(), curve.net_benefit)
    youden = ds_youden_threshold(session, "D$y", "D$score", n_groups=5, secure=True)
    assert list(youden.to_frame().columns) == ["tp", "fp", "tn", "fn", "sensitivity", "specificity", "youden_j"]
    assert f"{youden.threshold:.6g}" in youden.summary()
    assert [a for a in youden.plot().get_lines() if a.get_gid() == "youden-threshold"]
    _pyplot().close("all")


def test_bad_thresholds_are_clear_errors_before_and_at_the_sites(federation):
    from dsfed_client import FederatedCallError, Ref
    from dsfed_client.params import InvalidParameterError

    session, _, _ = federation
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        ds_threshold_metrics(session, "D$y", "D$score", [0.0, 0.5])
    with pytest.raises(InvalidParameterError, match="'ci' parameter"):
        ds_threshold_metrics(session, "D$y", "D$score", [0.5], ci="wald")
    with pytest.raises(InvalidParameterError, match="'strategy' parameter"):
        ds_calibration_curve(session, "D$y", "D$score", strategy="kmeans")
    with pytest.raises(InvalidParameterError, match=r"'n_bins' parameter .* in the range \[2, 100\]"):
        ds_calibration_curve(session, "D$y", "D$score", n_bins=200, strategy="quantile")
    with pytest.raises(FederatedCallError, match="strictly increasing numbers strictly between 0 and 1") as exc:
        session.aggregate("thresholdBinsDS", Ref("D$y"), Ref("D$score"), [0.5, 0.2])
    assert {e.kind for e in exc.value.failures.values()} == {"bad_call"}
