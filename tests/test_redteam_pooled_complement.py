"""Red team of "Such a share stays pooled": four routes that read a small site's few records of a pooled cell on its
first version (which checked row sets only, and runs of up to 8 bins), measured. The truth is known
(tests/test_pooled_complement_attack.py's frames, three in-process sites under the shipped rules
``disclosure_rules/default.toml``); every test runs both orders (the pooled release first, or the large sites' own
first). Now none of the four reads anything (the controls of routes 1, 2 and 4 switch the new part off and read
what the first version gave).

1. A per-site GLM with a factor covariate. ``glmDS2(y ~ grade, "binomial", "0,0,0", ...)`` at a large site
   releases X'WX and X'Wz at beta = 0: with W = 1/4, the diagonal entry of the dummy ``grade=III`` is a quarter of
   that site's grade III records, and its X'Wz entry is their events less half of them. The dummies' sums are kept
   as sums (``Guard.exact_sums``), not as row sets, so neither the HIDDEN check (``Guard._public_shares``: row sets
   only) nor the thin-cell check (``Guard._thin_complement``: row sets only) saw them: the pooled grade III row
   less the two large sites' was the small site's 3 records, each with the event, in either order. Now the records
   each exact sum released alone is over are kept and checked as row sets are: the GLM is refused at the large
   sites after the pooled table, the pooled table refused after the GLMs.
2. A union of two pooled bins that are not adjacent, reached in one ``deriveDS``
   per union: ``d = abs(score - k)`` with the kink ``k`` in the middle of a bin (a new cut, which the large sites
   of 400 records keep) and ``thresholdBinsDS`` on ``d`` at two radii whose root cuts are pooled cuts: the cell of
   ``d`` between them is the union of bin i and bin j, symmetric about ``k``; the cell inside is a run (a span,
   given where the small site holds 0 or >= q of it), the one outside the complement of the run from bin i to bin j
   (a span: the small site must hold 0 or >= q of it too). Pooled cells of the union less the large sites' cell of
   ``d`` is the small site's share of it. On the small site of 12 of tests/test_pooled_complement_attack.py's
   union test (kink 0.45: bins [0.1, 0.2) and [0.7, 0.8)), 2 of its 12 records' outcomes are read (both events),
   in either order. A second kink on the same table (0.55, 0.65) is merged or refused: its cells combine with the
   first's into single bins, which the checks see. Now a site keeps how each pooled release's cells lie, and a
   union of them that no span stands for is refused alone where a thin span lies in it (pooled first:
   ``Guard._thin_union``), and merged at the pooled release, in a second sealed step, where a site released it
   alone before and another site was thin in a cell of it (alone first: ``Guard._alone_unions``,
   ``Guard._union_round``): 0 read in both orders; the control, both off, reads the 2.
3. A run of more than 8 adjacent pooled bins (admitted too), reached with the shipped thresholds' grain: a pooled
   ``thresholdBinsDS`` at 19 thresholds 0.05 .. 0.95 (cells of 0.05) over a small site of 20 high-risk records (3
   below 0.5, none with the event: a specialised clinic) and two sites of 200; each large site alone at 0.5 (a cut
   released pooled). [0, 0.5) is a run of 10 cells, no span; the large sites' records above 0.5, less the pooled
   count above 0.5, and the small site's own whole-table ``meanDS(D$y)`` (its count and events, q-safe), gave its 3
   records below 0.5 and their outcome (none had the event), in either order. Now runs of up to 64 cells are
   spans: the cut at 0.5 is not released alone (pooled first) or pooled (alone first).
4. The plainest: a 0/1 column. A pooled ``table2DDS(D$g, D$y)`` of a binary integer column (the small site holds 2
   records with g = 1, both with the event) and, at each large site, ``corDS(D$g, D$y)``: its sums and sums of
   products are the count of g = 1 and its events (``meanDS(D$g)`` alone gives the count). They are second
   moments of table columns, neither counted nor kept, and no row set: the table of g alone was refused at the
   large sites, the same counts through ``corDS`` were not. The pooled row g = 1 less theirs gave the small site's 2
   records and their events, in either order. Now refused as route 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure.checks import Guard
from sitekit import exposed_shares_unaudited, make_sites
from test_pooled_complement_attack import Q, THRESHOLDS, _frames, _graded

LARGE = ("north", "south")
RULE = "secure_aggregation.pooled_thresholds"


def _sums_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of routes 1 and 2: the records an exact sum is over neither checked nor kept."""
    monkeypatch.setattr(Guard, "_supports", lambda self, *args: [])


