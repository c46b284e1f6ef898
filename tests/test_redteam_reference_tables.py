"""Red team: the other two readers of a site-derived histogram reference, ``histRocGlmDataDS`` (the
ROC-GLM's table) and ``pairedPlacementDS`` (two models' placement sums and their cross products).

A reference the sites derive from pooled noisy histograms (``scoreHistogramDS`` pooled) has generic real
step values the analyst knows. ``histPlacementSumsDS`` releases its sums only over the cells the release
gate passes (tests/test_redteam_pooled_placement.py); these two read the same reference, and were
evaluating it at every leaf:

* **The ROC-GLM table.** Its rows are :math:`(u, x = \\Phi^{-1}(t_j), w)`, ``w`` the count of the site's
  positives whose placement value :math:`1 - \\tilde F_0(x)` is at most :math:`t_j` (or above it). The
  table stays on the site, but its column ``w`` can be read like any other: ``meanDS`` over the rows
  ``u = 1`` (a subset of the table's rows, not of records) is :math:`\\sum_j o_j / T`, linear in the
  site's positives per leaf with coefficients the analyst computes from the reference and the number of
  thresholds :math:`T`, which the analyst picks. Thirty values of :math:`T` against one reference solve
  for every site's exact count of positives in every leaf; with ``1 - D$y`` as the outcome, of negatives.
* **The paired sums.** ``sum_v10_a`` and ``sumsq_v10_a`` are the single-score placement sums at leaf
  resolution: ten references decode every site's class counts per leaf, as they did for
  ``histPlacementSumsDS`` before its bins became cells.

A leaf where a site holds 1 to q - 1 records, all of one outcome, gives those records' outcomes (and their
score to a sixteenth). Measured under the shipped rules (default.toml, three sites of 90, fixed secrets):
see the prints. The defence: both read the reference only at the cells the release gate passes for it at
the site (the cut history, the secret margin, the row-set audit), and the paired cross products only over
joint cells of the two scores' cells that pass as a table does (every non-empty joint cell at least q
records), coarsened in pairs until they do. On the code before: 7 of 270 outcomes read through the table,
11 of 270 through the paired sums; the attacks now decode exactly at the cells each site released, which hold
q records each, and read none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsfed_client import FederatedCallError
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.calls import Call, Ref
from dsfed_client.session import addressed_to, call_body
from rref import r_eval
from test_redteam_pooled_placement import (LEAVES, SUBSETS, cell_of, decode, decode_sites, federation, outcomes_read,
                                           over_subsets, references, tally,
                                           released_cuts, steps, truth_counts)

THRESHOLDS = [*range(40, 130, 3), 250, 500, 1000]  # 33 grids t_j = j / (T + 1)


def leaf_cuts(release: dict) -> list[tuple[float, bool]]:
    edges = np.linspace(release["lower"], release["upper"], LEAVES + 1)
    return [(float(edges[0]), False), *((float(e), False) for e in edges[1:-1]), (float(edges[-1]), True)]


def table_sums(session, truth: str, reference: str) -> tuple[dict[int, list], list[str]]:
    """Per grid size T, per site: the sum of w over the rows u = 1 of the ROC-GLM table (meanDS times T), and
    the count of the outcome's records (twice the mean of w over all rows)."""
    out: dict[int, list] = {}
    refused = []
    for t in THRESHOLDS:
        try:
            session.assign("T", Call("histRocGlmDataDS", Ref(truth), Ref("D$score"), Ref(reference), t,
                                     within_bin="tied"))
            session.assign_expr("U", 'dataFrameSubsetDS2("T", "T$u", "0.5", 5, NULL, NULL, FALSE)')
            mean = session.aggregate("meanDS", Ref("U$w"))
            total = session.aggregate("meanDS", Ref("T$w"))  # half the outcome's count: w sums to it per grid
        except FederatedCallError as exc:
            refused.append(sorted({e.rule or e.kind for e in exc.failures.values()}))
            continue
        out[t] = [(mean[site]["EstimatedMean"] * t, total[site]["EstimatedMean"] * 2) for site in sorted(mean)]
    return out, refused


