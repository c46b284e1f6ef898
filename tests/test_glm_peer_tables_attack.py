"""Red team: one set of peer *sites* per table is not one set of peer *tables*. A fit relayed over
``secure_aggregation.min_sites`` sites or more goes over the table's one set of peers (``Guard.peer_set`` keyed on
the tables this site read and the names of the round's sites), on the argument that the other sites' own parts at
the estimate take this site's end out of the sum only as often as the smallest of them affords. But each other
site affords its count per table it keeps, and ``assignTable(tables = "site=project.table", ...)`` (one definition
at every site, so the masks cancel) lets the analyst load another table at each peer fit after fit while the small
site sees the same peer sites every time. A peer hospital with several tables of the same dictionary (cohorts by
year, a development and a validation table, an Opal view) pays each take-apart from another table's count.

Three sites under the shipped rules (``sitekit.make_sites``: default.toml): the small site of 36 records of
tests/test_glm_many_peers_attack.py beside two peers, each holding ``TABLES`` tables of 72 records (its peers'
size there: on average twice its records, so its end counts nowhere; each table affords three ends' own parts)
whose outcomes follow the score with different calibrations. The analyst relays ``y ~ score`` over the three
sites with each peer on another of its tables (each table in three fits), and asks both peers for their own parts
at the estimate: the small site's end (six sums over its 36 records) at ``3 * TABLES`` estimates, each equal to the
sums over the truth's records (checked here with numpy to 1e-6), none counted there. With its own cubic
least-squares fit, the solve of tests/test_glm_many_peers_attack.py reads its records. Nothing is refused.

The governance text bounds what the analyst takes apart beside one set of peers at the smallest peer's count:
72 * 0.25 = 18 functions (three ends). Measured with ten tables a peer (the control, as before): 30 ends, 180
functions of the small site's 36 records, 8 records read. Now each site's start sums its tag of its table, so that
a site learns a fingerprint of the other sites' tables, and where its end counts nowhere (its peers keep no more
than ``glm_peer_ratio`` times its records) fits over its table go over the same tables of theirs every time
(``Guard.same_peer_tables``, for every analyst): the first fit is released, every other refused at the small site.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites, write_table
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_many_peers_attack import PEER, SMALL, peer, read
from test_glm_pooled_share_attack import site_end

TABLES = 10  # tables of the same dictionary at each peer
PEERS = ("pa", "pb")


def truth_end(truth: pd.DataFrame, beta: np.ndarray) -> np.ndarray:
    """The small site's information, score equations and deviance at ``beta`` (numpy on its records)."""
    s, y = truth.score.to_numpy(float), truth.y.to_numpy(float)
    mu = expit(beta[0] + beta[1] * s)
    w = mu * (1 - mu)
    dev = -2 * np.sum(y * np.log(mu) + (1 - y) * np.log(1 - mu))
    return np.array([w.sum(), (w * s).sum(), (w * s * s).sum(), (y - mu).sum(), ((y - mu) * s).sum(), dev])


def attack(tmp: Path, tables: int) -> tuple[int, int, list[str]]:
    """The small site's ends taken apart (each checked against the truth), the records read, the refusals."""
    truth = synthetic_frame(7, SMALL)
    frames = {"s1": truth}
    centres = np.linspace(0.1, 0.9, 2 * tables)
    for k, name in enumerate(PEERS):
        for t in range(1, tables):  # P.t is make_sites' own; P.u1 ... at the peer beside it
            write_table(tmp / "data" / name, peer(200 + 20 * k + t, centres[k * tables + t]), table=f"u{t}")
        frames[name] = peer(200 + 20 * k, centres[k * tables])
    names = ["P.t"] + [f"P.u{t}" for t in range(1, tables)]
    fits = [(i, (i + d) % tables) for i in range(tables) for d in range(3)]  # each table in three fits
    with fixed_secrets("peer tables"):
        provisioned, services = make_sites(tmp, frames)
    found: dict = {"ends": []}
    refusals: list[str] = []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        own = session.site_view("s1")
        found["n"] = int(own.aggregate_expr("dimDS(D)")["s1"][0])
        model = "y ~ score + I(score^2) + I(score^3)"
        own.assign_expr("g", f'glmSLMADS.assign({model}, "gaussian", NULL, NULL, "D")')
        g = own.aggregate_expr(f'glmSLMADS2({model}, "gaussian", NULL, NULL, "g", "D")')["s1"]
        xtx = np.linalg.inv(np.asarray(g["cov.unscaled"], float))
        found["powers"] = np.r_[xtx[0, 1:], xtx[3, 1:]]
        found["positive"] = xtx @ np.asarray(g["coefficients"], float)[:, 0]
        exact = 0
        for a, b in fits:
            session.site_tables = {"s1": "P.t", "pa": names[a], "pb": names[b]}
            session.assign_table("D")  # assignTable(tables = ...): one definition at the three sites
            try:
                beta, info, score, dev = site_end(session, session, PEERS, "y ~ score", "D")
            except FederatedCallError as exc:
                refusals += [f"{site}: {e.rule or e.kind}" for site, e in exc.failures.items()]
                continue
            got = np.array([info[0, 0], info[0, 1], info[1, 1], score[0], score[1], dev])
            exact += bool(np.allclose(got, truth_end(truth, beta), rtol=1e-6, atol=1e-6))
            found["ends"].append((beta, info, score, dev))
    return exact, read(found, truth), refusals


@pytest.mark.slow
def test_a_small_sites_end_taken_apart_through_its_peers_other_tables_reads_no_record(tmp_path: Path, monkeypatch):
    ends, read_now, refusals = attack(tmp_path / "now", TABLES)
    print(f"ATTACK y ~ score relayed over a site of {SMALL} and two peers, each on another of its {TABLES} tables "
          f"of {PEER} (shipped rules): {ends} ends taken apart, read {read_now} of {SMALL}; {len(refusals)} refusals "
          f"({sorted(set(refusals))})")
    assert ends == 1 and read_now == 0  # the first fit's tables are pinned: every other pair of tables refused
    assert "s1: disclosure.glm_peer_ratio" in refusals and all(r.endswith(": disclosure.glm_peer_ratio")
                                                                for r in refusals)  # the peers pin theirs too
    monkeypatch.setattr(Guard, "same_peer_tables", lambda self, *args: None)  # the control: any tables, as before
    ends, read_before, refusals = attack(tmp_path / "before", TABLES)
    print(f"CONTROL any tables of the peers: {ends} ends taken apart exactly ({6 * ends} sums of its {SMALL} "
          f"records; the bound beside one set of peers: {int(PEER * 0.25)}), read {read_before} of {SMALL}; "
          f"refusals {refusals}")
    assert refusals == [] and ends == 3 * TABLES  # each peer table pays its own three
    assert read_before >= 5
