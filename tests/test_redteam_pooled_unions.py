"""Red team of "Unions no span stands for" (``Guard._thin_union``, ``Guard._alone_unions``, the
``pooled_releases`` history; docs/governance.md), measured on three in-process sites under the shipped rules
(``disclosure_rules/default.toml``): an honest small site of 12 and two large sites of 400, a normal analyst.

The small site's 12 records lie in the bins [0.3, 0.4) (5), [0.4, 0.5) (5) and [0.7, 0.8) (2, both with the event) of
the pooled ``thresholdBinsDS`` at 0.1, ..., 0.9; nothing in [0.1, 0.2). The union of the bins [0.1, 0.2) and
[0.7, 0.8) holds 2 of its records: pooled, less the large sites' own records of it, their outcomes.

1. One row set that is the union (route 2 of tests/test_redteam_pooled_complement.py, folded by a polynomial rather
   than ``abs``): ``d2 = (D$score - 0.45)^2`` at 0.0625 and 0.1225 at each large site: 0 read in both orders (the
   control, ``_thin_union`` and ``_alone_unions`` off, reads the 2, as the code before did).
2. Closed by the audit of exposed shares (``Guard._fails_alone``; 2 read before it): the union as the difference
   of two row sets, neither a union that no span stands for. At each large site
   alone: ``thresholdBinsDS`` on the score at the pooled cuts 0.1 and 0.8 (the run [0.1, 0.8)), and on
   ``abs(D$score - 0.45)`` at 0.25 and 0.39: its cell below 0.25 is the run [0.2, 0.7); its other two cells cut
   the bins [0, 0.1) and [0.8, 0.9) (at 0.06 and 0.84), so they are no union of pooled cells and nothing checks
   them as one. [0.1, 0.8) less [0.2, 0.7) is the union; the bin [0.7, 0.8) alone is not derivable (its records
   and [0.1, 0.2)'s lie in the same released sets), so the thin-cell check (``combined``) passes too. The pooled
   union less the two differences read the small site's 2 records, both orders, before that audit: the large
   sites' releases give their shares of [0.2, 0.7), and the small site's share of it, 10 of its 12, is the pooled
   count less theirs, a release alone its audit refuses.
3. A union of cells of two pooled releases, in ONE row set (not a combination): pooled thresholds over the men and
   over the women (a stratified validation), and at each large site alone the cell of ``abs(w - 1)``,
   ``w = D$score + D$sex``, between 0.2 and 0.3: the men's [0.7, 0.8) and the women's [0.2, 0.3). It is a union of
   no one release's cells, so ``union_of_cells`` answers None for each release: 2 read in both orders on the code
   before (the control). Closed by auditing and keeping a cell of a column of several roots as its parts in each
   group its few-valued parts make (``provenance.strata``, ``Guard._parts``): 0 in both orders, as a cell, as two
   subsets, by age through ``ifelse(D$age > 50, 1, 0)``, and as a helper's union of two runs less a cell of each.
4. Some of a table's cells (grade 2 with the event, grade 3) by a derived column of few values: closed before and
   after (the older checks see each value's records).

Honest use, no site holding 1 to q - 1 records of anything: a first version merged, at the pooled release, every
union a site had released alone before, whatever the others held; it refused the pooled table of grade by outcome
after each site's event rate among grades II and III, and dropped the pooled cut 0.2 after each site's metrics among
confident predictions (``abs(D$score - 0.5)`` at 0.3). Now a site objects to such a union only in a second sealed
step, where another site was thin in a cell of it; both are released (the two tests below).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_server import context
from dsfed_server.functions import derive
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure.checks import Guard
from sitekit import exposed_shares_unaudited, make_sites
from test_pooled_complement_attack import Q, THRESHOLDS

LARGE = ("north", "south")
RULE = "secure_aggregation.pooled_thresholds"
SUBSET_RULE = "disclosure.subset_min_difference"
UNION = (0.1, 0.7)  # the lower thresholds of the two pooled bins of the union


def _frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    score = np.r_[rng.uniform(0.3, 0.4, 5), rng.uniform(0.4, 0.5, 5), rng.uniform(0.7, 0.8, 2)]
    frames = {"small": pd.DataFrame({"y": np.r_[(rng.uniform(0, 1, 10) < score[:10]).astype(int), 1, 1],
                                     "score": score})}
    for site in LARGE:
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(int), "score": score})
    return frames


def _unions_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: a union of pooled cells no span stands for neither refused alone nor merged, nor a share the
    others' releases alone expose audited as a release alone (the code before the checks)."""
    monkeypatch.setattr(Guard, "_thin_union", lambda self, *args: None)
    monkeypatch.setattr(Guard, "_alone_unions", lambda self, *args: [])
    exposed_shares_unaudited(monkeypatch)


