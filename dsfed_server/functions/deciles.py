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
   A break that fails is dropped and its groups merged, and the sites release the group table with
   the statistics of the groups released -- C with its df, the group sizes, ECE and MCE -- saying
   what was merged and why (``exact_grouping`` False). The statistics are functions of the groups'
   sums: released only over groups that may leave themselves (three non-linear functions of groups
   kept back would give their sums again).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from dsfed_core.errors import DisclosureRefusal
from dsfed_core.quantiles import Bracket, narrow, probes, targets, type7_groups
from dsfed_server.context import CallContext
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.declared import CandidateCuts, Declared, ProtocolCells
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
        n, sums = gate.cell_sums(self.p, breaks, {"sum_y": self.y, "sum_p": self.p})
        dominance = self.guard.rule("secure_aggregation.dominance_sites") > 0
        fields = {"n": n, **sums, "refined": self.cuts.counted(self.cuts.to_root(breaks)),
                  gate.SQUARES: gate.squares(n, dominance)}

        def advance(pooled: dict[str, np.ndarray], floor: gate.Floor
                    ) -> Generator[Declared, Any, tuple[None, PooledSteps]]:
            keep, why = yield from self.coarsened(breaks, small_groups_merged(pooled["n"], floor.q), pooled, floor)
            out = statistics(groups.breaks, pooled, keep, exact=groups.exact, rounds=self.rounds, why=why)
            kept = tuple(c for c, k in zip(breaks, keep) if k)
            # the groups' records audited on pooled objections, then the breaks recorded and the table released
            audit = yield ProtocolCells(self.cuts, self.cuts.to_root(kept), self.p, kept,
                                        np.asarray(out["table"]["n"]), audited=True, result=out)
            return None, audit

        # the analyst's fraction bits (40 unless asked for fewer): sums of predictions need the fraction,
        # and a group of millions of records at a site needs fewer bits, which the analyst asks again with
        return PooledSteps(fields, advance, frac_bits=None, history_key=self.cuts.key)

    def coarsened(self, breaks: tuple[gate.Cut, ...], keep: list[bool], pooled: dict[str, np.ndarray],
                  floor: gate.Floor) -> Generator[Declared, Any, tuple[list[bool], str]]:
        """Which breaks the sites release, and why the others are not: a break the release gate would not
        keep beside the cuts released before on the score column (it would single out the records between
        the two) and, under ``secure_aggregation.dominance_sites``, the break above a group holding fewer
        than q records outside its largest sites (the one below, for the last group) are dropped, their
        groups merged, until every group passes. The statistics are then those of the merged groups:
        functions of cells that may leave, as the table itself. Each try of the breaks is declared
        (:class:`~dsfed_server.disclosure.declared.CandidateCuts`) and decided on the pooled counts."""
        keep, why = list(keep), []
        while True:
            kept = [i for i, k in enumerate(keep) if k]
            fits = yield CandidateCuts(self.cuts, self.cuts.to_root([breaks[i] for i in kept]), pooled["refined"],
                                       floor)
            if not fits.all():
                for i in np.flatnonzero(~fits):
                    keep[kept[i]] = False
                why.append(f"{int((~fits).sum())} break(s) within {floor.q} records (and the site's secret margin) "
                           "of cuts released before on this score column (disclosure.cut_history)")
                continue
            dominated = gate.dominated_group(pooled["n"], keep, pooled[gate.SQUARES], floor) if kept else None
            if dominated is None:
                break
            keep[kept[min(dominated, len(kept) - 1)]] = False
            if not why or "dominance" not in why[-1]:
                why.append(f"groups holding fewer than {floor.q} records outside their largest contributing "
                           "site merged with the next (secure_aggregation.dominance_sites)")
        if why and sum(keep) < 2:
            raise DisclosureRefusal(
                f"fewer than 3 of the {len(breaks) + 1} risk groups are left once merged where a group would "
                f"single out fewer than {floor.q} records: {'; '.join(why)}", rule=(
                    "secure_aggregation.dominance_sites" if any("dominance" in w for w in why)
                    else "disclosure.cut_history"),
                hint="Hosmer-Lemeshow H (equal-width bins) or the calibration curve may still be released")
        return keep, "; ".join(why)


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
               why: str) -> dict[str, Any]:
    """H-L C (df = groups - 2), ECE and MCE from the pooled group sums, the groups between the breaks
    ``keep`` marks merged (the result then says the grouping is not R's, and ``why``)."""
    n = np.rint(pooled["n"]).astype(np.int64)
    bounds = [0] + [i + 1 for i, k in enumerate(keep) if k] + [n.size]
    merged = {name: np.array([pooled[name][a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
              for name in ("n", "sum_y", "sum_p")}
    edges = np.concatenate([[breaks[0]], breaks[1:-1][np.asarray(keep, dtype=bool)], [breaks[-1]]])
    table = pd.DataFrame({"lower": edges[:-1], "upper": edges[1:], "n": np.rint(merged["n"]).astype(int),
                          "observed_1": merged["sum_y"], "expected_1": merged["sum_p"]})
    table = table[table["n"] > 0]
    o1, e1, ng = table.observed_1.to_numpy(), table.expected_1.to_numpy(), table.n.to_numpy()
    ece, mce = calibration_errors(ng, o1, e1)
    return {
        "kind": "C", "statistic": hosmer_lemeshow(ng, o1, e1), "df": int(ng.size - 2), "groups": ng.tolist(),
        "ece": ece, "mce": mce,
        "exact_grouping": bool(exact and all(keep)), "merged_groups": int(len(keep) - sum(keep)), "rounds": rounds,
        "why": why,
        "table": {"edges": edges.tolist(), "n": merged["n"].tolist(), "sum_y": merged["sum_y"].tolist(),
                  "sum_p": merged["sum_p"].tolist()},
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
