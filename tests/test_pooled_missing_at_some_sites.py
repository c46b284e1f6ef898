"""Pooled releases where some sites' records have missing values and others' do not.

A pooled release sums one vector per site, and the vectors must have one length. A site whose records of a call
are not all of the column's (a missing outcome or score drops some) counted, per cell, its column's records too,
and a site whose records were all of them did not: the vectors differed, and every site refused the call with
"vector has another length" under ``secure_aggregation.peers``, a reason about factor levels and cut histories
that had nothing to do with the data. Likewise the sites took their cells for intervals of the column or of a
subset each on its own records, and so paired them with other sets of earlier cells. On the messy-corpus exports
with the first hospital's records complete, ``validate()`` over pooled releases lost four sections
(thresholds, decision curve, Hosmer-Lemeshow, discrimination) and the calibration curve.

Now every site sends the column's counts and whether its records are all of the column's; the sites decide
alike from the sum. The records left out are those the analyst expects: records missing the outcome or the
score (the complete cases), and none else. Shipped default rules; the last test turns noise off (why: to compare
the AUC and the calibration line with R's to the last digit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.messy import write_corpus
from rref import R_PROC, R_VALPROB, r_reference
from sitekit import NO_NOISE, make_sites


def _first_complete(tmp: Path, dataset: str) -> dict[str, pd.DataFrame]:
    """A corpus data set's outcome and score as exported (missing values kept), the first hospital's
    complete: some sites drop records of a call, others none."""
    frames = {s.name: s.truth[["y", "risk_score"]].rename(columns={"risk_score": "score"}).reset_index(drop=True)
              for s in write_corpus(tmp / "corpus", dataset=dataset, seed=37)}
    first = sorted(frames)[0]
    frames[first] = frames[first].dropna().reset_index(drop=True)
    assert all(f.isna().any(axis=None) for name, f in frames.items() if name != first)
    return frames


def _complete_cases(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(frames.values(), ignore_index=True).dropna()


def test_pooled_thresholds_with_a_missing_score_at_one_site_equal_the_complete_cases(tmp_path: Path):
    """Two of 400 scores missing at one site of three: the pooled counts above each threshold are those of the
    398 complete records (counted with pandas)."""
    rng = np.random.default_rng(11)
    frames = {}
    for site in ("a", "b", "c"):
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(float), "score": score})
    frames["a"].loc[[3, 17], "score"] = np.nan
    thresholds = [0.2, 0.5, 0.8]
    with inprocess_builder(*make_sites(tmp_path, frames)).login() as session:
        session.assign_table("D", "P.t")
        result = ds_threshold_metrics(session, "D$y", "D$score", thresholds, secure=True)
    table = result.to_frame()
    pooled = _complete_cases(frames)
    assert len(pooled) == 1198
    for t in thresholds:
        above = pooled.score >= t
        assert table.loc[t, "tp"] == int((above & (pooled.y == 1)).sum())
        assert table.loc[t, "fp"] == int((above & (pooled.y == 0)).sum())


@pytest.mark.parametrize("dataset", ["small", "five_unequal"])
def test_pooled_validate_completes_where_only_some_sites_have_missing_values(tmp_path: Path, dataset: str):
    frames = _first_complete(tmp_path, dataset)
    with inprocess_builder(*make_sites(tmp_path, frames)).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score", secure=True)
    assert result.failed == {}
    pooled = _complete_cases(frames)
    assert result.brier.n == len(pooled)
    assert result.brier.brier == pytest.approx(((pooled.score - pooled.y) ** 2).mean(), rel=1e-12)
    assert result.curve.n.sum() == len(pooled)


def test_pooled_validate_with_missing_values_at_some_sites_equals_R(tmp_path: Path):
    """Noise off (``testing-no-noise.toml``, so that the AUC and the calibration line compare with R's exactly):
    the AUC is pROC's over the complete cases' scores binned into the leaves released (as
    ``test_noise_off_validate``), the Brier score and the calibration line ``rms::val.prob``'s."""
    frames = _first_complete(tmp_path, "four_mid")
    with inprocess_builder(*make_sites(tmp_path, frames, rules=NO_NOISE)).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score", secure=True)
    assert result.failed == {}
    pooled = _complete_cases(frames)
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    edges = np.asarray(result.discrimination.result.histograms.edges, dtype=float)
    leaf = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, edges.size - 2).astype(float)
    assert result.discrimination.auc == pytest.approx(r_reference("proc_ref", R_PROC, y=y, p=leaf)[0], rel=1e-12)
    brier, _, intercept, slope, _ = r_reference("valprob_ref", R_VALPROB, y=y, p=p)
    assert result.brier.brier == pytest.approx(brier, rel=1e-12)
    assert result.logistic.intercept == pytest.approx(intercept, rel=1e-5)
    assert result.logistic.slope == pytest.approx(slope, rel=1e-5)