def _at(frame: pd.DataFrame, t: float) -> np.ndarray:
    """Records and events at or above ``t``."""
    return np.array([int(frame.loc[t, "tp"] + frame.loc[t, "fp"]), int(frame.loc[t, "tp"])])


def _pooled_bin(pooled: pd.DataFrame, lower: float) -> np.ndarray:
    upper = [t for t in pooled.index if t > lower + 1e-9]
    return _at(pooled, lower) - (_at(pooled, upper[0]) if upper else 0)


def _read(pooled: pd.DataFrame | None, own: list[np.ndarray] | None, truth: pd.DataFrame) -> int:
    """The pooled union less the large sites' own records of it: asserted to be the small site's share; the
    outcomes it reads (all of its 1 to q - 1 records where they share one outcome)."""
    if pooled is None or own is None or any(o is None for o in own):
        return 0  # refused, or a radius not released: nothing to subtract
    edges = [round(t, 6) for t in pooled.index]
    if not all(round(b, 6) in edges and round(b + 0.1, 6) in [*edges, 1.0] for b in UNION):
        return 0  # a bin of the union merged away
    records, events = sum(_pooled_bin(pooled, b) for b in UNION) - sum(own)
    held = truth[np.floor(truth["score"] * 10).isin([round(b * 10) for b in UNION])]
    assert (records, events) == (len(held), int(held["y"].sum()))  # the small site's share, exactly
    return int(records) if 0 < records < Q and events in (0, records) else 0


def _run(tmp_path: Path, pooled_first: bool, alone) -> tuple[int, str]:
    frames = _frames()
    provisioned, services = make_sites(tmp_path, frames)
    refused = ""
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def own() -> list[np.ndarray] | None:
            nonlocal refused
            try:
                return [alone(session.site_view(site), site, len(frames[site]), int(frames[site]["y"].sum()))
                        for site in LARGE]
            except FederatedCallError as exc:
                assert RULE in {f.rule for f in exc.failures.values()}, exc
                refused = "alone refused"
                return None

        def pooled() -> pd.DataFrame | None:
            nonlocal refused
            try:
                return ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True).to_frame()
            except FederatedCallError as exc:
                assert RULE in {f.rule for f in exc.failures.values()}, exc
                refused = "pooled refused"
                return None

        if pooled_first:
            together = pooled()
            mine = own()
        else:
            mine = own()
            together = pooled()
    if mine is not None and any(o is None for o in mine):
        refused = "a cut alone not released"
    if together is not None and refused == "":
        refused = f"pooled cuts {list(together.index)}"
    return _read(together, mine, frames["small"]), refused


def _polynomial(view, site: str, n: int, events: int) -> np.ndarray | None:
    """Route 1: the cell of ``(score - 0.45)^2`` between 0.0625 and 0.1225, [0.1, 0.2) and [0.7, 0.8), in one."""
    view.derive("d2", "(D$score - 0.45)^2")
    f = ds_threshold_metrics(view, "D$y", "d2", [0.0625, 0.1225]).to_frame()
    if list(f.index) != [0.0625, 0.1225]:
        return None
    return _at(f, 0.0625) - _at(f, 0.1225)


