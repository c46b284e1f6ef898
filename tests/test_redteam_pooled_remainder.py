"""Red team: pooled remainders A - B - C whose pooled difference is not what the analyst reads, measured.

A site checks a pooled cell and earlier cells of the same table, one holding the others (disjoint here), that leave
1 to q - 1 of its records (:func:`~dsfed_server.disclosure.differencing.pooled_problem_cells`), on the pooled
counts: it refuses where the pooled difference is below q in size. A relaxation was tried and withdrawn (refuse
only where the pooled difference is at least this site's remainder, on the argument that a smaller one counts none
of its records); this red team read two records through it, below.

Three sites under the shipped rules (q = subset_min_difference = 5), 90 records each; the target s1 has exactly
two young (age < 55) patients with an income of 75,000 or more and a score below 0.5 (the remainder R; both have
y = 0). The releases: the pooled ``thresholdBinsDS(y, score, 0.5)`` over the whole table (A), over the patients
aged 55 or more (B) and over those with an income under 75,000 (C); at s1 every older patient has a higher income,
so B and C are disjoint there and A - B - C, in the cell below 0.5, is R. The routes, each reading (records,
events) of R and checked against the truth:

* ``others_own``: the other sites' own (per-site) releases of the same three tables, subtracted from the pooled
  counts, leave s1's counts of A, B and C (each many records, so no HIDDEN/THIN share check objects), and their
  difference is R. Where some older patients at s2 and s3 have a lower income (B and C overlap there: the pooled
  difference is 2 - 6 = -4), s1 refuses (|-4| < q): 0 read; the relaxation released it, 2 read. Where B and C
  are disjoint everywhere (the pooled difference 2 + 2 + 2 = 6 >= q) the remainder check passes it, and 2 were read
  on the code before (each share so exposed was audited at its own pooled release against s1's releases alone, not
  its earlier exposed shares); now s1 audits each share in combination with the shares it kept: 0.
* ``union``: no per-site release at all; a fourth pooled table over C's older patients (B and C). Where B and C
  overlap at the target itself, no disjoint family exists there, yet A - B - C + (B and C) = A less the union of B
  and C is R (Chin & Ozsoyoglu's inclusion-exclusion): 2 read on the code before, which checked disjoint families
  alone; the target now tries the union of overlapping cells too: 0.
* ``union`` after a large cell: L (72.4 kg or more), released after A, holds one of R's records and more of A's
  than B or C at the target; the union pass took it first and found no combination: 2 read with one greedy pass,
  as on the code before; each pass now runs again without the cell it took first: 0.

Measured (each test prints what it read): others' own in the window 0 (2 under the relaxation); others' own nested
everywhere 0 (2 with the checks bypassed, and on the code before); union at the target 0 (2 with disjoint families
alone, as on the code before); the union after a large cell 0 (2 with one greedy pass); the control (nested
everywhere, R alone pooled) 0 with the checks, 2 with the remainder check and the exposed-share audit bypassed in
process.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from dsfed_server.disclosure import differencing
from sitekit import exposed_shares_unaudited, make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

Q = 5  # the shipped q_threshold and subset_min_difference
THRESHOLDS = [0.5]
LOW = (0.0, 0.5)  # the score cell the remainder is read in
TARGET, OTHERS = "s1", ("s2", "s3")


def layout(frame: pd.DataFrame, young_rich: tuple[int, int], old_poor: tuple[int, int]) -> pd.DataFrame:
    """``frame`` with incomes set: young (< 55) patients under 75,000 but ``young_rich`` (below, above a score of
    0.5) at 80,000 or more; older patients at 90,000 or more but ``old_poor`` (below, above 0.5) under 75,000."""
    frame = frame.copy()
    young = frame.age < 55
    frame.loc[young, "income"] = np.minimum(frame.loc[young, "income"], 74_000.0)
    frame.loc[~young, "income"] = 90_000.0 + np.arange(int((~young).sum()))
    for (low, high), group, base in ((young_rich, young, 80_000.0), (old_poor, ~young, 60_000.0)):
        for k, (n, side) in enumerate(((low, frame.score < 0.5), (high, frame.score >= 0.5))):
            chosen = frame.index[group & side][:n]
            assert len(chosen) == n
            frame.loc[chosen, "income"] = base + 1000 * k + np.arange(n)
    return frame


def remainder(frame: pd.DataFrame) -> pd.DataFrame:
    """The target's records A - (B or C) in the low score cell: young, income >= 75,000, score < 0.5."""
    return frame[(frame.age < 55) & (frame.income >= 75_000) & (frame.score < 0.5)]


def sites(tmp_path: Path, target_old_poor: int, others_young_rich: int, others_old_poor: int, seed: str,
          target_old_poor_high: int = 14):
    frames = {TARGET: layout(synthetic_frame(21, 90), (2, 8), (target_old_poor, target_old_poor_high))}
    for k, name in enumerate(OTHERS):
        frames[name] = layout(synthetic_frame(22 + k, 90), (others_young_rich, 6), (others_old_poor, 14))
    with fixed_secrets(seed):
        provisioned, services = make_sites(tmp_path, frames)
    truth = remainder(frames[TARGET])
    assert len(truth) == 2 and 0 < len(truth) < Q
    return truth, inprocess_builder(provisioned, services)


