"""Red team: a small site's whole table in fits summed over three sites. Where the other sites release their
own parts per site (``glmDS2`` at the fit's last coefficients, sent by the analyst, counted there over their own
records), the sums less them give the small site's end -- tests/test_glm_pooled_share_attack.py's attack, but
over a site's whole table, which the row-set audit does not tell from a table.

Three sites under the shipped rules (``sitekit.make_sites``: default.toml): a hospital of ten records (the age
band 43 <= age < 54 of tests/test_glm_study_fit_attack.py's sixty) beside two of 1,000. The analyst fits, relayed
over the three whole tables (the sites derive every iterate), the logistic fits of the outcome on each table
column and each pair of them (score, age, weight, height: ten fits of at most three coefficients, as the small
site's ``glm_saturation`` allows), and asks the two large sites for their own parts at each fit's last
coefficients: 84 equations in the small site's 40 values besides the moments its table gives (each column's sum
and sum of squares, ``varDS``). The fits' coefficients are the large sites' (the small site's records barely move
them), so the equations are nearly dependent: the three fits of tests/test_glm_pooled_share_attack.py leave the
solve's Jacobian at a condition number of 1e6 here and read nothing; ten read the table.

The same beside two sites of 200 (twenty times its records): under ``glm_peer_ratio`` 20, shipped before, the
site counted nothing and the large sites afforded all ten fits' own parts (each counts 36 functions of the outcome
against its 50); the analyst read all ten records. Now (ratio 2) the end counts at the small site, each function
as half of one: the first fit is refused there.

"Read": the solve of least cost over the 252 outcome patterns with the released count of positives (ages rounded
to whole years, weights and heights to the decimal the table keeps, the scores solved again) against the truth: a
record whose score is within 1e-3 and whose age, weight, height and outcome are exact. The control counts the end
of a fit over whole tables summed over three sites nowhere, as before. Now a site counts it where the other
sites' counts afford on average more than ``disclosure.glm_peer_ratio`` times its own: the first fit is
refused at the small site.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bandsolve import Band
from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from dsfed_server.disclosure.checks import Guard
from sitekit import DEFAULT_RULES, make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm import r_glm
from test_glm_pooled_share_attack import site_end
from test_glm_study_fit_attack import HI, LO

COLUMNS = ("score", "age", "weight", "height")
SCALE = {"score": 1.0, "age": 100.0, "weight": 100.0, "height": 100.0}  # unknowns solved as value / scale
BOUNDS = {"score": (0.0, 1.0), "age": (0.25, 0.90), "weight": (0.3, 1.3), "height": (1.3, 2.1)}
DECIMALS = {"age": 0, "weight": 1, "height": 1}
STARTS = 60
EXACT = 1e-13  # a solve's cost where every equation holds to the sums' rounding
FITS = [cols for k in (1, 2) for cols in itertools.combinations(COLUMNS, k)]


def releases(session) -> tuple[dict, list[str]]:
    """The small site's size, count of positives and each column's sum and sum of squares (per site), and
    each fit's end there: the sums over the three sites less the two large sites' own parts."""
    session.assign_table("D", "P.t")
    own = session.site_view("s1")
    out: dict = {"n": int(own.aggregate_expr("dimDS(D)")["s1"][0]), "fits": {}}
    for column in (*COLUMNS, "y"):
        v = own.aggregate_expr(f"varDS(D${column})")["s1"]
        out[column] = (float(v["Sum"]), float(v["SumOfSquares"]))
    for a, b in itertools.combinations(COLUMNS, 2):  # least squares: the cross sums, and with the outcome
        own.assign_expr("g", f'glmSLMADS.assign(y ~ {a} + {b}, "gaussian", NULL, NULL, "D")')
        g = own.aggregate_expr(f'glmSLMADS2(y ~ {a} + {b}, "gaussian", NULL, NULL, "g", "D")')["s1"]
        xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
        xty = xtx @ np.asarray(g["coefficients"], float)[:, 0]
        out[a, b], out["y", a], out["y", b] = xtx[1, 2], xty[1], xty[2]
    refusals: list[str] = []
    try:
        for columns in FITS:
            formula = "y ~ " + " + ".join(columns)
            beta, info, score, _ = site_end(session, session, ("s2", "s3"), formula, "D")
            out["fits"][columns] = (beta, info, score)
    except FederatedCallError as exc:
        refusals += [e.rule or e.kind for e in exc.failures.values()]
    return out, refusals


def equations(r: dict) -> Band:
    """The released sums less the same sums of candidate values (each column over the records, divided by its
    scale) and outcomes: 0 at the truth."""
    fits = [(columns, coef, information, score) for columns, (coef, information, score) in r["fits"].items()]
    return Band(r["n"], COLUMNS, SCALE, r, fits)


def read(r: dict, truth: pd.DataFrame, starts: int = STARTS) -> int:
    """Least squares from up to ``starts`` random starts, until one solves every equation (the records are
    exchangeable, so any outcome pattern with the released count of positives is the truth's up to their
    order); the solve of least cost, rounded where
    the table keeps whole years or one decimal, its scores solved again, against the truth."""
    n, k = r["n"], round(r["y"][0])
    band = equations(r)
    scale = np.repeat([SCALE[c] for c in COLUMNS], n)
    lo = np.repeat([BOUNDS[c][0] for c in COLUMNS], n)
    hi = np.repeat([BOUNDS[c][1] for c in COLUMNS], n)
    y = np.r_[np.ones(k), np.zeros(n - k)]
    best = None
    for seed in range(starts):
        f = band.solve(np.random.default_rng(seed).uniform(lo, hi), y, (lo, hi), max_nfev=60)
        f = band.solve(f.x, y, (lo, hi), xtol=1e-15, ftol=1e-15, gtol=1e-15, max_nfev=400)
        if best is None or f.cost < best.cost:
            best = f
        if f.cost < EXACT:  # exact sums: the released sums to rounding (the analyst stops on the cost alone)
            break
    values = best.x * scale  # type: ignore[union-attr]
    for i, c in enumerate(COLUMNS):  # the table keeps whole years and one decimal: rounded so
        if c in DECIMALS:
            values[i * n:(i + 1) * n] = np.round(values[i * n:(i + 1) * n], DECIMALS[c])
    fixed = values[n:] / scale[n:]
    s = band.solve_first(best.x[:n], fixed, y, xtol=1e-14, ftol=1e-14).x  # type: ignore[union-attr]
    got = pd.DataFrame({"score": s, **{c: values[i * n:(i + 1) * n] for i, c in enumerate(COLUMNS) if i},
                        "y": y}).sort_values("score").reset_index(drop=True)
    want = truth.sort_values("score").reset_index(drop=True)
    hit = (np.abs(got.score - want.score) < 1e-3) & (got.y == want.y)
    for c in DECIMALS:
        hit &= np.abs(got[c] - want[c]) < 1e-6
    return int(hit.sum())


def attack(tmp: Path, large: int = 1000, rules: Path | None = None) -> tuple[int, list[str]]:
    frame = synthetic_frame(7, 60)
    truth = frame[(frame.age >= LO) & (frame.age < HI)].reset_index(drop=True)
    with fixed_secrets("small site share"):
        provisioned, services = make_sites(tmp, {"s1": truth, "s2": synthetic_frame(8, large),
                                                 "s3": synthetic_frame(9, large)}, rules)
    with inprocess_builder(provisioned, services).login() as session:
        found, refusals = releases(session)
    return (read(found, truth) if len(found["fits"]) == len(FITS) else 0), refusals


def test_a_small_sites_whole_table_taken_apart_from_fits_over_three_sites_reads_no_record(tmp_path: Path,
                                                                                          monkeypatch):
    read_now, refusals = attack(tmp_path / "counted")
    print(f"ATTACK ten relayed fits over a site of 10 and two of 1,000, the others' own parts subtracted "
          f"(shipped rules): read {read_now} of 10; refusals {refusals}")
    assert read_now == 0 and refusals == ["disclosure.sums_per_record"]  # at the small site only
    monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)  # the control: as before
    read_before, refusals_before = attack(tmp_path / "before")
    print(f"CONTROL the end of a fit over whole tables summed over three sites not counted: read {read_before} "
          "of 10")
    assert refusals_before == [] and read_before == 10


def test_a_site_twenty_times_smaller_than_its_peers_is_read_under_the_ratio_shipped_before_and_not_now(
        tmp_path: Path):
    read_now, refusals = attack(tmp_path / "counted", large=200)
    print(f"ATTACK ten relayed fits over a site of 10 and two of 200, the others' own parts subtracted (shipped "
          f"rules, glm_peer_ratio 2): read {read_now} of 10; refusals {refusals}")
    assert read_now == 0 and refusals == ["disclosure.sums_per_record"]  # at the small site only
    shipped = DEFAULT_RULES.read_text()
    assert "\nglm_peer_ratio = 2.0\n" in shipped
    before = tmp_path / "ratio-20.toml"  # the control: the value shipped before, all else the shipped file's
    before.write_text(shipped.replace("\nglm_peer_ratio = 2.0\n", "\nglm_peer_ratio = 20.0\n"))
    read_before, refusals_before = attack(tmp_path / "before", large=200, rules=before)
    print(f"CONTROL glm_peer_ratio 20 (shipped before): read {read_before} of 10; refusals {refusals_before}")
    assert refusals_before == [] and read_before == 10


def sparse(frame: pd.DataFrame, known: int) -> pd.DataFrame:
    """``frame`` with the weight missing but in its first ``known`` records."""
    frame = frame.copy()
    frame.loc[known:, "weight"] = np.nan
    return frame


CASES = {"60 beside tables of 100": (60, 100, None), "40 beside tables of 1,000": (40, 1000, None),
         "40 beside tables of 1,000 that know 60 weights": (40, 1000, 60)}


@pytest.mark.parametrize("case", CASES)
def test_a_fit_over_three_sites_counts_a_sites_end_only_beside_sites_keeping_more_than_the_ratio(tmp_path: Path,
                                                                                                 case: str):
    """Three logistic fits relayed over a site's whole table of ``small`` records and two other sites' (shipped
    rules: ratio 2). Beside tables of 100 the site of 60 counts nothing, and the fits equal R's glm on the
    pooled records. Beside tables of 1,000 a site of 40 counts its end, ten functions of the score per fit,
    each as half of one, and forty records answer ten: two fits are released, equal to R, the third refused at
    that site alone, naming the ratio. The same beside tables of 1,000 whose weight is known in 60 records
    each, which the second fit (of the weight) is over: the ratio is to the records the other sites keep, not
    to those a fit is over (each affords its count over every record it keeps, however the fits split them;
    were that fit not counted, the third would be released)."""
    small, large, known = CASES[case]
    frames = {"s1": synthetic_frame(7, 60).head(small), "s2": synthetic_frame(8, large),
              "s3": synthetic_frame(9, large)}
    if known is not None:
        frames = {site: sparse(frame, known) if site != "s1" else frame for site, frame in frames.items()}
    pooled = pd.concat(frames.values(), ignore_index=True)
    provisioned, services = make_sites(tmp_path, frames)
    released, refused = {}, []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for formula in ("y ~ score + age", "y ~ score + weight", "y ~ score + height"):
            try:
                released[formula] = ds_glm(session, formula, "D", null_model=False)
            except FederatedCallError as exc:
                refused += [(site, e.rule, e.hint) for site, e in exc.failures.items()]
    for formula, fit in released.items():
        want = r_glm(pooled, formula, "binomial", "logit")["coef"]
        np.testing.assert_allclose(fit.params, want, rtol=1e-8, atol=1e-9)
    if small == 60:
        assert len(released) == 3 and not refused
    else:
        assert list(released) == ["y ~ score + age", "y ~ score + weight"]
        assert [(site, rule) for site, rule, _ in refused] == [("s1", "disclosure.sums_per_record")]
        assert "glm_peer_ratio" in refused[0][2]
