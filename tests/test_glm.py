"""Distributed GLM (Fisher scoring on summed site parts) against R's glm on the pooled data."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pandas as pd
import pytest

from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from conftest import inprocess_builder
from rref import r_eval
from dsfed_server.modelframe import ModelFrame
from dsfed_server.rowbatches import BATCH_ROWS
from sitekit import make_sites

FACTORS = {"horTh": ["no", "yes"], "menostat": ["Pre", "Post"], "tgrade": ["I", "II", "III"]}


def r_glm(frame: pd.DataFrame, formula: str, family: str, link: str, weights: str | None = None,
          offset: str | None = None) -> dict[str, np.ndarray]:
    """R's glm on the pooled frame: coefficients, standard errors, deviance, iterations."""
    data = {f"v_{c}": frame[c].to_numpy() for c in frame.columns}
    build = ", ".join(
        f"{c} = factor(v_{c}, levels = c({', '.join(repr(l) for l in FACTORS[c])}))" if c in FACTORS else f"{c} = v_{c}"
        for c in frame.columns
    )
    extra = (f", weights = {weights}" if weights else "") + (f", offset = {offset}" if offset else "")
    out = r_eval(
        f"d <- data.frame({build}); d$w_ <- 1; "
        f"f <- glm({formula}, data = d, family = {family}(link = '{link}'){extra}); s <- summary(f); "
        "c(coef(f), s$coefficients[, 2], deviance(f), f$iter)",
        **data,
    )
    p = (out.size - 2) // 2
    return {"coef": out[:p], "se": out[p : 2 * p], "deviance": out[2 * p], "iter": out[2 * p + 1]}


CASES = [
    ("y ~ score + age + tgrade + horTh", "binomial", "logit"),
    ("y ~ score", "binomial", "probit"),
    ("y ~ age + menostat + age:menostat", "binomial", "logit"),
    ("pnodes ~ age + horTh + tsize", "poisson", "log"),
    ("score ~ age + tsize + tgrade", "gaussian", "identity"),
]


@pytest.mark.parametrize("formula,family,link", CASES, ids=[c[0] + "/" + c[2] for c in CASES])
def test_distributed_glm_equals_R(gbsg2_session, gbsg2_pooled, formula, family, link):
    """Per site where every site's model frame passes its rules, and always as a pooled protocol
    (the sites derive every iterate from the pooled parts): R's glm path, iteration by iteration."""
    ref = r_glm(gbsg2_pooled, formula, family, link)
    fits = [ds_glm(gbsg2_session, formula, "D", family=family, link=link, secure=True)]
    if "tgrade" not in formula:  # tgrade I has 3 records at site3: per site it is refused (next test)
        fits.append(ds_glm(gbsg2_session, formula, "D", family=family, link=link))
    for fit in fits:
        np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-8)
        assert fit.deviance == pytest.approx(ref["deviance"], rel=1e-8)
        assert fit.iterations == ref["iter"]
    assert fits[0].sites == tuple(gbsg2_session.sites) and fits[0].pooled
    assert len(fits) == 1 or not fits[1].pooled


def test_a_small_factor_level_is_refused_per_site_and_checked_pooled(gbsg2_session, gbsg2_frames):
    """site3 has 3 patients of tumour grade I, the reference level of tgrade: per site, a model with
    tgrade would release their outcomes through the score and the information matrix, so site3
    refuses it (rule disclosure.q_threshold, naming the level); pooled over the five sites grade I
    holds enough records and the fit is released."""
    assert (gbsg2_frames["site3"].tgrade == "I").sum() == 3
    with pytest.raises(FederatedCallError) as exc:
        ds_glm(gbsg2_session, "y ~ age + tgrade", "D")
    assert set(exc.value.failures) == {"site3"}
    err = exc.value.failures["site3"]
    assert err.rule == "disclosure.q_threshold" and "factor tgrade: level I" in err.message
    assert ds_glm(gbsg2_session, "y ~ age + tgrade", "D", secure=True).nobs == sum(map(len, gbsg2_frames.values()))


