"""Hosmer-Lemeshow C, ECE and MCE over R's deciles of risk of the pooled predictions, found by the
sites on pooled counts (Huang 2020, §3.5.3, §4.8; Wu et al.'s (2012) distributed H-L test).

A pooled protocol of several steps (:class:`~dsfed_server.disclosure.relay.PooledSteps`): the
analyst relays sealed vectors and learns nothing until the last step.

1. Every site counts its predictions at or below a grid of thresholds; the sites pool the counts
   among themselves (sealed from the analyst) and narrow, for every order statistic R's type-7
   quantiles need, the bracket that holds it (:mod:`dsfed_core.quantiles`). Every site derives
   the same next probes from the same pooled counts, so the search needs no analyst input and,
   on exact pooled counts, always settles: the breaks are R's
   ``unique(quantile(p, seq(0, 1, 1/g), type = 7))`` grouping, exactly.
2. Every site sums its records' outcomes and predictions per group; pooled, the sites check that
   every group holds at least q records (the largest q of the sites; a smaller group is merged
   with the next), that every break, with every cut released before on the score's column, leaves
   0 or at least q records between cuts (the release gate's rule, on pooled counts; else the break
   would difference against earlier bins into fewer than q records) and, under
   ``secure_aggregation.dominance_sites``, that every group holds q records outside its largest sites.
   A break the gate does not keep beside an earlier cut moves onto that cut where it may
   (:meth:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts.placed`: a cut released already, so no
   cell a few records wide is made beside the history); a break that cannot move, or bounds a
   dominated group, is dropped and its groups merged.
3. Where a break moved, the groups are others: every site sums its records per group again at the
   breaks placed, and the sites decide on those groups as in step 2, now without moving.

The sites release the group table with the statistics of the groups released -- C with its df, the
group sizes, ECE and MCE -- saying what moved onto which earlier cut (``moved_breaks``), what was
merged, and why (``exact_grouping`` False). The statistics are functions of the groups' sums: released
only over groups that may leave themselves (three non-linear functions of groups kept back would give
their sums again).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dsfed_core.errors import DisclosureRefusal
from dsfed_core.quantiles import Bracket, narrow, probes, targets, type7_groups
from dsfed_server.context import CallContext
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.declared import Declared, PlacedCuts, ProtocolCells
from dsfed_server.disclosure.protocol_cuts import ProtocolCuts
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_core.calibration import calibration_errors, hosmer_lemeshow
from dsfed_server.functions.validation import outcome_and_score
from dsfed_server.registry import P, Param, register

MAX_ROUNDS = 16  # each round narrows every bracket 100-fold; float resolution is reached well before


class DecileSearch:
    """One site's side of the protocol: its sorted predictions, the searches on pooled counts, and
    the gate's side of the groups' breaks (:class:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts`:
    the score column's relayed cut history, its records, where the predictions' records sit in the table)."""

    def __init__(self, y: np.ndarray, p: np.ndarray, g: int, guard: Guard, cuts: ProtocolCuts) -> None:
        self.y, self.p, self.g, self.guard, self.cuts = y, p, g, guard, cuts
        self.x = np.sort(p)
        self.brackets: dict[int, Bracket] = {}
        self.rounds = 0
        self.n = 0
        self.r_groups = 0  # R's groups, once the breaks settle

    def counts(self, thresholds: list[float]) -> PooledSteps:
        """This site's counts at or below ``thresholds``; pooled, they narrow the searches."""
        below = np.searchsorted(self.x, np.asarray(thresholds, dtype=float), side="right").astype(float)
        fields = {"counts": below} if self.rounds else {"n": np.asarray(float(self.x.size)), "counts": below}
        self.rounds += 1

        def advance(pooled: dict[str, np.ndarray], floor: gate.Floor) -> tuple[None, PooledSteps]:
            if "n" in pooled:
                self.n = int(round(float(pooled["n"])))
                self.brackets = {j: Bracket.start(j, self.n, 0.0, 1.0) for j in targets(self.n, self.g)}
            known = {t: (int(round(c)), int(round(c))) for t, c in zip(thresholds, pooled["counts"])}
            for bracket in self.brackets.values():
                narrow(bracket, known)
            following = probes(list(self.brackets.values()), first=False, lower=0.0, upper=1.0)
            if following and self.rounds < MAX_ROUNDS:
                return None, self.counts(following)
            return None, self.group_sums()

        return PooledSteps(fields, advance, frac_bits=0, history_key=self.cuts.key)

    def group_sums(self) -> PooledSteps:
        """This site's count, outcomes and predictions per group of the settled breaks, and the
        column's counts between all cuts (the breaks with the history's), to decide on the groups."""
        groups = type7_groups(self.brackets, self.n, self.g, 0.0, 1.0)
        breaks = gate.cuts_from(groups.breaks[1:-1], inclusive=True)  # R's cut(include.lowest = TRUE)
        roots = self.cuts.to_root(breaks)
        self.r_groups = len(breaks) + 1
        fields = {**self.sums(breaks), **self.cuts.counted(roots)}

        def advance(pooled: dict[str, np.ndarray], floor: gate.Floor
                    ) -> Generator[Declared, Any, tuple[None, PooledSteps]]:
            keep = small_groups_merged(pooled["n"], floor.q)
            refined = self.cuts.pooled_counts(pooled)
            placed, why, moved = yield from self.coarsened(list(roots), keep, pooled, refined, floor, [], move=True)
            if moved:  # the groups are now others: their sums again, at the breaks placed
                return None, self.moved_sums(placed, moved, why, refined, dict(zip(roots, breaks)),
                                             exact=groups.exact)
            return None, (yield from self.released(breaks, placed, pooled, exact=groups.exact, why=why, moved=()))

        # the analyst's fraction bits (40 unless asked for fewer): sums of predictions need the fraction,
        # and a group of millions of records at a site needs fewer bits, which the analyst asks again with
        return PooledSteps(fields, advance, frac_bits=None, history_key=self.cuts.key)

    def sums(self, breaks: Sequence[gate.Cut]) -> dict[str, np.ndarray]:
        """This site's count, outcomes, predictions and squared counts (``secure_aggregation.dominance_sites``)
        per group between ``breaks`` (cuts on the predictions)."""
        n, sums = gate.cell_sums(self.p, breaks, {"sum_y": self.y, "sum_p": self.p})
        dominance = self.guard.rule("secure_aggregation.dominance_sites") > 0
        return {"n": n, **sums, gate.SQUARES: gate.squares(n, dominance)}

    def moved_sums(self, placed: list[gate.Cut | None], moved: list[tuple[int, gate.Cut]], why: list[str],
                   refined: np.ndarray, own: dict[gate.Cut, gate.Cut], *, exact: bool) -> PooledSteps:
        """One more step where breaks moved onto cuts released before: this site's sums per group between the
        breaks placed (:meth:`sums`; ``own``: R's breaks on the predictions by their cuts on the column, the
        moved ones mapped from the column), on which the sites decide again as on R's groups (the groups
        holding q records, the gate, dominance), now without moving, and release."""
        roots = [c for c in placed if c is not None]
        breaks = tuple(own.get(c) or self.cuts.on_values(c) for c in roots)
        dropped = sum(c is None for c in placed)

        def advance(pooled: dict[str, np.ndarray], floor: gate.Floor
                    ) -> Generator[Declared, Any, tuple[None, PooledSteps]]:
            keep = small_groups_merged(pooled["n"], floor.q)
            again, reasons, _ = yield from self.coarsened(roots, keep, pooled, refined, floor, why, move=False)
            still = [(i, to) for i, to in moved if to in again]  # a moved break a later check dropped: merged
            return None, (yield from self.released(breaks, again, pooled, exact=exact, why=reasons, moved=still,
                                                   merged=dropped))

        return PooledSteps(self.sums(breaks), advance, frac_bits=None, history_key=self.cuts.key)

    def released(self, breaks: tuple[gate.Cut, ...], placed: list[gate.Cut | None], pooled: dict[str, np.ndarray],
                 *, exact: bool, why: list[str], moved: Sequence[tuple[int, gate.Cut]], merged: int = 0
                 ) -> Generator[Declared, Any, PooledSteps]:
        """The statistics of the groups between the ``breaks`` (on the predictions) ``placed`` keeps, their
        records audited on pooled objections, then the breaks recorded and the table released."""
        keep = [c is not None for c in placed]
        edges = np.array([0.0, *(c.value for c in breaks), 1.0])
        moves = [[i + 1, self.cuts.on_values(to).value] for i, to in moved]
        kept = tuple(c for c, k in zip(breaks, keep) if k)
        out = statistics(edges, pooled, keep, exact=exact, rounds=self.rounds, why="; ".join(why), moved=moves,
                         merged=merged, upper_closed=[c.inclusive for c in kept])
        return (yield ProtocolCells(self.cuts, [c for c in placed if c is not None], self.p, kept,
                                    np.asarray(out["table"]["n"]), audited=True, result=out))

    def coarsened(self, roots: list[gate.Cut], keep: list[bool], pooled: dict[str, np.ndarray], refined: np.ndarray,
                  floor: gate.Floor, why: list[str], *, move: bool
                  ) -> Generator[Declared, Any, tuple[list[gate.Cut | None], list[str], list[tuple[int, gate.Cut]]]]:
        """Where the breaks (``roots``: the column's cuts; those ``keep`` marks) are released, and why the others
        are not. A break the release gate would not keep beside the cuts released before on the score column (it
        would single out the records between the two) moves, with ``move``, onto the earlier cut next to it,
        else is dropped (:class:`~dsfed_server.disclosure.declared.PlacedCuts`, decided on the sites' pooled
        ``refined`` counts); under ``secure_aggregation.dominance_sites``, the break above a group holding fewer
        than q records outside its largest sites (the one below, for the last group) is dropped, until every
        group passes. A dropped break merges its groups: the statistics are then those of the merged groups,
        functions of cells that may leave, as the table itself. Returns, per break, the cut it is released at
        (None: dropped), why (after the reasons of a step before, ``why``), and the moves (break index, the
        earlier cut): once a break moved, the groups' sums are those of other groups, and the sites take them
        again (:meth:`moved_sums`)."""
        placed: list[gate.Cut | None] = [c if k else None for c, k in zip(roots, keep)]
        why = list(why)
        while True:
            kept = [i for i, c in enumerate(placed) if c is not None]
            answer = yield PlacedCuts(self.cuts, [placed[i] for i in kept], refined, floor, move=move)
            moved = [(i, to) for i, to in zip(kept, answer) if to is not None and to != placed[i]]
            dropped = sum(to is None for to in answer)
            for i, to in zip(kept, answer):
                placed[i] = to
            if moved:
                targets = ", ".join(f"{self.cuts.on_values(to).value:.6g}" for _, to in moved)
                why.append(f"{len(moved)} break(s) within {floor.q} records (and the site's secret margin) of cuts "
                           f"released before on this score column moved onto the nearest cut released before ("
                           f"{targets}): a cut released already parts no record anew (disclosure.cut_history)")
            if dropped:
                why.append(f"{dropped} break(s) within {floor.q} records (and the site's secret margin) of cuts "
                           "released before on this score column (disclosure.cut_history)")
            if moved:
                return placed, why, moved
            if dropped:
                continue
            kept = [i for i, c in enumerate(placed) if c is not None]
            mask = [c is not None for c in placed]
            dominated = gate.dominated_group(pooled["n"], mask, pooled[gate.SQUARES], floor) if kept else None
            if dominated is None:
                break
            placed[kept[min(dominated, len(kept) - 1)]] = None
            if not why or "dominance" not in why[-1]:
                why.append(f"groups holding fewer than {floor.q} records outside their largest contributing "
                           "site merged with the next (secure_aggregation.dominance_sites)")
        if why and sum(c is not None for c in placed) < 2:
            raise DisclosureRefusal(
                f"fewer than 3 of the {self.r_groups} risk groups are left once merged where a group would "
                f"single out fewer than {floor.q} records: {'; '.join(why)}", rule=(
                    "secure_aggregation.dominance_sites" if any("dominance" in w for w in why)
                    else "disclosure.cut_history"),
                hint="Hosmer-Lemeshow H (equal-width bins) or the calibration curve may still be released")
        return placed, why, []


def small_groups_merged(counts: np.ndarray, q: int) -> list[bool]:
    """Per break, whether it stays once every group holding fewer than ``q`` records of the pooled ``counts``
    is merged with the next (as :func:`gate.decide` merges cells, without margin: the sites' own groups)."""
    n = np.rint(counts).astype(np.int64)
    below = np.cumsum(n)[:-1]
    ranks = {0: gate.Cut(-np.inf, False), int(n.sum()): gate.Cut(np.inf, False)}
    none = [False] * below.size
    decided = gate.decide([(ranks, [int(r) for r in below])], gate.Floor(q), again=none, outside=none,
                          pick=gate.first)
    return [d is gate.KEEP for d in decided]


def statistics(breaks: np.ndarray, pooled: dict[str, np.ndarray], keep: list[bool], *, exact: bool, rounds: int,
               why: str, moved: Sequence[list[float]] = (), merged: int = 0, upper_closed: Sequence[bool] = ()
               ) -> dict[str, Any]:
    """H-L C (df = groups - 2), ECE and MCE from the pooled group sums, the groups between the breaks
    ``keep`` marks merged (the result then says the grouping is not R's, and ``why``); ``moved``: the breaks
    (their place among R's, from 1) moved onto a cut released before, and that cut; ``merged``: groups merged
    at a step before (a break dropped there); ``upper_closed``: per break kept, whether the records at it are in
    the group below (R's ``cut``, ``(a, b]``) or, at a break moved onto an earlier cut that holds them above
    (a threshold's ``[a, b)``), in the group above -- in the table per group, the last group's upper edge closed."""
    n = np.rint(pooled["n"]).astype(np.int64)
    bounds = [0] + [i + 1 for i, k in enumerate(keep) if k] + [n.size]
    sums = {name: np.array([pooled[name][a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
            for name in ("n", "sum_y", "sum_p")}
    edges = np.concatenate([[breaks[0]], breaks[1:-1][np.asarray(keep, dtype=bool)], [breaks[-1]]])
    table = pd.DataFrame({"lower": edges[:-1], "upper": edges[1:], "n": np.rint(sums["n"]).astype(int),
                          "observed_1": sums["sum_y"], "expected_1": sums["sum_p"]})
    table = table[table["n"] > 0]
    o1, e1, ng = table.observed_1.to_numpy(), table.expected_1.to_numpy(), table.n.to_numpy()
    ece, mce = calibration_errors(ng, o1, e1)
    return {
        "kind": "C", "statistic": hosmer_lemeshow(ng, o1, e1), "df": int(ng.size - 2), "groups": ng.tolist(),
        "ece": ece, "mce": mce,
        "exact_grouping": bool(exact and all(keep) and not moved and not merged),
        "merged_groups": int(merged + len(keep) - sum(keep)), "moved_breaks": [list(m) for m in moved],
        "rounds": rounds, "why": why,
        "table": {"edges": edges.tolist(), "n": sums["n"].tolist(), "sum_y": sums["sum_y"].tolist(),
                  "sum_p": sums["sum_p"].tolist(), "upper_closed": [*map(bool, upper_closed), True]},
        "pooled": True,
    }


@register(
    "decileGroupsDS",
    "aggregate",
    [
        Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y"),
        Param("score", P.VECTOR, "the predicted probability, e.g. D$score"),
        Param("g", P.INTEGER, "number of quantile groups (10: deciles of risk)", required=False, default=10,
              minimum=2, maximum=100),
    ],
    checks=("disclosure.q_threshold", "disclosure.cut_history", "disclosure.subset_min_difference",
            "secure_aggregation.pooled_thresholds", "secure_aggregation.dominance_sites"),
    pooled_only=True,
)
def decile_groups(ctx: CallContext, truth: pd.Series, score: pd.Series, g: int) -> PooledSteps:
    """Hosmer-Lemeshow C, ECE and MCE over R's type-7 quantile groups of the pooled predictions
    (``hoslem.test``'s grouping), found by the sites on pooled counts: a pooled protocol of several
    steps (see the module docstring); released only pooled, at the last step."""
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    cuts = ProtocolCuts(ctx.guard, p, ctx.root_column(score), ctx.record_rows(truth, score))
    search = DecileSearch(y, p, g, ctx.guard, cuts)
    return search.counts(probes([], first=True, lower=0.0, upper=1.0))