def groups_of(pv: np.ndarray) -> np.ndarray:
    """Each cell's group: cells whose placement values no grid parts (the same count of thresholds at or
    above them in every grid) are one unknown to the attacker."""
    rows = np.array([[(np.arange(1, t + 1) / (t + 1) >= v).sum() for v in pv] for t in THRESHOLDS])
    return np.unique(rows.T, axis=0, return_inverse=True)[1].ravel()


def solve_groups(sums: dict[int, list], site: int, pv: np.ndarray, groups: np.ndarray) -> np.ndarray | None:
    """The site's count per group of cells from its sums over the grids: :math:`\\sum_j o_j = \\sum_l n_l\\,
    \\#\\{j: t_j \\ge PV_l\\}` and the count; None where a grid was refused, or the least-squares solution
    is not integral or does not fit."""
    if len(sums) < len(THRESHOLDS):
        return None
    first = np.array([np.flatnonzero(groups == g)[0] for g in range(groups.max() + 1)])
    rows = np.array([[(np.arange(1, t + 1) / (t + 1) >= v).sum() for v in pv[first]] for t in sums]
                    + [np.ones(first.size)])  # and the count, over every group
    rhs = np.array([s[site][0] for s in sums.values()] + [next(iter(sums.values()))[site][1]])
    solution = np.linalg.lstsq(rows, rhs, rcond=None)[0]
    if np.abs(solution - np.rint(solution)).max() > 1e-6 or np.abs(rows @ np.rint(solution) - rhs).max() > 1e-6:
        return None
    return np.rint(solution).astype(int)


def decode_table(release: dict, cuts: list[tuple[float, bool]], positives: dict, negatives: dict, site: int,
                 frame: pd.DataFrame) -> dict[int, np.ndarray] | None:
    """The site's count of each class per group of the cells between ``cuts`` (the reference's leaves, or the
    cells the site released), each checked on the truth; None where the sums do not determine them."""
    pv = 1.0 - steps(release, cuts)[0]  # a positive's placement value per cell, as the sites compute it
    groups = groups_of(pv)
    counts = {1: solve_groups(positives, site, pv, groups), 0: solve_groups(negatives, site, pv, groups)}
    if counts[1] is None or counts[0] is None:
        return None
    truth = {c: np.bincount(groups, weights=n, minlength=groups.max() + 1).astype(int)
             for c, n in truth_counts(frame, cuts).items()}
    assert all((counts[c] == truth[c]).all() for c in (0, 1))  # what is decoded is the truth
    return counts


