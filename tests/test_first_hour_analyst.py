"""An analyst's first hour on the messy corpus with the native dsfed client, under the shipped default
rules: three sites made from the three hospitals' exports by ``dsfed-server init`` (unreviewed), their
administrators pinning each other's identity keys (``dsfed-server identity``), run as real processes.
A multi-covariate GLM, a subgroup's GLM and mean, and the budget view, each against an independent
reference: R's ``glm`` on the pooled records the sites keep (their exports read with every missing-value
spelling, less the records of a rare pattern of missing values, worked out with pandas: docs/governance.md),
pandas, and the Gaussian mechanism's spending written out independently
(:func:`rref.gaussian_spent_reference`). ``validate()`` and the report on the corpus are in
tests/test_messy_corpus.py and tests/test_report.py; the DataSHIELD user's first hour in
tests/test_first_hour_datashield.py."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dsfed_client import LoginBuilder, RecordsLeftOut, Ref
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.launch import LocalSites
from dsfed_server.messy import NA_SPELLINGS, write_corpus
from dsfed_server.provision import Credential, ProvisionedSite
from rref import gaussian_spent_reference, r_eval
from sitekit import dsfed_server, kept_by_pattern

EPSILON, DELTA, SENSITIVITY = 1.0, 1e-5, 0.2  # disclosure_rules/default.toml [privacy]
BUDGET_EPSILON, BUDGET_DELTA = 5.0, 1e-4  # [budget] epsilon_per_analyst, delta_per_analyst


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory) -> Any:
    """The sites as ``init`` makes them, served, a logged-in session with the table as ``D`` (each site saying
    how many records of a rare missing pattern it leaves out, as many as pandas finds), and what each site
    keeps (pandas)."""
    tmp = tmp_path_factory.mktemp("analyst-first-hour")
    sites, kept = [], {}
    corpus = write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37)
    for messy in corpus:
        site_dir = tmp / messy.name
        made = dsfed_server("init", str(site_dir), "--csv", str(messy.csv), "--name", messy.name, "--port", "0")
        assert made.returncode == 0, made.stderr
        password = re.search(r"analyst \(analyst\): password (\S+)", made.stdout).group(1)
        sites.append(ProvisionedSite(messy.name, site_dir / "site.toml", site_dir / f"{messy.name}-audit.jsonl",
                                     {"analyst": Credential("analyst", "analyst", password, "")},
                                     site_dir / "site.secret"))
        read = pd.read_csv(messy.csv, na_values=list(NA_SPELLINGS), keep_default_na=False)
        kept[messy.name] = kept_by_pattern(read.assign(sex=read.sex.str.strip().str.upper()))
    keys = {}  # each site's identity line, as `dsfed-server identity` prints it for its peers
    for site in sites:
        printed = dsfed_server("identity", str(site.config))
        assert printed.returncode == 0, printed.stderr
        keys[site.name] = next(line for line in printed.stdout.splitlines() if line.startswith("peers."))
    for site in sites:  # docs/site-admin.md, "Secure-aggregation peers": the GLM's rounds need them
        peers = [line for name, line in keys.items() if name != site.name]
        site.config.write_text(site.config.read_text() + "\n[federation]\n" + "\n".join(peers) + "\n")
    with LocalSites(sites, tmp / "run") as local:
        builder = LoginBuilder()
        for site in sites:
            builder.append(site.name, local.urls[site.name], user="analyst",
                           password=site.credentials["analyst"].password)
        with builder.login(warn_budget=False) as session:
            with pytest.warns(RecordsLeftOut) as left_out:
                session.assign_table("D", "main.patients")
            said = sorted(str(w.message).split(" record(s)")[0] for w in left_out)
            assert said == sorted(f"{m.name}: {m.n - len(kept[m.name])}" for m in corpus), said
            yield session, kept


def _r_glm(formula: str, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """R's ``glm(formula, binomial)`` on ``frame``'s complete records: coefficients and standard errors."""
    columns = {name: frame[name].to_numpy() for name in frame.columns}
    source = (f"d <- data.frame({', '.join(f'{c} = {c}' for c in columns)}); "
              f"f <- glm({formula}, family = binomial, data = d); c(coef(f), sqrt(diag(vcov(f))))")
    both = r_eval(source, **columns)
    return both[: both.size // 2], both[both.size // 2:]


def _pooled(kept: dict[str, pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frame = pd.concat(kept.values(), ignore_index=True)[columns].dropna()
    return frame.assign(**{c: frame[c].astype(float) for c in columns if frame[c].dtype == bool})


def test_a_multi_covariate_glm_equals_r_on_the_pooled_complete_records(first_hour):
    """``y ~ age + bmi + smoker + risk_score`` (smoker a boolean, used as 0/1), fitted across the three
    sites: coefficients and standard errors equal R's ``glm`` on the pooled records complete in them."""
    session, kept = first_hour
    fit = ds_glm(session, "y ~ age + bmi + smoker + risk_score", "D", family="binomial")
    pooled = _pooled(kept, ["y", "age", "bmi", "smoker", "risk_score"])
    coef, se = _r_glm("y ~ age + bmi + smoker + risk_score", pooled)
    assert fit.nobs == len(pooled)
    np.testing.assert_allclose(fit.params.to_numpy(dtype=float), coef, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fit.bse.to_numpy(dtype=float), se, rtol=1e-6)


