"""A kink of ``abs``, ``pmin`` or ``pmax`` is one cut of its column, ``< v`` and ``<= v`` alike: the record at ``v``
adds the same to every sum on either side (``abs(0)`` is 0, a clamp at ``v`` gives ``v``). Written ``<=`` always, a
kink at a cut released as ``< v`` (every bin ``[a, b)``: thresholds, calibration bins) left the records at ``v``
between the two, a cell the gate never releases, and ``abs(D$score - 0.5)`` after the pooled thresholds at 0.1, ...,
0.9 was refused at every site (``disclosure.cut_history``; the first test's pooled-first case fails so on the code
before, its derived-first case passed there too). A kink is now written ``< v`` unless the column's history holds
``<= v`` alone, when it is that cut (the second test fails with the kink written ``< v`` always, and passed on the code
before, which wrote ``<=``). The relaxation accepts a kink only at a cut released before; a comparison beside it, which
would split the records at ``v`` off, is still refused (second test). Three in-process sites under the shipped
rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from sitekit import make_sites

THRESHOLDS = np.round(np.arange(0.1, 1.0, 0.1), 1)


def _frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(3)
    frames = {}
    for site, n in (("small", 120), ("north", 300), ("south", 300)):
        score = rng.uniform(0, 1, n)
        frames[site] = pd.DataFrame({"score": score, "y": (rng.uniform(0, 1, n) < score).astype(int)})
    return frames


def _means(session, column: str) -> dict[str, float]:
    return {site: float(r["EstimatedMean"]) for site, r in session.aggregate_expr(f"meanDS({column})").items()}


@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "derived-first"])
def test_abs_beside_the_pooled_thresholds(tmp_path: Path, pooled_first: bool):
    """``abs(D$score - 0.5)`` at every site and the pooled thresholds 0.1, ..., 0.9, in either order: the column is
    made (its means equal numpy's) and every cut is released. Its kink is the pooled cut at 0.5, ``< 0.5``."""
    frames = _frames()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        if pooled_first:
            pooled = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True)
            session.derive("conf", "abs(D$score - 0.5)")
        else:
            session.derive("conf", "abs(D$score - 0.5)")
            pooled = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True)
        means = _means(session, "conf")
    assert list(pooled.to_frame().index) == THRESHOLDS.tolist()
    assert means == pytest.approx({s: float(np.abs(f["score"] - 0.5).mean()) for s, f in frames.items()}, rel=1e-12)


@pytest.mark.parametrize("kink", ["abs(D$score - 0.5)", "pmin(D$score, 0.5)", "pmax(D$score, 0.5)"])
def test_a_kink_at_a_cut_released_as_at_or_below_is_that_cut(tmp_path: Path, kink: str):
    """After a subset ``D$score <= 0.5`` (released as ``<= 0.5``) each kink at 0.5 is that cut: made, and its
    means equal numpy's; a comparison ``D$score < 0.5`` beside it is still a cut of its own, refused."""
    frames = _frames()
    provisioned, services = make_sites(tmp_path, frames)
    numpy = {"abs": lambda s: np.abs(s - 0.5), "pmin": lambda s: np.minimum(s, 0.5),
             "pmax": lambda s: np.maximum(s, 0.5)}[kink.split("(")[0]]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("L", 'dataFrameSubsetDS2("D", "D$score", "0.5", 4, NULL, NULL, FALSE)')
        assert _means(session, "L$score") == pytest.approx(
            {s: float(f.loc[f["score"] <= 0.5, "score"].mean()) for s, f in frames.items()}, rel=1e-12)
        session.derive("k", kink)
        means = _means(session, "k")
        with pytest.raises(FederatedCallError) as refused:
            session.derive("lower", "ifelse(D$score < 0.5, 1, 0)")
    assert {f.rule for f in refused.value.failures.values()} == {"disclosure.cut_history"}
    assert means == pytest.approx({s: float(numpy(f["score"]).mean()) for s, f in frames.items()}, rel=1e-12)
