"""Red team: a fit summed over three sites can be taken apart. The relayed fit's sums over the sites hide no
site's share where the other sites release their own per site: ``glmDS2`` at the fit's last coefficients, sent
by the analyst, gives each other site's parts over its subset (counted there, over its own records), and the
sums less them give this site's end -- the score equations and information of
tests/test_glm_study_fit_attack.py's three logistic fits (``y ~ score``, ``y ~ age``, ``y ~ score + age``) over
its ten-record subset, 19 equations in its 20 values besides its moments.

Three sites under the shipped rules (``sitekit.make_sites``: default.toml): the attacked site's 60 records (age
band 43 <= age < 54: 10 records) and two of 1,000 (163 and 169 records in the band). "Read": a record the
solve of least cost gives (the analyst picks it by its cost alone; ages rounded to whole years, scores solved
again) with its score within 1e-3, its age and its outcome. The control counts such a fit's end only where the
analyst reads the site's own fit (study-level, or relayed over fewer than three sites): all ten read. Now a fit
over some of a site's records counts its end there also when it is summed over three sites or more: the first
fit is refused at the attacked site.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bandsolve import outcome_patterns
from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.glm import Formula, _parts_stream
from dsfed_server.functions import glm
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_study_fit_attack import AGE, FITS, HI, LO, band


def fit_end(session, formula: str, symbol: str = "S") -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The relayed fit (the sites derive each iterate) of ``symbol`` to R's tolerance: its last coefficients, and
    the summed information, X'Wz and deviance there."""
    stream = _parts_stream(session.aggregation(False), Formula(formula), "binomial", None, None, None, Ref(symbol),
                           link=None)
    step = next(stream)
    deviance = step.dev
    for _ in range(25):
        beta = np.linalg.solve(step.info, step.xwz)
        step = stream.send(beta)
        if abs(step.dev - deviance) / (abs(step.dev) + 0.1) < 1e-10:
            break
        deviance = step.dev
    stream.close()
    return beta, np.asarray(step.info, float), np.asarray(step.xwz, float), float(step.dev)


def site_end(session, fitted, others, formula: str, symbol: str = "S"
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The fit relayed over the session ``fitted`` (:func:`fit_end`) less the sites ``others``' own parts there
    (``glmDS2`` at its last coefficients, asked of each alone): its coefficients, and the remaining site's
    information, score equations and deviance at them."""
    beta, info, xwz, dev = fit_end(fitted, formula, symbol)
    for other in others:
        parts = session.site_view(other).aggregate("glmDS2", Formula(formula), "binomial", [float(b) for b in beta],
                                                   None, None, Ref(symbol))[other]
        info = info - np.asarray(parts["info.matrix"], float)
        xwz = xwz - np.asarray(parts["xwz"], float)
        dev -= float(parts["dev"])
    return beta, info, xwz - info @ beta, dev


def releases(session) -> tuple[dict, list[str]]:
    """The attacked site's subset moments (per site), and each fit's end there: the sums less the other sites'
    own parts at the fit's last coefficients."""
    session.assign_table("D", "P.t")
    session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{LO}", 6, NULL, NULL, FALSE)')
    session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{HI}", 3, NULL, NULL, FALSE)')
    own = session.site_view("s1")
    out: dict = {"n": int(own.aggregate_expr("dimDS(S)")["s1"][0])}
    for column in ("score", "age", "y"):
        v = own.aggregate_expr(f"varDS(S${column})")["s1"]
        out[column] = (float(v["Sum"]), float(v["SumOfSquares"]))
    own.assign_expr("g", 'glmSLMADS.assign(y ~ score + age, "gaussian", NULL, NULL, "S")')
    g = own.aggregate_expr('glmSLMADS2(y ~ score + age, "gaussian", NULL, NULL, "g", "S")')["s1"]
    xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
    out["xtx"], out["xty"] = xtx, xtx @ np.asarray(g["coefficients"], float)[:, 0]
    refusals: list[str] = []
    try:
        for formula, columns in FITS:
            beta, info, score, _ = site_end(session, session, ("s2", "s3"), formula)
            out[formula] = (beta, info, score, columns)
    except FederatedCallError as exc:
        refusals += [e.rule or e.kind for e in exc.failures.values()]
    return out, refusals


def read(r: dict, truth: pd.DataFrame) -> int:
    """Least squares over the outcome patterns with the released count of positives, from four seeds; the
    solve of least cost, its ages rounded to whole years and its scores solved again, against the truth."""
    n, k = r["n"], round(r["y"][0])
    equations = band(r)
    bounds = np.r_[np.zeros(n), np.full(n, LO / AGE)], np.r_[np.ones(n), np.full(n, (HI - 1) / AGE)]
    best = None
    for seed in range(4):
        rng = np.random.default_rng(seed)
        trials = [(equations.solve(rng.uniform(*bounds), y, bounds, max_nfev=25), y) for y in outcome_patterns(n, k)]
        trials.sort(key=lambda t: t[0].cost)
        for f, y in trials[:8]:
            end = equations.solve(f.x, y, bounds, xtol=1e-12, ftol=1e-12)
            if best is None or end.cost < best[0].cost:
                best = (end, y)
    end, y = best  # type: ignore[misc]
    a = np.round(end.x[n:] * AGE)  # ages are whole years: rounded, and the scores solved again beside them
    s = equations.solve_first(end.x[:n], a / AGE, y, xtol=1e-14, ftol=1e-14).x
    band_ = truth[(truth.age >= LO) & (truth.age < HI)].sort_values("score")
    o = np.argsort(s)
    return int(np.sum((np.abs(s[o] - band_.score.to_numpy()) < 1e-3) & (np.abs(a[o] - band_.age.to_numpy()) < 0.01)
                      & (y[o] == band_.y.to_numpy())))


def attack(tmp: Path) -> tuple[int, list[str]]:
    truth = synthetic_frame(7, 60)
    with fixed_secrets("pooled share"):
        provisioned, services = make_sites(tmp, {"s1": truth, "s2": synthetic_frame(8, 1000),
                                                 "s3": synthetic_frame(9, 1000)})
    with inprocess_builder(provisioned, services).login() as session:
        found, refusals = releases(session)
    return (read(found, truth) if all(f in found for f, _ in FITS) else 0), refusals


@pytest.mark.slow
def test_a_fit_summed_over_three_sites_taken_apart_reads_no_record(tmp_path: Path, monkeypatch):
    read_now, refusals = attack(tmp_path / "counted")
    print(f"ATTACK three relayed fits over three sites, the others' own parts subtracted (shipped rules): "
          f"read {read_now} of 10; refusals {refusals}")
    assert read_now == 0 and refusals == ["disclosure.sums_per_record"]  # at the attacked site only
    monkeypatch.setattr(glm, "own_end", lambda ctx, rows, roots: ctx.own_sums)  # the control: the end counted as before
    monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
    read_before, refusals_before = attack(tmp_path / "before")
    print(f"CONTROL the end of a fit over three sites not counted: read {read_before} of 10")
    assert refusals_before == [] and read_before == 10