def test_a_subgroup_glm_and_mean_equal_r_and_pandas(first_hour):
    """The patients of 50 or older (``ds.dataFrameSubset``'s ``dataFrameSubsetDS2``): their GLM of
    ``y ~ bmi + smoker`` equals R's on the pooled subgroup's complete records, their pooled mean BMI
    pandas'."""
    session, kept = first_hour
    session.assign_expr("older", 'dataFrameSubsetDS2("D", "D$age", "50", 6, NULL, NULL, FALSE)')
    older = {site: frame[frame.age >= 50] for site, frame in kept.items()}
    fit = ds_glm(session, "y ~ bmi + smoker", "older", family="binomial")
    pooled = _pooled(older, ["y", "bmi", "smoker"])
    coef, se = _r_glm("y ~ bmi + smoker", pooled)
    assert fit.nobs == len(pooled)
    np.testing.assert_allclose(fit.params.to_numpy(dtype=float), coef, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fit.bse.to_numpy(dtype=float), se, rtol=1e-6)
    mean = session.mean("older$bmi")
    assert mean.mean == pytest.approx(pd.concat(older.values()).bmi.mean(), rel=1e-12)


def test_the_budget_view_equals_the_gaussian_mechanisms_spending(first_hour):
    """Noisy releases of the two scores (``noisyScoresDS``, what the pooled ROC and calibration send;
    ``init`` named both score columns), then ``session.budget()``: at every site, the table's
    spent and remaining epsilon and delta equal two releases of the analytic Gaussian (epsilon 1, delta
    1e-5, sensitivity 0.2) composed independently against the analyst's budget (5, 1e-4)."""
    session, _ = first_hour
    before = session.budget()
    for score in ("risk_score", "old_score"):  # the same release again would cost nothing
        session.aggregate("noisyScoresDS", Ref("D$y"), Ref(f"D${score}"))
    after = session.budget()
    spent, spent_delta = gaussian_spent_reference(2, epsilon=EPSILON, delta=DELTA, sensitivity=SENSITIVITY,
                                                  budget_delta=BUDGET_DELTA)
    for site, view in after.items():
        table = {t["table"]: t for t in view["tables"]}["main.patients"]
        earlier = {t["table"]: t for t in before[site]["tables"]}.get("main.patients")
        assert earlier is None or earlier["spent"]["epsilon"] == 0, earlier
        assert table["spent"]["epsilon"] == pytest.approx(spent, rel=1e-3), site
        assert table["spent"]["delta"] == pytest.approx(spent_delta, rel=1e-3), site
        assert table["remaining"]["epsilon"] == pytest.approx(BUDGET_EPSILON - spent, abs=1e-3), site