def _difference(view, site: str, n: int, events: int) -> np.ndarray | None:
    """Route 2: [0.1, 0.8) (pooled cuts) less abs(score - 0.45) < 0.25 ([0.2, 0.7)); 0.39 makes the outer cells of
    abs no union of pooled cells."""
    run = ds_threshold_metrics(view, "D$y", "D$score", [0.1, 0.8]).to_frame()
    view.derive("d", "abs(D$score - 0.45)")
    fold = ds_threshold_metrics(view, "D$y", "d", [0.25, 0.39]).to_frame()
    if list(run.index) != [0.1, 0.8] or 0.25 not in list(fold.index):
        return None
    inner = np.array([n, events]) - _at(fold, 0.25)  # [0.2, 0.7)
    return _at(run, 0.1) - _at(run, 0.8) - inner


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_polynomial_fold_of_the_score_reads_no_outcome(tmp_path: Path, pooled_first: bool, checks: str,
                                                          monkeypatch: pytest.MonkeyPatch):
    if checks == "control":
        _unions_off(monkeypatch)
    read, how = _run(tmp_path, pooled_first, _polynomial)
    print(f"\n{'control, ' if checks == 'control' else ''}(score - 0.45)^2 "
          f"({'pooled first' if pooled_first else 'alone first'}): {read} outcomes read of 12 ({how})")
    assert read == (2 if checks == "control" else 0)


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_two_releases_alone_whose_difference_is_the_union_read_the_small_sites_records(
        tmp_path: Path, pooled_first: bool, checks: str, monkeypatch: pytest.MonkeyPatch):
    if checks == "control":
        _unions_off(monkeypatch)
    read, how = _run(tmp_path, pooled_first, _difference)
    print(f"\n{'control, ' if checks == 'control' else ''}[0.1, 0.8) less abs(score - 0.45) < 0.25 "
          f"({'pooled first' if pooled_first else 'alone first'}): {read} outcomes read of 12 ({how})")
    # Neither release alone is a union no span stands for, but together they give the large sites' shares of the
    # run [0.2, 0.7), so the small site's share of it (10 of its 12) is the pooled count less theirs: its audit as a
    # release alone fails, the run merges alone first, and pooled first the large sites keep it as a thin span
    # (Guard._fails_alone). The control, as the code before the checks, reads 2.
    assert read == (2 if checks == "control" else 0)


