"""Red team: a small site's whole table through many peer sets. A fit over a site's whole table relayed over
``secure_aggregation.min_sites`` sites counts its end at that site only where the other sites keep on average
more than ``disclosure.glm_peer_ratio`` times its records (``Guard.peers_outnumber``); else nothing, on the
argument that the other sites' own parts at the estimate (``glmDS2`` at the analyst's coefficients, counted at
each of them) can take at most their own count of ends out of the sum. That bound is per peer set: beside many
peers, each keeping at most twice the small site's records, the analyst relays a fit over the small site and
each pair of peers, each pair pays from its own counts, and the small site's ends grow with the number of peers
while it counts none. Now a fit relayed over min_sites sites or more goes over the table's one set of peers, as
secure sums do (``Guard.peer_set``): the first pair's end is released, every other pair refused at the small
site, and no record is claimed. The control (any set of peers, as before) is the attack below.

Rounds of two sites (the small site and one peer, fewer than min_sites) are the small site's own fits, counted
there in full, but an own end was named by its model alone: ``y ~ score`` beside each of the forty peers counted
once and ended at forty estimates (11 of 36 records read, with the sums of its own quadratic fit, which its count
affords beside one end). Now such an end, summed with other sites', is named by its first iterate too.

Forty-one sites under the shipped rules (``sitekit.make_sites``: default.toml): a site of 36 records (scores with
six decimals, a 0/1 outcome) beside forty of 72 (on average twice its records, not more: its end counts nowhere;
72 is the fewest whose count affords a fit's own parts at the analyst's coefficients, three steps of six functions
of the score and the outcome, 18 of 72 * 0.25), whose outcomes follow the score with different calibrations
(hospitals' do). The analyst reads the score and the outcome only. He relays ``y ~ score`` over the small site and
each of sixty pairs of peers (every peer in three pairs: its count affords three), and asks both peers for their
own parts at the estimate: sixty ends of the small site, 360 released sums in its 36 scores (the information,
score and deviance at sixty estimates), none counted there. Its own least-squares fit of
``y ~ score + I(score^2) + I(score^3)`` (counted there, within what its 36 records afford) adds the power sums of
its scores to the sixth and of its positives' to the third. Nothing is refused.

The ends are sums over all of its records of functions of the score alone (the outcome enters them only as the
positives' count and score sum, :math:`\\sum_i y_i x_i`): they give the set of its scores. The solve: a
non-negative measure on a grid of scores fitted to the released sums (Lawson & Hanson 1974), its quantiles as
start, least squares on the 36 scores (21 within 1e-3 of the truth); then the outcomes, the sets of the released
count of positives among them whose power sums come nearest the released ones (an integer program; the nearest is
the truth's), each solved again with the scores; the analyst keeps the solve of least cost, and claims the records
whose scores the sums determine (standard error below 2e-4 at the released sums' precision): 30 of the 36 records
claimed, all 30 read (about 40 s, 15 of them the sites'). The six left are in one cluster of close scores (0.79 to
0.83), which logistic kernels this wide (the estimates' slopes are 3 to 21) resolve least. With the first ten
ends only, 8 are claimed and 6 read (two claimed wrongly); with one or three, none is claimed.

"Read": a claimed record whose score is within 1e-3 and whose outcome is exact, the solve's records and the
truth's matched in the order of their scores.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import Bounds, LinearConstraint, least_squares, milp, nnls
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from dsfed_server.functions import glm
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_pooled_share_attack import site_end
from test_glm_same_model_estimates_attack import over

SMALL, PEER, PEERS = 36, 72, 40
CENTRES = np.linspace(0.1, 0.9, PEERS)  # where each peer's outcome is even odds: its calibration (hospitals differ)
STEEPNESS = 10.0  # each peer's outcome: logit P(y = 1) = STEEPNESS * (logit(score) - logit(centre))
PAIRS = [(i, (i + 1) % PEERS) for i in range(PEERS)] + [(i, i + PEERS // 2) for i in range(PEERS // 2)]
# the analyst's rounds, each the small site and these peers (indices), and the degree d of the small site's own
# least-squares fit y ~ score + ... + I(score^d), whose sums are s^1..s^2d and y * s^0..s^d
ROUNDS = {"pairs of peers": (PAIRS, 3), "one peer": ([(i,) for i in range(PEERS)], 2)}
GRID = np.linspace(0.00025, 0.99975, 2000)
# how near the exact sums the released are, as measured here against the truth (the relay's fixed point, 2^-40, in
# the information; the score and the deviance carry more through the estimate they are taken at); an analyst
# measures it on a sum relayed over peers alone whose own parts he also asks for
NOISE = np.array([5e-13, 5e-13, 5e-13, 6e-12, 6e-12, 1.5e-11])
SUBSETS = 2  # outcome patterns tried, nearest first
POWER_NOISE = 1e-12  # the own fit's sums, from its inverted unscaled covariance
NFEV = 20_000
CLAIMED = 2e-4  # a claimed score's standard error: a fifth of the read's tolerance


def peer(seed: int, centre: float) -> pd.DataFrame:
    """A site of ``PEER`` records whose outcome follows the score, at even odds where it is ``centre``."""
    frame = synthetic_frame(seed, PEER)
    logit = np.log(frame.score / (1 - frame.score)) - np.log(centre / (1 - centre))
    frame["y"] = (np.random.default_rng(100 + seed).uniform(size=PEER) < expit(STEEPNESS * logit)).astype(np.int64)
    return frame


def releases(session, peers: list[str], rounds: list[tuple[int, ...]], degree: int) -> tuple[dict, list[str]]:
    """The small site's size, its own least-squares fit's sums, and its end at each relayed fit beside a round's
    peers: the sums less the peers' own parts at the estimate."""
    session.assign_table("D", "P.t")
    own = session.site_view("s1")
    out: dict = {"n": int(own.aggregate_expr("dimDS(D)")["s1"][0]), "ends": []}
    model = "y ~ score" + "".join(f" + I(score^{j})" for j in range(2, degree + 1))
    own.assign_expr("g", f'glmSLMADS.assign({model}, "gaussian", NULL, NULL, "D")')
    g = own.aggregate_expr(f'glmSLMADS2({model}, "gaussian", NULL, NULL, "g", "D")')["s1"]
    xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
    xty = xtx @ np.asarray(g["coefficients"], float)[:, 0]
    out["powers"] = np.r_[xtx[0, 1:], xtx[degree, 1:]]  # sum s^j, j = 1..2d
    out["positive"] = xty  # sum y s^j, j = 0..d
    refusals: list[str] = []
    for members in rounds:
        pair = tuple(peers[i] for i in members)
        try:
            out["ends"].append(site_end(session, over(session, ("s1", *pair)), pair, "y ~ score", "D"))
        except FederatedCallError as exc:
            refusals += [e.rule or e.kind for e in exc.failures.values()]
    return out, refusals


