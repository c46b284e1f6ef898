"""Heterogeneity across sites: the random-effects meta-analysis against R's ``metafor::rma`` and
``predict.rma`` on fixed numbers; per-site AUC, calibration slope and O/E on the GBSG2 sites over
HTTP (noise off) against pROC, R's glm and the O/E formula per site, pooled as ``metafor::rma``
pools the same per-site estimates; and the note in place of estimates where the sites' rules
refuse per-site releases or there are too few sites.

References: metafor (Viechtbauer 2010) ``rma(yi, sei = sei, method = "REML" | "DL")`` and
``predict``; Riley et al. (2011)'s prediction interval by its formula with R's ``qt(, k - 2)``;
pROC ``auc``/``var(method = "delong")``; R ``glm(y ~ qlogis(p), binomial)`` on each site's records
with 0 < p < 1 (as rms::val.prob); :math:`\\ln(O/E)` with SE :math:`\\sqrt{(1 - O/N)/O}` (Debray et
al. 2017; metamisc's ``oecalc``) computed here from each site's file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client.analyses.heterogeneity import MIN_SITES, ds_heterogeneity
from dsfed_client.analyses.meta import random_effects
from dsfed_client.analyses.suite import validate
from dsfed_client.report import render_report
from dsfed_server.launch import LocalSites
from conftest import GBSG2_SITES, audit_records, http_builder, inprocess_builder, read_site_csv
from rref import r_eval, r_reference
from sitekit import NO_NOISE, make_sites, rules_variant


R_RMA = """
f <- metafor::rma(yi, sei = sei, method = method, control = list(threshold = 1e-12, maxiter = 1000))
p <- predict(f)
k <- length(yi)
half <- qt(0.975, k - 2) * sqrt(f$tau2 + f$se^2)
c(f$b, f$se, f$ci.lb, f$ci.ub, f$tau2, f$I2, f$H2, f$QE, f$QEp, p$pi.lb, p$pi.ub, f$b - half, f$b + half)
"""

CASES = {
    "heterogeneous": ([0.2, 0.5, -0.1, 0.9, 0.4], [0.2, 0.3, 0.25, 0.4, 0.15]),
    "tau2 truncated at 0": ([0.30, 0.31, 0.29, 0.30], [0.2, 0.25, 0.3, 0.22]),
    "unequal, large": ([1.1, 2.3, 0.4, 1.8, 3.0, 0.9, 1.5], [0.3, 0.5, 0.2, 0.45, 0.6, 0.25, 0.35]),
    "three sites": ([-0.5, 0.1, 0.8], [0.1, 0.12, 0.2]),
}


def rma(yi, sei, method: str) -> np.ndarray:
    return r_eval(R_RMA, yi=np.asarray(yi), sei=np.asarray(sei), method=np.array([method]))


def as_row(m) -> list[float]:
    return [m.estimate, m.se, *m.ci, m.tau2, m.i2, m.h2, m.q, m.q_pvalue, *m.pi]


@pytest.mark.parametrize("method", ["REML", "DL"])
@pytest.mark.parametrize("case", list(CASES))
def test_random_effects_equal_metafor_rma(case, method):
    yi, sei = CASES[case]
    ref = rma(yi, sei, method)
    normal = random_effects(yi, sei, method=method)
    np.testing.assert_allclose(as_row(normal), ref[:11], rtol=1e-7, atol=1e-10)
    riley = random_effects(yi, sei, method=method, prediction="t")
    np.testing.assert_allclose(riley.pi, ref[11:], rtol=1e-7, atol=1e-10)
    if case == "tau2 truncated at 0":
        assert normal.tau2 == 0.0 and normal.i2 == 0.0 and normal.h2 == 1.0
        assert normal.pi == pytest.approx(normal.ci)  # no heterogeneity: the prediction interval is the CI
    else:
        assert normal.tau2 > 0
    assert normal.k == len(yi) and normal.to_frame().shape == (len(yi) + 1, 4)
    assert "tau^2" in normal.summary()


def test_random_effects_refuse_what_cannot_be_pooled():
    with pytest.raises(ValueError, match="at least 2 sites"):
        random_effects([0.1], [0.1])
    with pytest.raises(ValueError, match="at least 3 sites"):
        random_effects([0.1, 0.2], [0.1, 0.1], prediction="t")
    with pytest.raises(ValueError, match="standard error finite and positive"):
        random_effects([0.1, 0.2, 0.3], [0.1, 0.0, 0.1])


# --- per-site estimates on the GBSG2 sites over HTTP (noise off) -------------------------------

R_SITE = """
site_ref <- function(y, p) {
  r <- pROC::roc(y, p, levels = c(0, 1), direction = "<", quiet = TRUE)
  i <- p > 0 & p < 1
  f <- glm(y[i] ~ qlogis(p[i]), family = binomial)
  c(as.numeric(pROC::auc(r)), pROC::var(r, method = "delong"), coef(f)[2], sqrt(vcov(f)[2, 2]))
}
"""


@pytest.fixture(scope="module")
def gbsg2_no_noise(tmp_path_factory):
    """The five GBSG2 sites' files under the no-noise profile, as real server processes on loopback."""
    frames = {s: read_site_csv(s)[["y", "score"]] for s in GBSG2_SITES}
    tmp = tmp_path_factory.mktemp("meta-gbsg2")
    prov, _ = make_sites(tmp, frames, rules=NO_NOISE)
    with LocalSites(prov.values(), tmp / "http") as local:
        with http_builder(prov, local.urls).login() as session:
            session.assign_table("D", "P.t")
            yield session, frames


