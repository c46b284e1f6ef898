"""Red team: the cluster attack of tests/test_glm_separation_cluster_attacks.py through outcomes whose roots the
outcome rule cannot tie to the covariate -- closed by the site's own fit of its records (``Guard.foreseen_weights``).

``Guard.outcome_roots`` refuses ``ifelse(D$weight > t, 1, 0) ~ weight`` by the outcome's root column. Two outcomes
order the records as the covariate does and pass it: a cut of another column that is a monotone function of the
covariate's (``weight_lb``, the weight in lb to one decimal, stored beside the weight in kg), and a cut that lost
its provenance (``asNumericDS(asFactorDS2(ifelse(D$weight > t, 1, 0)))``: a factor made of the cut, turned back
into numbers; the factor itself cannot be an outcome, the response must be numeric). Either is separated by the
covariate on the site's records (Albert & Anderson 1984), so each fit gives the steps before the working-weights
refusal, and the cluster attack's least squares solves them for the column.

The attack knows what the releases give and the analyst's own cuts (in lb, ``(t + 0.05) * 2.20462``, which parts
the weights in kg exactly where ``t`` does); the truth is the 60 weights. One site of 60 (synthetic), shipped
rules, cuts every 2.5 kg from 55 to 95 kg. Measured before: through ``weight_lb``, 8 cuts passed the gate (its own
cut history), 5 fits gave 27 later steps, 28 of 60 weights within 1e-3 and 42 within 0.05; through the factor, 6
cuts, 5 fits, 26 later steps, 18 and 52. Now 0 and 0: the site fits its own records first, the weights of that fit
gather below q, and the fit is refused before its start (rule ``disclosure.q_threshold``). The control takes that
check out and reads what was read before.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import inprocess_builder
from dsfed_server.context import CallContext
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_separation_cluster_attacks import COLUMN, cluster_attack

POUNDS = 2.20462  # per kg


def cut_outcome(session, kind: str, cut: float) -> None:
    """``Y``, the analyst's outcome at the cut ``cut`` kg: of the weight in lb, or of the weight without provenance."""
    if kind == "pounds":
        session.derive("Y", f"ifelse(D${COLUMN}_lb > {(cut + 0.05) * POUNDS:.4f}, 1, 0)")
        return
    session.derive("Y0", f"ifelse(D${COLUMN} > {cut:g}, 1, 0)")
    session.assign_expr("F", 'asFactorDS2("Y0", "0,1")')
    session.assign_expr("Y", 'asNumericDS("F")')


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pounds", "factor-as-numbers"])
@pytest.mark.parametrize("check", [True, False], ids=["shipped", "without-the-own-fit-check"])
def test_an_outcome_ordered_as_the_covariate_reads_no_record(tmp_path: Path, monkeypatch, check: bool, kind: str):
    truth = synthetic_frame(7, 60)
    truth[f"{COLUMN}_lb"] = np.round(truth[COLUMN] * POUNDS, 1)
    if not check:  # the rules as they were: the outcome rule by roots, then the working weights (the fit's end
        # not counted: counted, it refuses the third fit, and the two left read 9 and 10 of 60 within 1e-3)
        monkeypatch.setattr(Guard, "foreseen_weights", lambda self, *args, **kwargs: None)
        monkeypatch.setattr(CallContext, "own_sums", property(lambda self: False))
        monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
    with fixed_secrets("glm separation"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        fits, refusals, cuts, exact, rounded = cluster_attack(session, truth,
                                                              lambda cut: cut_outcome(session, kind, cut))
    print(f"ATTACK every {COLUMN} from separated logistic fits of an outcome through {kind} at {cuts} cuts the gate "
          f"passed ({'shipped rules' if check else 'without the own-fit check'}, one site of 60): {len(fits)} fits "
          f"gave steps ({sum(len(s) - 1 for s in fits.values())} later steps), {len(refusals)} refused; {exact} of "
          f"60 values within 1e-3, {rounded} within 0.05")
    assert cuts >= 3
    if check:
        assert not fits and exact == 0 and rounded == 0
        assert len(refusals) == cuts  # every fit refused before its start, by the site's own fit
        assert all(r.startswith("disclosure.q_threshold") and "not a recorded column" in r for r in refusals)
    else:  # the control: the attack as it read before
        assert len(fits) >= 3 and exact >= 10
