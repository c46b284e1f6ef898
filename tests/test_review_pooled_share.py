"""Review of "Such a share stays pooled" (docs/governance.md): three cases its second version got wrong (each test
failed on it), mended.

1. A shifted 0/1 column. ``Guard._supports`` keeps the records each exact sum is over as the records where the
   summed function is not 0. ``D$g + 1`` (1 or 2) is not 0 anywhere: its support is the whole table, which
   ``_supports`` drops as the table's count. Yet its sum less the site's count of records is the number of g = 1,
   and the sum of ``(g + 1) * y`` less the sum of y their events. ``corDS(D$g, D$y)`` is refused after a pooled
   table of g by y (route 4 of tests/test_redteam_pooled_complement.py); ``corDS(g1, D$y)`` with ``g1 = D$g + 1`` is
   not, and the pooled row g = 1 less the large sites' gives the small site's 2 records and their events, in
   either order. Now the records at each value of a summed column of few values count as released
   (``differencing.few_levels``); the control (without them) reads the 2.
2. A span that ends at the last cell is merged downwards one cell a round: ``Guard.coarsened`` drops
   ``cuts[min(spans[k][-1], len(cuts) - 1)]``, for such a span the cut below the last cell, which lies inside the
   span and leaves its union as it was. The sites go round once per cell of the span and merge all of it. The
   mirror of the red team's run of 10 cells (the small site's 3 records above 0.5, not below): every threshold
   from 0.5 up is dropped (10 rounds), where dropping 0.5 alone (the cut below the span) is enough. Now such a span
   drops the cut below it (``checks.merged_at``).
3. THIN is not masked by what a site's own releases give: a span whose few records the small site released alone
   itself (its ``meanDS(D$y)``: 3 events of 30) is still kept as thin at the large sites after a pooled table of
   g by y, and their own ``meanDS(D$y)`` is refused, though it gives nothing the analyst does not hold. Now a
   share its own site's releases give is not thin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from sitekit import make_sites
from test_redteam_pooled_complement import LARGE, _binary, both_orders, level_read

Q = 5


def _shifted(session, site: str) -> tuple[int, int]:
    """A large site's records with g = 1 and their events, from ``corDS(D$g + 1, D$y)`` and ``meanDS(D$y)``."""
    view = session.site_view(site)
    view.derive("g1", "D$g + 1")
    part = view.aggregate_expr("corDS(g1, D$y)")[site]
    mean = view.aggregate_expr("meanDS(D$y)")[site]
    n, events = int(mean["Nvalid"]), int(round(mean["EstimatedMean"] * mean["Nvalid"]))
    return int(round(part["sums"][0][0])) - n, int(round(part["sums.of.products"][0][1])) - events


@pytest.mark.parametrize("checks", ["shipped", "control"])
@pytest.mark.parametrize("pooled_first", [True, False], ids=["pooled-first", "cor-first"])
def test_a_shifted_binary_columns_sums_do_not_read_the_small_sites_records(tmp_path: Path, pooled_first: bool,
                                                                            checks: str,
                                                                            monkeypatch: pytest.MonkeyPatch):
    if checks == "control":  # a few-valued column's levels not counted as released
        monkeypatch.setattr("dsfed_server.context.few_levels", lambda values, powers: [])
    frames = _binary()
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        pooled, own = both_orders(session, pooled_first, "D$g", _shifted)
    read = 0
    if own is not None and pooled is not None:
        read = level_read(pooled, own, "1", frames["small"][frames["small"]["g"] == 1])[2]
    print(f"\n{checks}, shifted 0/1 column ({'pooled first' if pooled_first else 'corDS first'}): {read} of the "
          "small site's 30 records' outcomes read")
    assert read == (0 if checks == "shipped" else 2), f"{read} of the small site's records with g = 1 read"


def test_a_span_ending_at_the_last_cell_merges_only_its_bounding_cut(tmp_path: Path):
    rng = np.random.default_rng(3)
    score = np.r_[rng.uniform(0.05, 0.48, 17), [0.62, 0.77, 0.92]]  # 3 records above 0.5, in three bins
    frames = {"small": pd.DataFrame({"y": (rng.uniform(0, 1, 20) < score).astype(int), "score": score})}
    for site in LARGE:
        s = rng.uniform(0, 1, 200)
        frames[site] = pd.DataFrame({"y": (rng.uniform(0, 1, 200) < s).astype(int), "score": s})
    fine = np.round(np.arange(0.05, 0.951, 0.05), 3)
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for site in LARGE:  # each large site alone at 0.5
            assert list(ds_threshold_metrics(session.site_view(site), "D$y", "D$score", [0.5]).to_frame().index) == [0.5]
        released = list(ds_threshold_metrics(session, "D$y", "D$score", fine, secure=True).to_frame().index)
    above = [t for t in released if t > 0.5 + 1e-9]
    # the span [0.5, 1] is given by the large sites' own releases but for the small site's 3 records: dropping the
    # cut at 0.5 (below the span) hides them; the nine cuts above it are no union the large sites released
    assert 0.5 not in released
    assert len(above) >= 8, f"released {released}: every cut of the span dropped, one a round"


def test_a_count_the_small_site_released_itself_does_not_refuse_the_large_sites(tmp_path: Path):
    rng = np.random.default_rng(5)
    frames = {}
    for site, n in (("small", 30), ("north", 200), ("south", 200)):
        frames[site] = pd.DataFrame({"g": (rng.uniform(0, 1, n) < 0.4).astype(int),
                                     "y": (rng.uniform(0, 1, n) < 0.3).astype(int)})
    frames["small"]["y"] = 0
    frames["small"].loc[[0, 1, 2], "y"] = 1  # 3 events at the small site
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        mean = session.site_view("small").aggregate_expr("meanDS(D$y)")["small"]
        assert round(mean["EstimatedMean"] * mean["Nvalid"]) == 3  # the small site's events, released by itself
        session.pooled("table2DDS", Ref("D$g"), Ref("D$y"))
        for site in LARGE:  # each site's event rate beside the pooled table: nothing the analyst does not hold
            try:
                session.site_view(site).aggregate_expr("meanDS(D$y)")
            except FederatedCallError as exc:
                pytest.fail(f"{site}'s meanDS(D$y) refused ({exc.failures[site].rule}), though the small site's "
                            "share of the column y = 1 is given by its own meanDS")
