"""The messy-data corpus (:mod:`dsfed_server.messy`) is what it says: deterministic by seed, three to
five sites of 40 to 2,000 records, every mess it promises present in the files, and its reference
frame equal to what pandas reads from the files with every missing-value spelling declared."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsfed_server.messy import AGE_CODE, DATASETS, NA_SPELLINGS, write_corpus


def test_the_corpus_is_deterministic_by_seed(tmp_path: Path):
    first = write_corpus(tmp_path / "a", dataset="small", seed=5)
    again = write_corpus(tmp_path / "b", dataset="small", seed=5)
    other = write_corpus(tmp_path / "c", dataset="small", seed=6)
    assert [s.csv.read_bytes() for s in first] == [s.csv.read_bytes() for s in again]
    assert [s.csv.read_bytes() for s in first] != [s.csv.read_bytes() for s in other]


def test_every_data_set_has_three_to_five_unequal_sites_of_40_to_2000_records():
    for sizes in DATASETS.values():
        assert 3 <= len(sizes) <= 5 and len(set(sizes)) == len(sizes)
        assert 40 <= min(sizes) and max(sizes) <= 2000
    assert min(min(s) for s in DATASETS.values()) == 40 and max(max(s) for s in DATASETS.values()) == 2000


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_the_files_hold_the_promised_mess_and_the_reference_reads_back(tmp_path: Path, dataset: str):
    sites = write_corpus(tmp_path, dataset=dataset, seed=37)
    assert [s.n for s in sites] == list(DATASETS[dataset])
    raw = {s.name: s.csv.read_bytes() for s in sites}
    assert any(b"\r\n" in r for r in raw.values()) and any(b"\r\n" not in r for r in raw.values())
    text = pd.concat([pd.read_csv(s.csv, dtype=str, keep_default_na=False) for s in sites])
    for spelling in NA_SPELLINGS:
        assert (text["bmi"] == spelling).any(), spelling
    assert {"F ", "f"} & set(text["sex"]) and set(text["sex"]) - {"F", "M", *NA_SPELLINGS}
    assert (text["age"] == str(AGE_CODE)).any()
    assert set(text["smoker"]) - set(NA_SPELLINGS) <= {"TRUE", "FALSE", "True", "False"}
    scores = pd.to_numeric(text["risk_score"], errors="coerce").dropna()
    assert scores.duplicated().sum() > len(scores) / 10  # rounded to three decimals: ties
    assert (text["stage"] == "IV").mean() < 0.06

    for site in sites:
        read = pd.read_csv(site.csv, na_values=list(NA_SPELLINGS), keep_default_na=False, skipinitialspace=False)
        assert len(read) == site.n == len(site.truth)
        for column in ("age", "bmi", "risk_score", "old_score", "y"):
            np.testing.assert_array_equal(read[column].to_numpy(dtype=float), site.truth[column].to_numpy(dtype=float))
        meant = read["sex"].str.strip().str.upper()
        assert meant.fillna("<NA>").tolist() == site.truth["sex"].fillna("<NA>").tolist()


@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_validate_completes_on_every_corpus_data_set_under_the_default_rules(tmp_path: Path, dataset: str):
    """Every section of ``validate()`` is computed on each data set's complete cases (three to five
    sites, 40 to 2,000 records each; shipped default.toml, noise on), and its exact sums equal pandas'."""
    from conftest import inprocess_builder
    from dsfed_client.analyses.suite import validate
    from sitekit import make_sites

    frames = {s.name: s.truth[["y", "risk_score"]].dropna().rename(columns={"risk_score": "score"})
              .reset_index(drop=True) for s in write_corpus(tmp_path / "corpus", dataset=dataset, seed=37)}
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
    pooled = pd.concat(frames.values(), ignore_index=True)
    assert result.failed == {}
    assert result.brier.n == len(pooled)
    assert result.brier.brier == pytest.approx(((pooled.score - pooled.y) ** 2).mean(), rel=1e-12)
    assert result.curve.n.sum() == len(pooled)
