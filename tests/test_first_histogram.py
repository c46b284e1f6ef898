"""A DataSHIELD user's first histogram comes back under the shipped rules: ``ds.histogram``'s calls
(``histogramDS1`` for the range, ``histogramDS2`` with 5, 10 or 20 breaks) through ``/ws`` with the
unmodified PyPI ``datashield`` client (a coarsened answer's bins as released in its ``released``), and
the pooled histogram through dsfed's own client, both over real servers on loopback, on the messy
corpus's three hospitals (897, 690 and 413 records, a few BMI values missing). A bin of fewer than q
records is merged with a neighbour, never zeroed or refused: the bins released as asked hold R's
``hist()`` counts, the merged ones are named with the site's reason, every released bin holds 0 or at
least q records, and every record is counted."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import http_builder
from dsfed_client import Ref
from dsfed_server.messy import write_corpus
from opalkit import opal_value
from rref import r_eval
from sitekit import make_sites, serve
from test_derived_column_attacks import ds_login

Q = 5  # disclosure_rules/default.toml: q_threshold
BREAKS = (5, 10, 20)


@pytest.fixture(scope="module")
def hospitals(tmp_path_factory) -> Any:
    """The three hospitals' BMI (missing values kept) as the sites hold it, under default.toml, served."""
    tmp = tmp_path_factory.mktemp("first-histogram")
    frames = {s.name: s.truth[["bmi"]].reset_index(drop=True)
              for s in write_corpus(tmp / "corpus", dataset="three_hospitals", seed=37)}
    provisioned, services = make_sites(tmp, frames)
    with ExitStack() as stack:
        urls = {name: stack.enter_context(serve(service)) for name, service in services.items()}
        yield frames, provisioned, urls


def r_hist_counts(values: np.ndarray, breaks: list[float]) -> list[int]:
    """R's ``hist(x, breaks, plot = FALSE)$counts`` over the non-missing values."""
    return [int(c) for c in r_eval("hist(x[!is.na(x)], breaks = b, plot = FALSE)$counts", x=values,
                                   b=np.asarray(breaks, dtype=float))]


def r_breaks(lo: float, hi: float, n: int) -> list[float]:
    """ds.histogram's breaks: R's ``seq(min, max, by = (max - min) / num.breaks)``."""
    return [float(v) for v in r_eval(f"seq({lo!r}, {hi!r}, by = ({hi!r} - {lo!r}) / {n})")]


def check_coarsened(result: dict[str, Any], values: np.ndarray, requested: list[float],
                    earlier: frozenset[float] = frozenset()) -> int:
    """A released histogram against R: the released breaks are requested ones (or ``earlier`` ones), their counts R's
    ``hist`` counts over them; each requested bin is released as asked (R's count on the requested
    breaks) or named as merged; every bin holds 0 or at least q records. Returns the bins merged."""
    h = result["histobject"]
    breaks, counts = list(np.atleast_1d(h["breaks"])), list(np.atleast_1d(h["counts"]))
    assert breaks[0] == requested[0] and breaks[-1] == requested[-1]
    # a pooled break not released may move to a break released before (R's hist shifts breaks by 1e-7 of a
    # bin width, so another number of bins makes another cut between the same records)
    known = [*requested, *earlier]
    assert all(np.isclose(b, known, rtol=0, atol=1e-6 * (requested[-1] - requested[0])).any() for b in breaks)
    assert counts == r_hist_counts(values, breaks)
    assert sum(counts) == int(np.sum(~np.isnan(values))) and all(c == 0 or c >= Q for c in counts)
    asked = r_hist_counts(values, requested)
    released = dict(zip(zip(breaks[:-1], breaks[1:]), counts))
    merged = [[a, b] for a, b in zip(requested[:-1], requested[1:]) if (a, b) not in released]
    for (a, b), want in zip(zip(requested[:-1], requested[1:]), asked):
        if (a, b) in released:
            assert released[(a, b)] == want
    assert result["invalidcells"] == len(merged)
    if merged:
        assert [list(np.atleast_1d(m)) for m in result["merged"]] == merged
        assert "fewer, wider bins" in result["why"]
        if len(breaks) < len(requested):  # bins merged, not only moved onto a break released before
            assert f"fewer than {Q} records" in result["why"]
        else:  # as many bins as asked, not all at the breaks asked: moved onto breaks released before
            assert "moved:" in result["why"]
    else:
        assert "merged" not in result
    return len(merged)


