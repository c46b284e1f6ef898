"""``validate()`` keeps what it could compute: on scores that separate the outcomes (every event
scored above 0.5, every non-event below), the calibration slope is infinite and R's ``glm`` does not
converge in its 25 iterations, and the distributed fit is refused where its working weights come to rest on
fewer than q records; the result names that section with the refusal and holds the others, which equal pandas
on the pooled records; so too where the sites refuse one section's function. Three in-process sites under the
shipped default rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_client.report import write_report
from rref import r_eval
from sitekit import make_sites


@pytest.fixture(scope="module")
def separated(tmp_path_factory):
    rng = np.random.default_rng(4)
    frames = {}
    for k, n in enumerate((300, 200, 150)):
        score = np.round(rng.uniform(0.02, 0.98, n), 3)
        # none at 0.5 exactly: the threshold's cell is then the events' (records at 0.5 without the event
        # would be a group the pooled events' count and the cell's count differ by, which the sites refuse)
        score[score == 0.5] = 0.501
        frames[f"site{k + 1}"] = pd.DataFrame({"y": (score > 0.5).astype(int), "score": score})
    tmp = tmp_path_factory.mktemp("separated")
    provisioned, services = make_sites(tmp, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
    return tmp, pd.concat(frames.values(), ignore_index=True), result


def test_a_fit_that_cannot_converge_is_named_and_the_other_sections_stand(separated):
    _, pooled, result = separated
    converged, iterations = r_eval("m <- suppressWarnings(glm(y ~ qlogis(p), family = binomial)); "
                                   "c(m$converged, m$iter)", y=pooled.y.to_numpy(), p=pooled.score.to_numpy())
    assert (bool(converged), int(iterations)) == (False, 25)  # R's glm does not converge either

    assert result.logistic is None
    # the distributed fit's slope grows step by step until, at the smallest site (150 records), the working weights
    # rest on fewer than q records: that site refuses the step (a separated fit's late sums are sums over the few
    # records next to the boundary), naming its rule, and the section is named with that refusal
    why = result.failed["logistic calibration"]
    assert why.startswith("FederatedCallError: ") and "site 'site3', function glmDS2: at this iterate the fit's " \
        "working weights rest on fewer than 5 of the records" in why and "[rule disclosure.q_threshold]" in why
    # the separated scores make the ROC-GLM's slope infinite too: under the noise its fit either does not
    # converge, its information matrix turns singular or a site refuses its step likewise; either way the
    # empirical AUC stands without it
    assert set(result.failed) <= {"logistic calibration", "ROC-GLM", "smooth calibration"}
    for section, why in result.failed.items():
        assert why.startswith("ConvergenceError: ") or "singular" in why or "working weights" in why, (section, why)
    d = result.discrimination
    # pooled, every event is scored above every non-event: the AUC is 1, and the histograms' noise can only
    # pull the estimate below it, by about its standard error
    noise_se = np.sqrt(d.noise_variance)
    assert 0 <= 1.0 - d.auc <= 4 * noise_se
    # the interval carries that error on the AUC's scale (at least 1.96 noise SEs each side, within [0, 1]),
    # and no more than it and the sampling error: not the whole of (0, 1), as the logit scale made it at 1
    assert d.ci.lower <= d.auc - 1.95 * noise_se and d.ci.upper >= min(1.0, d.auc + 1.95 * noise_se)
    assert d.ci.lower >= d.auc - 2.5 * noise_se
    assert d.n_positive == (pooled.y == 1).sum() and d.n_negative == (pooled.y == 0).sum()
    assert ("ROC-GLM" in result.failed) == np.isnan(d.roc_glm_auc)
    assert result.brier.brier == pytest.approx(((pooled.score - pooled.y) ** 2).mean(), rel=1e-12)
    assert result.brier.n == len(pooled)
    events, called = pooled.y == 1, pooled.score >= 0.5
    m = result.threshold_metrics
    assert list(m.thresholds) == [0.5]
    assert m.sensitivity[0] == pytest.approx((called & events).sum() / events.sum(), rel=1e-12)
    assert m.specificity[0] == pytest.approx((~called & ~events).sum() / (~events).sum(), rel=1e-12)
    assert result.curve is not None and result.curve.n.sum() == len(pooled)
    assert result.hl_h is not None and result.hl_c is not None


def test_the_summary_frame_and_report_say_what_is_missing(separated):
    tmp, _, result = separated
    text = result.summary()
    for section, why in result.failed.items():
        assert " ".join(f"NOT COMPUTED: {section}: {why}".split()) in " ".join(text.split())
    frame = result.to_frame()
    assert "calibration slope" not in frame.index and "Brier score" in frame.index
    html = write_report(result, tmp / "partial.html").read_text()
    assert "Not computed: logistic calibration: FederatedCallError" in html
    assert "Brier score" in html and 'data-plot="logistic"' not in html


def test_a_section_the_sites_refuse_is_named_and_the_others_stand(tmp_path):
    """Sites whose rules do not enable ``thresholdBinsDS`` (the shipped default.toml otherwise: a
    site's choice the analyst cannot change) refuse the metrics at thresholds; the validation names
    that section with the sites' rule and computes the rest, equal to pandas where it is exact."""
    import json
    import tomllib

    from sitekit import DEFAULT_RULES, rules_variant

    enabled = tomllib.loads(DEFAULT_RULES.read_text())["functions"]["enabled"]
    rules = rules_variant(tmp_path / "rules.toml", enabled=json.dumps([f for f in enabled if f != "thresholdBinsDS"]))
    rng = np.random.default_rng(7)
    frames = {}
    for k, n in enumerate((300, 200, 150)):
        score = np.round(rng.uniform(0.02, 0.98, n), 3)
        frames[f"site{k + 1}"] = pd.DataFrame({"y": (rng.uniform(size=n) < score).astype(int), "score": score})
    provisioned, services = make_sites(tmp_path, frames, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
    pooled = pd.concat(frames.values(), ignore_index=True)
    assert result.threshold_metrics is None
    assert result.failed["metrics at thresholds"].startswith("FederatedCallError: ")
    assert "functions.enabled" in result.failed["metrics at thresholds"]
    assert result.logistic is not None and result.discrimination is not None and result.hl_c is not None
    assert result.brier.brier == pytest.approx(((pooled.score - pooled.y) ** 2).mean(), rel=1e-12)
    assert result.curve.n.sum() == len(pooled)


def test_a_roc_glm_that_cannot_be_fitted_leaves_the_empirical_auc(tmp_path):
    """Noise off (the test profile: the histograms are exact), scores that separate the outcomes
    put every positive's placement value at 1, so the ROC-GLM's outcome is 1 at every threshold and
    its slope is infinite: the fit fails, and the validation names that fit while the empirical AUC
    stands, pROC's (1: every event is scored above every non-event) to the histogram's resolution."""
    from sitekit import NO_NOISE

    rng = np.random.default_rng(11)
    frames = {}
    for k, n in enumerate((120, 90)):
        score = np.round(rng.uniform(0.02, 0.98, n), 3)
        frames[f"site{k + 1}"] = pd.DataFrame({"y": (score > 0.5).astype(int), "score": score})
    pooled = pd.concat(frames.values(), ignore_index=True)
    provisioned, services = make_sites(tmp_path, frames, rules=NO_NOISE)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        result = validate(session, "D$y", "D$score")
    (auc,) = r_eval("as.numeric(pROC::auc(pROC::roc(y, p, quiet = TRUE, direction = '<')))",
                    y=pooled.y.to_numpy(), p=pooled.score.to_numpy())
    assert auc == 1.0
    # the histogram's bin around 0.5 holds an event and a non-event, a pair the placement counts 1/2
    assert result.discrimination.auc == pytest.approx(auc, abs=1e-3)
    assert np.isnan(result.discrimination.roc_glm_auc)
    why = result.failed["ROC-GLM"]
    assert why.startswith("ConvergenceError: ") or "singular" in why
    frame = result.to_frame()
    assert frame.loc["ROC-GLM AUC", "note"] == f"not computed: {why}"
    assert frame.loc["empirical AUC", "estimate"] == result.discrimination.auc