def cells(release: dict) -> dict[tuple[float, float], tuple[int, int]]:
    edges = release["edges"]
    return {(edges[i], edges[i + 1]): (int(n), int(e)) for i, (n, e) in enumerate(zip(release["n"], release["sum_y"]))}


def subsets(session, union: bool, large: bool = False) -> tuple[str, ...]:
    """The tables released, in order: A (``D``), B and C; with ``union`` B and C after B; with ``large`` L (the
    patients of 72.4 kg or more) after A."""
    session.assign_table("D", "P.t")
    session.assign_expr("B", 'dataFrameSubsetDS2("D", "D$age", "55", 6, NULL, NULL, FALSE)')
    session.assign_expr("C", 'dataFrameSubsetDS2("D", "D$income", "75000", 3, NULL, NULL, FALSE)')
    large_cell = ("L",) if large else ()
    if large:
        session.assign_expr("L", 'dataFrameSubsetDS2("D", "D$weight", "72.4", 6, NULL, NULL, FALSE)')
    if union:
        session.assign_expr("BC", 'dataFrameSubsetDS2("C", "C$age", "55", 6, NULL, NULL, FALSE)')
        return "D", *large_cell, "B", "BC", "C"
    return "D", *large_cell, "B", "C"


def released(call, symbols: tuple[str, ...], refusals: list[str]) -> dict[str, dict]:
    out = {}
    for symbol in symbols:
        try:
            out[symbol] = cells(call("thresholdBinsDS", Ref(f"{symbol}$y"), Ref(f"{symbol}$score"), THRESHOLDS))
        except FederatedCallError as exc:
            refusals += [e.rule or e.kind for e in exc.failures.values()]
    return out


def scored(read: np.ndarray | None, truth: pd.DataFrame) -> int:
    """Records of the target whose outcome ``read`` (records, events of R) gives: all of them where it holds fewer
    than q and all or none had the event; what is read is checked against the truth."""
    if read is None:
        return 0
    n, events = (int(v) for v in read)
    assert (n, events) == (len(truth), int(truth.y.sum()))  # what the analyst reads is the truth
    return n if 0 < n < Q and events in (0, n) else 0


def others_own_attack(builder, truth: pd.DataFrame) -> tuple[int, np.ndarray | None, list[str]]:
    """Per-site releases of A, B and C at the other sites, then the pooled ones: (records read, pooled
    difference A - B - C in the low cell, refusals)."""
    refusals: list[str] = []
    with builder.login() as session:
        symbols = subsets(session, union=False)
        own = {site: released(lambda *a: session.site_view(site).aggregate(*a)[site], symbols, refusals)
               for site in OTHERS}
        pooled = released(session.pooled, symbols, refusals)

    def at(release: dict[str, dict], symbol: str) -> np.ndarray | None:
        return np.asarray(release[symbol][LOW]) if symbol in release and LOW in release[symbol] else None

    parts = {s: [at(pooled, s)] + [at(own[site], s) for site in OTHERS] for s in symbols}
    if any(p is None for ps in parts.values() for p in ps):
        return 0, None, refusals  # a cell merged: nothing to read
    target = {s: ps[0] - sum(ps[1:]) for s, ps in parts.items()}  # the target's own counts of each cell
    difference = parts["D"][0] - parts["B"][0] - parts["C"][0]
    return scored(target["D"] - target["B"] - target["C"], truth), difference, refusals


def union_attack(builder, truth: pd.DataFrame, large: bool = False) -> tuple[int, list[str]]:
    """Pooled releases only: A - B - C + (B and C) in the low cell (``large``: L released after A)."""
    refusals: list[str] = []
    with builder.login() as session:
        pooled = released(session.pooled, subsets(session, union=True, large=large), refusals)
    if any(s not in pooled or LOW not in pooled[s] for s in ("D", "B", "BC", "C")):
        return 0, refusals
    read = (np.asarray(pooled["D"][LOW]) - pooled["B"][LOW] - pooled["C"][LOW] + pooled["BC"][LOW])
    return scored(read, truth), refusals


@contextmanager
def rule(which: str) -> Iterator[None]:
    """The shipped checks, or (``bypassed``) the pooled remainder check and the audit of a share the others' releases
    alone expose (``Guard._fails_alone``) both off in process."""
    if which == "bypassed":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(differencing, "_small_remainder", lambda *a, **k: False)
            exposed_shares_unaudited(patch)
            yield
    else:
        yield


# others_old_poor: s2 and s3 each hold 3 older patients of a lower income below 0.5, so the pooled difference
# A - B - C there is 2 - 3 - 3 = -4: below s1's remainder (2) and above -q.
def test_a_pooled_difference_below_the_remainder_is_refused_beside_the_other_sites_own(tmp_path):
    truth, builder = sites(tmp_path, target_old_poor=0, others_young_rich=0, others_old_poor=3, seed="rt window")
    read, difference, refusals = others_own_attack(builder, truth)
    print(f"ATTACK others' own releases, window: pooled A - B - C = {difference}; read the outcomes of "
          f"{read} target records; refusals {sorted(set(refusals))}")
    assert read == 0  # the relaxation that released it read both records


