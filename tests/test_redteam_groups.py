"""Red team of the groups a derived column of several roots is cut within (``provenance.strata``,
``provenance.meaning_strata``, ``Guard._parts``; docs/governance.md, "A union of cells of two pooled releases, through
a column of several roots"), under the shipped rules, on route 3 of tests/test_redteam_pooled_unions.py: the small
site of 24 (group 0's [0.7, 0.8): 2 records, both with the event) beside two sites of 400; the pooled thresholds
0.1, ..., 0.9 over group 0 and over group 1 (two pooled releases), and at each large site alone ONE row set, the cell
of ``dw = abs(w - 1)`` between 0.2 and 0.3, ``w`` the score plus a part 0 in group 0 and 1 in group 1: group 0's
[0.7, 0.8) and group 1's [0.2, 0.3). The two pooled bins less the large sites' counts are the small site's share
(asserted equal to the truth). Control: the groups off (``_groups_off``), the code before the check.

Measured, records read of 24 with the check ON / OFF, the same pooled first and alone first (``EXPECTED``). A
helper's red team found the first four open (2 / 2); closed since, each reading 0 with the check on:

* ``region`` (0 / 2): groups ``region < 1``, ``region >= 1``, a whole-numbered column of 12 values (declared 0 to 11),
  the 0/1 part the clamp ``pmin(D$region, 1)``: a kink was a cut, not a row set, and no root has 10 values or fewer.
  Now the records below each kink of ``abs``, ``pmin`` and ``pmax`` group too (``derive._comparisons``). As a cell
  (``thresholdBinsDS``), as two subsets on ``dw`` (``meanDS``), and as the bin [0.2, 0.3) of the per-site
  ``calibrationBinsDS`` (``ds_calibration_curve``).
* ``age`` (0 / 2): the same through whole-numbered ages (21 values, 40 to 60), groups ``age < 51``/``>= 51``, the part
  ``pmin(D$age, 51) - pmin(D$age, 50)`` (``pmin(pmax(...))`` is refused: a clamp takes one column). Alone first, the
  parts of the records aged exactly 50 make the pooled subsets by age refused (``disclosure.subset_min_difference``).
* ``recal-age`` (0 / 2): route 3 by age (``w = D$score + ifelse(D$age > 50, 1, 0)``, grouped by its comparison), then
  ``recalibrateDS(dw, "logistic", c(0, 1))`` (the identity): the map's meaning kept the roots but not the
  comparisons; now it keeps both. ``recal-sex`` (0 / 2): ``sex`` is a few-valued root of the map's meaning.
* ``calframe-sex`` (0 / 2): route 3 by sex, then ``calibrationFrameDS(D$y, dw)`` (a table ``y, lp = logit(dw)``):
  ``F$lp`` was a root of its own (its ordering); now the table keeps ``lp``'s roots and comparisons (``MEANINGS``).
  The subsets of ``F`` with ``lp`` at or above logit(0.2), logit(0.3).
* ``renamed`` (0 / 2): ``sex`` renamed ``grp`` in ``dataFrameDS("D$score,D$sex,D$y", ..., "score,grp,y")``,
  ``w = E$score + E$grp`` (``DERIVED`` maps ``grp`` back to ``sex``); ``cbind`` (0 / 2): ``dw`` bound into
  ``cbindDS("D$y,dw")`` and cut there (``MEANINGS`` keeps it). Pooled first north drops both cuts; alone first
  group 0's pooled bin [0.7, 0.8) is merged.
* No groups involved (0 / 2; the second test, a HOLE until the refinement of a column's pooled releases): two pooled
  releases of the score over the whole table with different cuts (0.1, 0.2 and 0.7, 0.8) and route 1's single-root
  fold alone: a union of cells of two releases on ONE column, which ``_thin_union``/``_alone_unions`` saw one release
  at a time; now they also look at the cells of the releases' common refinement (:mod:`~dsfed_server.disclosure.
  unions`). Route 1 with one pooled release at 0.1, ..., 0.9 reads 0 (tests/test_redteam_pooled_unions.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Call, FederatedCallError, Ref
from dsfed_client.analyses.calibration import ds_calibration_curve
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure import checks as checks_module
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.unions import kind_of
from sitekit import make_sites
from test_pooled_complement_attack import Q, THRESHOLDS
from test_redteam_pooled_unions import LARGE, _at, _by_sex, _groups_off, _read_by_sex
from test_redteam_pooled_unions import _frames as _route1_frames

# per grouping: w, the pooled subsets' column and value and their operators for groups 0 and 1 (3 <, 6 >=, 4 <=, 5 >),
# and what the cell is counted on: the outcome's table (E: renamed, C: bound, F: calibrationFrameDS) and the cut column
GROUPINGS = {
    "region": ("D$score + pmin(D$region, 1)", '"D$region", "1"', (3, 6), "D", "dw"),
    "age": ("D$score + pmin(D$age, 51) - pmin(D$age, 50)", '"D$age", "51"', (3, 6), "D", "dw"),
    "renamed": ("E$score + E$grp", '"D$sex", "1"', (3, 6), "E", "dw"),
    "cbind": ("D$score + D$sex", '"D$sex", "1"', (3, 6), "C", "C$dw"),
    "recal-age": ("D$score + ifelse(D$age > 50, 1, 0)", '"D$age", "50"', (4, 5), "D", "r"),
    "recal-sex": ("D$score + D$sex", '"D$sex", "1"', (3, 6), "D", "r"),
    "calframe-sex": ("D$score + D$sex", '"D$sex", "1"', (3, 6), "F", "F$lp"),
}
LOGIT = {0.2: float(np.log(0.2 / 0.8)), 0.3: float(np.log(0.3 / 0.7))}  # F$lp is logit(dw)
RENAMED = 'dataFrameDS("D$score,D$sex,D$y", NULL, FALSE, TRUE, "score,grp,y", TRUE, FALSE)'


def _frames(by: str) -> dict[str, pd.DataFrame]:
    """Route 3's sites (``_by_sex``: group 0 the men, group 1 the women), with the grouping's column: ``region`` 0
    for the men and 1 to 11 for the women; ``age`` 40 to 50 for the men and 51 to 60 for the women (whole numbers)."""
    frames = _by_sex()
    rng = np.random.default_rng(29)
    for frame in frames.values():
        n, women = len(frame), frame["sex"].to_numpy() == 1
        frame["region"] = np.where(women, rng.integers(1, 12, n), 0)
        frame["age"] = np.where(women, rng.integers(51, 61, n), rng.integers(40, 51, n))
    for site in LARGE:  # many-valued at each site that releases alone: no few-valued root but sex
        assert frames[site]["region"].nunique() == 12 and frames[site]["age"].nunique() == 21
    return frames


def _count(view, site: str, name: str, table: str, column: str, t: float) -> np.ndarray:
    """The records and events of the subset of ``table`` where ``column`` is at or above ``t``, at one site alone."""
    view.assign_expr(name, f'dataFrameSubsetDS2("{table}", "{column}", "{t!r}", 6, NULL, NULL, FALSE)')
    mean = view.aggregate("meanDS", Ref(f"{name}$y"))[site]
    return np.array([int(mean["Nvalid"]), int(round(mean["EstimatedMean"] * mean["Nvalid"]))])


def _run(tmp_path: Path, by: str, form: str, pooled_first: bool) -> tuple[int, str, list[float]]:
    """Route 3 through the grouping ``by``: the small site's records read, how the releases went, and group 0's
    pooled cuts."""
    frames = _frames(by)
    expression, on, ops, table, cut = GROUPINGS[by]
    provisioned, services = make_sites(tmp_path, frames)
    how: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> list[pd.DataFrame] | None:
            out = []
            try:
                for group in (0, 1):
                    session.assign_expr(f"S{group}", f'dataFrameSubsetDS2("D", {on}, {ops[group]}, NULL, NULL, FALSE)')
                    out.append(ds_threshold_metrics(session, f"S{group}$y", f"S{group}$score", THRESHOLDS,
                                                    secure=True).to_frame())
            except FederatedCallError as exc:  # a group's subset refused: nothing pooled to subtract from
                how.append(f"pooled refused: {sorted({x.rule for x in exc.failures.values()})}")
                return None
            return out

        def alone() -> list[np.ndarray] | None:
            out = []
            for site in LARGE:
                view = session.site_view(site)
                try:
                    if table == "E":
                        view.assign_expr("E", RENAMED)
                    view.derive("w", expression)
                    view.derive("dw", "abs(w - 1)")
                    if table == "C":  # the cut column bound into a table beside the outcome
                        view.assign_expr("C", 'cbindDS("D$y,dw", "y,dw")')
                    if cut == "r":  # the identity map expit(0 + 1 * logit(dw)), its midpoint 0.5 a cut of dw
                        view.assign("r", Call("recalibrateDS", Ref("dw"), "logistic", coefficients=[0.0, 1.0]))
                    if table == "F":  # calibrationFrameDS: the table (y, lp = logit(dw))
                        view.assign("F", Call("calibrationFrameDS", Ref("D$y"), Ref("dw")))
                    if form == "subsets":  # dw (or lp) at or above 0.2 less at or above 0.3, meanDS of the outcome
                        at = [LOGIT[t] if table == "F" else t for t in (0.2, 0.3)]
                        out.append(_count(view, site, "A1", table, cut, at[0])
                                   - _count(view, site, "A2", table, cut, at[1]))
                        continue
                    if form == "calibration":
                        c = ds_calibration_curve(view, f"{table}$y", cut, n_bins=10).to_frame().round(6)
                        cell = c[(c["lower"] == 0.2) & (c["upper"] == 0.3)]
                        if cell.empty:
                            how.append(f"{site} merged the bin [0.2, 0.3)")
                            return None
                        n = int(cell["n"].iloc[0])
                        out.append(np.array([n, int(round(n * cell["mean_outcome"].iloc[0]))]))
                        continue
                    f = ds_threshold_metrics(view, f"{table}$y", cut, [0.2, 0.3]).to_frame()
                except FederatedCallError as exc:
                    how.append(f"{site} refused: {sorted({x.rule for x in exc.failures.values()})}")
                    return None
                if list(f.index) != [0.2, 0.3]:
                    how.append(f"{site} released cuts {list(f.index)}")
                    return None  # a cut of the cell dropped: nothing to subtract
                out.append(_at(f, 0.2) - _at(f, 0.3))
            return out

        if pooled_first:
            by_group, own = pooled(), alone()
        else:
            own = alone()
            by_group = pooled()
    if own is not None:
        how.append("alone released")
    if by_group is None:
        return 0, "; ".join(how), []
    men, women = by_group
    return _read_by_sex(men, women, own, frames["small"]), "; ".join(how), list(men.index)


@pytest.mark.parametrize("by, form", [("region", "cells"), ("region", "subsets"), ("region", "calibration"),
                                      ("age", "cells"),
                                      ("renamed", "cells"), ("cbind", "cells"), ("recal-age", "cells"),
                                      ("recal-sex", "cells"), ("calframe-sex", "subsets")])
@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_union_of_two_pooled_releases_through_a_part_the_groups_do_not_see(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pooled_first: bool, checks: str, by: str, form: str):
    """Route 3 with the 0/1 part of ``w`` written, or ``dw`` carried, so that the site may not see the groups (module
    docstring). Measured: ``EXPECTED`` (control, shipped), the same in both orders; every refusal on the way is
    printed with its rule (none: each alone release that reads was released in full)."""
    if checks == "control":
        _groups_off(monkeypatch)
    read, how, cuts = _run(tmp_path, by, form, pooled_first)
    order = "pooled first" if pooled_first else "alone first"
    print(f"\n{by}, {form} ({order}, {checks}): {read} of the small site's 24 records read; {how}; group 0's "
          f"pooled cuts {cuts}")
    assert read == EXPECTED[by, form][checks == "shipped"]


# (by, form) -> the records read (control, shipped), in both orders
EXPECTED = {(by, form): (2, 0) for by, form in (("region", "cells"), ("region", "subsets"), ("region", "calibration"),
                                                 ("age", "cells"), ("renamed", "cells"), ("cbind", "cells"),
                                                 ("recal-age", "cells"), ("recal-sex", "cells"),
                                                 ("calframe-sex", "subsets"))}


def _read_two_sets(low: pd.DataFrame, high: pd.DataFrame, own: list[np.ndarray] | None, small: pd.DataFrame) -> int:
    """Release A's pooled bin [0.1, 0.2) and release B's [0.7, 0.8) less the large sites' own records of their union:
    asserted to be the small site's share; the outcomes it reads (its 1 to q - 1 records where they share one)."""
    if own is None or list(low.index) != [0.1, 0.2] or list(high.index) != [0.7, 0.8]:
        return 0  # a cut dropped: nothing to subtract
    held = small[np.floor(small["score"] * 10).isin([1, 7])]
    records, events = _at(low, 0.1) - _at(low, 0.2) + _at(high, 0.7) - _at(high, 0.8) - sum(own)
    assert (records, events) == (len(held), int(held["y"].sum()))  # the small site's share, exactly
    return int(records) if 0 < records < Q and events in (0, records) else 0


