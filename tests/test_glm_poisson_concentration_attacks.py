"""Red team: GLM steps whose working weights rest on one record, in a family other than the binomial.

The binomial steps of a GLM are refused when their working weights :math:`W_i` rest on fewer than q records
(Kish's effective sample size :math:`(\\sum_i W_i)^2 / \\sum_i W_i^2`, Kish 1965; ``Guard.working_weights``,
tests/test_glm_separation_attacks.py): separation drives them onto the records next to the boundary. A
Poisson fit's working weights are its fitted means, :math:`W_i = \\mu_i = e^{\\eta_i}`, and the analyst
chooses the offset: with the offset :math:`o_i = K s_i` (a straight line in a column, which the
derived-column gate passes at any slope) every iterate weighs record i by :math:`e^{K s_i}` times a smooth
function of the covariates, so at K = 600 one record, the one with the largest score (give or take the
covariates' part), holds all but :math:`e^{-K \\Delta}` of the weight (:math:`\\Delta` the gap to the next:
7e-5 for a gap of 0.016). The information matrix :math:`X^T W X` of a model ``y ~ age`` is then that record's
:math:`W_r (1, a_r)(1, a_r)^T`: its age is the ratio of the information's entries, and its score is
:math:`(\\log W_r - x_r^T\\beta)/K`.

DataSHIELD's study-level fit (``ds.glmSLMA``: ``glmSLMADS.assign``, ``glmSLMADS2``) runs R's IRLS at the
site, in floating point, and releases the last coefficients :math:`\\beta^{(25)}` and ``cov.unscaled``, the
inverse information there. From the start the first iterate overshoots (:math:`\\eta` of hundreds at the top
record) and Poisson's Newton step comes down about one unit a step, so the fit stops at 25 iterations still
concentrated: the analyst has the iterate and the information, and reads the record (``y ~ age``: its age
from the information, the offset's column from the log of its corner).

One site of 60 records (synthetic, known truth) under the shipped rules (disclosure_rules/default.toml),
a real HTTP server on loopback, the dsfed client sending dsBase's calls; groups: the table and four age
bands of 12 to 15 records (subsets the gate passes); offsets :math:`\\pm K \\cdot` score and
:math:`\\pm k \\cdot` income (the largest and the smallest record of each group; a gentler slope where the
fit overflows or its information is singular). "Read": a record whose age (exactly) and score (to 1e-6) or
income (to 0.01) the attack reports. With the rules as they were (binomial steps only, and a study-level fit's
sums not counted: tests/test_glm_slma_sums.py): 20 fits released,
7 of 60 records read, none refused by a rule (7 fits overflowed or were singular). Now every family's steps
are checked (``Guard.working_weights``, rule ``disclosure.q_threshold``), the start included: 2 fits released
(at the gentlest slopes), 0 read.

The same offsets through the relayed fit (``glmDS2``, the sites derive the iterates) read nothing even before:
the steps are fixed-point sums within 64 bits, which bounds the first iterate's overshoot (slopes of 60 on
the score, 1e-3 on the income: the weight spread over several records), and a fit with an offset counts as
a function of its column (``disclosure.sums_per_record``: the second offset on a group is refused).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from dsfed_server.functions import glm_slma
from test_derived_column_attacks import served, synthetic_frame
from test_glm_slma_sums import not_counted

BANDS = ((25, 39), (39, 53), (53, 67), (81, 90))  # age bands of 12 to 15 of the 60 records
# the offsets: each makes one record of a group (its largest or smallest score or income) hold the weight;
# the slope keeps the first iterate's exp(eta)^2 within float64 (eta up to about 350)
OFFSETS = {"score": (600.0, -400.0), "income": (0.005, -0.01)}
MODEL = "y ~ age"


def study_level_fit(session, group: str, column: str, slope: float) -> dict:
    """dsBase's study-level Poisson fit of ``y ~ age + income`` over ``group`` with the offset
    ``slope * column``: the site runs R's IRLS and releases the summary (``glmSLMADS2``)."""
    session.derive("O", f"{group}${column}*{slope:g}")
    session.assign_expr("T", f'cbindDS("{group}$y,{group}$age,O", "y,age,o")')
    session.assign_expr("fit", f'glmSLMADS.assign({MODEL}, "poisson", "o", NULL, "T")')
    return next(iter(session.aggregate_expr(f'glmSLMADS2({MODEL}, "poisson", "o", NULL, "fit", "T")').values()))


