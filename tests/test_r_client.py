"""The unmodified R DataSHIELD client (DSI 1.7.1, DSOpal 1.4.1, opalr 3.5.2, dsBaseClient 6.3.4)
against the five GBSG2 sites on loopback, as a DataSHIELD user writes a first hour in R
(tests/r_client_session.R, run by Rscript): DSLoginBuilder + datashield.login(assign = TRUE), the
ds.* calls, datashield.methods / pkg_status, a token login and datashield.logout. Each result equals
R on the pooled data (or, for a per-site part, on that site's data), or is refused naming the rule
and the records it protects, the message reaching the R user through datashield.errors(). The
session runs twice: on sites without a release history, where every call is compared with R, and on
sites under the demo's rules files as shipped, where each call gives the same or is refused naming the
rule (ds.glm at its second iteration, its first counted one, disclosure.sums_per_record).

The R library comes from ../shared/tools/r-datashield-client/install.sh (``make r-client-deps``
puts it in .r-datashield/; DSFED_R_CLIENT_LIB names another). Without it this test fails, saying
how to install it: it never passes without running the client."""

from __future__ import annotations

import json
import os
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, ROOT, RULES, audit_records, without_cut_history
from dsfed_server.launch import LocalSites
from dsfed_server.provision import ProvisionedSite, provision
from rref import r_eval

R_LIB = Path(os.environ.get("DSFED_R_CLIENT_LIB", ROOT / ".r-datashield"))
SESSION = Path(__file__).with_name("r_client_session.R")
Q = 5  # the GBSG2 sites' q_threshold
INSTALL_HINT = ("the R DataSHIELD client is not installed in {lib}: run `make r-client-deps` (it runs "
                "../shared/tools/r-datashield-client/install.sh {lib}), or in R: install.packages(c('DSI', 'DSOpal', "
                "'dsBaseClient'), repos = c(getOption('repos'), 'http://cran.datashield.org'), lib = '{lib}') (README, "
                "'Using dsfed from R')")


def _client_installed() -> bool:
    check = subprocess.run(
        ["Rscript", "--vanilla", "-e", ".libPaths(c(commandArgs(TRUE)[1], .libPaths())); "
         "suppressPackageStartupMessages({library(DSI); library(DSOpal); library(dsBaseClient)})", str(R_LIB)],
        capture_output=True, text=True, timeout=120)
    return check.returncode == 0


@contextmanager
def running_sites(tmp_path_factory: pytest.TempPathFactory, label: str,
                  shipped: bool) -> Iterator[tuple[dict[str, ProvisionedSite], dict[str, str]]]:
    """Five GBSG2 sites provisioned afresh for one R session: under the demo's rules as shipped, or
    (``shipped`` False) as in conftest, without the cut history. Fresh, because the release gate
    remembers every subset, cell and sum an account was given: sites other tests have used would
    refuse this session's releases as differences of theirs."""
    run = tmp_path_factory.mktemp(label)
    (run / "rules").mkdir()
    rules = {s: RULES / f"{s}.toml" if shipped
             else without_cut_history(RULES / f"{s}.toml", run / "rules" / f"{s}.toml") for s in GBSG2_SITES}
    provisioned = provision(run, {s: (FIXTURES / s, rules[s]) for s in GBSG2_SITES})
    with LocalSites(provisioned.values(), tmp_path_factory.mktemp(f"{label}-run")) as sites:
        yield provisioned, dict(sites.urls)


@pytest.fixture(scope="module")
def r_sites(tmp_path_factory) -> Iterator[tuple[dict[str, ProvisionedSite], dict[str, str]]]:
    """The five GBSG2 sites without a release history: the first hour's calls release cuts and
    subsets on age that the history would weigh against each other (the shipped rules' outcome is
    checked by ``shipped_session``); every call here is compared with R."""
    with running_sites(tmp_path_factory, "r-client-sites", shipped=False) as sites:
        yield sites


