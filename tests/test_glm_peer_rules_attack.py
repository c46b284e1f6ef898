"""Red team: a small site's protection beside peers that keep at most ``disclosure.glm_peer_ratio`` times
its records rests on the peers' rules, which it cannot see. Where the other sites of a fit summed over its whole
table keep on average no more than the ratio times its records, its end counts nowhere, on the argument (docs/
governance.md, "The GLM's parts are sums too") that the analyst takes it out of the sum only with every other
site's own parts at the estimate, counted there, so at most the smallest peer's count: the ratio times
``sums_per_record`` functions of each of its columns per record. That count is the peer's, under the peer's
``sums_per_record`` (any number from 0 to 1), not this site's.

Three sites, one table each, one set of peers: the small site of 36 records of tests/test_glm_many_peers_attack.py
under the shipped rules (default.toml) beside two peers of 72 (twice its records: its ends count nowhere). The
analyst fits eight logistic models of the score and the other columns relayed over the three whole tables, and
asks both peers for their own parts at each estimate: each end left is the small site's information, score
equations and deviance at the estimate (checked here against numpy on its records to 1e-6). Beside peers under
the shipped rules their counts stop the take-apart at 6 functions of the score (one end, of ``y ~ score``: the
peers' 18 cannot answer three analyst steps of a larger model); beside peers whose ``sums_per_record`` is 1 (a
value the rules allow: "a number from 0 to 1") the analyst takes apart 66 functions of the small site's 36 scores
(seven ends), where the governance text bounds it at 18, and nothing is refused at the small site (the control,
each site's count taken as the shipped share of its records, as before). No record is read here (the models' ends
are of several columns); the test pins the count. Now each site's start sums what its own count affords
(``Guard.affords``: its ``sums_per_record`` times its records, unbounded without a history), and the small site
compares the others' with the ratio times its own: beside the generous peers its ends count, at half a function
each, and at most 18 functions of its score are taken apart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.disclosure.checks import Guard
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import DEFAULT_RULES, _MADE, write_table
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_many_peers_attack import PEER, SMALL, peer
from test_glm_pooled_share_attack import site_end

PEERS = ("pa", "pb")
MODELS = ["y ~ score + age", "y ~ score + weight", "y ~ score + height", "y ~ score + age + weight",
          "y ~ score + age + height", "y ~ score + weight + height", "y ~ score", "y ~ score + income"]


def design(frame: pd.DataFrame, formula: str) -> np.ndarray:
    terms = [t.strip() for t in formula.split("~")[1].split("+")]
    return np.column_stack([np.ones(len(frame))] + [frame[t].to_numpy(float) for t in terms])


def truth_end(truth: pd.DataFrame, formula: str, beta: np.ndarray) -> np.ndarray:
    """The small site's information, score equations and deviance at ``beta`` (numpy on its records)."""
    x, y = design(truth, formula), truth.y.to_numpy(float)
    mu = expit(x @ beta)
    dev = -2 * np.sum(y * np.log(mu) + (1 - y) * np.log(1 - mu))
    return np.r_[((x.T * (mu * (1 - mu))) @ x).ravel(), x.T @ (y - mu), dev]


def attack(tmp: Path, peer_rules: Path) -> tuple[int, list[str]]:
    """The functions of the small site's score in its ends taken apart exactly (as its count would name them:
    p(p+1)/2 + p + 1 an end), and the refusals."""
    truth = synthetic_frame(7, SMALL)
    frames = {"s1": truth, "pa": peer(200, 0.3), "pb": peer(220, 0.7)}
    spec = {}
    for name, frame in frames.items():
        write_table(tmp / "data" / name, frame)
        spec[name] = (tmp / "data" / name, DEFAULT_RULES if name == "s1" else peer_rules)
    with fixed_secrets("peer rules"):
        provisioned = provision(tmp / "run", spec)
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    _MADE.extend(services.values())
    functions, refusals = 0, []
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for formula in MODELS:
            try:
                beta, info, score, dev = site_end(session, session, PEERS, formula, "D")
            except FederatedCallError as exc:
                refusals += [f"{site}: {e.rule or e.kind}" for site, e in exc.failures.items()]
                continue
            end = np.r_[info.ravel(), score, dev]
            if np.allclose(end, truth_end(truth, formula, beta), rtol=1e-6, atol=1e-6):
                p = beta.size
                functions += p * (p + 1) // 2 + p + 1
    return functions, refusals


def test_a_small_sites_ends_taken_apart_no_more_than_its_count_allows_whatever_its_peers_rules(tmp_path: Path,
                                                                                               monkeypatch):
    generous = tmp_path / "peer.toml"
    generous.write_text(DEFAULT_RULES.read_text().replace("\nsums_per_record = 0.25\n", "\nsums_per_record = 1.0\n"))
    assert generous.read_text() != DEFAULT_RULES.read_text()
    shipped, refused = attack(tmp_path / "shipped", DEFAULT_RULES)
    print(f"SHIPPED peers of {PEER} under the shipped rules: {shipped} functions of the score of the site of {SMALL} "
          f"taken apart; refusals {refused}")
    assert shipped <= 18
    more, refused_more = attack(tmp_path / "generous", generous)
    print(f"ATTACK peers of {PEER} with sums_per_record 1: {more} functions of the score of the site of {SMALL} "
          f"taken apart; refusals {refused_more}")
    assert more <= 18 and "s1: disclosure.sums_per_record" in refused_more  # its ends count at the small site
    monkeypatch.setattr(Guard, "affords", lambda self, rows: 0.25 * self.kept_records(rows))  # as before
    before, refused_before = attack(tmp_path / "before", generous)
    print(f"CONTROL every count taken as the shipped share of its records: {before} functions taken apart; "
          f"refusals {refused_before}")
    assert before > SMALL and not any(r.startswith("s1:") for r in refused_before)
