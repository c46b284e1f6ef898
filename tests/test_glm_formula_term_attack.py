"""Red team: a term the model formula computes (``I(score^k)``) is a derived column, and a fit's sums over it
are sums of that function of the score. The least-squares fit ``y ~ I(score^k)`` gives, through its
``cov.unscaled`` (:math:`(X^T X)^{-1}`), the power sums :math:`\\sum_i s_i^k` and :math:`\\sum_i s_i^{2k}` over
the fit's records; k = 1 ... m over a subset of m records give its power sums, whose polynomial's roots are the
records' scores (Newton's identities; Denning & Schlörer 1983). Such a term carried no record positions, so
``disclosure.sums_per_record`` counted nothing of a fit with one, as it counts a column derived by
``deriveDS`` (tests/test_moment_attacks.py).

One site of 60 records under the shipped rules (``sitekit.make_sites``: default.toml), the dsfed client's fit
relayed over this one site, the four age bands of 12 to 15 records of tests/test_glm_iterate_attacks.py. "Read":
a score recovered to six decimals (Newton's identities lose digits beyond a dozen powers). The control, the
term's records unknown to the count as before: 8 of 54 read, nothing refused; now the count refuses a later
power in every band and nothing is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses import ds_glm
from dsfed_server.functions import glm
from dsfed_server.modelframe import formula_variable
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_iterate_attacks import BANDS
from test_moment_attacks import scores_from_power_sums



def attack(tmp: Path, truth: pd.DataFrame) -> tuple[int, int, list[str]]:
    read, attacked, refusals = 0, 0, []
    with fixed_secrets("glm formula terms"):
        provisioned, services = make_sites(tmp, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for lo, hi in BANDS:
            cell = np.sort(truth[(truth.age >= lo) & (truth.age < hi)].score.to_numpy())
            session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{lo}", 6, NULL, NULL, FALSE)')
            session.assign_expr("S", f'dataFrameSubsetDS2("A", "A$age", "{hi}", 3, NULL, NULL, FALSE)')
            attacked += cell.size
            sums = []
            try:
                for k in range(1, cell.size + 1):
                    fit = ds_glm(session, f"y ~ I(score^{k})", "S", family="gaussian", null_model=False)
                    sums.append(float(np.linalg.inv(fit.cov_params_ / fit.dispersion)[0, 1]))
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            read += int(np.sum(np.isclose(scores_from_power_sums(sums), cell, rtol=0, atol=5e-7)))
    return read, attacked, refusals


def uncounted(ctx, table: pd.DataFrame, name: str):
    """A formula's variable as the count read it before: a computed term with no record positions."""
    series = formula_variable(table, name)
    return series, ctx.written(series)


def test_power_sums_through_formula_terms_read_no_record(tmp_path: Path, monkeypatch):
    truth = synthetic_frame(7, 60)
    read, attacked, refusals = attack(tmp_path / "counted", truth)
    print(f"ATTACK power sums through y ~ I(score^k) (shipped rules, one site of 60): read {read} of {attacked}; "
          f"refusals {sorted(set(refusals))}")
    assert attacked >= 36  # the subsets were made (bands of 12 to 15 records)
    assert read == 0 and refusals == ["disclosure.sums_per_record"] * len(BANDS)
    monkeypatch.setattr(glm, "_read", uncounted)  # the control: the count as it was
    read_before, _, refusals_before = attack(tmp_path / "before", truth)
    print(f"CONTROL the terms uncounted: read {read_before} of {attacked}; refusals {sorted(set(refusals_before))}")
    assert refusals_before == [] and read_before >= 5
