"""The histogram AUC's control variates: each class's own mean placement against the same reference
(``histPlacementSumsDS``'s ``sum_v00``, ``sum_v11``), which is one half without noise, corrects the other
class's mean (:func:`dsfed_client.analyses.curves.control_variates`; Glynn & Szechtman 2002).

* noise off: the own-class sums equal an independent numpy computation of the placement values at the
  released cells (the records' cells found with ``searchsorted`` on the released cuts, the CDF at the
  cells' bounds counted from the data), and their means are one half exactly where the reference is the
  data's own CDF and every record sits in a cell whose bounds are the reference's edges (a pooled release),
  and not where a site merges its own cells or the reference is another data set's;
* noise off: :func:`ds_hist_auc` equals pROC's AUC and DeLong interval (R through rpy2), with beta = 0 and
  the own-class means one half, so the correction is zero twice over;
* noise on: the corrected estimator's reported noise variance against the variance of its error over
  repeated noise draws on one fixed pooled data set, and its mean absolute error against the weighted
  means' on the same draws;
* a server that does not return the own-class sums: the weighted means as before, and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_client.analyses.curves import (ds_hist_auc, histograms_alone, noise_variance, placement_noise_variances,
                                          placement_weight)
from dsfed_client.calls import Call
from dsfed_server.registry import REGISTRY
from dsfed_server.synthetic import binormal
from rref import R_PROC, r_reference
from sitekit import DEFAULT_RULES, NO_NOISE, make_sites, rules_variant, write_table

LEAVES = 16


def split(data: pd.DataFrame, sizes: tuple[int, ...], rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    """``data`` split at random into sites of ``sizes`` records."""
    order = rng.permutation(len(data))
    bounds = np.cumsum((0, *sizes))
    return {f"site{k + 1}": data.iloc[np.sort(order[bounds[k]:bounds[k + 1]])].reset_index(drop=True)
            for k in range(len(sizes))}


def below(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How many of ``values`` lie below each edge (continuous scores: none on an edge)."""
    return np.searchsorted(np.sort(values), edges, "left").astype(float)


def own_means(frame: pd.DataFrame, edges: np.ndarray, cum0: np.ndarray, cum1: np.ndarray,
              cells: dict) -> tuple[float, float, float, float]:
    """Sums of V00 over the negatives and of V11 over the positives of ``frame``, and of V10, V01, against the
    reference (``cum0``, ``cum1`` at ``edges``) read at the cells the release says it released: the reference's
    edges, less those it dropped, those it moved at their new value; a record's value the mean of the
    reference's CDF at its cell's bounds (ties one half)."""
    moved = {a: b for a, b in cells["moved"]}
    cuts = np.array(sorted({moved.get(e, e) for e in edges if e not in set(cells["dropped"])}))
    bounds = np.clip(np.concatenate([[-np.inf], cuts, [np.inf]]), edges[0], edges[-1])

    def mean_cdf(cum: np.ndarray, x: np.ndarray) -> np.ndarray:
        at = np.interp(bounds, edges, cum) / cum[-1]
        cell = np.searchsorted(cuts, x, "left")
        return 0.5 * (at[cell] + at[cell + 1])

    neg, pos = (frame.score.to_numpy()[frame.y.to_numpy() == c] for c in (0, 1))
    return (float(mean_cdf(cum0, neg).sum()), float(mean_cdf(cum1, pos).sum()), float(mean_cdf(cum0, pos).sum()),
            float((1.0 - mean_cdf(cum1, neg)).sum()))