def _graded() -> dict[str, pd.DataFrame]:
    """Grade I, II, III by outcome, no site with 1 to q - 1 records of any row, column or cell."""
    frames = {}
    for site, n in (("small", 40), ("north", 200), ("south", 200)):
        grade = np.repeat(["I", "II", "III"], [n // 2, n // 4, n // 4])
        frames[site] = pd.DataFrame({"grade": grade, "y": np.tile([0, 1], n // 2)})
    return frames


SUBSET = "dataFrameSubsetDS2(\"D\", \"D$grade\", \"'I'\", 2, NULL, NULL, FALSE)"  # grade II and III


@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_an_event_rate_among_two_grades_beside_the_pooled_table(tmp_path: Path, pooled_first: bool):
    frames = _graded()
    for frame in frames.values():  # nobody thin: every cell, row and column holds q or more at every site
        assert frame.groupby(["grade", "y"]).size().min() >= Q
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def rates() -> dict[str, int]:
            session.assign_expr("T", SUBSET)
            return {site: int(r["Nvalid"]) for site, r in session.aggregate_expr("meanDS(T$y)").items()}

        def table() -> dict | None:
            try:
                return session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
            except FederatedCallError as exc:
                assert {f.rule for f in exc.failures.values()} == {RULE}, exc
                return None

        if pooled_first:
            pooled, own = table(), rates()
        else:
            own = rates()
            pooled = table()
    print(f"\ngrade II and III per site, and the pooled table ({'pooled first' if pooled_first else 'alone first'}):"
          f" per site {own}; pooled table {'refused' if pooled is None else 'released'}")
    assert own == {s: int((f["grade"] != "I").sum()) for s, f in frames.items()}
    assert pooled is not None  # released in both orders (the withdrawn merge refused it alone first)


def _by_sex() -> dict[str, pd.DataFrame]:
    """The small site's 24 records: men in [0.3, 0.4) (5), [0.5, 0.6) (5), [0.7, 0.8) (2, both with the event);
    women in [0.4, 0.5) (6) and [0.6, 0.7) (6). The large sites' 400: uniform scores, half women."""
    rng = np.random.default_rng(5)
    score = np.r_[rng.uniform(0.3, 0.4, 5), rng.uniform(0.5, 0.6, 5), rng.uniform(0.7, 0.8, 2),
                  rng.uniform(0.4, 0.5, 6), rng.uniform(0.6, 0.7, 6)]
    y = (rng.uniform(0, 1, 24) < score).astype(int)
    y[10:12] = 1
    frames = {"small": pd.DataFrame({"y": y, "score": score, "sex": np.r_[np.zeros(12, int), np.ones(12, int)]})}
    for site in LARGE:
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(int), "score": score,
                                     "sex": (rng.uniform(0, 1, 400) < 0.5).astype(int)})
    return frames


# per grouping: its part of w, and the subset of each group (0, 1): sex equal to it; age <= 50 (4), > 50 (5)
GROUPS = {"sex": ("D$sex", 'dataFrameSubsetDS2("D", "D$sex", "{group}", 1, NULL, NULL, FALSE)'),
          "age": ("ifelse(D$age > 50, 1, 0)", 'dataFrameSubsetDS2("D", "D$age", "50", {op}, NULL, NULL, FALSE)')}


@pytest.mark.parametrize("by, form", [("sex", "cells"), ("sex", "subsets"), ("sex", "indicators"), ("age", "cells")])
@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_union_of_cells_of_two_pooled_releases_reads_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 pooled_first: bool, checks: str, by: str, form: str):
    """Route 3: the pooled thresholds by sex (an honest stratified validation: two pooled releases, over the men and
    over the women), and at each large site alone ONE row set: the cell of ``abs(w - 1)`` between 0.2 and 0.3,
    ``w = D$score + D$sex``: the men's bin [0.7, 0.8) and the women's bin [0.2, 0.3). It is a union of cells of two
    pooled releases and of no one release's cells, which the searches for unions of one release's cells
    (``_thin_union``, ``_alone_unions``) do not see; the small site holds 2 records of it (both men of [0.7, 0.8),
    with the event). ``w`` is a column of two roots, ``sex`` declared 0/1, so a cell of it released alone is audited
    and kept as its part among the men and its part among the women (``provenance.strata``): pooled first, the
    men's part is the bin the small site was thin in, and the large sites drop the cuts; alone first, their parts
    are kept as released, so the pooled men's bin [0.7, 0.8) is the small site's release alone and is merged.
    The control (the parts off: the code before) reads the 2 in both orders. ``subsets``: the same cell as the
    difference of two subsets, ``dw >= 0.2`` less ``dw >= 0.3``, each site's outcome count in each (``meanDS``);
    ``indicators``: the sums of ``ifelse(dw >= 0.2 & dw < 0.3, 1, 0)`` and of the same times the outcome: pooled
    first its comparisons' row sets with the men's subset gave the thin bin before (the control reads 0 there); alone
    first their parts among the men (below 0.7, above 0.8, the bin) leave the small site's runs of the men's pooled
    release to it alone, and the pooled releases merge every cut of them (what such a column costs). ``age``: the same
    through a comparison, the pooled thresholds over the records aged 50 or less and over the older (the small site's
    men and women, by age), ``w = D$score + ifelse(D$age > 50, 1, 0)``, whose roots are two many-valued columns: the
    groups come from the comparison in it."""
    if checks == "control":
        _groups_off(monkeypatch)
    frames = _by_sex()
    if by == "age":
        rng = np.random.default_rng(17)
        for frame in frames.values():  # the men 20 to 50, the women 50.5 to 80
            n = len(frame)
            frame["age"] = np.where(frame["sex"] == 0, rng.uniform(20, 50, n), rng.uniform(50.5, 80, n))
    group_of, subset = GROUPS[by]
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> list[pd.DataFrame]:
            return _pooled_by(session, subset, (0, 1))

        def alone() -> list[np.ndarray] | None:
            out = []
            for site in LARGE:
                view = session.site_view(site)
                view.derive("w", f"D$score + {group_of}")
                view.derive("dw", "abs(w - 1)")
                if form == "indicators":
                    try:
                        out.append(np.array([_column_sum(view, site, name, f"ifelse(dw >= 0.2 & dw < 0.3, {value}, 0)")
                                             for name, value in (("inside", "1"), ("events", "D$y"))]))
                    except FederatedCallError as exc:
                        assert {f.rule for f in exc.failures.values()} <= {RULE, SUBSET_RULE}, exc
                        return None  # the column not made: nothing to subtract
                    continue
                if form == "subsets":
                    try:
                        out.append(np.subtract(*(_subset_count(view, site, f"A{k}", f'"dw", "{t}", 6')
                                                 for k, t in ((1, 0.2), (2, 0.3)))))
                    except FederatedCallError as exc:
                        assert {f.rule for f in exc.failures.values()} == {RULE}, exc
                        return None  # a subset refused: nothing to subtract
                    continue
                f = ds_threshold_metrics(view, "D$y", "dw", [0.2, 0.3]).to_frame()
                if list(f.index) != [0.2, 0.3]:
                    return None  # a cut of the cell dropped: nothing to subtract
                out.append(_at(f, 0.2) - _at(f, 0.3))
            return out

        if pooled_first:
            men, women = pooled()
            own = alone()
        else:
            own = alone()
            men, women = pooled()
    read = _read_by_sex(men, women, own, frames["small"])
    order = "pooled first" if pooled_first else "alone first"
    print(f"\nmen's [0.7, 0.8) and women's [0.2, 0.3) by {by}, one {form[:-1]} ({order}, {checks}): {read} "
          f"outcomes read of 24; alone {'released' if own is not None else 'cuts dropped'}, men's pooled cuts "
          f"{list(men.index)}")
    # pooled first, the indicator's comparisons with the men's subset gave the thin bin before (``combined``)
    assert read == (0 if checks == "shipped" or (form == "indicators" and pooled_first) else 2)
    if form != "indicators":  # the pooled validation by sex keeps its cuts but, alone first, the small site's bin
        assert set(THRESHOLDS) - set(men.index) <= ({0.7, 0.8} if not pooled_first and checks == "shipped" else set())
        # and, alone first, the women's 0.2 where a cell or subset released alone is the men's cells below 0.8 (the
        # small site thin in one) with the women's at or above 0.2 (``dw >= 0.2``; ``abs(w - 1)`` at 0.2): a union
        # of cells of the two releases (``unions.across``), which the large sites merge
        assert set(THRESHOLDS) - set(women.index) == ({0.2} if not pooled_first and checks == "shipped" else set())


def test_a_score_by_sex_per_site_beside_the_pooled_thresholds_by_sex(tmp_path: Path):
    """Honest use of a column of several roots, one few-valued, where no site is thin in anything: the pooled thresholds
    over the men and over the women, then at each site alone the thresholds 0.3 and 0.6 of ``0.9*D$score + 0.05*D$sex``
    and a subset of it. Audited as their parts among the men and among the women, they are released, every cut kept,
    and their counts are numpy's."""
    rng = np.random.default_rng(23)
    frames = {site: pd.DataFrame({"y": (rng.uniform(0, 1, 300) < (score := rng.uniform(0, 1, 300))).astype(int),
                                  "score": score, "sex": np.tile([0, 1], 150)}) for site in ("small", *LARGE)}
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for sex in (0, 1):
            session.assign_expr(f"S{sex}", f'dataFrameSubsetDS2("D", "D$sex", "{sex}", 1, NULL, NULL, FALSE)')
            pooled = ds_threshold_metrics(session, f"S{sex}$y", f"S{sex}$score", THRESHOLDS, secure=True).to_frame()
            assert list(pooled.index) == THRESHOLDS.tolist()
        for site, frame in frames.items():
            view = session.site_view(site)
            view.derive("lp", "0.9*D$score + 0.05*D$sex")
            own = ds_threshold_metrics(view, "D$y", "lp", [0.3, 0.6]).to_frame()
            lp = 0.9 * frame["score"] + 0.05 * frame["sex"]
            assert list(own.index) == [0.3, 0.6]
            for t in (0.3, 0.6):
                assert _at(own, t).tolist() == [int((lp >= t).sum()), int(frame["y"][lp >= t].sum())]
            high = _subset_count(view, site, "H", '"lp", "0.6", 6')
            assert high.tolist() == [int((lp >= 0.6).sum()), int(frame["y"][lp >= 0.6].sum())]


def test_a_column_of_more_groups_than_a_site_audits_alone_is_refused_alone(tmp_path: Path):
    """``0.2*D$score + 0.05*(D$a + D$b + D$c)``, three columns of five values: a cut on it is a cut within each of the
    groups they make (up to 125), more than ``provenance.STRATA_MOST`` (64), so its cells alone are refused, naming
    the rule and what to do instead (a bound of the audit, not a record protected); with two of the columns (25 groups)
    the same thresholds alone are released, their counts numpy's."""
    rng = np.random.default_rng(29)
    frames = {site: pd.DataFrame({"y": (rng.uniform(0, 1, 300) < 0.4).astype(int), "score": rng.uniform(0, 1, 300),
                                  **{c: rng.integers(0, 5, 300) for c in "abc"}}) for site in ("small", *LARGE)}
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        view = session.site_view("north")
        view.derive("three", "0.2*D$score + 0.05*(D$a + D$b + D$c)")
        with pytest.raises(FederatedCallError) as refused:
            ds_threshold_metrics(view, "D$y", "three", [0.3, 0.5])
        view.derive("two", "0.2*D$score + 0.05*(D$a + D$b)")
        released = ds_threshold_metrics(view, "D$y", "two", [0.3, 0.5]).to_frame()
    failure, frame = refused.value.failures["north"], frames["north"]
    groups = len(frame[["a", "b", "c"]].drop_duplicates())  # the combinations the site holds (of 125)
    assert failure.rule == SUBSET_RULE and f"{groups} groups" in str(failure)
    assert "fewer few-valued" in str(failure.hint)
    two = 0.2 * frame["score"] + 0.05 * (frame["a"] + frame["b"])
    assert [_at(released, t).tolist() for t in (0.3, 0.5)] == [
        [int((two >= t).sum()), int(frame["y"][two >= t].sum())] for t in (0.3, 0.5)]


def _read_by_sex(men: pd.DataFrame, women: pd.DataFrame, own: list[np.ndarray] | None, small: pd.DataFrame) -> int:
    """The men's pooled bin [0.7, 0.8) and the women's [0.2, 0.3) less the large sites' own records of their union:
    asserted to be the small site's share; the outcomes it reads (its 1 to q - 1 records where they share one)."""
    if own is None or not ({0.7, 0.8} <= set(men.index) and {0.2, 0.3} <= set(women.index)):
        return 0  # a cut alone dropped, or a pooled bin merged: nothing to subtract
    held = small[((small["sex"] == 0) & (np.floor(small["score"] * 10) == 7))
                 | ((small["sex"] == 1) & (np.floor(small["score"] * 10) == 2))]
    records, events = _pooled_bin(men, 0.7) + _pooled_bin(women, 0.2) - sum(own)
    assert (records, events) == (len(held), int(held["y"].sum()))  # the small site's share, exactly
    return int(records) if 0 < records < Q and events in (0, records) else 0


def _pooled_by(session, subset: str, groups: tuple[int, ...]) -> list[pd.DataFrame]:
    """The pooled thresholds over the subset of each group (``subset``: its dataFrameSubsetDS2 text, :data:`GROUPS`)."""
    out = []
    for group in groups:
        session.assign_expr(f"S{group}", subset.format(group=group, op=4 + group))
        out.append(ds_threshold_metrics(session, f"S{group}$y", f"S{group}$score", THRESHOLDS, secure=True).to_frame())
    return out


def _groups_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: a cell, subset or row set of a derived column of several roots audited and kept as it is, not with
    its parts in the groups its few-valued roots and comparisons make, nor a union of cells of the pooled releases by
    group looked for in their refinement (the code before both)."""
    monkeypatch.setattr(context, "strata", lambda catalog, vector: ())
    monkeypatch.setattr(derive, "meaning_strata", lambda catalog, found, rows: ())
    monkeypatch.setattr(Guard, "_column_releases", lambda self, rows: {})  # nor the releases' refinement


def _column_sum(view, site: str, name: str, expression: str) -> int:
    """The sum of a derived column over ``D`` at one site alone (``meanDS``: its mean times its count)."""
    view.derive(name, expression)
    mean = view.aggregate("meanDS", Ref(name))[site]
    return int(round(mean["EstimatedMean"] * mean["Nvalid"]))


def _subset_count(view, site: str, name: str, condition: str) -> np.ndarray:
    """The records and events of a subset of ``D`` at one site alone (``meanDS`` of its outcome)."""
    view.assign_expr(name, f'dataFrameSubsetDS2("D", {condition}, NULL, NULL, FALSE)')
    mean = view.aggregate("meanDS", Ref(f"{name}$y"))[site]
    return np.array([int(mean["Nvalid"]), int(round(mean["EstimatedMean"] * mean["Nvalid"]))])


def _by_sex_runs() -> dict[str, pd.DataFrame]:
    """The small site's 29 records: men in [0.3, 0.4) (5), [0.6, 0.7) (5), [0.7, 0.8) (2, both with the event),
    [0.8, 0.9) (5); women in [0.4, 0.5) (6), [0.5, 0.6) (6). Its one thin span is the men's [0.7, 0.8); the men's
    runs [0.6, 0.8) and [0.7, 0.9) hold 7. The large sites' 400: uniform scores, half women."""
    rng = np.random.default_rng(11)
    score = np.r_[rng.uniform(0.3, 0.4, 5), rng.uniform(0.6, 0.7, 5), rng.uniform(0.7, 0.8, 2),
                  rng.uniform(0.8, 0.9, 5), rng.uniform(0.4, 0.5, 6), rng.uniform(0.5, 0.6, 6)]
    y = (rng.uniform(0, 1, 29) < score).astype(int)
    y[10:12] = 1
    frames = {"small": pd.DataFrame({"y": y, "score": score, "sex": np.r_[np.zeros(17, int), np.ones(12, int)]})}
    for site in LARGE:
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(int), "score": score,
                                     "sex": np.tile([0, 1], 200)})
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("order", ["pooled-first", "alone-first", "between"])
def test_a_union_of_two_runs_less_two_cells_alone_reads_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  order: str, checks: str):
    """Route 3c (a helper's red team): at each large site alone the cell of ``abs(w - 1)`` between 0.2 and 0.4
    (``w = D$score + D$sex``): the men's run [0.6, 0.8) and the women's run [0.2, 0.4), a union across the two pooled
    releases of spans that were not thin (the small site holds 7 of the men's run, none of the women's); then the
    men's cell [0.6, 0.7) and the women's [0.3, 0.4), each a cell of one release. The union less the two cells is
    route 3's union, the men's [0.7, 0.8) and the women's [0.2, 0.3): the pooled bins less the large sites'
    differences read the small site's 2 records, in every order ("between": the men's pooled release, the releases
    alone, the women's), on the code before (the control). Audited as its parts among the men and among the women,
    the cell of ``abs(w - 1)`` and the men's cell [0.6, 0.7) give the men's [0.7, 0.8) alone, the bin the small site
    was thin in: the large sites drop a cut (pooled first), or the pooled release merges the bin (alone first)."""
    if checks == "control":
        _groups_off(monkeypatch)
    frames = _by_sex_runs()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled(sexes: tuple[int, ...]) -> list[pd.DataFrame]:
            return _pooled_by(session, GROUPS["sex"][1], sexes)

        def alone() -> list[np.ndarray] | None:
            out = []
            for site in LARGE:
                view = session.site_view(site)
                view.derive("w", "D$score + D$sex")
                view.derive("dw", "abs(w - 1)")
                union = ds_threshold_metrics(view, "D$y", "dw", [0.2, 0.4]).to_frame()
                view.assign_expr("M", 'dataFrameSubsetDS2("D", "D$sex", "0", 1, NULL, NULL, FALSE)')
                men = ds_threshold_metrics(view, "M$y", "M$score", [0.6, 0.7]).to_frame()
                view.assign_expr("W", 'dataFrameSubsetDS2("D", "D$sex", "1", 1, NULL, NULL, FALSE)')
                women = ds_threshold_metrics(view, "W$y", "W$score", [0.3, 0.4]).to_frame()
                if [list(f.index) for f in (union, men, women)] != [[0.2, 0.4], [0.6, 0.7], [0.3, 0.4]]:
                    return None  # a cut dropped: nothing to subtract
                out.append(_at(union, 0.2) - _at(union, 0.4) - (_at(men, 0.6) - _at(men, 0.7))
                           - (_at(women, 0.3) - _at(women, 0.4)))
            return out

        if order == "pooled-first":
            by_sex, own = pooled((0, 1)), alone()
        elif order == "alone-first":
            own = alone()
            by_sex = pooled((0, 1))
        else:
            by_sex = pooled((0,))
            own = alone()
            by_sex += pooled((1,))
    men, women = by_sex
    read = _read_by_sex(men, women, own, frames["small"])
    print(f"\nthe men's run [0.6, 0.8) and the women's [0.2, 0.4) less a cell of each, alone ({order}, {checks}): "
          f"{read} outcomes read of 29; alone {'released' if own is not None else 'cuts dropped'}, men's pooled cuts "
          f"{list(men.index)}")
    assert read == (0 if checks == "shipped" else 2)
    # between, the women's 0.2: the subset w >= 0.2 alone is a union of cells of both releases, as above
    assert set(THRESHOLDS) - set(women.index) == ({0.2} if order == "between" and checks == "shipped" else set())


