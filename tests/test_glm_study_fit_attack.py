"""Red team: logistic fits of table columns run to their end at one site. Such a fit starts at constant
working weights, so its start gives only moments; but its end gives the score equations
:math:`X^T(y - \\sigma(X\\hat\\beta)) = 0` (the coefficients), the information
:math:`X^T W(\\hat\\beta) X` (1 / ``cov.unscaled``) and the deviance: p(p+1)/2 + p + 1 functions of the
records (Denning & Schlörer 1983's moment attack, through the logistic curve). Three fits over a subset of
ten records, ``y ~ score``, ``y ~ age`` and ``y ~ score + age``, are 19 equations beside the subset's moments
in its 20 values, and its outcome is one of 252 patterns with the released count of positives.

One site of 60 records under the shipped rules (``sitekit.make_sites``: default.toml), the age band
43 <= age < 54 (10 records); both doors where the analyst reads the site's own fit: DataSHIELD's study-level
fit (``glmSLMADS.assign`` / ``glmSLMADS2``, which ``ds.glmSLMA`` calls) and the dsfed client's relayed fit
over this one site (``ds_glm``). "Read": a record whose score two least-squares solves from other starts both
give within 1e-3, with its age and outcome. The control counts such a fit's end as the sites' own pooled fit
over three sites or more does (its start's moments only): every record read. Now the end's parts count
(``disclosure.sums_per_record``: a group of 10 records answers 2 functions of a column beyond its second
moments; ``y ~ score`` gives 6 of the score): the first fit is refused, and the moments alone read nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bandsolve import Band, outcome_patterns
from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from dsfed_server.functions import glm
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

LO, HI = 43, 54  # ten records of the sixty
FITS = (("y ~ score", ("score",)), ("y ~ age", ("age",)), ("y ~ score + age", ("score", "age")))
AGE = 10.0  # ages solved as age / 10, for conditioning


def study_level(session, formula: str) -> tuple[np.ndarray, np.ndarray]:
    """``ds.glmSLMA``'s two calls at the site: the coefficients and ``cov.unscaled``."""
    session.assign_expr("fit", f'glmSLMADS.assign({formula}, "binomial", NULL, NULL, "S")')
    out = next(iter(session.aggregate_expr(f'glmSLMADS2({formula}, "binomial", NULL, NULL, "fit", "S")').values()))
    return np.asarray(out["coefficients"], float)[:, 0], np.asarray(out["cov.unscaled"], float)


def relayed(session, formula: str) -> tuple[np.ndarray, np.ndarray]:
    """The dsfed client's fit, the site deriving its iterates (relayed over this one site)."""
    fit = ds_glm(session, formula, "S", null_model=False)
    return fit.params.to_numpy(), fit.cov_params_


def releases(session, door: Callable) -> tuple[dict, list[str]]:
    """What the analyst collects over the band: its size, each column's sum and sum of squares, the cross sums
    (a Gaussian fit's moments), and each logistic fit until a refusal."""
    out: dict = {}
    session.assign_table("D", "P.t")
    session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{LO}", 6, NULL, NULL, FALSE)')
    session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{HI}", 3, NULL, NULL, FALSE)')
    out["n"] = int(next(iter(session.aggregate_expr("dimDS(S)").values()))[0])
    for column in ("score", "age", "y"):
        v = next(iter(session.aggregate_expr(f"varDS(S${column})").values()))
        out[column] = (float(v["Sum"]), float(v["SumOfSquares"]))
    session.assign_expr("g", 'glmSLMADS.assign(y ~ score + age, "gaussian", NULL, NULL, "S")')
    g = next(iter(session.aggregate_expr('glmSLMADS2(y ~ score + age, "gaussian", NULL, NULL, "g", "S")').values()))
    xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
    out["xtx"], out["xty"] = xtx, xtx @ np.asarray(g["coefficients"], float)[:, 0]
    refusals: list[str] = []
    try:
        for formula, columns in FITS:
            coef, cov = door(session, formula)
            out[formula] = (coef, np.linalg.inv(cov), np.zeros(len(coef)), columns)  # score 0 at its estimate
    except FederatedCallError as exc:
        refusals += [e.rule or e.kind for e in exc.failures.values()]
    return out, refusals


