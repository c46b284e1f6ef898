"""The GLM's parts are exact sums over the model's records: the moment attack (Denning & Schlörer 1983)
through ``glmDS2``, as a hostile analyst runs it, measured; and the fits honest analysts need.

Two writings, each over cells of the table made through the gate (subsets by an age band and by the
outcome, q records or more), each reading a cell's m scores from m power sums (Newton's identities):

- **coefficients the analyst sends** (dsBase's protocol, which DataSHIELD's ``ds.glm`` drives): a
  Poisson model ``y ~ score`` at coefficients (0, k) has the information :math:`\\sum_i e^{k s_i}`, the
  k-th power sum of :math:`e^{s}`, for k = 1 ... m;
- **prior weights the analyst derives**: a Gaussian model ``age ~ score`` with weights ``score^k`` at its
  start (no coefficients sent) has the information :math:`\\sum_i s_i^k`;
- **offsets the analyst derives**: ``score ~ 1`` (Gaussian) with the offset ``score^k`` has, at its start,
  :math:`X^TWz = \\sum_i (s_i - s_i^k)`.

Each runs against a real site server on loopback through dsfed's client over HTTP, under the shipped
rules, where it must read nothing (rule ``disclosure.sums_per_record`` counts each new coefficient
vector's information, score and deviance, and a start's sums of derived columns, as it counts means
of derived columns), and under the same rules without a release history (``cut_history = false``: the
site then counts nothing, as it counted no GLM sum before the rule covered them) and without the check of
the working weights (``Guard.working_weights``), where it reads the cells' records. That check stops the
first two writings too, without the count (0 of 46 each, rule ``disclosure.q_threshold``): at coefficients
(0, k) a Poisson fit weighs record i by :math:`e^{k s_i}`, and the weights ``score^k`` rest on the largest
scores, both on fewer than q records at the larger k. The offsets' writing, at constant working weights,
only the count stops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from rref import r_eval
from sitekit import make_sites, rules_variant, serve
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_moment_attacks import read_cells, scores_from_power_sums


def coefficient_sums(session, m: int) -> np.ndarray:
    """The cell's scores from the information of ``y ~ score`` (Poisson) at coefficients (0, k)."""
    sums = []
    for k in range(1, m + 1):
        part = next(iter(session.aggregate_expr(f'glmDS2(y ~ score, "poisson", "0,{k}", NULL, NULL, "S")').values()))
        sums.append(part["info.matrix"][0][0])
    return np.log(np.clip(scores_from_power_sums(sums), 1e-300, None))


def weight_sums(session, m: int) -> np.ndarray:
    """The cell's scores from the information of ``age ~ score`` (Gaussian) with prior weights score^k."""
    sums = []
    for k in range(1, m + 1):
        session.derive("W", f"S$score^{k}" if k > 1 else "S$score*1")
        session.assign_expr("T", 'cbindDS("S$age,S$score,W", "age,score,w")')
        part = next(iter(session.aggregate_expr('glmDS2(age ~ score, "gaussian", NULL, NULL, "w", "T")').values()))
        sums.append(part["info.matrix"][0][0])
    return scores_from_power_sums(sums)


def offset_sums(session, m: int) -> np.ndarray:
    """The cell's scores from the start of ``score ~ 1`` (Gaussian) with the offset score^k: its X'Wz is the
    sum of score - score^k (a red team's writing: an offset at the start was once taken for a constant fit)."""
    total = next(iter(session.aggregate_expr('glmDS2(score ~ 1, "gaussian", NULL, NULL, NULL, "S")').values()))
    sums = []
    for k in range(1, m + 1):
        session.derive("O", f"S$score^{k}" if k > 1 else "S$score*1")
        session.assign_expr("T", 'cbindDS("S$score,O", "score,o")')
        part = next(iter(session.aggregate_expr('glmDS2(score ~ 1, "gaussian", NULL, "o", NULL, "T")').values()))
        sums.append(total["xwz"][0] - part["xwz"][0])
    return scores_from_power_sums(sums)


WRITINGS = {"coefficients the analyst sends": coefficient_sums, "prior weights the analyst derives": weight_sums,
            "offsets the analyst derives": offset_sums}


def attack(session, truth: pd.DataFrame, writing: str) -> tuple[int, int, list[str]]:
    """Cells through the gate, then the writing's power sums in each (:func:`test_moment_attacks.read_cells`)."""
    return read_cells(session, truth, lambda m, _: WRITINGS[writing](session, m))


