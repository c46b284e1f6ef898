"""An exact sum's count of a column's ones, against a subset released before: the difference is a few records.

``meanDS(D$y)`` of a 0/1 outcome releases the number of events, the records at the value 1 of ``y``: a row set whose
count the analyst holds, as a subset's. At one site of 24 records (shipped rules, q = 5), grade III holds 12 records,
10 of them events; outside it 2 of 12 records are events. A subset of grade III with its own ``meanDS`` gives 10
events; ``meanDS(D$y)`` over the table gives 12: the events outside grade III are 2, a cell of grade by outcome
below q that ``table2DDS`` refuses (and the records whose sums of another column the same pair of sums over them
would then give). The site now audits the records at each value of a summed column of few values against every row
set it released alone before, the levels of its earlier sums among them (``Guard._audit_levels``,
``disclosure.subset_min_difference``): 0 read in either order, 2 with that audit off (the code before).

The same records through a subset defined by the outcome itself (``y == 1`` within grade III): made after
``meanDS(D$y)``, a subset that lies inside the records at a value of an earlier sum and misses 1 to q - 1 of them
is refused (``differencing.inside_levels``); 0 read in either order, 2 with both audits off.

Honest costs on the same data: the events over the table beside a subset with 5 or more events outside it are
released (with 2, refused, as the table's cell of 2 is); a tapply of the outcome by grade (groups whose events and
non-events are few) is released, and a subset of a grade after it (the group whose events it gave).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure import checks as checks_module
from sitekit import make_sites

Q = 5
SITE = "small"


def _frames() -> dict[str, pd.DataFrame]:
    """24 records: grade III (``iii`` 1, ``grade`` "III") 12, 10 of them events; outside it 12, 2 of them events."""
    rng = np.random.default_rng(41)
    iii = np.r_[np.ones(12, int), np.zeros(12, int)]
    y = np.r_[np.ones(10, int), 0, 0, 1, 1, np.zeros(10, int)]
    return {SITE: pd.DataFrame({"iii": iii, "grade": np.where(iii == 1, "III", "other"), "y": y,
                                "age": np.round(rng.uniform(30, 80, 24), 1)})}


def _rules(exc: FederatedCallError) -> str:
    return ", ".join(sorted({f.rule for f in exc.failures.values()}))


def _events(view, expr: str) -> tuple[int | None, str]:
    try:
        m = view.aggregate_expr(f"meanDS({expr})")[SITE]
    except FederatedCallError as exc:
        return None, f"meanDS({expr}) refused ({_rules(exc)})"
    return int(round(m["EstimatedMean"] * m["Nvalid"])), f"meanDS({expr}) released"


def _subset(view, name: str, column: str) -> tuple[int | None, str]:
    try:
        view.assign_expr(name, f'dataFrameSubsetDS2("D", "D${column}", "1", 1, NULL, NULL, FALSE)')
        m = view.aggregate_expr(f"meanDS({name}$iii)")[SITE]
    except FederatedCallError as exc:
        return None, f"subset {column} refused ({_rules(exc)})"
    return int(m["Nvalid"]), f"subset {column} released"


def _grade_iii_then(tmp_path: Path, frames: dict[str, pd.DataFrame], then: str) -> tuple[int | None, int | None, dict]:
    """At sites of ``frames``: the subset of grade III and its events, then ``then`` (an aggregate call) alone, its
    answer (None where refused, with the refusal's rules)."""
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        view = session.site_view(SITE)
        n, _ = _subset(view, "S", "iii")
        inside, _ = _events(view, "S$y")
        try:
            answer = {"answer": view.aggregate_expr(then)[SITE]}
        except FederatedCallError as exc:
            answer = {"refused": _rules(exc)}
        if "tapplyDS" in then:  # the other grade's subset after the tapply
            view.assign_expr("O", 'dataFrameSubsetDS2("D", "D$iii", "0", 1, NULL, NULL, FALSE)')
            answer["other"] = view.aggregate_expr("meanDS(O$age)")[SITE]
    return n, inside, answer


def _off(monkeypatch: pytest.MonkeyPatch, checks: str) -> None:
    if checks == "control":
        monkeypatch.setattr(checks_module.Guard, "_audit_levels", lambda self, supports, rows: None)


def _read(found: int | None, truth: int) -> int:
    if found is None:
        return 0
    assert found == truth, (found, truth)
    return found if 0 < found < Q else 0


@pytest.mark.parametrize("sum_first", [False, True], ids=["subset-first", "sum-first"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_a_subsets_events_and_the_tables_read_no_few_records(tmp_path: Path, checks: str, sum_first: bool,
                                                             monkeypatch: pytest.MonkeyPatch):
    _off(monkeypatch, checks)
    frames = _frames()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        view = session.site_view(SITE)

        def subset_events() -> tuple[int | None, str]:
            n, note = _subset(view, "S", "iii")
            return (_events(view, "S$y") if n is not None else (None, note))

        if sum_first:
            (total, a), (inside, b) = _events(view, "D$y"), subset_events()
        else:
            (inside, b), (total, a) = subset_events(), _events(view, "D$y")
    small = frames[SITE]
    truth = int(((small.iii == 0) & (small.y == 1)).sum())
    read = _read(None if total is None or inside is None else total - inside, truth)
    print(f"\n{checks}, {'sum first' if sum_first else 'subset first'}: events outside grade III, {read} of 24 read "
          f"({a}; {b})")
    assert read == (2 if checks == "control" else 0)


@pytest.mark.parametrize("sum_first", [False, True], ids=["subset-first", "sum-first"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_a_subset_by_the_outcome_reads_no_few_records(tmp_path: Path, checks: str, sum_first: bool,
                                                      monkeypatch: pytest.MonkeyPatch):
    """The subset ``y == 1`` within grade III (10 records) and ``meanDS(D$y)`` (12). Made first, the subset is a row
    set the events are audited against; made after, it lies inside the events' records and misses 2 of them
    (``differencing.inside_levels``): 0 read either way, 2 with both audits off."""
    _off(monkeypatch, checks)
    if checks == "control":
        monkeypatch.setattr(checks_module, "inside_levels", lambda new, summed, minimum: False)
    frames = _frames()
    frames[SITE]["e3"] = ((frames[SITE].iii == 1) & (frames[SITE].y == 1)).astype(int)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        view = session.site_view(SITE)
        if sum_first:
            (total, a), (inside, b) = _events(view, "D$y"), _subset(view, "E", "e3")
        else:
            (inside, b), (total, a) = _subset(view, "E", "e3"), _events(view, "D$y")
    small = frames[SITE]
    read = _read(None if total is None or inside is None else total - inside, int(((small.iii == 0) & small.y).sum()))
    print(f"\n{checks}, {'sum first' if sum_first else 'subset first'}: events outside grade III through a subset of "
          f"the events, {read} of 24 read ({a}; {b})")
    assert read == (2 if checks == "control" else 0)


@pytest.mark.parametrize("outside", [2, 5])
def test_the_events_beside_a_subset_are_released_where_its_complement_holds_q_events(tmp_path: Path, outside: int):
    """Honest cost: the subgroup's event rate, then the table's. With 5 events outside the subgroup both are
    released (as a table of subgroup by outcome would be); with 2 the table's is refused, naming the rule, as the
    table's cell of 2 is."""
    frames = _frames()
    y = frames[SITE].y.to_numpy().copy()
    y[12:12 + outside] = 1
    y[12 + outside:] = 0
    frames[SITE]["y"] = y
    n, inside, answer = _grade_iii_then(tmp_path, frames, "meanDS(D$y)")
    total = int(round(answer["answer"]["EstimatedMean"] * answer["answer"]["Nvalid"])) if "answer" in answer else None
    note = f"refused ({answer['refused']})" if total is None else "released"
    print(f"\nhonest, {outside} events outside the subgroup: subgroup {n} records, {inside} events; the table's {note}")
    assert (n, inside) == (12, 10)
    if outside >= Q:
        assert total == 10 + outside
    else:
        assert total is None and answer["refused"] == "disclosure.subset_min_difference"


def test_a_tapply_of_the_outcome_by_grade_is_released_beside_the_tables_events(tmp_path: Path):
    """Honest: a subset of grade III with its events, then each grade's (``tapplyDS``, the mean of y by grade), then
    a subset of the other grade: a group's own records are left out of the comparison (a group's mean gives its events and
    non-events by design), and no level differs from an earlier row set by fewer than q records."""
    frames = _frames()
    n, inside, answer = _grade_iii_then(tmp_path, frames, 'tapplyDS("D$y", "D$grade", "mean")')
    assert "answer" in answer, answer
    out, other = answer["answer"], answer["other"]
    small = frames[SITE]
    print(f"\nhonest: subset {n} records, {inside} events; tapply by grade {out['Mean']} of {out['N']}; the other "
          f"grade's subset after it: mean age {other['EstimatedMean']:.2f} of {other['Nvalid']}")
    assert (n, inside) == (12, 10)
    assert other["Nvalid"] == 12 and other["EstimatedMean"] == pytest.approx(small.age[small.iii == 0].mean())
    assert out["dimnames"] == [["D$grade.III", "D$grade.other"]] and out["N"] == [12, 12]
    np.testing.assert_allclose(out["Mean"], small.groupby("grade").y.mean().loc[["III", "other"]].to_numpy())
