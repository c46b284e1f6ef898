"""Red team: Hosmer-Lemeshow C's groups (``decileGroupsDS``) and the statistics released when the group
table is withheld.

Where a group would hold fewer than q records outside its largest site (``dominance_sites = 1``), or
where the breaks do not fit the cut history, the sites withhold the group table -- but release C, ECE
and MCE exactly ("the statistics are exact"). With two groups whose contents are unknown, C and ECE
are two equations in two unknowns (the honest events a and the honest sum of p in the first group),
so the withheld table is read back from the statistics.

The padding member (docs/governance.md) makes that a walk over the honest records: L made-up records
below every honest score (outcome 0), and many above (outcome 1, p near 1). With N pooled records the
first type-7 break of g groups sits at rank 1 + (N - 1)/g, so the first group holds the L padding
records and the k lowest honest records, k = floor(1 + (N - 1)/g) - L; the second the other honest
records and padding; the rest padding only (the member knows its own share of every group: the ranks
follow from N and g). g = 50, 49, ..., 40 walks k = 0, 1, ..., 10 on ONE table, no subset: the honest
events of the first group, read from C and ECE, grow by the outcome of the k-th lowest honest record.

Measured under the shipped rules (dominance_sites = 0) and with dominance_sites = 1; "read": honest
records whose outcome the analyst learns (checked against the truth).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from dsfed_core.calibration import calibration_errors, hosmer_lemeshow
from sitekit import make_sites, rules_variant
from test_derived_column_attacks import fixed_secrets

L = 40  # low padding
N = 2000  # pooled records
H_SITE = 20
GS = range(50, 39, -1)  # k = 0 .. 10


def honest(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = rng.choice(np.arange(1_000, 999_000), H_SITE, replace=False) / 1_000_000
    return pd.DataFrame({"y": (rng.uniform(size=H_SITE) < score).astype(np.int64), "score": score})


def padding(n_honest: int) -> pd.DataFrame:
    high = N - L - n_honest
    low = pd.DataFrame({"y": 0, "score": np.arange(1, L + 1) * 1e-5})
    top = pd.DataFrame({"y": 1, "score": 1 - np.arange(high, 0, -1) * 4e-7})  # increasing, above 0.999
    return pd.concat([low, top], ignore_index=True)


def sizes(g: int) -> np.ndarray:
    """Records per group of R's type-7 groups of N distinct values (records at or below each break)."""
    below = [0] + [min(math.floor(1 + m * (N - 1) / g + 1e-9), N) for m in range(1, g)] + [N]
    return np.diff(below)


def decode(g: int, release: dict, pad: pd.DataFrame, n_honest: int, o_h: float, e_h: float
           ) -> tuple[int, int] | None:
    """(k, honest events in group 1) from C and ECE, the member knowing its own share of every group."""
    n = sizes(g)
    k = int(n[0]) - L
    if not 0 <= k <= n_honest or n[0] + n[1] < L + n_honest:
        return None
    x = np.sort(pad.score.to_numpy())
    ys = pad.y.to_numpy()[np.argsort(pad.score.to_numpy())]
    # the member's records per group: the low padding all in group 1, the high padding by rank
    own_n = np.zeros(g)
    own_o = np.zeros(g)
    own_e = np.zeros(g)
    bounds = np.concatenate([[0], np.cumsum(n)])
    honest_at = (L, L + n_honest)  # pooled ranks [L, L + n_honest) are the honest records
    for j in range(g):
        lo, hi = bounds[j], bounds[j + 1]
        for a, b in ((lo, min(hi, honest_at[0])), (max(lo, honest_at[1]), hi)):
            if b > a:
                member = slice(a if a < honest_at[0] else a - n_honest, b if b <= honest_at[0] else b - n_honest)
                own_n[j] += b - a
                own_o[j] += ys[member].sum()
                own_e[j] += x[member].sum()
    target_c, target_ece, target_mce = release["statistic"], release["ece"], release["mce"]

    def term(n_: float, o: np.ndarray | float, e: np.ndarray | float) -> np.ndarray | float:
        return (o - e) ** 2 / e + (o - e) ** 2 / (n_ - e)

    rest_c = hosmer_lemeshow(n[2:], own_o[2:], own_e[2:]) if g > 2 else 0.0

    def c_of(a: int, s: np.ndarray | float) -> np.ndarray | float:
        return (rest_c + term(n[0], own_o[0] + a, own_e[0] + s)
                + term(n[1], own_o[1] + o_h - a, own_e[1] + e_h - s))

    def check(a: int, s: float) -> bool:
        o, e = own_o.copy(), own_e.copy()
        o[0], e[0], o[1], e[1] = o[0] + a, e[0] + s, o[1] + o_h - a, e[1] + e_h - s
        ece, mce = calibration_errors(n, o, e)
        return abs(ece - target_ece) < 1e-9 and abs(mce - target_mce) < 1e-9

    found = []
    for a in range(k + 1):
        if not k:
            if abs(c_of(0, 0.0) - target_c) < 1e-7 * max(1.0, target_c) and check(0, 0.0):
                found.append(a)
            continue
        grid = np.linspace(1e-9, 0.999 * k, 20001)
        f = c_of(a, grid) - target_c
        for i in np.flatnonzero(np.sign(f[:-1]) != np.sign(f[1:])):
            root = optimize.brentq(lambda v: c_of(a, v) - target_c, grid[i], grid[i + 1], xtol=1e-15)
            if check(a, root):
                found.append(a)
    return (k, found[0]) if len(set(found)) == 1 else None


