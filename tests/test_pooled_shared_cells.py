"""Pooled cells decided on the pooled records: a second model keeps its cells, and a relay the analyst bends
reads nothing.

A site audits a new pooled cell against the pooled cells released before. Alone, it sees only its own records:
where the new cell is nested at this site in an earlier one by 1 to 4 records, and the pooled counts differ by
fewer than 5 too, it cannot tell whether the other sites' records of the two are nested alike, so it objected,
and at five sites of 50 nearly every cell of a second model's scores was merged (the AUC over them: 0.50). The
sites now give each pooled cell an identity and, where the analyst relays it, sum per pair of cells their records
in one and not the other: a cell is objected to where that pooled number is 1 to 4.

The attack (``test_pooled_row_sets``: nested subsets, whose cells differ by the records of one age band) is run
with the relay as the analyst would bend it: every cell, none, counts moved so that no pair is formed, an
identity with another count beside the true one. A cell the relay does not carry as the site keeps it is decided
by the site alone, as before. With the cells relayed and the pooled decision left out (each site skipping the
relayed cells in its own audit and objecting to nothing on the pooled numbers), the attack read the outcomes of
23 records in 11 groups below q.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT
from test_merged_cells_interval import pooled_auc
from test_pooled_row_sets import AUDITED, STOPPED, attack, three_sites

sys.path.insert(0, str(ROOT / "bench"))
from comparison_coverage import two_scores, write_sites  # noqa: E402  (bench/comparison_coverage.py)
from curves import bench_rules, login  # noqa: E402  (bench/curves.py)
from dsfed_client.analyses.curves import ds_hist_auc  # noqa: E402
from dsfed_server.provision import provision  # noqa: E402
from dsfed_server.service import SiteService  # noqa: E402
from dsfed_server.synthetic import PROJECT  # noqa: E402

Cells = set[tuple[str, int, str]]
BENDS: dict[str, Callable[[Cells], Cells]] = {
    "as answered": lambda cells: cells,
    "none": lambda cells: set(),
    "counts moved": lambda cells: {(i, n + 1000, c) for i, n, c in cells},
    "another count beside": lambda cells: cells | {(i, n + 1, c) for i, n, c in cells},
}


@pytest.mark.parametrize("bend", list(BENDS))
def test_nested_subsets_read_no_outcome_whatever_the_relay(tmp_path: Path, bend: str):
    truth, builder = three_sites(tmp_path)
    STOPPED.clear()
    with builder.login() as session:
        session.assign_table("D", "P.t")
        learn = session._learn_histories

        def bent(answers):  # what the analyst relays next: the cells the sites answered with, bent
            grew = learn(answers)
            session._pooled_cells = BENDS[bend](session._pooled_cells)
            return grew

        session._learn_histories = bent
        read, groups, refusals = attack(session, truth)
    print(f"ATTACK pooled cells of nested subsets, relayed cells {bend} (shipped rules, 3 sites of 90): read the "
          f"outcomes of {read} records in {groups} groups below q; refusals: {sorted(set(refusals))}")
    assert read == 0
    assert AUDITED in refusals + STOPPED


def test_a_second_model_keeps_its_cells_and_its_interval_holds_the_pooled_auc(tmp_path: Path):
    """Five sites of 50 (binormal, the second score the first's logit plus noise), shipped default rules with the
    budget raised for two models' histograms at full epsilon (as the benchmarks do). Before, 90 % of the second
    model's pairs were tied by merged cells and its AUC came from the histograms alone."""
    frame = two_scores(250, 7)
    write_sites(tmp_path / "data", frame)
    rules = bench_rules(tmp_path / "rules.toml")
    prov = provision(tmp_path / "run", {f"site{i + 1}": (tmp_path / "data" / f"site{i + 1}", rules) for i in range(5)})
    services = {s: SiteService.from_config_file(p.config) for s, p in prov.items()}
    with login(prov, services).login() as session:
        session.assign_table("D", f"{PROJECT}.t")
        ds_hist_auc(session, "D$y", "D$score", secure=True)
        second = ds_hist_auc(session, "D$y", "D$score_b", secure=True)
    truth = pooled_auc(frame, "score_b")
    print(f"second model: AUC {second.auc:.4f} {tuple(second.ci_logit)}, merged pairs {second.merged_pairs:.3f}, "
          f"pooled {truth:.4f}; {second.estimator}")
    assert second.merged_pairs < 0.2
    assert not second.estimator.startswith("histograms alone")
    assert second.ci_logit.lower <= truth <= second.ci_logit.upper