def test_noise_off_own_class_sums_are_one_half_only_where_that_is_true(tmp_path: Path) -> None:
    """The shipped test profile (noise off, q = 5): a small site merges tail leaves of its own."""
    rng = np.random.default_rng(381)
    data = binormal(420, rng, 0.75, 0.3)[["y", "score"]]
    frames = split(data, (200, 180, 40), rng)
    y, p = data.y.to_numpy(), data.score.to_numpy()
    edges = np.linspace(0.0, 1.0, LEAVES + 1)
    own = (below(p[y == 0], edges), below(p[y == 1], edges))
    other = binormal(420, np.random.default_rng(9), 0.9, 0.5)  # another data set's CDFs
    foreign = (below(other.score[other.y == 0].to_numpy(), edges), below(other.score[other.y == 1].to_numpy(), edges))
    with inprocess_builder(*make_sites(tmp_path, frames, rules=NO_NOISE)).login() as session:
        session.assign_table("D", "P.t")
        args = (Ref("D$y"), Ref("D$score"))
        for name, (cum0, cum1) in (("own", own), ("foreign", foreign)):
            reference = session.assign(f"ref_{name}", Call("histReferenceDS", edges, cum0, cum1))
            pooled = session.pooled("histPlacementSumsDS", *args, reference, within_bin="tied")
            want = own_means(data, edges, cum0, cum1, pooled["placement_cells"])
            got = [pooled[f"sum_{v}"] for v in ("v00", "v11", "v10", "v01")]
            assert got == pytest.approx(want, rel=1e-9)
            n0, n1 = pooled["n0"], pooled["n1"]
            half = (pooled["sum_v00"] / n0 == pytest.approx(0.5, abs=1e-12),
                    pooled["sum_v11"] / n1 == pytest.approx(0.5, abs=1e-12))
            # pooled cells are the reference's leaves, some merged: one half exactly against the data's own CDF
            assert half == ((True, True) if name == "own" else (False, False)), name
            per_site = session.aggregate("histPlacementSumsDS", *args, reference, within_bin="tied")
            for site, r in per_site.items():
                want = own_means(frames[site], edges, cum0, cum1, r["placement_cells"])
                assert [r[f"sum_{v}"] for v in ("v00", "v11", "v10", "v01")] == pytest.approx(want, rel=1e-12)
            if name == "own":  # the small site merged tail leaves of its own: no longer one half summed
                assert per_site["site3"]["placement_cells"]["dropped"]
                total = sum(r["sum_v00"] for r in per_site.values()) / n0
                assert abs(total - 0.5) > 1e-6


@pytest.mark.parametrize("secure", [False, True], ids=["per-site", "pooled"])
def test_noise_off_equals_pROC_with_beta_zero(tmp_path: Path, secure: bool) -> None:
    """The test profile with q = 1, as in test_noise_off_exact.py: the leaves are refined until each that holds
    both classes holds one distinct score, which needs cells of one record."""
    rng = np.random.default_rng(382)
    data = binormal(300, rng, 0.75, 0.3)[["y", "score"]]
    rules = rules_variant(tmp_path / "q1.toml", base=NO_NOISE, q_threshold=1)
    with inprocess_builder(*make_sites(tmp_path, split(data, (120, 100, 80), rng), rules=rules)).login() as session:
        session.assign_table("D", "P.t")
        result = ds_hist_auc(session, "D$y", "D$score", secure=secure, roc_glm=False)
    auc, lower, upper, variance = r_reference("proc_ref", R_PROC, y=data.y.to_numpy(), p=data.score.to_numpy())
    assert result.auc == pytest.approx(auc, abs=1e-12)
    assert result.variance == pytest.approx(variance, abs=1e-12)
    assert tuple(result.ci_delong) == pytest.approx((lower, upper), abs=1e-10)
    # beta is 0 with noise off, and the correction it would multiply is zero too
    assert (result.beta10, result.beta01, result.noise_variance) == (0.0, 0.0, 0.0)
    assert (result.mean_v00, result.mean_v11) == pytest.approx((0.5, 0.5), abs=1e-12)
    assert result.estimator.startswith("weighted means (noise off")


def noisy_tables(tmp_path: Path, data: pd.DataFrame, draws: int, rng: np.random.Generator) -> Path:
    """``draws`` tables t0, t1, ... at three sites, each the same pooled data split at random anew. A site
    seeds its noise by its secret and the query's data, so one table asked again gives the same noise; a new
    split gives every site new data, so new noise, on the same pooled data."""
    for r in range(draws):
        for site, frame in split(data, (200, 200, 200), rng).items():
            write_table(tmp_path / "data" / site, frame, table=f"t{r}")
    # the shipped rules, but a budget for ``draws`` AUCs of one analyst
    return rules_variant(tmp_path / "budget.toml", base=DEFAULT_RULES, epsilon_per_table="1000.0",
                         epsilon_per_analyst="1000.0", delta_per_table="0.5", delta_per_analyst="0.5")