def attack(tmp: Path, rounds: str) -> tuple[int, list[str]]:
    truth = synthetic_frame(7, SMALL)
    peers = [f"p{i}" for i in range(PEERS)]
    frames = {"s1": truth, **{p: peer(20 + i, c) for i, (p, c) in enumerate(zip(peers, CENTRES))}}
    with fixed_secrets("many peers"):
        provisioned, services = make_sites(tmp, frames)
    with inprocess_builder(provisioned, services).login() as session:
        found, refusals = releases(session, peers, *ROUNDS[rounds])
    return read(found, truth), refusals


def sums(r: dict) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """The released sums that are sums over all of the small site's records of functions of the score alone,
    each with how near the exact sum it is, and those functions (one row each) at candidate scores: the power
    sums, and at each end the information, :math:`\\sum_i \\mu_i (1, s_i)` (the positives' count and score sum
    less the score equations) and :math:`\\sum_i \\log(1 + e^{\\eta_i})` (half the deviance plus
    :math:`\\sum_i y_i \\eta_i`)."""
    k, sy, powers = r["positive"][0], r["positive"][1], len(r["powers"])
    betas = np.array([beta for beta, _, _, _ in r["ends"]])
    released = list(r["powers"])
    for beta, info, score, dev in r["ends"]:
        released += [info[0, 0], info[0, 1], info[1, 1], k - score[0], sy - score[1],
                     dev / 2 + beta[0] * k + beta[1] * sy]

    def functions(v: np.ndarray) -> np.ndarray:  # complex too (the Jacobian by complex steps)
        eta = betas[:, :1] + betas[:, 1:] * v
        with np.errstate(over="ignore"):  # a solve's iterate far out: its sums are then far from the released
            mu = 1 / (1 + np.exp(-eta))
            w = mu * (1 - mu)
            ends = np.stack([w, w * v, w * v * v, mu, mu * v, np.log1p(np.exp(eta))], axis=1).reshape(-1, v.size)
        return np.vstack([v ** j for j in range(1, powers + 1)] + [ends])

    return np.asarray(released), functions, np.r_[np.full(powers, POWER_NOISE), np.tile(NOISE, len(betas))]