def _numeric_grades() -> dict[str, pd.DataFrame]:
    """Grade 1, 2, 3 (numbers): the small site's 3 records of grade 3 all had the event, its grade 2 none."""
    rng = np.random.default_rng(11)
    frames = {}
    for site, n, p in (("small", 30, (0.5, 0.4, 0.1)), ("north", 200, (0.4, 0.4, 0.2)),
                       ("south", 200, (0.4, 0.4, 0.2))):
        grade = np.repeat([1, 2, 3], [int(n * share) for share in p])
        frames[site] = pd.DataFrame({"grade": grade, "y": (rng.uniform(0, 1, n) < 0.3).astype(int)})
    small = frames["small"]
    small.loc[small["grade"] == 3, "y"] = 1
    small.loc[small["grade"] == 2, "y"] = 0
    return frames


@pytest.mark.parametrize("form", ["one-set", "complement"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_some_of_a_tables_cells_read_no_outcome(tmp_path: Path, pooled_first: bool, form: str):
    """Route 5: the pooled table of grade by outcome; at each large site alone the cells (2, 1), (3, 0), (3, 1)
    together (the small site's 3 records, all with the event): ``u = D$grade + D$y`` at 3 or more (one set), or
    its whole table less ``v = 2 * D$grade + D$y`` at 4 or less (row 1 with (2, 0), no thin cell in it).
    Closed (0 read in both orders, as before the check): a derived column of few values gives its records at
    each value (each cell of the table), which the older checks see."""
    frames = _numeric_grades()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def alone() -> list[tuple[int, int]] | None:
            out = []
            try:
                for site in LARGE:
                    view = session.site_view(site)
                    whole = view.aggregate_expr("meanDS(D$y)")[site]
                    if form == "one-set":
                        view.derive("u", "D$grade + D$y")
                        view.assign_expr("T", 'dataFrameSubsetDS2("D", "u", "3", 6, NULL, NULL, FALSE)')
                    else:
                        view.derive("v", "2 * D$grade + D$y")
                        view.assign_expr("T", 'dataFrameSubsetDS2("D", "v", "4", 4, NULL, NULL, FALSE)')
                    part = view.aggregate_expr("meanDS(T$y)")[site]
                    counts = [(int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))) for m in (whole, part)]
                    out.append(counts[1] if form == "one-set" else (counts[0][0] - counts[1][0],
                                                                     counts[0][1] - counts[1][1]))
            except FederatedCallError as exc:
                assert {RULE, "disclosure.subset_min_difference"} & {f.rule for f in exc.failures.values()}, exc
                return None
            return out

        def table() -> dict | None:
            try:
                return session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
            except FederatedCallError as exc:
                assert {RULE, "disclosure.subset_min_difference"} & {f.rule for f in exc.failures.values()}, exc
                return None

        if pooled_first:
            pooled, own = table(), alone()
        else:
            own = alone()
            pooled = table()
    read = 0
    if pooled is not None and own is not None:
        counts = np.asarray(pooled["counts"], int)
        r2, r3, c1 = pooled["rows"].index("2"), pooled["rows"].index("3"), pooled["cols"].index("1")
        records = int(counts[r3].sum() + counts[r2, c1]) - sum(n for n, _ in own)
        events = int(counts[r3, c1] + counts[r2, c1]) - sum(e for _, e in own)
        read = records if 0 < records < Q and events in (0, records) else 0
    print(f"\nsome of the table's cells, {form} ({'pooled first' if pooled_first else 'alone first'}): {read} outcomes "
          f"read of 30 ({'alone refused' if own is None else 'pooled refused' if pooled is None else 'both released'})")
    assert read == 0


