"""Red team of the exposed-share check of pooled releases (``Guard._shares``' HOLDERS and FAILING
fields, ``Guard._fails_alone``, the FAILING part of ``_record_thin``), measured on
in-process sites under the shipped rules (``disclosure_rules/default.toml``, q = 5), a normal analyst, honest sites.
Each route knows the truth and counts the small site's records (1 to 4) whose count and outcome it read.

The argument under attack: a site's share of a span of pooled cells is exposed exactly when every other site's share
is public (released alone) or zero; then the pooled count is that site's release alone and must pass its audit.

L. LATER exposure, two holders (HOLDERS = 3 at pooled time). The small site holds 10 + 10 records of the run
   [0.5, 0.7), the large sites about 80 each. Calls: the pooled thresholds; the small site alone ``meanDS(T$y)`` of
   a subset ``T`` (9 of each bin of the run, the 2 left out are events); each large site alone
   ``ds_threshold_metrics`` at cuts [0.5, 0.7). Read: the pooled run less the large sites' runs less T.
   Pooled first, the small site's FAILING was 0 at pooled time (T came after) and the run was not its alone
   (the large sites hold records of it): on the code before nobody kept anything, T passed and the large sites'
   runs passed, 2 read in both later orders (as with the control). Now each site keeps its records of every pooled
   cell it holds records of that its own releases do not give (``Guard._record_exposed``: the others may release
   theirs alone later, which it cannot see), and T, 2 from its records of the run's two cells, is refused: 0.
   H: the same with exact sums at the small site alone instead of T (``meanDS(D$g)``, ``meanDS(D$y * D$g)``; ``g``
   is 1 on T's records only). The large sites' runs first, then pooled, then the sums: 0 (the run, exposed at the
   pooled release, is kept whole, and the sums' 18 records are 2 from it), 2 with the control. Pooled first: 2
   read on the code before, which compared an exact sum's records with kept sets one by one (10 and 10, each far
   from 18). Now the small site keeps with each cell its records of it with the event (the pooled release gives
   their number too), and the records other functions are summed over -- ``D$y * D$g``'s ones (16), a derived
   column's 0/1 factor -- are audited against a combination of the kept cells and their events
   (``Guard._against_kept``): 2 from the run's events, refused, 0. ``meanDS(D$g)`` alone gives only the number of
   g's ones and is compared pairwise (a site's ``meanDS(D$y)`` beside cells whose events the pooled release gave
   passes). G: the same, the events through a GLM instead (``meanDS(D$g)``, then ``glmDS2(y ~ g)`` at beta = 0,
   whose X'Wz entry is g's events less half of g's ones): 2 on the code before, 0 now (the GLM's records of g = 1,
   the outcome summed over them, are audited so, though their number was released before).
   Alone first (T, then pooled, then the large sites): the small site's FAILING is 20, the large sites keep the run
   as thin and north's cut 0.5 alone is dropped: 0 (2 with the checks off). Large sites' runs first, then pooled,
   then T: the run is the small site's alone at pooled time and passes its audit; the site keeps its records of it
   (``Guard._record_exposed``, apart from its releases alone) and T is refused: 0 (2 before, and with the control).
C. A combination of spans, each passing alone. The small site holds every record of the pooled bins [0.2, 0.3) and
   [0.6, 0.7) (10 each; the large sites none of either) and none between. Its subset ``T`` alone (9 of each bin,
   ``meanDS(T$y)``; the 2 left out are events), then the pooled thresholds: each bin is one site's share
   (HOLDERS = 1), audited alone against T and the other bin; the two bins' pooled counts less T are the 2 left out,
   one in each bin. Alone first: 2 read before (as with the checks off), the audit's bound seeing no group spread
   over parts of one record; now (``differencing._new_small_group``) the bins are merged: 0. Pooled first the
   small site keeps its records of the bins and T, within 2 of their union, is refused: 0.
C2. C with the site's total for T: the small site holds every record of [0.2, 0.3) and [0.6, 0.7) (10 each)
   and 3 records (events) of [0.9, 1), where the large sites hold many. Calls: ``meanDS(D$y)`` at the small site alone
   and the pooled thresholds, either order. Read: the small site's Nvalid and events less the two pooled bins.
   3 read in both orders with the checks off, and with a first version of the audit (each bin passes alone, 13
   from the site's 23; their union, no span, differs by 3). Now a span is audited with the other cells the site
   holds every record of as released beside it: the bins merge, 0.
W. C pooled first with 12 pooled histograms of other columns between (36 cells the small site keeps, 25 or more of
   its records each): an audit that combined the latest 32 kept cells pushed the two bins out, and T passed: 2 read
   on the code before. Now it combines 32: the latest 8 and those nearest T (``differencing.nearest_sets``, whose
   ranking ``tests/test_nearest_sets.py`` tests), among them the two bins: 0, the control 2.
P. The pooled thresholds (the small site keeps its 10 records of [0.2, 0.3)), then 99 pooled thresholds on another
   column whose cell [0.80, 0.81) holds 8 of those records at the small site, the 71st cell it holds records of, then
   the large sites' own [0.80, 0.81): the kept cell less the pooled cell less theirs reads the 2 left out. A site
   audited its first 64 spans against kept cells and the rest by the bound of the spans alone: 2 read on the code
   before. Now every span is compared with the kept cells of nearly its size: 0, the control 2.
S. A second pooled release over a subset, no release of the small site alone. The small site holds 10 records of
   [0.5, 0.6), 8 of them in ``T`` (``g == 1``, a subset made at every site; the 2 left out are events); the large
   sites about 40 each. Calls: the pooled thresholds on D, then on T; each large site alone its [0.5, 0.6) on D and
   on T (cuts [0.5, 0.6)). Read: (pooled D bin less the large sites' D bins) less (pooled T bin less theirs).
   Pooled first: 2 read on the code before (as with the checks off): at both pooled releases three sites hold
   hidden records of the bin, the two pooled bins differ by more than 5, and nobody kept anything. Now the small
   site keeps its records of the pooled D bin (its share, which the large sites' later D bins alone give), its
   share of the T bin, 2 from them, fails its audit as a release alone, so the large sites keep the T bin as
   another site's failing share and do not release theirs alone (north's [0.5, 0.6) on T is merged): 0. Alone
   first the D bin is the small site's alone, its records of it kept (``Guard._record_exposed``), and its share of
   the T bin, 2 from them, fails the audit of the pooled T release and merges: 0 (2 before, and with the control).

Honest costs (end of the file): four heterogeneous sites (380, 250, 120, and a small site of 30 whose scores sit
high; and three sites of 300, 150 and 25), the pooled thresholds, the pooled table of grade by outcome,
``validate(secure=True)``, then each site's metrics alone at the pooled cuts, with the checks and with the control
(site secrets fixed, so that both arms draw the same margins). Four sites: no difference. Three sites: at most the
largest site's per-site cut 0.9 is dropped with the checks (kept by the control; in some runs, as the order in which
a site reads its thin sets varies): site b's FAILING on the run [0.1, 0.9) (its 146 of 150 records there) keeps the
run as thin at a; the small site, which holds no record below 0.4, keeps some of its cuts below 0.4 (empty bins)
where the control merges them with the rest. In both arms the per-site metrics
after the pooled releases lose nearly every cut at every site, and the logistic calibration fails (glmDS2 at one
site): neither is the checks' doing.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from sitekit import exposed_shares_unaudited, make_sites
from test_redteam_union_round import _at, _bin, _declare_grades, _pooled, THRESHOLDS

Q = 5
LARGE = ("north", "south")


@pytest.fixture(autouse=True)
def _fixed_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Site secrets from the site's name, not 32 random bytes: each new cell's secret margin is then the same at
    every run, with the checks and with the control, so that what differs is the checks' doing."""
    import hashlib

    from dsfed_server import provision

    def write_secret(path: Path) -> None:
        path.write_bytes(hashlib.sha256(f"exposed-share:{path.name}".encode()).digest())
        path.chmod(0o600)

    monkeypatch.setattr(provision, "write_secret", write_secret)


