"""Analyses keep their server-side intermediates under names of their own.

Before: every noisy reference was stored as ``dsfed.ref``, so a reference kept for a later
``ds_auc(..., reference=ref)`` was silently replaced by the next analysis' (AUC 0.045 instead of
0.686 on GBSG2). Now a reference carries its own symbol (and stays, so that it can be reused), and
an analysis' temporary frames are removed when it ends. Noise off, checked against pROC on the pooled data.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.calibration import ds_logistic_calibration
from dsfed_client.analyses.curves import ds_hist_auc, ds_score_histograms
from dsfed_client.analyses.discrimination import ds_auc, ds_roc_glm, pooled_noisy_scores
from rref import R_PROC, r_reference
from sitekit import ROOT, make_sites
from test_curves import grid_frames

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"


@pytest.fixture(scope="module")
def gbsg2(tmp_path_factory):
    """GBSG2 with a second score, age / 100, declared a score column (noise off)."""
    tmp = tmp_path_factory.mktemp("handles")
    frames = {}
    for site in GBSG2_SITES:
        frame = pd.read_csv(FIXTURES / site / "GBSG2" / "validation.csv")
        frames[site] = pd.DataFrame({"y": frame.y, "score": frame.score, "age": frame.age / 100})
    rules = tmp / "rules.toml"
    text = NO_NOISE.read_text()
    assert text.count('score_columns = ["score"]') == 1
    rules.write_text(text.replace('score_columns = ["score"]', 'score_columns = ["score", "age"]'))
    provisioned, services = make_sites(tmp, frames, rules=rules)
    pooled = pd.concat(frames.values(), ignore_index=True)
    return provisioned, services, pooled


def test_a_kept_reference_survives_later_analyses(gbsg2):
    provisioned, services, pooled = gbsg2
    auc_score = r_reference("proc_ref", R_PROC, y=pooled.y.to_numpy(), p=pooled.score.to_numpy())[0]
    auc_age = r_reference("proc_ref", R_PROC, y=pooled.y.to_numpy(), p=pooled.age.to_numpy())[0]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        kept = pooled_noisy_scores(session, "D$y", "D$score")
        other = pooled_noisy_scores(session, "D$y", "D$age")  # before: overwrote the kept one
        ds_roc_glm(session, "D$y", "D$age")
        assert other.symbol != kept.symbol
        assert ds_auc(session, "D$y", "D$score", reference=kept).auc == pytest.approx(auc_score, rel=1e-10)
        assert ds_auc(session, "D$y", "D$age", reference=other).auc == pytest.approx(auc_age, rel=1e-10)


def test_a_stale_handle_is_an_error_never_a_wrong_answer(gbsg2):
    """The issue's reproduction: a reference kept for ``ds_auc(..., reference=ref)`` whose symbol was
    replaced in the meantime (here by hand, under the same name) used to give another AUC silently
    (0.045 instead of 0.686). Now every site refuses the call, naming the symbol; removed, the same."""
    provisioned, services, _ = gbsg2
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        kept = pooled_noisy_scores(session, "D$y", "D$score")
        other = pooled_noisy_scores(session, "D$y", "D$age")
        session.assign(kept.symbol.name, other.symbol)  # the kept name now holds the other reference
        with pytest.raises(FederatedCallError) as exc:
            ds_auc(session, "D$y", "D$score", reference=kept)
        assert set(exc.value.failures) == set(session.sites)
        for failure in exc.value.failures.values():
            assert failure.kind == "stale_handle" and failure.status == 409
            assert f"symbol {kept.symbol.name!r} was replaced" in failure.message
        session.remove(other.symbol.name)
        with pytest.raises(FederatedCallError) as exc:
            ds_auc(session, "D$y", "D$age", reference=other)
        assert all(f.kind == "stale_handle" for f in exc.value.failures.values())


def test_temporary_frames_are_removed_and_a_foreign_reference_is_refused(gbsg2):
    provisioned, services, _ = gbsg2
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        kept = pooled_noisy_scores(session, "D$y", "D$score")
        roc = ds_roc_glm(session, "D$y", "D$score")  # its reference stays, for reuse: its probit data goes
        ds_logistic_calibration(session, "D$y", "D$score")
        for site, symbols in session.symbols().items():
            expected = sorted(["D", kept.symbol.name, roc.reference.symbol.name])
            assert sorted(s["name"] for s in symbols) == expected, site
    with inprocess_builder(provisioned, services).login() as other:
        other.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            ds_auc(other, "D$y", "D$score", reference=kept)  # a reference of another session
        assert all(f.kind == "stale_handle" and "not in this session" in f.message
                   for f in exc.value.failures.values())


def test_the_histogram_auc_removes_the_reference_it_sent(tmp_path):
    """The histogram AUC with the analyst's own (pooled) histograms: the global CDFs it stores at the
    sites, and its ROC-GLM data, are gone after it; the AUC equals pROC's (noise off)."""
    frames = grid_frames()
    provisioned, services = make_sites(tmp_path, frames, rules=NO_NOISE)
    pooled = pd.concat(frames.values(), ignore_index=True)
    auc = r_reference("proc_ref", R_PROC, y=pooled.y.to_numpy(), p=pooled.score.to_numpy())[0]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        hist = ds_score_histograms(session, "D$y", "D$score", levels=4)
        result = ds_hist_auc(session, "D$y", "D$score", histograms=replace(hist, reference=None), roc_glm=True)
        assert result.auc == pytest.approx(auc, rel=1e-12)
        for site, symbols in session.symbols().items():
            assert [s["name"] for s in symbols if not s["name"].startswith("dsfed.ref.")] == ["D"], site
