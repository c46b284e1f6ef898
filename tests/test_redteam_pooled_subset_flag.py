"""Red team of pooled releases where only some sites drop records (a helper's review of that change), measured.

To let sites whose exports miss a few values take part in a pooled release beside complete ones, every site says
whether its records of the call are all of the column's with a value, and the sum decides for all (the cells'
column label, two counting spaces, moving cuts). The review found the sum could be steered: a subset whose
condition drops a chosen record or not, by that record's outcome, came back labelled with the column or "", 6
of 6 targets' outcomes read (the condition ``k > thr``, a column on each side, which no cut checked). Looking on,
it found that the same construction's refusals binary-search a record's score (15 subsets, 2^-15), and the lead
found a literal cut on such a combination (``D$y*1000 - D$w > -96.5``) answered "nothing below" only where the
target's outcome is 1.

Now: a comparison with a column on each side is not made (as in an expression); an end of a column of no single
root is never answered empty (the gate drops the cut, as it would a cell of one record); and a release's cells
are a column's only where read from the table itself, not from a subset. Three in-process sites of 200 under the
shipped rules, ten records without outcome or score at each; a target is the only record with ``w = 97``; each
target read in a fresh federation in its true world and in the world with its outcome flipped, and counted where
the two answers differ and the reading is the truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import Call, FederatedCallError
from dsfed_client.analyses.thresholds import ds_threshold_metrics
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.checks import Guard
from sitekit import make_sites

TARGETS = [("a", 100, 0.0), ("a", 150, 1.0), ("b", 40, 1.0), ("b", 120, 0.0), ("c", 60, 0.0), ("c", 180, 1.0)]
Q = 5  # disclosure.q_threshold of disclosure_rules/default.toml


def _frames(site: str, row: int, outcome: float) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    frames = {}
    for name in ("a", "b", "c"):
        n = 200
        score = rng.uniform(0, 1, n)
        w = rng.integers(20, 91, n).astype(float)
        y = (rng.uniform(0, 1, n) < score).astype(float)
        frame = pd.DataFrame({"y": y, "score": score, "w": w})
        frame.loc[:9, ["y", "score"]] = np.nan  # ten records without outcome or score at every site
        frames[name] = frame
    frames[site].loc[row, ["w", "y"]] = [97.0, outcome]  # the target: the only w of 97, its score kept
    return frames


def _answer(tmp: Path, frames: dict[str, pd.DataFrame], subset: Callable) -> str:
    """What the analyst sees of a subset built to keep the target only where its outcome is 1: the labels of a
    pooled release's cells on it, or the refusal (its text, the same words in either world or not)."""
    with inprocess_builder(*make_sites(tmp, frames)).login() as session:
        session.assign_table("D", "P.t")
        session.derive("k", "D$y * 1000 - D$w")
        try:
            subset(session)
        except FederatedCallError as refused:
            return "refused: " + " | ".join(sorted(f"{e.rule}: {e.message}" for e in refused.failures.values()))
        before = set(session._pooled_cells)
        ds_threshold_metrics(session, "S$y", "S$score", [0.5], secure=True)
        return "labels: " + ",".join(sorted({c for _, _, c in set(session._pooled_cells) - before}))


def outcomes_read(tmp: Path, subset: Callable) -> int:
    read = 0
    for i, (site, row, outcome) in enumerate(TARGETS):
        seen = {y: _answer(tmp / f"t{i}-{int(y)}", _frames(site, row, y), subset) for y in (outcome, 1.0 - outcome)}
        ones = next(iter(seen.values())) if outcome == 1.0 else seen[1.0 - outcome]  # the answer where y is 1
        guess = 1.0 if seen[outcome] == ones else 0.0
        read += int(seen[outcome] != seen[1.0 - outcome] and guess == outcome)
    return read


def two_columns(session) -> None:
    session.derive("thr", "0 * D$w - 96.5")
    session.assign("S", Call("dataFrameSubsetDS2", "D", "k", "thr", 5))


def a_number(session) -> None:
    session.assign("S", Call("dataFrameSubsetDS2", "D", "k", "-96.5", 5))


def test_a_comparison_of_two_columns_reads_no_outcome(tmp_path: Path):
    """``k > thr`` (``thr`` a column of one value): the condition is not made, in either world."""
    read = outcomes_read(tmp_path, two_columns)
    print(f"ATTACK the pooled cells' label on a subset k > thr: {read} of {len(TARGETS)} outcomes read "
          "(the change under review: 6 of 6)")
    assert read == 0