def _fold_alone(session) -> list[np.ndarray] | None:
    """At each large site alone, the records and events of the cell of ``(D$score - 0.45)^2`` between 0.0625 and
    0.1225 ([0.1, 0.2) and [0.7, 0.8) of the score); None where a site dropped a cut of it."""
    out = []
    for site in LARGE:
        view = session.site_view(site)
        view.derive("d2", "(D$score - 0.45)^2")
        f = ds_threshold_metrics(view, "D$y", "d2", [0.0625, 0.1225]).to_frame()
        if list(f.index) != [0.0625, 0.1225]:
            return None
        out.append(_at(f, 0.0625) - _at(f, 0.1225))
    return out


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("missing", [False, True], ids=["complete", "outcomes-missing"])
@pytest.mark.parametrize("thin_first", [False, True], ids=["thin-in-the-second", "thin-in-the-first"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_union_of_two_pooled_releases_on_one_column_through_a_fold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pooled_first: bool, thin_first: bool, missing: bool,
        checks: str):
    """No second root at all: route 1's sites (the small site's 12 records, 2 in [0.7, 0.8) with the event, none in
    [0.1, 0.2)), and TWO pooled threshold releases on the score over the whole table, A at 0.1 and 0.2, B at 0.7 and
    0.8 (B first: ``thin_first``, the small site thin in the earlier release); at each large site alone route 1's
    cell of ``(D$score - 0.45)^2`` between 0.0625 and 0.1225, which is [0.1, 0.2) and [0.7, 0.8): A's cell and B's
    cell, a union of no one release's cells but of cells of their refinement (:func:`~dsfed_server.disclosure.
    unions.across`), of one root (no groups). A's bin plus B's bin less the large sites' cell is the small site's
    share of the union. ``missing``: 5 outcomes missing at each large site, so the releases are over the complete
    cases, a subset of the column's records. Measured: 0 read in every order; the control (``Guard._column_releases``
    finding no earlier release of the column: each release on its own, the code before) reads 2 in each."""
    if checks == "control":
        monkeypatch.setattr(Guard, "_column_releases", lambda self, rows: {})
    frames = _route1_frames()
    for site in LARGE if missing else ():
        frames[site]["y"] = frames[site]["y"].astype(float)
        frames[site].loc[np.random.default_rng(3).choice(len(frames[site]), 5, replace=False), "y"] = np.nan
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> list[pd.DataFrame]:
            ordered = ([0.7, 0.8], [0.1, 0.2]) if thin_first else ([0.1, 0.2], [0.7, 0.8])
            out = [ds_threshold_metrics(session, "D$y", "D$score", cuts, secure=True).to_frame() for cuts in ordered]
            return out[::-1] if thin_first else out

        if pooled_first:
            (low, high), own = pooled(), _fold_alone(session)
        else:
            own = _fold_alone(session)
            low, high = pooled()
    read = _read_two_sets(low, high, own, frames["small"])
    print(f"\ntwo pooled releases of the score ({'0.7, 0.8 then 0.1, 0.2' if thin_first else '0.1, 0.2 then 0.7, 0.8'})"
          f" and a fold alone ({'pooled first' if pooled_first else 'alone first'}, {checks}"
          f"{', 5 outcomes missing at each large site' if missing else ''}): {read} outcomes read of "
          f"12; alone {'released' if own is not None else 'cuts dropped'}, pooled cuts {list(low.index)} "
          f"{list(high.index)}")
    assert read == (2 if checks == "control" else 0)


@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_cells_alone_beside_two_pooled_releases_of_the_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              checks: str):
    """Honest use beside the check: route 1's sites, the score's thresholds pooled at 0.1 and 0.2, then at 0.7 and
    0.8; then each large site alone at 0.3, 0.5 and 0.9 (cells inside the refinement's [0.2, 0.7) and [0.8, 1]) and
    at 0.1 and 0.2 (cells of the first release): released as asked, counts equal to numpy's. COST, measured: alone
    at 0.2 and 0.8, the cell [0.2, 0.8) lies between cuts of two releases, a union of the refinement's cells holding
    [0.7, 0.8), in which the small site held 2: 0.8 is dropped, though the small site holds 12 records of the cell
    (a share the large site cannot see); the control (no refinement) keeps it."""
    if checks == "control":
        monkeypatch.setattr(Guard, "_column_releases", lambda self, rows: {})
    frames = _route1_frames()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for cuts in ([0.1, 0.2], [0.7, 0.8]):
            assert list(ds_threshold_metrics(session, "D$y", "D$score", cuts, secure=True).to_frame().index) == cuts
        for site in LARGE:
            view, truth = session.site_view(site), frames[site]
            for cuts in ([0.3, 0.5, 0.9], [0.1, 0.2]):
                f = ds_threshold_metrics(view, "D$y", "D$score", cuts).to_frame()
                assert list(f.index) == cuts
                for t in cuts:
                    above = truth[truth["score"] >= t]
                    assert list(_at(f, t)) == [len(above), int(above["y"].sum())]
            kept = list(ds_threshold_metrics(view, "D$y", "D$score", [0.2, 0.8]).to_frame().index)
            print(f"\n{site} ({checks}): alone at 0.2 and 0.8 after the two pooled releases: {kept} kept")
            assert kept == ([0.2] if checks == "shipped" else [0.2, 0.8])


