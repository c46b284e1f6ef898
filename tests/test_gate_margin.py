"""The release gate's secret margin (``disclosure.cut_margin``), measured against its stated law.

A new cell of ``q + s`` records (``s`` records to spare, ``0 <= s < cut_margin``) is released with
probability 1 - 2^-(s + 1): the site draws a margin per cell, geometric with p = 1/2 and capped at
``cut_margin``, with a key the analyst does not hold. A cell of ``q + cut_margin`` records or more
is always released; the same cell draws the same margin for every account, every later ask and
after a restart; the sites of a pooled release draw it alike. Each threshold below cuts a fresh
table (its own history), ``k`` records below it: the kept fraction per ``k`` is compared with the
law by an exact binomial test at a level that a correct gate fails once in about 10^5 runs, and a
fixed minimum of ``q`` (every such cut kept) fails it by far.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from conftest import inprocess_builder
from dsfed_client import Ref
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import ROOT, rules_variant, write_table

Q, MARGIN, N = 5, 5, 50
ALPHA = 1e-6  # per binomial test


def kept_probability(k: int) -> float:
    """The law: a cell of k records (k >= q) is released with probability 1 - 2^-(k - q + 1)."""
    return 1.0 if k >= Q + MARGIN else 1.0 - 0.5 ** (k - Q + 1)


def _plan(per_k: dict[int, int]) -> list[int]:
    return [k for k, times in per_k.items() for _ in range(times)]


def _sites(tmp: Path, names: tuple[str, ...], plan: list[int], seed: int) -> tuple[dict, dict, list[float]]:
    """Sites holding one table per planned cut (``t0``, ``t1``, ...; column ``x``, N decimal values
    at each site) and the threshold for table j: between the pooled k-th and (k+1)-th values."""
    rng = np.random.default_rng(seed)
    thresholds = []
    for j, k in enumerate(plan):
        values = {s: rng.uniform(0, 100, N) for s in names}
        pooled = np.sort(np.concatenate(list(values.values())))
        thresholds.append(float((pooled[k - 1] + pooled[k]) / 2))
        for s in names:
            write_table(tmp / "data" / s, pd.DataFrame({"x": values[s]}), table=f"t{j}")
    rules = ROOT / "disclosure_rules" / "default.toml"
    provisioned = provision(tmp / "run", {s: (tmp / "data" / s, rules) for s in names})
    return provisioned, _services(provisioned), thresholds


def _services(provisioned: dict) -> dict[str, SiteService]:
    return {s: SiteService.from_config_file(p.config) for s, p in provisioned.items()}


def _ask(session, j: int, t: float, pooled: bool = False) -> int | None:
    session.assign_table("T", f"P.t{j}")
    if pooled:
        return session.pooled("countBelowDS", Ref("T$x"), [t])["counts"][0]
    (result,) = session.aggregate("countBelowDS", Ref("T$x"), [t]).values()
    return result["counts"][0]


def _assert_law(plan: list[int], kept: list[bool]) -> None:
    for k in sorted(set(plan)):
        hits = [keep for kk, keep in zip(plan, kept) if kk == k]
        p = kept_probability(k)
        if p == 1.0:
            assert all(hits), f"a cell of {k} >= q + margin records was not released"
            continue
        test = stats.binomtest(sum(hits), len(hits), p)
        assert test.pvalue > ALPHA, f"k = {k}: {sum(hits)}/{len(hits)} released, law {p:.4f} (p = {test.pvalue:.2e})"
    fixed_q = [k for k in plan if k < Q + MARGIN]
    assert sum(not keep for k, keep in zip(plan, kept) if k < Q + MARGIN) > 0.05 * len(fixed_q), \
        "near-threshold cells were all released: no margin"


def test_a_new_cell_is_released_with_the_margin_law(tmp_path):
    """One site, a fresh table per cut: the kept fraction per k follows 1 - 2^-(k - 4) (q = 5,
    cut_margin = 5), cells of 10 or 11 records are always kept, and a kept cut's count is exact.
    The same cut asked again, by a second account, and after a restart gets the same answer; a
    dropped cut moved to another value with the same records below it stays dropped."""
    plan = _plan({5: 60, 6: 50, 7: 40, 8: 30, 9: 30, 10: 10, 11: 10})
    provisioned, services, thresholds = _sites(tmp_path, ("s1",), plan, seed=11)
    with inprocess_builder(provisioned, services).login() as s:
        first = [_ask(s, j, t) for j, t in enumerate(thresholds)]
    kept = [c is not None for c in first]
    assert all(c == k for c, k in zip(first, plan) if c is not None)
    _assert_law(plan, kept)

    x = {j: pd.read_csv(tmp_path / "data" / "s1" / "P" / f"t{j}.csv").x.to_numpy() for j in range(len(plan))}
    services = _services(provisioned)  # a restart: the same secret, the persisted history
    with inprocess_builder(provisioned, services, user="analyst2").login() as s:
        again = [_ask(s, j, t) for j, t in enumerate(thresholds)]
        nearby = {}
        for j, t in enumerate(thresholds):
            if first[j] is None:
                above = np.sort(x[j])[plan[j]]
                nearby[j] = _ask(s, j, float((t + above) / 2))  # the same k records below
    assert again == first
    assert nearby and all(c is None for c in nearby.values())


def test_pooled_sites_draw_the_same_margin(tmp_path):
    """Three sites under secure aggregation, a fresh table per cut, k pooled records below it (any
    number at each site): the pooled kept fraction follows the same law, every site releases the
    same answer (the client checks), and asking again gives it again."""
    plan = _plan({5: 30, 6: 24, 7: 16, 10: 6})
    provisioned, services, thresholds = _sites(tmp_path, ("s1", "s2", "s3"), plan, seed=12)
    with inprocess_builder(provisioned, services).login() as s:
        first = [_ask(s, j, t, pooled=True) for j, t in enumerate(thresholds)]
        again = [_ask(s, j, t, pooled=True) for j, t in enumerate(thresholds)]
    assert all(c == k for c, k in zip(first, plan) if c is not None)
    _assert_law(plan, [c is not None for c in first])
    assert again == first


def test_pooled_sites_with_different_declared_ranges_agree(tmp_path):
    """Site s1's dictionary declares x in [0, 100], s2's and s3's in [11, 99]; the cut lies below 10,
    with 5 pooled records below it (all at s1). For s2 and s3 alone it would be public (outside
    their declared range) and always kept; the sites decide on the hull of the declared ranges, so
    all release the same (no error from the client's check) and the cell of 5 is released only as
    often as the margin law says (about half of 20 tables)."""
    rng = np.random.default_rng(14)
    names, thresholds = ("s1", "s2", "s3"), []
    for j in range(20):
        values = {"s1": np.r_[rng.uniform(0, 9, 6), rng.uniform(11, 99, N - 6)],
                  "s2": rng.uniform(11, 99, N), "s3": rng.uniform(11, 99, N)}
        values["s1"][[0, 6]] = (0.2, 99.8)  # s1 declares [0, 100]; the others [11, 99]
        low = np.sort(values["s1"][values["s1"] < 10])
        thresholds.append(float((low[4] + low[5]) / 2))
        for site in names:
            write_table(tmp_path / "data" / site, pd.DataFrame({"x": values[site]}), table=f"t{j}")
    rules = ROOT / "disclosure_rules" / "default.toml"
    provisioned = provision(tmp_path / "run", {s: (tmp_path / "data" / s, rules) for s in names})
    with inprocess_builder(provisioned, _services(provisioned)).login() as s:
        counts = [_ask(s, j, t, pooled=True) for j, t in enumerate(thresholds)]
    assert set(counts) <= {5, None}
    assert stats.binomtest(counts.count(5), 20, kept_probability(5)).pvalue > ALPHA


def test_without_a_margin_q_records_suffice(tmp_path):
    """cut_margin = 0 (a governance choice, e.g. the no-noise test profile): a fixed minimum of q,
    every cell of q records or more released, none of q - 1."""
    plan = _plan({4: 5, 5: 10, 6: 5})
    rng = np.random.default_rng(13)
    thresholds = []
    for j, k in enumerate(plan):
        x = rng.uniform(0, 100, N)
        thresholds.append(float(np.mean(np.sort(x)[k - 1:k + 1])))
        write_table(tmp_path / "data" / "s1", pd.DataFrame({"x": x}), table=f"t{j}")
    rules = rules_variant(tmp_path / "rules.toml", cut_margin="0")
    provisioned = provision(tmp_path / "run", {"s1": (tmp_path / "data" / "s1", rules)})
    with inprocess_builder(provisioned, _services(provisioned)).login() as s:
        counts = [_ask(s, j, t) for j, t in enumerate(thresholds)]
    assert counts == [k if k >= Q else None for k in plan]
