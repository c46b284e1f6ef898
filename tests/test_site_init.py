"""``dsfed-server init DIR --csv FILE`` makes a site that starts, passes ``check`` and answers: the
test runs the command line, starts the site as a real process on loopback and compares ``meanDS``
with pandas' mean of the CSV."""

from __future__ import annotations

import json
import re
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsfed_client import LoginBuilder, RecordsLeftOut
from dsfed_server.launch import LocalSites
from dsfed_server.provision import Credential, ProvisionedSite
from sitekit import ROOT, dsfed_server, kept_by_pattern


@pytest.fixture
def patients(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    rng = np.random.default_rng(15)
    n = 60
    frame = pd.DataFrame({
        "age": rng.integers(30, 90, n),
        "bmi": rng.normal(26, 4, n).round(1),
        "smoker": rng.random(n) < 0.3,             # pandas writes True/False
        "sex": rng.choice(["female", "male"], n),
        "y": rng.integers(0, 2, n),
    })
    frame.loc[[3, 17], "bmi"] = np.nan
    path = tmp_path / "patients.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_init_writes_a_site_that_starts_checks_and_answers(tmp_path: Path, patients):
    csv, frame = patients
    site_dir = tmp_path / "hospital"
    made = dsfed_server("init", str(site_dir), "--csv", str(csv), "--name", "hospital", "--port", "0")
    assert made.returncode == 0, made.stderr
    assert "REVIEW" in made.stdout
    password = re.search(r"analyst \(analyst\): password (\S+)", made.stdout).group(1)

    assert (site_dir / "rules.toml").read_text() == (ROOT / "disclosure_rules" / "default.toml").read_text()
    dictionary = json.loads((site_dir / "data" / "main" / "patients.dictionary.json").read_text())
    types = {v["name"]: v["valueType"] for v in dictionary["variables"]}
    assert types == {"age": "integer", "bmi": "decimal", "smoker": "boolean", "sex": "text", "y": "integer"}
    assert tomllib.loads((site_dir / "site.toml").read_text())["site"]["name"] == "hospital"

    checked = dsfed_server("check", str(site_dir / "site.toml"))
    assert checked.returncode == 0, checked.stderr
    smoker = next(line for line in checked.stdout.splitlines() if line.strip().startswith("smoker"))
    assert f"True {int(frame.smoker.sum())}, False {int((~frame.smoker).sum())}" in smoker

    credentials = {"analyst": Credential("analyst", "analyst", password, "")}
    site = ProvisionedSite("hospital", site_dir / "site.toml", site_dir / "hospital-audit.jsonl", credentials,
                           site_dir / "site.secret")
    with LocalSites([site], tmp_path / "run") as sites:
        builder = LoginBuilder()
        builder.append("hospital", sites.urls["hospital"], user="analyst", password=password)
        with builder.login() as session, pytest.warns(RecordsLeftOut, match="2 record"):
            session.assign_table("D", "main.patients")  # the two records missing only their BMI: a rare pattern
            kept = kept_by_pattern(frame)
            for column in ("age", "bmi"):
                answer = session.aggregate_expr(f"meanDS(D${column})")["hospital"]
                assert answer["EstimatedMean"] == pytest.approx(kept[column].mean(), rel=1e-12)
                assert answer["Nmissing"] == int(kept[column].isna().sum())


def test_init_refuses_a_directory_in_use(tmp_path: Path, patients):
    csv, _ = patients
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "site.toml").write_text("")
    result = dsfed_server("init", str(tmp_path / "used"), "--csv", str(csv))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"dsfed-server: {tmp_path / 'used'}: not empty; dsfed-server init writes a "
                                     "new site into an empty directory")


def _levels(check_stdout: str, column: str) -> dict[str, int]:
    line = next(line for line in check_stdout.splitlines() if line.strip().startswith(column + " "))
    shown = line.split("missing", 1)[1].split(None, 1)[1] if len(line.split("missing", 1)[1].split()) > 1 else ""
    return {k: int(c) for k, c in (item.rsplit(" ", 1) for item in shown.split(", ") if item)}