@contextmanager
def _over(tmp_path: Path, frames: dict[str, pd.DataFrame]) -> Iterator[Any]:
    """An analyst's session over in-process sites holding ``frames`` (shipped rules), the table assigned as D."""
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        yield session


def _off(monkeypatch: pytest.MonkeyPatch, checks: str) -> None:
    """``control``: the exposed-share audit off (as before it was built)."""
    if checks == "control":
        exposed_shares_unaudited(monkeypatch)


def _read(records: int, events: int, truth: tuple[int, int]) -> int:
    assert (records, events) == truth, ((records, events), truth)
    return records if 0 < records < Q and events in (0, records) else 0


def _rules(exc: FederatedCallError) -> str:
    return ", ".join(sorted({str(f.rule) for f in exc.failures.values()}))


def _subset_mean(session, site: str = "small") -> tuple[np.ndarray | None, str]:
    view = session.site_view(site)
    try:
        view.assign_expr("T", 'dataFrameSubsetDS2("D", "D$g", "1", 1, NULL, NULL, FALSE)')
        m = view.aggregate_expr("meanDS(T$y)")[site]
    except FederatedCallError as exc:
        return None, f"T alone refused ({_rules(exc)})"
    return np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]), f"T alone {int(m['Nvalid'])}"


def _sums_alone(session, site: str = "small") -> tuple[np.ndarray | None, str]:
    """T's records (the small site's ``g``, 1 on 18 of its 20 records of [0.5, 0.7) and nowhere else) and their
    events as exact sums at the small site alone, no subset: ``meanDS`` of ``D$g`` and of ``D$y * D$g``."""
    view = session.site_view(site)
    try:
        view.assign_expr("HY", "D$y * D$g")
        h, hy = (view.aggregate_expr(f"meanDS({name})")[site] for name in ("D$g", "HY"))
    except FederatedCallError as exc:
        return None, f"sums alone refused ({_rules(exc)})"
    n = int(h["Nvalid"])
    return np.array([int(round(h["EstimatedMean"] * n)), int(round(hy["EstimatedMean"] * n))]), "sums alone"


def _glm_alone(session, site: str = "small") -> tuple[np.ndarray | None, str]:
    """T's records and their events at the small site alone through a GLM at beta = 0 after ``g``'s sum alone
    (its number): ``glmDS2(y ~ g)`` releases X'WX and X'Wz, whose ``g`` entries are a quarter of g's ones and
    their events less half of them (W = 1/4)."""
    view = session.site_view(site)
    try:
        view.aggregate_expr("meanDS(D$g)")
        part = view.aggregate_expr('glmDS2(y ~ g, "binomial", "0,0", NULL, NULL, "D")')[site]
    except FederatedCallError as exc:
        return None, f"sums alone refused ({_rules(exc)})"
    info, xwz = np.asarray(part["info.matrix"], float), np.asarray(part["xwz"], float)
    n = int(round(info[1, 1] / 0.25))
    return np.array([n, int(round(xwz[1] + n / 2))]), "glm alone"