@pytest.mark.parametrize(("which", "expected"), [("shipped", 0), ("bypassed", 2)])
def test_nested_everywhere_with_a_pooled_difference_of_q_reads_the_remainder_less_the_others_own(
        tmp_path, which, expected):
    """The pooled difference A - B - C is 2 + 2 + 2 >= q, so the remainder check passes it; but the other sites'
    parts of A, B and C are released alone first, so each of s1's shares is exposed. On the code before each share
    was audited as a release alone at its own pooled release (Guard._fails_alone) against s1's releases alone only,
    not its shares exposed before: 2 read (as with the checks bypassed). Now a share is audited in combination with
    the shares kept before (``spanned_gap``): C's cut at s1 leaves A's low cell less B's and C's its 2 records, and
    is merged: 0."""
    truth, builder = sites(tmp_path, target_old_poor=0, others_young_rich=2, others_old_poor=0, seed="rt nested")
    with rule(which):
        read, difference, refusals = others_own_attack(builder, truth)
    print(f"ATTACK others' own releases, nested everywhere ({which}): pooled A - B - C = {difference}; read the "
          f"outcomes of {read} target records; refusals {sorted(set(refusals))}")
    assert read == expected
    if expected:
        assert difference is not None and difference[0] == 6  # 2 + 2 + 2 >= q: the remainder check passes it


@pytest.mark.parametrize(("which", "expected"), [("shipped", 0), ("disjoint only", 2)])
def test_inclusion_exclusion_at_the_target_reads_no_remainder_from_pooled_releases_alone(
        tmp_path, monkeypatch, which, expected):
    """B and C overlap at the target, so no family of cells disjoint there leaves the remainder; but A - B - C +
    (B and C), A less the union of B and C, is R. On the code before (the remainder check over disjoint families
    alone, ``disjoint only`` here) 2 read; now the target also tries the union of overlapping cells, finds B + C -
    (B and C) one on every record of it, and merges the fourth release's cut: 0."""
    # 9 older patients of a lower income above 0.5 at the target, of its 15 older there: with 14 its records of the
    # cells of B and of B and C above 0.5 differ by 1, which it keeps apart since its shares of pooled cells are kept
    # (the others may release theirs alone), so it merges the fourth release's cut, and this route reads nothing for
    # a reason of its own.
    if which == "disjoint only":
        monkeypatch.setattr(differencing, "_union_remainder", lambda *a, **k: (False, None))
    truth, builder = sites(tmp_path, target_old_poor=10, others_young_rich=0, others_old_poor=0, seed="rt union",
                           target_old_poor_high=9)
    read, refusals = union_attack(builder, truth)
    print(f"ATTACK pooled A - B - C + (B and C), B and C overlapping at the target ({which}): read the outcomes of "
          f"{read} target records; refusals {sorted(set(refusals))}")
    assert read == expected


@pytest.mark.parametrize(("which", "expected"), [("shipped", 0), ("one greedy pass", 2)])
def test_a_large_cell_released_before_hides_no_remainder(tmp_path, monkeypatch, which, expected):
    """The inclusion-exclusion route with L, the patients of 72.4 kg or more, released after A: at the target L
    holds 35 of A's 46 records in the low cell, more than B (32) or C (22), and one of R's two (the other weighs
    63.2 kg). The union pass takes L first: C, L and B then leave one record of A, and no combination of the four
    cells counts their union, so the pass alone found nothing: 2 read on the code before (``one greedy pass`` here).
    Each pass now runs again without the cell it took first, finds B + C - (B and C), and merges C's cut: 0."""
    if which == "one greedy pass":
        monkeypatch.setattr(differencing, "REMAINDER_RETRIES", 0)
    truth, builder = sites(tmp_path, target_old_poor=10, others_young_rich=0, others_old_poor=0, seed="rt union",
                           target_old_poor_high=9)
    read, refusals = union_attack(builder, truth, large=True)
    print(f"ATTACK pooled A - B - C + (B and C) after a large cell L ({which}): read the outcomes of {read} target "
          f"records; refusals {sorted(set(refusals))}")
    assert read == expected


@pytest.mark.parametrize(("which", "expected"), [("shipped", 0), ("bypassed", 2)])
def test_control_a_remainder_alone_in_the_pooled_difference_is_refused(tmp_path, which, expected):
    """Nested everywhere, no remainder elsewhere: the pooled difference is s1's 2 records, which the check refuses
    (merges the cell); with the check bypassed in process the same attack reads both."""
    truth, builder = sites(tmp_path, target_old_poor=0, others_young_rich=0, others_old_poor=0, seed="rt control")
    with rule(which):
        read, difference, refusals = others_own_attack(builder, truth)
    print(f"CONTROL remainder alone pooled ({which}): pooled A - B - C = {difference}; read the outcomes of {read} "
          f"target records; refusals {sorted(set(refusals))}")
    assert read == expected