@pytest.mark.parametrize("formula,family,link,weights,offset", [
    ("y ~ score + age", "binomial", "logit", "w", None),
    ("pnodes ~ age + horTh", "poisson", "log", None, "logtime"),
    ("score ~ age + tsize", "gaussian", "identity", "w", None),
])
def test_weights_and_offset_equal_R(tmp_path, gbsg2_frames, formula, family, link, weights, offset):
    frames = {}
    for site, frame in gbsg2_frames.items():
        frame = frame[["y", "score", "age", "tsize", "pnodes", "horTh", "time"]].copy()
        frame["w"] = np.round(1 + frame["tsize"] / 50, 3)
        frame["logtime"] = np.log(frame["time"])
        frames[site] = frame
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = r_glm(pooled, formula, family, link, weights=weights, offset=offset)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        fit = ds_glm(session, formula, "T", family=family, link=link, weights=weights, offset=offset)
    np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-8)
    assert fit.deviance == pytest.approx(ref["deviance"], rel=1e-8)


def test_sites_larger_than_a_row_batch_equal_R(tmp_path):
    """A site sums its parts over batches of BATCH_ROWS rows (dsfed_server/rowbatches.py): three sites of
    2.3 batches each, with weights and an offset, give R's glm on the pooled records."""
    rng = np.random.default_rng(29)
    n = BATCH_ROWS * 2 + 20_000
    frames = {}
    for site in ("a", "b", "c"):
        x1, x2 = rng.normal(size=n), rng.uniform(0, 3, n)
        offset = np.round(rng.normal(0, 0.3, n), 4)
        y = rng.binomial(1, 1 / (1 + np.exp(-(-0.5 + 0.8 * x1 - 0.4 * x2 + offset))))
        frames[site] = pd.DataFrame({"y": y, "x1": np.round(x1, 6), "x2": np.round(x2, 6), "o": offset,
                                     "w": rng.integers(1, 4, n)})
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = r_glm(pooled, "y ~ x1 + x2", "binomial", "logit", weights="w", offset="o")
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        fit = ds_glm(session, "y ~ x1 + x2", "T", family="binomial", weights="w", offset="o", secure=True)
    np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8)
    np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-8)
    assert fit.deviance == pytest.approx(ref["deviance"], rel=1e-8)
    assert fit.iterations == ref["iter"]


def test_a_continuous_covariate_with_a_few_zeros_fits_pooled(tmp_path):
    """A continuous covariate that is exactly 0 at three records in all (logit(p) of scores rounded to
    three decimals, three of them 0.5) is no binary variable: the pooled fit counts the values 0 and 1
    only of covariates that take no other value at a site, as the per-site fit does (it refused this
    fit before, 'covariate lp: value 0: fewer than the minimum of 5 pooled over the sites'). The fit
    equals R's glm on the pooled records; a binary covariate with a level held by three records is
    still refused, pooled as per site."""
    rng = np.random.default_rng(37)
    frames = {}
    for site in ("a", "b", "c"):
        p = np.round(rng.uniform(0.05, 0.95, 60), 3)
        p[:1] = 0.5  # one record a site at logit(p) = 0
        p[1:][p[1:] == 0.5] = 0.501
        lp = np.log(p / (1 - p))
        frames[site] = pd.DataFrame({"y": rng.binomial(1, p), "lp": lp, "rare": (np.arange(60) == 1).astype(int)})
    pooled = pd.concat(frames.values(), ignore_index=True)
    assert (pooled.lp == 0).sum() == 3 and pooled.rare.sum() == 3
    ref = r_glm(pooled, "y ~ lp", "binomial", "logit")
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        fit = ds_glm(session, "y ~ lp", "T", family="binomial", secure=True)
        with pytest.raises(FederatedCallError) as refused:
            ds_glm(session, "y ~ lp + rare", "T", family="binomial", secure=True)
    np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8)
    np.testing.assert_allclose(fit.bse, ref["se"], rtol=1e-8)
    assert {f.rule for f in refused.value.failures.values()} == {"disclosure.q_threshold"}
    assert "rare" in str(refused.value)


