"""Red team: dsBase's study-level GLM (``glmSLMADS.assign`` / ``glmSLMADS2``, which ``ds.glmSLMA`` calls) fits a
model to its end at one site and releases its coefficients and covariance. Each such fit is a new function of the
columns its offset reads: a logistic fit ``y ~ 1`` with the offset :math:`k c\\,s` has at its estimate
:math:`\\hat b_k` the score equation :math:`\\sum_i \\sigma(\\hat b_k + k c s_i) = \\sum_i y_i` and the information
:math:`1/\\text{cov.unscaled} = \\sum_i \\sigma'(b_k + k c s_i)`: two equations in a subset's m scores for every
slope k (Denning & Schlörer 1983's power sums, through the logistic curve). The fits were not counted by
``disclosure.sums_per_record``, as the sites' own iterates of a pooled fit are.

One site of 60 records under the shipped rules (``sitekit.make_sites``: default.toml), the age band of 14
records of the iterate attacks; "read": a score two least-squares solves from other starts both give within 1e-3
(where the equations are fewer than the scores, a solve lands anywhere, and once in a while near one). The control, with
the count taken out of ``glmSLMADS2``, reads 5 of 14 (17 of 54 over the four bands at c = 0.9); with the count
(a fit run to its end: one coefficient vector of its model, three functions for ``y ~ 1``), the second slope is
refused and the two equations left read nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import least_squares
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.functions import glm_slma
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_iterate_attacks import BANDS

C = 0.9  # the offset's slope per fit: k*0.9*score, k up to 14, stays clear of the working-weights refusal
LO, HI = BANDS[1]  # 14 records


def study_fits(session, m: int, refusals: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per slope k = 1 ... m until a refusal: the intercept of ``y ~ 1`` (binomial, offset ``k*C*score``) that
    ``glmSLMADS2`` releases over the subset ``S``, and its information (1 / cov.unscaled)."""
    intercepts, information = [], []
    try:
        for k in range(1, m + 1):
            session.derive("O", f"S$score*{k * C:g}")
            session.assign_expr("T", 'cbindDS("S$y,O", "y,o")')
            session.assign_expr("fit", 'glmSLMADS.assign(y ~ 1, "binomial", "o", NULL, "T")')
            out = next(iter(session.aggregate_expr('glmSLMADS2(y ~ 1, "binomial", "o", NULL, "fit", "T")').values()))
            intercepts.append(float(out["coefficients"][0][0]))
            information.append(1 / float(out["cov.unscaled"][0][0]))
    except FederatedCallError as exc:
        refusals += [e.rule or e.kind for e in exc.failures.values()]
    return np.array(intercepts), np.array(information)


def scores_solved(b: np.ndarray, information: np.ndarray, m: int, positives: float, seed: int) -> np.ndarray:
    """The m scores solving both equations of every fit released (least squares from 40 starts drawn with
    ``seed``)."""
    slopes = np.arange(1, b.size + 1)[:, None] * C

    def residuals(s: np.ndarray) -> np.ndarray:
        mu = expit(b[:, None] + slopes * s[None, :])
        return np.concatenate([mu.sum(axis=1) - positives, (mu * (1 - mu)).sum(axis=1) - information])

    rng = np.random.default_rng(seed)
    fits = (least_squares(residuals, np.sort(rng.uniform(0, 1, m)), bounds=(0, 1), xtol=1e-15, ftol=1e-15,
                          gtol=1e-15) for _ in range(40))
    return np.sort(min(fits, key=lambda fit: fit.cost).x)


def attack(tmp_path: Path, truth: pd.DataFrame) -> tuple[int, int, list[str]]:
    band = truth[(truth.age >= LO) & (truth.age < HI)]
    with fixed_secrets("glm logistic iterates"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{LO}", 6, NULL, NULL, FALSE)')
        session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{HI}", 3, NULL, NULL, FALSE)')
        b, information = study_fits(session, len(band), refusals)
    true = np.sort(band.score.to_numpy())
    # read: a score two solves from other starts both give within 1e-3 (an equation short, a solve lands anywhere)
    found = [scores_solved(b, information, len(band), float(band.y.sum()), seed) if b.size
             else np.full(len(band), np.nan) for seed in (0, 1)]
    read = int(np.sum((np.abs(found[0] - true) < 1e-3) & (np.abs(found[1] - true) < 1e-3)))
    print(f"ATTACK glmSLMA logistic fits y ~ 1 with the offsets k*{C:g}*score over a band of {len(band)} records "
          f"(shipped rules): {b.size} fits released, read {read}; refusals {sorted(set(refusals))}")
    return read, len(band), refusals


def not_counted(*args, **kwargs) -> Iterator[None]:
    yield from ()


@pytest.mark.slow
def test_study_level_fits_are_counted_and_read_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    truth = synthetic_frame(7, 60)
    read, attacked, refusals = attack(tmp_path / "counted", truth)
    assert attacked == 14
    assert read == 0 and "disclosure.sums_per_record" in refusals
    monkeypatch.setattr(glm_slma, "count_sums", not_counted)  # the control: the code before, fits not counted
    read_before, _, refusals_before = attack(tmp_path / "before", truth)
    assert refusals_before == [] and read_before >= 3
