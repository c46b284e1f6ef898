"""Red team: a small site's end of one model at many estimates, counted once. Where the other sites of a fit
over its whole table keep more than ``disclosure.glm_peer_ratio`` times its records, the site counts the fit's
end (``count_sums``' ``end``), named by the model -- family, link, formula, offset, weights -- and summed over its
whole table, so the same model fitted again counts nothing new (``Guard.exact_sums`` keys a function by its name
and row set). But the estimate is not the site's: it is the pooled one, and the analyst moves it with the other
sites, whose records the model's name does not see. Fitting ``y ~ score`` again beside other peers, or beside
other subsets of theirs that keep all of the small site's records, gives the small site's end at another
estimate each time, and the other sites' own parts there (``glmDS2`` at the estimate, counted at them, which
large sites afford many times over) take it out of the sum.

Five sites under the shipped rules: a site of 24 records (scores 0.3 to 0.7: ``floor(0.25 * 24) = 6``
functions of the score; an end of ``y ~ score`` beside peers this large counts its six as half a function each
(``glm_peer_ratio`` 2), so two ends) beside four of 1,000 whose calibration differs (hospitals
do). The analyst fits ``y ~ score`` relayed over the small site and every two, three or four of the others,
over three subsets of the score that keep the small site's records (its cut history allows no more), and asks
the other sites for their own parts at each estimate: 33 ends at 33 estimates, 198 equations in its 24 scores.
A second model (``y ~ score + age``) is refused at the small site: the count binds, but once per model.

Before (the control, the end named by its model alone): 33 ends released where the count allows one. It
read no record: logistic kernels at estimates this close span only about nine directions of the 24 scores
(the Jacobian's singular values above 1e-6 of the largest, printed), so the full read needs more covariates
or farther estimates; the accounting is what this test pins. The end is now named by the fit's first iterate
too, so each estimate counts (with the peer set left free: two ends released, the third refused at the small site),
and a fit relayed over min_sites sites or more goes over the table's one set of peers, as secure sums do (the
shipped rules: the first set's end is released, the second set refused at the sites whose tables it pinned).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from dsfed_server.functions import glm
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_pooled_share_attack import fit_end, site_end

PEERS = ("s2", "s3", "s4", "s5")
CALIBRATION = [(0.0, 1.0), (-1.0, 1.6), (1.0, 0.6), (-0.5, 2.2)]  # each peer's outcome: a + g * logit(score)
WINDOWS = [(0.0, 0.72), (0.28, 1.0), (0.0, 1.0)]  # subsets of the score that keep the small site's records


def peer(seed: int, a: float, g: float) -> pd.DataFrame:
    """A site of 1,000 records whose outcome is calibrated to the score by ``a`` and ``g``."""
    frame = synthetic_frame(seed, 1000)
    logit = np.log(frame.score / (1 - frame.score))
    frame["y"] = (np.random.default_rng(100 + seed).uniform(size=len(frame)) < expit(a + g * logit)).astype(np.int64)
    return frame


def over(session, sites: tuple[str, ...]):
    """The analyst's session over some of its sites (a relayed round among them)."""
    view = copy.copy(session)
    view.transports = {s: session.transports[s] for s in sites}
    view.session_ids = {s: session.session_ids[s] for s in sites}
    return view


def ends(session) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], list[str]]:
    """The small site's end of ``y ~ score`` at each estimate (its coefficients, information and score): the
    relayed sums less the other sites' own parts there; and the refusals of a second model."""
    session.assign_table("T", "P.t")
    found = []
    refusals: list[str] = []
    try:
        for lo, hi in WINDOWS:
            session.assign_expr("A", f'dataFrameSubsetDS2("T", "T$score", "{lo}", 6, NULL, NULL, FALSE)'
                                if lo else "T")
            session.assign_expr("D", f'dataFrameSubsetDS2("A", "A$score", "{hi}", 3, NULL, NULL, FALSE)'
                                if hi < 1 else "A")
            for peers in (p for k in (2, 3, 4) for p in itertools.combinations(PEERS, k)):
                beta, info, score, _ = site_end(session, over(session, ("s1", *peers)), peers, "y ~ score", "D")
                found.append((beta, info, score))
    except FederatedCallError as exc:
        refusals += [f"{site}: {e.rule}" for site, e in exc.failures.items()]
    try:
        fit_end(session, "y ~ score + age", "D")
    except FederatedCallError as exc:
        refusals += [f"{site}: {e.rule}" for site, e in exc.failures.items()]
    return found, refusals


