"""Red team: the later steps of a logistic fit without an offset whose iterates the sites derive (the relayed
protocol, ``glm.irls_steps``). Its start is at constant working weights, so the start's sums are moments;
each later step releases the information, score and deviance at an iterate no analyst chose, and these
were not counted.

The iterate is the data's, but the data are the analyst's choice: the outcome ``ifelse(D$score > t, 1, 0)``
(a cut, which the gate passes with q records and its secret margin on either side) against the covariate
``score`` is separated. Fisher scoring then never converges: the slope grows at every step (to thousands),
and the information :math:`\\sum_i \\sigma'(\\beta_0 + \\beta_1 s_i)\\,(1, s_i, s_i^2)` at a late step is a
sum over the one or two records next to the boundary, the rest weighing :math:`e^{-\\beta_1 |s_i - t|}`:
the steep smooth step the derived-column gate refuses (Albert & Anderson 1984 on separation; the moment
attack of Denning & Schlörer 1983 on its few terms). Three sums at one step are three equations in the
two scores next to the boundary; solved at every late step, a value the solves agree on to six decimals
is read.

One site of 60 records under the shipped rules, the dsfed client's relayed fit, cuts every 0.05 where the
gate passes them (8 of 17; the fit's start is counted as the cut's sums are, which refuses 2 more). "Read":
a record whose exact score (6 decimals) the attack reports. On the code before the steps were checked: 171
steps released (to slopes of several thousand), 3 scores read exactly (0.141557, 0.16021, 0.285053), a
fourth reported wrongly. Now a binomial step whose working weights rest on fewer than q records (Kish's
effective sample size; ``glm.irls_steps``) is refused: 30 steps released, each fit stopped at slopes of 30
to 400, nothing read. The control takes the check out (the effective records reported as infinite) and
reads the same 3 scores.

Since then the fit is refused before its start (``Guard.outcome_roots``, rule ``disclosure.cut_history``): its
outcome is computed from ``score``, which its covariate also reads, so it is separated by construction (0
steps released; tests/test_glm_separation_cluster_attacks.py for the attack that closed). The working-weights
check stays behind it and is measured here with the outcome check taken out ("weights-check-only").

What the steps up to the refusal leave: at the cut 0.45 six records lie within 0.03 of each other around
the boundary and keep the weights on five records up to a slope of 387; least squares over those steps,
started at the true scores of the 6 to 10 records nearest the cut (more than any attacker knows), does
not pin one score exactly (the other records' weights still count) but lands within 3e-4 to 2e-3 of them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import least_squares
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Formula, Ref
from dsfed_server.context import CallContext
from dsfed_server.disclosure.checks import Guard
from dsfed_server.functions import glm, glm_slma
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

CUTS = np.round(np.arange(0.10, 0.95, 0.05), 2)
MAX_STEPS = 50
CHECKS = ["shipped", "weights-check-only", "separation-check-removed"]


def take_out(monkeypatch, checks: str, module) -> None:
    """The checks of ``checks`` taken out: the outcome checks, by its roots and by the site's own fit, with the
    count of the fit's end where the analyst reads the site's own (all but "shipped": counted, a separated
    study-level fit is refused at its first call), and the working weights' (``module._parts`` reporting every
    step's weights as resting on infinitely many records)."""
    if checks != "shipped":
        monkeypatch.setattr(Guard, "outcome_roots", lambda self, *args, **kwargs: None)
        monkeypatch.setattr(Guard, "foreseen_weights", lambda self, *args, **kwargs: None)
        monkeypatch.setattr(CallContext, "own_sums", property(lambda self: False))
        monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
    if checks == "separation-check-removed":
        original = glm._parts
        monkeypatch.setattr(module, "_parts", lambda fam, mf, beta: (original(fam, mf, beta)[0], float("inf")))


