"""HOLE, pinned: two nested 0/1 columns of a site's exact sums isolate the few records between them.

A red team's (helper's) routes at one site of 24 records under the shipped rules (q = 5): grade III holds 12
records, grade IV 2 (one an event), ``high`` is grade III or IV (14 records). No release names grade IV, and each
0/1 column's records at each value are q or more; but the sums over ``iii`` and over ``high`` differ by grade IV's
2 records, their count and their events:

- one release, ``glmDS2(y ~ iii + high)`` at coefficients 0: its information matrix gives 14 - 12 records and its
  score 11 - 10 events;
- derived sums with no few-valued column (``D$y * D$high + D$age``, ``D$high + D$age``, less ``meanDS(D$age)``)
  beside the subset of grade III and its events, in either order.

The release gate's row-set audit compares subsets and cells, not the records a sum of a 0/1 column (or a GLM's dummy,
or a summand of a derived column) is over; the sums count (``disclosure.sums_per_record``) counts functions per
group of records only over the groups released row sets set apart. Closing it needs the records each summed 0/1
column or summand is over in that audit, a count the earlier releases already give passing (docs/governance.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from sitekit import make_sites

SITE = "small"
N = 24
SUBSET = 'dataFrameSubsetDS2("D", "D$iii", "1", 1, NULL, NULL, FALSE)'


def _frames() -> dict[str, pd.DataFrame]:
    """24 records: grade III 12 (10 events), outside it 12 (2 events); grade IV (records 13, an event, and 20, not)
    lies outside grade III; ``high`` is grade III or IV; ``e3`` the events within grade III."""
    rng = np.random.default_rng(41)
    iii = np.r_[np.ones(12, int), np.zeros(12, int)]
    y = np.r_[np.ones(10, int), 0, 0, 1, 1, np.zeros(10, int)]
    grade = np.where(iii == 1, "III", "I")
    grade[[13, 20]] = "IV"
    return {SITE: pd.DataFrame({"iii": iii, "grade": grade, "y": y, "high": (grade != "I").astype(int),
                                "e3": iii * y, "age": np.round(rng.uniform(30, 80, N), 1)})}


class _Site:
    def __init__(self, view):
        self.view = view

    def get(self, expr: str) -> dict | None:
        try:
            return self.view.aggregate_expr(expr)[SITE]
        except FederatedCallError as exc:
            print(f"  refused {expr}: {sorted({str(f.rule) for f in exc.failures.values()})}")
            return None

    def assign(self, name: str, expr: str) -> bool:
        try:
            self.view.assign_expr(name, expr)
            return True
        except FederatedCallError as exc:
            print(f"  refused {name} <- {expr}: {sorted({str(f.rule) for f in exc.failures.values()})}")
            return False

    def subset_events(self) -> int | None:
        """Grade III as a subset, and its events (meanDS)."""
        if not self.assign("S", SUBSET):
            return None
        m = self.get("meanDS(S$y)")
        return None if m is None else int(round(m["EstimatedMean"] * m["Nvalid"]))


def _run(tmp_path: Path, steps, frames: dict[str, pd.DataFrame] | None = None):
    provisioned, services = make_sites(tmp_path, frames or _frames())
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        site = _Site(session.site_view(SITE))
        return [step(site) for step in steps]


def test_hole_nested_design_columns_of_one_glm(tmp_path: Path):
    """glmDS2(y ~ iii + high, gaussian) at 0, nothing released before: iii (12 records) lies inside high (14); each
    binary covariate's records at each value are q or more. Its information matrix gives grade IV's count
    (14 - 12 = 2), its score grade IV's events (11 - 10 = 1): the outcome of 2 records, read with the shipped
    rules."""
    frames = _frames()
    small = frames[SITE]
    (out,) = _run(tmp_path, [lambda site: site.get('glmDS2(y ~ iii + high, "gaussian", "0,0,0", NULL, NULL, "D")')],
                  frames)
    assert out is not None
    info, score = np.array(out["info.matrix"]), np.array(out["score.vect"])
    count, events = int(round(info[2, 2] - info[1, 1])), int(round(score[2] - score[1]))
    iv = small.grade == "IV"
    assert (count, events) == (int(iv.sum()), int(small.y[iv].sum())) == (2, 1)
    print(f"\ngrade IV, {count} records, {events} event, read from one GLM")
    assert count == 2  # HOLE: the records two nested dummies are over are not audited as row sets


@pytest.mark.parametrize("sum_first", [False, True], ids=["subset-first", "sums-first"])
def test_hole_a_product_inside_a_many_valued_column_reads_grade_ivs_two_records(tmp_path: Path, sum_first: bool):
    """Grade IV's 2 records and their events, no subset of them: Z = D$y * D$high + D$age and H = D$high + D$age
    (deriveDS; W = D$y * D$high alone, after the subset, is refused as a row set 3 records from it) take many
    values; meanDS(Z), meanDS(H) and meanDS(D$age) give grade III or IV's events (11) and records (14); the subset
    of grade III gives its 10 events of 12 records: grade IV holds 2 records, 1 an event, read in either order."""
    frames = _frames()

    def sums(site: _Site) -> tuple[int, int] | None:
        if not (site.assign("Z", "D$y * D$high + D$age") and site.assign("H", "D$high + D$age")):
            return None
        z, h, age = site.get("meanDS(Z)"), site.get("meanDS(H)"), site.get("meanDS(D$age)")
        if z is None or h is None or age is None:
            return None
        return (int(round((z["EstimatedMean"] - age["EstimatedMean"]) * N)),
                int(round((h["EstimatedMean"] - age["EstimatedMean"]) * N)))

    def grade_iii(site: _Site) -> tuple[int, int] | None:
        events = site.subset_events()
        return None if events is None else (events, 12)

    steps = [sums, grade_iii]
    high, iii = _run(tmp_path, steps if sum_first else steps[::-1], frames)[:: 1 if sum_first else -1]
    small = frames[SITE]
    iv = small.grade == "IV"
    read = 0
    if high is not None and iii is not None:
        events, count = high[0] - iii[0], high[1] - iii[1]
        assert (count, events) == (int(iv.sum()), int(small.y[iv].sum())) == (2, 1)
        read = count
    print(f"\n{'sums first' if sum_first else 'subset first'}: grade IV, {read} records read")
    assert read == 2  # HOLE: the records a derived column's summands are over are not audited as row sets