def any_breaks(lo: float, hi: float) -> frozenset[float]:
    """Every break a histogram of this module asks for: a site may release a break at one it released
    before (the earlier cut, which R's hist shifts by 1e-7 of a bin width), instead of merging its bin."""
    return frozenset(b for n in BREAKS for b in r_breaks(lo, hi, n))


def test_ds_histogram_through_ws_is_released_coarsened_and_named(hospitals):
    frames, provisioned, urls = hospitals
    session = ds_login(provisioned, urls)
    merged = 0
    try:
        session.assign_table("D", table="P.t")
        ranges = {s: opal_value(r) for s, r in session.aggregate("histogramDS1(D$bmi, 1, 3, 0.25)").items()}
        lo, hi = min(r[0] for r in ranges.values()), max(r[1] for r in ranges.values())
        for n in BREAKS:  # ds.histogram's call text at each num.breaks
            answers = session.aggregate(f"histogramDS2(D$bmi, {n}, {lo!r}, {hi!r}, 1, 3, 0.25)")
            for site, answer in answers.items():
                value, requested = opal_value(answer), r_breaks(lo, hi, n)
                # on the breaks asked for, for ds.histogram's combine (test_r_histogram_combine)
                if "released" in value:
                    h = value["histobject"]
                    np.testing.assert_allclose(h["breaks"], requested, rtol=0, atol=1e-9)
                    assert sum(h["counts"]) == pytest.approx(sum(value["released"]["counts"]), abs=1e-9)
                    value = {**value, "histobject": value["released"]}
                merged += check_coarsened(value, frames[site]["bmi"].to_numpy(float), requested, any_breaks(lo, hi))
    finally:
        session.close()
    assert merged > 0  # the tails of 20 bins hold fewer than q records: the case that was refused


def test_pooled_histogram_through_dsfeds_client_equals_R_where_released(hospitals):
    """Each site's histograms first (ds.histogram's 'split'), then the pooled ones. The third hospital
    declares BMI up to 40, so its cut at 40 is public there (no record above it) and enters the
    column's history; the other two hold 3 records above 40 between them. The pooled release may not
    reuse that cut: a pooled bin (40, 50] of 3 records would single them out."""
    frames, provisioned, urls = hospitals
    pooled = pd.concat(frames.values(), ignore_index=True)["bmi"].to_numpy(float)
    assert frames["hospital3"]["bmi"].max() <= 40 and 0 < np.sum(pooled > 40) < Q
    merged = 0
    with http_builder(provisioned, urls).login() as session:
        session.assign_table("D", "P.t")
        ranges = session.aggregate_expr("histogramDS1(D$bmi, 1, 3, 0.25)").values()
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
        earlier: set[float] = set()
        for n in BREAKS:
            per_site = session.aggregate_expr(f"histogramDS2(D$bmi, {n}, {lo!r}, {hi!r}, 1, 3, 0.25)")
            for site, result in per_site.items():
                check_coarsened(result, frames[site]["bmi"].to_numpy(float), r_breaks(lo, hi, n), any_breaks(lo, hi))
                earlier |= set(result["histobject"]["breaks"])
        assert 40.0 in per_site["hospital3"]["histobject"]["breaks"]
        for n in BREAKS:
            result = session.pooled("histogramDS2", Ref("D$bmi"), n, lo, hi, 1, 3, 0.25)
            merged += check_coarsened(result, pooled, r_breaks(lo, hi, n), frozenset(earlier))
            assert 40.0 not in result["histobject"]["breaks"]
    assert merged > 0
