"""Red team: the later steps of a GLM fit whose iterates the sites derive (the pooled or relayed protocol,
``glm.irls_steps``). ``disclosure.sums_per_record`` counts the sums of such a fit's start; each later step
releases the information, score and deviance at an iterate no analyst chose, and these were not counted.

The iterate is the data's, but the function it is evaluated through is the analyst's: a Poisson model
``y ~ 1`` with the offset :math:`o_i = k c\\,s_i` (a straight line in the score, so its start sums count
as the score's: one function for every k) has at its first iterate :math:`\\beta^{(1)}` (which the sites
derive from the start's pooled sums, and so does the analyst) the information
:math:`e^{\\beta^{(1)}} \\sum_i e^{k c s_i}`: the k-th power sum of :math:`e^{c s}` over the fit's records.
k = 1 ... m over a subset of m records give its m scores (Newton's identities; Denning & Schlörer 1983), as
analyst-chosen coefficients did before they were counted (tests/test_glm_sum_attacks.py).

One site of 60 records under the shipped rules, the dsfed client's relayed fit (the sites derive every
iterate); subsets by age band of 12 records or more (a Poisson start counts three functions, which a
subset of 12 answers). "Read": a subset's records whose exact score (6 decimals) the analyst recovers.
On the code before the fit was counted with its offset written exactly: 10 of 54 read, nothing refused.
Now a counted start stands for its fit, named by its offset as it is (``score*3`` and ``score*6`` are two
fits): the second slope is refused in every band. The honest fits with an offset or weights still equal
R's ``glm`` (tests/test_glm.py, ``test_weights_and_offset_equal_R``; tests/test_pooled_small_sites.py).

A logistic fit of a 0/1 outcome starts at constant working weights, so its start's sums are moments and
were not counted as a fit at all; with the offset ``k*score`` its first iterate's information and score
are 2m equations in a band's m scores for k = 1 ... m. Least squares from 40 starts read 26 of 54 scores
to six decimals on the code before such a fit was counted, nothing refused. Relayed over this one site,
the analyst reads the site's own fit, whose end now counts as one coefficient vector (three functions for
``y ~ 1``), named by the offset written exactly (``score*1`` and ``score*2`` are two fits): a band of 12 to
15 records answers 3, the second slope is refused in every band, and the equations left read nothing.
Pooled over three sites or more the fit counts as one function of its offset's columns: counted as a fit's
p(p+1)/2 + p + 1 parts, the demo's calibration-in-the-large (``y ~ 1``, offset ``logit(p)``) was refused on its
sites of 45 to 55 records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Formula, Ref
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_moment_attacks import scores_from_power_sums

BANDS = ((25, 39), (39, 53), (53, 67), (81, 90))  # age bands of 12 to 15 of the 60 records
C = 3.0  # the offset's slope per power: e^{3 s} keeps the powers apart and the sums within the fixed point


def first_iterate_information(session, symbol: str) -> float:
    """The information of the relayed fit ``y ~ 1`` (Poisson, offset ``o``) at its first iterate, over
    e^{beta(1)}: the sum of e^o over the fit's records."""
    steps = session.pooled_steps("glmDS2", Formula("y ~ 1"), "poisson", None, "o", None, Ref(symbol), relayed=True)
    start = next(steps)
    beta = np.linalg.solve(np.asarray(start["info.matrix"]), np.ravel(start["xwz"]))  # as every site derives it
    first = next(steps)
    steps.close()
    return float(np.asarray(first["info.matrix"])[0, 0] / np.exp(beta[0]))


def attack(session, truth: pd.DataFrame) -> tuple[int, int, list[str]]:
    read, attacked, refusals = 0, 0, []
    for lo, hi in BANDS:
        cell = np.sort(truth[(truth.age >= lo) & (truth.age < hi)].score.to_numpy())
        try:
            session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{lo}", 6, NULL, NULL, FALSE)')
            session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{hi}", 3, NULL, NULL, FALSE)')
            m = next(iter(session.aggregate_expr("dimDS(S)").values()))[0]
        except FederatedCallError as exc:
            refusals += [e.rule or e.kind for e in exc.failures.values()]
            continue
        attacked += cell.size
        try:
            sums = []
            for k in range(1, m + 1):
                session.derive("O", f"S$score*{k * C:g}")
                session.assign_expr("T", 'cbindDS("S$y,O", "y,o")')
                sums.append(first_iterate_information(session, "T"))
        except FederatedCallError as exc:
            refusals += [e.rule or e.kind for e in exc.failures.values()]
            continue
        found = np.round(np.log(np.clip(scores_from_power_sums(sums), 1e-300, None)) / C, 6)
        read += int(np.sum(np.isclose(found, cell, rtol=0, atol=5e-7)))
    return read, attacked, refusals


