"""Red team: the histogram AUC's site-derived reference and the EXACT placement sums against it.

``scoreHistogramDS`` pooled (noise on, the shipped analytic Gaussian) leaves at every site a reference
CDF the sites derived from the pooled noisy histograms (``curves._pooled_histograms``); its leaf edges
are gated on POOLED counts with the cut history. ``histPlacementSumsDS`` then evaluates it at each
site's exact scores and releases, per site (``secure_aggregation.require = false``, shipped), the exact
sums and sums of squares of the placement values: per class,
:math:`\\sum_l n_{l}\\,f_l` and :math:`\\sum_l n_{l}\\,f_l^2`, with :math:`f_l` the reference's
step value in leaf :math:`l` and :math:`n_l` the site's records of that class in the leaf.

The analyst knows every :math:`f_l` (the reference is a public function of the pooled release it
saw). The noise makes the :math:`f_l` of different references generic reals, so a handful of
references (scoreHistogramDS pooled with epsilon = 0.4, ten times: 4 of the analyst's 5) give a
linear system of full rank whose exact solution is **every site's exact count of positives and of
negatives in every leaf** -- no noise left, at the site's own resolution (a site's share of a leaf is
not checked: the edges were gated on pooled counts; ``Guard.reference_edges`` is skipped for a
site-derived reference, ``curves.site_reference``). A leaf where a site holds 1..q-1 records, all of
one outcome, gives those records' outcomes (and their score to 1/16); the same sums over two subsets
(``age >= a`` and ``age >= a + d``) give, by difference, the outcome and score leaf of the few records
of the ages between, identified by their age.

Measured under the shipped rules (default.toml, 3 sites of 90, seeds fixed) -- see the prints. On the
code before the reference's bins were released as cells, the decode was exact at all 16 leaves: 11 of 270
outcomes read per site, 86 of 110 age-band outcomes over nested subsets per site, 60 of 110 pooled.

The defence: ``histPlacementSumsDS`` releases its sums only over the cells the release gate passes (per
site, or pooled), the reference's bins merged where a cell would single out fewer than q records, beside
earlier cuts or earlier row sets of the table (the row-set audit); its result names the cells. The attack
decodes at the cells released (each call's ``placement_cells``), and reads what those counts give.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from dsfed_server.disclosure.gate import Cut
from dsfed_server.functions.curves import derived_reference
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame

Q = 5
LEVELS = 4  # 16 leaves: about 17 pooled records each, so the pooled gate keeps every edge
LEAVES = 2 ** LEVELS
REFERENCES = 10
EPSILON = 0.4  # per reference: 10 x 0.4 = 4 of the shipped 5 per analyst and table


def federation(tmp_path: Path, rules: Path | None = None):
    frames = {f"s{k}": synthetic_frame(20 + k, 90) for k in range(1, 4)}
    with fixed_secrets("redteam placement"):
        provisioned, services = make_sites(tmp_path, frames, rules)
    return frames, inprocess_builder(provisioned, services)


def released_cuts(release: dict, cells: dict) -> list[tuple[float, bool]]:
    """The cuts of the cells a placement-sums call released: the reference's edges (the ends included,
    the last one inclusive, and the cuts released before that the sites added, ``reference_edges_added``)
    less those dropped, with those moved at the cut they moved to."""
    edges = np.linspace(release["lower"], release["upper"], LEAVES + 1)
    asked = sorted([(float(edges[0]), False), *((float(e), False) for e in edges[1:-1]), (float(edges[-1]), True),
                    *((float(v), bool(c)) for v, c in release.get("reference_edges_added", []))])
    gone = set(cells["dropped"]) | {a for a, _ in cells["moved"]}
    return sorted([c for c in asked if c[0] not in gone] + [(float(b), False) for _, b in cells["moved"]])


def steps(release: dict, cuts: list[tuple[float, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """The step value per released cell ('tied'), as the sites compute it: V10 = F0 at the cell's mid for
    a positive, V01 = 1 - F1 mid for a negative (the analyst derives the reference as the sites do)."""
    ref = derived_reference(release, np.ones(LEAVES - 1, dtype=bool),
                            [Cut(float(v), bool(c)) for v, c in release.get("reference_edges_added", [])])
    e, c0, c1 = ref.edge.to_numpy(), ref.neg.to_numpy(), ref.pos.to_numpy()
    bounds = np.clip([-np.inf, *(v for v, _ in cuts), np.inf], e[0], e[-1])
    f0, f1 = np.interp(bounds, e, c0) / c0[-1], np.interp(bounds, e, c1) / c1[-1]
    return 0.5 * (f0[:-1] + f0[1:]), 1 - 0.5 * (f1[:-1] + f1[1:])


def references(session) -> list[dict]:
    out = []
    for r in range(REFERENCES):
        h = session.pooled("scoreHistogramDS", Ref("D$y"), Ref("D$score"), levels=LEVELS, epsilon=EPSILON,
                           decay=1.0 + 0.01 * r)  # another query: other (seeded) noise
        assert h["reference_knots_dropped"] == 0  # every leaf edge kept: the cells are the 16 leaves
        out.append(h)
    return out


def decode(refs: list[dict], sums: list[dict]) -> tuple[list[tuple[float, bool]], dict[int, np.ndarray]] | None:
    """One site's (or the pooled) exact count of the positives (1) and the negatives (0) per cell of the
    finest partition the calls' released cells share (the union of their cuts), from its exact placement
    sums against every reference: least squares on [f; f^2; 1] rows, rounded; None where the counts are not
    determined (the solution is not integral)."""
    per_call = [released_cuts(release, s["placement_cells"]) for release, s in zip(refs, sums)]
    union = sorted(set().union(*per_call))
    lower = [(-np.inf, False), *union]  # the lower cut of each cell of the union
    out = {}
    for y, cls, k in ((1, "v10", 0), (0, "v01", 1)):
        rows, rhs = [np.ones(len(union) + 1)], [sums[0]["n1" if y else "n0"]]
        for release, s, cuts in zip(refs, sums, per_call):
            w = steps(release, cuts)[k][[sum(c <= low for c in cuts) for low in lower]]  # each union cell's value
            rows += [w, w ** 2]
            rhs += [s[f"sum_{cls}"], s[f"sumsq_{cls}"]]
        solution = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
        if np.abs(solution - np.rint(solution)).max() > 1e-6:
            return None  # not determined by these sums
        out[y] = np.rint(solution).astype(int)
    return union, out


def cell_of(frame: pd.DataFrame, cuts: list[tuple[float, bool]]) -> np.ndarray:
    x = frame.score.to_numpy()
    return np.array([sum(v < xi or (inclusive and v == xi) for v, inclusive in cuts) for xi in x], dtype=int)


def truth_counts(frame: pd.DataFrame, cuts: list[tuple[float, bool]]) -> dict[int, np.ndarray]:
    cell, y = cell_of(frame, cuts), frame.y.to_numpy()
    return {c: np.bincount(cell[y == c], minlength=len(cuts) + 1) for c in (0, 1)}


def outcomes_read(counts: dict[int, np.ndarray]) -> int:
    """Records in cells (of a site, or of a difference of two subsets) holding 1..q-1 records, all of one
    outcome: their outcomes (and score cell) are read."""
    n = counts[0] + counts[1]
    return int(sum(n[j] for j in range(n.size) if 0 < n[j] < Q and (counts[0][j] == 0 or counts[1][j] == 0)))


def on_cuts(cells: list[tuple[float, bool]], counts: dict[int, np.ndarray], common: list[tuple[float, bool]]
            ) -> dict[int, np.ndarray]:
    """Decoded counts of the cells between ``cells`` summed over the coarser cells between ``common`` (cuts
    of ``cells``): the counts a release on other cuts shares with this one."""
    group = np.searchsorted([cells.index(c) for c in common], np.arange(len(cells) + 1), side="left")
    return {c: np.bincount(group, weights=counts[c], minlength=len(common) + 1).astype(int) for c in (0, 1)}


def band_read(decoded: dict, frame_of: dict, a: int, b: int) -> tuple[int, int, int]:
    """Outcomes read from the difference of two subsets' decoded cells, over the cuts both released (the
    finest partition the two share), each checked on the truth; the band's records; and how many
    differences were decoded."""
    read = records = compared = 0
    for key, frame in frame_of.items():
        band = frame[(frame.age >= a) & (frame.age < b)]
        records += len(band)
        first, second = decoded[a].get(key), decoded[b].get(key)
        if first is None or second is None:
            continue  # refused: nothing decoded
        common = sorted(set(first[0]) & set(second[0]))
        diff = {c: on_cuts(*first, common)[c] - on_cuts(*second, common)[c] for c in (0, 1)}
        truth = truth_counts(band, common)
        assert all((diff[c] == truth[c]).all() for c in (0, 1))  # the band's records per shared cell, exactly
        read += outcomes_read(diff)
        compared += 1
    return read, records, compared


def decode_sites(frames: dict[str, pd.DataFrame], refs: list[dict], sums: dict[str, list[dict]]) -> tuple[int, int]:
    """Every site's sums against every reference decoded (:func:`decode`), each checked on the truth: the
    outcomes read and the cells decoded, over the sites."""
    read = cells = 0
    for site, frame in frames.items():
        found = decode(refs, sums[site])
        assert found is not None  # the cells the site released, decoded
        cuts, counts = found
        truth = truth_counts(frame, cuts)
        assert all((counts[c] == truth[c]).all() for c in (0, 1))  # what is decoded is the truth, exactly
        cells += len(cuts) + 1
        read += outcomes_read(counts)
    return read, cells


def test_per_site_placement_sums_against_derived_references_read_no_outcome(tmp_path: Path):
    frames, builder = federation(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        refs = references(session)
        sums = {site: [] for site in frames}
        for release in refs:
            per = session.aggregate("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref(release["reference"]))
            for site in frames:
                sums[site].append(per[site])
    read, cells = decode_sites(frames, refs, sums)
    print(f"ATTACK per-site placement sums x {REFERENCES} derived references (shipped rules, 3 sites of 90): "
          f"decoded every site's exact class counts in its {cells} released cells (of {3 * (LEAVES + 2)} "
          f"asked); outcomes read of {read} of 270 records")
    assert read == 0


SUBSETS = (25, 33, 41, 50)  # age >= a: 25 is the whole table; each step removes 5 or more records per site


def over_subsets(tmp_path: Path, ask) -> tuple[dict, dict[int, dict], list]:
    """The placement sums of every subset ``age >= a`` against every reference, as ``ask(session, reference)``
    returns them (key -> result, a site or "pooled"), decoded per key; a refused subset, or its sums, decodes
    nothing (pooled, a later subset lies within a few records of a combination of the cells each site keeps of the
    earlier pooled releases over the subsets before, with their events: ``Guard._against_kept`` refuses it)."""
    frames, builder = federation(tmp_path)
    decoded: dict[int, dict] = {}
    refused = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        refs = references(session)
        for a in SUBSETS:
            try:
                session.assign_expr("T", f'dataFrameSubsetDS2("D", "D$age", "{a}", 6, NULL, NULL, FALSE)')
                answers = [ask(session, release["reference"]) for release in refs]
            except FederatedCallError as exc:  # a site refused: nothing decoded for this subset
                refused.append(sorted({e.rule or e.kind for e in exc.failures.values()}))
                decoded[a] = {}
                continue
            decoded[a] = {key: decode(refs, [answer[key] for answer in answers]) for key in answers[0]}
    return frames, decoded, refused


def tally(decoded: dict[int, dict], frame_of: dict) -> tuple[int, int, int]:
    """:func:`band_read` over the consecutive subsets."""
    read = records = compared = 0
    for a, b in zip(SUBSETS, SUBSETS[1:]):
        r, n, c = band_read(decoded, frame_of, a, b)
        read, records, compared = read + r, records + n, compared + c
    return read, records, compared


def test_placement_sums_over_nested_subsets_read_no_outcome(tmp_path: Path):
    frames, decoded, refused = over_subsets(tmp_path, lambda session, ref: session.aggregate(
        "histPlacementSumsDS", Ref("T$y"), Ref("T$score"), Ref(ref)))
    read, band_records, compared = tally(decoded, frames)
    print(f"ATTACK placement sums over nested subsets age >= {SUBSETS} (shipped rules): outcomes read of {read} "
          f"of the {band_records} records in the age bands ({compared} of 9 site differences decoded); refused "
          f"{refused}")
    assert read == 0


@pytest.mark.slow
def test_pooled_placement_sums_over_nested_subsets_read_no_outcome(tmp_path: Path):
    frames, decoded, refused = over_subsets(tmp_path, lambda session, ref: {"pooled": session.pooled(
        "histPlacementSumsDS", Ref("T$y"), Ref("T$score"), Ref(ref))})
    read, band_records, compared = tally(decoded, {"pooled": pd.concat(frames.values(), ignore_index=True)})
    print(f"ATTACK pooled placement sums over nested subsets age >= {SUBSETS} (shipped rules): outcomes read of "
          f"{read} of the {band_records} records in the age bands (pooled over 3 sites; {compared} of 3 "
          f"differences decoded); refused {refused}")
    assert read == 0
