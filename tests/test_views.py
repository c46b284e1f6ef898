"""A derived column (``deriveDS``) and a model's predictions (``predictDS``) are held as how the site
computes them, not as their values (``dsfed_server/views.py``). Measured with tracemalloc around
real assign calls at one in-process site: a stored vector would hold 8 bytes a record. What is read
through them -- means, an AUC -- equals R on the same records of the site's data, also after the
symbols they read are replaced (a symbol keeps its values, as in R)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rref import R_PROC, r_eval, r_reference
from sitekit import approving, cut_next_to_one_record, held_by, make_sites, site1_count_below

from conftest import inprocess_builder
from dsfed_client import Call, Ref
from dsfed_client.analyses.discrimination import ds_auc
from dsfed_client.models import ds_predict, upload_model
from dsfed_core.models import GLMModel
from dsfed_server.config import load_site_config, resolve
from dsfed_server.synthetic import binormal

N = 400_000
STORED = 8  # bytes a record of a stored float64 vector
SMALL = 65_536  # bytes a view may hold: the expression or model, never a record's worth each
MODEL = GLMModel("y ~ score + x1", "binomial", "logit", {"(Intercept)": -1.25, "score": 2.5, "x1": 0.75})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("views")
    frame = pd.DataFrame(binormal(N, np.random.default_rng(31), auc=0.8, prevalence=0.3))
    provisioned, services = make_sites(tmp, {"site1": frame}, rules=approving(tmp / "rules.toml", {"m": MODEL.sha256}))
    return {"provisioned": provisioned, "services": services, "frame": frame}


def _mean(session, symbol: str) -> float:
    return session.aggregate("meanDS", Ref(symbol))["site1"]["EstimatedMean"]


def _r_expression(frame: pd.DataFrame) -> float:
    return float(r_eval("mean(exp(x1/4) * 0.5 + ifelse(score > 0.5, 0.3, 0))",
                        x1=frame["x1"].to_numpy(), score=frame["score"].to_numpy())[0])


def test_a_derived_column_holds_no_values_and_reads_as_R_computes_it(site):
    frame = site["frame"]
    kept = frame[frame["x1"] > 0]
    expression = "exp(D$x1/4) * 0.5 + ifelse(D$score > 0.5, 0.3, 0)"
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        session.aggregate("meanDS", Ref("D$x1"))  # the columns read before anything is measured
        held, _ = held_by(lambda: session.derive("V", expression))
        held_copy, _ = held_by(lambda: session.assign("V2", Ref("V")))  # V2 <- V: the same view
        session.assign("S", Call("subsetRowsDS", "D", "x1", ">", 0))
        held_subset, _ = held_by(lambda: session.derive("W", expression.replace("D$", "S$")))
        means = _mean(session, "V"), _mean(session, "V2"), _mean(session, "W")
        classes = session.aggregate("classDS", Ref("V"))["site1"]
        # D replaced by its subset, S removed: V and W keep the values they were made with
        session.assign("D", Call("subsetRowsDS", "D", "score", ">", 0))
        session.remove("S")
        after = _mean(session, "V"), _mean(session, "W")
    assert held < SMALL < STORED * N and held_copy < SMALL and held_subset < SMALL
    assert classes == "numeric"
    full, subset = _r_expression(frame), _r_expression(kept)
    assert means == pytest.approx((full, full, subset), rel=1e-12)
    assert after == pytest.approx((full, subset), rel=1e-12)


def test_a_long_chain_of_views_reads_as_R_computes_it(site):
    """``V <- V + 1``, 300 times: views read through views up to views.MAX_CHAIN deep, and the rest
    stored, so a read neither recomputes the whole chain nor recurses as deep (300 views deep, Python
    runs out of stack); the mean is R's."""
    frame = site["frame"]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        session.derive("V", "D$x1 * 1")
        for _ in range(300):
            session.derive("V", "V + 1")
        mean = _mean(session, "V")
    assert mean == pytest.approx(float(r_eval("mean(x1 + 300)", x1=frame["x1"].to_numpy())[0]), rel=1e-12)


def _r_predictions(frame: pd.DataFrame) -> np.ndarray:
    b = MODEL.coefficients
    return r_eval("plogis(b[1] + b[2] * score + b[3] * x1)", b=np.array([b["(Intercept)"], b["score"], b["x1"]]),
                  score=frame["score"].to_numpy(), x1=frame["x1"].to_numpy())