def test_a_literal_cut_on_a_built_combination_reads_no_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``k > -96.5``: only the target can lie below, where its outcome is 0. The end below is not answered empty,
    so the subset is refused in both worlds. The control answers that end as a table column's is: the refusal
    then reads every target's outcome."""
    read = outcomes_read(tmp_path / "now", a_number)
    print(f"ATTACK a cut on D$y*1000 - D$w: {read} of {len(TARGETS)} outcomes read")
    assert read == 0
    decide = gate.decide
    monkeypatch.setattr(gate, "decide", lambda *args, **kwargs: decide(*args, **{**kwargs, "ends": True}))
    read_control = outcomes_read(tmp_path / "control", a_number)
    print(f"CONTROL that end answered empty once: {read_control} of {len(TARGETS)}")
    assert read_control == len(TARGETS)


def _bisection(tmp: Path, score: float) -> list[bool]:
    """The answers (made or refused) of sixteen subsets ``k > thr`` bisecting the target's score, where it is
    ``score``."""
    frames = _frames("a", 100, 1.0)
    frames["a"].loc[100, "score"] = score
    lo, hi, answers = 0.0, 1.0, []
    with inprocess_builder(*make_sites(tmp, frames)).login() as session:
        session.assign_table("D", "P.t")
        session.derive("k", "D$score + 10 * (96.5 - D$w)")
        for i in range(16):
            s = 0.0 if i == 0 else (lo + hi) / 2
            session.derive(f"thr{i}", f"0 * D$w + {s - 5!r}")
            try:
                session.assign(f"S{i}", Call("dataFrameSubsetDS2", "D", "k", f"thr{i}", 5))
                answers.append(True)
                lo = s
            except FederatedCallError:
                answers.append(False)
                hi = s if i else hi
    return answers


def test_refusals_of_two_column_conditions_bisect_no_score(tmp_path: Path):
    """The look-on find: ``k = score + 10 (96.5 - w)`` keeps every record but the target above ``thr = s - 5``,
    and a later subset that differs from an earlier one by the target alone is refused; fifteen such subsets read
    its score to 2^-15 before. Now no such subset is made, whatever the score: the answers are the same for a
    target at 0.2 and at 0.8."""
    low, high = _bisection(tmp_path / "low", 0.2), _bisection(tmp_path / "high", 0.8)
    print(f"ATTACK bisection by refusals: answers at 0.2 {low}, at 0.8 {high}")
    assert low == high and not any(low)


def _whole_then_complete_cases(tmp: Path) -> int:
    """Pooled thresholds on the whole table at 0.3, 0.5, 0.7, then on the complete cases of the score (a subset
    by a cut outside the score's range) at thresholds one pooled record above them (placed from the truth, the
    attacker's best case); with the cut history hidden, the pair check alone stands between the two."""
    frames = _frames("a", 100, 1.0)
    for frame in frames.values():
        frame.loc[:9, "y"] = 0.0  # outcomes known, scores missing: a complete-case subset drops ten records a site
    thresholds = [0.3, 0.5, 0.7]
    pooled = pd.concat(frames.values()).dropna()
    ss = np.sort(pooled.score.to_numpy())
    shifted = [float((ss[i] + ss[i + 1]) / 2) for i in (np.searchsorted(ss, t) for t in thresholds)]
    with inprocess_builder(*make_sites(tmp, frames)).login() as session:
        session.assign_table("D", "P.t")
        whole = ds_threshold_metrics(session, "D$y", "D$score", thresholds, secure=True).to_frame()
        session.assign("S", Call("dataFrameSubsetDS2", "D", "D$score", "-1", 5))
        try:
            subset = ds_threshold_metrics(session, "S$y", "S$score", shifted, secure=True).to_frame()
        except FederatedCallError:
            return 0
    read = 0
    for t, t2 in zip(thresholds, shifted):
        if t2 in subset.index and t in whole.index:
            diff = (int(whole.loc[t, "tp"] - subset.loc[t2, "tp"]), int(whole.loc[t, "fp"] - subset.loc[t2, "fp"]))
            between = pooled[(pooled.score >= t) & (pooled.score < t2)]
            if diff == (int((between.y == 1).sum()), int((between.y == 0).sum())) and 0 < sum(diff) < Q:
                read += sum(diff) if min(diff) == 0 else 0
    return read


def test_a_complete_case_subset_is_paired_with_the_whole_tables_cells(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """A subset's cells are paired with earlier cells of the table (their label is not the column's), so the pair
    check stands beside the cut history. The review's control hid the history: under the size-only rule the
    subset's cells counted as the column's and the pairs one record apart went through (3 outcomes)."""
    monkeypatch.setattr(Guard, "pooled_history", lambda self, key: [])
    read = _whole_then_complete_cases(tmp_path / "now")
    print(f"ATTACK whole and complete-case thresholds one record apart, the cut history hidden: {read} read")
    assert read == 0
    monkeypatch.setattr(gate.Intervals, "all_of_column", property(
        lambda self: self.column is not None and self.column.transform.identity
        and self.x.size == self.column.values.size))
    read_control = _whole_then_complete_cases(tmp_path / "control")
    print(f"CONTROL a subset's cells taken for the column's by their size: {read_control} read")
    assert read_control == 3
