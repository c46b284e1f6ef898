"""The breaks of Hosmer-Lemeshow C's groups on a recalibrated copy of the score, checked in the score
column's units. ``decileGroupsDS`` finds its breaks on pooled counts of the values it is given; on a
copy ``recalibrateDS(D$score, "logistic", c(a, b))`` those are the copy's values, while the score
column's cut history is kept in the column's units. Compared as they came (as the protocol did
before its breaks were mapped back to the column), a break of the copy landed somewhere else on the
column: the cut check counted the wrong records and passed a group table whose breaks lie a few
records from thresholds released before. The pooled row-set audit then caught the group cells beside
the threshold cells, and refused the whole call -- the statistic with the table.

An honest analysis on three sites under the shipped default rules: metrics at nine thresholds (pooled)
that happen to lie 4 records above the pooled deciles of the score, then H-L C of a recalibrated copy
(a = 0.2, b = 1; made first, as its map's midpoint is a cut too). Before, the sites refused the call.
Now a break that lies, in the score's units, within q + the largest margin of a threshold moves onto
that threshold (on the copy: the cut that parts its records as the threshold parts the score's; checked on
the truth), the others are released where they are, the statistic is that of the groups released (R's
``hoslem.test`` statistic over the copy's values at those edges), and the table reads no record beside the
thresholds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special

from conftest import inprocess_builder
from dsfed_client.calls import Call, Ref
from rref import r_eval, r_hl_on_edges
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets

Q = 5  # the shipped default.toml's q_threshold
MARGIN = 5  # the shipped default.toml's cut_margin: a cell holds q plus a secret margin of 0 to 5 records
SHIFT = 0.2  # the copy's intercept: c = expit(0.2 + logit(p)); its midpoint expit(-0.2) = 0.45 lies between thresholds


def frame(seed: int, n: int) -> pd.DataFrame:
    """n made-up records: distinct scores with 6 decimals and an outcome drawn from them."""
    rng = np.random.default_rng(seed)
    score = rng.choice(np.arange(1, 1_000_000), n, replace=False) / 1_000_000
    return pd.DataFrame({"y": (rng.uniform(size=n) < score).astype(np.int64), "score": score})


def cumulative(edges_counts: list[tuple[float, int, int, bool]]) -> dict[tuple[float, bool], tuple[int, int]]:
    """(cut, inclusive) -> (records, events) at or below (inclusive) / below the cut, from cells in order."""
    out, n, e = {}, 0, 0
    for upper, count, events, inclusive in edges_counts:
        n, e = n + count, e + events
        out[(upper, inclusive)] = (n, e)
    return out


def records_read(grid: dict, groups: dict | None, pooled: pd.DataFrame) -> int:
    """Records whose outcome the two releases give: stretches between a threshold and a group break
    (mapped back to the score) holding 1 to q - 1 records, all events or none; checked on the truth."""
    if groups is None:
        return 0
    below_grid = cumulative([(float(t), int(round(n)), int(round(e)), False)
                             for t, n, e in zip(grid["edges"][1:-1], grid["n"], grid["sum_y"])])
    breaks = special.expit(special.logit(np.asarray(groups["edges"][1:-1], dtype=float)) - SHIFT)
    at_breaks = cumulative([(float(b), int(round(n)), int(round(e)), True)
                            for b, n, e in zip(breaks, groups["n"], groups["sum_y"])])
    read = 0
    for (b, _), (nb, eb) in at_breaks.items():
        for (t, _), (nt, et) in below_grid.items():
            k, events = abs(nb - nt), abs(eb - et)
            if 0 < k < Q and events in (0, k):
                lo, hi = sorted((b, t))
                stretch = pooled[(pooled.score >= lo) & (pooled.score <= hi)] if t > b else \
                    pooled[(pooled.score >= t) & (pooled.score <= b)]
                assert len(stretch) == k and int(stretch.y.sum()) == events  # what is read is the truth
                read += k
    return read


def test_a_recalibrated_copy_s_groups_meet_the_score_s_thresholds(tmp_path: Path):
    frames = {f"h{k}": frame(40 + k, 200) for k in range(3)}
    pooled = pd.concat(frames.values(), ignore_index=True)
    p, c = pooled.score.to_numpy(), special.expit(SHIFT + special.logit(pooled.score.to_numpy()))
    ranked = np.sort(p)
    grid = [float(ranked[np.searchsorted(ranked, d) + 4]) + 5e-7 for d in np.quantile(p, np.arange(1, 10) / 10)]
    with fixed_secrets("protocol cut units"):
        provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign("copy", Call("recalibrateDS", Ref("D$score"), "logistic", coefficients=[SHIFT, 1.0]))
        bins = session.pooled("thresholdBinsDS", Ref("D$y"), Ref("D$score"), grid)
        assert np.allclose(bins["edges"][1:-1], grid)  # every threshold released
        out = session.pooled("decileGroupsDS", Ref("D$y"), Ref("copy"), 10)
    # R's breaks on the copy, as records of the score: how many lie between each break and the thresholds
    breaks = r_eval("quantile(p, 1:9/10)", p=c)
    edges = np.asarray(out["table"]["edges"])

    def nearest(b: float) -> int:  # records between the break b (the copy's) and the nearest threshold
        return min(k for t in grid if (k := abs(int(np.sum(c <= b)) - int(np.sum(p < t)))))

    moved = {i - 1: to for i, to in out["moved_breaks"]}  # R's break (from 0) -> the threshold's cut on the copy
    kept = [b for i, b in enumerate(breaks) if i not in moved]
    on_copy = special.expit(SHIFT + special.logit(np.asarray(grid)))
    print(f"breaks released {len(kept)}, moved onto a threshold {len(moved)}: records to the nearest threshold "
          f"{[nearest(b) for b in kept]} released, {[nearest(breaks[i]) for i in moved]} moved")
    assert moved and all(nearest(breaks[i]) < Q + MARGIN for i in moved) and all(nearest(b) >= Q for b in kept)
    assert all(np.isclose(on_copy, to, rtol=0, atol=1e-12).any() for to in moved.values())
    assert out["merged_groups"] == 0 and len(edges) == len(breaks) + 2 and not out["exact_grouping"]
    assert "disclosure.cut_history" in out["why"] and records_read(bins, out["table"], pooled) == 0
    # the statistic is the released groups', R's hoslem.test statistic on the copy's values at those edges
    assert out["statistic"] == pytest.approx(r_hl_on_edges(pooled.y.to_numpy(), c, edges), rel=1e-8)
    assert out["df"] == len(edges) - 3