@pytest.fixture(scope="module")
def r_client_lib() -> Path:
    """The R library holding the client; its absence fails the tests, saying how to install it."""
    if not _client_installed():
        pytest.fail(INSTALL_HINT.format(lib=R_LIB), pytrace=False)
    return R_LIB


def run_session(lib: Path, provisioned: dict[str, ProvisionedSite], urls: dict[str, str],
                work: Path) -> dict[str, Any]:
    """Every call's outcome in one R session (tests/r_client_session.R) over the sites."""
    sites = {}
    for name in GBSG2_SITES:
        cred = provisioned[name].credentials["analyst"]
        # opalr refuses plain http to any host but localhost
        url = urls[name].replace("127.0.0.1", "localhost")
        sites[name] = {"url": url, "user": cred.user, "password": cred.password, "token": cred.token}
    config = work / "config.json"
    config.write_text(json.dumps({"lib": str(lib), "sites": sites, "table": "GBSG2.validation"}))
    out = work / "out.json"
    run = subprocess.run(["Rscript", "--vanilla", str(SESSION), str(config), str(out)], capture_output=True,
                         text=True, timeout=900, cwd=work)
    assert run.returncode == 0 and out.exists(), run.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def session(r_client_lib, r_sites, tmp_path_factory) -> dict[str, Any]:
    """Every call's outcome in one R session over the five sites without a release history."""
    provisioned, urls = r_sites
    return run_session(r_client_lib, provisioned, urls, tmp_path_factory.mktemp("r-client"))


@pytest.fixture(scope="module")
def shipped_session(r_client_lib, tmp_path_factory) -> dict[str, Any]:
    """The same session on five fresh sites under the demo's rules files as shipped, unchanged."""
    with running_sites(tmp_path_factory, "r-client-shipped", shipped=True) as (provisioned, urls):
        return run_session(r_client_lib, provisioned, urls, tmp_path_factory.mktemp("r-client-shipped-session"))


def ran(session: dict[str, Any], label: str) -> Any:
    outcome = session[label]
    assert outcome["errors"] is None and outcome["value"] is not None, (label, outcome)
    return outcome["value"]


def refused(session: dict[str, Any], label: str, rule: str) -> dict[str, str]:
    """The sites' messages of a refused call (the client held no result)."""
    outcome = session[label]
    assert outcome["value"] is None and outcome["errors"], (label, outcome)
    for site, message in outcome["errors"].items():
        assert f"site '{site}'" in message and f"[rule {rule}]" in message, message
    return outcome["errors"]


def r_num(source: str, **data: Any) -> np.ndarray:
    return np.asarray(r_eval(source, **data), dtype=float)


def test_login_assigns_D_everywhere(session):
    assert ran(session, "login") == list(GBSG2_SITES)
    assert all("D" in objects for objects in ran(session, "ls").values())


def test_dim_length_colnames_class(session, gbsg2_frames, gbsg2_pooled):
    dims = ran(session, "dim")
    for site, frame in gbsg2_frames.items():
        assert dims[f"dimensions of D in {site}"] == list(frame.shape)
    assert dims["dimensions of D in combined studies"] == list(gbsg2_pooled.shape)
    assert ran(session, "length") == len(gbsg2_pooled)
    assert all(names == list(gbsg2_pooled.columns) for names in ran(session, "colnames").values())
    classes = ran(session, "class")
    # the data dictionary: age an integer, tgrade a category (a factor), score a decimal
    assert set(classes["age"].values()) == {"integer"} and set(classes["tgrade"].values()) == {"factor"}
    assert set(classes["score"].values()) == {"numeric"}


def test_mean_split_and_combined_equal_R(session, gbsg2_frames, gbsg2_pooled):
    mean = ran(session, "mean")
    for site, frame in gbsg2_frames.items():
        assert mean["split"][site] == pytest.approx(r_num("mean(x)", x=frame["age"])[0], rel=1e-14)
    assert mean["combine"] == pytest.approx(r_num("mean(x)", x=gbsg2_pooled["age"])[0], rel=1e-14)


