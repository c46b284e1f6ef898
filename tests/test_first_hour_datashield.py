"""A DataSHIELD user's first hour on the messy corpus under the shipped default rules: three sites
made from the three hospitals' exports by ``dsfed-server init`` (unreviewed), run as real processes,
and the unmodified PyPI ``datashield`` client through ``/ws`` sending dsBaseClient's call texts:
login, a mean, a derived column (``ds.make``), a table, group means (``ds.meanSdGp``), a subset and a
GLM step with a boolean covariate at the analyst's coefficients (``ds.glm``), in that order. Each
answer equals pandas' (or numpy's) on the records the site keeps (its export read with every
missing-value spelling, less the records of a rare pattern of missing values: docs/governance.md),
the group means after the table withhold, at one site, the two groups a few records missing the BMI would
single out, and say so. The histograms are in
tests/test_first_histogram.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from datashield import DSLoginBuilder, DSSession

from dsfed_server.launch import LocalSites
from dsfed_server.messy import NA_SPELLINGS, write_corpus
from dsfed_server.provision import Credential, ProvisionedSite
from opalkit import opal_value
from sitekit import dsfed_server, kept_by_pattern

STAGES = ("I", "II", "III", "IV")
NA = "NA"  # R's NA as jsonlite's typed form writes it


def hospitals_by_init(tmp: Path) -> tuple[list[ProvisionedSite], dict[str, str], dict[str, pd.DataFrame]]:
    """The messy corpus's three hospitals as ``dsfed-server init`` makes them from their CSVs under ``tmp``: the
    sites, each one's analyst password, and the records each keeps (pandas)."""
    sites, passwords, kept = [], {}, {}
    for messy in write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37):
        site_dir = tmp / messy.name
        made = dsfed_server("init", str(site_dir), "--csv", str(messy.csv), "--name", messy.name, "--port", "0")
        assert made.returncode == 0, made.stderr
        passwords[messy.name] = re.search(r"analyst \(analyst\): password (\S+)", made.stdout).group(1)
        sites.append(ProvisionedSite(messy.name, site_dir / "site.toml", site_dir / f"{messy.name}-audit.jsonl",
                                     {"analyst": Credential("analyst", "analyst", passwords[messy.name], "")},
                                     site_dir / "site.secret"))
        read = pd.read_csv(messy.csv, na_values=list(NA_SPELLINGS), keep_default_na=False)
        kept[messy.name] = kept_by_pattern(read.assign(sex=read.sex.str.strip()))
    return sites, passwords, kept


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory) -> Any:
    """The sites as ``init`` makes them, served, and what each keeps (pandas)."""
    tmp = tmp_path_factory.mktemp("first-hour")
    sites, passwords, kept = hospitals_by_init(tmp)
    with LocalSites(sites, tmp / "run") as local:
        builder = DSLoginBuilder()
        for site in sites:
            builder.add(site.name, local.urls[site.name], user="analyst", password=passwords[site.name])
        session = DSSession(builder.build())
        session.open()
        try:
            session.assign_table("D", table="main.patients", asynchronous=False)
            yield session, kept
        finally:
            session.close()


def _each(session: DSSession, text: str) -> dict[str, Any]:
    return {site: opal_value(answer) for site, answer in session.aggregate(text, asynchronous=False).items()}


def test_a_mean_and_a_derived_column(first_hour):
    session, kept = first_hour
    for site, answer in _each(session, "meanDS(D$bmi)").items():
        assert answer["EstimatedMean"] == pytest.approx(kept[site].bmi.mean(), rel=1e-12)
        assert (answer["Nvalid"], answer["Nmissing"]) == (kept[site].bmi.notna().sum(), kept[site].bmi.isna().sum())
    session.assign_expr("age2", "D$age*2", asynchronous=False)  # ds.make("D$age*2", "age2")
    for site, answer in _each(session, "meanDS(age2)").items():
        assert answer["EstimatedMean"] == pytest.approx(2 * kept[site].age.mean(), rel=1e-12)


def test_a_table_of_the_stage(first_hour):
    session, kept = first_hour
    table = _each(session, 'tableDS(rvar.transmit = "D$stage", cvar.transmit = NULL, stvar.transmit = NULL, '
                           f'rvar.all.unique.levels.transmit = "{",".join(STAGES)}", cvar.all.unique.levels.transmit = '
                           'NULL, stvar.all.unique.levels.transmit = NULL, exclude.transmit = NULL, '
                           'useNA.transmit = "always", force.nfilter.transmit = NULL)')
    for site, counts in table.items():
        stage = kept[site].stage
        assert list(counts) == [int((stage == s).sum()) for s in STAGES] + [int(stage.isna().sum())]