def _thin_in_a_part() -> dict[str, pd.DataFrame]:
    """The small site: 5 records below 0.1, 2 in [0.1, 0.2) (both events), 4 in [0.2, 0.3), 5 in [0.3, 0.7) and
    5 at 0.8 or above: none in [0.7, 0.8), and no cell of thresholds at 0.1, 0.3, 0.7 and 0.8 or at 0.2 (nor a
    run of them) holds 1 to q - 1 of its records."""
    rng = np.random.default_rng(11)
    score = np.r_[rng.uniform(0, 0.1, 5), rng.uniform(0.1, 0.2, 2), rng.uniform(0.2, 0.3, 4), rng.uniform(0.3, 0.7, 5),
                  rng.uniform(0.8, 1, 5)]
    y = (rng.uniform(0, 1, score.size) < score).astype(int)
    y[5:7] = 1
    frames = {"small": pd.DataFrame({"y": y, "score": score})}
    for site in LARGE:
        s = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < s).astype(int), "score": s})
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_union_of_two_pooled_releases_holding_a_part_of_a_cell_reads_no_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pooled_first: bool, checks: str):
    """A helper's review: thresholds pooled at 0.1, 0.3, 0.7 and 0.8 (A), then at 0.2 (B); at each large site alone
    the cell of ``(D$score - 0.45)^2`` between 0.0625 and 0.1225, [0.1, 0.2) and [0.7, 0.8). [0.1, 0.2) is a part
    of A's cell [0.1, 0.3) that B cuts: a cell of their refinement, whose pooled count is B's records below 0.2 less
    A's below 0.1. The small site holds 6 records of A's cell, so no cell of either release is thin, but 2 of the
    part: A's [0.7, 0.8) plus the part less the large sites' cell reads them. Measured: 0 in both orders (the sites
    sum, per cell of B, whether one is thin in a part of it: ``Guard._pieces``); the control (no refinement, the
    code before) reads 2."""
    if checks == "control":
        monkeypatch.setattr(Guard, "_column_releases", lambda self, rows: {})
    frames = _thin_in_a_part()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> list[pd.DataFrame]:
            return [ds_threshold_metrics(session, "D$y", "D$score", cuts, secure=True).to_frame()
                    for cuts in ([0.1, 0.3, 0.7, 0.8], [0.2])]

        if pooled_first:
            (a, b), own = pooled(), _fold_alone(session)
        else:
            own = _fold_alone(session)
            a, b = pooled()
    read = 0
    if own is not None and list(a.index) == [0.1, 0.3, 0.7, 0.8] and list(b.index) == [0.2]:
        records, events = _at(a, 0.7) - _at(a, 0.8) + _at(a, 0.1) - _at(b, 0.2) - sum(own)
        small = frames["small"]
        held = small[((small["score"] >= 0.1) & (small["score"] < 0.2)) | ((small["score"] >= 0.7) &
                                                                           (small["score"] < 0.8))]
        assert (records, events) == (len(held), int(held["y"].sum()))  # the small site's share, exactly
        read = int(records) if 0 < records < Q and events in (0, records) else 0
    print(f"\na part of a cell ({'pooled first' if pooled_first else 'alone first'}, {checks}): {read} outcomes read "
          f"of 21; alone {'released' if own is not None else 'cuts dropped'}, pooled cuts {list(a.index)} "
          f"{list(b.index)}")
    assert read == (2 if checks == "control" else 0)


def test_releases_kept_before_their_kind_named_the_column_are_grouped_by_their_cells(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The one-column union pooled first, with the two pooled releases kept as a site kept them before it named
    their column in their kind (``"ordered"``): ``Guard._column_releases`` groups them by the column their cells
    carry (intervals of all of the score's records), and the large sites' fold cell is dropped: 0 read. Without
    that fallback no release has a column, and the fold reads 2 (the control of the test above)."""
    monkeypatch.setattr(checks_module, "kind_of", lambda ordered, shape, column="": kind_of(ordered, shape))
    frames = _route1_frames()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        low, high = (ds_threshold_metrics(session, "D$y", "D$score", cuts, secure=True).to_frame()
                     for cuts in ([0.1, 0.2], [0.7, 0.8]))
        own = _fold_alone(session)
    assert own is None and _read_two_sets(low, high, own, frames["small"]) == 0
