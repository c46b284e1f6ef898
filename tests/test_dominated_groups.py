"""Hosmer-Lemeshow C's groups against a member site that made up its records (the padding member of
docs/governance.md, "Member sites"): the sites find the groups' breaks on pooled counts, so a member
knows them, and its own share of every group; subtracted from the released group table, what is left
is the honest sites' few records per group, with their outcomes. Under ``secure_aggregation.
dominance_sites = 1`` a released group must hold q records outside its largest contributing site;
the protocol's last step now checks that too (it checked only the one-step pooled releases).

Three in-process sites under the shipped rules with the dominance rule on at every site (the shipped
files leave it off, a board's choice; the test says so): a padding member of 600 records and two honest
sites of 20. Measured: the honest records the member and the analyst read per group below q, before
(the rule's check missing from the protocol, as on the code before this test) and now.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from rref import r_eval, r_hl_on_edges
from sitekit import make_sites, rules_variant
from test_derived_column_attacks import fixed_secrets

Q = 5


def frame(seed: int, n: int) -> pd.DataFrame:
    """n made-up records: distinct scores with 6 decimals and an outcome drawn from them."""
    rng = np.random.default_rng(seed)
    score = rng.choice(np.arange(1, 1_000_000), n, replace=False) / 1_000_000
    return pd.DataFrame({"y": (rng.uniform(size=n) < score).astype(np.int64), "score": score})


def honest_read(table: dict | None, padding: pd.DataFrame, honest: pd.DataFrame) -> int:
    """Honest records in groups where the released count less the member's own is below q, all of the
    same outcome (checked against the truth): what the member reads by subtraction."""
    if table is None:
        return 0
    edges = np.asarray(table["edges"], dtype=float)
    read = 0
    for j, (n, events) in enumerate(zip(table["n"], table["sum_y"])):
        lo, hi = edges[j], edges[j + 1]
        inside = (lambda f: (f.score > lo) & (f.score <= hi) | ((j == 0) & (f.score == lo)))
        mine = padding[inside(padding)]
        left, left_events = int(round(n)) - len(mine), int(round(events)) - int(mine.y.sum())
        theirs = honest[inside(honest)]
        assert left == len(theirs) and left_events == int(theirs.y.sum())  # what is read is the truth
        if 0 < left < Q and left_events in (0, left):
            read += left
    return read


@pytest.mark.parametrize("dominance", [1, 0], ids=["dominance rule on", "off"])
def test_a_padding_member_reads_no_honest_record_of_the_groups(tmp_path: Path, dominance: int):
    frames = {"padding": frame(31, 600), "h1": frame(32, 20), "h2": frame(33, 20)}
    rules = rules_variant(tmp_path / "rules.toml", dominance_sites=str(dominance))
    with fixed_secrets("dominated groups"):
        provisioned, services = make_sites(tmp_path, frames, rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        try:
            out = session.pooled("decileGroupsDS", Ref("D$y"), Ref("D$score"), 10)
        except FederatedCallError as exc:  # every group dominated: merged below three groups, refused
            out = None
            rules_named = {e.rule for e in exc.failures.values()}
    honest = pd.concat([frames["h1"], frames["h2"]], ignore_index=True)
    read = honest_read(out["table"] if out else None, frames["padding"], honest)
    print(f"ATTACK padding member against H-L C's groups (dominance_sites = {dominance}): read {read} of "
          f"{len(honest)} honest records{'' if out else ' (refused)'}")
    if out is None:  # the statistic too: three non-linear functions of the groups would give them back
        assert dominance and rules_named == {"secure_aggregation.dominance_sites"}
        return
    pooled = pd.concat(frames.values(), ignore_index=True)
    y, p = pooled.y.to_numpy(), pooled.score.to_numpy()
    # the statistic is that of the groups released (R's deciles, merged where the rule merges them)
    edges = out["table"]["edges"]
    deciles = r_eval("unique(quantile(p, 0:10/10))", p=p)  # each released break parts the records as one of R's
    assert {int(np.sum(p <= e)) for e in edges[1:-1]} <= {int(np.sum(p <= d)) for d in deciles}
    assert out["statistic"] == pytest.approx(r_hl_on_edges(y, p, edges), rel=1e-8)
    if dominance:
        assert read == 0 and len(edges) < 11 and "dominance_sites" in out["why"]
    else:
        assert read >= 5 and len(edges) == 11  # the attack is real where the rule is off (8 of 40 when written)