def _runs_alone(session, cuts: list[float]) -> tuple[np.ndarray | None, str]:
    out = np.zeros(2, int)
    for site in LARGE:
        try:
            f = ds_threshold_metrics(session.site_view(site), "D$y", "D$score", cuts).to_frame()
        except FederatedCallError as exc:
            return None, f"{site} alone refused ({_rules(exc)})"
        if [float(t) for t in f.index] != cuts:
            return None, f"{site} alone cuts {list(f.index)}"
        out += _at(f, cuts[0]) - _at(f, cuts[1])
    return out, f"large sites' runs {cuts} alone"


# ---------------------------------------------------------------- L: a share exposed later, by the others' releases

def _later_frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(61)
    score = np.r_[rng.uniform(0.5, 0.6, 10), rng.uniform(0.6, 0.7, 10), rng.uniform(0.0, 0.3, 10)]
    y = np.r_[1, np.tile([0, 1], 4), 0, 1, np.tile([0, 1], 4), 0, (rng.uniform(0, 1, 10) < 0.5).astype(int)]
    g = np.r_[0, np.ones(9, int), 0, np.ones(9, int), np.zeros(10, int)]  # T: 9 of each bin; the 2 left: events
    frames = {"small": pd.DataFrame({"y": y.astype(float), "score": score, "g": g})}
    for site in LARGE:
        s = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < s).astype(float), "score": s,
                                     "g": (rng.uniform(0, 1, 400) < 0.5).astype(int)})
    return frames


def _later_route(tmp_path: Path, order: str) -> tuple[int, str]:
    frames = _later_frames()
    notes, got = [], {}
    with _over(tmp_path, frames) as session:
        steps = {"pooled": lambda: _pooled(session), "T": lambda: _subset_mean(session),
                 "H": lambda: _sums_alone(session), "G": lambda: _glm_alone(session),
                 "large": lambda: _runs_alone(session, [0.5, 0.7])}
        for step in order.split("-"):
            got[step], note = steps[step]()
            notes.append(note)
    read = 0
    if all(v is not None for v in got.values()):
        parts = [_bin(got["pooled"], 0.5), _bin(got["pooled"], 0.6)]
        if all(p is not None for p in parts):
            records, events = sum(parts) - got["large"] - next(got[k] for k in ("T", "H", "G") if k in got)
            small = frames["small"]
            left = small[(small.score >= 0.5) & (small.score < 0.7) & (small.g != 1)]
            read = _read(int(records), int(events), (len(left), int(left.y.sum())))
    return read, "; ".join(notes)


@pytest.mark.parametrize("order", ["pooled-T-large", "pooled-large-T", "T-pooled-large", "pooled-H-large",
                                   "large-pooled-H", "pooled-G-large"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_a_share_exposed_later_by_the_other_holders_releases_alone(tmp_path: Path, checks: str, order: str,
                                                                   monkeypatch: pytest.MonkeyPatch):
    _off(monkeypatch, checks)
    read, note = _later_route(tmp_path, order)
    print(f"\nL ({checks}, {order}): pooled [0.5, 0.7) less the large sites' runs alone less the small site's T "
          f"alone: {read} of 30 read ({note})")
    # Pooled first (2 on the code before, in both later orders, and with the control): at pooled time three sites
    # hold hidden records of the run; the large sites' later runs alone make the small site's share the pooled run
    # less theirs. Now the small site keeps its records of each pooled cell it holds records of, and T, within 2 of
    # their union, is refused. Alone first the small site's FAILING keeps the run as thin at the large sites, whose
    # runs are refused. Pooled first with exact sums instead of T (H; 2 on the code before, which compared the sums'
    # records with the kept cells one by one): the small site keeps its records of the run's cells with their events,
    # and y * g's records (16 of its 18 there with the event), 2 from the cells' events together, are refused; with
    # a GLM instead (G), g's records, over which it sums the outcome, 2 from the run's cells together.
    assert read == (2 if checks == "control" else 0)


def _between_frames() -> dict[str, pd.DataFrame]:
    """L's frames and, at every site, a second column ``v`` in [0, 1) (a few records of each of its tenths at
    the small site) for a pooled release between."""
    frames = _later_frames()
    rng = np.random.default_rng(100)
    return {site: frame.assign(v=rng.uniform(0, 1, len(frame))) for site, frame in frames.items()}


@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_exact_sums_after_a_pooled_release_of_another_column(tmp_path: Path, checks: str,
                                                             monkeypatch: pytest.MonkeyPatch):
    """H pooled first with a pooled release of another column between (a histogram of ``v`` in 12 bins, each
    holding 1 to 5 of the small site's records): the small site keeps those cells too. On the first version of the
    combination (a read-only review's route) 2 were read: with those cells the sums' records lay in the kept sets'
    span and were taken as given, and the 2 left out of the run were atoms of their own, which no union of atoms
    sets apart. Now cells of fewer than q records here are left out of the combination (the others keep them as
    thin), every group of fewer than q records of its small atoms is tried, and the sums are refused: 0; the control
    2."""
    _off(monkeypatch, checks)
    frames = _between_frames()
    with _over(tmp_path, frames) as session:
        pooled, note = _pooled(session)
        between = session.pooled("histogramDS2", Ref("D$v"), 12, 0.0, 1.0, 1, 3, 0.25)["histobject"]["breaks"]
        sums, said = _sums_alone(session)
        runs, ran = _runs_alone(session, [0.5, 0.7])
    read = 0
    if sums is not None and runs is not None and pooled is not None:
        parts = [_bin(pooled, 0.5), _bin(pooled, 0.6)]
        if all(p is not None for p in parts):
            records, events = sum(parts) - runs - sums
            small = frames["small"]
            left = small[(small.score >= 0.5) & (small.score < 0.7) & (small.g != 1)]
            read = _read(int(records), int(events), (len(left), int(left.y.sum())))
    print(f"\nL ({checks}, pooled-v-H-large): {read} of 30 read ({note}; {len(between) - 1} bins of v; {said}; {ran})")
    assert read == (2 if checks == "control" else 0)


# ---------------------------------------------------------------- C: two exposed spans combined with a subset alone

def _combined_frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(67)
    score = np.r_[rng.uniform(0.2, 0.3, 10), rng.uniform(0.6, 0.7, 10), rng.uniform(0.9, 1.0, 10)]
    y = np.r_[1, np.tile([0, 1], 4), 0, 1, np.tile([0, 1], 4), 0, (rng.uniform(0, 1, 10) < 0.5).astype(int)]
    g = np.r_[0, np.ones(9, int), 0, np.ones(9, int), np.zeros(10, int)]  # T: 9 of each bin; the 2 left: events
    frames = {"small": pd.DataFrame({"y": y.astype(float), "score": score, "g": g})}
    for site in LARGE:
        s = rng.uniform(0, 1, 400)
        for lo in (0.2, 0.6):  # the large sites hold no record of [0.2, 0.3) nor of [0.6, 0.7)
            gap = (s >= lo) & (s < lo + 0.1)
            s[gap] = rng.uniform(0.3, 0.6, gap.sum())
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < s).astype(float), "score": s,
                                     "g": (rng.uniform(0, 1, 400) < 0.5).astype(int)})
    return frames