def record_from_summary(summary: dict, slope: float) -> tuple[float, float] | None:
    """The age and the offset's column of the record holding the weight at the iterate before the last: the
    information's entries over its corner, and the column from the log of the corner."""
    last = np.asarray(summary["coefficients"], dtype=float)[:, 0]
    info = np.linalg.inv(np.asarray(summary["cov.unscaled"], dtype=float))
    if not np.all(np.isfinite(info)) or info[0, 0] <= 0:
        return None
    age = info[0, 1] / info[0, 0]
    return age, (np.log(info[0, 0]) - last @ np.array([1.0, age])) / slope


def attack(session) -> tuple[list[tuple[str, float, float]], list[str], int]:
    """Every record reported (the offset's column, age, that column's value), the refusals, and the fits
    released."""
    reported: list[tuple[str, float, float]] = []
    refusals: list[str] = []
    fits = 0
    groups = ["D"]
    for lo, hi in BANDS:
        session.assign_expr(f"A{lo}", f'dataFrameSubsetDS2("D", "D$age", "{lo}", 6, NULL, NULL, FALSE)')
        session.assign_expr(f"B{lo}", f'dataFrameSubsetDS2("A{lo}", "A{lo}$age", "{hi}", 3, NULL, NULL, FALSE)')
        groups.append(f"B{lo}")
    for group in groups:
        for column, ends in OFFSETS.items():
            for steepest in ends:
                for slope in steepest / np.array([1, 4, 16]):  # gentler where the fit overflows or is singular
                    try:
                        summary = study_level_fit(session, group, column, float(slope))
                    except FederatedCallError as exc:
                        refusals += [e.rule or e.kind for e in exc.failures.values()]
                        continue
                    fits += 1
                    found = record_from_summary(summary, float(slope))
                    if found is not None:
                        reported.append((column, *found))
                    break
    return reported, refusals, fits


def records_read(truth: pd.DataFrame, reported: list[tuple[str, float, float]]) -> list[int]:
    """The rows of ``truth`` whose age (exactly) and score (to 1e-6) or income (to 0.01), the offset's
    column, some report gives."""
    read: set[int] = set()
    for column, age, value in reported:
        read |= set(truth.index[(np.abs(truth.age - age) < 1e-3)
                                & (np.abs(truth[column] - value) < (5e-7 if column == "score" else 5e-3))])
    return sorted(read)


@pytest.mark.parametrize("check", [True, False], ids=["shipped", "binomial-only-check"])
def test_study_level_poisson_fits_with_a_steep_offset_read_no_record(tmp_path: Path, monkeypatch, check: bool):
    truth = synthetic_frame(7, 60)
    if not check:  # the rules as they were: binomial steps only, and a study-level fit's sums not counted
        original = Guard.working_weights
        monkeypatch.setattr(Guard, "working_weights", lambda self, family, effective, hint:
                            original(self, family, effective, hint) if family == "binomial" else None)
        monkeypatch.setattr(glm_slma, "count_sums", not_counted)
    with served(tmp_path, {"s1": truth}) as (provisioned, urls, _), http_builder(provisioned, urls).login() as session:
        session.assign_table("D", "P.t")
        reported, refusals, fits = attack(session)
    read = records_read(truth, reported)
    print(f"ATTACK study-level Poisson fits {MODEL} with the offsets +-K*score, +-k*income (shipped rules, one "
          f"site of 60 over HTTP, the table and 4 age bands; {'every family' if check else 'binomial steps only'} "
          f"checked): {fits} fits released, read {len(read)} of 60 records (age exactly, score to 1e-6 or income "
          f"to 0.01) {read} (reported {len(reported)}); refusals {Counter(refusals)}")
    if check:
        assert read == [] and "disclosure.q_threshold" in refusals
    else:
        assert len(read) >= 4