def solve(residuals: Callable[[np.ndarray], np.ndarray], jacobian: Callable[[np.ndarray], np.ndarray],
          start: np.ndarray):
    """Least squares from ``start``, to the released sums' precision (Levenberg-Marquardt; with fewer sums than
    scores, as where few ends are released, a trust region)."""
    method = "lm" if residuals(start).size >= start.size else "trf"
    return least_squares(residuals, start, jac=jacobian, method=method, xtol=1e-15, ftol=1e-15, gtol=1e-15,
                         max_nfev=NFEV)


def scores(r: dict) -> np.ndarray:
    """The set of the small site's scores: the non-negative measure on ``GRID`` nearest the released sums (its
    mass the site's count), its quantiles as start, the scores solved so that their sums are the released."""
    n = r["n"]
    released, functions, noise = sums(r)
    weight = 1e15
    mass, _ = nnls(np.vstack([functions(GRID) / noise[:, None], np.full(GRID.size, weight)]),
                   np.r_[released / noise, weight * n], maxiter=50_000)
    start = np.interp(np.arange(n) + 0.5, np.cumsum(mass) * n / mass.sum(), GRID)
    fit = solve(lambda v: (functions(v).sum(axis=1) - released) / noise,
                lambda v: functions(v + 1e-20j).imag / 1e-20 / noise[:, None], start)
    return np.sort(fit.x)


def outcome_patterns(r: dict, v: np.ndarray) -> list[np.ndarray]:
    """Up to ``SUBSETS`` sets of the released count of positives among the scores ``v`` whose power sums come
    nearest the released positives' (an integer program: the least sum of the differences, each scaled by the
    sum), each differing from those before."""
    n, k, degree = v.size, round(r["positive"][0]), len(r["positive"]) - 1
    want = r["positive"][1:]
    powers = np.array([v ** j for j in range(1, degree + 1)]) / want[:, None]
    eye = np.eye(degree)
    rows = [LinearConstraint(np.r_[np.ones(n), np.zeros(degree)][None], k, k),
            LinearConstraint(np.hstack([powers, -eye]), -np.inf, 1),
            LinearConstraint(np.hstack([powers, eye]), 1, np.inf)]
    found: list[np.ndarray] = []
    for _ in range(SUBSETS):
        cuts = [LinearConstraint(np.r_[y, np.zeros(degree)][None], -np.inf, k - 1) for y in found]
        got = milp(np.r_[np.zeros(n), np.ones(degree)], constraints=rows + cuts,
                   integrality=np.r_[np.ones(n), np.zeros(degree)],
                   bounds=Bounds(np.zeros(n + degree), np.r_[np.ones(n), np.full(degree, np.inf)]))
        if got.x is None:
            break
        found.append(np.round(got.x[:n]))
    return found


def determined(jacobian: np.ndarray) -> np.ndarray:
    """Which scores the released sums determine: each score's standard error, from the Jacobian of the sums
    (each divided by its precision) at the solve, below ``CLAIMED`` (infinite in a direction no sum sees: with
    fewer sums than scores, none is claimed)."""
    _, values, rows = np.linalg.svd(jacobian, full_matrices=True)
    values = np.r_[values, np.zeros(rows.shape[0] - values.size)]
    with np.errstate(divide="ignore"):
        error = np.sqrt(((rows / values[:, None]) ** 2).sum(axis=0))
    return error < CLAIMED