def _combined_route(tmp_path: Path, pooled_first: bool) -> tuple[int, str]:
    frames = _combined_frames()
    with _over(tmp_path, frames) as session:
        if pooled_first:
            (pooled, note), (own, alone) = _pooled(session), _subset_mean(session)
        else:
            own, alone = _subset_mean(session)
            pooled, note = _pooled(session)
    return _two_bins_less_t(frames, pooled, own), f"{note}; {alone}"


def _two_bins_less_t(frames: dict[str, pd.DataFrame], pooled: pd.DataFrame | None, own: np.ndarray | None) -> int:
    """The small site's records of C's two pooled bins (the others hold none) less T's, read where both bins and T
    were released: the records T leaves out, and their events."""
    if own is None or pooled is None:
        return 0
    parts = [_bin(pooled, 0.2), _bin(pooled, 0.6)]
    if any(p is None for p in parts):
        return 0
    records, events = sum(parts) - own
    small = frames["small"]
    left = small[(((small.score >= 0.2) & (small.score < 0.3)) | ((small.score >= 0.6) & (small.score < 0.7)))
                 & (small.g != 1)]
    return _read(int(records), int(events), (len(left), int(left.y.sum())))


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_two_exposed_bins_less_a_subset_alone(tmp_path: Path, checks: str, pooled_first: bool,
                                              monkeypatch: pytest.MonkeyPatch):
    _off(monkeypatch, checks)
    read, note = _combined_route(tmp_path, pooled_first)
    print(f"\nC ({checks}, {'pooled first' if pooled_first else 'alone first'}): pooled [0.2, 0.3) + [0.6, 0.7) "
          f"(the small site's alone) less its T alone: {read} of 30 read ({note})")
    # Alone first (2 on the code before, as the control): each bin alone is one site's (HOLDERS = 1), audited against
    # T and the other bin, which the site holds every record of; the two with T single out the 2 left out, one in
    # each bin, which the audit's bound did not see (two parts of one record each). Now it tries every group of the
    # atoms of fewer than q records (differencing._new_small_group): the bins merge with their neighbours (cuts 0.3
    # and 0.7 dropped), 0. Pooled first the small site keeps its records of the two
    # bins (Guard._record_exposed) and T, within 2 of their union, is refused: 0 (2 before, and with the control).
    assert read == (0 if checks == "shipped" else 2)


# ---------------------------------------------------------------- W: the kept cells pushed out of the combination

BETWEEN = 12  # pooled histograms between: 3 kept cells each, more than the latest 32 the combination once took


def _window_frames() -> dict[str, pd.DataFrame]:
    """C's two bins at the small site (10 records each, every record of them there; T is 9 of each, the 2 left out
    events) and 200 records in [0.9, 1) in 40 blocks of 5, where the large sites hold records too. Columns ``v1`` ..
    ``v12`` (for the pooled histograms between): at the small site the two bins' 20 records in the first third, each
    block in a third drawn per column (at least two blocks in the first); at the large sites uniform."""
    rng = np.random.default_rng(89)
    frames = _combined_frames()
    small = frames["small"]
    small = small[small.score < 0.9].reset_index(drop=True)
    blocks = pd.DataFrame({"y": (rng.uniform(0, 1, 200) < 0.5).astype(float), "score": rng.uniform(0.9, 1.0, 200),
                           "g": np.zeros(200, int)})
    small = pd.concat([small, blocks], ignore_index=True)
    for k in range(1, BETWEEN + 1):
        third = rng.integers(0, 3, 40)
        third[rng.choice(40, 2, replace=False)] = 0
        small[f"v{k}"] = np.r_[np.full(20, 1 / 6), (np.repeat(third, 5) + 0.5) / 3]
    frames["small"] = small
    for site in LARGE:
        n = len(frames[site])
        frames[site] = frames[site].assign(**{f"v{k}": rng.uniform(0, 1, n) for k in range(1, BETWEEN + 1)})
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_two_exposed_bins_less_a_subset_after_many_pooled_cells(tmp_path: Path, checks: str,
                                                               monkeypatch: pytest.MonkeyPatch):
    """C pooled first, with 12 pooled histograms of other columns between (3 bins each, every bin holding 25 or
    more of the small site's records, none within a few records of another or of T): the small site keeps their 36
    cells after the two bins. A combination that took the latest 32 kept cells had pushed the two bins out of it,
    and T (their union less 2; 10 and more records from each kept cell) passed: 2 read on the code before. The
    histograms' cells do not give the two bins' union (its records are always in one cell with some blocks), so
    only the two bins set the 2 apart. The combination now takes the latest 8 and the 24 nearest T: the bins among
    them."""
    _off(monkeypatch, checks)
    frames = _window_frames()
    with _over(tmp_path, frames) as session:
        pooled, note = _pooled(session)
        bins = [len(session.pooled("histogramDS2", Ref(f"D$v{k}"), 3, 0.0, 1.0, 1, 3, 0.25)["histobject"]["counts"])
                for k in range(1, BETWEEN + 1)]
        own, alone = _subset_mean(session)
    read = _two_bins_less_t(frames, pooled, own)
    print(f"\nW ({checks}): pooled [0.2, 0.3) + [0.6, 0.7) less T alone after {BETWEEN} pooled histograms "
          f"({sum(bins)} bins): {read} of 220 read ({note}; {alone})")
    assert sum(bins) == 3 * BETWEEN
    assert read == (0 if checks == "shipped" else 2)