def first_group(release: dict, pad: pd.DataFrame) -> tuple[int, int] | None:
    """(k, honest events) of a released table's first group: its count and events less the member's own
    records in it (the member knows them; the group's upper edge is released)."""
    t = release["table"]
    upper = t["edges"][1]
    mine = pad[pad.score <= upper]
    k, events = int(round(t["n"][0])) - len(mine), int(round(t["sum_y"][0])) - int(mine.y.sum())
    return (k, events) if 0 <= k <= 2 * H_SITE else None


def walk(tmp_path: Path, dominance: int) -> tuple[int, int, list[str]]:
    frames = {"h1": honest(51), "h2": honest(52)}
    hon = pd.concat(frames.values(), ignore_index=True)
    frames = {"pad": padding(len(hon)), **frames}
    rules = rules_variant(tmp_path / "rules.toml", dominance_sites=str(dominance))
    with fixed_secrets("redteam deciles"):
        provisioned, services = make_sites(tmp_path, frames, rules)
    outcomes = hon.sort_values("score").y.to_numpy()
    events: dict[int, int] = {}
    withheld, refusals = 0, []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        brier = session.pooled("brierDS", Ref("D$y"), Ref("D$score"))
        pad = frames["pad"]
        o_h, e_h = brier["sum_y"] - pad.y.sum(), brier["sum_p"] - pad.score.sum()
        for g in GS:
            try:
                out = session.pooled("decileGroupsDS", Ref("D$y"), Ref("D$score"), g)
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
                continue
            withheld += out.get("table") is None
            got = decode(g, out, pad, len(hon), o_h, e_h) if out.get("table") is None else first_group(out, pad)
            if got is not None:
                k, a = got
                assert a == int(outcomes[:k].sum())  # what is read is the truth
                events[k] = a
    # between two decoded walks k1 < k2 lie the honest ranks k1 + 1 .. k2: their outcomes are read where
    # a(k2) - a(k1) is 0 or k2 - k1 (one record: always)
    ks = sorted(events)
    read = sum(k2 - k1 for k1, k2 in zip(ks, ks[1:]) if events[k2] - events[k1] in (0, k2 - k1))
    return read, withheld, refusals


@pytest.mark.parametrize("dominance", [0, 1], ids=["shipped dominance_sites 0", "dominance_sites 1"])
def test_a_padding_member_reads_no_outcome_from_the_statistics(tmp_path: Path, dominance: int):
    """On the code before the statistics were released only over groups that may leave (C, ECE and MCE
    exact where the table was withheld), the walk read the outcomes of the 10 lowest of 40 honest records
    at dominance_sites 0 and 1 alike. Now a break the gate drops merges its groups and the statistics are
    those of the merged groups: with the board's dominance rule on, nothing is read; off (the shipped
    files' choice, docs/governance.md "Member sites"), a padding member reads what the released groups
    hold, as from any pooled cell."""
    read, withheld, refusals = walk(tmp_path, dominance)
    print(f"ATTACK padding member walks the first H-L break (dominance_sites = {dominance}): outcomes of {read} "
          f"honest records read from the statistics or the released groups; group table withheld in {withheld} "
          f"of {len(GS)} calls; refusals {sorted(set(refusals))}")
    assert withheld == 0  # the statistics leave only with the groups they are computed on
    if dominance:
        assert read == 0


# --- the analyst alone: a withheld table read from its statistics, against the table of another g -------


