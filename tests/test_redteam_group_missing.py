"""Group means after a table of the groups, where a few of a group's records miss the variable: what the
withheld groups of ``meanSdGpDS`` protect (:meth:`~dsfed_server.disclosure.checks.Guard.release_groups`).

60 records in three groups of 20; the BMI is missing at 6 records (a pattern 6 share, so the site keeps
them, docs/governance.md): 3 of group a, 3 of group b, none of c. The attack knows the truth and reads,
from releases any analyst can ask for: the table of the groups (20 each), the mean age of each whole
group, the group sizes with a BMI (so how many of a group miss it) and the mean of ``D$age + 0*D$bmi``
by group (the age over the records with a BMI). Their difference is the mean age of the records of the
group missing their BMI: 3 records, below the site's q of 5, which a table of group by missingness
would refuse. Under the shipped rules the site withholds groups a and b and says why: the attack reads
nothing. With the row-set audit's minimum difference at 1 (the protection removed), every call passes
and the attack reads the count and the mean age of the 3 records of each group exactly.

The withheld groups together: where a's 3 and b's 1 missing BMIs are all the withheld groups hold, the
mean of ``D$age + 0*D$bmi`` over the whole table (``meanDS``) less the released groups' sums is the sum
over a and b's records with a BMI, and the whole groups' sums less it the 4 records' ages. The site then
withholds group c too (6 missing: released alone, it would complete the sum): the attack reads nothing;
with that rule taken out (``superset_gap`` patched to 0, and ``spanned_gap``, which finds the same 4 records
as the two groups' cells less their union) it reads the 4 records' count and mean age.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder
from dsfed_server.disclosure import checks
from sitekit import make_sites, rules_variant, serve
from test_derived_column_attacks import synthetic_frame

MISSING = {"a": [0, 3, 6], "b": [1, 4, 7]}  # positions of the records missing their BMI (group = position % 3)


def frame() -> pd.DataFrame:
    data = synthetic_frame(11, 60)
    data["group"] = np.array(["a", "b", "c"])[np.arange(60) % 3]
    data["bmi"] = np.round(np.random.default_rng(2).normal(26, 4, 60), 1)
    for rows in MISSING.values():
        data.loc[rows, "bmi"] = np.nan
    return data


def attack(provisioned: dict, url: str) -> dict[str, tuple[int | None, float | None]]:
    """For each group, the number of its records missing the BMI and their mean age, as read from the
    releases (None where a release withheld it)."""
    with http_builder(provisioned, {"s1": url}).login() as session:
        session.assign_table("D", "P.t")
        table = session.table1d("D$group").as_dict()
        whole = next(iter(session.aggregate_expr("meanSdGpDS(D$age, D$group)").values()))
        bmi = next(iter(session.aggregate_expr("meanSdGpDS(D$bmi, D$group)").values()))
        session.derive("V", "D$age + 0*D$bmi")
        part = next(iter(session.aggregate_expr("meanSdGpDS(V, D$group)").values()))
    read: dict[str, tuple[int | None, float | None]] = {}
    for at, group in enumerate(("a", "b", "c")):
        n_with = bmi["N_gp"][at]
        if n_with is None or part["N_gp"][at] is None:
            read[group] = (None, None)
            continue
        lacking = table[group] - n_with
        age_sum = whole["Mean_gp"][at] * whole["N_gp"][at] - part["Mean_gp"][at] * part["N_gp"][at]
        read[group] = (lacking, age_sum / lacking if lacking else None)
    return read


@pytest.mark.parametrize("min_difference", [5, 1], ids=["shipped", "protection-removed"])
def test_group_means_after_a_table_read_nothing_of_a_groups_few_records_missing_the_variable(
        tmp_path: Path, min_difference: int):
    truth = frame()
    rules = None if min_difference == 5 else rules_variant(tmp_path / "weak.toml",
                                                           subset_min_difference=min_difference)
    provisioned, services = make_sites(tmp_path, {"s1": truth}, rules)
    with serve(services["s1"]) as url:
        read = attack(provisioned, url)
    want = {group: (len(rows), float(truth.loc[rows, "age"].mean())) for group, rows in MISSING.items()}
    recovered = [g for g, (n, age) in read.items()
                 if g in want and n == want[g][0] and age is not None and abs(age - want[g][1]) < 1e-6]
    print(f"ATTACK group means after a table, subset_min_difference = {min_difference}: recovered the count and "
          f"mean age of the records missing their BMI in groups {recovered} of {sorted(want)} (truth {want}, "
          f"read {read})")
    if min_difference == 5:
        assert recovered == [] and read["a"] == read["b"] == (None, None)
        assert read["c"] == (0, None)  # group c misses nothing: its figures are released, nothing to read
    else:
        assert recovered == ["a", "b"]


def test_the_withheld_groups_are_named_with_their_reason(tmp_path: Path):
    """The answer an honest analyst gets after the table: group c's mean BMI equals pandas', groups a and
    b are withheld with the reason (the missing values, the rule), Nvalid withheld with them."""
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with serve(services["s1"]) as url:
        with http_builder(provisioned, {"s1": url}).login() as session:
            session.assign_table("D", "P.t")
            session.table1d("D$group")
            answer = next(iter(session.aggregate_expr("meanSdGpDS(D$bmi, D$group)").values()))
    assert answer["withheld"] == ["1", "2"] and answer["Nvalid"] is None
    assert answer["Mean_gp"][:2] == [None, None] and answer["N_gp"][2] == 20
    assert answer["Mean_gp"][2] == pytest.approx(truth[truth.group == "c"].bmi.mean(), rel=1e-12)
    assert answer["Message"].startswith("2 group(s) withheld (a, b): their records with a value differ from an "
                                        "earlier release over their records (a table of the factor")
    assert "in a group or in the withheld groups together, by fewer than 5 records, for instance those missing the " \
        "variable" in answer["Message"]
    assert "disclosure.subset_min_difference" in answer["Message"]


UNION = {"a": [0, 3, 6], "b": [1], "c": [2, 5, 8, 11, 14, 17]}  # 10 missing BMIs: a pattern the site keeps


@pytest.mark.parametrize("union_rule", [True, False], ids=["shipped", "union-rule-removed"])
def test_the_withheld_groups_together_read_nothing_either(tmp_path: Path, monkeypatch, union_rule: bool):
    truth = frame()
    truth["bmi"] = np.round(np.random.default_rng(2).normal(26, 4, 60), 1)
    for rows in UNION.values():
        truth.loc[rows, "bmi"] = np.nan
    if not union_rule:
        monkeypatch.setattr(checks, "superset_gap", lambda member, sets: 0)
        monkeypatch.setattr(checks, "spanned_gap", lambda member, sets, n, below: 0)
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with serve(services["s1"]) as url, http_builder(provisioned, {"s1": url}).login() as session:
        session.assign_table("D", "P.t")
        table = session.table1d("D$group").as_dict()
        whole = next(iter(session.aggregate_expr("meanSdGpDS(D$age, D$group)").values()))
        session.derive("V", "D$age + 0*D$bmi")
        overall = next(iter(session.aggregate_expr("meanDS(V)").values()))
        part = next(iter(session.aggregate_expr("meanSdGpDS(V, D$group)").values()))
    withheld = [("a", "b", "c")[int(g) - 1] for g in part["withheld"]]
    released = [at for at in range(3) if part["N_gp"][at] is not None]
    n_with = overall["Nvalid"] - sum(part["N_gp"][at] for at in released)
    age_with = overall["EstimatedMean"] * overall["Nvalid"] - sum(
        part["Mean_gp"][at] * part["N_gp"][at] for at in released)
    hidden = [at for at in range(3) if at not in released]
    lacking = sum(table[("a", "b", "c")[at]] for at in hidden) - n_with
    ages = sum(whole["Mean_gp"][at] * whole["N_gp"][at] for at in hidden) - age_with
    rows = UNION["a"] + UNION["b"]
    read = lacking == len(rows) and abs(ages / lacking - truth.loc[rows, "age"].mean()) < 1e-6
    print(f"ATTACK withheld groups together, union rule {'on' if union_rule else 'off'}: withheld {withheld}; the "
          f"hidden groups' records missing the BMI read as {lacking} (mean age {ages / max(lacking, 1):.4f}); the 4 "
          f"records of a and b: {len(rows)}, mean age {truth.loc[rows, 'age'].mean():.4f}; read: {read}")
    if union_rule:
        assert withheld == ["a", "b", "c"] and not read and lacking == len(sum(UNION.values(), []))
    else:
        assert withheld == ["a", "b"] and read
