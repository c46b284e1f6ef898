"""Red team (helper h20) of "Pooled GLM over the complete cases of its stored columns weighed as over the table".

Since that change a relayed fit whose records at a site are the complete cases of the model's stored columns
is weighed there as a fit over the whole table (``glm.own_end`` with ``stored_complete``): its end counts as a
share where the other sites outnumber the site, and nowhere where they do not (their own counts and the pinned
peers and peer tables bound it). Before it such a fit was a subset (``Guard.subset_of_table``) and its end
counted at the site in full. Two routes that aim at the second case (peers of about the site's size, so that
nothing is counted at the attacked site), each measured now, before the change (``stored_complete`` answering
None, as the code before it did) and in a control:

1. ``test_similar_size_peers_cannot_take_ten_complete_cases_apart``: the change's own attack (the attacked site
   of 60 keeps score and age only at the ten records of an age band; ``y ~ score``, ``y ~ age``,
   ``y ~ score + age`` relayed, the other sites' own parts at each estimate subtracted) with peers of 20 records
   each instead of 1,000, so that they do not outnumber the ten records (``glm_peer_ratio`` 2) and the end is
   counted nowhere at the attacked site. Now: refused at a peer (its ``glmDS2`` at the analyst's coefficients
   needs three steps' count over its 20 records), 0 of 10 read. Before the change: refused at the attacked site
   (a subset's end counted in full), 0 read. Control, the peers' counts off: all 10 read -- the peers' counts
   are what protects the ten records now.
2. ``test_peers_rotated_by_their_missing_values``: the attacked site's 60 complete cases of score (of 70) in
   ``yy ~ score``, where ``yy = y + 0*col`` for a column the attacked site holds everywhere but the peers (120
   records each) miss at ten records of their own (income, weight, height, age): each fit goes over the same
   60 records here and over other records at the peers, so its estimate, and the attacked site's end there, is
   new every time while the peer tables stay the same (the peer-table pin does not see it). Each end taken
   apart is checked against the truth. Now: 4 ends (24 functions of the 60 records' scores and outcomes,
   counted nowhere here), the rest refused at the peers (their row-set audit of the derived column); before the
   change: 2 (the attacked site counts the ends over its complete cases). The same attack on a site with no
   missing score (a whole table, uncounted before the change too): 4. So the change puts the complete cases
   where a whole table already was, within ``glm_peer_ratio`` times ``sums_per_record`` (30 functions of 60
   records); 24 functions and the second moments are far fewer than the 120 values: no record is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_client.analyses.glm import Formula
from dsfed_server.disclosure.checks import Guard
from dsfed_server.functions import glm
from sitekit import make_sites
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_glm_complete_cases_share_attack import attack
from test_glm_pooled_share_attack import fit_end


def _before_the_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code before the change: no complete cases of stored columns, so a fit over fewer records than the
    site keeps (by subset_min_difference) is a subset and its end counts at the site in full."""
    monkeypatch.setitem(glm.own_end.__globals__, "stored_complete", lambda ctx, rows, roots: None)


def _peers_uncounted(monkeypatch: pytest.MonkeyPatch, attacked: int) -> None:
    """The control: the peers count nothing (every table but the attacked site's, of ``attacked`` records)."""
    counted = Guard.exact_sums

    def exact_sums(self, rows, *args, **kwargs):
        if rows is not None and rows.n_root != attacked:
            return None
        return counted(self, rows, *args, **kwargs)

    monkeypatch.setattr(Guard, "exact_sums", exact_sums)


# Route 1 ---------------------------------------------------------------------------------------------------------

def _small_peers_attack(tmp: Path) -> tuple[int, list[str]]:
    """The change's own attack (:func:`test_glm_complete_cases_share_attack.attack`) beside two peers of 20."""
    peers = {f"s{k}": synthetic_frame(seed, 1000).iloc[:20].reset_index(drop=True) for k, seed in ((2, 8), (3, 9))}
    return attack(tmp, peers, "h20 small peers")


