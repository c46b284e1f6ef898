"""Schalk et al.'s (2024) AUC from noisy scores (``ds_auc``) against the known truth of the pooled records: its
interval carries the noise's variance and its bias, and where the noise swamps the scores it gives
no interval and names the estimator to use instead.

Reference: the exact empirical AUC of the pooled records (pROC's ``auc`` through rpy2; the
Mann-Whitney count for the repeated designs).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dsfed_client.analyses.discrimination import ds_auc, logit_ci
from dsfed_server.synthetic import PROJECT, binormal
from conftest import inprocess_builder
from rref import R_PROC, r_reference
from sitekit import ROOT, make_sites, rules_variant

sys.path.insert(0, str(ROOT / "bench"))
from coverage import pooled_auc  # noqa: E402  (bench/coverage.py)
from curves import inprocess_sites, login  # noqa: E402  (bench/curves.py: sites holding several tables)


def three_sites(n: int, seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """``n`` binormal records (AUC 0.75, prevalence 0.3) split into three sites."""
    pooled = binormal(n, np.random.default_rng(seed), 0.75, 0.3)[["y", "score"]]
    frames = {f"site{k + 1}": pooled.iloc[k::3].reset_index(drop=True) for k in range(3)}
    return frames, pooled["y"].to_numpy(), pooled["score"].to_numpy()


def test_swamped_by_the_default_noise_the_auc_says_so(tmp_path):
    """2,000 records at three sites, the shipped default rules (epsilon 1: noise sd 0.75 on scores in
    [0, 1]): the noisy-score AUC is pulled far towards 1/2, and DeLong's interval alone excludes
    pROC's AUC of the records. The result says the noise swamps the scores, gives no interval (NaN),
    warns, and names ds_hist_auc."""
    frames, y, p = three_sites(2000, 7)
    auc = r_reference("proc_ref", R_PROC, y=y, p=p)[0]
    with inprocess_builder(*make_sites(tmp_path, frames)).login() as session:
        session.assign_table("D", "P.t")
        with pytest.warns(UserWarning, match="ds_hist_auc"):
            result = ds_auc(session, "D$y", "D$score")
    lower, upper = logit_ci(result.auc, result.variance, result.alpha)
    assert not lower <= auc <= upper  # the interval the paper gives would be confidently wrong
    assert result.swamped and result.reliability < 0.5
    assert all(np.isnan(v) for v in (*result.ci_logit, *result.ci_delong))
    assert "ds_hist_auc" in result.note and "swamps" in result.note


@pytest.mark.slow  # 149 s on two cores
def test_the_interval_carries_the_noise_where_it_leaves_signal(tmp_path):
    """Where the noise leaves most of the scores' variance (epsilon 10 in the sites' rules, noise sd
    0.1; the shipped epsilon 1 swamps the scores, the test above), ten data sets of 20,000 records
    at three sites: the noise's bias (-0.015) is five DeLong standard errors, so DeLong's interval
    alone covers the exact AUC of the records in none; the reported interval, which carries the
    noise's variance and its SIMEX bias, covers it in at least 9 of 10."""
    data = {f"rep{rep}": binormal(20000, np.random.default_rng(100 + rep), 0.75, 0.3)[["y", "score"]]
            for rep in range(10)}
    rules = rules_variant(tmp_path / "rules.toml", epsilon="10.0", epsilon_per_table="1000.0",
                          epsilon_per_analyst="1000.0")
    covered = covered_delong = 0
    with login(*inprocess_sites(tmp_path, 3, data, rules)).login() as session:
        for rep, pooled in enumerate(data.values()):
            truth = pooled_auc(pooled["y"].to_numpy(), pooled["score"].to_numpy())
            session.assign_table("D", f"{PROJECT}.rep{rep}")
            result = ds_auc(session, "D$y", "D$score")
            assert not result.swamped and result.noise_variance > 0 and result.approximation_error > 0
            lower, upper = result.ci_logit
            covered += lower <= truth <= upper
            lo, hi = logit_ci(result.auc, result.variance, result.alpha)
            covered_delong += lo <= truth <= hi
    assert covered_delong <= 2
    assert covered >= 9
