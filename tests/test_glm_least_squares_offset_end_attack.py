"""Red team: a least-squares fit with an offset has an end its start does not tell. ``count_sums`` treats a
Gaussian identity fit without prior weights as one whose end is its start's moments (``ends`` is False, with or
without an offset), and counts at its start only the offset's products with the design (``X'o``). But the start
is at R's mustart (``mu = y``: deviance 0), and the next step's deviance, released at the estimate, is
:math:`\\sum_i (y_i - o_i - x_i^T\\hat\\beta)^2`, which holds :math:`\\sum o^2` and :math:`\\sum y o`: for an offset
``g(score)`` and outcomes age, weight, height, income, new functions of the score that no count sees (the offset
is counted once, named by its core, whatever the outcome).

Three sites under the shipped rules: a site of 40 records (``floor(0.25 * 40) = 10`` functions of the score)
beside two of 1,000, so the site counts ends of whole-table fits (``glm_peer_ratio``) -- but this one has none.
The analyst fits ``col ~ 1`` with offset ``exp(k * score)``, k = 1, 2, 3, for each of four outcome columns,
relayed over the three whole tables, and subtracts the large sites' own deviances at each estimate (counted
there): the small site's :math:`\\sum (col - e^{k s} - \\hat\\beta)^2`, twelve values where the count saw three
functions (:math:`\\sum e^{k s}`). The site's own fit (``glmSLMADS2``'s ``deviance.resid``) takes the same path
through ``count_sums`` (read in the code, not measured here).

Before (the control: such an end not counted): all twelve released, each equal to the sum over the small site's
records to 1e-10. No record is read here; the test pins the accounting. Now a least-squares fit with an offset
has an end, counted as any fit's: beside the large sites, three functions of the score per fit, each as half of
one (``glm_peer_ratio`` 2), with the start's one function of each offset: the count refuses at the small site
before a seventh fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.glm import Formula, _parts_stream
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

OUTCOMES = ("age", "weight", "height", "income")


def deviances(tmp: Path, truth) -> tuple[dict, list[str]]:
    """The small site's deviance of each fit at its estimate: the relayed sum less the large sites' own."""
    with fixed_secrets("least squares offset"):
        provisioned, services = make_sites(tmp, {"s1": truth, "s2": synthetic_frame(8, 1000),
                                                 "s3": synthetic_frame(9, 1000)})
    found, refusals = {}, []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for k in (1, 2, 3):
            session.derive("O", f"exp(D$score*{k})")
            session.assign_expr("T", 'cbindDS("D$age,D$weight,D$height,D$income,O", "age,weight,height,income,o")')
            for column in OUTCOMES:
                formula = Formula(f"{column} ~ 1")
                try:
                    stream = _parts_stream(session.aggregation(False), formula, "gaussian", None, "o", None, Ref("T"),
                                           link=None)
                    start = next(stream)
                    beta = np.linalg.solve(start.info, start.xwz)
                    deviance = stream.send(beta).dev  # the parts at the estimate (one step: least squares)
                    stream.close()
                    for other in ("s2", "s3"):
                        deviance -= float(session.site_view(other).aggregate(
                            "glmDS2", formula, "gaussian", [float(b) for b in beta], "o", None, Ref("T"))[other]["dev"])
                    found[k, column] = (deviance, float(beta[0]))
                except FederatedCallError as exc:
                    refusals += [f"{site}: {e.rule}" for site, e in exc.failures.items()]
    return found, refusals


def test_a_least_squares_fits_deviance_with_an_offset_counts(tmp_path: Path, monkeypatch):
    truth = synthetic_frame(7, 40)
    for label in ("now", "control"):
        if label == "control":  # the end not counted beside the large sites, as before
            monkeypatch.setattr(Guard, "peers_outnumber", lambda self, *args: False)
        found, refusals = deviances(tmp_path / label, truth)
        for (k, column), (deviance, intercept) in found.items():
            want = float(np.sum((truth[column] - np.exp(k * truth.score) - intercept) ** 2))
            assert abs(deviance - want) <= 1e-10 * want
        print(f"{label.upper()} least-squares fits with offsets exp(k*score) beside two sites of 1,000 (shipped "
              f"rules): {len(found)} deviances of the small site's records released (sums of exp(2k*score) and of "
              f"each column times exp(k*score)); refusals {refusals}")
        if label == "now":  # each fit's end counts 3 halves of the score's ten: six fits at most
            assert len(found) <= 6 and refusals and all(r == "s1: disclosure.sums_per_record" for r in refusals)
        else:
            assert len(found) == 12 and refusals == []
