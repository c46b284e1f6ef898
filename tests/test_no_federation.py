"""Sites without a ``[federation]`` section (no peer identity keys pinned) do what docs/site-admin.md
says: they answer plain calls and plain GLMs, and refuse secure and pooled releases naming
``secure_aggregation.peers`` and what to do.

A plain native GLM (``ds_glm(secure=False)``) is a relayed protocol where the sites have pinned each
other's keys (they derive every iterate from the parts the others sealed for them); without keys the
client sends each iterate instead and sums each site's parts, as DataSHIELD's ``ds.glm`` does, and
each site applies its rules on analyst coefficients and counts every iterate's parts
(``disclosure.sums_per_record``). DataSHIELD's own ``ds.glm`` loop through ``/ws`` (the PyPI client)
does the same. Two real site servers on loopback under the shipped rules; references: R's ``glm`` on
the pooled records (coefficients, standard errors, deviance, null deviance)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from datashield import DSSession

from conftest import http_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.glm import ANALYST_ITERATES, UNPINNED_NOTE, ds_glm
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision
from opalkit import opal_value
from rref import r_eval
from test_derived_column_attacks import ds_login
from sitekit import DEFAULT_RULES, ROOT, write_table

SIZES = {"north": 400, "south": 300}


def _frames(sizes: dict[str, int]) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    frames = {}
    for site, n in sizes.items():
        x = np.round(rng.normal(size=n), 3)
        g = rng.choice(["a", "b"], size=n)
        eta = 0.2 + 0.9 * x - 0.6 * (g == "b")
        frames[site] = pd.DataFrame({"y": rng.binomial(1, 1 / (1 + np.exp(-eta))), "x": x, "g": g})
    return frames


def _unpinned_sites(tmp: Path, frames: dict[str, pd.DataFrame]):
    spec = {}
    for name, frame in frames.items():
        write_table(tmp / "data" / name, frame)
        spec[name] = (tmp / "data" / name, DEFAULT_RULES)
    provisioned = provision(tmp / "run", spec)
    for site in provisioned.values():  # the [federation] section provision writes, up to the next section
        text = site.config.read_text()
        stripped = re.sub(r"\n\[federation\]\n(?:(?!\[).*\n)*", "\n", text)
        assert "[federation]" in text and "[federation]" not in stripped and "peers." not in stripped
        site.config.write_text(stripped)
    return provisioned


@pytest.fixture(scope="module")
def unpinned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unpinned")
    frames = _frames(SIZES)
    provisioned = _unpinned_sites(tmp, frames)
    with LocalSites(provisioned.values(), tmp / "serve") as sites:
        yield frames, provisioned, dict(sites.urls)


def _r_glm(pooled: pd.DataFrame, formula: str) -> dict[str, np.ndarray]:
    out = r_eval(f"d <- data.frame(y = y, x = x, g = factor(g)); f <- glm({formula}, family = binomial, data = d); "
                 "s <- summary(f); c(coef(f), sqrt(diag(vcov(f))), deviance(f), f$null.deviance, f$iter)",
                 y=pooled.y.to_numpy(), x=pooled.x.to_numpy(), g=pooled.g.to_numpy())
    p = (out.size - 3) // 2
    return {"coef": out[:p], "se": out[p:2 * p], "dev": out[2 * p], "null": out[2 * p + 1], "iter": out[2 * p + 2]}


def test_a_plain_native_glm_equals_r_and_secure_is_refused_naming_the_peers_rule(unpinned):
    frames, provisioned, urls = unpinned
    reference = _r_glm(pd.concat(frames.values(), ignore_index=True), "y ~ x + g")
    with http_builder(provisioned, urls).login() as session:
        session.assign_table("D", "P.t")
        fit = ds_glm(session, "y ~ x + g", "D", family="binomial", secure=False)
        with pytest.raises(FederatedCallError) as refused:
            ds_glm(session, "y ~ x + g", "D", family="binomial", secure=True)
    assert fit.analyst_iterates and ANALYST_ITERATES in " ".join(fit.summary().split())
    assert list(fit.names) == ["(Intercept)", "x", "gb"]
    np.testing.assert_allclose(fit.params, reference["coef"], rtol=1e-9)
    np.testing.assert_allclose(fit.bse, reference["se"], rtol=1e-7)
    assert fit.deviance == pytest.approx(reference["dev"], rel=1e-12)
    assert fit.null_deviance == pytest.approx(reference["null"], rel=1e-12)
    assert fit.iterations == reference["iter"] and fit.nobs == sum(SIZES.values())
    assert set(refused.value.failures) == set(frames)
    for site, error in refused.value.failures.items():
        assert error.rule == "secure_aggregation.peers" and "is not a peer of this site" in error.message, site
        assert "[federation] peers" in error.hint and "secure=False" in error.hint


def _ds_glm_loop(session: DSSession, formula: str) -> tuple[list[str], np.ndarray, float]:
    """dsBaseClient's ds.glm: glmDS1 for the model's size, then beta += I^-1 U from 0 until
    |dev - dev_old| / (|dev| + 0.1) <= 1e-8, run on to 1e-12 so that it meets R's estimate."""
    first = opal_value(session.aggregate(f'glmDS1({formula}, "binomial", NULL, NULL, "D")', asynchronous=False)
                       ["north"])
    beta, dev_old = np.zeros(first["dimX"][1]), 9.99e99
    for _ in range(30):
        text = ",".join(repr(float(b)) for b in beta)
        answers = session.aggregate(f'glmDS2({formula}, "binomial", "{text}", NULL, NULL, "D")', asynchronous=False)
        parts = [opal_value(answer) for answer in answers.values()]
        dev = sum(p["dev"] for p in parts)
        beta = beta + np.linalg.solve(sum(np.asarray(p["info.matrix"]) for p in parts),
                                      sum(np.asarray(p["score.vect"]) for p in parts))[:, 0]
        if abs(dev - dev_old) / (abs(dev) + 0.1) <= 1e-12:
            return list(first["coef.names"]), beta, dev
        dev_old = dev
    raise AssertionError("ds.glm's loop did not converge")


