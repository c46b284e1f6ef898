"""Red team: every record of a column from the steps that separated logistic fits release before they are
refused -- closed by refusing the fit whose outcome is computed from its covariate's own column.

tests/test_glm_separation_attacks.py solves each late step of a separated fit ``ifelse(x > t, 1, 0) ~ x`` for
the two records next to the boundary; since a step whose working weights rest on fewer than q records is
refused (``Guard.working_weights``), those steps are not released and that reads nothing. The steps before
the refusal were: each step's information (3 sums), score (2) and deviance (1) at an iterate the analyst can
follow are six equations in the records' values, and the start gives the count and the sum of the values
above the cut. Over several cuts they are more equations than the column has records, and none of the later
steps is counted by ``disclosure.sums_per_record``.

The attack knows only what the releases give: for each cut the count above it (so each rank's interval
between cuts) and the steps; it solves all 60 values at once by least squares (analytic Jacobian), started
evenly within each rank's interval (which reads none: 0 within 0.05). One site of 60 records (synthetic),
the shipped rules, the column ``weight`` (kg, one decimal), relayed fits at the cuts 55, 57.5, ..., 95 kg:
the gate passes 6, of whose fits 5 (57.5, 65, 70, 77.5, 82.5) gave 4 to 6 steps each before the
working-weights refusal. Measured before: 18 of the 60 sorted values within 1e-3, 52 within 0.05 (the value, on its
one-decimal grid); from only the steps whose effective sample size is at least 2q (10): 7 and 34; 4q: 5 and 24.

Now 0 and 0: the outcome ``yc`` is computed from ``weight``, which the covariate ``x`` also reads, so the fit
is separated by construction whatever values the cut leaves on either side, and the site refuses it before
its start is released (``Guard.outcome_roots``, rule ``disclosure.cut_history``): no fit gives a step. The
control takes that check out and reads the same 18 and 52 as before.
"""

from __future__ import annotations

from collections.abc import Callable

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import least_squares
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Formula, Ref
from dsfed_server.context import CallContext
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

COLUMN, LOWEST, HIGHEST = "weight", 30.0, 130.0  # the column and the range an analyst assumes for it
CUTS = np.arange(55.0, 95.1, 2.5)
Step = tuple[np.ndarray | None, np.ndarray, np.ndarray, float]


def released_steps(session, cut: float) -> tuple[list[Step], list[str]]:
    """The relayed fit ``yc ~ x`` with ``yc = ifelse(x > cut, 1, 0)``: per step, the iterate it is at (as every
    site derives it from the step before; None at the start), its information, score and deviance; and the
    refusals (each site's rule and message) that stopped it."""
    session.assign_expr("T", f'cbindDS("Y,D${COLUMN}", "yc,x")')
    out: list[Step] = []
    refusals: list[str] = []
    beta = None
    steps = None
    try:
        steps = session.pooled_steps("glmDS2", Formula("yc ~ x"), "binomial", None, None, None, Ref("T"),
                                     relayed=True)
        for _ in range(60):
            step = next(steps)
            info = np.asarray(step["info.matrix"], dtype=float)
            out.append((beta, info, np.ravel(step["score.vect"]).astype(float), float(step["dev"])))
            beta = np.linalg.solve(info, np.ravel(step["xwz"]))
    except FederatedCallError as exc:
        refusals += [f"{e.rule}: {e}" for e in exc.failures.values()]
    except np.linalg.LinAlgError:
        pass
    finally:
        if steps is not None:
            steps.close()
    return out, refusals