def both_orders(session, pooled_first: bool, x: str, alone) -> tuple[Any, Any]:
    """The pooled table of ``x`` by ``D$y`` and each large site's ``alone(session, site)``, in either order: the
    second answer None where a site refuses it (:func:`_refused`)."""
    if pooled_first:
        pooled = session.pooled("table2DDS", Ref(x), Ref("D$y"))
        return pooled, _refused(lambda: [alone(session, site) for site in LARGE])
    own = [alone(session, site) for site in LARGE]
    return _refused(lambda: session.pooled("table2DDS", Ref(x), Ref("D$y"))), own


def level_read(pooled: dict[str, Any], own: list[tuple[int, int]], level: str, truth: pd.DataFrame
               ) -> tuple[int, int, int]:
    """The pooled table's row ``level`` less the large sites' own (records, events), asserted to be the small site's
    records there (``truth``), and the outcomes they read: all of them where 1 to q - 1 share one outcome."""
    counts = np.asarray(pooled["counts"], dtype=int)
    row, col = pooled["rows"].index(level), pooled["cols"].index("1")
    records = int(counts[row].sum()) - sum(n for n, _ in own)
    events = int(counts[row, col]) - sum(e for _, e in own)
    assert (records, events) == (len(truth), int(truth["y"].sum()))  # the small site's share, exactly
    return records, events, records if 0 < records < Q and events in (0, records) else 0


def _refused(call) -> Any:
    """``call()``, or None where a site refuses it under ``secure_aggregation.pooled_thresholds``, or, where the
    others' releases alone expose a site's share of a span of the pooled cells, ``disclosure.subset_min_difference``
    (its audit of that share as a release alone)."""
    try:
        return call()
    except FederatedCallError as exc:
        assert {RULE, "disclosure.subset_min_difference"} & {f.rule for f in exc.failures.values()}, exc
        return None


def _glm_level(session, site: str) -> tuple[int, int]:
    """A large site's grade III records and events, from its own GLM ``y ~ grade`` at beta = 0 (W = 1/4)."""
    part = session.site_view(site).aggregate_expr('glmDS2(y ~ grade, "binomial", "0,0,0", NULL, NULL, "D")')[site]
    info, xwz = np.asarray(part["info.matrix"], float), np.asarray(part["xwz"], float)
    n = info[2, 2] / 0.25  # the dummy grade=III: sum of W over its records
    return int(round(n)), int(round(xwz[2] + n / 2))  # X'Wz at beta 0 = X'(y - 1/2)


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "glm-first"])
def test_glm_factor_dummies_less_the_pooled_table_read_the_small_sites_level(tmp_path: Path, pooled_first: bool,
                                                                              checks: str,
                                                                              monkeypatch: pytest.MonkeyPatch):
    if checks == "control":
        _sums_as_before(monkeypatch)
    frames, (provisioned, services) = _graded(tmp_path)
    small = frames["small"][frames["small"]["grade"] == "III"]
    assert 0 < len(small) < Q and small["y"].nunique() == 1
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        pooled, own = both_orders(session, pooled_first, "D$grade", _glm_level)
    if checks == "shipped":
        print(f"\nGLM factor dummies ({'pooled first' if pooled_first else 'GLM first'}): "
              f"{'the GLMs' if pooled_first else 'the pooled table'} refused, 0 outcomes read")
        assert (own if pooled_first else pooled) is None
        return
    records, events, read = level_read(pooled, own, "III", small)
    print(f"\ncontrol, GLM factor dummies ({'pooled first' if pooled_first else 'GLM first'}): the small site's grade "
          f"III records read: {records}, {events} with the event -> {read} outcomes read of its "
          f"{len(frames['small'])} records")
    assert read == 3


# kink, the radii of the union's cell of d = abs(score - kink), the pooled bins (by their lower threshold) of the union
# (one per table: a second kink's cells combine with the first's into single bins, which the checks then see)
UNIONS = ((0.45, (0.25, 0.35), (0.1, 0.7)),)