# ---------------------------------------------------------------- P: a span past the first 64 a site audits in full

FINE = np.round(np.arange(1, 100) / 100, 2)  # 99 pooled cuts of another column ``v``: 100 cells


def _fine_frames() -> dict[str, pd.DataFrame]:
    """C's frames with a column ``v`` in 100 cells of 1/100. The small site: 8 of its 10 records of [0.2, 0.3) in
    the cell [0.80, 0.81) (the 2 it leaves out, both events, in [0.95, 0.96) with its other records of C), and 350
    more records (scores in [0.9, 1)), 5 in each cell below 0.7: 70 cells hold its records before [0.80, 0.81). The
    large sites: 8 records of each cell (their 400 records twice) and 15 more of [0.80, 0.81)."""
    rng = np.random.default_rng(97)
    frames = _combined_frames()
    small = frames["small"]
    inside = np.array([1, 3, 4, 5, 6, 7, 8, 9])  # of [0.2, 0.3)'s records 0 .. 9; 0 and 2 are left: events
    assert small.y[[0, 2]].tolist() == [1.0, 1.0]
    v = np.full(len(small), 0.955)
    v[inside] = 0.805
    spread = pd.DataFrame({"y": (rng.uniform(0, 1, 350) < 0.5).astype(float), "score": rng.uniform(0.9, 1.0, 350),
                           "g": np.zeros(350, int), "v": (np.repeat(np.arange(70), 5) + 0.5) / 100})
    frames["small"] = pd.concat([small.assign(v=v), spread], ignore_index=True)
    for site in LARGE:  # 8 records of every cell (no site holds 1 to 4 of one), 15 more of [0.80, 0.81)
        frame = pd.concat([frames[site]] * 2, ignore_index=True)
        frame["v"] = (np.repeat(np.arange(100), 8) + rng.uniform(0.1, 0.9, 800)) / 100
        extra = pd.DataFrame({"y": (rng.uniform(0, 1, 15) < 0.5).astype(float), "score": rng.uniform(0.3, 0.6, 15),
                              "g": np.zeros(15, int), "v": rng.uniform(0.801, 0.809, 15)})
        frames[site] = pd.concat([frame, extra], ignore_index=True)
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_a_pooled_share_past_the_spans_audited_in_full(tmp_path: Path, checks: str, monkeypatch: pytest.MonkeyPatch):
    """The pooled thresholds on the score first (the small site keeps its 10 records of [0.2, 0.3), which it holds
    alone), then 99 pooled thresholds on ``v``, then each large site's [0.80, 0.81) of ``v`` alone: the pooled cell
    less theirs is the small site's share, 8 of the 10 kept, and the kept cell less it the 2 left out. The share is
    the 71st cell the small site holds records of: past the first 64 spans audited against kept cells (the rest by
    the bound of the spans alone), it passed, 2 read on the code before. Now every span is compared with kept cells
    of nearly its size: 0, the control 2."""
    _off(monkeypatch, checks)
    frames = _fine_frames()
    with _over(tmp_path, frames) as session:
        pooled, note = _pooled(session)
        try:
            fine = ds_threshold_metrics(session, "D$y", "D$v", FINE, secure=True).to_frame()
        except FederatedCallError as exc:
            fine, note = None, f"{note}; v pooled refused ({_rules(exc)})"
        alone = []
        for site in LARGE:
            try:
                alone.append(ds_threshold_metrics(session.site_view(site), "D$y", "D$v", [0.8, 0.81]).to_frame())
            except FederatedCallError as exc:
                note = f"{note}; {site} alone refused ({_rules(exc)})"
    read, cuts = 0, [] if fine is None else [round(float(t), 2) for t in fine.index]
    own = [[round(float(t), 2) for t in f.index] for f in alone]
    if pooled is not None and fine is not None and len(alone) == 2 and {0.8, 0.81} <= set(cuts):
        kept = _bin(pooled, 0.2)
        if kept is not None and all(o == [0.8, 0.81] for o in own):
            share = (_at(fine, 0.8) - _at(fine, 0.81)) - sum(_at(f, 0.8) - _at(f, 0.81) for f in alone)
            records, events = kept - share
            read = _read(int(records), int(events), (2, 2))
    print(f"\nP ({checks}): pooled [0.2, 0.3) less (pooled v [0.80, 0.81) less the large sites' own): {read} of "
          f"408 read ({note}; v cuts dropped {sorted(set(FINE.tolist()) - set(cuts))}; the large sites' own {own})")
    assert read == (0 if checks == "shipped" else 2)
    # the pooled cell is released in both arms; what closes it: the small site's share fails against its kept cell,
    # so the large sites keep the cell as another site's failing share and do not release their own of it alone
    assert pooled is not None and {0.8, 0.81} <= set(cuts) and len(own) == 2
    assert any(o != [0.8, 0.81] for o in own) == (checks == "shipped")