def test_var_equals_R(session, gbsg2_frames, gbsg2_pooled):
    var = ran(session, "var")
    for site, frame in gbsg2_frames.items():
        assert var["split"][site] == pytest.approx(r_num("var(x)", x=frame["score"])[0], rel=1e-12)
    assert var["combine"] == pytest.approx(r_num("var(x)", x=gbsg2_pooled["score"])[0], rel=1e-12)


def test_quantileMean_combines_site_quantiles(session, gbsg2_frames, gbsg2_pooled):
    got = ran(session, "quantileMean")
    probs = "c(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)"
    n = np.array([len(f) for f in gbsg2_frames.values()], dtype=float)
    per_site = np.array([r_num(f"quantile(x, {probs})", x=f["age"]) for f in gbsg2_frames.values()])
    want = (per_site * n[:, None]).sum(axis=0) / n.sum()  # dsBaseClient's combination: weighted by site size
    np.testing.assert_allclose([got[k] for k in list(got)[:7]], want, rtol=1e-13)
    assert got["Mean"] == pytest.approx(r_num("mean(x)", x=gbsg2_pooled["age"])[0], rel=1e-14)


def test_summary_per_site_equals_R(session, gbsg2_frames):
    summary = ran(session, "summary")
    for site, frame in gbsg2_frames.items():
        s = summary[site]
        assert (s["class"], s["length"]) == ("integer", len(frame))
        want = r_num("c(quantile(x, c(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)), mean(x))", x=frame["age"])
        np.testing.assert_allclose(list(s["quantiles"].values()), want, rtol=1e-13)


def test_table_1d_and_2d_equal_R_or_are_refused(session, gbsg2_frames, gbsg2_pooled):
    one = ran(session, "table1")
    want = r_num("as.vector(table(factor(x, levels = c('Pre', 'Post')), useNA = 'always'))",
                 x=gbsg2_pooled["menostat"].astype(str))
    assert [one["Pre"], one["Post"], one["NA"]] == list(want)
    two = ran(session, "table2")
    want2 = pd.crosstab(gbsg2_pooled["y"], gbsg2_pooled["cens"])
    r_want = r_num("as.vector(table(a, b))", a=gbsg2_pooled["y"], b=gbsg2_pooled["cens"])
    np.testing.assert_array_equal(want2.to_numpy().ravel(order="F"), r_want)
    got = np.array(two["counts"])[:2, :2]  # the NA row and column follow, empty
    np.testing.assert_array_equal(got, want2.to_numpy())
    assert np.array(two["counts"])[2:, :].sum() == 0 and np.array(two["counts"])[:, 2:].sum() == 0
    # tgrade I is held by 3 records at site3: the level cannot be told there
    errors = refused(session, "table1_refused", "disclosure.q_threshold")
    assert set(errors) == {s for s, f in gbsg2_frames.items() if f["tgrade"].value_counts().min() < Q}
    assert "level 'I'" in errors["site3"]
    errors2 = refused(session, "table2_refused", "disclosure.q_threshold")
    small = {s for s, f in gbsg2_frames.items()
             if ((c := pd.crosstab(f["menostat"], f["horTh"]).to_numpy()) > 0).any() and ((c > 0) & (c < Q)).any()}
    assert set(errors2) == small and "non-zero cell below the minimum count of 5" in next(iter(errors2.values()))


def test_histogram_equals_R_or_is_refused(session, gbsg2_pooled):
    hist = ran(session, "histogram")
    breaks = np.array(hist["breaks"], dtype=float)
    want = r_num("hist(x, breaks = b, plot = FALSE)$counts", x=gbsg2_pooled["age"], b=breaks)
    assert hist["counts"] == list(want)
    refused(session, "histogram_refused", "bins.small_bin_policy")


