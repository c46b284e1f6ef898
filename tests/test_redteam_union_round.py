"""Red team of the alone-first union round (``Guard.coarsened``'s ``thin.any()`` branch, ``Guard._union_round``,
``Guard._alone_unions``, :mod:`dsfed_server.disclosure.unions`; docs/governance.md "Unions no span stands for"),
measured on in-process sites under the shipped rules (``disclosure_rules/default.toml``, q = 5), a normal analyst,
honest sites. Each route knows the truth and counts the small site's records whose outcome it read.

The argument under attack: after the first sealed step, a site objects to each union of the release's cells that it
released alone and that is not a span, where another site was thin in a cell of it; a site's share of a union is
in 1..q-1 only if its share of some cell is, which that cell's THIN flag shows.

1. Control (the check works): at each large site alone the cell of ``(D$score - 0.45)^2`` between 0.0625 and 0.1225
   (score bins [0.1, 0.2) and [0.7, 0.8): one row set, a union no span stands for) by ``ds_threshold_metrics``,
   then the pooled thresholds. 0 read; 2 with ``Guard._alone_unions`` returning [] (and at cbb6fde).
2. Records outside every pooled cell: the same union as a subset ``T`` (``dataFrameSubsetDS2``) and ``meanDS(T$y)``
   at each large site, where a few of the large sites' records have no outcome. The pooled thresholds' cells hold
   complete cases only, so the subset's row set (which keeps the records with no outcome) was a union of no cells
   (a record in no cell), and nobody objected; ``meanDS``'s Nvalid and mean are exactly the large site's share of
   the union: 2 read, as at cbb6fde. Now a row set's records in no cell are left out before it is matched
   (``union_of_cells``): 0.
3. The "total" exemption: ``spanned`` took a row set holding every cell that holds records HERE as the release's
   total. The large sites hold no record in the bin [0.5, 0.6) (the small site and a fourth site do), so their
   whole tables are the union of every other bin, which is no span of the release; the small site holds 10 of its
   12 records in [0.5, 0.6), 2 in [0.7, 0.8). The pooled cells but [0.5, 0.6), less the large sites' totals
   (``meanDS(D$y)``), less the fourth site's 0 outside [0.5, 0.6), are the small site's 2 plus the large sites'
   records of [0.5, 0.6): given the side knowledge that those are none, 2 read in both orders, as at cbb6fde.
   The total as every cell of nonzero pooled count closed it, but refused honest protocols (a small site's whole
   table holding none of a middle decile group is no union of cells, beside any thin cell); a cell a site holds
   no record of now fills a union out to a span (``spanned``). The small site's share of [0.5, 0.6) is the bin's
   pooled count less the others' releases alone (the large sites hold none, the fourth site released its own), and
   differs from its whole by 2: each site seals, per span, its records of it that no release alone gives where
   they would fail its audit as a release alone (``Guard._fails_alone``); a span whose such records are all of
   them is merged, and pooled first the others keep it as a thin one: 0 in each order (2 with the audit off).
4. Closed: route 3 on a pooled table (grade by outcome; the large sites hold no grade III): row III is the small
   site's alone, 2 records from its whole; the table is refused in both orders (at cbb6fde: 2 read).
5. Closed: the small site's total less its share of a bin, the large sites' shares released alone (HIDDEN merges
   the run above the bin alone first; the large sites' cuts refused pooled first; as at cbb6fde).
2b. Closed: route 2 with the records in no cell made by the analyst (pooled over the women, the union subset over
   both sexes, ``meanDS(T$y + sqrt(T$sex - 1))``): the derivation's row sets are kept (at cbb6fde: 2 read).

Honest use beside a thin cell (the small site holds 1..q-1 records of one cell; no union share is thin), each
released at cbb6fde: the cost docs/governance.md states (a site cannot see whether another's share of a union is
thin, only whether its share of a cell is), measured here: per-site metrics among confident predictions and the
pooled thresholds (alone first the pooled cut 0.2 is dropped; pooled first the large sites' per-site cut 0.3 is);
each site's event rate among grades II and III and the pooled table of grade by outcome (alone first the table is
refused; pooled first the per-site rate); ``validate()`` and the per-site confident metrics (alone first the
calibration curve's cut 0.2 is dropped; pooled first every site's cut 0.3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure.checks import Guard
from sitekit import exposed_shares_unaudited, make_sites

Q = 5
THRESHOLDS = np.round(np.linspace(0.1, 0.9, 9), 3)
RULE = "secure_aggregation.pooled_thresholds"
HELD = "disclosure.subset_min_difference"  # a share the others' releases alone expose: a release alone
LARGE = ("north", "south")


def _at(frame: pd.DataFrame, t: float) -> np.ndarray:
    return np.array([int(frame.loc[t, "tp"] + frame.loc[t, "fp"]), int(frame.loc[t, "tp"])])


def _bin(pooled: pd.DataFrame, lower: float) -> np.ndarray | None:
    """Records and events of the pooled bin starting at ``lower`` (None where it is not a released bin)."""
    edges = [round(t, 6) for t in pooled.index]
    upper = round(lower + 0.1, 6)
    if lower > 0 and round(lower, 6) not in edges or upper < 1 and upper not in edges:
        return None
    first = _at(pooled, lower) if lower > 0 else np.array([int(pooled.iloc[0]["tp"] + pooled.iloc[0]["fp"]
                                                                + pooled.iloc[0]["fn"] + pooled.iloc[0]["tn"]),
                                                            int(pooled.iloc[0]["tp"] + pooled.iloc[0]["fn"])])
    return first - (_at(pooled, upper) if upper < 1 else 0)


def _score(rng: np.random.Generator, n: int, gap: tuple[float, float] | None = None) -> np.ndarray:
    score = rng.uniform(0, 1, n)
    if gap is not None:
        inside = (score >= gap[0]) & (score < gap[1])
        score[inside] = rng.uniform(gap[1], 1, inside.sum())
    return score


def _count(truth: pd.DataFrame, lowers: tuple[float, ...]) -> tuple[int, int]:
    held = truth[np.floor(truth["score"] * 10).isin([round(b * 10) for b in lowers]) & truth["y"].notna()]
    return len(held), int(held["y"].sum())


def _read(records: int, events: int, truth: tuple[int, int]) -> int:
    assert (records, events) == truth, ((records, events), truth)
    return records if 0 < records < Q and events in (0, records) else 0


def _pooled(session) -> tuple[pd.DataFrame | None, str]:
    try:
        f = ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True).to_frame()
    except FederatedCallError as exc:
        assert RULE in {f.rule for f in exc.failures.values()}, exc
        return None, "pooled refused"
    return f, f"pooled cuts {[float(t) for t in f.index]}"


# ---------------------------------------------------------------- routes 1 and 2: one union, as cells or a subset

def _union_frames(missing: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    score = np.r_[rng.uniform(0.3, 0.4, 5), rng.uniform(0.4, 0.5, 5), rng.uniform(0.7, 0.8, 2)]
    frames = {"small": pd.DataFrame({"y": np.r_[(rng.uniform(0, 1, 10) < score[:10]).astype(float), 1, 1],
                                     "score": score})}
    for site in LARGE:
        score = rng.uniform(0, 1, 400)
        y = (rng.uniform(0, 1, 400) < score).astype(float)
        y[rng.choice(400, missing, replace=False)] = np.nan  # a few outcomes not recorded
        frames[site] = pd.DataFrame({"y": y, "score": score})
    return frames


FOLD = "(D$score - 0.45)^2"  # in [0.0625, 0.1225): score in [0.1, 0.2) or [0.7, 0.8)
CUTS = [0.0625, 0.1225]


def _union_alone(session, how: str) -> list[np.ndarray] | None:
    out = []
    try:
        for site in LARGE:
            view = session.site_view(site)
            view.derive("e", FOLD)
            if how == "cells":
                f = ds_threshold_metrics(view, "D$y", "e", CUTS).to_frame()
                out.append(_at(f, CUTS[0]) - _at(f, CUTS[1]))
            else:
                view.assign_expr("U", 'dataFrameSubsetDS2("D", "e", "0.0625", 6, NULL, NULL, FALSE)')
                view.derive("e2", "(U$score - 0.45)^2")
                view.assign_expr("T", 'dataFrameSubsetDS2("U", "e2", "0.1225", 3, NULL, NULL, FALSE)')
                m = view.aggregate_expr("meanDS(T$y)")[site]
                out.append(np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]))
    except FederatedCallError as exc:
        print(f"  alone refused: {exc}")
        return None
    return out


def _union_route(tmp_path: Path, how: str, missing: int, pooled_first: bool = False) -> tuple[int, str]:
    frames = _union_frames(missing)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        if pooled_first:
            pooled, note = _pooled(session)
            own = _union_alone(session, how)
        else:
            own = _union_alone(session, how)
            pooled, note = _pooled(session)
    if own is None or pooled is None:
        return 0, note if own is not None else "alone refused"
    parts = [_bin(pooled, 0.1), _bin(pooled, 0.7)]
    if any(p is None for p in parts):
        return 0, note
    records, events = sum(parts) - sum(own)
    return _read(int(records), int(events), _count(frames["small"], (0.1, 0.7))), note


@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_one_union_as_cells_alone_first_reads_nothing(tmp_path: Path, checks: str, monkeypatch: pytest.MonkeyPatch):
    if checks == "control":  # the union round and the audit of exposed shares both off (each closes it alone)
        monkeypatch.setattr(Guard, "_alone_unions", lambda self, *args: [], raising=False)
        exposed_shares_unaudited(monkeypatch)
    read, note = _union_route(tmp_path, "cells", 0)
    print(f"\nroute 1{' (control)' if checks == 'control' else ''}, union by ds_threshold_metrics, alone first: "
          f"{read} of 12 read ({note})")
    assert read == (2 if checks == "control" else 0)


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("missing", [0, 6])
def test_a_subset_holding_records_without_outcome_is_no_union(tmp_path: Path, missing: int, pooled_first: bool):
    read, note = _union_route(tmp_path, "subset", missing, pooled_first)
    print(f"\nroute 2, union as a subset with {missing} missing outcomes at each large site, "
          f"{'pooled first' if pooled_first else 'alone first'}: {read} of 12 read ({note})")
    assert read == 0  # 2 with 6 missing at cbb6fde, and before the records in no cell were left out


# ---------------------------------------------------------------- route 3: the large sites' totals

def _gap_frames(mid: bool) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(9)
    score = np.r_[rng.uniform(0.5, 0.6, 10), rng.uniform(0.7, 0.8, 2)]
    frames = {"small": pd.DataFrame({"y": np.r_[(rng.uniform(0, 1, 10) < 0.5).astype(float), 1, 1],
                                     "score": score})}
    if mid:
        frames["mid"] = pd.DataFrame({"y": (rng.uniform(0, 1, 30) < 0.5).astype(float),
                                      "score": rng.uniform(0.5, 0.6, 30)})
    for site in LARGE:
        score = _score(rng, 400, (0.5, 0.6))
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(float), "score": score})
    return frames


def _gap_route(tmp_path: Path, mid: bool, pooled_first: bool) -> tuple[int, str]:
    frames = _gap_frames(mid)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        if pooled_first:
            pooled, note = _pooled(session)
        totals = []
        for site in LARGE:  # each large site's total alone; that they hold none of [0.5, 0.6) is side knowledge
            m = session.site_view(site).aggregate_expr("meanDS(D$y)")[site]
            totals.append(np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]))
        if mid:  # the fourth site's records outside [0.5, 0.6): none
            f = ds_threshold_metrics(session.site_view("mid"), "D$y", "D$score", [0.5, 0.6]).to_frame()
            if list(f.index) != [0.5, 0.6]:
                return 0, f"the fourth site's cuts alone {list(f.index)}"
            m = session.site_view("mid").aggregate_expr("meanDS(D$y)")["mid"]
            outside = np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]) - (
                _at(f, 0.5) - _at(f, 0.6))
            totals.append(outside)
        if not pooled_first:
            pooled, note = _pooled(session)
    if pooled is None:
        return 0, note
    lowers = [round(b, 1) for b in np.arange(0, 1, 0.1) if round(b, 1) != 0.5]
    parts = [_bin(pooled, b) for b in lowers]
    if any(p is None for p in parts) or _bin(pooled, 0.5) is None:
        return 0, note
    records, events = sum(parts) - sum(totals)
    return _read(int(records), int(events), _count(frames["small"], tuple(lowers))), note


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("mid", [False, True], ids=["three-sites", "four-sites"])
def test_the_large_sites_totals_are_no_union_to_them(tmp_path: Path, mid: bool, pooled_first: bool):
    read, note = _gap_route(tmp_path, mid, pooled_first)
    print(f"\nroute 3 ({'four' if mid else 'three'} sites, {'pooled first' if pooled_first else 'alone first'}), every "
          f"bin but [0.5, 0.6) less the large sites' totals: {read} of 12 read ({note})")
    # The small site's share of [0.5, 0.6) is the bin's pooled count less the others' releases alone (the large
    # sites hold none; the fourth site's share is its own cuts), and it is its whole but 2 records: every record of
    # the bin no site released alone is at a site whose share fails its audit, so the bin merges, or pooled first
    # the fourth site's cuts alone are refused (Guard._fails_alone). 2 read at cbb6fde.
    assert read == 0


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("mid", [False, True], ids=["three-sites", "four-sites"])
def test_the_large_sites_totals_without_the_exposed_share_audit(tmp_path: Path, mid: bool, pooled_first: bool,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """Control of route 3: with no site auditing its share of a span as a release alone, the small site's 2
    records outside [0.5, 0.6) are read."""
    exposed_shares_unaudited(monkeypatch)
    read, note = _gap_route(tmp_path, mid, pooled_first)
    print(f"\nroute 3 control ({'four' if mid else 'three'} sites, {'pooled first' if pooled_first else 'alone first'})"
          f": {read} of 12 read ({note})")
    assert read == 2


# ---------------------------------------------------------------- honest use beside a thin cell

def _confident_frames() -> dict[str, pd.DataFrame]:
    """Uniform scores; the small site's 60 hold 3 in [0.9, 1) (a thin cell) and 12 in [0, 0.2)."""
    rng = np.random.default_rng(3)
    score = np.r_[rng.uniform(0, 0.2, 12), rng.uniform(0.2, 0.9, 45), rng.uniform(0.9, 1, 3)]
    frames = {"small": pd.DataFrame({"score": score, "y": (rng.uniform(0, 1, 60) < score).astype(int)})}
    for site in LARGE:
        score = rng.uniform(0, 1, 300)
        frames[site] = pd.DataFrame({"score": score, "y": (rng.uniform(0, 1, 300) < score).astype(int)})
    return frames


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
def test_confident_predictions_per_site_beside_a_thin_cell(tmp_path: Path, pooled_first: bool):
    """Honest use: each site's metrics among confident predictions (``abs(D$score - 0.5)`` at 0.3: bins [0, 0.2) and
    [0.8, 1)) and the pooled thresholds 0.1, ..., 0.9, where the small site holds 3 records of [0.9, 1) (no
    exposure: its share of the confident records is 15 or more, at every site q or more)."""
    frames = _confident_frames()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.derive("conf", "abs(D$score - 0.5)")
        per_site = {}

        def alone() -> None:
            for site in frames:
                try:
                    f = ds_threshold_metrics(session.site_view(site), "D$y", "conf", [0.3]).to_frame()
                    per_site[site] = "released" if list(f.index) == [0.3] else f"cuts {list(f.index)}"
                except FederatedCallError as exc:
                    per_site[site] = f"refused ({', '.join(sorted({f.rule for f in exc.failures.values()}))})"

        if pooled_first:
            pooled, note = _pooled(session)
            alone()
        else:
            alone()
            pooled, note = _pooled(session)
    print(f"\nhonest, confident predictions per site and pooled thresholds "
          f"({'pooled first' if pooled_first else 'alone first'}): per site {per_site}; {note}")
    assert pooled is not None
    released = [float(t) for t in pooled.index]
    if pooled_first:  # COST (cbb6fde: every site released): _thin_union drops the large sites' cut 0.3
        assert released == THRESHOLDS.tolist()
        assert per_site == {"small": "released", "north": "cuts []", "south": "cuts []"}
    else:  # COST (cbb6fde: all nine cuts): the union round drops the cut 0.2
        assert all(v == "released" for v in per_site.values())
        assert released == [t for t in THRESHOLDS.tolist() if t != 0.2]