def test_confident_predictions_per_site_before_the_pooled_thresholds(tmp_path: Path):
    """Honest use (alone first, no small site: 120, 300, 300 uniform scores): each site reports its metrics among
    confident predictions (``abs(D$score - 0.5)`` at 0.3: scores below 0.2 or at 0.8 and above), then the pooled
    thresholds 0.1, ..., 0.9. The confident records are bins [0, 0.1), [0.1, 0.2), [0.8, 0.9), [0.9, 1): a union no
    span stands for, but no site is thin in it, and all nine cuts are released (the withdrawn merge dropped 0.2)."""
    rng = np.random.default_rng(3)
    frames = {}
    for site, n in (("small", 120), ("north", 300), ("south", 300)):
        score = rng.uniform(0, 1, n)
        frames[site] = pd.DataFrame({"score": score, "y": (rng.uniform(0, 1, n) < score).astype(int)})
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.derive("conf", "abs(D$score - 0.5)")
        for site in frames:
            assert list(ds_threshold_metrics(session.site_view(site), "D$y", "conf", [0.3]).to_frame().index) == [0.3]
        pooled = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True)
    released = list(pooled.to_frame().index)
    print(f"\nconfident predictions per site, then the pooled thresholds: released {released}, not released "
          f"{pooled.not_released}")
    assert released == THRESHOLDS.tolist()