def test_group_means_of_the_bmi_by_stage_after_the_table(first_hour):
    """The groups are the stage's records with a BMI: at hospital3 the stage-III and stage-IV groups
    differ from the table's cells by the few records of those stages missing their BMI (3 and 1), and
    the site withholds those two groups, and stage II with them (4 in all would still be told apart by the
    mean BMI's Nvalid less the released groups), and releases stage I: its mean, SD and size equal
    pandas' on the records they claim; the withheld groups' figures, ``Nvalid`` and ``Nmissing`` are NA,
    and the message names the groups, the missing values and the rule. The other sites, whose groups
    differ from the cells by none or by at least 5, answer in full. What the withholding protects:
    tests/test_redteam_group_missing.py."""
    session, kept = first_hour
    answers = _each(session, "meanSdGpDS(D$bmi, D$stage)")
    for site, answer in answers.items():
        frame = kept[site].dropna(subset=["stage"])
        lacking = frame.groupby("stage").bmi.apply(lambda bmi: int(bmi.isna().sum()))
        complete = frame.dropna(subset=["bmi"]).groupby("stage").bmi
        shown = [s for s in STAGES if s in complete.groups]
        withheld = [STAGES[int(g) - 1] for g in np.atleast_1d(answer.get("withheld", []))]
        want = [s for s in shown if 0 < lacking[s] < 5]  # each alone told apart by a few missing BMIs
        if 0 < sum(lacking[s] for s in want) < 5:  # together too: the released group missing fewest joins them
            want = sorted([*want, min((s for s in shown if lacking[s] and s not in want), key=lacking.get)],
                          key=STAGES.index)
        assert withheld == want, (site, dict(lacking))
        for at, stage in enumerate(shown):
            if stage in withheld:
                assert [answer[k][at] for k in ("Mean_gp", "StDev_gp", "N_gp")] == [NA] * 3
            else:
                assert answer["Mean_gp"][at] == pytest.approx(complete.mean()[stage], rel=1e-12)
                assert answer["StDev_gp"][at] == pytest.approx(complete.std()[stage], rel=1e-12)
                assert answer["N_gp"][at] == complete.size()[stage]
        if withheld:
            assert (answer["Nvalid"], answer["Nmissing"]) == (NA, NA)
            assert f"{len(withheld)} group(s) withheld ({', '.join(withheld)})" in answer["Message"]
            assert "missing" in answer["Message"] and "disclosure.subset_min_difference" in answer["Message"]
        else:
            assert answer["Nvalid"] == frame.bmi.notna().sum() and answer["Message"] == "All tables valid"
    assert [STAGES[int(g) - 1] for g in answers["hospital3"]["withheld"]] == ["II", "III", "IV"], answers["hospital3"]


def test_a_subset_of_the_older_patients(first_hour):
    session, kept = first_hour
    assert set(_each(session, 'dataFrameSubsetDS1("D", "D$age", "50", 6, NULL, NULL, FALSE)').values()) == {
        "Subsetting undertaken without problems"}
    session.assign_expr("older", 'dataFrameSubsetDS2("D", "D$age", "50", 6, NULL, NULL, FALSE)', asynchronous=False)
    for site, dims in _each(session, "dimDS(older)").items():
        assert list(dims) == [int((kept[site].age >= 50).sum()), kept[site].shape[1]]


def test_a_glm_step_with_a_boolean_covariate(first_hour):
    """glmDS2 at the analyst's coefficients (what ds.glm sends at each iteration): the deviance, score
    and information matrix of ``y ~ bmi + smoker`` (smoker 0/1) equal numpy's on the complete records."""
    session, kept = first_hour
    beta = np.array([-2.0, 0.02, 0.4])
    answers = _each(session, f'glmDS2(y ~ bmi + smoker, "binomial", "{",".join(map(str, beta))}", NULL, NULL, "D")')
    for site, answer in answers.items():
        frame = kept[site].dropna(subset=["y", "bmi", "smoker"])
        x = np.column_stack([np.ones(len(frame)), frame.bmi, frame.smoker.astype(float)])
        mu = 1 / (1 + np.exp(-x @ beta))
        y = frame.y.to_numpy(float)
        assert answer["Nvalid"] == len(frame)
        assert answer["dev"] == pytest.approx(-2 * np.sum(y * np.log(mu) + (1 - y) * np.log(1 - mu)), rel=1e-10)
        np.testing.assert_allclose(np.ravel(answer["score.vect"]), x.T @ (y - mu), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(answer["info.matrix"], dtype=float),
                                   x.T @ (x * (mu * (1 - mu))[:, None]), rtol=1e-9)