# ---------------------------------------------------------------- L2: the others' runs first

@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_the_others_runs_alone_first_then_pooled_then_the_subset(tmp_path: Path, checks: str,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """Route L with the large sites' runs alone first: at pooled time the run is the small site's alone (HOLDERS =
    1) and passes its audit (T comes after); the small site keeps its records of the run (the others' shares of its
    cells are not given alone, the run's are: ``Guard._record_exposed``), and T, within 2 of it, is refused: 0 (2 on
    the code before, where nothing was kept, and with the control)."""
    _off(monkeypatch, checks)
    read, note = _later_route(tmp_path, "large-pooled-T")
    print(f"\nL ({checks}, large-pooled-T): {read} of 30 read ({note})")
    assert read == (0 if checks == "shipped" else 2)


# ---------------------------------------------------------------- C2: two exposed bins less the site's total

def _total_frames() -> dict[str, pd.DataFrame]:
    """The small site holds every record of [0.2, 0.3) and [0.6, 0.7) (10 each, half events) and 3 of [0.9, 1)
    (events), where the large sites hold records too; the large sites none of [0.2, 0.3) nor [0.6, 0.7)."""
    frames = _combined_frames()
    rng = np.random.default_rng(83)
    small = frames["small"]
    small = small[small.score < 0.9].copy()
    small["y"] = np.tile([0.0, 1.0], 10)
    extra = pd.DataFrame({"y": [1.0, 1.0, 1.0], "score": rng.uniform(0.9, 1.0, 3), "g": [0, 0, 0]})
    frames["small"] = pd.concat([small, extra], ignore_index=True)
    return frames


def _total_route(tmp_path: Path, pooled_first: bool) -> tuple[int, str]:
    frames = _total_frames()
    with _over(tmp_path, frames) as session:

        def events() -> tuple[np.ndarray | None, str]:
            try:
                m = session.site_view("small").aggregate_expr("meanDS(D$y)")["small"]
            except FederatedCallError as exc:
                return None, f"small's meanDS alone refused ({_rules(exc)})"
            return np.array([int(m["Nvalid"]), int(round(m["EstimatedMean"] * m["Nvalid"]))]), "small's meanDS alone"

        if pooled_first:
            (pooled, note), (own, alone) = _pooled(session), events()
        else:
            own, alone = events()
            pooled, note = _pooled(session)
    read = 0
    if own is not None and pooled is not None:
        parts = [_bin(pooled, 0.2), _bin(pooled, 0.6)]
        if all(p is not None for p in parts):
            records, events_ = own - sum(parts)
            small = frames["small"]
            left = small[~(((small.score >= 0.2) & (small.score < 0.3)) | ((small.score >= 0.6) & (small.score < 0.7)))]
            read = _read(int(records), int(events_), (len(left), int(left.y.sum())))
    return read, f"{note}; {alone}"


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_the_sites_total_less_two_exposed_bins(tmp_path: Path, checks: str, pooled_first: bool,
                                               monkeypatch: pytest.MonkeyPatch):
    _off(monkeypatch, checks)
    read, note = _total_route(tmp_path, pooled_first)
    print(f"\nC2 ({checks}, {'pooled first' if pooled_first else 'alone first'}): small's meanDS(D$y) alone less "
          f"the pooled [0.2, 0.3) + [0.6, 0.7) (its alone): {read} of 23 read ({note})")
    # The control reads 3 in both orders: each bin is the small site's alone and differs from its records of the
    # release (23) by 13; their union, no span, differs by 3: the site's total (always public: lengthDS, or
    # meanDS's Nvalid) less the two pooled bins is its 3 records of [0.9, 1). Now each bin is audited with the other
    # cells the site holds alone as released beside it (Guard._fails_alone, HELD_CELLS): the bins merge, 0.
    assert read == (3 if checks == "control" else 0)


# ---------------------------------------------------------------- S: a second pooled release over a subset

def _second_frames() -> dict[str, pd.DataFrame]:
    """The small site holds 10 records of [0.5, 0.6) (8 with g = 1; the 2 with g = 0 are events) and 20 of
    [0, 0.1); the large sites 400 each, uniform, g at random."""
    rng = np.random.default_rng(79)
    score = np.r_[rng.uniform(0.5, 0.6, 10), rng.uniform(0.0, 0.1, 20)]
    y = np.r_[1, 1, np.tile([0, 1], 4), (rng.uniform(0, 1, 20) < 0.5).astype(int)]
    g = np.r_[0, 0, np.ones(8, int), (rng.uniform(0, 1, 20) < 0.5).astype(int)]
    frames = {"small": pd.DataFrame({"y": y.astype(float), "score": score, "g": g})}
    for site in LARGE:
        s = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < s).astype(float), "score": s,
                                     "g": (rng.uniform(0, 1, 400) < 0.5).astype(int)})
    return frames