def late_steps(session, cut: float) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[str]]:
    """The relayed fit ``yc ~ s`` with ``yc = ifelse(score > cut, 1, 0)``: each step's coefficients (as every
    site derives them from the previous step's pooled parts) and its information, until the fit fails or is
    refused; and the refusals."""
    session.derive("Y", f"ifelse(D$score > {cut:g}, 1, 0)")
    session.assign_expr("T", 'cbindDS("Y,D$score", "yc,s")')
    steps = session.pooled_steps("glmDS2", Formula("yc ~ s"), "binomial", None, None, None, Ref("T"), relayed=True)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    refusals: list[str] = []
    beta = None
    try:
        for _ in range(MAX_STEPS):
            step = next(steps)
            info = np.asarray(step["info.matrix"], dtype=float)
            if beta is not None:
                out.append((beta, info))
            beta = np.linalg.solve(info, np.ravel(step["xwz"]))
    except FederatedCallError as exc:
        refusals += [e.rule or e.kind for e in exc.failures.values()]
    except np.linalg.LinAlgError:
        pass
    finally:
        steps.close()
    return out, refusals


def boundary_scores(beta: np.ndarray, info: np.ndarray) -> list[float]:
    """The two scores, one each side of the step's boundary, whose weights :math:`\\sigma'(\\eta)` give the
    step's information (least squares from a few starts); empty where the step is not steep."""
    b0, b1 = beta
    if not (np.all(np.isfinite(beta)) and b1 > 100 and 0 < -b0 / b1 < 1 and info[0, 0] > 0):
        return []
    centre, wanted = -b0 / b1, np.array([info[0, 0], info[0, 1], info[1, 1]])

    def residuals(x: np.ndarray) -> np.ndarray:
        mu = expit(b0 + b1 * x)
        w = mu * (1 - mu)
        return (np.array([w.sum(), (w * x).sum(), (w * x * x).sum()]) - wanted) / wanted[0]

    fits = [least_squares(residuals, [centre - a, centre + b], bounds=([0, centre], [centre, 1]), xtol=1e-15,
                          ftol=1e-15, gtol=1e-15) for a in (1e-3, 5e-3) for b in (1e-3, 5e-3)]
    best = min(fits, key=lambda fit: fit.cost)
    return [round(float(v), 6) for v in best.x] if best.cost < 1e-12 else []


def attack(session) -> tuple[set[float], list[str], int]:
    """The scores read (values two late steps agree on), the refusals, and the steps released."""
    read: set[float] = set()
    refusals: list[str] = []
    released = 0
    for cut in CUTS:
        try:
            out, refused = late_steps(session, float(cut))
        except FederatedCallError as exc:  # the gate keeps this cut too near an earlier one
            refusals += [e.rule or e.kind for e in exc.failures.values()]
            continue
        refusals += refused
        released += len(out)
        votes = Counter(v for beta, info in out for v in set(boundary_scores(beta, info)))
        read |= {v for v, n in votes.items() if n >= 2}
    return read, refusals, released