def test_a_boolean_covariate_is_a_0_1_covariate(tmp_path):
    """A covariate the dictionary declares boolean enters the model as 0/1 (R's glm on the 0/1 column):
    the fit (native, per site and pooled) equals R's, and dsBase's glmDS2 at coefficients the analyst
    sends (ds.glm) is bounded over its declared values 0 and 1 (it was refused before, 'flag has no
    range declared'): its deviance at those coefficients is R's. Sites of 130 records: a step of ds.glm (ten
    functions of each column) is served where the records could answer three (disclosure.sums_per_record)."""
    rng = np.random.default_rng(41)
    frames = {}
    for site in ("a", "b", "c"):
        x, flag = np.round(rng.normal(size=130), 4), rng.uniform(size=130) < 0.4
        frames[site] = pd.DataFrame({"y": rng.binomial(1, 1 / (1 + np.exp(-(0.3 + 0.8 * x - 0.6 * flag)))),
                                     "x": x, "flag": flag})
    pooled = pd.concat(frames.values(), ignore_index=True)
    ref = r_glm(pooled.assign(flag=pooled.flag.astype(int)), "y ~ x + flag", "binomial", "logit")
    beta = [0.1, 0.5, -0.2]
    deviance = r_eval("eta <- b[1] + b[2] * x + b[3] * flag; mu <- plogis(eta); "
                      "-2 * sum(y * log(mu) + (1 - y) * log(1 - mu))",
                      b=np.array(beta), x=pooled.x.to_numpy(), flag=pooled.flag.astype(int).to_numpy(),
                      y=pooled.y.to_numpy())[0]
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        fits = [ds_glm(session, "y ~ x + flag", "T", family="binomial", secure=secure) for secure in (False, True)]
        parts = session.aggregate("glmDS2", "y ~ x + flag", "binomial", beta, None, None, "T")
    for fit in fits:
        np.testing.assert_allclose(fit.params, ref["coef"], rtol=1e-8)
        assert list(fit.names) == ["(Intercept)", "x", "flag"]
    assert sum(part["dev"] for part in parts.values()) == pytest.approx(float(deviance), rel=1e-10)


def test_a_removed_table_leaves_no_model_frame_behind(tmp_path, gbsg2_frames):
    """After a pooled fit on a symbol that is then removed, no site holds the table or a model frame
    of it: not the session's memo, not the step sealed after the last iterate (which the analyst
    never opens). A site serving hospital-sized tables would otherwise keep a copy per fit."""
    provisioned, services = make_sites(tmp_path, gbsg2_frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        fit = ds_glm(session, "y ~ score + age", "T", family="binomial", secure=True)
        assert fit.pooled and fit.iterations > 1
        held = [s for svc in services.values() for s in svc.sessions._sessions.values()]
        tables = [weakref.ref(s.symbols["T"]) for s in held]
        frames = [weakref.ref(value) for s in held for key, (_, value) in s._memo.items() if key[0] == "glm"]
        assert len(frames) == len(held) and all(isinstance(f(), ModelFrame) for f in frames)
        session.remove("T")
        gc.collect()
        assert [t() for t in tables] == [None] * len(held)
        assert [f() for f in frames] == [None] * len(held)


def test_glm_disclosure_rules(tmp_path):
    rng = np.random.default_rng(11)
    n = 30
    big = pd.DataFrame({"y": rng.integers(0, 2, n), "x": rng.normal(size=n), "rare": [1] * 3 + [0] * (n - 3)})
    tiny = pd.DataFrame({"y": [0, 1, 1, 0], "x": [0.1, 0.2, 0.3, 0.4], "rare": [0, 1, 0, 1]})
    provisioned, services = make_sites(tmp_path, {"big": big, "tiny": tiny})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            ds_glm(session, "y ~ x", "T")
        assert exc.value.failures["tiny"].rule == "disclosure.q_threshold"
        assert "big" not in exc.value.failures
        with pytest.raises(FederatedCallError) as exc:  # binary covariate with a level below q
            ds_glm(session, "y ~ x + rare", "T")
        assert exc.value.failures["big"].rule == "disclosure.q_threshold"
        assert "binary covariate rare" in exc.value.failures["big"].message
    sat = pd.DataFrame({"y": [0, 1] * 7 + [0], **{f"x{j}": rng.normal(size=15) for j in range(4)}})
    provisioned, services = make_sites(tmp_path / "sat", {"sat": sat})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        # the model's checks (dsBase's glmDS1): the fit itself, relayed over this one site, would give its
        # records 15 functions of each column (disclosure.sums_per_record)
        session.aggregate("glmDS1", "y ~ x0 + x1 + x2", "binomial", None, None, "T")  # 4 parameters <= 0.33 x 15
        with pytest.raises(FederatedCallError) as exc:  # 5 parameters > 0.33 x 15
            session.aggregate("glmDS1", "y ~ x0 + x1 + x2 + x3", "binomial", None, None, "T")
        assert exc.value.failures["sat"].rule == "disclosure.glm_saturation"
        with pytest.raises(FederatedCallError) as exc:
            ds_glm(session, "y ~ x0 + x1 + x2", "T")
        assert exc.value.failures["sat"].rule == "disclosure.sums_per_record"
