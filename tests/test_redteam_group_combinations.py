"""Red team: group means whose groups are unions of earlier cells less a few records missing the variable
(:meth:`~dsfed_server.disclosure.checks.Guard.release_groups`).

60 records in four wards a, b, c, d of 15 (a table of the ward releases their row sets), two buildings:
ab holds wards a and b, cd wards c and d. The BMI is missing at 5 records (a pattern 5 share, so the site
keeps them): 1 of ward a and 4 of ward d. ``meanSdGpDS(D$age + 0*D$bmi, D$building)`` then sums the age
over building ab less 1 record and building cd less 4. Neither group is within ``subset_min_difference``
of any one earlier row set (a ward differs from a building by 14 records or more), so the pairwise check
passes them; but each is the sum of two ward cells less a few records (Chin & Ozsoyoglu 1982: a linear
combination of three row sets). The ward sums of the age (``meanSdGpDS(D$age, D$ward)``) less the building's
give the count and the sum of the records missing their BMI:

* building cd: released, the 4 records of ward d read directly;
* building ab: withheld by the row-set audit (the 1 record is isolated), but ``meanDS`` of the same
  variable over the whole table less the released building cd is building ab's sum, and the 1 record is
  read all the same.

The attack knows the truth and reports the groups of records missing the BMI whose count and mean age it
read exactly. On the code before the span check (``differencing.spanned_gap``) it read both, 1 record of
ward a (age 36) and the 4 of ward d (mean age 48.5), nothing refused or withheld but building ab. Now
building cd is withheld too (two ward cells less it are 4 records), and with it withheld, the two
buildings together are the table's records with a BMI, 5 records short of the whole table: the attack
reads nothing. The control patches the check out (``spanned_gap`` returns 0) and reads both again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure import checks, differencing
from sitekit import make_sites
from test_derived_column_attacks import synthetic_frame

MISSING = {"a": [0], "d": [3, 7, 11, 15]}  # positions of the records missing their BMI (ward = position % 4)
WARDS = ("a", "b", "c", "d")
BUILDINGS = {"ab": ("a", "b"), "cd": ("c", "d")}


def frame() -> pd.DataFrame:
    data = synthetic_frame(11, 60)
    data["ward"] = np.array(WARDS)[np.arange(60) % 4]
    data["building"] = np.where(data.ward.isin(BUILDINGS["ab"]), "ab", "cd")
    data["bmi"] = np.round(np.random.default_rng(2).normal(26, 4, 60), 1)
    for rows in MISSING.values():
        data.loc[rows, "bmi"] = np.nan
    return data


def attack(session) -> dict[str, tuple[int, float] | None]:
    """Per building, the number of its records missing the BMI and their mean age as read (None where
    nothing was read)."""
    session.assign_table("D", "P.t")
    wards = session.table1d("D$ward").as_dict()
    by_ward = next(iter(session.aggregate_expr("meanSdGpDS(D$age, D$ward)").values()))
    session.derive("V", "D$age + 0*D$bmi")
    by_building = next(iter(session.aggregate_expr("meanSdGpDS(V, D$building)").values()))
    overall = next(iter(session.aggregate_expr("meanDS(V)").values()))
    count = {b: by_building["N_gp"][at] for at, b in enumerate(BUILDINGS)}
    total = {b: None if count[b] is None else by_building["Mean_gp"][at] * count[b] for at, b in enumerate(BUILDINGS)}
    hidden = [b for b in BUILDINGS if count[b] is None]
    if len(hidden) == 1:  # the whole table's sum less the released buildings'
        shown = [b for b in BUILDINGS if b not in hidden]
        count[hidden[0]] = overall["Nvalid"] - sum(count[b] for b in shown)
        total[hidden[0]] = overall["EstimatedMean"] * overall["Nvalid"] - sum(total[b] for b in shown)
    read: dict[str, tuple[int, float] | None] = {}
    for building, members in BUILDINGS.items():
        if count[building] is None:
            read[building] = None
            continue
        at = [WARDS.index(w) for w in members]
        lacking = sum(wards[w] for w in members) - count[building]
        ages = sum(by_ward["Mean_gp"][i] * by_ward["N_gp"][i] for i in at) - total[building]
        read[building] = (int(lacking), ages / lacking) if lacking else None
    return read


@pytest.mark.parametrize("span_check", [True, False], ids=["shipped", "span-check-removed"])
def test_groups_that_are_two_cells_less_a_few_records_read_nothing(tmp_path: Path, monkeypatch, span_check: bool):
    truth = frame()
    if not span_check:
        monkeypatch.setattr(checks, "spanned_gap", lambda member, sets, n, below: 0)
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        read = attack(session)
    want = {"ab": (1, float(truth.loc[MISSING["a"], "age"].mean())),
            "cd": (4, float(truth.loc[MISSING["d"], "age"].mean()))}
    recovered = [b for b, got in read.items() if got is not None and got[0] == want[b][0]
                 and abs(got[1] - want[b][1]) < 1e-6]
    print(f"ATTACK groups as two cells less a few records (shipped rules, span check "
          f"{'on' if span_check else 'off'}): read the count and mean age of the "
          f"records missing their BMI in buildings {recovered} of {sorted(want)} (truth {want}, read {read})")
    assert recovered == ([] if span_check else ["ab", "cd"])


def test_the_span_check_finds_a_group_a_few_records_from_a_combination_of_cells():
    """``spanned_gap`` over four cells of 15 (and the table): a group that is two cells less or plus a few
    records, also where a further cell splits the cells' atoms, is that few records from the span; a cell
    itself is 0 from it; with only the table and one cell released, the nearest union in the span is the table
    less that cell."""
    n = 60
    cells = [np.arange(n) % 4 == k for k in range(4)]
    packed = [np.packbits(c) for c in [np.ones(n, dtype=bool), *cells]]

    def gap(group: np.ndarray, sets: list[np.ndarray] = packed) -> int:
        return differencing.spanned_gap(np.packbits(group), sets, n, below=n)

    less = cells[0] | cells[1]
    less[[0, 4, 8]] = False
    more = cells[0] | cells[1]
    more[[2, 6]] = True
    split = cells[0] | cells[1]
    split[[0, 1, 4]] = False
    assert (gap(less), gap(more), gap(cells[2])) == (3, 2, 0)
    assert gap(split, packed + [np.packbits(np.arange(n) < 30)]) == 3
    unspanned = cells[1] | cells[2]
    unspanned[[1, 2]] = False
    assert gap(unspanned, packed[:2]) == 45 - 28  # only the table and cell a known: the table less a is nearest


@pytest.mark.parametrize("span_check", [True, False], ids=["shipped", "span-check-removed"])
def test_a_subset_that_is_two_cells_less_a_few_records_reads_nothing(tmp_path: Path, monkeypatch, span_check: bool):
    """The same combination through subsets instead of groups: the BMI missing at 3 records of ward a and 3 of
    ward d (a pattern 6 share), the complete-case subset ``bmi > 0``, then its building ab (``bno == 1``): 27
    records, wards a and b less the 3 of a. Its ``meanDS`` of the age and the ward sums of the age give the 3
    records' count and mean age. On the code before the subset was checked against combinations (and with
    ``spanned_gap`` patched out): read exactly, 3 records of mean age 44.67. Now the subset is refused
    (``disclosure.subset_min_difference``): the 3 records are an atom of the earlier sets that the subset
    puts in their span."""
    if not span_check:
        monkeypatch.setattr(checks, "spanned_gap", lambda member, sets, n, below: 0)
    truth = synthetic_frame(11, 60)
    truth["ward"] = np.array(WARDS)[np.arange(60) % 4]
    truth["bno"] = np.where(truth.ward.isin(BUILDINGS["ab"]), 1, 2)
    truth["bmi"] = np.round(np.random.default_rng(2).normal(26, 4, 60), 1)
    lacking = [0, 4, 8]
    truth.loc[lacking + [3, 7, 11], "bmi"] = np.nan
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        wards = session.table1d("D$ward").as_dict()
        by_ward = next(iter(session.aggregate_expr("meanSdGpDS(D$age, D$ward)").values()))
        session.assign_expr("C", 'dataFrameSubsetDS2("D", "D$bmi", "0", 5, NULL, NULL, FALSE)')
        try:
            session.assign_expr("S", 'dataFrameSubsetDS2("C", "C$bno", "1", 1, NULL, NULL, FALSE)')
        except FederatedCallError as exc:
            refusals = [e.rule for e in exc.failures.values()]
            print(f"ATTACK a subset as two cells less a few records (shipped rules): refused {refusals}")
            assert span_check and refusals == ["disclosure.subset_min_difference"]
            return
        subset = next(iter(session.aggregate_expr("meanDS(S$age)").values()))
    count = wards["a"] + wards["b"] - subset["Nvalid"]
    ages = sum(by_ward["Mean_gp"][i] * by_ward["N_gp"][i] for i in (0, 1)) - subset["EstimatedMean"] * subset["Nvalid"]
    read = count == len(lacking) and abs(ages / count - truth.loc[lacking, "age"].mean()) < 1e-6
    print(f"ATTACK a subset as two cells less a few records (span check {'on' if span_check else 'off'}): read "
          f"{count} records, mean age "
          f"{ages / max(count, 1):.4f} (truth {len(lacking)}, {truth.loc[lacking, 'age'].mean():.4f}): {read}")
    assert read and not span_check