def two_groups(n: np.ndarray, total_o: float, total_e: float, release: dict) -> tuple[int, float] | None:
    """Group 1's events and sum of p of a two-group H-L release, from its exact C, ECE and MCE and the
    subset's totals (brierDS)."""
    def term(n_: float, o, e):
        return (o - e) ** 2 / e + (o - e) ** 2 / (n_ - e)

    def c_of(a: int, s):
        return term(n[0], a, s) + term(n[1], total_o - a, total_e - s)

    found = []
    for a in range(int(n[0]) + 1):
        grid = np.linspace(1e-9, n[0] - 1e-9, 40001)
        f = c_of(a, grid) - release["statistic"]
        for i in np.flatnonzero(np.sign(f[:-1]) != np.sign(f[1:])):
            s = optimize.brentq(lambda v: c_of(a, v) - release["statistic"], grid[i], grid[i + 1], xtol=1e-15)
            ece, mce = calibration_errors(n, np.array([a, total_o - a]), np.array([s, total_e - s]))
            if abs(ece - release["ece"]) < 1e-9 and abs(mce - release["mce"]) < 1e-9:
                found.append((a, s))
    return found[0] if len({a for a, _ in found}) == 1 else None


def test_the_analyst_alone_reads_no_record_from_a_withheld_table(tmp_path: Path):
    """decileGroupsDS(D, g = 4) releases its table (breaks at pooled ranks 68, 135, 202); S = D[score >
    break 2] (a released cut, so allowed); decileGroupsDS(S, g = 2) has its median one record above break 3.
    On the code before, its table was withheld (cut history) but C, ECE, MCE were exact: with brierDS(S)
    they gave S's first group (events, sum of p); less D's third group, the one record between (pooled rank
    203): its outcome and exact score 0.711705, 1 record read. Now the median is dropped and, with fewer
    than three groups left, the call is refused."""
    from test_derived_column_attacks import synthetic_frame

    frames = {f"s{k}": synthetic_frame(20 + k, 90) for k in range(1, 4)}
    with fixed_secrets("redteam deciles alone"):
        provisioned, services = make_sites(tmp_path, frames)
    pooled = pd.concat(frames.values(), ignore_index=True).sort_values("score", ignore_index=True)
    n_all = len(pooled)
    read, withheld = [], 0
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        d = session.pooled("decileGroupsDS", Ref("D$y"), Ref("D$score"), 4)
        edges, counts = d["table"]["edges"], np.rint(d["table"]["n"]).astype(int)
        below = np.cumsum(counts)  # records at or below each break (the last: all)
        events = np.concatenate([[0.0], np.cumsum(d["table"]["sum_y"])])
        sums = np.concatenate([[0.0], np.cumsum(d["table"]["sum_p"])])
        for i in range(len(edges) - 2):  # S = D[score > break i + 1]
            r = int(below[i])
            n_s = n_all - r
            n1 = math.floor(1 + (n_s - 1) / 2 + 1e-9)
            j = next((j for j in range(len(below) - 1) if 0 < r + n1 - below[j] < 5), None)
            if j is None:
                continue
            session.assign_expr("S", f'dataFrameSubsetDS2("D", "D$score", "{edges[i + 1]!r}", 5, NULL, NULL, FALSE)')
            totals = session.pooled("brierDS", Ref("S$y"), Ref("S$score"))
            try:
                out = session.pooled("decileGroupsDS", Ref("S$y"), Ref("S$score"), 2)
            except FederatedCallError:  # refused: nothing to decode
                continue
            withheld += out.get("table") is None
            got = two_groups(np.array([n1, n_s - n1]), totals["sum_y"], totals["sum_p"], out)
            if got is None:
                continue
            a, s = got
            k = r + n1 - int(below[j])  # records between break j + 1 of D and S's median
            o_between, p_between = a - (events[j + 1] - events[i + 1]), s - (sums[j + 1] - sums[i + 1])
            rows = pooled.iloc[int(below[j]):r + n1]
            assert round(o_between) == rows.y.sum() and p_between == pytest.approx(rows.score.sum(), abs=1e-9)
            if k == 1 or round(o_between) in (0, k):
                read += rows.score.round(6).tolist()
    print(f"ATTACK analyst alone, a withheld two-group table read from C, ECE, MCE (shipped rules, 3 sites of 90): "
          f"{len(read)} records' outcomes read (and, one alone, its exact score: {read}); tables withheld {withheld}")
    assert not read