def _second_route(tmp_path: Path, pooled_first: bool) -> tuple[int, str]:
    frames = _second_frames()
    notes: list[str] = []
    with _over(tmp_path, frames) as session:
        session.assign_expr("T", 'dataFrameSubsetDS2("D", "D$g", "1", 1, NULL, NULL, FALSE)')

        def pooled() -> list[np.ndarray | None]:
            out = []
            for table in ("D", "T"):
                try:
                    f = ds_threshold_metrics(session, f"{table}$y", f"{table}$score", THRESHOLDS,
                                             secure=True).to_frame()
                except FederatedCallError as exc:
                    notes.append(f"pooled {table} refused ({_rules(exc)})")
                    out.append(None)
                    continue
                notes.append(f"pooled {table} cuts {[float(t) for t in f.index]}")
                out.append(_bin(f, 0.5))
            return out

        def alone() -> list[np.ndarray | None]:
            out = []
            for table in ("D", "T"):
                total = np.zeros(2, int)
                for site in LARGE:
                    try:
                        f = ds_threshold_metrics(session.site_view(site), f"{table}$y", f"{table}$score",
                                                 [0.5, 0.6]).to_frame()
                    except FederatedCallError as exc:
                        notes.append(f"{site} {table} alone refused ({_rules(exc)})")
                        total = None
                        break
                    if [float(t) for t in f.index] != [0.5, 0.6]:
                        notes.append(f"{site} {table} alone cuts {list(f.index)}")
                        total = None
                        break
                    total += _at(f, 0.5) - _at(f, 0.6)
                else:
                    notes.append(f"large sites' {table} [0.5, 0.6) alone")
                out.append(total)
            return out

        if pooled_first:
            cells, own = pooled(), alone()
        else:
            own = alone()
            cells = pooled()
    read = 0
    if all(c is not None for c in cells + own):
        records, events = (cells[0] - own[0]) - (cells[1] - own[1])
        small = frames["small"]
        left = small[(small.score >= 0.5) & (small.score < 0.6) & (small.g != 1)]
        read = _read(int(records), int(events), (len(left), int(left.y.sum())))
    return read, "; ".join(notes)


@pytest.mark.parametrize("pooled_first", [False, True], ids=["alone-first", "pooled-first"])
@pytest.mark.parametrize("checks", ["shipped", "control"])
def test_a_second_pooled_release_over_a_subset(tmp_path: Path, checks: str, pooled_first: bool,
                                               monkeypatch: pytest.MonkeyPatch):
    _off(monkeypatch, checks)
    read, note = _second_route(tmp_path, pooled_first)
    print(f"\nS ({checks}, {'pooled first' if pooled_first else 'alone first'}): (pooled D less the large sites' D) "
          f"less (pooled T less theirs) on [0.5, 0.6): {read} of 30 read ({note})")
    # Pooled first (2 on the code before, and with the control): no release of the small site alone at all; at each
    # pooled release three sites hold hidden records of [0.5, 0.6), and the two pooled cells differ by 2 at the small
    # site but by more than 5 pooled. Now the small site keeps its share of the pooled D bin, which the others'
    # later releases alone would give (Guard._record_exposed), its share of the T bin fails against it, and the
    # large sites keep the T bin as another's failing share: their T bins alone are merged. Alone first the small
    # site's share of the pooled D bin is its alone (HOLDERS = 1) and kept; its share of the T bin, 2 from it, fails
    # its audit as a release alone and merges: 0 (2 on the code before, and the control).
    assert read == (0 if checks == "shipped" else 2)


# ---------------------------------------------------------------- honest costs

def _honest_frames(shape: str) -> dict[str, pd.DataFrame]:
    """Ordinary heterogeneous sites: scores from a Beta per site, outcome ~ Bernoulli(score) with a site shift, a
    grade (I, II, III) drawn with site-specific weights; one small site whose scores sit high."""
    rng = np.random.default_rng(71 if shape == "four" else 73)
    spec = ({"a": (380, 2, 5, (0.5, 0.35, 0.15)), "b": (250, 2, 2, (0.3, 0.4, 0.3)),
             "c": (120, 5, 2, (0.2, 0.3, 0.5)), "small": (30, 6, 2, (0.1, 0.3, 0.6))} if shape == "four" else
            {"a": (300, 2, 3, (0.4, 0.4, 0.2)), "b": (150, 3, 3, (0.3, 0.3, 0.4)),
             "small": (25, 5, 1.5, (0, 0.4, 0.6))})
    frames = {}
    for site, (n, a, b, weights) in spec.items():
        score = rng.beta(a, b, n)
        y = (rng.uniform(0, 1, n) < np.clip(score + rng.normal(0, 0.05), 0, 1)).astype(int)
        frames[site] = pd.DataFrame({"y": y, "score": score, "grade": rng.choice(["I", "II", "III"], n, p=weights)})
    return frames


def _honest(tmp_path: Path, frames: dict[str, pd.DataFrame]) -> dict:
    from dsfed_client.analyses.suite import validate
    out: dict = {}
    with _over(tmp_path, frames) as session:
        pooled, note = _pooled(session)
        out["pooled cuts"] = note
        try:
            t = session.pooled("table2DDS", Ref("D$grade"), Ref("D$y"))
            out["table"] = "released " + str(np.asarray(t["counts"], int).tolist())
        except FederatedCallError as exc:
            out["table"] = f"refused ({_rules(exc)}: {str(exc)[-160:]})"
        report = validate(session, "D$y", "D$score", secure=True, heterogeneity=False)
        out["validate"] = {"mode": report.mode, "failed": {k: v[:90] for k, v in report.failed.items()},
                           "curve not released": report.curve.not_released["pooled"] if report.curve else None,
                           "HL C groups": None if report.hl_c is None else len(report.hl_c.to_frame()),
                           "decision not released": report.decision_curve.not_released["pooled"]
                           if report.decision_curve else None}
        cuts = [] if pooled is None else [float(t) for t in pooled.index]
        per_site = {}
        for site in frames:
            try:
                f = ds_threshold_metrics(session.site_view(site), "D$y", "D$score", cuts).to_frame()
                per_site[site] = sorted(set(cuts) - {float(t) for t in f.index})
            except FederatedCallError as exc:
                per_site[site] = f"refused ({_rules(exc)})"
        out["per-site cuts dropped"] = per_site
    return out