@pytest.mark.slow
def test_noise_on_reported_variance_is_the_noise_and_mae_falls(tmp_path: Path) -> None:
    """Binormal scores (AUC 0.75, prevalence 0.3), n = 600 over three sites of the shipped rules (epsilon 1,
    every site adding its full noise), pooled, 64 leaves (:func:`auc_levels`'s depth here); 50 noise draws."""
    draws, rng = 50, np.random.default_rng(383)
    data = binormal(600, rng, 0.75, 0.3)[["y", "score"]]
    rules = noisy_tables(tmp_path, data, draws, rng)
    y, p = data.y.to_numpy(), data.score.to_numpy()
    pooled_auc = r_reference("proc_ref", R_PROC, y=y, p=p)[0]
    corrected, reported, plain, plain_reported = [], [], [], []
    builder = inprocess_builder(*make_sites(tmp_path, split(data, (200, 200, 200), rng), rules=rules))
    for r in range(draws):
        # a session per draw: a session relays the cut histories and pooled cells of every table it released from
        # with each pooled release, so one session over the draws grew with the tables before
        with builder.login() as session:
            session.assign_table("D", f"P.t{r}")
            res = ds_hist_auc(session, "D$y", "D$score", secure=True, roc_glm=False)
        assert res.estimator == "control variates" and res.histograms.edges.size == 65
        w = placement_weight(res.histograms)
        corrected.append(res.auc)
        reported.append(res.noise_variance)
        plain.append(w * res.auc_positives + (1 - w) * res.auc_negatives)
        plain_reported.append(noise_variance(res.histograms, w))
    corrected, plain = np.asarray(corrected), np.asarray(plain)
    # the error's variance over the draws against the mean reported: the ratio of a sample variance of `draws`
    # normal errors to their variance lies in this band with probability 0.998
    band = stats.chi2.ppf([0.001, 0.999], draws - 1) / (draws - 1)
    ratio = corrected.var(ddof=1) / np.mean(reported)
    assert band[0] < ratio < band[1], ratio
    assert band[0] < plain.var(ddof=1) / np.mean(plain_reported) < band[1]
    # the control variates halve the noise's sd (a quarter of its variance here), on the same draws
    assert np.mean(reported) < 0.5 * np.mean(plain_reported)
    assert np.abs(corrected - pooled_auc).mean() < 0.75 * np.abs(plain - pooled_auc).mean()


def test_a_server_without_the_own_class_sums_gets_the_weighted_means(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Sites whose ``histPlacementSumsDS`` returns only the fields of before (its render wrapped here)."""
    spec = REGISTRY.get("histPlacementSumsDS")

    def older(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        cells = spec.impl(*args, **kwargs)
        render = cells.render
        cells.render = lambda released: {k: v for k, v in render(released).items() if k not in ("sum_v00", "sum_v11")}
        return cells

    monkeypatch.setitem(REGISTRY._specs, spec.name, replace(spec, impl=older))
    rng = np.random.default_rng(384)
    data = binormal(600, rng, 0.75, 0.3)[["y", "score"]]
    with inprocess_builder(*make_sites(tmp_path, split(data, (200, 200, 200), rng))).login() as session:
        session.assign_table("D", "P.t")
        res = ds_hist_auc(session, "D$y", "D$score", secure=True, roc_glm=False)
    w = placement_weight(res.histograms)
    assert res.estimator.startswith("weighted means (the sites did not return the own-class placement sums")
    assert "did not return the own-class placement sums" in " ".join(res.summary().split())
    assert "control variates" not in repr(res) and (res.beta10, res.beta01) == (0.0, 0.0)
    assert np.isnan(res.mean_v00) and np.isnan(res.mean_v11)
    assert res.weight == w and res.auc == pytest.approx(w * res.auc_positives + (1 - w) * res.auc_negatives)
    assert res.noise_variance == pytest.approx(noise_variance(res.histograms, w))


def test_noise_on_no_bias_and_the_reported_variance_is_the_errors_monte_carlo() -> None:
    """No sites: one fixed data set (binormal, n = 500, 64 leaves), 2,000 noise draws as the pooled release draws
    them (five sites each adding the full variance of epsilon 1, delta 1e-5, levels 1..6 sharing it, exact totals;
    as in test_hist_auc_weights.py); the placement means computed here with ``searchsorted`` against the sites'
    consistent reference, the coefficients, weight and bias by :func:`control_variates`. The target is the same
    estimator on the exact counts, so the error is the noise's alone. With beta and the weight from the noisy
    leaf shares themselves the mean error was +0.0012 (4 SEs) and the reported variance 1.4 times the error's
    over data sets (bench/auc_noise_floor.py --monte-carlo); on this data set and two others (seeds 386, 387)
    +0.0004, +0.0017, +0.0012 (SE 0.0002-0.0003) and 1.62, 1.27, 1.36 times. Now the bias is within 3 SEs of
    zero and the reported variance at most 1.25 times the error's (1.16, 1.01, 1.05 on the three: the coarse
    shares' gradients are close, not exact), and not below the chi-square band."""
    from test_hist_auc_weights import LEVELS, SIGMA, SITES, level_counts

    from dsfed_core.histograms import level_variances

    rng = np.random.default_rng(385)
    data = binormal(500, rng, 0.75, 0.3)
    y, p = data["y"].to_numpy(), data["score"].to_numpy()
    exact = level_counts(p, y)
    pooled = np.full(LEVELS, SITES * SIGMA**2 * LEVELS)
    variances = level_variances(pooled, 1)
    edges = np.linspace(0.0, 1.0, 2**LEVELS + 1)
    leaf = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2)

    def step(cum: np.ndarray, cls: int) -> float:  # a class's mean of the tied CDF from ``cum``
        return float((0.5 * (cum[leaf] + cum[leaf + 1]) / cum[-1])[y == cls].mean())

    def means(ref: dict[str, np.ndarray]) -> tuple[float, float, float, float]:  # V10, V00, V01, V11
        return (step(ref["negatives"], 1), step(ref["negatives"], 0), 1.0 - step(ref["positives"], 0),
                step(ref["positives"], 1))

    target = float(np.mean(means({c: np.concatenate([[0.0], np.cumsum(v[-1])]) for c, v in exact.items()})[::2]))
    errors, reported = [], []
    for _ in range(2000):
        noisy = {cls: [levels[0]] + [v + rng.normal(0.0, np.sqrt(pooled[0]), v.size) for v in levels[1:]]
                 for cls, levels in exact.items()}
        hist, (m10, m00, m01, m11), error, variance = corrected(noisy, variances, edges, means, target)
        errors.append(error)
        reported.append(variance)
    errors = np.asarray(errors)
    assert abs(errors.mean()) < 3 * errors.std(ddof=1) / np.sqrt(errors.size), errors.mean()
    band = stats.chi2.ppf([0.001, 0.999], errors.size - 1) / (errors.size - 1)
    ratio = np.mean(reported) / errors.var(ddof=1)
    assert 1 / band[1] < ratio < 1.25, ratio