@pytest.mark.parametrize("checks", CHECKS)
def test_the_steep_steps_of_a_separated_logistic_fit_read_no_record(tmp_path: Path, monkeypatch, checks: str):
    truth = synthetic_frame(7, 60)
    take_out(monkeypatch, checks, glm)
    with fixed_secrets("glm separation"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        read, refusals, released = attack(session)
    scores = truth.score.to_numpy()
    exact = sorted(v for v in read if np.any(np.abs(scores - v) < 5e-7))
    print(f"ATTACK the late steps of relayed logistic fits ifelse(score > t, 1, 0) ~ score (shipped rules, one site "
          f"of 60, {checks}): {released} steps released; read {len(exact)} of 60 "
          f"scores exactly {exact} (reported {len(read)}); refusals {Counter(refusals)}")
    if checks == "shipped":  # every fit refused before its start
        assert released == 0 and exact == [] and "disclosure.cut_history" in refusals
    elif checks == "weights-check-only":
        assert released > 0 and exact == [] and "disclosure.q_threshold" in refusals
    else:
        assert len(exact) >= 2


def study_level_fit(session, cut: float) -> dict | None:
    """dsBase's study-level fit (``glmSLMADS.assign``, ``glmSLMADS2``) of ``yc ~ s`` at the cut: the site runs
    R's 25 iterations itself and releases the last coefficients, ``cov.unscaled`` (the inverse information at
    the iterate before) and the deviance."""
    session.derive("Y", f"ifelse(D$score > {cut:g}, 1, 0)")
    session.assign_expr("T", 'cbindDS("Y,D$score", "yc,s")')
    session.assign_expr("fit", 'glmSLMADS.assign(yc ~ s, "binomial", NULL, NULL, "T")')
    return next(iter(session.aggregate_expr('glmSLMADS2(yc ~ s, "binomial", NULL, NULL, "fit", "T")').values()))


def boundary_from_summary(summary: dict) -> list[float]:
    """The two scores next to the boundary, and the iterate before the last, solving the released information
    (3 sums), the last Newton step (the score at the iterate before is the information times the step: 2)
    and the deviance at the last coefficients (1): six equations in four unknowns."""
    last = np.asarray(summary["coefficients"], dtype=float)[:, 0]
    info = np.linalg.inv(np.asarray(summary["cov.unscaled"], dtype=float))
    deviance = float(summary["deviance.resid"])
    if not last[1] > 100:
        return []
    y = np.array([0.0, 1.0])

    def residuals(v: np.ndarray) -> np.ndarray:
        before, x = v[:2], v[2:]
        mu = expit(before[0] + before[1] * x)
        w = mu * (1 - mu)
        information = np.array([[w.sum(), (w * x).sum()], [(w * x).sum(), (w * x * x).sum()]])
        score = np.array([(y - mu).sum(), ((y - mu) * x).sum()])
        eta = last[0] + last[1] * x
        fitted = 2 * np.sum(np.where(y == 1, np.logaddexp(0, -eta), np.logaddexp(0, eta)))
        return np.concatenate([(information - info).ravel()[[0, 1, 3]] / info[0, 0],
                               (score - information @ (last - before)) / info[0, 0], [fitted / deviance - 1]])

    centre = -last[0] / last[1]
    fits = [least_squares(residuals, [last[0] * f, last[1] * f, centre - a, centre + b], xtol=1e-15, ftol=1e-15,
                          gtol=1e-15) for f in (0.8, 0.9, 0.95) for a in (1e-3, 5e-3) for b in (1e-3, 5e-3)]
    return [float(v) for v in min(fits, key=lambda fit: fit.cost).x[2:]]


@pytest.mark.parametrize("checks", CHECKS)
def test_a_separated_study_level_fit_reads_no_record(tmp_path: Path, monkeypatch, checks: str):
    """The same cut outcomes through ``ds.glmSLMA``'s functions, where the site iterates itself: the summary of
    the 25th iterate (slopes of 700 to 3,200) gives, by least squares on six equations, the two scores next
    to each cut to 1e-5 to 4e-4. "Read": a score reported within 1e-4 (to four decimals). On the code before:
    9 of the 14 boundary scores of 7 cuts read so. Now the fit is refused at its first step whose weights
    rest on fewer than q records; with the check taken out, the same 9. Shipped, it is refused at its first call:
    the outcome is computed from the covariate's column."""
    truth = synthetic_frame(7, 60)
    take_out(monkeypatch, checks, glm_slma)
    with fixed_secrets("glm separation"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    reported: list[float] = []
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for cut in CUTS:
            try:
                summary = study_level_fit(session, float(cut))
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            reported += boundary_from_summary(summary)
    scores = truth.score.to_numpy()
    close = sorted(round(v, 6) for v in reported if np.any(np.abs(scores - v) < 1e-4))
    print(f"ATTACK study-level logistic fits ifelse(score > t, 1, 0) ~ score (shipped rules, one site of 60, "
          f"{checks}): {len(reported)} scores reported, {len(close)} within 1e-4 "
          f"of a record's {close}; refusals {Counter(refusals)}")
    if checks == "shipped":
        assert reported == [] and "disclosure.cut_history" in refusals
    elif checks == "weights-check-only":
        assert close == [] and "disclosure.q_threshold" in refusals
    else:
        assert len(close) >= 5