def read(r: dict, truth: pd.DataFrame) -> int:
    """The scores (:func:`scores`), each outcome pattern (:func:`outcome_patterns`) solved again with the
    positives' power sums; of the solve of least cost, the records whose scores it determines
    (:func:`determined`: what the analyst claims) against the truth (records in the order of their scores)."""
    if not r["ends"]:
        return 0
    released, functions, noise = sums(r)
    v = scores(r)
    positive, degree = r["positive"][1:], len(r["positive"]) - 1
    best = None
    for y in outcome_patterns(r, v):
        pos = y == 1

        def residuals(u: np.ndarray, pos: np.ndarray = pos) -> np.ndarray:
            return np.r_[(functions(u).sum(axis=1) - released) / noise,
                         ([np.sum(u[pos] ** j) for j in range(1, degree + 1)] - positive) / POWER_NOISE]

        def jacobian(u: np.ndarray, pos: np.ndarray = pos) -> np.ndarray:
            powers = np.array([j * u ** (j - 1) * pos for j in range(1, degree + 1)])
            return np.vstack([functions(u + 1e-20j).imag / 1e-20 / noise[:, None], powers / POWER_NOISE])

        fit = solve(residuals, jacobian, v)
        if best is None or fit.cost < best[0].cost:
            best = (fit, y, determined(jacobian(fit.x)))
    fit, y, claimed = best  # type: ignore[misc]
    got = pd.DataFrame({"score": fit.x, "y": y, "claimed": claimed}).sort_values("score").reset_index(drop=True)
    want = truth.sort_values("score").reset_index(drop=True)
    return int((got.claimed & (np.abs(got.score - want.score) < 1e-3) & (got.y == want.y)).sum())

@pytest.mark.slow
def test_a_small_sites_whole_table_through_many_peer_sets_reads_no_record_with_one_set_per_table(tmp_path: Path,
                                                                                                monkeypatch):
    read_now, refusals = attack(tmp_path / "now", "pairs of peers")
    print(f"ATTACK y ~ score relayed over a site of {SMALL} and each of {len(PAIRS)} pairs of {PEERS} peers of {PEER}, "
          f"the peers' own parts subtracted (shipped rules): read {read_now} of {SMALL}; "
          f"{len(refusals)} refusals ({sorted(set(refusals))})")
    assert read_now == 0 and len(refusals) >= len(PAIRS) - 1  # every pair after the first, at one site or more
    assert "secure_aggregation.min_sites" in refusals  # one set of peers per table (and of their tables)
    assert set(refusals) <= {"secure_aggregation.min_sites", "disclosure.glm_peer_ratio"}
    monkeypatch.setattr(Guard, "peer_set", lambda self, *args: None)  # the control: any set of peers, as before
    monkeypatch.setattr(Guard, "same_peer_tables", lambda self, *args: None)
    read_before, refusals_before = attack(tmp_path / "before", "pairs of peers")
    print(f"CONTROL any set of peers: read {read_before} of {SMALL}; refusals {refusals_before}")
    assert refusals_before == []  # no peer pays more than its count, and the small site counts no end
    assert read_before >= 25


@pytest.mark.slow
def test_a_small_sites_own_ends_beside_one_peer_at_a_time_count_each_estimate(tmp_path: Path, monkeypatch):
    """Rounds of two sites, the small site and one peer: fewer than min_sites, so each is the small site's own
    fit and counts there in full -- but named by its model alone, ``y ~ score`` beside forty peers counted once
    while it ended at forty estimates (before: 11 of 36 records read, with its own quadratic fit's sums). Now an
    own end summed with other sites' is named by the fit's first iterate too: the first is released, every
    other refused at the small site."""
    read_now, refusals = attack(tmp_path / "now", "one peer")
    print(f"ATTACK y ~ score relayed over a site of {SMALL} and each of {PEERS} peers of {PEER} alone, the peer's own "
          f"parts subtracted (shipped rules): read {read_now} of {SMALL}; {len(refusals)} refusals "
          f"({sorted(set(refusals))})")
    assert read_now == 0 and len(refusals) == PEERS - 1 and set(refusals) == {"disclosure.sums_per_record"}
    monkeypatch.setattr(glm, "first_iterate", lambda estimate, terms: "")  # the control: one end per model
    read_before, refusals_before = attack(tmp_path / "before", "one peer")
    print(f"CONTROL the end named by its model alone: read {read_before} of {SMALL}; refusals {refusals_before}")
    assert refusals_before == [] and read_before >= 8
