"""A pooled release is given to the analyst only once every site of the round has recorded it, measured.

Each site audits a pooled cell's records against the cells it has recorded before
(:mod:`dsfed_server.disclosure.differencing`). The analyst relays every step and may call the sites one at
a time: before this check, a site released the pooled result as soon as the last step opened, so an analyst
who called one site for the last step read the release there, and the other sites, never called, never
recorded it. Their audits of a later, nested release then had nothing to compare with.

The attack is the nested-subset difference of ``test_pooled_row_sets`` (the pooled metrics on ``age >= a``
for a few ages a; the difference of two consecutive releases' cells is the records of one age band in one
score cell, read where it holds fewer than q records that all had the event or none did), with every pooled
release's last step sent to ``s1`` alone. Now a site that opens a step in which it released something
seals one more step and gives the release only when that step opens, which needs every site's share, sealed
after it recorded the release: the analyst must call every site, and the audits see every earlier release.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd

from dsfed_client import FederatedCallError
from dsfed_client.calls import Ref
from dsfed_client.session import addressed_to
from test_pooled_row_sets import AGES, AUDITED, bands_read, three_sites
from test_redteam_reference_tables import sealed_first_step

FIRST = "s1"  # the one site the hostile analyst calls for a release's last step


def at(session, sites: list[str]):
    """The session's calls sent to ``sites`` alone (the same site sessions, round and steps)."""
    view = copy.copy(session)
    view.transports = {site: session.transports[site] for site in sites}
    view.session_ids = {site: session.session_ids[site] for site in sites}
    return view


def last_step_at_one_site(session, function: str, *args: Any, seen: list[dict] | None = None) -> dict[str, Any]:
    """A pooled release whose steps are relayed as the honest client does, except that each opening goes to
    ``s1`` first, and to the other sites only if ``s1`` answers with a further step: once ``s1`` gives the
    release, the others are never called. ``seen``: every answer of ``s1`` to an opening, in order."""
    round_id, roster, step, sealed = sealed_first_step(session, function, *args)
    while True:
        body = {"round": round_id, "step": step, "roster": roster, "next_step": session._step()}
        first = at(session, [FIRST])._in_session(
            function, "POST", "/pooled", per_site={FIRST: {**body, "relay": addressed_to(FIRST, sealed)}})[FIRST]
        session._learn_histories({FIRST: first["result"]})
        if seen is not None:
            seen.append(first["result"])
        if "continue" not in first["result"]:
            return first["result"]["release"]
        others = [site for site in sealed if site != FIRST]
        answers = {s: r["result"] for s, r in at(session, others)._in_session(
            function, "POST", "/pooled", per_site={site: {**body, "relay": addressed_to(site, sealed)}
                                                   for site in others}).items()}
        answers[FIRST] = first["result"]
        sealed, step = {site: a["continue"] for site, a in answers.items()}, body["next_step"]


def released_cells(session, a: int) -> dict[tuple[float, float], tuple[int, int]] | None:
    session.assign_expr("T", f'dataFrameSubsetDS2("D", "D$age", "{a}", 6, NULL, NULL, FALSE)')
    release = last_step_at_one_site(session, "thresholdBinsDS", Ref("T$y"), Ref("T$score"),
                                    [round(0.1 * k, 1) for k in range(1, 10)])
    edges = release["edges"]
    return {(edges[i], edges[i + 1]): (int(n), int(e)) for i, (n, e) in enumerate(zip(release["n"], release["sum_y"]))}


def test_a_release_whose_last_step_reaches_one_site_reads_no_outcome(tmp_path: Path):
    truth, builder = three_sites(tmp_path)
    released: dict[int, dict] = {}
    refusals: list[str] = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        for a in AGES:
            try:
                released[a] = released_cells(session, a)
            except FederatedCallError as exc:
                refusals += [e.rule or e.kind for e in exc.failures.values()]
    read = sum(len(band) for band in bands_read(released, truth))
    print(f"ATTACK nested pooled releases, each release's last step sent to {FIRST} alone (shipped rules, 3 sites "
          f"of 90): read the outcomes of {read} records; released {len(released)} of {len(AGES)}; refusals "
          f"{sorted(set(refusals))}")
    assert read == 0
    assert len(released) + len(refusals) > 0


def test_the_honest_client_gets_the_same_cells_as_pandas_after_the_extra_step(tmp_path: Path):
    """The honest relay (every site called at every step) still gets the pooled cells, equal to pandas on the
    pooled records, and every site gives the same release."""
    truth, builder = three_sites(tmp_path)
    with builder.login() as session:
        session.assign_table("D", "P.t")
        release = session.pooled("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 4)
    cells = pd.cut(truth.score, release["edges"], right=False)
    assert release["n"] == truth.groupby(cells, observed=False).size().tolist()
    assert release["sum_y"] == truth.groupby(cells, observed=False).y.sum().tolist()
    assert AUDITED not in release.get("why", "")


def test_the_cuts_a_held_release_recorded_leave_with_it(tmp_path: Path):
    """Found by review: the site opened first answered the step that recorded a held release with its cut history,
    the new edges already in it, before the other sites recorded anything. The history now leaves with the release:
    no answer that holds a further step names the new edges; the one that gives the release does."""
    _, builder = three_sites(tmp_path)
    edges = [0.37, 0.61]
    seen: list[dict] = []
    with builder.login() as session:
        session.assign_table("D", "P.t")
        release = last_step_at_one_site(session, "histogramDS", Ref("D$score"), [0.0, *edges, 1.0], seen=seen)

    def named(answer: dict) -> set[float]:
        return {float(v) for v, _ in (answer.get("history") or {}).get("cuts", [])} & set(edges)

    assert release is not None and [a for a in seen if "continue" not in a] == [seen[-1]]
    assert all(not named(a) for a in seen if "continue" in a)
    assert named(seen[-1]) == set(edges)