def corrected(noisy: dict[str, list[np.ndarray]], variances: np.ndarray, edges: np.ndarray,
              means: Callable[[dict[str, np.ndarray]], tuple[float, float, float, float]], target: float
              ) -> tuple[Any, tuple[float, float, float, float], float, float]:
    """One Monte Carlo draw of noisy level counts: the histograms the client reads, the four placement means
    against the sites' consistent reference (``means``: V10, V00, V01, V11), the control-variate estimate's
    error against ``target`` and its reported noise variance."""
    from dsfed_client.analyses.curves import ScoreHistograms, control_variates
    from dsfed_core.histograms import global_cdfs

    ref, cdf = global_cdfs(noisy, variances, 2), global_cdfs(noisy, variances, 2, monotone=True)
    hist = ScoreHistograms(edges, cdf["negatives"], cdf["positives"], float(cdf["negatives"][-1]),
                           float(cdf["positives"][-1]), False, variances, {},
                           consistent_negatives=ref["negatives"], consistent_positives=ref["positives"])
    cv = control_variates(hist)
    m10, m00, m01, m11 = means(ref)
    w = cv.weight
    error = w * (m10 - cv.beta10 * (m00 - 0.5)) + (1 - w) * (m01 - cv.beta01 * (m11 - 0.5)) - cv.bias - target
    return hist, (m10, m00, m01, m11), error, w**2 * cv.variance10 + (1 - w) ** 2 * cv.variance01


