"""Pooled releases over nested subsets, as a hostile analyst compares them, measured.

Per site, every released cell's records are audited with every row set released before from the
table (:mod:`dsfed_server.disclosure.differencing`): two cells that differ by a few records are not
both released. A pooled release sums each cell over the sites, so a site's own records in a pooled
cell are no release of their own; but two pooled cells whose records differ by a few records at one
site, and whose other sites' records are the same, still differ by those few records: the difference
of the two pooled counts and event counts is theirs.

The attack: three sites under the shipped rules, the subsets ``age >= a`` for a few ages a (each
passes the subset rules: consecutive ones differ by many records at every site), and on each the
pooled metrics at nine thresholds (``thresholdBinsDS``: per cell between thresholds the count, the
events). The difference of two consecutive subsets' cells is the records of one age band in one score
cell: where it holds fewer than q records and all of them had the event (or none did), the analyst
reads their outcomes. Before the pooled audit, the analyst read the outcomes of records in groups
below q; with it, no pooled cell is both nested with an earlier one at some site by fewer than
``subset_min_difference`` records and different from it pooled by fewer: the sites merge such a cell
with its neighbour (as a site alone does), or refuse a table they cannot merge, so none is read.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

AGES = (25, 40, 50, 60, 70)  # the subsets age >= a; 25 is the whole table
THRESHOLDS = [round(0.1 * k, 1) for k in range(1, 10)]
Q = 5  # the shipped q_threshold and subset_min_difference
AUDITED = "disclosure.subset_min_difference"  # the rule a release names when the audit coarsened or refused it
STOPPED: list[str] = []  # the releases the audit coarsened (the cells it merged are not read)


def pooled_cells(session, a: int) -> dict[tuple[float, float], tuple[int, int]] | None:
    """The pooled cells of ``thresholdBinsDS`` on the subset age >= a: (lower, upper) -> (records, events)."""
    session.assign_expr("T", f'dataFrameSubsetDS2("D", "D$age", "{a}", 6, NULL, NULL, FALSE)')
    release = session.pooled("thresholdBinsDS", Ref("T$y"), Ref("T$score"), THRESHOLDS)
    if AUDITED in release.get("why", ""):
        STOPPED.append(AUDITED)
    edges = release["edges"]
    return {(edges[i], edges[i + 1]): (int(n), int(e)) for i, (n, e) in enumerate(zip(release["n"], release["sum_y"]))}


def common_cells(first: dict, second: dict) -> list[tuple[tuple[float, float], tuple[int, int], tuple[int, int]]]:
    """The intervals between the edges two releases share, each with its (records, events) in both: where the
    sites merged a cell in one release, the analyst still subtracts over the union of cells it spans."""
    def edges(cells: dict) -> set[float]:
        return {e for cell in cells for e in cell}

    shared = sorted(edges(first) & edges(second))

    def summed(cells: dict, lo: float, hi: float) -> tuple[int, int]:
        inside = [v for (a, b), v in cells.items() if a >= lo and b <= hi]
        return sum(n for n, _ in inside), sum(e for _, e in inside)

    return [((lo, hi), summed(first, lo, hi), summed(second, lo, hi)) for lo, hi in zip(shared, shared[1:])]


def bands_read(released: dict[int, dict], truth: pd.DataFrame) -> list[pd.DataFrame]:
    """The records of each age band and score cell whose outcomes the difference of two consecutive subsets'
    releases reads (fewer than q, all with the event or none), each checked against the truth."""
    bands = []
    for a, b in zip(AGES, AGES[1:]):
        if a not in released or b not in released:
            continue
        for cell, (n_a, e_a), (n_b, e_b) in common_cells(released[a], released[b]):
            n, events = n_a - n_b, e_a - e_b
            if 0 < n < Q and events in (0, n):
                band = truth[(truth.age >= a) & (truth.age < b) & (truth.score >= cell[0]) & (truth.score < cell[1])]
                assert (len(band), int(band.y.sum())) == (n, events)  # what the analyst reads is the truth
                bands.append(band)
    return bands


def attack(session, truth: pd.DataFrame) -> tuple[int, int, list[str]]:
    """(records whose outcome the analyst reads, groups below q it reads them in, refusals' rules)."""
    released: dict[int, dict] = {}
    refusals: list[str] = []
    for a in AGES:
        try:
            released[a] = pooled_cells(session, a)
        except FederatedCallError as exc:
            refusals += [e.rule or e.kind for e in exc.failures.values()]
    bands = bands_read(released, truth)
    return sum(len(band) for band in bands), len(bands), refusals


def three_sites(tmp_path: Path):
    frames = {f"s{k}": synthetic_frame(20 + k, 90) for k in range(1, 4)}
    with fixed_secrets("pooled row sets"):
        provisioned, services = make_sites(tmp_path, frames)
    return pd.concat(frames.values(), ignore_index=True), inprocess_builder(provisioned, services)


def test_pooled_cells_of_nested_subsets_read_no_outcome(tmp_path: Path):
    truth, builder = three_sites(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        read, groups, refusals = attack(session, truth)
    print(f"ATTACK pooled cells of nested subsets (shipped rules, 3 sites of 90): read the outcomes of {read} "
          f"records in {groups} groups below q; refusals: {sorted(set(refusals))}")
    assert read == 0
    assert AUDITED in refusals + STOPPED  # the audit refused a release or merged its cells


def test_a_subgroup_that_differs_by_many_records_is_released_and_equals_pandas(tmp_path: Path):
    """The honest subgroup analysis: pooled calibration bins over the whole table, then over the patients
    aged 50 or more; every bin of the two differs by many records pooled, so both are released, each
    equal to pandas on the pooled records."""
    truth, builder = three_sites(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        whole = session.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 4)
        session.assign_expr("T", 'dataFrameSubsetDS2("D", "D$age", "50", 6, NULL, NULL, FALSE)')
        older = session.pooled("calibrationBinsDS", Ref("T$y"), Ref("T$score"), 4)
    for release, frame in ((whole, truth), (older, truth[truth.age >= 50])):
        assert release["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0] and not release["coarsened"]
        cells = pd.cut(frame.score, release["edges"], right=False)
        assert release["n"] == frame.groupby(cells, observed=False).size().tolist()
        assert release["sum_y"] == frame.groupby(cells, observed=False).y.sum().tolist()


def test_three_pooled_releases_whose_remainder_is_small_read_no_outcome(tmp_path: Path):
    """A red team's writing the pairwise check missed: the pooled metrics over the whole table (A), over the
    patients aged 55 or more (B) and over those younger with an income under 60,000 (C). B and C are
    disjoint and each differs from A by many records, but A - B - C in each score cell is the few younger
    patients with the higher incomes: their outcomes, where they agree (15 records in 6 groups below q
    before the check of remainders). Each site now subtracts a cell's disjoint earlier cells inside it."""
    truth, builder = three_sites(tmp_path)
    thresholds = [0.125 * k for k in range(1, 8)]
    released: dict[str, dict] = {}
    refusals: list[str] = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("B", 'dataFrameSubsetDS2("D", "D$age", "55", 6, NULL, NULL, FALSE)')
        session.assign_expr("E", 'dataFrameSubsetDS2("D", "D$income", "60000", 3, NULL, NULL, FALSE)')
        session.assign_expr("C", 'dataFrameSubsetDS2("E", "E$age", "55", 3, NULL, NULL, FALSE)')
        for name, symbol in (("A", "D"), ("B", "B"), ("C", "C")):
            try:
                r = session.pooled("thresholdBinsDS", Ref(f"{symbol}$y"), Ref(f"{symbol}$score"), thresholds)
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            if AUDITED in r.get("why", ""):
                refusals.append(AUDITED)  # coarsened by the audit: its merged cells are not read
            released[name] = {(r["edges"][i], r["edges"][i + 1]): (n, e)
                              for i, (n, e) in enumerate(zip(r["n"], r["sum_y"]))}
    group = truth[(truth.age < 55) & (truth.income >= 60000)]
    read = 0
    if len(released) == 3:
        with_c = {cell: (b, c) for cell, b, c in common_cells(released["B"], released["C"])}
        for cell, (n_a, e_a), _ in common_cells(released["A"], {**released["B"], **released["C"]}):
            spans = [(b, c) for (lo, hi), (b, c) in with_c.items() if lo >= cell[0] and hi <= cell[1]]
            if sum(hi - lo for (lo, hi) in with_c if lo >= cell[0] and hi <= cell[1]) < cell[1] - cell[0] - 1e-12:
                continue  # B's and C's shared cells do not tile this one of A's
            n = n_a - sum(b[0] + c[0] for b, c in spans)
            events = e_a - sum(b[1] + c[1] for b, c in spans)
            inside = group[(group.score >= cell[0]) & (group.score < cell[1])]
            assert (len(inside), int(inside.y.sum())) == (n, events)  # what is read is the truth
            read += n if 0 < n < Q and events in (0, n) else 0
    print(f"ATTACK pooled A - B - C (shipped rules, 3 sites of 90): read the outcomes of {read} records; "
          f"refusals: {sorted(set(refusals))}")
    assert read == 0
    assert AUDITED in refusals  # the audit refused a release or merged its cells