@pytest.mark.parametrize("writing", list(WRITINGS))
@pytest.mark.parametrize("history", [True, False], ids=["shipped rules", "no release history"])
def test_power_sums_through_the_glm_read_no_record(tmp_path: Path, monkeypatch, history: bool, writing: str):
    truth = synthetic_frame(7, 60)
    rules = None if history else rules_variant(tmp_path / "no-history.toml", cut_history="false")
    if not history:  # the working weights unchecked too: every family's fit passes it
        monkeypatch.setattr(Guard, "working_weights", lambda self, family, effective, hint: None)
    with fixed_secrets("glm moments"):
        provisioned, services = make_sites(tmp_path, {"s1": truth}, rules)
    with serve(services["s1"]) as url, http_builder(provisioned, {"s1": url}).login() as session:
        session.assign_table("D", "P.t")
        read, attacked, refusals = attack(session, truth, writing)
    setting = "shipped rules" if history else "no history, weights unchecked"
    print(f"ATTACK power sums through the GLM, {writing} ({setting}): "
          f"read {read} of {attacked} records attacked ({len(truth)} in the table); "
          f"refusals: {sorted(set(refusals))}")
    assert attacked >= 10  # the cells were made: the gate passed them
    if history:
        assert read == 0
        assert "disclosure.sums_per_record" in refusals
    else:
        assert read >= 10  # the attack is real where nothing is counted (21, 40 and 37 of 46 when written)


def test_ds_glm_at_the_analysts_coefficients_on_a_table_of_400_equals_r(tmp_path: Path):
    """``ds.glm``'s loop (coefficients from the analyst, dsBaseClient's Fisher scoring from 0) on a table of
    400 records under the shipped rules: its five iterations of three coefficients are 50 functions of
    each column, within the 100 the table's records answer; the fit equals R's ``glm``. The start
    (coefficients 0) is sums of the columns and their products, which are not counted."""
    truth = synthetic_frame(5, 400)
    with fixed_secrets("honest glm"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with serve(services["s1"]) as url, http_builder(provisioned, {"s1": url}).login() as session:
        session.assign_table("D", "P.t")
        beta, dev_old, iterations = np.zeros(3), np.inf, 0
        while iterations < 10:
            iterations += 1
            text = ",".join(repr(float(b)) for b in beta)
            part = next(iter(session.aggregate_expr(
                f'glmDS2(y ~ score + age, "binomial", "{text}", NULL, NULL, "D")').values()))
            beta = beta + np.linalg.solve(np.asarray(part["info.matrix"]), np.ravel(part["score.vect"]))
            if abs(part["dev"] - dev_old) / (abs(part["dev"]) + 0.1) <= 1e-8:
                break
            dev_old = part["dev"]
    want = r_eval("coef(glm(y ~ score + age, family = binomial, control = glm.control(epsilon = 1e-14)))",
                  y=truth.y.to_numpy(), score=truth.score.to_numpy(), age=truth.age.astype(float).to_numpy())
    assert iterations <= 6
    np.testing.assert_allclose(beta, want, rtol=1e-6)


def test_a_refused_fit_says_what_to_do_and_the_pooled_fit_stands(tmp_path: Path):
    """On a table of 60 records the analyst's coefficients are refused at the first vector with a slope
    (10 functions of each column; 15 are allowed, fewer after the start's): the refusal names the rule
    and the fits whose coefficients the sites derive, and such a fit with a derived covariate, the dsfed
    client's ``ds_glm``, equals R's."""
    from dsfed_client.analyses.glm import ds_glm

    truth = synthetic_frame(9, 60)
    with fixed_secrets("refused glm"):
        provisioned, services = make_sites(tmp_path, {"s1": truth})
    with serve(services["s1"]) as url, http_builder(provisioned, {"s1": url}).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as refused:
            for k in range(1, 4):
                session.aggregate_expr(f'glmDS2(y ~ score + age, "binomial", "-1,{k},0.01", NULL, NULL, "D")')
        (failure,) = refused.value.failures.values()
        assert failure.rule == "disclosure.sums_per_record"
        assert "ds.glmSLMA" in failure.hint and "pooled" in failure.hint
        session.derive("LA", "log(D$age)")
        session.assign_expr("E", 'cbindDS("D$y,D$score,LA", "y,score,la")')
        fit = ds_glm(session, "y ~ score + la", "E")
    want = r_eval("coef(glm(y ~ score + log(age), family = binomial, control = glm.control(epsilon = 1e-14)))",
                  y=truth.y.to_numpy(), score=truth.score.to_numpy(), age=truth.age.astype(float).to_numpy())
    np.testing.assert_allclose(np.asarray(fit.params), want, rtol=1e-6)
