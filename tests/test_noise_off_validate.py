"""With noise off (disclosure_rules/testing-no-noise.toml) ``validate()`` completes and equals R at
ordinary sizes: on each messy-corpus data set's complete cases (three to five sites, 40 to 2,000
records each) and on 1,200 records over three sites. The AUC's exact leaves (64 or more) hold a
few records in the tails; the sites merge a leaf of fewer than q pooled records with its neighbour
(``bins.small_bin_policy = "merge"``) instead of refusing the call, so the empirical AUC is pROC's
AUC of the scores binned into the leaves released (a pair within a leaf counts one half), and the
Brier score, calibration intercept and slope are ``rms::val.prob``'s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_server.messy import DATASETS, write_corpus
from rref import R_PROC, R_VALPROB, r_reference
from sitekit import NO_NOISE, make_sites


def _twelve_hundred() -> dict[str, pd.DataFrame]:
    """1,200 records over three sites: a logistic model's risks rounded to 3 decimals (ties)."""
    rng = np.random.default_rng(1200)
    frames = {}
    for k, n in enumerate((500, 400, 300)):
        risk = 1 / (1 + np.exp(-(rng.normal(size=n) - 0.5)))
        frames[f"site{k + 1}"] = pd.DataFrame({"y": (rng.uniform(size=n) < risk).astype(int),
                                               "score": np.round(risk, 3)})
    return frames


@pytest.mark.parametrize("dataset", [*sorted(DATASETS), "1200"])
def test_noise_off_validate_completes_and_equals_R(tmp_path: Path, dataset: str):
    if dataset == "1200":
        frames = _twelve_hundred()
    else:
        frames = {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
                  .reset_index(drop=True) for s in write_corpus(tmp_path / "corpus", dataset=dataset, seed=37)}
    with inprocess_builder(*make_sites(tmp_path, frames, rules=NO_NOISE)).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
    assert result.failed == {}
    pooled = pd.concat(frames.values(), ignore_index=True)
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    edges = np.asarray(result.discrimination.result.histograms.edges, dtype=float)
    assert edges.size - 1 > 32  # 64 or more leaves asked: only the tails' small ones merged
    leaf = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2).astype(float)
    assert result.discrimination.auc == pytest.approx(r_reference("proc_ref", R_PROC, y=y, p=leaf)[0], rel=1e-12)
    brier, _, intercept, slope, _ = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert result.brier.brier == pytest.approx(brier, rel=1e-12)
    assert result.logistic.intercept == pytest.approx(intercept, rel=1e-5)  # rms's lrm stops at 1e-7 or so
    assert result.logistic.slope == pytest.approx(slope, rel=1e-5)