def _graded_thin() -> dict[str, pd.DataFrame]:
    """Grade I, II, III by outcome; the small site's 40 hold 3 of grade III with the event (a thin cell), every
    grade 10 or more at each site."""
    frames = {}
    for site, n in (("small", 40), ("north", 200), ("south", 200)):
        grade = np.repeat(["I", "II", "III"], [n // 2, n // 4, n // 4])
        y = np.tile([0, 1], n // 2)
        if site == "small":
            y[grade == "III"] = 0
            y[np.flatnonzero(grade == "III")[:3]] = 1
        frames[site] = pd.DataFrame({"grade": grade, "y": y})
    return frames


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
def test_an_event_rate_among_two_grades_beside_a_thin_cell(tmp_path: Path, pooled_first: bool):
    """Honest use: each site's event rate among grades II and III, and the pooled table of grade by outcome, where
    the small site holds 3 records of (III, 1) (its share of grades II and III is 20)."""
    from dsfed_client import Ref
    frames = _graded_thin()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def rates() -> str:
            try:
                session.assign_expr("T", "dataFrameSubsetDS2(\"D\", \"D$grade\", \"'I'\", 2, NULL, NULL, FALSE)")
                session.aggregate_expr("meanDS(T$y)")
                return "released"
            except FederatedCallError as exc:
                return f"refused ({', '.join(sorted({f.rule for f in exc.failures.values()}))})"

        def table() -> str:
            try:
                session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
                return "released"
            except FederatedCallError as exc:
                return f"refused ({', '.join(sorted({f.rule for f in exc.failures.values()}))})"

        if pooled_first:
            pooled, own = table(), rates()
        else:
            own = rates()
            pooled = table()
    order = "pooled first" if pooled_first else "alone first"
    print(f"\nhonest, grade II and III per site and the pooled table ({order}"
          f"): per site {own}; pooled table {pooled}")
    # COST (cbb6fde: both released in both orders)
    refused = f"refused ({RULE})"
    assert (pooled, own) == (("released", refused) if pooled_first else (refused, "released"))


# ---------------------------------------------------------------- route 4: the total exemption, a pooled table

def _table_frames() -> dict[str, pd.DataFrame]:
    """Grade by outcome. The large sites hold no record of grade III; the small site 10 of grade III (5 with the
    event) and 2 of grade II, both with the event."""
    rng = np.random.default_rng(13)
    frames = {"small": pd.DataFrame({"grade": np.r_[np.repeat(["III"], 10), ["II", "II"]],
                                     "y": np.r_[np.tile([0, 1], 5), 1, 1]})}
    for site in LARGE:
        frames[site] = pd.DataFrame({"grade": rng.choice(["I", "II"], 300),
                                     "y": (rng.uniform(0, 1, 300) < 0.4).astype(int)})
    return frames


def _declare_grades(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every site's data dictionary declares the grades I, II and III (``sitekit.write_table`` declares the values
    seen), as a shared data dictionary does."""
    import json

    import sitekit
    original = sitekit.write_table

    def write(data_dir: Path, frame: pd.DataFrame, *, project: str = "P", table: str = "t") -> None:
        original(data_dir, frame, project=project, table=table)
        path = data_dir / project / f"{table}.dictionary.json"
        doc = json.loads(path.read_text())
        for v in doc["variables"]:
            if v["name"] == "grade":
                v["categories"] = [{"name": c, "label": c} for c in ("I", "II", "III")]
        path.write_text(json.dumps(doc, indent=1) + "\n")

    monkeypatch.setattr(sitekit, "write_table", write)


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
def test_a_pooled_table_less_the_large_sites_totals(tmp_path: Path, pooled_first: bool,
                                                    monkeypatch: pytest.MonkeyPatch):
    """Route 4: route 3 with the pooled table of grade by outcome (``table2DDS``), the large sites holding no record
    of grade III. The outcome read needs the large sites' events (``meanDS(D$y)``), their column 1, which a cell
    they hold no record of, (III, 1), fills out to a column. Row III is every record of the small site but 2, and
    the small site holds every record of it: its pooled count is the small site's release alone, whose audit
    refuses the table in both orders (``Guard._fails_alone``, ``disclosure.subset_min_difference``)."""
    from dsfed_client import Ref
    frames = _table_frames()
    _declare_grades(monkeypatch)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def table() -> dict | None:
            try:
                return session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
            except FederatedCallError as exc:
                assert {RULE, HELD} & {f.rule for f in exc.failures.values()}, exc
                return None

        def totals() -> np.ndarray | None:
            out = np.zeros(2, int)
            try:
                for site in LARGE:
                    m = session.site_view(site).aggregate_expr("meanDS(D$y)")[site]
                    out += [int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]
            except FederatedCallError as exc:
                assert RULE in {f.rule for f in exc.failures.values()}, exc
                return None
            return out

        if pooled_first:
            pooled, large = table(), totals()
        else:
            large = totals()
            pooled = table()
    read = 0
    if pooled is not None and large is not None:
        counts = np.asarray(pooled["counts"], int)
        rows = [pooled["rows"].index(g) for g in ("I", "II")]
        events_col = pooled["cols"].index("1")
        records = int(counts[rows].sum()) - int(large[0])
        events = int(counts[rows, events_col].sum()) - int(large[1])
        small = frames["small"]
        read = _read(records, events, (int((small["grade"] != "III").sum()),
                                       int(small.loc[small["grade"] != "III", "y"].sum())))
    print(f"\nroute 4, pooled table rows I and II less the large sites' totals "
          f"({'pooled first' if pooled_first else 'alone first'}): {read} of 12 read "
          f"({'pooled refused' if pooled is None else 'alone refused' if large is None else 'both released'})")
    assert read == 0


# ---------------------------------------------------------------- route 5: a site's total less its share of a span

@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
def test_the_small_sites_total_less_its_share_of_a_bin(tmp_path: Path, pooled_first: bool):
    """Route 5: no gap. The small site's 12: 10 in [0.5, 0.6), 2 in [0.7, 0.8) (both with the event); the large
    sites' 400 uniform. Each large site alone at the pooled cuts 0.5 and 0.6 (its share of the bin, a span), the
    small site's own ``meanDS(D$y)`` (its total, q-safe), the pooled thresholds: the pooled bin less the large
    sites' shares is the small site's 10 (q or more: HIDDEN passes), and its total less them its 2 records outside
    the bin, a union of every other bin at the small site, which no span stands for."""
    frames = _gap_frames(False)
    rng = np.random.default_rng(17)
    for site in LARGE:
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(float), "score": score})
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def alone() -> np.ndarray | None:
            try:
                shares = []
                for site in LARGE:
                    f = ds_threshold_metrics(session.site_view(site), "D$y", "D$score", [0.5, 0.6]).to_frame()
                    if list(f.index) != [0.5, 0.6]:
                        return None
                    shares.append(_at(f, 0.5) - _at(f, 0.6))
                m = session.site_view("small").aggregate_expr("meanDS(D$y)")["small"]
            except FederatedCallError as exc:
                assert RULE in {f.rule for f in exc.failures.values()}, exc
                return None
            return np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]) + sum(shares)

        if pooled_first:
            pooled, note = _pooled(session)
            own = alone()
        else:
            own = alone()
            pooled, note = _pooled(session)
    read = 0
    if own is not None and pooled is not None and _bin(pooled, 0.5) is not None:
        records, events = own - _bin(pooled, 0.5)
        lowers = tuple(round(b, 1) for b in np.arange(0, 1, 0.1) if round(b, 1) != 0.5)
        read = _read(int(records), int(events), _count(frames["small"], lowers))
    print(f"\nroute 5, the small site's total less its share of [0.5, 0.6) "
          f"({'pooled first' if pooled_first else 'alone first'}): {read} of 12 read "
          f"({note if own is not None else 'alone refused'})")


@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_validate_beside_confident_predictions_per_site(tmp_path: Path, pooled_first: bool):
    """Honest use: ``validate(secure=True)`` and each site's metrics among confident predictions (``conf`` at 0.3),
    the small site holding 3 records of [0.9, 1). At cbb6fde: every site's cut 0.3 released in both orders, the
    calibration curve's cuts all released."""
    from dsfed_client.analyses.suite import validate
    frames = _confident_frames()
    provisioned, services = make_sites(tmp_path, frames)
    per_site = {}
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.derive("conf", "abs(D$score - 0.5)")

        def alone() -> None:
            for site in frames:
                f = ds_threshold_metrics(session.site_view(site), "D$y", "conf", [0.3]).to_frame()
                per_site[site] = [float(t) for t in f.index]

        if pooled_first:
            report = validate(session, "D$y", "D$score", secure=True, heterogeneity=False)
            alone()
        else:
            alone()
            report = validate(session, "D$y", "D$score", secure=True, heterogeneity=False)
    curve = report.curve.not_released["pooled"]
    order = "pooled first" if pooled_first else "alone first"
    print(f"\nhonest, validate() and confident predictions per site ({order})"
          f": per site {per_site}; calibration curve cuts not released {curve}; decision curve not released "
          f"{report.decision_curve.not_released['pooled']}")
    if pooled_first:  # COST: every site's cut 0.3 dropped, the small site's too (cbb6fde: all released)
        assert per_site == {site: [] for site in frames}
    else:  # COST: the calibration curve's cut 0.2 dropped (cbb6fde: none)
        assert per_site == {site: [0.3] for site in frames}
        assert curve == [0.2]


# ---------------------------------------------------------------- route 2b: records in no cell, made by the analyst

@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
def test_a_subset_whose_outcome_is_missing_by_derivation(tmp_path: Path, pooled_first: bool):
    """Route 2b: route 2 with no missing data. The pooled thresholds over the women (``S``, a stratified validation);
    at each large site alone the union subset ``T`` over the whole table (men too), and ``meanDS(T$yw)``, ``yw =
    T$y + sqrt(T$sex - 1)``: the outcome for the women, NaN (no value) for the men, so Nvalid and the mean are the
    women's share of the union, while the subset's row set holds the men, records in no cell of the release."""
    rng = np.random.default_rng(21)
    frames = _union_frames(0)
    frames["small"]["sex"] = 1
    for site in LARGE:
        frames[site]["sex"] = (rng.uniform(0, 1, 400) < 0.5).astype(int)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> tuple[pd.DataFrame | None, str]:
            session.assign_expr("S", 'dataFrameSubsetDS2("D", "D$sex", "1", 1, NULL, NULL, FALSE)')
            try:
                f = ds_threshold_metrics(session, "S$y", "S$score", THRESHOLDS, secure=True).to_frame()
            except FederatedCallError as exc:
                assert RULE in {f.rule for f in exc.failures.values()}, exc
                return None, "pooled refused"
            return f, f"pooled cuts {[float(t) for t in f.index]}"

        def alone() -> list[np.ndarray] | None:
            out = []
            try:
                for site in LARGE:
                    view = session.site_view(site)
                    view.derive("e", FOLD)
                    view.assign_expr("U", 'dataFrameSubsetDS2("D", "e", "0.0625", 6, NULL, NULL, FALSE)')
                    view.derive("e2", "(U$score - 0.45)^2")
                    view.assign_expr("T", 'dataFrameSubsetDS2("U", "e2", "0.1225", 3, NULL, NULL, FALSE)')
                    view.derive("yw", "T$y + sqrt(T$sex - 1)")
                    m = view.aggregate_expr("meanDS(yw)")[site]
                    out.append(np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]))
            except FederatedCallError as exc:
                print(f"  alone refused: {str(exc)[:400]}")
                return None
            return out

        if pooled_first:
            together, note = pooled()
            own = alone()
        else:
            own = alone()
            together, note = pooled()
    read = 0
    if own is not None and together is not None:
        parts = [_bin(together, 0.1), _bin(together, 0.7)]
        if all(p is not None for p in parts):
            records, events = sum(parts) - sum(own)
            read = _read(int(records), int(events), _count(frames["small"], (0.1, 0.7)))
    print(f"\nroute 2b, union subset over both sexes, outcome NaN for the men "
          f"({'pooled first' if pooled_first else 'alone first'}): {read} of 12 read "
          f"({note if own is not None else 'alone refused'})")
    assert read == 0  # closed: the derivation keeps the women of T as a row set, a union the checks match