@pytest.mark.slow
def test_similar_size_peers_cannot_take_ten_complete_cases_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # the peers (20 + 20 records, 0.25 each) afford 10, no more than 2 x 0.25 x 10 x 2: the end counts nowhere here
    read_now, refusals_now = _small_peers_attack(tmp_path / "now")
    print(f"ATTACK ten complete cases at a site of 60 beside two peers of 20 (not outnumbered: its end counted "
          f"nowhere), three relayed fits taken apart: read {read_now} of 10; refusals {refusals_now}")
    assert read_now == 0 and refusals_now == ["s2: disclosure.sums_per_record"]  # glmDS2 at a peer, not the site
    with monkeypatch.context() as patch:
        _before_the_change(patch)
        read_before, refusals_before = _small_peers_attack(tmp_path / "before")
    print(f"BEFORE THE CHANGE the ten complete cases a subset, its end counted in full: read {read_before} of 10; "
          f"refusals {refusals_before}")
    assert read_before == 0 and refusals_before == ["s1: disclosure.sums_per_record"]
    _peers_uncounted(monkeypatch, 60)
    read_control, refusals_control = _small_peers_attack(tmp_path / "control")
    print(f"CONTROL the peers' counts off: read {read_control} of 10; refusals {refusals_control}")
    assert read_control == 10 and refusals_control == []


# Route 2 ---------------------------------------------------------------------------------------------------------

ROTATE = ("income", "weight", "height", "age")
SITE, COMPLETE, PEER = 70, 60, 120
FORMULA = Formula("yy ~ score")


def _rotation_frames(missing: bool) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    truth = synthetic_frame(7, SITE)
    attacked = truth.copy()
    if missing:
        attacked.loc[COMPLETE:, "score"] = np.nan  # ten records without a score: 60 complete cases
    frames = {"s1": attacked}
    for k, seed in ((2, 8), (3, 9)):
        peer = synthetic_frame(seed, PEER)
        for j, column in enumerate(ROTATE):  # each rotating column missing at ten records of its own
            peer.loc[10 * j:10 * j + 9, column] = np.nan
        frames[f"s{k}"] = peer
    return truth, frames


def _rotation_attack(tmp: Path, missing: bool) -> tuple[int, list[str]]:
    """How many of the attacked site's ends over its complete cases the analyst takes apart exactly (each
    checked against the truth), and the refusals (site: rule)."""
    truth, frames = _rotation_frames(missing)
    records = truth.iloc[:COMPLETE] if missing else truth
    x = np.column_stack([np.ones(len(records)), records.score.to_numpy()])
    y = records.y.to_numpy(dtype=float)
    with fixed_secrets("h20 rotation"):
        provisioned, services = make_sites(tmp, frames)
    taken, refusals = 0, []
    sets = [(), *((c,) for c in ROTATE), ("income", "height")]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for columns in sets:
            try:
                session.derive("W", "D$y" + "".join(f" + 0*D${c}" for c in columns))
                session.assign_expr("T", 'cbindDS("W,D$score", "yy,score")')
                beta, info, xwz, dev = fit_end(session, "yy ~ score", "T")
                for peer in ("s2", "s3"):
                    parts = session.site_view(peer).aggregate("glmDS2", FORMULA, "binomial", [float(b) for b in beta],
                                                              None, None, Ref("T"))[peer]
                    info = info - np.asarray(parts["info.matrix"], float)
                    xwz = xwz - np.asarray(parts["xwz"], float)
                    dev -= float(parts["dev"])
            except FederatedCallError as exc:
                refusals += [f"{site}: {e.rule}" for site, e in exc.failures.items()]
                continue
            mu = expit(x @ beta)
            want_info = x.T @ (x * (mu * (1 - mu))[:, None])
            want_score = x.T @ (y - mu)
            want_dev = -2 * float(np.sum(y * np.log(mu) + (1 - y) * np.log(1 - mu)))
            assert np.abs(info - want_info).max() < 1e-6
            assert np.abs((xwz - info @ beta) - want_score).max() < 1e-6
            assert abs(dev - want_dev) < 1e-6
            taken += 1
    return taken, refusals


def test_peers_rotated_by_their_missing_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    now, refusals_now = _rotation_attack(tmp_path / "now", missing=True)
    print(f"ATTACK the same 60 complete cases fitted beside peers whose records rotate with a column they miss: "
          f"{now} ends taken apart ({6 * now} functions of 60 records' scores and outcomes, 120 values; read 0); "
          f"refusals {refusals_now}")
    assert now == 4 and not any(r.startswith("s1:") for r in refusals_now)  # bound by the peers' row-set audit
    whole, refusals_whole = _rotation_attack(tmp_path / "whole", missing=False)
    print(f"SAME ATTACK on a whole table of 70 (uncounted before the change too): {whole} ends taken apart; "
          f"refusals {refusals_whole}")
    assert whole == 4
    _before_the_change(monkeypatch)
    before, refusals_before = _rotation_attack(tmp_path / "before", missing=True)
    print(f"BEFORE THE CHANGE (complete cases a subset, ends counted here in full): {before} ends taken apart; "
          f"refusals {refusals_before}")
    assert before == 2 and "s1: disclosure.sums_per_record" in refusals_before
