"""Pooled releases over differently named per-site tables (``main.north``, ``main.south``,
``main.valley``: each hospital names its table after its file, and the login maps each site to its
own). ``assign_table("D")`` sends every site the whole map, so the sites share D's definition, and
pooled releases name the table by the map's label, bound to the tables and the round's sites
(dsfed_server/disclosure/shared_tables.py): a pooled validate() and the pooled Hosmer-Lemeshow C,
calibration curve and Brier equal R's. Three in-process sites under the shipped default rules.

The attack: a label the analyst could choose freely (here: the map with a site that is not in the
round) would draw the gate's secret margins afresh for the same pooled cells. An analyst who knows
every record but a target, and asks for a cut with q records below it when the target is among them
(a cell kept only when its margin draws 0: probability 1/2), asks again under new labels until the
cut is kept, and so learns that the target lies below it; without the target below, the cut is never
kept. The sites refuse the second label; with that check off (the counterfactual) the attack reads
the target's side."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Call, LoginBuilder, Ref
from dsfed_client.analyses.calibration import ds_brier, ds_calibration_curve, ds_hosmer_lemeshow
from dsfed_client.analyses.suite import validate
from dsfed_client.errors import FederatedCallError
from dsfed_server.disclosure import shared_tables
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from rref import R_BINNED, R_HOSLEM, R_VALPROB, r_eval, r_hl_on_edges, r_reference
from sitekit import DEFAULT_RULES, write_table
from test_derived_column_attacks import fixed_secrets

TABLES = {"site1": "main.north", "site2": "main.south", "site3": "main.valley"}
SIZES = {"site1": 300, "site2": 200, "site3": 150}


def _frames(seed: int = 37) -> dict[str, pd.DataFrame]:
    """Scores on a grid of 1/10000 with no ties (each record's score is its own), outcomes drawn from them."""
    rng = np.random.default_rng(seed)
    scores = rng.permutation(np.arange(1, 10000))[:sum(SIZES.values())] / 10000
    frames, at = {}, 0
    for site, n in SIZES.items():
        p = scores[at:at + n]
        at += n
        frames[site] = pd.DataFrame({"y": (rng.uniform(size=n) < p).astype(int), "score": p})
    return frames


def _sites(tmp: Path, frames: dict[str, pd.DataFrame]) -> tuple[dict, dict]:
    for site, frame in frames.items():
        project, table = TABLES[site].split(".")
        write_table(tmp / "data" / site, frame, project=project, table=table)
    with fixed_secrets("shared tables"):
        provisioned = provision(tmp / "run", {site: (tmp / "data" / site, DEFAULT_RULES) for site in frames})
    return provisioned, {site: SiteService.from_config_file(p.config) for site, p in provisioned.items()}


def _login(provisioned: dict, services: dict) -> LoginBuilder:
    builder = inprocess_builder(provisioned, services)
    builder.tables.update(TABLES)
    return builder


@pytest.fixture(scope="module")
def frames() -> dict[str, pd.DataFrame]:
    return _frames()


def test_pooled_releases_over_differently_named_tables_equal_r(tmp_path, frames):
    """A per-site histogram first (its breaks join each site's history under its own table), then the
    pooled Hosmer-Lemeshow C (its breaks beside the histogram's moved onto them or merged), calibration curve and
    Brier score on D: equal to R on the pooled records (the curve's cells on the edges released, after the sites
    relayed their histories by the label)."""
    provisioned, services = _sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True)
    y, p = pooled["y"].to_numpy(dtype=float), pooled["score"].to_numpy()
    with _login(provisioned, services).login() as session:
        handle = session.assign_table("D")
        assert handle.digest is not None  # one definition at every site
        session.aggregate_expr("histogramDS2(D$score, 7, 0, 1, 1, 3, 0.25)")  # per site: each site's history
        hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind="C", secure=True)
        curve = ds_calibration_curve(session, "D$y", "D$score", n_bins=10, secure=True)
        brier = ds_brier(session, "D$y", "D$score", secure=True)
        relayed = {key[0] for key in session._cut_histories}
    assert relayed == {shared_tables.label(TABLES)}  # the sites answered and read their histories by the label
    # H-L C over R's deciles, those beside the histogram's breaks moved onto them or merged (said): equal to R
    # over the groups released
    ref = r_reference("hl_c", R_HOSLEM, y=y, p=p, g=np.array([10.0]))
    edges = np.asarray(hl.table.lower.tolist() + [hl.table.upper.iloc[-1]])
    moved = int(hl.cells.split(" break(s) moved")[0].rsplit(" ", 1)[-1]) if " break(s) moved" in hl.cells else 0
    assert len(set(np.cumsum(hl.group_sizes)) - set(np.cumsum(ref[3:]))) <= moved  # R's groups, merged or moved
    assert hl.pooled and hl.statistic == pytest.approx(r_hl_on_edges(y, p, edges), rel=1e-9)
    assert hl.complete == (len(edges) == 11 and not moved)
    assert curve.bins.pooled
    n, sum_y, sum_p = r_reference("binned_ref", R_BINNED, y=y, p=p, breaks=np.asarray(curve.edges, dtype=float),
                                  right=np.array([0.0])).reshape(3, -1)
    np.testing.assert_array_equal(curve.n, n)
    filled = n > 0
    np.testing.assert_allclose(curve.mean_outcome[filled], sum_y[filled] / n[filled], rtol=1e-9)
    np.testing.assert_allclose(curve.mean_prediction[filled], sum_p[filled] / n[filled], rtol=1e-9)
    r_brier = r_reference("valprob_ref", R_VALPROB, y=y, p=p)[0]
    assert brier.brier == pytest.approx(r_brier, rel=1e-9) and brier.n == len(pooled)


