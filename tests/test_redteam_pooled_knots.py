"""Red team: the spline's knots (``rcsKnotsDS``), released exactly from pooled type-7 quantiles of logit(p).

The gate (``splines._gated_knots``) checks the knots as cuts on the score column with the cut history,
on the pooled counts of the whole column, and a knot within q records of an earlier cut is *moved* onto
that earlier cut (``_moved_knots``). Two gaps, measured here:

1. **The moved knot's value is released anyway.** The release lists the moves as ``knots_moved =
   [[from, to], ...]``, and ``from`` is the refused knot itself: the exact type-7 quantile the cut
   history just refused. So a knot landing one record from an earlier cut is read exactly.
2. **Padding.** A member site colluding with the analyst pads its table with made-up records below
   and above the honest scores (the padding member of docs/governance.md); pooled counts of the
   column then always hold q records, padding included, between any two cuts, and the member chooses
   (through subsets on a column only its padding varies in: the honest sites' row sets are the whole
   table each time) how many records lie below, so that a knot is exactly (h = 0) the honest record
   of the rank it wants. ``dominance_sites`` is not applied to knots (``fits_pooled`` ignores it).

Together: the analyst reads the honest sites' lowest scores one by one, exactly -- the first via the
1 % bound, the next ones each from the ``knots_moved`` of one call. "Recovered": honest records whose
exact score the analyst learns while fewer than q honest records separate it from another one it
learns or from the honest end (what the cut history is meant to stop); the test checks each against
the truth.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from dsfed_core.splines import rcs_probs
from sitekit import make_sites, rules_variant
from test_derived_column_attacks import fixed_secrets

Q = 5
H_SITE = 60  # two honest sites of 60
PAD = 1400  # made-up records of the member below, and as many above, every honest score
LOW_KEPT = 12  # low padding kept in every call: the 1 % bound of N = 1201 is then the honest minimum
WALK = range(2, 12)  # honest ranks the 5 % knot is walked onto, one call each


def honest(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = rng.choice(np.arange(1_000, 999_000), H_SITE, replace=False) / 1_000_000
    return pd.DataFrame({"y": (rng.uniform(size=H_SITE) < score).astype(np.int64), "score": score,
                         "age": rng.integers(25, 90, H_SITE)})


def padding() -> pd.DataFrame:
    """Scores below 0.001 and above 0.999 (no honest score there). Low record i (1 = lowest) has age
    100 + PAD - i, high record i has age -i: ``age <= 99 + L`` keeps the L low records next to the honest
    scores, ``age >= -U`` the U high ones; both keep every honest record (ages 25..89)."""
    i = np.arange(1, PAD + 1)
    low = pd.DataFrame({"y": 0, "score": i * 5e-7, "age": 100 + PAD - i})
    high = pd.DataFrame({"y": 1, "score": 1 - i * 5e-7, "age": -i})
    return pd.concat([low, high], ignore_index=True)


def released_values(out: dict) -> list[float]:
    """Every number of logit(p) a knots release shows: knots, range, and both ends of every move."""
    return [*out["knots"], *out["range"], *(v for move in out["knots_moved"] for v in move)]


def singled_out(learnt_ranks: set[int], n_honest: int) -> int:
    """Learnt honest records (1-based ranks among the honest scores) with fewer than q honest records
    between them and the next learnt one or the honest end."""
    marks = sorted(learnt_ranks)
    bounds = [0, *marks, n_honest + 1]
    return sum(1 for k, r in enumerate(marks, start=1)
               if min(r - bounds[k - 1] - 1, bounds[k + 1] - r - 1) < Q)


def walk(tmp_path: Path, rules: Path | None) -> tuple[int, int, list[str]]:
    frames = {"pad": padding(), "h1": honest(41), "h2": honest(42)}
    with fixed_secrets("redteam knots"):
        provisioned, services = make_sites(tmp_path, frames, rules)
    truth = np.sort(pd.concat([frames["h1"], frames["h2"]]).score.to_numpy())  # 6 decimals
    n_honest = truth.size
    seen: list[float] = []
    refused: list[float] = []  # the knots the cut history refused, as knots_moved shows them
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("A", f'dataFrameSubsetDS2("D", "D$age", "{99 + LOW_KEPT}", 4, NULL, NULL, FALSE)')
        # N = 12 + 120 + U; the 5 % knot's rank 1 + 0.05 (N - 1) is 12 + r when N = 20 (11 + r) + 1 (h = 0);
        # the first call, N = 1201, puts the 1 % bound on the honest minimum
        for r in [None, *WALK]:
            n = 1201 if r is None else 20 * (LOW_KEPT - 1 + r) + 1
            upper = n - n_honest - LOW_KEPT
            try:
                session.assign_expr("W", f'dataFrameSubsetDS2("A", "A$age", "{-upper}", 6, NULL, NULL, FALSE)')
                out = session.pooled("rcsKnotsDS", Ref("W$y"), Ref("W$score"))
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            assert out["n"] == n
            seen += released_values(out)
            refused += [move[0] for move in out["knots_moved"]]
    # a released logit(p) is the pooled sum over a bracket / its count, in fixed point: equal to 1e-9,
    # so p to 6 decimals, the score exactly
    learnt = {int(k) + 1 for k in np.flatnonzero(np.isin(truth, np.round(special.expit(np.asarray(seen)), 6)))}
    moved = {int(k) + 1 for k in np.flatnonzero(np.isin(truth, np.round(special.expit(np.asarray(refused)), 6)))}
    print(f"honest ranks learnt {sorted(learnt)}; from refused knots (knots_moved) {sorted(moved)}")
    return singled_out(learnt, n_honest), len(learnt), refusals


@pytest.mark.parametrize("dominance", [0, 1], ids=["shipped dominance_sites 0", "dominance_sites 1"])
def test_a_padding_member_reads_no_honest_score_through_the_knots(tmp_path: Path, dominance: int):
    """On the code before, the walk singled out the 11 lowest honest scores (18 learnt) at dominance_sites 0
    and 1 alike: rank 1 from the 1 % bound, rank 6 as a released knot, the others from the refused knots'
    values in ``knots_moved``. Now ``knots_moved`` names a knot's quantile, not its value, and under the
    board's dominance rule a cell between the knots must hold q records outside its largest site (the
    padding member's cells do not): nothing is read. Off (the shipped files' choice, docs/governance.md
    "Member sites"), the member still reads the knots and the bound released next to its padding."""
    rules = rules_variant(tmp_path / "rules.toml", dominance_sites=str(dominance))
    recovered, learnt, refusals = walk(tmp_path, rules)
    print(f"ATTACK padding member walks the 5 % knot (shipped rules, dominance_sites = {dominance}): "
          f"{recovered} honest scores singled out exactly ({learnt} learnt); refusals {sorted(set(refusals))}")
    if dominance:
        assert recovered == 0 and learnt == 0 and set(refusals) == {"secure_aggregation.dominance_sites"}
    else:
        assert 0 < recovered < 11  # the attack is real where the rule is off, without knots_moved's values


# --- the analyst alone: knots of subsets next to the table's knots ------------------------------------

COLUMNS = ("age", "income", "weight", "height")
SHARES = (0.1, 0.2, 0.3, 0.8, 0.9)  # conditions col >= v at these shares of each column (pooled quantiles)


def test_the_analyst_alone_reads_no_refused_knot(tmp_path: Path):
    """Three honest sites of 90 under the shipped rules. The table's knots (nk = 3: 10, 50, 90 %) are
    released; then the knots of subsets ``D[col >= v]`` on four other columns. A subset of an odd number
    of records has its median knot exactly on one record (type 7, h = 0); the subset's median lies a few
    records from the table's, so the cut history refuses it -- and the release showed it in
    ``knots_moved`` (on the code before: 35 refused knots shown, 5 of them records' exact scores no
    released cut shows). Now a move names the knot's quantile and the cut it moved onto. Counted:
    records whose exact score is read from a refused knot."""
    from test_derived_column_attacks import synthetic_frame

    frames = {f"s{k}": synthetic_frame(60 + k, 90) for k in range(1, 4)}
    with fixed_secrets("redteam knots alone"):
        provisioned, services = make_sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True)
    scores = set(pooled.score.round(6).tolist())
    refused: list[float] = []
    released: list[float] = []
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        first = session.pooled("rcsKnotsDS", Ref("D$y"), Ref("D$score"), nk=3)
        released += released_values(first)
        k = 0
        for column in COLUMNS:
            for share in SHARES:
                v = float(np.quantile(pooled[column], share))  # any value: the analyst needs no data for it
                k += 1
                try:
                    session.assign_expr(f"S{k}", f'dataFrameSubsetDS2("D", "D${column}", "{v}", 6, NULL, NULL, FALSE)')
                    out = session.pooled("rcsKnotsDS", Ref(f"S{k}$y"), Ref(f"S{k}$score"), nk=3)
                except FederatedCallError as exc:
                    refusals += [e.rule or e.kind for e in exc.failures.values()]
                    continue
                released += out["knots"] + out["range"]
                refused += [move[0] for move in out["knots_moved"]]
    read = {p for p in np.round(special.expit(np.asarray(refused)), 6).tolist() if p in scores}
    released_p = set(np.round(special.expit(np.asarray(released)), 6).tolist())
    read -= released_p  # only what no released cut shows
    print(f"ATTACK analyst alone, knots of {k} subsets next to the table's (shipped rules, 3 sites of 90): "
          f"{len(refused)} refused knots shown in knots_moved, {len(read)} of them a record's exact score; "
          f"refusals {sorted(set(refusals))}")
    assert len(read) == 0


# --- the analyst alone: the table's knot cells against a subset's counts ------------------------------

NK = 7  # knots: eight cells between them
AUDITED = "disclosure.subset_min_difference"
BAND_SHARE = 0.1  # subsets D[col >= v], v the 10 % quantile: the records left out are a band of about 9 a site


def knot_cells(out: dict) -> dict[float, int]:
    """The pooled records of the knots' table at or below each released knot and bound (logit(p)), from
    their type-7 ranks alone (distinct scores): a value at rank 1 + prob (n - 1) has its floor below it.
    Moved knots (on an earlier cut: their rank is not theirs) and withheld bounds are left out."""
    n, probs = out["n"], rcs_probs(out["nk"])
    moved = {prob for prob, _ in out["knots_moved"]}
    below = {t: math.floor(1 + prob * (n - 1) + 1e-9) for prob, t in zip(probs, out["knots"]) if prob not in moved}
    if out["range_withheld"] is None:
        below.update({t: math.floor(1 + prob * (n - 1) + 1e-9) for prob, t in zip((0.01, 0.99), out["range"])})
    return below


def test_the_analyst_alone_reads_no_band_through_the_knots_cells(tmp_path: Path):
    """Three honest sites of 90 under the shipped rules. rcsKnotsDS(nk = 7) on the table D releases its
    knots; their ranks give the pooled records of D at or below each (no site's share, no cell's sums).
    Then countBelowDS pooled on a subset S = D[col >= v] at the same knots -- cuts released before, so the
    cut history passes them -- gives S's records at or below each. D less S between two knots is the band
    col < v in that score cell: a few records (the subset rules keep the band at 5 or more per site, not
    per cell). Per site the row-set audit compares two releases' cells; the knots' cells were neither
    audited nor kept as pooled row sets, so the subset's cells passed beside them: on the code before,
    15 records placed in 5 score cells holding 1 to 4 of their band. Now each site keeps its records of
    the knots' cells as pooled row sets (``ProtocolCuts.record_cells``), and the subset's cells that
    differ from them by a few records are merged by the audit. Counted: the band's records placed in a score
    cell holding 1 to q - 1 of them (checked against the truth), as tests/test_pooled_row_sets.py counts
    groups below q."""
    from test_derived_column_attacks import synthetic_frame

    frames = {f"s{k}": synthetic_frame(70 + k, 130) for k in range(1, 4)}
    with fixed_secrets("redteam knot cells"):
        provisioned, services = make_sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True)
    singled, groups, audited, refusals = 0, 0, 0, []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        table = knot_cells(session.pooled("rcsKnotsDS", Ref("D$y"), Ref("D$score"), nk=NK))
        knots = sorted(table)
        thresholds = special.expit(np.asarray(knots)).tolist()  # the knots' cuts p <= expit(t), as the sites make them
        for column in COLUMNS:
            v = float(np.quantile(pooled[column], BAND_SHARE))  # any value: the analyst needs no data for it
            try:
                session.assign_expr("S", f'dataFrameSubsetDS2("D", "D${column}", "{v}", 6, NULL, NULL, FALSE)')
                out = session.pooled("countBelowDS", Ref("S$score"), thresholds)
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            audited += AUDITED in out["why"]
            # the band (col < v) at or below each knot both releases show, then per cell between them
            shown = [(t, p, table[t] - c) for t, p, c in zip(knots, thresholds, out["counts"]) if c is not None]
            lower, before = 0.0, 0
            for t, p, band_below in shown:
                m = band_below - before
                if 0 < m < Q:
                    cell = pooled[(pooled[column] < v) & (pooled.score > lower) & (pooled.score <= p)]
                    assert len(cell) == m  # what the analyst reads is the truth
                    singled, groups = singled + m, groups + 1
                lower, before = p, band_below
    print(f"ATTACK analyst alone, the table's knot cells less a subset's counts (shipped rules, 3 sites of 90, "
          f"bands col < its 10 % quantile, col in {COLUMNS}): {singled} records placed in {groups} score cells "
          f"holding fewer than q of their band; {audited} of the subsets' releases merged by the row-set audit; "
          f"refusals {sorted(set(refusals))}")
    assert singled == 0 and audited


R_KNOTS_FIT = """
lp <- qlogis(p)
c(Hmisc::rcspline.eval(lp, nk = 4, knots.only = TRUE), coef(glm(y ~ rms::rcs(lp, k), family = binomial)))
"""


def test_an_honest_subgroup_spline_is_released_beside_the_table_cells_and_equals_r(tmp_path: Path):
    """The control: pooled calibration bins and Hosmer-Lemeshow groups over the whole table, then the
    spline calibration (``ds_spline_calibration``) over the table and over the patients aged 50 or more.
    Both are released, their cells kept as pooled row sets (the subgroup's differ from the table's by
    many records in every cell). The table's knots are R's ``rcspline.eval`` knots; the subgroup's are
    too, but for those the cut history moved onto the table's knots (the result says which), and each
    fit equals R's ``glm(y ~ rms::rcs(lp, knots))`` at the knots released, on the pooled records. Sites of 130
    records: the subgroup's fit is over a subset of each site's records, whose end counts there however many
    sites it is summed over (15 functions of the score for four coefficients, besides its start), which 69 to 83
    records answer; at sites of 90 (subgroups of 52 to 55) the count refuses it (docs/governance.md, "The GLM's
    parts are sums too")."""
    from dsfed_client.analyses.smooth_calibration import ds_spline_calibration
    from rref import r_eval
    from test_derived_column_attacks import synthetic_frame

    frames = {f"s{k}": synthetic_frame(70 + k, 130) for k in range(1, 4)}
    with fixed_secrets("honest knot cells"):
        provisioned, services = make_sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 4)
        session.pooled("decileGroupsDS", Ref("D$y"), Ref("D$score"), 10)
        whole = ds_spline_calibration(session, "D$y", "D$score", secure=True)
        session.assign_expr("T", 'dataFrameSubsetDS2("D", "D$age", "50", 6, NULL, NULL, FALSE)')
        older = ds_spline_calibration(session, "T$y", "T$score", secure=True)
    assert not whole.knots_note and older.knots_note  # the subgroup's knots beside the table's: moved, and said
    for spline, frame in ((whole, pooled), (older, pooled[pooled.age >= 50])):
        reference = r_eval(R_KNOTS_FIT, y=frame.y.to_numpy(), p=frame.score.to_numpy(), k=spline.knots)
        moved = int(spline.knots_note.split(" knot(s) moved")[0] or 0)
        assert sum(k == pytest.approx(r, rel=1e-8) for k, r in zip(spline.knots, reference[:4])) == 4 - moved
        np.testing.assert_allclose(spline.fit.params, reference[4:], rtol=1e-8)