def test_predictions_hold_no_values_and_validate_as_R_on_its_predictions(site):
    """The predictions of a whole table and of a subset hold no record's value (before, a subset's
    also held the model's predictions for every record of the table, for its cut history); their
    mean and empirical AUC (pROC, on R's predictions from the same coefficients) are R's."""
    frame = site["frame"]
    kept = frame[frame["x1"] < 0.5]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        upload_model(session, MODEL)
        session.aggregate("meanDS", Ref("D$x1"))
        held, _ = held_by(lambda: ds_predict(session, "D", "m", "P"))
        session.assign("S", Call("subsetRowsDS", "D", "x1", "<", 0.5))
        held_subset, _ = held_by(lambda: ds_predict(session, "S", "m", "PS"))
        means = _mean(session, "P"), _mean(session, "PS")
        auc = ds_auc(session, "S$y", "PS")
    assert held < SMALL < STORED * N and held_subset < SMALL
    assert means == pytest.approx((_r_predictions(frame).mean(), _r_predictions(kept).mean()), rel=1e-12)
    auc_r, *_ = r_reference("proc_ref", R_PROC, y=kept["y"].to_numpy(dtype=float), p=_r_predictions(kept))
    assert auc.auc == pytest.approx(auc_r, rel=1e-10)


@pytest.mark.parametrize("first_on", ["subset", "complete cases", None])
def test_predictions_of_a_subset_and_of_the_table_share_one_cut_history(tmp_path, first_on):
    """The attack: a count of a subset's predictions at or below t1, then of the table's at or below
    t2, one record apart (with the outcome sums, its outcome). The subset is the predictions of a
    subset of the table (``PS``), or the complete cases of the table's predictions (``completeCasesDS(P)``:
    x1 is missing in 5% of the records). Either is checked in the history of the model's predictions
    for every record of the table (computed when a release reads them): the second cut is dropped.
    Control: without the first cut, t2 is released."""
    rng = np.random.default_rng(32)
    frame = pd.DataFrame(binormal(400, rng, auc=0.8, prevalence=0.3))
    frame.loc[rng.uniform(size=len(frame)) < 0.05, "x1"] = np.nan
    rules = approving(tmp_path / "rules.toml", {"m": MODEL.sha256}, cut_history="true")
    text = rules.read_text()
    assert text.count('    "countBelowDS",\n') == 1
    rules.write_text(text.replace('    "countBelowDS",\n', '    "countBelowDS",\n    "completeCasesDS",\n'))
    provisioned, services = make_sites(tmp_path, {"site1": frame}, rules=rules)
    subset = (frame["x1"] < 0.5).to_numpy() if first_on == "subset" else frame["x1"].notna().to_numpy()
    t1, t2 = cut_next_to_one_record(_r_predictions(frame), subset)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        upload_model(session, MODEL)
        ds_predict(session, "D", "m", "P")
        session.assign("S", Call("subsetRowsDS", "D", "x1", "<", 0.5))
        ds_predict(session, "S", "m", "PS")
        session.assign("PC", Call("completeCasesDS", "P"))
        target = {"subset": "PS", "complete cases": "PC"}.get(first_on or "")
        first = site1_count_below(session, target, t1) if target else None
        second = site1_count_below(session, "P", t2)
    p_first = _r_predictions(frame[subset])
    if first_on is not None:
        assert first == [int((p_first <= t1).sum())]  # released, as R counts it
        assert second == [None]  # dropped: one record from t1 in the table
        # kept in the history of the model's predictions for the table (for the complete cases the
        # row-set audit alone would also drop t2: this is the layer before it)
        assert t1 in _model_cuts(provisioned["site1"].config)
    else:
        p_all = _r_predictions(frame)
        assert second == [int((p_all[np.isfinite(p_all)] <= t2).sum())]


def _model_cuts(config: Path) -> list[float]:
    """The cuts the site's release history keeps for the model's predictions of the table (more than
    any analyst is told)."""
    site, base = load_site_config(config)
    with sqlite3.connect(resolve(base, site.site.ledger)) as db:
        rows = db.execute("SELECT value FROM released_cuts WHERE column_name = ?",
                          (f"model {MODEL.sha256[:16]} response",)).fetchall()
    return [value for (value,) in rows]