def test_data_management_calls(session, gbsg2_pooled, gbsg2_frames):
    assert ran(session, "asFactor") == ["0", "1"]
    assert set(ran(session, "asFactor_class").values()) == {"factor"}
    assert "has been created in all specified data sources" in ran(session, "asNumeric")
    # dsBase's asNumericDS: as.numeric(as.character(x)) of the factor
    values = r_num("mean(as.numeric(as.character(factor(x))))", x=gbsg2_pooled["cens"])
    assert ran(session, "asNumeric_mean") == pytest.approx(values[0], rel=1e-14)
    assert "has been created" in ran(session, "make")
    assert ran(session, "make_mean") == pytest.approx(r_num("mean(x * 2)", x=gbsg2_pooled["age"])[0], rel=1e-14)
    older = int(r_num("sum(x > 60)", x=gbsg2_pooled["age"])[0])
    assert "has been created" in ran(session, "dataFrameSubset")
    assert ran(session, "dataFrameSubset_dim") == [older, gbsg2_pooled.shape[1]]
    # age > 75 holds 0 to 4 records at each site: the subset would single them out
    refused(session, "dataFrameSubset_refused", "disclosure.subset_min")
    assert ran(session, "subset") == "assigned"
    assert ran(session, "subset_length") == int(r_num("sum(x >= 48)", x=gbsg2_pooled["age"])[0])
    assert "has been created" in ran(session, "completeCases")
    numeric = {c: gbsg2_pooled[c] for c in gbsg2_pooled.columns if gbsg2_pooled[c].dtype.kind in "if"}
    complete = int(r_num(f"sum(complete.cases(data.frame({', '.join(numeric)})))", **numeric)[0])
    assert gbsg2_pooled.select_dtypes(exclude="number").notna().all().all()  # the text columns have no NA
    assert ran(session, "completeCases_dim") == [complete, gbsg2_pooled.shape[1]]
    objects = ran(session, "ls_after")
    for site in GBSG2_SITES:
        assert {"D", "censF", "censN", "age2", "older", "sub48", "Dc"} <= set(objects[site])
    assert set(ran(session, "rm").values()) == {"Object <age2> successfully deleted"}
    for site, names in ran(session, "ls_after_rm").items():
        assert set(names) == set(objects[site]) - {"age2"}


def test_cor_equals_R(session, gbsg2_pooled):
    cor = ran(session, "cor")
    assert cor["r"] == pytest.approx(r_num("cor(a, b)", a=gbsg2_pooled["age"], b=gbsg2_pooled["score"])[0], rel=1e-12)
    assert cor["n"] == len(gbsg2_pooled)


def test_tapply_per_site_equals_R(session, gbsg2_frames):
    tapply = ran(session, "tapply")
    for site, frame in gbsg2_frames.items():
        want = r_num("tapply(s, factor(g, levels = c('Pre', 'Post')), mean)", s=frame["score"],
                     g=frame["menostat"].astype(str))
        assert list(tapply[site]["mean"].values()) == pytest.approx(list(want), rel=1e-13)
        assert list(tapply[site]["mean"]) == ["D$menostat.Pre", "D$menostat.Post"]


def test_meanSdGp_combined_equals_R(session, gbsg2_frames, gbsg2_pooled):
    """Means by group pooled exactly; the SD is dsBaseClient's combination of the sites' SDs (the
    n-weighted mean of the sites' variances, not the pooled data's SD), from R's sd at each site."""
    got = ran(session, "meanSdGp")
    g = gbsg2_pooled["horTh"].astype(str)
    mean = r_num("tapply(x, factor(g, levels = c('no', 'yes')), mean)", x=gbsg2_pooled["age"], g=g)
    assert list(got["mean"].values()) == pytest.approx(list(mean), rel=1e-12)
    sds = np.array([r_num("tapply(x, factor(g, levels = c('no', 'yes')), sd)", x=f["age"], g=f["horTh"].astype(str))
                    for f in gbsg2_frames.values()])
    ns = np.array([[int((f["horTh"] == level).sum()) for level in ("no", "yes")] for f in gbsg2_frames.values()])
    assert list(got["sd"].values()) == pytest.approx(list(np.sqrt((sds**2 * ns).sum(axis=0) / ns.sum(axis=0))),
                                                     rel=1e-12)
    assert list(got["n"].values()) == [int((g == "no").sum()), int((g == "yes").sum())]