def test_datashield_ds_glm_through_ws_equals_r(unpinned):
    """dsBaseClient's ds.glm loop (glmDS1, then glmDS2 at the client's coefficients from 0), sent by the
    unmodified PyPI DataSHIELD client through /ws."""
    frames, provisioned, urls = unpinned
    reference = _r_glm(pd.concat(frames.values(), ignore_index=True), "y ~ x + g")
    session = ds_login(provisioned, urls)
    try:
        session.assign_table("D", table="P.t", asynchronous=False)
        assert opal_value(session.aggregate("meanDS(D$x)", asynchronous=False)["north"])["EstimatedMean"] \
            == pytest.approx(frames["north"].x.mean(), rel=1e-12)
        names, beta, dev = _ds_glm_loop(session, "y ~ x + g")
    finally:
        session.close()
    assert names == ["(Intercept)", "x", "gb"]
    np.testing.assert_allclose(beta, reference["coef"], rtol=1e-6)
    assert dev == pytest.approx(reference["dev"], rel=1e-9)


def test_a_small_site_refuses_the_analysts_iterates_saying_why_and_what_to_do(tmp_path):
    """On a site of 90 records the iterates' parts pass the site's count of functions per record
    (``disclosure.sums_per_record``) no more: the refusal names it, and the client says that the
    unpinned peers are why the iterates were counted, and what to do."""
    frames = _frames({"north": 120, "south": 90})
    provisioned = _unpinned_sites(tmp_path, frames)
    with LocalSites(provisioned.values(), tmp_path / "serve") as sites:
        with http_builder(provisioned, dict(sites.urls)).login() as session:
            session.assign_table("D", "P.t")
            with pytest.raises(FederatedCallError) as refused:
                ds_glm(session, "y ~ x", "D", family="binomial", secure=False)
    assert {e.rule for e in refused.value.failures.values()} == {"disclosure.sums_per_record"}
    assert UNPINNED_NOTE in refused.value.__notes__ and "pin each other's identity keys" in UNPINNED_NOTE


def test_the_site_admin_guide_says_so():
    guide = " ".join((ROOT / "docs" / "site-admin.md").read_text().split())
    assert "Without a `[federation]` section the site refuses every secure sum" in guide
    assert "the native client's plain GLM (`secure=False`) sends its iterates" in guide