def test_init_reads_a_messy_export_as_meant_and_lists_every_change_for_review(tmp_path: Path):
    """On the messy corpus (missing values as NA, empty, NaN and '.', Windows line endings at one of
    the two sites, stray whitespace and case in sex, an age code 999, two score columns): numeric
    columns stay numeric with every spelling missing, sex is trimmed, the review names each of
    these, the age range is flagged with its code, and score_columns names the score columns; the
    site's mean and missing count equal pandas' on the file read with every spelling declared."""
    from dsfed_server.messy import NA_SPELLINGS, write_corpus

    corpus = write_corpus(tmp_path / "corpus", dataset="three_hospitals", seed=37)
    for messy in corpus[1:]:  # hospital2 (CRLF; empty and NaN), hospital3 (NaN and '.')
        site_dir = tmp_path / messy.name
        made = dsfed_server("init", str(site_dir), "--csv", str(messy.csv), "--name", messy.name, "--port", "0")
        assert made.returncode == 0, made.stderr
        reference = pd.read_csv(messy.csv, na_values=list(NA_SPELLINGS), keep_default_na=False)
        dictionary = json.loads((site_dir / "data" / "main" / "patients.dictionary.json").read_text())
        variables = {v["name"]: v for v in dictionary["variables"]}
        assert {k: v["valueType"] for k, v in variables.items()} == {
            "age": "integer", "sex": "text", "bmi": "decimal", "smoker": "boolean", "stage": "text",
            "ward": "text", "y": "integer", "risk_score": "decimal", "old_score": "decimal"}
        trimmed = reference["sex"].dropna().str.strip()
        assert [c["name"] for c in variables["sex"]["categories"]] == sorted(set(trimmed))
        review = [line.strip() for line in made.stdout.splitlines() if "REVIEW" in line]
        for column in ("bmi", "risk_score"):
            raw = pd.read_csv(messy.csv, dtype=str, keep_default_na=False)[column]
            spelled = [s for s in ("NaN", ".", "NA") if (raw == s).any()]
            assert spelled and any(line.startswith(f"REVIEW {column}: read as missing:") and
                                   all(repr(s) in line for s in spelled) for line in review), (column, review)
        stray = int((reference["sex"].dropna() != trimmed).sum())
        assert f"REVIEW sex: {stray} values trimmed of surrounding whitespace" in made.stdout
        codes = int((reference["age"] == 999).sum())
        age_line = next(line for line in review if line.startswith("REVIEW age: range"))
        assert f"[{int(reference.age.min())}, 999] derived from the data" in age_line
        assert f"999 ({codes} record{'s' if codes != 1 else ''})" in age_line
        cased = [(upper, upper.lower()) for upper in ("F", "M") if upper.lower() in set(trimmed)]
        assert cased
        for upper, lower in cased:
            assert any("differing only in case" in line and f"'{upper}'" in line and f"'{lower}'" in line
                       for line in review), (upper, review)
        assert tomllib.loads((site_dir / "rules.toml").read_text())["privacy"]["score_columns"] == [
            "risk_score", "old_score"]
        assert 'REVIEW score_columns = ["risk_score", "old_score"] set in rules.toml' in made.stdout

        checked = dsfed_server("check", str(site_dir / "site.toml"))
        assert checked.returncode == 0, checked.stderr
        assert _levels(checked.stdout, "sex") == trimmed.value_counts().to_dict()

    password = re.search(r"analyst \(analyst\): password (\S+)", made.stdout).group(1)
    credentials = {"analyst": Credential("analyst", "analyst", password, "")}
    site = ProvisionedSite(messy.name, site_dir / "site.toml", site_dir / f"{messy.name}-audit.jsonl", credentials,
                           site_dir / "site.secret")
    with LocalSites([site], tmp_path / "run") as sites:
        builder = LoginBuilder()
        builder.append(messy.name, sites.urls[messy.name], user="analyst", password=password)
        with builder.login() as session, warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordsLeftOut)
            session.assign_table("D", "main.patients")
            kept = kept_by_pattern(reference)  # the site leaves out the records of a rare missing pattern
            for column in ("bmi", "risk_score", "age"):
                answer = session.aggregate_expr(f"meanDS(D${column})")[messy.name]
                assert answer["EstimatedMean"] == pytest.approx(kept[column].mean(), rel=1e-12)
                assert answer["Nmissing"] == int(kept[column].isna().sum())


def test_site_admin_guide_says_to_set_score_columns():
    guide = (ROOT / "docs" / "site-admin.md").read_text()
    setup = guide.split("## The site config")[0]
    assert "score_columns" in setup and "NA" in setup and "trim" in setup