def solve_column(fits: dict[float, list[Step]], n: int) -> np.ndarray:
    """The n sorted values from every fit's steps (see the module's docstring)."""
    cuts = sorted(fits)
    above: dict[float, tuple[int, float]] = {}
    for cut in cuts:  # the start: weights 3/16, mu = 1/4 + y/2, so the score is sum (y/2 - 1/4) (1, x)
        _, info, score, _ = fits[cut][0]
        above[cut] = (round((score[0] + 0.25 * n) / 0.5), (score[1] + 0.25 * info[0, 1] / (3 / 16)) / 0.5)
    lo, hi = np.full(n, LOWEST), np.full(n, HIGHEST)
    for cut in cuts:
        k = n - above[cut][0]
        lo[k:], hi[:k] = np.maximum(lo[k:], cut), np.minimum(hi[:k], cut)
    y = {cut: (np.arange(n) >= n - above[cut][0]).astype(float) for cut in cuts}
    later = [(cut, b, info, score, dev) for cut in cuts for b, info, score, dev in fits[cut] if b is not None]

    # every later step's iterate, the 0/1 outcome of its cut per record, its information, score and deviance
    b0, b1 = (np.array([b[i] for _, b, _, _, _ in later])[:, None] for i in (0, 1))
    ys = np.array([y[cut] for cut, *_ in later])
    i00, i01, i11 = (np.array([info[j, k] for _, _, info, _, _ in later])[:, None] for j, k in ((0, 0), (0, 1), (1, 1)))
    s0, s1 = (np.array([score[j] for _, _, _, score, _ in later])[:, None] for j in (0, 1))
    devs = np.array([dev for *_, dev in later])[:, None]
    scale = np.maximum(devs, 1)
    ya = np.array([y[cut] for cut in cuts])
    sums_above = np.array([above[cut][1] for cut in cuts])
    scale_above = np.maximum(sums_above, 1)[:, None]

    def residuals(u: np.ndarray) -> np.ndarray:
        mu = expit(b0 + b1 * u)
        w = mu * (1 - mu)
        deviance = 2 * np.sum(np.where(ys > 0, -np.log(mu), -np.log1p(-mu)), axis=1, keepdims=True)
        per_step = [(w.sum(axis=1, keepdims=True) - i00) / i00, ((w * u).sum(axis=1, keepdims=True) - i01) / i01,
                    ((w * u * u).sum(axis=1, keepdims=True) - i11) / i11,
                    ((ys - mu).sum(axis=1, keepdims=True) - s0) / i00,
                    (((ys - mu) * u).sum(axis=1, keepdims=True) - s1) / i01, (deviance - devs) / scale]
        starts = ((ya * u).sum(axis=1) - sums_above) / scale_above[:, 0]
        return np.concatenate([np.hstack(per_step).ravel(), starts])

    def jacobian(u: np.ndarray) -> np.ndarray:
        mu = expit(b0 + b1 * u)
        w = mu * (1 - mu)
        dw = b1 * w * (1 - 2 * mu)
        per_step = [dw / i00, (dw * u + w) / i01, (dw * u * u + 2 * w * u) / i11, -b1 * w / i00,
                    (-b1 * w * u + (ys - mu)) / i01, 2 * b1 * (mu - ys) / scale]
        return np.concatenate([np.stack(per_step, axis=1).reshape(-1, n), ya / scale_above])

    start = np.empty(n)
    for a, b in set(zip(lo, hi)):  # evenly within each rank's interval
        ranks = np.where((lo == a) & (hi == b))[0]
        start[ranks] = np.linspace(a, b, ranks.size + 2)[1:-1]
    fit = least_squares(residuals, start, jac=jacobian, bounds=(lo - 1e-9, hi + 1e-9), x_scale="jac",
                        xtol=1e-13, ftol=1e-13, gtol=1e-13, max_nfev=4000)
    return np.sort(fit.x)


def cluster_attack(session, truth: pd.DataFrame, cut_outcome: Callable[[float], None]
                   ) -> tuple[dict[float, list[Step]], list[str], int, int, int]:
    """The attack at every cut of ``CUTS`` whose outcome ``cut_outcome(cut)`` derives as ``Y`` (a cut the gate
    keeps too near an earlier one is skipped): the fits that gave steps, the refusals, the cuts made, and the
    values of ``COLUMN`` the steps solved together read within 1e-3 and within 0.05."""
    fits: dict[float, list[Step]] = {}
    refusals: list[str] = []
    cuts = 0
    for cut in CUTS:
        try:
            cut_outcome(float(cut))
        except FederatedCallError:
            continue
        cuts += 1
        steps, refused = released_steps(session, float(cut))
        refusals += refused
        if len(steps) >= 2:
            fits[float(cut)] = steps
    values = np.sort(truth[COLUMN].to_numpy())
    if not fits:  # no step released: nothing to solve
        return fits, refusals, cuts, 0, 0
    error = np.abs(solve_column(fits, values.size) - values)
    return fits, refusals, cuts, int(np.sum(error < 1e-3)), int(np.sum(error < 0.05))


@pytest.mark.parametrize("check", [True, False], ids=["shipped", "without-the-outcome-check"])
def test_the_steps_before_the_refusal_read_no_record(tmp_path: Path, monkeypatch, check: bool):
    truth = synthetic_frame(7, 60)
    if not check:  # the rules as they were: only the working weights stop the fit (its end not counted: counted,
        # it refuses the second fit, and the one left reads 4 of 60 within 1e-3)
        monkeypatch.setattr(Guard, "outcome_roots", lambda self, *args, **kwargs: None)
        monkeypatch.setattr(Guard, "foreseen_weights", lambda self, *args, **kwargs: None)
        monkeypatch.setattr(CallContext, "own_sums", property(lambda self: False))
        monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
    with fixed_secrets("glm separation"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        fits, refusals, cuts, exact, rounded = cluster_attack(
            session, truth, lambda cut: session.derive("Y", f"ifelse(D${COLUMN} > {cut:g}, 1, 0)"))
    print(f"ATTACK every {COLUMN} from the steps of separated logistic fits at {cuts} cuts the gate passed "
          f"({'shipped rules' if check else 'without the outcome check'}, one site of 60): {len(fits)} fits gave "
          f"steps ({sum(len(s) - 1 for s in fits.values())} later steps), {len(refusals)} refused; {exact} of 60 "
          f"values within 1e-3, {rounded} within 0.05")
    assert cuts >= 3
    if check:
        assert not fits and exact == 0 and rounded == 0
        assert len(refusals) == cuts  # every fit refused before its start, by the outcome rule, naming the column
        assert all(r.startswith("disclosure.cut_history") and f"computed from {COLUMN}" in r for r in refusals)
    else:  # the control: the attack as it read before
        assert len(fits) >= 3 and exact >= 10