R_DS_GLM = """
# dsBaseClient's ds.glm loop on the pooled data, written here from its source (R/ds.glm.R): Fisher
# scoring from beta = 0, the information and score at the current beta, stopping when
# |dev - dev.old| / (|dev| + 0.1) <= 1e-8; the standard errors come from the information matrix of
# the last iteration (at the beta before the last update)
X <- cbind(1, score, age); beta <- rep(0, 3); dev.old <- 9.99e+99
repeat {
  mu <- plogis(drop(X %*% beta)); w <- mu * (1 - mu)
  info <- t(X) %*% (X * w); u <- t(X) %*% (y - mu); dev <- sum(binomial()$dev.resids(y, mu, 1))
  vc <- solve(info); beta <- beta + drop(vc %*% u)
  if (abs(dev - dev.old) / (abs(dev) + 0.1) <= 1e-8) break
  dev.old <- dev
}
c(beta, sqrt(diag(vc)), dev)
"""


def test_glm_equals_pooled_R(session, gbsg2_pooled):
    fit = ran(session, "glm")
    data = {"y": gbsg2_pooled["y"], "score": gbsg2_pooled["score"], "age": gbsg2_pooled["age"]}
    loop = r_num(R_DS_GLM, **data)
    got = np.array(fit["coefficients"])
    assert fit["names"] == ["(Intercept)", "score", "age"]
    np.testing.assert_allclose(got[:, 0], loop[:3], rtol=1e-10)
    np.testing.assert_allclose(got[:, 1], loop[3:6], rtol=1e-10)
    assert fit["dev"] == pytest.approx(loop[6], rel=1e-12) and fit["df"] == len(gbsg2_pooled) - 3
    # and R's glm: the same fit to its convergence tolerance (the standard errors, taken one step
    # earlier by ds.glm, to 1e-4)
    glm = r_num("f <- glm(y ~ score + age, family = binomial); c(coef(f), sqrt(diag(vcov(f))))", **data)
    np.testing.assert_allclose(got[:, 0], glm[:3], rtol=1e-6)
    np.testing.assert_allclose(got[:, 1], glm[3:], rtol=1e-4)


def test_glmSLMA_equals_R_per_site_and_metafor(session, gbsg2_frames):
    glmSLMA_equals_R(ran(session, "glmSLMA"), gbsg2_frames)


def glmSLMA_equals_R(fit: dict[str, Any], gbsg2_frames: dict[str, pd.DataFrame]) -> None:
    """ds.glmSLMA's per-site estimates are R's glm on each site's records; the fixed-effect pooling
    is the inverse-variance weighting of them."""
    assert fit["names"] == ["(Intercept)", "score", "age"]
    betas, ses = np.array(fit["betas"]), np.array(fit["ses"])
    for k, frame in enumerate(gbsg2_frames.values()):
        want = r_num("f <- glm(y ~ score + age, family = binomial); c(coef(f), sqrt(diag(vcov(f))))",
                     y=frame["y"], score=frame["score"], age=frame["age"])
        np.testing.assert_allclose(betas[:, k], want[:3], rtol=1e-7)
        np.testing.assert_allclose(ses[:, k], want[3:], rtol=1e-7)
    # the fixed-effect pooling, written out (inverse-variance weights), against metafor's column
    weights = 1 / ses**2
    fixed = (betas * weights).sum(axis=1) / weights.sum(axis=1)
    pooled = np.array(fit["pooled"])
    np.testing.assert_allclose(pooled[:, 4], fixed, rtol=1e-10)
    np.testing.assert_allclose(pooled[:, 5], 1 / np.sqrt(weights.sum(axis=1)), rtol=1e-10)