def _pooled_bin(pooled: pd.DataFrame, lower: float) -> tuple[int, int]:
    """Records and events of the pooled bin from ``lower`` to the next threshold (or 1)."""
    upper = [t for t in pooled.index if t > lower + 1e-9]
    at = [(int(pooled.loc[t, "tp"] + pooled.loc[t, "fp"]), int(pooled.loc[t, "tp"])) for t in (lower, *upper[:1])]
    return (at[0][0] - at[1][0], at[0][1] - at[1][1]) if upper else at[0]


def _unions_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of route 2: a union of pooled cells no span stands for neither refused alone after the pooled
    release nor merged at one after it was released alone, nor a share the others' releases alone expose audited
    as a release alone (either closes it)."""
    monkeypatch.setattr(Guard, "_thin_union", lambda self, *args: None)
    monkeypatch.setattr(Guard, "_alone_unions", lambda self, *args: [])
    exposed_shares_unaudited(monkeypatch)


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_non_adjacent_union_by_an_abs_column_reads_the_small_sites_records(tmp_path: Path, pooled_first: bool,
                                                                           checks: str,
                                                                           monkeypatch: pytest.MonkeyPatch):
    if checks == "control":
        _unions_as_before(monkeypatch)
    frames, rng = _frames(small=12), np.random.default_rng(17)
    for site in LARGE:  # 400 records: the kink's half bins hold ~20, beyond q and any margin the site draws
        score = rng.uniform(0, 1, 400)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 400) < score).astype(int), "score": score})
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def alone() -> dict[float, list[tuple[int, int]] | None]:
            out: dict[float, list[tuple[int, int]] | None] = {}
            for k, (inner, outer), _ in UNIONS:
                cells: list[tuple[int, int]] | None = []
                for site in LARGE:
                    view = session.site_view(site)
                    view.derive(f"d{int(k * 100)}", f"abs(D$score - {k})")
                    try:
                        f = ds_threshold_metrics(view, "D$y", f"d{int(k * 100)}", [inner, outer]).to_frame()
                    except FederatedCallError as exc:
                        assert exc.failures[site].rule == RULE
                        cells = None
                        break
                    if list(f.index) != [inner, outer]:  # a radius merged away: the union is not released
                        cells = None
                        break
                    size = f["tp"] + f["fp"]
                    cells.append((int(size[inner] - size[outer]), int(f.loc[inner, "tp"] - f.loc[outer, "tp"])))
                out[k] = cells
            return out

        def pooled() -> pd.DataFrame:
            return ds_threshold_metrics(session, "D$y", "D$score", THRESHOLDS, secure=True).to_frame()

        if pooled_first:
            together = pooled()
            own = alone()
        else:
            own = alone()
            together = pooled()
    small, read, released = frames["small"], 0, 0
    for k, _, bins in UNIONS:
        edges = [round(t, 6) for t in together.index]
        if own[k] is None or not all(round(b, 6) in edges and round(b + 0.1, 6) in edges + [1.0] for b in bins):
            continue  # a radius or a bin of the union merged away (or the release alone refused): nothing to subtract
        released += 1
        union = [_pooled_bin(together, lower) for lower in bins]
        records = sum(n for n, _ in union) - sum(n for n, _ in own[k])  # type: ignore[union-attr]
        events = sum(e for _, e in union) - sum(e for _, e in own[k])  # type: ignore[union-attr]
        held = small[(np.floor(small["score"] * 10).isin([round(b * 10) for b in bins]))]
        assert (records, events) == (len(held), int(held["y"].sum()))  # the small site's share of the union
        if 0 < records < Q and events in (0, records):
            read += records
    order = "pooled first" if pooled_first else "alone first"
    print(f"\n{'control, ' if checks == 'control' else ''}non-adjacent unions ({order}): {read} outcomes read of the "
          f"small site's {len(small)} records ({released} of {len(UNIONS)} unions released both ways)")
    assert read == (2 if checks == "control" else 0)


def _skewed() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(3)
    score = np.r_[rng.uniform(0.05, 0.48, 3), rng.uniform(0.52, 0.99, 17)]
    frames = {"small": pd.DataFrame({"y": np.r_[0, 0, 0, (rng.uniform(0, 1, 17) < score[3:]).astype(int)],
                                     "score": score})}
    for site in LARGE:
        score = rng.uniform(0, 1, 200)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 200) < score).astype(int), "score": score})
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "alone-first"])
def test_a_run_longer_than_eight_bins_reads_the_small_sites_records(tmp_path: Path, pooled_first: bool, checks: str,
                                                                    monkeypatch: pytest.MonkeyPatch):
    if checks == "control":  # runs of up to 8 cells, as the first version checked
        monkeypatch.setattr("dsfed_server.disclosure.checks.SPAN_CELLS", 8)
    frames = _skewed()
    fine = np.round(np.arange(0.05, 0.951, 0.05), 3)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def pooled() -> pd.DataFrame:
            return ds_threshold_metrics(session, "D$y", "D$score", fine, secure=True).to_frame()

        def alone() -> list[pd.DataFrame]:
            return [ds_threshold_metrics(session.site_view(site), "D$y", "D$score", [0.5]).to_frame()
                    for site in LARGE]

        if pooled_first:
            together = pooled()
            own = alone()
        else:
            own = alone()
            together = pooled()
        mean = session.site_view("small").aggregate_expr("meanDS(D$y)")["small"]
    if checks == "shipped":  # the cut at 0.5 released alone at no large site (pooled first), or not pooled
        released = [0.5 in o.index for o in own] if pooled_first else [0.5 in together.index]
        print(f"\nrun of 10 cells ({'pooled first' if pooled_first else 'alone first'}): 0.5 released "
              f"{released}, 0 outcomes read")
        assert not all(released)
        return
    assert list(together.index) == list(fine) and all(list(o.index) == [0.5] for o in own)
    n, events = int(mean["Nvalid"]), int(round(mean["EstimatedMean"] * mean["Nvalid"]))
    size = [f.loc[0.5, "tp"] + f.loc[0.5, "fp"] for f in (together, *own)]
    above = int(size[0] - sum(size[1:])), int(together.loc[0.5, "tp"] - sum(o.loc[0.5, "tp"] for o in own))
    records, positives = n - above[0], events - above[1]
    truth = frames["small"][frames["small"]["score"] < 0.5]
    assert (records, positives) == (len(truth), int(truth["y"].sum()))
    read = records if 0 < records < Q and positives in (0, records) else 0
    print(f"\ncontrol, run of 10 cells ({'pooled first' if pooled_first else 'alone first'}): the small site's "
          f"records below 0.5 read: {records}, {positives} with the event -> {read} outcomes read of its {n} records")
    assert read == 3


def _binary() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(11)
    frames = {}
    for site, n, p in (("small", 30, 0.1), ("north", 200, 0.3), ("south", 200, 0.3)):
        g = (rng.uniform(0, 1, n) < p).astype(int)
        frames[site] = pd.DataFrame({"g": g, "y": (rng.uniform(0, 1, n) < 0.3).astype(int)})
    frames["small"].loc[frames["small"]["g"] == 1, "y"] = 1  # its few records with g = 1 all had the event
    return frames


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "cor-first"])
def test_a_binary_columns_sums_less_the_pooled_table_read_the_small_sites_records(tmp_path: Path, pooled_first: bool,
                                                                                   checks: str,
                                                                                   monkeypatch: pytest.MonkeyPatch):
    if checks == "control":
        _sums_as_before(monkeypatch)
    frames = _binary()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")

        def alone() -> list[tuple[int, int]]:
            parts = [session.site_view(site).aggregate_expr("corDS(D$g, D$y)")[site] for site in LARGE]
            return [(int(p["sums"][0][0]), int(p["sums.of.products"][0][1])) for p in parts]

        if pooled_first:
            pooled = session.pooled("table2DDS", Ref("D$g"), Ref("D$y"))
            for site in LARGE:  # the same count as a table: refused
                with pytest.raises(FederatedCallError) as refused:
                    session.site_view(site).aggregate("table1DDS", Ref("D$g"))
                assert refused.value.failures[site].rule == "secure_aggregation.pooled_thresholds"
            own = _refused(alone)
        else:
            own = alone()
            pooled = _refused(lambda: session.pooled("table2DDS", Ref("D$g"), Ref("D$y")))
    if checks == "shipped":
        print(f"\nbinary column ({'pooled first' if pooled_first else 'corDS first'}): "
              f"{'corDS' if pooled_first else 'the pooled table'} refused, 0 outcomes read")
        assert (own if pooled_first else pooled) is None
        return
    records, events, read = level_read(pooled, own, "1", frames["small"][frames["small"]["g"] == 1])
    print(f"\ncontrol, binary column ({'pooled first' if pooled_first else 'corDS first'}): the small site's records "
          f"with g = 1 read: {records}, {events} with the event -> {read} outcomes read of its 30 records")
    assert read == 2