def test_the_later_iterates_of_a_site_derived_fit_read_no_record(tmp_path: Path):
    truth = synthetic_frame(7, 60)
    with fixed_secrets("glm iterates"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        read, attacked, refusals = attack(session, truth)
    print(f"ATTACK power sums through the first site-derived iterate of Poisson fits with the offset k*{C:g}*score "
          f"(shipped rules, one site of 60): read {read} of {attacked} records attacked; "
          f"refusals {sorted(set(refusals))}")
    assert attacked >= 36  # the subsets were made
    assert read == 0 and "disclosure.sums_per_record" in refusals


def logistic_first_iterates(session, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per slope k = 1 ... m: the first iterate's intercept of the relayed logistic fit ``y ~ 1`` with the offset
    ``k*C_LOGIT*score`` over the subset ``S`` (as every site derives it from the start's pooled sums), and the
    information and score there."""
    b, information, score = [], [], []
    for k in range(1, m + 1):
        session.derive("O", f"S$score*{k * C_LOGIT:g}")
        session.assign_expr("T", 'cbindDS("S$y,O", "y,o")')
        steps = session.pooled_steps("glmDS2", Formula("y ~ 1"), "binomial", None, "o", None, Ref("T"), relayed=True)
        start = next(steps)
        b.append(float(np.linalg.solve(np.asarray(start["info.matrix"]), np.ravel(start["xwz"]))[0]))
        first = next(steps)
        steps.close()
        information.append(float(np.asarray(first["info.matrix"])[0, 0]))
        score.append(float(np.ravel(first["score.vect"])[0]))
    return np.array(b), np.array(information), np.array(score)


def scores_from_logistic_iterates(b: np.ndarray, information: np.ndarray, score: np.ndarray, positives: float
                                  ) -> np.ndarray:
    """The m scores :math:`s` solving :math:`\\sum_i \\sigma'(b_k + k c s_i)` = information and
    :math:`\\sum_i y_i - \\sigma(b_k + k c s_i)` = score for k = 1 ... m (least squares from many starts)."""
    from scipy.optimize import least_squares
    from scipy.special import expit

    slopes = np.arange(1, b.size + 1)[:, None] * C_LOGIT

    def residuals(s: np.ndarray) -> np.ndarray:
        mu = expit(b[:, None] + slopes * s[None, :])
        return np.concatenate([(mu * (1 - mu)).sum(axis=1) - information, positives - mu.sum(axis=1) - score])

    rng = np.random.default_rng(0)
    fits = (least_squares(residuals, np.sort(rng.uniform(0, 1, b.size)), bounds=(0, 1), xtol=1e-15, ftol=1e-15,
                          gtol=1e-15) for _ in range(40))
    return np.sort(min(fits, key=lambda fit: fit.cost).x)


C_LOGIT = 1.0  # the offset's slope per step: k*score with k up to 15 keeps the logistic curve's slope readable


def test_the_first_iterates_of_logistic_fits_with_an_offset_read_no_record(tmp_path: Path):
    """A logistic fit of a 0/1 outcome starts at constant working weights, so its start's sums are moments,
    counted as a table column's are (free); its later steps were not counted at all. With the offset
    ``k*score``, its first iterate's information and score are two new functions of the scores for every k:
    m slopes over a subset of m records are 2m equations in its m scores."""
    truth = synthetic_frame(7, 60)
    with fixed_secrets("glm logistic iterates"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    read = attacked = 0
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for lo, hi in BANDS:
            band = truth[(truth.age >= lo) & (truth.age < hi)]
            session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{lo}", 6, NULL, NULL, FALSE)')
            session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{hi}", 3, NULL, NULL, FALSE)')
            attacked += len(band)
            try:
                b, information, score = logistic_first_iterates(session, len(band))
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            found = np.round(scores_from_logistic_iterates(b, information, score, float(band.y.sum())), 6)
            read += int(np.sum(np.isclose(found, np.sort(band.score.to_numpy()), rtol=0, atol=5e-7)))
    print(f"ATTACK the first site-derived iterate of logistic fits with the offset k*{C_LOGIT:g}*score (shipped "
          f"rules, one site of 60): read {read} of {attacked} records attacked; refusals {sorted(set(refusals))}")
    assert attacked >= 36
    assert read == 0 and "disclosure.sums_per_record" in refusals