def test_methods_and_package_status(session, r_sites):
    from dsfed_server.service import SiteService

    methods = ran(session, "methods")
    assert methods["servers"] == sorted(GBSG2_SITES)
    site1 = r_sites[0]["site1"]
    service = SiteService.from_config_file(site1.config)
    analyst = service.login_password(site1.credentials["analyst"].user, site1.credentials["analyst"].password)
    enabled = sorted(f["name"] for f in service.functions(analyst)["functions"] if f["kind"] == "aggregate")
    assert set(enabled) <= set(methods["names"]) and {"meanDS", "glmDS2", "glmSLMADS2"} <= set(methods["names"])
    status = ran(session, "pkg_status")
    assert status == {"packages": ["dsfed"], "installed": True}


def test_token_login_with_variables_and_logout(session, gbsg2_pooled, r_sites):
    """A token login assigning three variables (DSOpal's name().any('age','y','score'))."""
    assert ran(session, "token_dim") == [len(gbsg2_pooled), 3]
    assert all(names == ["age", "y", "score"] for names in ran(session, "token_colnames").values())
    assert ran(session, "logout") == "done" and ran(session, "token_logout") == "done"
    for site in GBSG2_SITES:
        records = audit_records(r_sites[0][site])
        signins = [r for r in records if r["function"] == "signIn" and r["user"] == "analyst"]
        signouts = [r for r in records if r["function"] == "signOut" and r["user"] == "analyst"]
        assert len(signins) == len(signouts) == 2  # the password and the token sign-in, both ended
        closed = [r for r in records if r["function"] == "closeSession" and r["user"] == "analyst"]
        assert closed and closed[-1]["outcome"] == "ok"


# --- the same session under the demo's rules as shipped (a release history kept) -----------------

R_FISHER_STEPS = """
# ds.glm's iterates on the pooled data (R/ds.glm.R): Fisher scoring from beta = 0
X <- cbind(1, score, age); beta <- rep(0, 3)
for (k in seq_len(steps)) {
  mu <- plogis(drop(X %*% beta)); w <- mu * (1 - mu)
  beta <- beta + drop(solve(t(X) %*% (X * w), t(X) %*% (y - mu)))
}
beta
"""
# calls whose sites' answers involve no cut of a numeric column and no subset: the same outcome under
# every site secret (the cut margin is drawn with it)
NO_CUTS = ("login", "ls", "dim", "length", "colnames", "class", "mean", "var", "quantileMean", "summary", "table1",
           "table2", "asFactor", "asFactor_class", "asNumeric", "asNumeric_mean", "make", "make_mean",
           "completeCases", "completeCases_dim", "cor", "tapply", "meanSdGp", "glmSLMA", "methods", "pkg_status",
           "logout", "token_dim", "token_colnames", "token_logout")
RULE_NAMED = re.compile(r"\[rule [a-z_]+\.[a-z_]+\]")
CREATES = {"asFactor": "censF", "asNumeric": "censN", "make": "age2", "dataFrameSubset": "older", "subset": "sub48",
           "completeCases": "Dc"}


def test_shipped_rules_refuse_ds_glm_where_its_sums_would_read_records(shipped_session, gbsg2_pooled):
    """Under the shipped rules each site counts the exact sums ds.glm's iterations release
    (disclosure.sums_per_record, a quarter of a group's records in functions beyond its second
    moments): the start at beta = 0 has constant weights and is not counted; each later iteration gives
    ten functions, and three of them (the fewest a fit needs) do not fit in 45 to 55 records, so the
    second iteration is refused before anything is counted, leaving the table's count to ds.glmSLMA
    (released next). Every site refuses it, naming the rule and the fits that stand, and the message
    reaches the R user through datashield.errors(); the refused command carries R's first
    Fisher-scoring iterate on the pooled data, so the start was released and summed as R sums it."""
    errors = refused(shipped_session, "glm", "disclosure.sums_per_record")
    assert set(errors) == set(GBSG2_SITES)
    want = r_num(R_FISHER_STEPS, steps=[1], y=gbsg2_pooled["y"], score=gbsg2_pooled["score"], age=gbsg2_pooled["age"])
    for message in errors.values():
        assert "function glmDS2" in message and "ds.glmSLMA" in message and "at least 3 releases" in message
        sent = re.search(r'glmDS2\(y ~ score \+ age, "binomial", "([^"]+)"', message)
        assert sent is not None, message
        np.testing.assert_allclose([float(b) for b in sent.group(1).split(",")], want, rtol=1e-10)