def _steady(out: dict) -> dict:
    """``out`` without the decision curve's cut 0.45, released or not from run to run in both arms alike (measured:
    two runs of each, same site secrets)."""
    validate = dict(out["validate"], **{"decision not released": [t for t in out["validate"]["decision not released"]
                                                                    if t != 0.45]})
    return dict(out, validate=validate)


def _control_honest(tmp_path: Path, shape: str) -> dict:
    with pytest.MonkeyPatch.context() as patch:
        _off(patch, "control")
        return _honest(tmp_path / "control", _honest_frames(shape))


def test_honest_pooled_then_per_site_four_sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _declare_grades(monkeypatch)
    frames = _honest_frames("four")
    shipped, control = _steady(_honest(tmp_path / "shipped", frames)), _steady(_control_honest(tmp_path, "four"))
    print(f"\nhonest, four sites {[len(f) for f in frames.values()]}:\n  shipped {shipped}\n  control {control}")
    # No cost: the same with the checks and without (the per-site metrics at the pooled cuts drop most cuts at every
    # site in both, the pooled cells' own audit, not the checks under test).
    assert shipped == control


def test_honest_pooled_then_per_site_three_sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _declare_grades(monkeypatch)
    frames = _honest_frames("three")
    shipped, control = _steady(_honest(tmp_path / "shipped", frames)), _steady(_control_honest(tmp_path, "three"))
    print(f"\nhonest, three sites {[len(f) for f in frames.values()]}:\n  shipped {shipped}\n  control {control}")
    # COST, at most: the largest site's per-site cut 0.9 (it holds no record above 0.9), dropped with the checks in
    # some runs, kept with the control (site b's FAILING on the run [0.1, 0.9), its 146 of 150 records there, keeps
    # the run as thin at a; which cut a thin set costs follows the order its records are read in, which varies).
    # Otherwise the checks drop no cut the control keeps but, at the small site (no record below 0.4), cuts below its
    # records, whose bins there are empty: merged, they release the same records (in some runs; measured at 405c478
    # too, 1 of 3 runs dropping 0.1 and 0.2 there). The small site keeps
    # some cuts with the checks that the control drops (cuts released pooled before, with empty bins below 0.4).
    for key in ("pooled cuts", "table", "validate"):
        assert shipped[key] == control[key]
    assert control["per-site cuts dropped"]["a"] == THRESHOLDS.tolist()[:-1]
    empty = {t for t in THRESHOLDS.tolist() if t <= frames["small"].score.min()}
    for site in frames:
        extra = set(shipped["per-site cuts dropped"][site]) - set(control["per-site cuts dropped"][site])
        assert extra <= ({0.9} if site == "a" else empty if site == "small" else set()), (site, extra)
    assert frames["small"].score.min() >= 0.4
    assert shipped["per-site cuts dropped"]["b"] == control["per-site cuts dropped"]["b"]


def _ordinary_frames(seed: int) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    frames = {}
    for site, n in (("small", 50), *((site, 200) for site in LARGE)):
        s = rng.uniform(0, 1, n)
        g = np.zeros(n, int)
        g[rng.choice(n, 3, replace=False)] = 1  # a 0/1 column with 3 ones
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, n) < s).astype(float), "score": s, "g": g,
                                     "sex": (rng.uniform(0, 1, n) < 0.5).astype(int),
                                     "age": rng.uniform(20, 90, n).round(),
                                     "grade": pd.Categorical(rng.choice(["I", "II", "III"], n))})
    return frames


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ordinary_calls_at_a_small_site_after_pooled_thresholds(tmp_path: Path, seed: int):
    """The cost of the kept cells at a small site of 50 records, after pooled thresholds at 0.1 .. 0.9 over it and
    two sites of 200: its ``meanDS`` of a 0/1 column with 3 ones, of a sex column and of the outcome, a derived
    ``ifelse(D$age > 50, 1, 0)`` and its mean, and ``glmDS2(y ~ grade)`` are released, the means equal to the
    site's own (pandas). On the code before, ``meanDS(D$g)`` was refused at two of these three data sets (seeds 0
    and 2: pairwise, beside kept cells of fewer than q records, which the other sites keep as thin and never
    release alone)."""
    frames = _ordinary_frames(seed)
    small = frames["small"]
    with _over(tmp_path, frames) as session:
        ds_threshold_metrics(session, "D$y", "D$score", list(np.round(np.arange(0.1, 0.95, 0.1), 2)), secure=True)
        view = session.site_view("small")
        view.assign_expr("OLD", "ifelse(D$age > 50, 1, 0)")
        for expr, truth in (("meanDS(D$g)", small.g.mean()), ("meanDS(D$sex)", small.sex.mean()),
                            ("meanDS(D$y)", small.y.mean()), ("meanDS(OLD)", (small.age > 50).mean())):
            assert view.aggregate_expr(expr)["small"]["EstimatedMean"] == pytest.approx(truth, abs=1e-12), expr
        fit = view.aggregate_expr('glmDS2(y ~ grade, "binomial", "0,0,0", NULL, NULL, "D")')["small"]
    counts = small.grade.value_counts()
    assert np.asarray(fit["info.matrix"], float)[0, 0] == pytest.approx(len(small) / 4)  # W = 1/4 at beta = 0
    assert np.asarray(fit["info.matrix"], float)[1, 1] == pytest.approx(counts["II"] / 4)