def test_pooled_validate_over_differently_named_tables_equals_r(tmp_path, frames):
    """validate(secure=True) over the three tables: every section computed (the pooled GLMs, the
    splines' knots, the AUC's leaves and the deciles name the table by the label too); its Brier,
    calibration intercept, slope and in-the-large equal R's glm on the pooled records."""
    provisioned, services = _sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True)
    with _login(provisioned, services).login() as session:
        session.assign_table("D")
        result = validate(session, "D$y", "D$score", secure=True)
    assert result.failed == {} and result.curve.bins.pooled
    y, p = pooled["y"].to_numpy(dtype=float), pooled["score"].to_numpy()
    assert result.brier.brier == pytest.approx(float(np.mean((p - y) ** 2)), rel=1e-9)
    intercept, slope, citl = r_eval("c(coef(glm(y ~ qlogis(p), family = binomial)), "
                                    "coef(glm(y ~ offset(qlogis(p)), family = binomial)))", y=y, p=p)
    assert (result.logistic.intercept, result.logistic.slope, result.logistic.citl) == pytest.approx(
        (intercept, slope, citl), rel=1e-6)


def _cut_above_target(frames: dict[str, pd.DataFrame]) -> float:
    """A cut with exactly q = 5 pooled records below it: the target (the fifth lowest score) is the last."""
    order = np.sort(pd.concat(frames.values(), ignore_index=True)["score"].to_numpy())
    return float(order[4] + order[5]) / 2


def _ask_under_labels(session, cut: float, labels: int) -> tuple[int, int]:
    """The attack: the cut asked under ``labels`` maps (a site outside the round added to each); how
    many were answered, and how many kept the cut."""
    answered = kept = 0
    for k in range(labels):
        pairs = [f"{site}={table}" for site, table in sorted(TABLES.items())] + [f"ghost{k}=main.none"]
        session.assign("D", Call("assignTable", tables=pairs))
        try:
            r = session.pooled("groupSumsDS", Ref("D$y"), Ref("D$score"), [0.0, cut, 1.0])
        except FederatedCallError:
            continue
        answered += 1
        if any(np.isclose(e, cut) for e in r["edges"]):
            return answered, 1
    return answered, kept


def test_a_second_label_for_the_same_tables_is_refused(tmp_path, frames, monkeypatch):
    cut = _cut_above_target(frames)
    provisioned, services = _sites(tmp_path / "shipped", frames)
    with _login(provisioned, services).login() as session:
        pairs = [f"{site}={table}" for site, table in sorted(TABLES.items())] + ["ghost=main.none"]
        session.assign("D", Call("assignTable", tables=pairs))
        with pytest.raises(FederatedCallError) as refused:
            session.pooled("groupSumsDS", Ref("D$y"), Ref("D$score"), [0.0, cut, 1.0])
        assert {e.rule for e in refused.value.failures.values()} == {shared_tables.RULE}
        assert "this round pools site1, site2, site3" in str(refused.value)
        answered, kept = _ask_under_labels(session, cut, 16)
    assert (answered, kept) == (0, 0)  # the analyst reads nothing of the target's side
    # the counterfactual: a label free of the round (the check off) draws the cell's margin afresh each time
    monkeypatch.setattr(shared_tables, "check_round", lambda key, sites: None)
    provisioned, services = _sites(tmp_path / "free", frames)
    with _login(provisioned, services).login() as session:
        answered, kept = _ask_under_labels(session, cut, 16)
    assert kept == 1 and answered > 1  # the target's side read: kept under some label, not under the first