def test_shipped_rules_release_ds_glmSLMA_equal_to_R(shipped_session, gbsg2_frames):
    glmSLMA_equals_R(ran(shipped_session, "glmSLMA"), gbsg2_frames)


def test_shipped_rules_histogram_is_Rs_or_coarsened_as_the_sites_say(shipped_session, gbsg2_frames):
    """ds.histogram(type = "combine") under the shipped rules: refused naming a rule, or the sum of
    the sites' answers, where each bin a site released as asked is R's hist() count on its records
    and each run of bins it merged (listed in its answer, with why) holds R's count of that run,
    spread over it. dsBaseClient's combine drops the sites' invalidcells: the R user sees the merge
    only with type = "split" (a warning per site) or in the sites' answers."""
    outcome = shipped_session["histogram"]
    if outcome["errors"]:
        assert outcome["value"] is None
        for site, message in outcome["errors"].items():
            assert f"site '{site}'" in message and RULE_NAMED.search(message), message
        return
    breaks = np.array(outcome["value"]["breaks"], dtype=float)
    sites = ran(shipped_session, "histogram_sites")
    np.testing.assert_allclose(outcome["value"]["counts"], np.sum([s["counts"] for s in sites.values()], axis=0),
                               rtol=1e-14)
    for site, answer in sites.items():
        counts = np.array(answer["counts"], dtype=float)
        want = r_num("hist(x, breaks = b, plot = FALSE)$counts", x=gbsg2_frames[site]["age"], b=breaks)
        merged = np.array([any(lo <= breaks[i] and breaks[i + 1] <= hi for lo, hi in answer["merged"])
                           for i in range(len(counts))])
        assert answer["invalidcells"] == merged.sum()
        np.testing.assert_array_equal(counts[~merged], want[~merged])
        run_ids = np.cumsum(np.diff(np.concatenate([[0], merged.astype(int)])) == 1)
        for k in set(run_ids[merged]):
            in_run = merged & (run_ids == k)
            assert counts[in_run].sum() == pytest.approx(want[in_run].sum(), rel=1e-14)


def test_shipped_rules_each_call_as_without_history_or_refused_naming_the_rule(shipped_session, session):
    """Every other call of the first hour under the shipped rules gives what it gives on sites without
    a release history (which the tests above compare with R), or is refused at a site naming the
    site and the rule, through datashield.errors(); a call on an object whose assignment was refused
    at a site fails there naming the missing symbol. Calls involving no cut or subset are released."""
    missing: dict[str, set[str]] = {site: set() for site in GBSG2_SITES}
    for label, name in CREATES.items():
        for site in shipped_session[label]["errors"] or {}:
            missing[site].add(name)
    for label, outcome in shipped_session.items():
        if label in ("glm", "histogram", "histogram_sites"):
            continue  # the tests above
        if outcome["errors"]:
            for site, message in outcome["errors"].items():
                assert f"site '{site}'" in message, message
                assert RULE_NAMED.search(message) or any(
                    f"no symbol '{name}'" in message for name in missing[site]), (label, message)
        elif label in ("ls_after", "ls_after_rm"):
            for site, names in outcome["value"].items():
                assert set(names) <= set(session[label]["value"][site])
                assert set(session[label]["value"][site]) - set(names) <= missing[site], (label, site)
        else:
            assert outcome["value"] == session[label]["value"], label
    for label in NO_CUTS:
        ran(shipped_session, label)