def test_per_site_estimates_equal_R_and_pool_as_metafor(gbsg2_no_noise):
    session, frames = gbsg2_no_noise
    het = ds_heterogeneity(session, "D$y", "D$score", method="paper")
    assert het.available and not het.note and not het.excluded
    table = het.to_frame()
    assert list(table.index) == list(GBSG2_SITES)
    for site, frame in frames.items():
        y, p = frame["y"].to_numpy(float), frame["score"].to_numpy(float)
        auc, var, slope, slope_se = r_reference("site_ref", R_SITE, y=y, p=p)
        row = table.loc[site]
        assert row["auc"] == pytest.approx(auc, rel=1e-10)
        assert row["auc_variance"] == pytest.approx(var, rel=1e-8)
        assert row["auc_logit_se"] == pytest.approx(np.sqrt(var) / (auc * (1 - auc)), rel=1e-8)
        assert row["slope"] == pytest.approx(slope, rel=1e-6)
        assert row["slope_se"] == pytest.approx(slope_se, rel=1e-6)
        o, e, n = y.sum(), p.sum(), y.size
        assert (row["n"], row["events"]) == (n, o)
        assert row["oe"] == pytest.approx(o / e, rel=1e-12)
        assert row["log_oe_se"] == pytest.approx(np.sqrt((1 - o / n) / o), rel=1e-12)
    # the pooled results are metafor's on the same per-site estimates, on the measures' scales
    for m, yi in ((het.auc, np.log(table["auc"] / (1 - table["auc"]))), (het.slope, table["slope"]),
                  (het.oe, np.log(table["oe"]))):
        sei = table[{"AUC": "auc_logit_se", "calibration slope": "slope_se", "O/E": "log_oe_se"}[m.measure]]
        # atol: where tau^2's REML estimate is 0 metafor halves its steps towards it (here to 2e-13)
        np.testing.assert_allclose(as_row(m), rma(yi.to_numpy(), sei.to_numpy(), "REML")[:11], rtol=1e-7, atol=1e-8)
    assert het.auc.estimate_back == pytest.approx(1 / (1 + np.exp(-het.auc.estimate)))
    assert het.oe.ci_back == pytest.approx(tuple(np.exp(het.oe.ci)))
    axes = het.plot()
    assert len(axes) == 3 and [a.get_yticklabels()[0].get_text() for a in axes] == ["site1"] * 3
    data = het.to_dict()
    assert data["auc"]["tau2"] == het.auc.tau2 and len(data["table"]) == len(GBSG2_SITES)


def test_validate_reports_heterogeneity_per_site_and_notes_it_when_pooled(gbsg2_no_noise):
    session, _ = gbsg2_no_noise
    per_site = validate(session, "D$y", "D$score", secure=False, method="paper")
    assert per_site.mode == "per-site"
    alone = ds_heterogeneity(session, "D$y", "D$score", method="paper")
    pd.testing.assert_frame_equal(per_site.heterogeneity.to_frame(), alone.to_frame())
    assert per_site.heterogeneity.auc.tau2 == alone.auc.tau2
    page = render_report(per_site)
    section = page[page.index('<section id="heterogeneity">'):]
    section = section[:section.index("</section>")]
    assert 'data-plot="forest"' in section and section.count('id="forest-pooled') == 3
    assert f"{alone.oe.estimate_back:.4f}" in section
    # pooled by default (every site offers secure aggregation): no per-site release, and the report says so
    pooled = validate(session, "D$y", "D$score", method="paper")
    assert pooled.mode == "pooled" and not pooled.heterogeneity.available
    assert "released pooled results only" in pooled.heterogeneity.note
    assert "No per-site estimates: not asked" in render_report(pooled)


def small_frames(k: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    frames = {}
    for i in range(k):
        y = rng.integers(0, 2, 120)
        frames[f"s{i + 1}"] = pd.DataFrame({"y": y, "score": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 120),
                                                                     0.01, 0.99)})
    return frames


def test_refused_per_site_releases_give_a_note_and_release_nothing(tmp_path):
    """Sites whose rules release brierDS and the like only as secure sums (secure_aggregation.require)
    refuse the per-site estimates: the result says so, naming the rule, and no site released any
    per-site AUC, GLM or score after the refusal (their audit logs)."""
    rules = rules_variant(tmp_path / "rules.toml", require="true")
    prov, services = make_sites(tmp_path / "sites", small_frames(3), rules=rules)
    with inprocess_builder(prov, services).login() as session:
        session.assign_table("D", "P.t")
        het = ds_heterogeneity(session, "D$y", "D$score")
    assert not het.available and het.auc is het.slope is het.oe is None
    assert "per-site estimates not released" in het.note and "secure_aggregation.require" in het.note
    assert all(f"site '{s}'" in het.note for s in prov)
    assert "no per-site estimates" in het.summary()
    for site in prov:
        records = audit_records(prov[site])
        refused = [r for r in records if r["function"] == "brierDS"]
        assert [(r["outcome"], r["rule"]) for r in refused] == [("refused", "secure_aggregation.require")]
        assert not {"scoreHistogramDS", "noisyScoresDS", "glmDS2", "lengthDS"} & {r["function"] for r in records}


def test_fewer_than_three_sites_give_a_note(tmp_path):
    prov, services = make_sites(tmp_path, small_frames(2), rules=NO_NOISE)
    with inprocess_builder(prov, services).login() as session:
        session.assign_table("D", "P.t")
        het = ds_heterogeneity(session, "D$y", "D$score")
    assert not het.available and het.note == f"2 site(s): a random-effects meta-analysis across sites needs at " \
                                              f"least {MIN_SITES}"
    with pytest.raises(ValueError, match="no per-site estimates to plot"):
        het.plot()
