"""Hosmer-Lemeshow C in an honest small study: a break near a cut released before moves onto that cut.

Schalk et al.'s (2024) simulation design at 100 records split at random over five in-process sites (uniform
scores), under the shipped ``default.toml``: the calibration curve is released first, pooled, as ``validate()``
releases it (cuts at k/10, ``p < k/10``). The pooled deciles of 100 uniform scores then lie a few records from
those cuts. A group edge a few records from an earlier cut would single out the records between the two: the
curve's counts and outcomes below the cut, less the groups' below the edge (Hundepool et al. 2012, sec. 5.4, on
differencing linked tables). The release gate does not keep such a break; the sites used to drop it and merge
its groups, and with fewer than three groups left refused the section (28 and 33 of 40 such studies in two
benchmark runs, bench/RESULTS.md).
Now the break moves onto the earlier cut (public already: it parts no record anew), the groups' sums are taken
again at the breaks placed, and the result says what moved and why.

Measured here: the released C equals R's ``hoslem.test`` statistic computed on the pooled records at the released
edges (``rref.r_hl_on_edges``); and the attack -- every released group edge against every curve cut, reading the
outcomes of the 1 to q - 1 records between two where their events are all or none (checked on the truth) --
reads nothing from the release, while the same attack on the groups at R's own breaks (the control: the breaks
kept where they were, their groups counted on the pooled records) reads records. Last, the fallback where a
break cannot move (dropped, its groups merged), on the sites' decision itself.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.calibration import ds_hosmer_lemeshow
from dsfed_client.calls import Ref
from dsfed_server.disclosure.gate import Cut, Floor
from dsfed_server.disclosure.protocol_cuts import REFINED, ProtocolCuts
from dsfed_server.synthetic import seed000_scores
from rref import r_eval, r_hl_on_edges
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets

Q = 5  # default.toml's q_threshold
SEED = 3


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, dict, object]:
    """The pooled records, the calibration curve's pooled release and H-L C as the analyst's client reports it."""
    rng = np.random.default_rng(SEED)
    pooled = seed000_scores(100, rng)
    site = rng.integers(0, 5, len(pooled))
    frames = {f"s{k}": pooled[site == k].reset_index(drop=True) for k in range(5)}
    with fixed_secrets("moved breaks"):
        provisioned, services = make_sites(tmp_path_factory.mktemp("moved"), frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        curve = session.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 10)
        hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind="C", secure=True)
    return pooled, curve, hl


def below(pooled: pd.DataFrame, value: float, inclusive: bool) -> pd.Series:
    return pooled.score <= value if inclusive else pooled.score < value


def records_read(curve: dict, groups: list[tuple[float, int, int]], pooled: pd.DataFrame) -> int:
    """Records whose outcome the curve's cells and the groups (upper edge, count, events) give together: the
    records between a group edge and a curve cut, 1 to q - 1 of them, all events or none (checked on the truth)."""
    cuts = np.cumsum(curve["n"])[:-1], np.cumsum(curve["sum_y"])[:-1]
    read: set[int] = set()
    n_edge, e_edge = 0, 0
    for upper, n, events in groups[:-1]:
        n_edge, e_edge = n_edge + n, e_edge + events
        for t, n_cut, e_cut in zip(curve["edges"][1:-1], *cuts):
            k, diff = abs(n_edge - int(round(n_cut))), abs(e_edge - int(round(e_cut)))
            if 0 < k < Q and diff in (0, k):
                between = pooled[below(pooled, upper, True) != below(pooled, t, False)]
                assert len(between) == k and between.y.sum() == diff  # what is read is the truth
                read |= set(between.index)
    return len(read)


def test_h_l_c_is_released_with_breaks_moved_onto_the_curve_s_cuts_and_equals_r(study):
    pooled, curve, hl = study
    edges = np.concatenate([hl.table.lower.to_numpy(), hl.table.upper.to_numpy()[-1:]])
    curve_cuts = set(curve["edges"][1:-1])
    moved = [e for e in edges[1:-1] if e in curve_cuts]
    r_breaks = r_eval("quantile(p, 1:9/10, type = 7)", p=pooled.score.to_numpy())
    print(f"H-L C {hl.statistic:.4f} on {len(edges) - 1} groups {list(hl.table.n)}; breaks moved onto the curve's "
          f"cuts: {moved}; note: {hl.note()}")
    assert moved and not hl.complete and not hl.exact_grouping and hl.coarsened
    assert "moved onto cuts released before" in hl.note() and "disclosure.cut_history" in hl.note()
    assert (hl.table.n >= Q).all() and hl.df == len(edges) - 3
    # the edges not moved part the records as R's breaks do
    ranks = {int(below(pooled, b, True).sum()) for b in r_breaks}
    assert all(int(below(pooled, e, True).sum()) in ranks for e in edges[1:-1] if e not in curve_cuts)
    # no record sits on a moved edge, so R's cut(include.lowest = TRUE) parts them as the sites' p < t does
    assert not pooled.score.isin(moved).any()
    assert hl.statistic == pytest.approx(r_hl_on_edges(pooled.y.to_numpy(), pooled.score.to_numpy(), edges),
                                         rel=1e-9)


def test_the_moved_release_singles_out_no_record_the_breaks_where_they_were_would(study):
    pooled, curve, hl = study
    released = [(float(u), int(n), int(round(o))) for u, n, o in zip(hl.table.upper, hl.table.n, hl.table.observed_1)]
    r_breaks = np.asarray(r_eval("quantile(p, 1:9/10, type = 7)", p=pooled.score.to_numpy()), dtype=float)
    group = np.searchsorted(r_breaks, pooled.score.to_numpy(), side="left")  # R's cut: (b_j-1, b_j]
    kept_where_they_were = [(float(u), int((group == j).sum()), int(pooled.y[group == j].sum()))
                            for j, u in enumerate([*r_breaks, 1.0])]
    read, control = records_read(curve, released, pooled), records_read(curve, kept_where_they_were, pooled)
    print(f"ATTACK group edges against the calibration curve's cuts (shipped rules, 100 records, 5 sites): "
          f"{read} records' outcomes read from the release with breaks moved; {control} from the groups at "
          "R's breaks (control)")
    assert control > 0 and read == 0


class _History:
    """The column's cut history as the site's Guard gives it to a protocol (relayed, and this site's own)."""

    def __init__(self, cuts: list[Cut]) -> None:
        self.cuts = cuts

    def pooled_history(self, key: tuple[str, str]) -> list[Cut]:
        return list(self.cuts)

    def released_cuts(self, key: tuple[str, str]) -> list[Cut]:
        return list(self.cuts)


def test_a_break_that_cannot_move_is_dropped():
    """The fallback, on the sites' decision itself (``ProtocolCuts.placed``): 100 records at 0.01, ..., 1.00,
    q = 5 without margin, earlier cuts at 0.305, 0.335 and 0.705 (30, 33 and 70 records below). Breaks at 0.29
    and 0.32 lie 1 and 2 records from them: the first moves onto 0.305, the second's nearest earlier cut is
    0.305 too (0.335 as near; ties: the lower), taken, so it is dropped (its groups merged). 0.72 moves onto
    0.705; 0.5 stays. Not asked to move, every break the gate does not keep is dropped. Two breaks moving onto
    0.305 and 0.335 would release the cell of 3 records between two earlier cuts: both are dropped."""
    x = np.arange(1, 101) / 100
    history = [Cut(0.305, False), Cut(0.335, False), Cut(0.705, False)]
    cuts = ProtocolCuts(_History(history), x, None)  # type: ignore[arg-type]
    breaks = [Cut(0.29, True), Cut(0.32, True), Cut(0.5, True), Cut(0.72, True)]
    counts = cuts.counted(breaks)[REFINED]
    placed = cuts.placed(breaks, counts, Floor(Q), move=True)
    assert placed == [Cut(0.305, False), None, Cut(0.5, True), Cut(0.705, False)]
    assert cuts.placed(breaks, counts, Floor(Q), move=False) == [None, None, Cut(0.5, True), None]
    # two earlier cuts 3 records apart, both moved to: the cell between them is not released
    assert cuts.placed([Cut(0.29, True), Cut(0.35, True)], cuts.counted([Cut(0.29, True), Cut(0.35, True)])[REFINED],
                       Floor(Q), move=True) == [None, None]


def test_records_on_a_moved_edge_are_where_the_table_says(tmp_path):
    """Scores to two decimals (as clinical scores often are): records lie on the curve's cuts k/10, which hold them
    in the cell above (``p < k/10`` below). A break moved onto such a cut keeps that side, so the group table
    says per group whether its upper edge is closed; C equals R's over the pooled records grouped so (and, at R's
    ``cut`` on the same edges, would not: the records on the moved edges would change groups)."""
    rng = np.random.default_rng(2)
    pooled = seed000_scores(100, rng)
    pooled["score"] = np.clip(np.round(pooled.score, 2), 0.01, 0.99)
    site = rng.integers(0, 5, len(pooled))
    frames = {f"s{k}": pooled[site == k].reset_index(drop=True) for k in range(5)}
    with fixed_secrets("moved breaks"):
        provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 10)
        hl = ds_hosmer_lemeshow(session, "D$y", "D$score", kind="C", secure=True)
    edges = np.concatenate([hl.table.lower.to_numpy(), hl.table.upper.to_numpy()[-1:]])
    closed = hl.table.upper_closed.to_list()
    opened = [e for e, c in zip(edges[1:-1], closed) if not c]
    on_open = int(pooled.score.isin(opened).sum())
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    print(f"H-L C {hl.statistic:.4f}, groups {list(hl.table.n)}, edges closed above {closed}; {on_open} records on "
          f"the {len(opened)} moved edges; labels {hl.group_labels()}")
    assert opened and on_open > 0 and closed[-1]
    assert hl.statistic == pytest.approx(r_hl_on_edges(y, p, edges, closed), rel=1e-9)
    assert hl.statistic != pytest.approx(r_hl_on_edges(y, p, edges), rel=1e-3)
    assert any(label.startswith("[") and label.endswith(")") for label in hl.group_labels()[1:])
