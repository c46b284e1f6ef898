"""``dsfed-server init DIR --csv FILE`` makes a site that starts, passes ``check`` and answers: the
test runs the command line, starts the site as a real process on loopback and compares ``meanDS``
with pandas' mean of the CSV."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsfed_client import LoginBuilder
from dsfed_server.launch import LocalSites
from dsfed_server.provision import Credential, ProvisionedSite
from sitekit import ROOT, dsfed_server


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
        with builder.login() as session:
            session.assign_table("D", "main.patients")
            for column in ("age", "bmi"):
                answer = session.aggregate_expr(f"meanDS(D${column})")["hospital"]
                assert answer["EstimatedMean"] == pytest.approx(frame[column].mean(), rel=1e-12)
                assert answer["Nmissing"] == int(frame[column].isna().sum())


def test_init_refuses_a_directory_in_use(tmp_path: Path, patients):
    csv, _ = patients
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "site.toml").write_text("")
    result = dsfed_server("init", str(tmp_path / "used"), "--csv", str(csv))
    assert result.returncode == 2
    assert result.stderr.strip() == (f"dsfed-server: {tmp_path / 'used'}: not empty; dsfed-server init writes a "
                                     "new site into an empty directory")