def band(r: dict) -> Band:
    """The equations the band's releases give about its ten records' scores and ages: the moments and each
    fit's score equations and information at its coefficients."""
    xtx, xty = r["xtx"], r["xty"]
    moments = {"score": (xtx[0, 1], xtx[1, 1]), "age": (xtx[0, 2], xtx[2, 2]), ("y", "score"): xty[1],
               ("y", "age"): xty[2], ("score", "age"): xtx[1, 2]}
    fits = [(columns, coef, information, score) for coef, information, score, columns in
            (r[f] for f, _ in FITS if f in r)]
    return Band(r["n"], ("score", "age"), {"score": 1.0, "age": AGE}, moments, fits)


def solved(r: dict, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, ages and outcomes solving every equation released: each outcome pattern with the released count
    of positives, least squares on the scores and ages (from starts drawn with ``seed``); the best pattern."""
    n, k = r["n"], round(r["y"][0])
    equations = band(r)
    rng = np.random.default_rng(seed)
    bounds = np.r_[np.zeros(n), np.full(n, LO / AGE)], np.r_[np.ones(n), np.full(n, (HI - 1) / AGE)]
    trials = [(equations.solve(rng.uniform(*bounds), y, bounds, max_nfev=25), y) for y in outcome_patterns(n, k)]
    trials.sort(key=lambda t: t[0].cost)  # a few steps for every pattern, then the eight nearest solved to the end
    end, y = min(((equations.solve(f.x, y, bounds, xtol=1e-12, ftol=1e-12), y) for f, y in trials[:8]),
                 key=lambda e: e[0].cost)
    return end.x[:n], end.x[n:] * AGE, y


def read(r: dict, truth: pd.DataFrame) -> int:
    """The band's records two solves both give: score within 1e-3, age within 0.01 and the outcome."""
    band = truth[(truth.age >= LO) & (truth.age < HI)].sort_values("score")
    found = []
    for seed in (1, 2):
        s, a, y = solved(r, seed)
        order = np.argsort(s)
        found.append((s[order], a[order], y[order]))
    (s1, a1, y1), (s2, a2, y2) = found
    agree = (np.abs(s1 - s2) < 1e-3) & (np.abs(a1 - a2) < 0.01) & (y1 == y2)
    right = (np.abs(s1 - band.score.to_numpy()) < 1e-3) & (np.abs(a1 - band.age.to_numpy()) < 0.01) \
        & (y1 == band.y.to_numpy())
    return int(np.sum(agree & right))


@pytest.fixture(scope="module")
def truth() -> pd.DataFrame:
    frame = synthetic_frame(7, 60)
    assert ((frame.age >= LO) & (frame.age < HI)).sum() == 10
    return frame


def collected(tmp: Path, truth: pd.DataFrame, door: Callable) -> tuple[dict, list[str]]:
    with fixed_secrets("study fit attack"):
        provision, services = make_sites(tmp, {"s1": truth})
    with inprocess_builder(provision, services).login() as session:
        return releases(session, door)


@pytest.mark.parametrize("door", [study_level, relayed], ids=["glmSLMADS2", "relayed"])
def test_three_fits_of_a_ten_record_subset_read_nothing(tmp_path, truth, door):
    found, refusals = collected(tmp_path, truth, door)
    assert refusals == ["disclosure.sums_per_record"]  # the first logistic fit, y ~ score
    assert not any(f in found for f, _ in FITS)
    assert read(found, truth) == 0


@pytest.mark.parametrize("door", [study_level, relayed], ids=["glmSLMADS2", "relayed"])
def test_control_three_fits_counted_as_their_start_read_every_record(tmp_path, truth, door, monkeypatch):
    """The control: the fit's end counted as a fit pooled over three sites or more is (the start's moments)."""
    monkeypatch.setattr(glm, "own_end", lambda ctx, rows, roots: False)
    monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
    found, refusals = collected(tmp_path, truth, door)
    assert refusals == [] and all(f in found for f, _ in FITS)
    assert read(found, truth) == 10