def test_the_roc_glm_table_of_a_derived_reference_reads_no_outcome(tmp_path: Path):
    frames, builder = federation(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        release = session.pooled("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=4, epsilon=0.4)
        assert release["reference_knots_dropped"] == 0  # every leaf edge kept
        cells = session.aggregate("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref(release["reference"]))
        session.derive("N", "1 - D$y")  # the negatives as the outcome
        positives, refused_1 = table_sums(session, "D$y", release["reference"])
        negatives, refused_0 = table_sums(session, "N", release["reference"])
    read = at_leaves = at_cells = 0
    for site, name in enumerate(sorted(frames)):
        counts = decode_table(release, leaf_cuts(release), positives, negatives, site, frames[name])
        at_leaves += counts is not None
        if counts is None:  # at the cells the site released for this reference (its placement sums name them)
            counts = decode_table(release, released_cuts(release, cells[name]["placement_cells"]), positives,
                                  negatives, site, frames[name])
            at_cells += counts is not None
        read += outcomes_read(counts) if counts is not None else 0
    print(f"ATTACK the ROC-GLM table of one derived reference, w read by meanDS over {len(THRESHOLDS)} grids "
          f"(shipped rules, 3 sites of 90): class counts decoded at the 16 leaves at {at_leaves} of 3 sites, at "
          f"the cells released at {at_cells}; outcomes read of {read} of 270 records; refused "
          f"{refused_1 + refused_0}")
    assert read == 0


def test_a_pooled_roc_glm_table_is_read_only_by_pooled_releases(tmp_path: Path):
    """Made for a pooled fit (``pooled = TRUE``), the table holds the reference at the cells the pooled placement
    sums over the same records released (and is refused before there are any): no per-site read of it, a copy
    or a subset of it is made or released, and the pooled ROC-GLM fit over it equals R's glm over the pooled
    table."""
    frames, builder = federation(tmp_path)
    refused: list[set] = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        release = session.pooled("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=4, epsilon=0.4)
        table = Call("histRocGlmDataDS", Ref("D$y"), Ref("D$score"), Ref(release["reference"]), 50, within_bin="tied",
                     pooled=True)
        try:
            session.assign("T", table)
        except FederatedCallError as exc:  # no pooled placement sums over these records yet
            refused.append({e.kind for e in exc.failures.values()})
        sums = session.pooled("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref(release["reference"]))
        session.assign("T", table)
        for attempt in (lambda: session.aggregate("meanDS", Ref("T$w")),
                        lambda: session.assign_expr("U", 'dataFrameSubsetDS2("T", "T$u", "0.5", 5, NULL, NULL, FALSE)'),
                        lambda: session.derive("V", "T$w * 2"),
                        lambda: session.aggregate("quantileMeanDS", Ref("T$w"))):
            try:
                attempt()
            except FederatedCallError as exc:
                refused.append({e.rule for e in exc.failures.values()})
        fit = ds_glm(session, "u ~ x", "T", family="binomial", link="probit", weights="w", secure=True,
                     null_model=False)  # the ROC-GLM, pooled: its iterates derived by the sites
    assert refused == [{"bad_call"}] + [{"disclosure.q_threshold"}] * 4
    pooled = pd.concat(frames.values(), ignore_index=True)
    cuts = released_cuts(release, sums["placement_cells"])  # the cells the pooled placement sums released
    pv = (1.0 - steps(release, cuts)[0])[cell_of(pooled, cuts)[pooled.y == 1]]  # each positive's, at its cell
    expected = r_eval("t <- (1:50) / 51; o <- sapply(t, function(v) sum(pv <= v)); "
                      "d <- data.frame(u = rep(c(0, 1), 50), x = rep(qnorm(t), each = 2), "
                      "w = as.vector(rbind(length(pv) - o, o))); "
                      "coef(glm(u ~ x, binomial(link = 'probit'), data = d, weights = w))", pv=pv)
    np.testing.assert_allclose(np.asarray(fit.params, dtype=float), expected, rtol=1e-5)  # both stop at 1e-8 deviance


def as_single(paired: dict) -> dict:
    """Model A's part of a paired answer, named as histPlacementSumsDS names its sums (the cells it was
    computed over: its ``placement_cells_a``, or every leaf when it names none)."""
    single = {k[:-2]: v for k, v in paired.items() if k.endswith("_a")}
    return {**single, "placement_cells": paired.get("placement_cells_a", {"dropped": [], "moved": []})}


def test_paired_placement_sums_against_derived_references_read_no_outcome(tmp_path: Path):
    frames, builder = federation(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        refs = references(session)
        sums: dict[str, list] = {site: [] for site in frames}
        for release in refs:
            ref = Ref(release["reference"])
            per = session.aggregate("pairedPlacementDS", Ref("D$y"), Ref("D$score"), ref, Ref("D$score"), ref)
            for site in frames:
                sums[site].append(as_single(per[site]))
    read, cells = decode_sites(frames, refs, sums)
    print(f"ATTACK per-site paired placement sums x {len(refs)} derived references (shipped rules, 3 sites of 90): "
          f"decoded every site's class counts in its {cells} cells; outcomes read of {read} of 270 records")
    assert read == 0


def test_joint_cells_of_two_scores_hold_q_records(tmp_path: Path):
    """Two cuttings of one score into cells of at least q records each (two references' bins, gated against
    each other by the cut history) can still meet in a joint cell of fewer; the cross products are sums over
    the joint cells each site names, and each of those holds at least q of its records (on the truth)."""
    frames, builder = federation(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        refs = references(session)[:2]
        per = session.aggregate("pairedPlacementDS", Ref("D$y"), Ref("D$score"), Ref(refs[0]["reference"]),
                                Ref("D$score"), Ref(refs[1]["reference"]))
    for site, frame in frames.items():
        joint = per[site]["joint_cells"]
        a, b = (cell_of(frame, [tuple(c) for c in joint[side]]) for side in ("a", "b"))
        counts = pd.Series(list(zip(a, b))).value_counts()
        print(site, len(joint["a"]) + 1, "x", len(joint["b"]) + 1, "joint cells, smallest non-empty", counts.min(),
              joint["why"][:80])
        assert counts.min() >= 5


@pytest.mark.slow
def test_pooled_paired_sums_over_nested_subsets_read_no_outcome(tmp_path: Path):
    """The pooled paired sums over nested subsets (``age >= a``) against references the sites derived on the whole
    table: the reference's leaves were released on the pooled counts of the table's records, not of a subset's,
    so a pooled read at the leaves over two subsets tells, by difference, the band's records per leaf (on the code
    before the records check: 60 of 110). A pooled read of a reference the sites derived is at the cells its pooled
    placement sums released over the same records: asked alone, the paired sums are refused; asked after those,
    as the client does, they are read at cells the row-set audit passed for each subset."""
    def alone(session, ref: str) -> dict:
        paired = session.pooled("pairedPlacementDS", Ref("T$y"), Ref("T$score"), Ref(ref), Ref("T$score"), Ref(ref))
        return {"pooled": as_single(paired)}

    def after_placement_sums(session, ref: str) -> dict:
        session.pooled("histPlacementSumsDS", Ref("T$y"), Ref("T$score"), Ref(ref))
        return alone(session, ref)

    for ask, expect_refused in ((alone, [["bad_call"]] * len(SUBSETS)), (after_placement_sums, None)):
        frames, decoded, refused = over_subsets(tmp_path / ask.__name__, ask)
        read, band_records, compared = tally(decoded, {"pooled": pd.concat(frames.values(), ignore_index=True)})
        print(f"ATTACK pooled paired sums over nested subsets age >= {SUBSETS}, {ask.__name__} (shipped rules): "
              f"outcomes read of {read} of the {band_records} records in the age bands ({compared} of 3 differences "
              f"decoded); refused {refused}")
        assert read == 0
        if expect_refused is not None:
            assert refused == expect_refused


@pytest.mark.slow
def test_pooled_paired_sums_against_references_derived_per_subset_read_no_outcome(tmp_path: Path):
    """The nested-subset difference again, each subset with references the sites derived on that subset's own
    records (ten pooled histograms of epsilon 0.04 each: 1.6 of the analyst's budget over four subsets). A
    reference's leaf edges were released on the pooled counts of the records it was derived from, so each
    subset's references pass them; read at the leaves, the paired sums over two subsets told the band's records
    leaf by leaf (60 of 110 band records' outcomes on the code before). The paired sums now read such a reference
    at the cells the pooled placement sums released over the same records, which the row-set audit checks
    against every cell released before from the table: the attack asks for those first, as the client does."""
    frames, builder = federation(tmp_path)
    decoded: dict[int, dict] = {}
    refused = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        for a in SUBSETS:
            try:  # a later subset may be refused beside the cells the sites keep of the pooled releases before
                session.assign_expr("T", f'dataFrameSubsetDS2("D", "D$age", "{a}", 6, NULL, NULL, FALSE)')
                refs = [session.pooled("scoreHistogramDS", Ref("T$y"), Ref("T$score"), levels=4, epsilon=0.04,
                                       decay=1.0 + 0.01 * r + 0.001 * a) for r in range(10)]
                sums = []
                for h in refs:
                    session.pooled("histPlacementSumsDS", Ref("T$y"), Ref("T$score"), Ref(h["reference"]))
                    sums.append(as_single(session.pooled("pairedPlacementDS", Ref("T$y"), Ref("T$score"),
                                                         Ref(h["reference"]), Ref("T$score"), Ref(h["reference"]))))
            except FederatedCallError as exc:
                refused.append(sorted({e.rule or e.kind for e in exc.failures.values()}))
                decoded[a] = {}
                continue
            decoded[a] = {"pooled": decode(refs, sums)}
    read, band_records, compared = tally(decoded, {"pooled": pd.concat(frames.values(), ignore_index=True)})
    print(f"ATTACK pooled paired sums over nested subsets, references derived per subset (shipped rules): outcomes "
          f"read of {read} of the {band_records} records in the age bands ({compared} of 3 differences decoded); "
          f"refused {refused}")
    assert read == 0, f"{read} of {band_records} read"


def sealed_first_step(session, function: str, *args) -> tuple[str, list, int, dict]:
    """The first half of a pooled release done by hand, as the client does it (the cut histories relayed, asked
    again with the union while a site is behind): the round, its roster, the step and every site's sealed answer."""
    round_id, roster = session._round()
    call = call_body(Call(function, *args))
    while True:
        step = session._step()
        option = {"round": round_id, "step": step, "roster": roster, "frac_bits": 40, "pooled": True,
                  "cuts": session._relayed_cuts()}
        answers = {s: r["result"] for s, r in
                   session._in_session(function, "POST", "/aggregate", {**call, "secure": option}).items()}
        if all("pooled" in a for a in answers.values()):
            return round_id, roster, step, {site: a["pooled"] for site, a in answers.items()}
        session._learn_histories(answers)  # a cut history behind: ask again with the union


def first_attempt_only(session, function: str, *args) -> None:
    """A pooled release stopped by the analyst after its first opening: the sites' sealed sums are relayed and
    opened (the gate renders its first attempt and the sites seal their row-set objections), but the objections
    are never relayed, so the audit never decides."""
    round_id, roster, step, sealed = sealed_first_step(session, function, *args)
    body = {"round": round_id, "step": step, "roster": roster, "next_step": session._step()}
    session._in_session(function, "POST", "/pooled", per_site={site: {**body, "relay": addressed_to(site, sealed)}
                                                                for site in sealed})


def test_paired_sums_after_an_unfinished_pooled_release_read_no_outcome(tmp_path: Path):
    """The nested-subset difference, the analyst stopping each pooled placement-sums release before its row-set
    audit decides: the paired sums must not read at the cells of an attempt the audit never passed (45 of 110 band
    records' outcomes read when the cells were kept at the first attempt; found by review). They are refused."""
    def abandon_then_paired(session, ref: str) -> dict:
        first_attempt_only(session, "histPlacementSumsDS", Ref("T$y"), Ref("T$score"), Ref(ref))
        paired = session.pooled("pairedPlacementDS", Ref("T$y"), Ref("T$score"), Ref(ref), Ref("T$score"), Ref(ref))
        return {"pooled": as_single(paired)}

    frames, decoded, refused = over_subsets(tmp_path, abandon_then_paired)
    read, band_records, compared = tally(decoded, {"pooled": pd.concat(frames.values(), ignore_index=True)})
    print(f"ATTACK pooled paired sums after unfinished placement-sums releases, nested subsets (shipped rules): "
          f"outcomes read of {read} of the {band_records} records in the age bands; refused {refused}")
    assert read == 0
    assert refused == [["bad_call"]] * len(SUBSETS)


def test_paired_sums_read_each_score_at_its_own_audited_cells(tmp_path: Path):
    """Another column's pooled placement sums against the same reference over the same records keep cells of their
    own: the paired sums on the score read it at the score's audited cells, before and after (once they were read
    at the other column's, where the score's own audit had merged an edge; found by review)."""
    frames, builder = federation(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        session.assign_expr("X", "D$age/100")
        ref = session.pooled("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=4, epsilon=0.4)["reference"]
        session.pooled("histPlacementSumsDS", Ref("D$y"), Ref("X"), Ref(ref))
        own = session.pooled("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref(ref))
        before = session.pooled("pairedPlacementDS", Ref("D$y"), Ref("D$score"), Ref(ref), Ref("D$score"), Ref(ref))
        session.pooled("histPlacementSumsDS", Ref("D$y"), Ref("X"), Ref(ref))
        after = session.pooled("pairedPlacementDS", Ref("D$y"), Ref("D$score"), Ref(ref), Ref("D$score"), Ref(ref))
    print(f"score's cells dropped {own['placement_cells']['dropped']}; sum_v10 {own['sum_v10']:.6f}, paired before "
          f"{before['sum_v10_a']:.6f}, after another column's release {after['sum_v10_a']:.6f}")
    assert before["sum_v10_a"] == pytest.approx(own["sum_v10"], abs=1e-6)
    assert after["sum_v10_a"] == pytest.approx(own["sum_v10"], abs=1e-6)