def directions(found: list, truth: pd.DataFrame) -> int:
    """How many directions of the small site's scores the ends' equations span (singular values of their
    Jacobian at the truth above 1e-6 of the largest)."""
    s, y = truth.score.to_numpy(float), truth.y.to_numpy(float)

    def equations(v: np.ndarray) -> np.ndarray:
        x = np.column_stack([np.ones(v.size), v])
        out = []
        for beta, _, _ in found:
            mu = expit(x @ beta)
            out += [*(x.T @ (y - mu)), *(x.T @ (x * (mu * (1 - mu))[:, None]))[np.triu_indices(2)]]
        return np.array(out)

    jacobian = np.array([(equations(s + 1e-6 * e) - equations(s - 1e-6 * e)) / 2e-6 for e in np.eye(s.size)]).T
    values = np.linalg.svd(jacobian, compute_uv=False)
    return int((values > 1e-6 * values[0]).sum())


def attack(tmp: Path, truth: pd.DataFrame) -> tuple[list, list[str]]:
    frames = {"s1": truth, **{p: peer(8 + i, *CALIBRATION[i]) for i, p in enumerate(PEERS)}}
    with fixed_secrets("same model"):
        provisioned, services = make_sites(tmp, frames)
    with inprocess_builder(provisioned, services).login() as session:
        found, refusals = ends(session)
    for beta, info, score in found:  # each is the small site's own end: its parts at that estimate
        x = np.column_stack([np.ones(len(truth)), truth.score])
        mu = expit(x @ beta)
        np.testing.assert_allclose(info, x.T @ (x * (mu * (1 - mu))[:, None]), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(score, x.T @ (truth.y - mu), atol=1e-5)
    return found, refusals


def test_a_small_sites_end_of_one_model_at_many_estimates_counts_each(tmp_path: Path, monkeypatch):
    frame = synthetic_frame(7, 60)
    truth = frame[(frame.score >= 0.3) & (frame.score < 0.7)].reset_index(drop=True)
    found, refusals = attack(tmp_path / "now", truth)
    print(f"ATTACK y ~ score relayed beside other peers and subsets (shipped rules): the small site's end at "
          f"{len(found)} estimates; refusals {refusals}")
    assert len(found) == 1  # the second set of peers is refused where the first set pinned the table
    assert "s1: secure_aggregation.min_sites" in refusals and all(
        r.endswith((": secure_aggregation.min_sites", ": disclosure.glm_peer_ratio")) for r in refusals)
    monkeypatch.setattr(Guard, "peer_set", lambda self, *args: None)  # any set of peers, as before
    monkeypatch.setattr(Guard, "same_peer_tables", lambda self, *args: None)  # and of their tables
    found, refusals = attack(tmp_path / "any peers", truth)
    print(f"ANY PEERS the small site's end at {len(found)} estimates; refusals {refusals}")
    assert len(found) == 2  # its count allows two ends at half a function each: the third estimate's is refused
    assert refusals and all(r == "s1: disclosure.sums_per_record" for r in refusals)
    monkeypatch.setattr(glm, "first_iterate", lambda estimate, terms: "")  # the control: one end per model
    found, refusals = attack(tmp_path / "before", truth)
    estimates = len({tuple(np.round(beta, 6)) for beta, _, _ in found})
    print(f"CONTROL the end named by its model alone: the small site's end at {estimates} estimates, "
          f"{6 * estimates} equations in its {len(truth)} scores, where its count allows two ends (6 functions each); "
          f"a second model: {refusals}; they span {directions(found, truth)} directions")
    assert len(found) == estimates == 33
    assert refusals == ["s1: disclosure.sums_per_record"]  # the count binds, on another model