def test_noisy_totals_the_gradients_carry_the_cdfs_normalisation_monte_carlo() -> None:
    """As the Monte Carlo above, with the class totals noisy too (``totals='noisy'``: level 0 released with the
    noise of the others, levels 0..6 sharing the budget). The sites divide the reference's cumulative counts by
    its noisy total, so a placement value's noise has a part from the total: its gradient in the leaf estimates is
    :math:`(a_k - \\bar V) / N`, not :math:`a_k / N`. Without that part the reported noise variance of the equal
    mean of the two was 1.12 times its error's (above the band) and that of the control variates 1.44 times; with
    it 0.98 and 1.19: within the band, and at most 1.25 times; the bias within 3 SEs of zero either way."""
    from test_hist_auc_weights import LEVELS, SIGMA, SITES, level_counts

    from dsfed_core.histograms import level_variances

    rng = np.random.default_rng(388)
    data = binormal(500, rng, 0.75, 0.3)
    y, p = data["y"].to_numpy(), data["score"].to_numpy()
    exact = level_counts(p, y)
    variances = level_variances(np.full(LEVELS + 1, SITES * SIGMA**2 * (LEVELS + 1)), 0)
    edges = np.linspace(0.0, 1.0, 2**LEVELS + 1)
    leaf = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2)

    def step(cum: np.ndarray, cls: int) -> float:  # a class's mean of the tied CDF from ``cum`` (its total noisy)
        return float((0.5 * (cum[leaf] + cum[leaf + 1]) / cum[-1])[y == cls].mean())

    def means(ref: dict[str, np.ndarray]) -> tuple[float, float, float, float]:  # V10, V00, V01, V11
        return (step(ref["negatives"], 1), step(ref["negatives"], 0), 1.0 - step(ref["positives"], 0),
                step(ref["positives"], 1))

    target = float(np.mean(means({c: np.concatenate([[0.0], np.cumsum(v[-1])]) for c, v in exact.items()})[::2]))
    errors, reported, plain, plain_reported = [], [], [], []
    for _ in range(2000):
        noisy = {cls: [v + rng.normal(0.0, np.sqrt(variances[0]), v.size) for v in levels]
                 for cls, levels in exact.items()}
        hist, (m10, m00, m01, m11), error, variance = corrected(noisy, variances, edges, means, target)
        errors.append(error)
        reported.append(variance)
        v10, v01 = placement_noise_variances(hist)
        plain.append(0.5 * (m10 + m01) - target)
        plain_reported.append(0.25 * (v10 + v01))
    errors, plain = np.asarray(errors), np.asarray(plain)
    assert abs(errors.mean()) < 3 * errors.std(ddof=1) / np.sqrt(errors.size), errors.mean()
    band = stats.chi2.ppf([0.001, 0.999], errors.size - 1) / (errors.size - 1)
    ratio, plain_ratio = np.mean(reported) / errors.var(ddof=1), np.mean(plain_reported) / plain.var(ddof=1)
    assert 1 / band[1] < ratio < 1.25, ratio
    assert 1 / band[1] < plain_ratio < band[1], plain_ratio


def test_per_site_where_a_site_merged_cells_of_its_own_no_correction(tmp_path: Path) -> None:
    """Per site (``secure=False``), noise on: a site of 40 records merges leaves of the reference of its own, so the
    own-class means summed over the sites are not one half without noise (the noise-off test above) and the
    correction would add beta times that; the estimator falls back to the weighted means (or, where half the share
    of pairs in merged cells widens their interval beyond the histograms' own, to the histograms alone) and says why.
    Pooled, on sites holding the same records, the cells are the reference's at every site and the control variates
    stand. (Asked of the same sites after the per-site release, the pooled cells may be merged instead: the site of
    40 holds few records of some cells the others released alone, and where depends on the margins the sites draw.)"""
    rng = np.random.default_rng(389)
    data = binormal(420, rng, 0.75, 0.3)[["y", "score"]]
    rules = rules_variant(tmp_path / "budget.toml", base=DEFAULT_RULES, epsilon_per_table="1000.0",
                          epsilon_per_analyst="1000.0", delta_per_table="0.5", delta_per_analyst="0.5")
    frames = split(data, (200, 180, 40), rng)
    results = []
    for secure in (False, True):
        sites = make_sites(tmp_path / ("pooled" if secure else "per-site"), frames, rules=rules)
        with inprocess_builder(*sites).login() as session:
            session.assign_table("D", "P.t")
            results.append(ds_hist_auc(session, "D$y", "D$score", secure=secure, roc_glm=False))
    per_site, pooled = results
    assert (per_site.beta10, per_site.beta01) == (0.0, 0.0)
    if per_site.estimator.startswith("histograms alone"):  # the merged cells' bound made the placement sums' wider
        h = per_site.histograms
        assert (per_site.auc, per_site.variance, per_site.noise_variance) == pytest.approx(histograms_alone(
            h, per_site.n_negative, per_site.n_positive, sum(placement_noise_variances(h))))
    else:
        assert per_site.estimator.startswith("weighted means (a site merged or moved cells of the reference of its "
                                             "own")
        w = per_site.weight
        assert w == placement_weight(per_site.histograms)
        assert per_site.auc == pytest.approx(w * per_site.auc_positives + (1 - w) * per_site.auc_negatives)
        assert per_site.noise_variance == pytest.approx(noise_variance(per_site.histograms, w))
    assert pooled.estimator == "control variates"
