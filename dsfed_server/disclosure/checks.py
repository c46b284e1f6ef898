"""Disclosure checks: the one place where the rules file's thresholds are applied.

A :class:`Guard` is bound to one call (site, function, rules). Implementations
call its methods before they release anything; each method either returns or
raises :class:`DisclosureRefusal` naming the rule (the dotted key of the rules
file) and what the analyst can do. A refusal never states the count that fell
short (that number would itself be the disclosure).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from dsfed_core.calltree import Column, Node, Symbol
from dsfed_server.disclosure.accountant import Cap, Caps
from dsfed_server.disclosure.equations import APART, RULE as SUMS_RULE, Summed, second_moment, too_many
from dsfed_server.disclosure.missingness import RULES as MISSING_RULES
from dsfed_server.disclosure.expressions import X, Classified, ExpressionRefused, Meaning, classify
from dsfed_server.disclosure.differencing import (AuditTooLarge, PooledCell, Rows, SharedCell, bits, combined,
                                                 combined_spans, differs_little, nearest_sets,
                                                 isolated_records, near_spans, packed_set,
                                                 packed_rows, pooled_pair_problem, pooled_problem_cells, row_set_audit,
                                                 row_set_problem, rows_of, set_size, SharedPairs,
                                                 shared_pair_problems, shared_pairs, spanned_gap, superset_gap,
                                                 with_identities)
from dsfed_server.disclosure.shared_tables import own_key
from dsfed_server.disclosure.gate import (KEEP, Categories, Cells, Cut, Floor, Intervals, PooledRelease, canonical,
                                         cell_index, cuts_from, decide_local,
                                         margin_note, release_local, site_pick)
from dsfed_server.disclosure.mechanisms import AnalyticGaussian, content_digest, seeded_rng
from dsfed_server.disclosure.snapping import snap_dropped
from dsfed_server.disclosure.unions import (Layout, Refined, Union, across, breaking_cell, breaking_cuts, column_of,
                                           in_order, kind_of, layout, refinement, spanned, strays, union_of_cells,
                                           whole_cells)
from dsfed_server.disclosure.provenance import NO_TABLE, STRATA_MOST, RootColumn
from dsfed_server.disclosure.relay import PooledSteps, Recorded
from dsfed_server.disclosure.rules import Rules
from dsfed_server.param_types import P
from dsfed_core.errors import CallError, ContractViolation, DisclosureRefusal


# the caps a noisy release is charged against (the call's scope checks them: scope.CallScope.check)
BUDGET_RULES = ("budget.epsilon_per_table", "budget.delta_per_table", "budget.epsilon_per_analyst",
                "budget.delta_per_analyst")


# rules the site applies to every call's arguments, whatever the function (a function declares none of them)
CALL_RULES = ("disclosure.combine_analyst_vectors",)
# what the release gate applies to a declaration of cells or a subset's condition (:meth:`Guard.release`,
# :meth:`Guard.subset_rows`): q, the secret margin, the cut history, the row-set audit and, for cells released alone,
# another site's few records of a pooled cell (:meth:`Guard._thin_complement`)
GATE_RULES = ("disclosure.q_threshold", "disclosure.cut_margin", "disclosure.cut_history",
              "disclosure.subset_min_difference", "secure_aggregation.pooled_thresholds")
# what reading a derived column's expression applies (:meth:`Guard.derived_expression`)
DERIVED_RULES = ("disclosure.derived_concentration", "disclosure.derived_dominance")
# what a release of exact sums of columns applies (:meth:`Guard.exact_sums`): q, and the functions each
# group of records answers, counted with the release history kept (cut_history), and, alone, the records of a
# few-valued column's levels or a derived column's 0/1 factors, audited as row sets (:meth:`Guard._audit_supports`)
# and against another site's few records of a pooled cell (:meth:`Guard._refuse_thin`)
SUM_RULES = ("disclosure.q_threshold", "disclosure.cut_history", "disclosure.sums_per_record",
             "disclosure.subset_min_difference", "secure_aggregation.pooled_thresholds")
# how many times a site's records the other sites of a fit summed over its whole table keep before its end counts
# here, and the share of a function such an end counts (:meth:`Guard.peers_outnumber`, :meth:`Guard.exact_sums`)
PEER_RULE = "disclosure.glm_peer_ratio"
# what a site whose count bounds nothing affords (no history kept): more than any table's records times the ratio
UNCOUNTED = 1e8
# a pooled release's fields per span of its cells (Guard.coarsened): whether a site holds 1 to q - 1 records of it,
# and how many of its records of it no release of that site alone gives
THIN, HIDDEN, HOLDERS, FAILING, UNAUDITED, UNION = "thin", "hidden", "holders", "failing", "unaudited", "union"
PIECES = "pieces"  # per cell of a pooled release: a site thin in a part of it that earlier releases cut (Guard._pieces)
UNION_ALONE = ("a site released alone before its records of some of these pooled cells together, cells the sites do "
               "not check as one (intervals apart, some of a row's cells, two categories), and another site holds 1 "
               "to q - 1 records of one of them: the pooled count of those cells less the sites' own would give them")
THIN_COMPLEMENT = ("with what this site released alone before (by any analyst), this would give the number of its "
                   "records of a cell released pooled before in which another site held fewer than q records: once "
                   "the other sites release theirs alone too, the pooled count less theirs would be those few "
                   "records'")
# what a release of a factor's levels applies (:meth:`Guard.factor_levels`)
LEVEL_RULES = ("disclosure.max_factor_levels", "disclosure.factor_levels_density")
# what a noisy release applies (:meth:`Guard.mechanism`, :meth:`Guard.noisy`): the mechanism and the budget
NOISE_RULES = ("privacy.mechanism", "privacy.epsilon", "privacy.delta", "privacy.score_l2_sensitivity",
               *BUDGET_RULES)


class HistoryBehind(Exception):
    """A pooled release relayed a cut history for a column that misses cuts this site released:
    the site answers with its history instead of sealing (the analyst relays the union next time)."""

    def __init__(self, key: tuple[str, str], cuts: list[Cut]) -> None:
        super().__init__(f"cut history of {key} behind")
        self.key, self.cuts = key, cuts


SPAN_CELLS = 64  # the most consecutive cells of a pooled release whose union cell_spans() checks as one
MAX_SPANS = 4096  # and runs no longer than keep a release's spans within this many (a vector field each)
EXPOSED_AUDITS = 64  # spans per release a site audits in full as its release alone (Guard._fails_alone)
HELD_CELLS = 16  # cells of a release a site holds every record of that the audit counts as released alone with it
KEPT_COMBINED = 32  # kept row sets of pooled cells an audit combines (Guard._against_kept, Guard._fails_alone)
KEPT_LATEST = 8  # of them, the latest always (differencing.nearest_sets), the rest those nearest the audited set


Span = tuple[int, ...]  # cells of a pooled release (their positions, ascending) whose union is checked as one


def cell_spans(n_cells: int, ordered: bool, shape: tuple[int, ...] = ()) -> list[Span]:
    """The spans of a pooled release's cells that the sites check as one (:meth:`Guard.coarsened`), alike at
    every site: each cell; for cells in order (intervals of a column) every run of 2 to :data:`SPAN_CELLS`
    consecutive cells (fewer where the release has so many cells that the runs would pass :data:`MAX_SPANS`: 16 of
    256 bins), whose union an analyst can ask alone at the other sites with cuts released pooled; for a table of
    two factors (``shape``) each row and each column, which a table of one factor asks alone."""
    singles = [(k,) for k in range(n_cells)]
    if ordered:
        longest = min(SPAN_CELLS, n_cells, max(1, MAX_SPANS // max(n_cells, 1)))
        return singles + [tuple(range(start, start + size)) for size in range(2, longest + 1)
                          for start in range(n_cells - size + 1)]
    if len(shape) == 2 and int(np.prod(shape)) == n_cells:
        grid = np.arange(n_cells).reshape(shape)
        return singles + [tuple(row) for row in grid.tolist()] + [tuple(col) for col in grid.T.tolist()]
    return singles


def apart(cells: set[int]) -> set[int]:
    """Of ``cells`` (positions), those merged with the cell above in one round: no two adjacent, so that a run
    of them merges in pairs rather than into one cell (the next round checks the merged cells again)."""
    out: set[int] = set()
    for cell in sorted(cells):
        if cell - 1 not in out:
            out.add(cell)
    return out


def merged_at(span: Span, n_cells: int) -> int:
    """The cell of ``span`` merged with the next (:meth:`Guard.coarsened` drops the cut above it): its last, or,
    where it ends at the last cell, the one before its first (the cut below it), so that the span's records are no
    longer a union of released cells. A span of every cell: its last (the release is then refused or merged
    whole)."""
    end = span[-1]
    return end if end < n_cells - 1 or span[0] == 0 else span[0] - 1


def _with_parts(row_sets: list[np.ndarray], parts: list[np.ndarray]) -> list[np.ndarray]:
    """The row sets (boolean over the table) and those of their ``parts`` that are none of them, each once."""
    known = {np.packbits(m).tobytes() for m in row_sets}
    return [*row_sets, *(p for p in parts if np.packbits(p).tobytes() not in known)]


def span_rows(cells: list[PooledCell], spans: list[Span]) -> list[np.ndarray]:
    """This site's records (packed) of each span of ``cells``: the union of its records of the span's cells."""
    packed = [packed_set(c.rows) for c in cells]
    return [np.bitwise_or.reduce([packed[k] for k in span]) for span in spans]


@dataclass(frozen=True)
class Guard:
    rules: Rules
    site: str
    function: str
    secret: bytes = field(repr=False, default=b"")
    # the running call's reads and pending releases (dsfed_server.disclosure.scope.CallScope);
    # None outside an analyst call (then nothing is charged)
    scope: Any = field(repr=False, default=None)
    # the site's release history (history.History): cuts per table column and subset row sets,
    # for all analysts, persisted; None: nothing kept (outside a site, e.g. in unit tests)
    history: Any = field(repr=False, default=None)
    # the records of a site table its releases are over, where the site leaves some out (a pattern of missing
    # values few records share: catalog.Catalog.kept); None: all of them
    kept: Callable[[str], np.ndarray | None] | None = field(repr=False, default=None)
    # this site's share of the DP noise variance (1/h in a secure sum; secure_aggregation.honest_sites)
    noise_share: float = 1.0
    # a pooled release (relay.py): minimum counts are checked on the pooled counts, not on this site's
    # own; min_count and saturation record (kind, n) here and the pooled release checks the sums
    deferred: list[tuple[str, int]] | None = field(repr=False, default=None)
    # a pooled release: every cut released before on each column at the sites of the round, as the
    # analyst relayed them (checked to hold this site's own history)
    relayed_cuts: dict[tuple[str, str], list[Cut]] | None = field(repr=False, default=None)
    # a pooled release: the pooled cells released before (at any site, of any table) as the analyst relayed them,
    # whose pairs with the new cells the sites decide on the pooled records (Guard.coarsened)
    relayed_cells: list[SharedCell] | None = field(repr=False, default=None)
    # the rules this call applied (rules-file keys), in the order first applied: the service compares
    # them with the function's declared checks before anything is released (the contract)
    applied: dict[str, None] = field(repr=False, default_factory=dict, compare=False)

    def rule(self, key: str) -> Any:
        """The value of the rules file's ``key`` (``"disclosure.q_threshold"``), recorded as applied in
        this call: every rule a check or a function applies is read here, and only here."""
        self.applied.setdefault(key)
        section, name = key.split(".")
        return getattr(getattr(self.rules, section), name)

    def _refuse(self, message: str, rule: str, hint: str) -> DisclosureRefusal:
        self.applied.setdefault(rule)
        return DisclosureRefusal(message, site=self.site, function=self.function, rule=rule, hint=hint)

    @property
    def q(self) -> int:
        return self.rule("disclosure.q_threshold")

    @property
    def floor(self) -> Floor:
        """What a new cell of this site's release gate holds: q and the secret margin (``disclosure.cut_margin``,
        none without ``disclosure.cut_history``)."""
        margin = self.rule("disclosure.cut_margin") if self.rule("disclosure.cut_history") else 0
        return Floor(self.q, margin, self.secret)

    def joint_cells(self, xa: np.ndarray, xb: np.ndarray, cuts_a: tuple[Cut, ...], cuts_b: tuple[Cut, ...],
                    rows: Rows | None) -> tuple[tuple[Cut, ...], tuple[Cut, ...], str]:
        """The cuts of two scores' cells whose joint cells this site releases as a two-way table (:meth:`release`
        of :class:`~dsfed_server.disclosure.gate.Categories`: every non-empty cell at least q records, the row-set
        audit), each score's cells merged in pairs until they pass, and why they were merged."""
        why = ""
        while True:
            na, nb = len(cuts_a) + 1, len(cuts_b) + 1
            codes = cell_index(xa, cuts_a) * nb + cell_index(xb, cuts_b)
            try:
                self.release(Categories(codes, (na, nb), lambda released: None,
                                        what="joint cells of the two scores' reference bins", rows=rows))
                return cuts_a, cuts_b, why
            except DisclosureRefusal as refusal:
                if not cuts_a and not cuts_b:
                    raise
                why = (f"joint cells of the two scores merged in pairs (to {(na + 1) // 2} x {(nb + 1) // 2}): "
                       f"{refusal} -- the covariance of the two AUCs is read over coarser cells")
                cuts_a, cuts_b = cuts_a[1::2], cuts_b[1::2]

    def group_cells(self, codes: np.ndarray, n_cells: int, rows: Rows | None) -> list[int]:
        """The groups of one or two factors (each record's cell ``codes``, ``n_cells`` in all) released as a
        table of counts (:meth:`release` of :class:`~dsfed_server.disclosure.gate.Categories`: every non-empty
        group at least q records, the row-set audit), before anything is computed by group: a release of
        several steps, the sums by group read over the released groups (and kept on the site by an assign,
        which releases nothing yet checks the same groups). Returns the groups withheld (:meth:`release_groups`)."""
        return self.release_groups(Categories(codes, (n_cells,), lambda released: None, what="groups", rows=rows))

    def pooled_only(self, name: str) -> None:
        """A table of counts in cells released pooled (the ROC-GLM's for a pooled fit): this site's own
        records of a cell may not fill it, so only a pooled release over the sites reads it."""
        if self.deferred is None:
            raise self._refuse(
                f"{name} holds this site's counts in cells released pooled, which its own records of a cell may not "
                "fill: only a pooled release over the sites reads it", "disclosure.q_threshold",
                "read it in a pooled release (secure aggregation; the dsfed client: secure=True), or make it for "
                "this site alone (pooled = FALSE)")

    def working_weights(self, family: str, effective: float, hint: str) -> None:
        """Refuse a GLM step whose working weights :math:`W_i` rest on fewer than q records (``effective``,
        Kish's effective sample size :math:`(\\sum_i W_i)^2 / \\sum_i W_i^2`, Kish 1965; not a number, as
        where the weights overflow, counts as fewer): the step's information, score and deviance are then sums
        over those few records, and its entries read their values.

        A binomial fit's weights :math:`\\mu_i(1 - \\mu_i)` (logit) gather next to the boundary where the
        covariates (nearly) separate the outcome (Albert & Anderson 1984). Every other family's weights
        depend on the linear predictor too: a Poisson fit's are its means :math:`e^{\\eta_i}` (log link) or
        :math:`1/\\mu_i` (identity link), a log-linked Gaussian's :math:`e^{2\\eta_i}`, so a steep offset or
        coefficient (the offset ``1000*score``) puts the weight on the one record where it is largest, and a
        mean driven to 0 under the identity link on the record where it is smallest; an identity-linked
        Gaussian's are its prior weights."""
        if effective >= self.q:
            return
        if family == "binomial":
            why = ("the covariates (nearly) separate the outcome, and the fit's sums would be sums over the few "
                   "records next to the boundary")
        else:
            why = (f"the {family} fit's linear predictor (a steep offset or coefficient, a fitted mean near 0, or "
                   "prior weights) puts almost all the weight on a few records, and the fit's sums would be sums "
                   "over them")
        raise self._refuse(f"at this iterate the fit's working weights rest on fewer than {self.q} of the records: "
                           + why, "disclosure.q_threshold", hint)

    def outcome_roots(self, family: str, link: str, outcome: tuple[str, Meaning],
                      reads: list[tuple[str, Meaning]]) -> None:
        """Refuse a GLM whose outcome is computed from a column that a covariate, the offset or the prior
        weights also read (``outcome``: the response's name and :class:`Meaning`; ``reads``: each other
        variable's, named as the refusal names it), before any step is released: the expression is
        classified, not the values it happens to produce.

        An outcome ``ifelse(D$x > t, 1, 0)`` against ``x`` is a step of the covariate's own column, so the fit
        is separated by construction (Albert & Anderson 1984): the slope grows at every step, and the steps
        released before :meth:`working_weights` stops it are sums of functions of the records next to the cut,
        which solved together over a few cuts read the column (``tests/test_glm_separation_cluster_attacks.py``).
        Every family is checked but the identity-linked Gaussian, whose working weights are the prior weights
        at every step (a least-squares fit: its sums are the moments :meth:`exact_sums` counts, and ``bmi ~
        weight`` stays a regression). A table's own outcome (its root is itself) against other columns, and a
        calibration ``y ~ logit(p)`` (roots y and p), are not affected; a column without provenance (its root
        only its records' order) is compared with nothing (:meth:`foreseen_weights` fits it). Rule
        ``disclosure.cut_history``: the outcome is a cut the model reads the records next to, which the cut
        history is there to keep; a site that keeps none guards no cut's neighbours (two cuts a record apart
        read it), and this check goes with it."""
        if (family, link) == ("gaussian", "identity") or not self.rule("disclosure.cut_history"):
            return
        name, found = outcome
        own = {r.key for r in found.roots if r.table != NO_TABLE}
        for what, other in reads:
            shared = sorted({r.column for r in other.roots if r.key in own})
            if not shared:
                continue
            columns = " and ".join(shared)
            why = ("the fit separates by construction and its steps would read the records next to the cut"
                   if family == "binomial" else
                   "the fit can follow the outcome through its own column, and its steps would read the records "
                   "where the outcome changes")
            raise self._refuse(
                f"the outcome {name} is computed from {columns}, which the model's {what} also reads: {why}",
                "disclosure.cut_history",
                f"model a recorded outcome (a table column), or cut the covariate in the formula instead "
                f"(ifelse(D${shared[0]} > t, 1, 0) as a covariate of another outcome); an outcome computed "
                f"from other columns than the covariates' is fitted")

    def foreseen_weights(self, family: str, link: str, outcome: tuple[str, Meaning], path: Iterable[float]) -> None:
        """Refuse, before any step is released, a GLM whose outcome is not a recorded column (a column derived
        from others, a factor or a number made of one, values without provenance: ``outcome``, the response's
        name and :class:`Meaning`) and whose fit of this site's own records would come to an iterate that
        :meth:`working_weights` refuses (``path``: the effective sample size at each iterate of that fit, as
        R's ``glm.fit`` runs it, computed as it is read).

        :meth:`outcome_roots` reads the outcome's expression; what it cannot read is a cut of another column
        that orders the records as a covariate does (a weight in kg stored again in lb, a score beside its
        logit, a BMI against the log weight and log height), and it compares nothing for an outcome without
        provenance. Such an outcome is separated by the covariates, completely or quasi-completely (Albert &
        Anderson 1984), as the site sees on its own records: Fisher scoring does not converge, the slope grows
        at every step, and the steps released before the working weights gather on fewer than q records are
        sums over the records next to the boundary, which solved together over several cuts read the column
        (``tests/test_glm_outcome_orders_attacks.py``). So the site fits its records alone first and refuses
        the fit if any iterate's weights would rest on fewer than q records: the threshold of
        :meth:`working_weights`, applied to the fit the site can foresee instead of at the step where it
        gathers. A recorded outcome is not checked here: no analyst chose where it changes, so no series
        of cuts moves its boundary across the records, and its steps are checked as they come. Nor is the
        identity-linked Gaussian, whose working weights are its prior weights at every step. An outcome
        separated at this site only is refused even where the fit pooled over the sites would not be:
        the site cannot see the others' records. Where the site keeps no cut history (``disclosure.cut_history``)
        it guards no cut's neighbours, and this check goes with it, as :meth:`outcome_roots` does."""
        if (family, link) == ("gaussian", "identity") or not self.rule("disclosure.cut_history"):
            return
        name, found = outcome
        if found.function is X and all(r.table != NO_TABLE for r in found.roots):
            return
        q = self.q
        if all(effective >= q for effective in path):  # not a number (weights that overflow) counts as fewer
            return
        raise self._refuse(
            f"the outcome {name} is not a recorded column, and the model's fit of this site's records alone comes "
            f"to an iterate whose working weights rest on fewer than {q} of the records: the covariates (nearly) "
            "separate the outcome, and the fit's steps would read the records next to the boundary",
            "disclosure.q_threshold",
            "model a recorded outcome, or a cut of a column that the covariates do not order the records by "
            "(a cut of a weight in lb separates a model of the weight in kg)")

    def min_count(self, n: int, what: str = "valid values", *, allow_zero: bool = False) -> None:
        """Any aggregate rests on at least q records (rule A1 of Schalk et al. 2024; nfilter.tab); with
        ``allow_zero``, 0 records pass too (a factor level nobody has). In a pooled release the count
        is summed over the sites and the pooled count is checked (:meth:`pooled_minimum`)."""
        q = self.q  # applied here or, deferred, on the pooled count
        if self.deferred is not None:
            self.deferred.append((f"{'count_or_zero' if allow_zero else 'count'}:{what}", int(n)))
            return
        if allow_zero and n == 0:
            return
        if n < q:
            raise self._refuse(
                f"{what}: fewer than the site's minimum of {self.q}",
                "disclosure.q_threshold",
                "use a larger table or subset; this site releases nothing computed from fewer records",
            )

    def pooled_minimum(self, deferred: str, n: float, q: int) -> None:
        """A count deferred by :meth:`min_count`, :meth:`saturation` or :meth:`factor_levels`, summed
        over the sites of a pooled release: at least ``q`` (the largest q of the sites), as many
        records as this site's ``glm_saturation`` needs for the model's parameters, or as its
        ``factor_levels_density`` needs for the levels (bins)."""
        kind, what = deferred.split(":", 1)
        n = round(n)
        if kind == "saturation":
            self.saturation(int(what), n)
        elif kind == "levels":
            n_levels, what = what.split(":", 1)
            self.factor_levels(int(n_levels), n, what + " pooled over the sites")
        elif not (kind == "count_or_zero" and n == 0) and n < q:
            raise self._refuse(f"{what}: fewer than the minimum of {q} pooled over the sites",
                               "disclosure.q_threshold", "use more records or more sites")

    def subset(self, n_subset: int, n_total: int) -> None:
        """A subset and the rows it leaves out each hold at least subset_min rows (or none)."""
        minimum = self.rule("disclosure.subset_min")
        if n_subset < minimum:
            raise self._refuse(
                f"subset would hold fewer rows than the site's minimum of {minimum}",
                "disclosure.subset_min",
                "widen the subset condition",
            )
        left_out = n_total - n_subset
        if 0 < left_out < minimum:
            raise self._refuse(
                f"subset would leave out fewer rows than the site's minimum of {minimum}; "
                "comparing it with the full table would single them out",
                "disclosure.subset_min",
                "use the full table, or a condition that leaves out more rows",
            )

    def subset_rows(self, parent: Any, mask: np.ndarray, condition: Intervals | None = None) -> Any:
        """:meth:`subset`, then the subset is compared with the table it comes from and every
        subset made from that table before, by any analyst (``disclosure.subset_min_difference``,
        :func:`dsfed_server.disclosure.differencing.row_set_problem`; and with combinations of them,
        :func:`~dsfed_server.disclosure.differencing.spanned_gap`), and a numeric condition's cuts
        (``condition``: ``age >= 55`` cuts age) with every cut released before on the column, as any
        released cut (``disclosure.cut_history``: ``age >= 55`` after ``age > 55`` differs by the
        records aged 55), and with this site's records of pooled cells the other sites' releases alone expose
        (:meth:`_record_exposed`). Recorded in the release history only if all pass. Returns the subset's rows,
        for ``differencing.mark_rows`` on the new table."""
        mask = np.asarray(mask, dtype=bool)
        self.subset(int(mask.sum()), int(mask.size))
        parent_rows = rows_of(parent)
        rows = Rows(parent_rows.lineage, parent_rows.index[mask], parent_rows.n_root)
        if self.history is None:
            return rows
        new = np.zeros(rows.n_root, dtype=bool)
        new[rows.index] = True
        with self.history.lock:
            if condition is not None:
                self._check_condition(condition, "the subset's condition", "or the full table")
            earlier = self._earlier(rows)
            minimum, base = self.rule("disclosure.subset_min_difference"), self._base(rows)
            problem = row_set_problem(earlier, [new], minimum, base) or self._against_kept(
                [(np.packbits(new), b"")], rows)
            if not problem and self._spanned(np.packbits(new), [base, *earlier], rows.n_root):
                problem = (f"these records differ by fewer than {minimum} from a combination of earlier subsets and "
                           "cells of the table (two cells less a few records, say); comparing them would single "
                           "those out")
            if problem:
                raise self._refuse(problem, "disclosure.subset_min_difference",
                                   "use subsets that differ from each other by more rows, or the full table")
            parts = self._parts([new], condition.strata if condition is not None else ())
            self._refuse_thin(parts, rows)
            if condition is not None:
                self._record_cuts(condition.history_key, list(condition.root_cuts()), "subset")
            for member in _with_parts([new], parts):
                self.history.record_row_set(rows.lineage, member, analyst=self._analyst)
        return rows

    def _against_kept(self, new: list[tuple[np.ndarray, bytes]], rows: Rows) -> str | None:
        """Why row sets of this site alone (``new``: each packed, beside the group (packed) it is one value's
        records of, whose sums give only their number, or b"": a subset's, a derived column's 0/1 factor's, a
        summed design column's records, over which other functions are summed) may not be released beside this
        site's records of pooled cells it keeps (:meth:`_record_exposed`), which the other sites' releases alone
        give, or will once they release theirs: one differs from such records in 1 to
        ``disclosure.subset_min_difference`` - 1 (:func:`~dsfed_server.disclosure.differencing.differs_little`);
        or, one other functions are summed over, from a combination
        (:func:`~dsfed_server.disclosure.differencing.spanned_gap`) of :data:`KEPT_COMBINED` of them, the latest
        :data:`KEPT_LATEST` and those nearest it (:func:`~dsfed_server.disclosure.differencing.nearest_sets`), their
        events (:meth:`~dsfed_server.disclosure.history.History.exposed_parts`), the table and the subsets and
        cells released alone before: ``D$y * D$g``'s ones, 16 of a site's 20 records of two pooled cells with
        the event, are the cells' events less 2, whose outcome the pooled counts less the others' would give. A
        value's records give only their number, and are compared pairwise only (a site's ``meanDS(D$y)`` beside
        cells whose events the pooled release gave). Kept cells of fewer than q records here are left out
        (:meth:`_kept_cells`). None if none differs so."""
        n, minimum = rows.n_root, self.rule("disclosure.subset_min_difference")
        exposed = self._kept_cells(rows)
        if any(differs_little(member, exposed, minimum) for member, _ in new):
            return (f"these records differ from this site's records of a pooled cell in fewer than {minimum} rows, "
                    "where the other sites' releases alone gave theirs: comparing the two would single them out")
        summed = [member for member, group in new if not group]
        if not exposed or not summed:
            return None
        events = self.history.exposed_parts(rows.lineage, n)  # type: ignore[union-attr]
        earlier = [self._base(rows), *self.history.row_sets(rows.lineage, n)]  # type: ignore[union-attr]
        for member in summed:
            kept = nearest_sets(member, exposed, KEPT_COMBINED, KEPT_LATEST)
            parts = [part for part in events if any(not np.bitwise_and(part, np.bitwise_not(cell)).any()
                                                    for cell in kept)]
            if self._spanned(member, [*earlier, *kept, *parts], n):
                return (f"these records differ by fewer than {minimum} from a combination of earlier row sets and "
                        "this site's records of pooled cells, which the other sites' releases alone give, or will "
                        "once they release theirs (two cells less a few records, say): comparing them would single "
                        "those records out")
        return None

    def _spanned(self, member: np.ndarray, sets: list[np.ndarray], n: int, *, unaudited_fails: bool = False) -> bool:
        """Whether a combination of ``sets`` and ``member`` (packed, over a table of ``n`` records) singles out 1 to
        ``disclosure.subset_min_difference`` - 1 records that ``sets`` alone do not
        (:func:`~dsfed_server.disclosure.differencing.spanned_gap`). Where the release history is too large to audit:
        refused, saying so; or, ``unaudited_fails`` (a span of a pooled release), True, so the span is merged."""
        try:
            return spanned_gap(member, sets, n, below=self.rule("disclosure.subset_min_difference")) > 0
        except AuditTooLarge as exc:
            if unaudited_fails:
                return True
            raise self._refuse(f"the release history of this table is too large to audit ({exc})",
                               "disclosure.subset_min_difference", "ask the site's administrator") from None

    def _kept_cells(self, rows: Rows) -> list[np.ndarray]:
        """This site's records (packed) of pooled cells it keeps (:meth:`_record_exposed`), in the order kept, that
        hold q records or more here: one of fewer the other sites keep as thin and never release their own records
        of alone (:meth:`_thin_complement`), so the pooled count never gives it."""
        return [cell for cell in self.history.exposed_row_sets(rows.lineage, rows.n_root)  # type: ignore[union-attr]
                if set_size(cell) >= self.q]

    def _check_condition(self, condition: Intervals, what: str, instead: str) -> None:
        """Refuse a condition's cuts unless the gate keeps every one: each cell between them and the
        cuts released before on the column (by any analyst) holds q records and the secret margin."""
        decided = decide_local(condition, self.floor, self._cut_history(condition.history_key),
                               site_pick(self.secret, condition))
        if any(d is not KEEP for d in decided):
            raise self._refuse(
                f"{what} cuts the column within {self.q} records{margin_note(self.floor)}, of another of its cuts "
                "or of a cut released before on it (by any analyst); comparing the two would single those records out",
                "disclosure.cut_history", f"use a condition further from earlier cuts, {instead}")

    def kinks_as_released(self, cells: Intervals, kinks: set[Cut]) -> Intervals:
        """``cells`` with each of its cuts in ``kinks`` (a kink of ``abs``, ``pmin`` or ``pmax``:
        :class:`~dsfed_server.arithmetic.Condition`, which is ``< v`` and ``<= v`` alike) written as the one of the
        two released before on the column where the other was not: the same cut again, kept as it was
        (``abs(D$score - 0.5)`` after thresholds at ``D$score >= 0.5``). Between ``< v`` and ``<= v`` lie the records
        at ``v``, a cell the gate never releases inside the records' range."""
        if not kinks:
            return cells
        column = cells.column
        released = {canonical(h, column) for h in self._cut_history(cells.history_key)}
        cuts = set(cells.cuts)
        for cut, root in zip(cells.cuts, cells.root_cuts()):
            other = Cut(root.value, not root.inclusive)
            if cut in kinks and canonical(root, column) not in released and canonical(other, column) in released:
                cuts = (cuts - {cut}) | {Cut(cut.value, not cut.inclusive)}
        return cells if cuts == set(cells.cuts) else replace(cells, cuts=tuple(sorted(cuts)))

    def derived_cuts(self, conditions: list[Intervals], row_sets: list[np.ndarray], rows: Rows | None, *,
                     what: str = "the expression's comparison (or pmin, pmax, abs)",
                     instead: str = "or a column of the table", strata: tuple[np.ndarray, ...] = ()) -> None:
        """A derived column's cuts (``conditions``: one per column its comparisons, ``pmin``/``pmax``
        and ``abs`` cut, :mod:`dsfed_server.arithmetic`) and row sets (the records where each
        comparison holds, and each value of a column with few values; boolean over ``rows``) go
        through the gate as a subset's do (:meth:`subset_rows`): every cut checked with the cuts
        released before on its column, the row sets audited with every row set released before
        from the table (``disclosure.subset_min_difference``); recorded only if all pass. ``what`` and
        ``instead`` name the cuts and the alternative in a refusal (``recalibrateDS``: a map's knots). A column of
        several roots (``strata``: the groups its few-valued roots and comparisons make) keeps its row sets with their
        parts in each group (:meth:`_parts`)."""
        lock = self.history.lock if self.history is not None else nullcontext()
        with lock:
            for condition in conditions:
                self._check_condition(condition, what, instead)
            members = []
            if self._audits(rows) and row_sets:
                for member in row_sets:
                    full = np.zeros(rows.n_root, dtype=bool)  # type: ignore[union-attr]
                    full[rows.index[member]] = True  # type: ignore[union-attr]
                    members.append(full)
                earlier, base = self._earlier(rows), self._base(rows)  # type: ignore[arg-type]
                packed = [(np.packbits(member), b"") for member in members]
                problem = (row_set_problem(earlier, members, self.rule("disclosure.subset_min_difference"), base)
                           or self._against_kept(packed, rows))  # type: ignore[arg-type]
                if problem:
                    raise self._refuse(problem, "disclosure.subset_min_difference",
                                       "use cuts further from earlier ones, or a column of the table")
                parts = self._parts(members, strata)
                self._refuse_thin(parts, rows)  # type: ignore[arg-type]
                members = _with_parts(members, parts)
            for condition in conditions:
                self._record_cuts(condition.history_key, list(condition.root_cuts()), "derived")
            self._record_row_sets(members, rows)

    def derived_expression(self, node: Node, meaning_of: Callable[[Column | Symbol], Meaning]) -> Classified:
        """Read a derived column's expression before it is computed
        (:mod:`dsfed_server.disclosure.expressions`): every part of it a function of one root column that
        is monotone (or a low polynomial), no more concentrated over the root's declared range than
        ``disclosure.derived_concentration`` and no more dominated by one end than
        ``disclosure.derived_dominance``, or a sum or product of such parts; refused otherwise,
        saying which part and what to write instead. Cuts where a part is missing come back with the
        classification, for the gate."""
        limits = self.rule("disclosure.derived_concentration"), self.rule("disclosure.derived_dominance")
        try:
            return classify(node, meaning_of, *limits)
        except ExpressionRefused as refused:
            raise self._refuse(refused.message, refused.rule, refused.hint) from None

    def order_of_one_root(self, found: Meaning, what: str) -> None:
        """Values released as they are -- a quantile is a record's value, or lies between two -- only of
        a column that orders its records as one root column does (the column itself, or a monotone
        function of it): of a combination they would link one record's values of several columns (a
        quantile of ``D$age + 1e-9*D$income`` reads one patient's age and income), and of a function that
        turns they would read records one by one (quantiles of ``(D$score - a)^2`` for many centres ``a``
        are records' scores, a +- sqrt of each). Refused otherwise (``disclosure.derived_concentration``'s
        reading of derived columns)."""
        if len(found.roots) > 1:
            raise self._refuse(
                f"{what} of a column computed from several columns "
                f"({', '.join(sorted(r.column for r in found.roots))}) "
                "would give one record's values of all of them", "disclosure.derived_concentration",
                "ask for the quantiles of each column, or for sums (meanDS, varDS, corDS) of the combination")
        if found.function is None or not found.monotone:
            raise self._refuse(
                f"{what} of a column that rises and falls with its root column (a fold, abs, a comparison) would "
                "read that column's records one by one", "disclosure.derived_concentration",
                "ask for the quantiles of the column itself, or of a monotone function of it")

    def distinct_values(self, values: np.ndarray, what: str, noun: str, hint: str) -> list[np.ndarray]:
        """Refuse values (a model's predictions, a derived column) that take at most n/q distinct values
        (a tree's leaves, a factor's levels, a 0/1 column) when one of them is held by fewer than q
        records: such values single those records out. Returns, for values that few, the records of
        each value (row sets for the release history), else nothing."""
        present = ~np.isnan(values)
        q = self.q
        ordered = values[present]
        ordered.sort()  # the count of distinct values from one sorted copy: the usual answer is "many"
        if ordered.size and 1 + np.count_nonzero(ordered[1:] != ordered[:-1]) > ordered.size // q:
            return []
        del ordered
        distinct, inverse, counts = np.unique(values[present], return_inverse=True, return_counts=True)
        if distinct.size > present.sum() // q:
            return []
        if np.any(counts < q):
            raise self._refuse(f"{what} gives {distinct.size} distinct {noun} here, {int(np.sum(counts < q))} of "
                               f"them held by fewer than {q} records", "disclosure.q_threshold", hint)
        positions = np.flatnonzero(present)
        sets = []
        for k in range(distinct.size):
            member = np.zeros(values.size, dtype=bool)
            member[positions[inverse.ravel() == k]] = True
            sets.append(member)
        return sets

    @property
    def _analyst(self) -> str:
        return self.scope.analyst if self.scope is not None else ""

    def _cut_history(self, key: tuple[str, str]) -> list[Cut]:
        if self.history is None or not self.rule("disclosure.cut_history"):
            return []
        return self.history.cuts(*own_key(key, self.site))  # a label's cuts are kept under this site's table

    def _record_cuts(self, key: tuple[str, str], cuts: list[Cut], mode: str) -> None:
        if self.history is not None and self.rule("disclosure.cut_history"):
            self.history.record_cuts(*own_key(key, self.site), cuts, mode=mode, analyst=self._analyst,
                                     function=self.function)

    def release(self, cells: Cells) -> Any:
        """A declaration of cells released by this site alone, through the release gate
        (:func:`gate.release_local`), checked against and added to the cut history of its column.

        The released cells' row sets are then audited with every row set released before from the
        same table (subsets, earlier cells; :func:`~dsfed_server.disclosure.differencing.row_set_problem`):
        where they would single out a record, the gate drops the requested cut next to the cell that
        holds it and tries again; a table of categories, or intervals with nothing left to drop, is
        refused (``disclosure.subset_min_difference``). Cells of a derived column of several roots
        (``cells.strata``: the groups its few-valued roots and comparisons make) are kept with their parts in each
        group, and those parts are checked against the pooled cells another site was thin in (:meth:`_parts`)."""
        lock = self.history.lock if self.history is not None else nullcontext()
        with lock:
            if isinstance(cells, Categories):
                released = release_local(cells, self.floor)
                self._audit_row_sets(released.row_sets, cells.rows)
                return released.result
            history = self._cut_history(cells.history_key)
            exclude: set[Cut] = set()
            kept_pooled: set[Cut] = set()  # of exclude: dropped so that another site's few records stay pooled
            while True:
                released = release_local(cells, self.floor, history, exclude, snap=snap_dropped,
                                         kept_pooled=kept_pooled)
                parts = self._parts(released.row_sets, cells.strata)
                found = self._row_set_culprit(released.row_sets, cells.rows, parts)
                if found is None:
                    break
                culprit, pooled_share = found
                requested = [c for c in cells.cuts if c not in exclude]
                if not requested or cells.policy == "refuse":
                    self._audit_row_sets(released.row_sets, cells.rows, parts)  # raises, naming the rule
                at = np.flatnonzero(cells.rows.index == culprit)  # type: ignore[union-attr]
                value = float(cells.x[at[0]]) if at.size else float(np.median(cells.x))
                cut = min(requested, key=lambda c: abs(c.value - value))
                exclude.add(cut)
                if pooled_share:
                    kept_pooled.add(cut)
            self._record_cuts(cells.history_key, released.root_cuts, "site")
            self._record_row_sets(_with_parts(released.row_sets, parts), cells.rows)
        return released.result

    def release_groups(self, cells: Categories) -> list[int]:
        """A table of groups (:class:`~dsfed_server.disclosure.gate.Categories`) released group by group: a
        group of 0 < n < q records refuses the whole answer, as :meth:`release` does; a group whose records
        differ from the table, an earlier subset or an earlier release's cell in fewer than
        ``disclosure.subset_min_difference`` records is withheld, the others released (their row sets
        audited together, as :meth:`release` audits a table's, and kept). Returns the withheld groups (cell
        numbers, ascending): the caller releases nothing computed over a withheld group's records, nor any
        total over the groups that would give their count. What a withheld group protects is the few records
        that tell it from the earlier row set: their number, and any sum over them (Denning & Schlörer 1983).

        The withheld groups together are told apart by the same records from the earlier sets that hold them:
        an earlier total over all the groups (``meanDS`` of the variable) less the released groups is their
        union. Where the gaps of the withheld groups (:func:`~dsfed_server.disclosure.differencing.
        superset_gap`) sum to 1 .. ``subset_min_difference`` - 1 records, the released group of the
        smallest gap above 0 is withheld too, until they sum to at least that; where none is left, the whole
        answer is refused. A group, or the withheld groups together, that singles out fewer records with a
        combination of earlier row sets (two cells less a few records: :func:`~dsfed_server.disclosure.
        differencing.spanned_gap`) is treated alike."""
        size = int(np.prod(cells.shape))
        lock = self.history.lock if self.history is not None else nullcontext()
        with lock:
            released = release_local(cells, self.floor)
            if not self._audits(cells.rows) or not released.row_sets:
                return []
            rows: Rows = cells.rows  # type: ignore[assignment]
            held = [c for c in range(size) if np.any(cells.codes == c)]  # the row sets' order
            earlier = self._earlier(rows)
            minimum, base = self.rule("disclosure.subset_min_difference"), self._base(rows)
            sets = [base, *earlier]

            def near(members: list[np.ndarray]) -> bool:  # their union within a few records of a combination
                return self._spanned(np.packbits(np.logical_or.reduce(members)), sets, rows.n_root)

            withheld = [cell for cell, member in zip(held, released.row_sets)
                        if row_set_problem(earlier, [member], minimum, base) or self._against_pooled([member], rows)
                        or near([member])]
            if withheld:
                gaps = {c: superset_gap(np.packbits(m), sets) for c, m in zip(held, released.row_sets)}
                while 0 < sum(gaps[c] for c in withheld) < minimum or \
                        near([m for c, m in zip(held, released.row_sets) if c in withheld]):
                    more = sorted((gap, c) for c, gap in gaps.items() if gap > 0 and c not in withheld)
                    if not more:
                        raise self._refuse(
                            f"the groups' records differ from an earlier release over them (a table of the factor, "
                            f"say) by fewer than {minimum} records in all: withholding some would still single "
                            "those out", "disclosure.subset_min_difference",
                            "ask for the summary of a variable without missing values, or before a table of the "
                            "factor on fresh data")
                    withheld = sorted([*withheld, more[0][1]])
            self._audit_row_sets([m for c, m in zip(held, released.row_sets) if c not in withheld], rows)
        return withheld

    def exact_sums(self, rows: Rows | None,
                   functions: list[tuple[str, tuple[str, ...], Callable[[], np.ndarray]]],
                   groups: list[np.ndarray] | None = None,
                   hint: str = "use the column itself, or fewer transforms of it over small subsets; a larger "
                               "subset answers more", steps: int = 1, alone: bool = False,
                   levels: Sequence[np.ndarray] = (), sets: Sequence[np.ndarray] = ()) -> None:
        """The release gives exact sums of ``functions`` (each a function's core, its root columns,
        :func:`~dsfed_server.disclosure.expressions.forms`, and the records of ``rows`` it is summed over,
        boolean, computed when needed) over each of the ``groups`` of ``rows`` (boolean over them; None:
        one group, all of them): refused when some group of the table's records would then answer more
        different functions than ``disclosure.sums_per_record`` allows for its size beyond its second
        moments, which any group answers and which are neither counted nor kept; counted with every sum
        released before from the table by any analyst (:mod:`dsfed_server.disclosure.equations`);
        recorded if not. ``hint``: what a refused analyst can do instead. ``steps``: how many releases such as
        this one the analysis needs at the least (a fit at the analyst's coefficients, one per iteration):
        refused first, and nothing recorded, where the records could not answer that many with nothing
        released before, so that an analysis the count would stop part-way spends none of the table's count
        (on 50 records, two of DataSHIELD's ``ds.glm`` iterations of three coefficients would leave too few for
        the same fit at the site, ``ds.glmSLMA``). ``alone``: the analyst reads this site's own sums; then
        ``levels``, the records at each value of a summed column of few values, whose number its sums give, second
        moments too (:func:`~dsfed_server.disclosure.differencing.few_levels`: a 0/1 column's sum is its ones, a
        GLM's dummy's too, and ``D$g + 1``'s less the count of records) whose sums give nothing but their number, and
        ``sets``, records other functions are summed over (a GLM's design column's values, a derived column's 0/1
        factors: :mod:`dsfed_server.summands`), are audited as row sets (:meth:`_audit_supports`), must not give its
        records of a pooled cell in which another site held fewer than q (:meth:`_refuse_thin`), and are kept; under
        the history's lock from the audit to the record, so that two sessions cannot both pass."""
        lock = self.history.lock if self.history is not None else nullcontext()
        with lock:
            self._exact_sums(rows, functions, groups, hint, steps, alone, levels, sets)

    def _exact_sums(self, rows: Rows | None, functions: list[tuple[str, tuple[str, ...], Callable[[], np.ndarray]]],
                    groups: list[np.ndarray] | None, hint: str, steps: int, alone: bool,
                    levels: Sequence[np.ndarray], sets: Sequence[np.ndarray]) -> None:
        audits = alone and (levels or sets) and self._audits(rows)
        supports = self._supports(rows, groups, levels, sets) if audits else {}  # type: ignore[arg-type]
        self._refuse_thin([np.frombuffer(m, dtype=np.uint8) for m in supports], rows)  # type: ignore[arg-type]
        self._audit_supports(supports, rows)  # type: ignore[arg-type]
        counted = [(f, roots, where) for f, roots, where in functions if not second_moment(f, roots)]
        if not counted or not self._audits(rows):
            self._record_supports(supports, rows)  # type: ignore[arg-type]
            return
        new = []
        for function, roots, where in counted:
            over = where()
            for group in groups if groups is not None else [None]:
                packed = packed_rows(rows, over if group is None else over & group)  # type: ignore[arg-type]
                if packed is not None:
                    new.append(Summed(function, roots, packed))
        per_record = self.rule(SUMS_RULE)
        if steps > 1:
            alone = [Summed(f"{s.function} #{k}", s.roots, s.rows) for k in range(steps) for s in dict.fromkeys(new)]
            columns = too_many([], alone, rows.n_root, per_record)  # type: ignore[union-attr]
            if columns:
                raise self._refuse(
                    f"this analysis needs at least {steps} releases such as this one, and {steps} would give a group "
                    f"of the table's records more different functions of {', '.join(columns)} than the site allows "
                    "for the group's size, even with nothing released before: the count would stop it part-way",
                    SUMS_RULE, hint)
        with self.history.lock:  # type: ignore[union-attr]
            earlier = self.history.sums(rows.lineage, rows.n_root)  # type: ignore[union-attr]
            apart = 1 / self.rule(PEER_RULE) if any(s.function.startswith(APART) for s in (*earlier, *new)) else 1.0
            try:
                columns = too_many(earlier, list(dict.fromkeys(new)), rows.n_root,  # type: ignore[union-attr]
                                   per_record, apart)
            except AuditTooLarge as exc:
                raise self._refuse(f"the sums released from this table are too many to check ({exc})", SUMS_RULE,
                                   "ask the site's administrator") from None
            if columns:
                raise self._refuse(
                    "together with the sums released before from this table (by any analyst), this would give a "
                    f"group of its records more different functions of {', '.join(columns)} than the site allows "
                    "for the group's size: as many functions as records give the records' values (as power sums "
                    "give a polynomial's roots)", SUMS_RULE, hint)
            self.history.record_sums(rows.lineage, rows.n_root, new, analyst=self._analyst)  # type: ignore[union-attr]
            self._record_supports(supports, rows)  # type: ignore[arg-type]

    def _supports(self, rows: Rows, groups: list[np.ndarray] | None, levels: Sequence[np.ndarray],
                  sets: Sequence[np.ndarray]) -> dict[bytes, bytes]:
        """The records (packed, over the table) of each of ``levels`` and ``sets`` in each of ``groups``, once each,
        the records this site keeps (the table's count) left out: each of ``levels`` beside the group's records
        (packed) it is of, each of ``sets`` beside nothing (b"")."""
        base = self._base(rows).tobytes()
        found: dict[bytes, bytes] = {}
        for group in groups if groups is not None else [None]:
            whole = packed_rows(rows, group)
            for members, within in ((sets, False), (levels, True)):
                for over in members:
                    packed = packed_rows(rows, over if group is None else over & group)
                    if packed is not None and packed != base and whole is not None:
                        found.setdefault(packed, whole if within else b"")
        return found

    def _audit_supports(self, supports: dict[bytes, bytes], rows: Rows) -> None:
        """Refuse the records a summed column's values (or a derived column's 0/1 factors) are over where they differ
        from the table, from each other or from an earlier row set of it in fewer than
        ``disclosure.subset_min_difference`` records, or isolate one with them (:func:`~dsfed_server.disclosure.
        differencing.row_set_problem`): the sums of ``D$high`` and of ``D$y*D$high`` over a table are the count and
        the events of the records of ``high``, and beside those of a subset two records from it, theirs. A value's
        records whose sums give only their number (``supports`` beside a group) are not compared with the group they
        are of (the table, a subset), nor with a set of it that covers the group with them: their difference is the
        records at the column's other values, whose count is what a table of the column gives (a prevalence of 3 in
        50); records other functions are summed over are (beside b""): the age summed over all but 2 records. A group
        whose sums the earlier row sets already give (in their span: the events over the table after the events of
        each grade, :func:`~dsfed_server.disclosure.differencing.combined`) tells nothing new, and is not compared.
        Every one, given or not, is compared with this site's records of pooled cells the other sites' releases alone
        give, or will (:meth:`_against_kept`): ``D$g``'s ones summed alone before (their number) and then in a GLM
        (the outcome's sum over them) are the same records with new sums."""
        if not supports:
            return
        n, minimum = rows.n_root, self.rule("disclosure.subset_min_difference")
        with self.history.lock:  # type: ignore[union-attr]
            earlier = self._earlier(rows)
            known = {bytes(old) for old in earlier}
            fresh = {member: group for member, group in supports.items() if member not in known}
            packed = [np.frombuffer(member, dtype=np.uint8) for member in fresh]
            try:
                given = combined(packed, [self._base(rows), *earlier], n)
            except AuditTooLarge as exc:
                raise self._refuse(f"the release history of this table is too large to audit ({exc})",
                                   "disclosure.subset_min_difference", "ask the site's administrator") from None
            new = [(member, group) for member, group, old in zip(packed, fresh.values(), given) if not old]
            within = [np.frombuffer(group, dtype=np.uint8) if group else None for _, group in new]
            problem = new and row_set_problem(earlier, [bits(member, n).astype(bool) for member, _ in new], minimum,
                                              self._base(rows), within)
            problem = problem or self._against_kept(  # every one: a level summed before may now have other sums
                [(np.frombuffer(member, dtype=np.uint8), group) for member, group in supports.items()], rows)
        if problem:
            raise self._refuse(
                f"the records at one value of a summed column of few values, or those a derived column's 0/1 factor "
                f"holds, are a group of the table: {problem}", "disclosure.subset_min_difference",
                "sum columns whose groups differ from each other and from earlier subsets by more records, or "
                "compare the groups with a table of the factors")

    def _record_supports(self, supports: dict[bytes, bytes], rows: Rows) -> None:
        if supports:
            packed = [np.frombuffer(member, dtype=np.uint8) for member in supports]
            self.history.record_summed_row_sets(rows.lineage, rows.n_root, packed,  # type: ignore[union-attr]
                                                analyst=self._analyst)

    def table_unchanged(self, table: str, n_root: int) -> None:
        """Refuse a table whose records changed since it was read here before, in any run of the site (edited,
        deleted, reordered: :meth:`~dsfed_server.disclosure.history.History.table_records`), and keep its
        records' digests at this size: a release of the whole table now, beside one then, gives the deleted or
        edited record's values (a mean over 60 records less the same mean over 59), whether or not any release
        of it was audited. Records added at the end change no earlier record, but fewer than
        ``disclosure.subset_min_difference`` of them are the difference of two whole-table releases (the mean age
        of 61 records against that of 60 gives the new record's): the table is refused until it holds at least
        that many more than when it was read. Where the site keeps no release history there is nothing to
        compare with (``disclosure.cut_history``)."""
        self.applied.setdefault("disclosure.subset_min_difference")
        if self.history is not None and self.rule("disclosure.cut_history"):
            self.history.table_records(table, n_root, int(self.rule("disclosure.subset_min_difference")))

    def leave_out_minimum(self, site: Rules) -> int | None:
        """How few records may share a pattern of missing values before the site leaves them out of a
        table (:mod:`~dsfed_server.disclosure.missingness`): the larger of q and ``subset_min_difference``
        of the site's own rules ``site`` (never a profile's: every analyst's table holds the same records);
        None where the site keeps no release history (nothing to compare releases with)."""
        for key in ("disclosure.cut_history", *MISSING_RULES):
            self.applied.setdefault(key)
        rules = site.disclosure
        if not rules.cut_history or rules.q_threshold <= 1:
            return None
        return max(rules.q_threshold, rules.subset_min_difference)

    def quantiles_of(self, rows: Rows | None, function: str, roots: tuple[str, ...]) -> None:
        """Quantiles of ``function`` (a core, :func:`~dsfed_server.disclosure.expressions.forms`) of the
        column ``roots`` over the records ``rows``: refused when quantiles of another function of the same
        column were released over the same records (by any analyst). A type-7 quantile weighs the same two
        neighbouring records alike under every monotone function, so two functions' quantiles are two
        equations in each pair: every released pair's values (``disclosure.sums_per_record``); recorded
        if not."""
        if not self._audits(rows):
            return
        mine = Summed(f"quantiles:{function}", roots, packed_rows(rows))  # type: ignore[arg-type]
        self.rule(SUMS_RULE)
        with self.history.lock:  # type: ignore[union-attr]
            for earlier in self.history.sums(rows.lineage, rows.n_root):  # type: ignore[union-attr]
                if (earlier.rows == mine.rows and earlier.function.startswith("quantiles:")
                        and earlier.function != mine.function and set(earlier.roots) & set(roots)):
                    raise self._refuse(
                        "quantiles of another function of the same column were released over the same records "
                        "(by any analyst): a quantile weighs the same two neighbouring records alike under every "
                        "monotone function, so the two give those records' values", SUMS_RULE,
                        "ask for the quantiles of the column itself, or over other records")
            self.history.record_sums(rows.lineage, rows.n_root, [mine],  # type: ignore[union-attr]
                                     analyst=self._analyst)

    def subset_of_table(self, rows: Rows, complete: np.ndarray | None = None) -> bool:
        """Whether ``rows`` are a subset of their table as the row-set audit tells one: at least
        ``disclosure.subset_min_difference`` records fewer than the records the site keeps of it, or, where
        ``rows`` lie within ``complete`` (boolean over the table: the records a call's stored columns all hold a
        value in), than the records it keeps of those."""
        kept = self._kept(rows)
        if complete is not None and complete.size == kept.size and complete[rows.index].all():
            kept = kept & complete
        return rows.index.size <= int(np.count_nonzero(kept)) - self.rule("disclosure.subset_min_difference")

    def kept_records(self, rows: Rows) -> int:
        """How many records the site keeps of the table ``rows`` are of (every release of it is over them)."""
        return int(np.count_nonzero(self._kept(rows)))

    def _base(self, rows: Rows) -> np.ndarray:
        """The row set every release of ``rows``' table is over (packed): the records the site keeps."""
        return np.packbits(self._kept(rows))

    def _kept(self, rows: Rows) -> np.ndarray:
        """Which records of ``rows``' table the site keeps (boolean over the table): all where it leaves none out."""
        kept = self.kept(rows.lineage) if self.kept is not None else None
        return kept if kept is not None and kept.size == rows.n_root else np.ones(rows.n_root, dtype=bool)

    def _audits(self, rows: Rows | None) -> bool:
        """Whether released row sets are audited: their records are known, the site keeps a history,
        and a single record is something it protects (q above 1)."""
        return (rows is not None and self.history is not None and self.rule("disclosure.cut_history")
                and self.q > 1)

    def _row_set_culprit(self, row_sets: list[np.ndarray], rows: Rows | None, parts: list[np.ndarray] | None = None
                         ) -> tuple[int, bool] | None:
        """None if the row sets pass the audit, else the table position of a record they would single
        out (-1 when the problem is a small group rather than one record), and whether it is another site's
        few records of a pooled cell that they would give (:meth:`_thin_complement`), they or their ``parts`` in
        the groups of a derived column's few-valued parts (:meth:`_parts`)."""
        if not self._audits(rows) or not row_sets:
            return None
        earlier = self._earlier(rows)
        base = self._base(rows)  # type: ignore[union-attr]
        problem, isolated = row_set_audit(earlier, row_sets, self.rule("disclosure.subset_min_difference"), base)
        if problem is None:
            thin = self._thin_complement(parts or row_sets, rows)  # type: ignore[arg-type]
            if thin is not None:
                return thin, True
            return None if self._pooled_pairs(row_sets, rows) is None else (-1, False)
        if not isolated.size:  # a set too close to another: the record the sets isolate, if any, names the cut
            n = rows.n_root  # type: ignore[union-attr]
            try:
                isolated = isolated_records([base, *earlier, *row_sets], n)
            except AuditTooLarge:
                return -1, False
        return (int(isolated[0]) if isolated.size else -1), False

    def _parts(self, row_sets: list[np.ndarray], strata: tuple[np.ndarray, ...]) -> list[np.ndarray]:
        """Each row set's part in each group of ``strata`` that holds records of it (boolean over the table): what a
        cut on a derived column of several roots cuts within each group its few-valued parts make
        (:func:`~dsfed_server.disclosure.provenance.strata`); the row sets themselves where there are no groups.
        Refused beyond :data:`~dsfed_server.disclosure.provenance.STRATA_MOST` groups."""
        if not strata:
            return row_sets
        if len(strata) > STRATA_MOST:
            raise self._refuse(f"a cut on this derived column is a cut within each of the {len(strata)} groups its "
                               f"few-valued roots and comparisons make, more than the {STRATA_MOST} this site audits "
                               "alone", "disclosure.subset_min_difference",
                               "derive it from fewer few-valued columns, or cut its roots themselves")
        return [part for member in row_sets for group in strata if (part := member & group).any()]

    def _audit_row_sets(self, row_sets: list[np.ndarray], rows: Rows | None, parts: list[np.ndarray] | None = None
                        ) -> None:
        """Refuse row sets of this site alone that fail the audit (as :meth:`_row_set_culprit`), else keep them
        and their ``parts``."""
        if not self._audits(rows) or not row_sets:
            return
        earlier = self._earlier(rows)
        problem = row_set_problem(earlier, row_sets, self.rule("disclosure.subset_min_difference"),
                                  self._base(rows)) or self._pooled_pairs(row_sets, rows)  # type: ignore[arg-type]
        if problem:
            raise self._refuse(problem, "disclosure.subset_min_difference",
                               "ask for fewer or wider bins, or on the whole table")
        self._refuse_thin(parts or row_sets, rows)  # type: ignore[arg-type]
        self._record_row_sets(_with_parts(row_sets, parts or []), rows)

    def _refuse_thin(self, row_sets: list[np.ndarray], rows: Rows) -> None:
        """Refuse row sets of this site alone that would give its records of a pooled cell in which another site
        held 1 to q - 1 records (:meth:`_thin_complement`)."""
        if self._thin_complement(row_sets, rows) is not None:
            raise self._refuse(THIN_COMPLEMENT, "secure_aggregation.pooled_thresholds",
                               "ask for other cells or subsets, or pooled (secure=True) as before")

    def _against_pooled(self, row_sets: list[np.ndarray], rows: Rows) -> str | None:
        """The row sets of this site alone against the cells released pooled before: :meth:`_pooled_pairs`, and
        :meth:`_thin_complement`."""
        return self._pooled_pairs(row_sets, rows) or (
            THIN_COMPLEMENT if self._thin_complement(row_sets, rows) is not None else None)

    def _thin_complement(self, row_sets: list[np.ndarray], rows: Rows) -> int | None:
        """A record (its table position) of a pooled cell released before in which another site held fewer than
        its q records, whose records here the row sets of this site alone (over the table, boolean or packed) would
        give for the first time, with those released before (:meth:`_alone_sets`, :func:`~dsfed_server.
        disclosure.differencing.combined`); None if they give none. Released pooled, such a cell hid the few
        records behind the others' shares; the pooled count less this site's and the other sites' own, each
        released alone, would be theirs (Denning & Schlörer 1983). So where the pooled release came first, its
        cells' records stay unreleased alone at the other sites; where the releases alone came first, the pooled
        release merges the cell (:meth:`coarsened`). Refused where the audit is too large."""
        if not row_sets or self.history is None or rows is None:
            return None
        thin = self.history.thin_row_sets(rows.lineage, rows.n_root)  # kept only where the site audits
        if not thin:
            return None
        n, sets = rows.n_root, self._alone_sets(rows)
        try:
            before = combined(thin, sets, n)
            after = combined(thin, sets + [packed_set(m) for m in row_sets], n)
        except AuditTooLarge as exc:
            raise self._refuse(f"the release history of this table is too large to check against its pooled cells "
                               f"({exc})", "secure_aggregation.pooled_thresholds", "ask the site's administrator"
                               ) from None
        for cell, was, now in zip(thin, before, after):
            if now and not was:
                return int(np.flatnonzero(bits(cell, n))[0])
        return self._thin_union(row_sets, rows, thin)

    def _public_shares(self, cells: list[np.ndarray], spans: list[Span], rows: Rows | None) -> list[bool]:
        """Which of this site's records of the spans of pooled cells (``cells``, packed) its releases alone give
        (:func:`~dsfed_server.disclosure.differencing.combined_spans`): their count is known to the analyst without
        the pooled cells. A site that keeps no history knows of none; :class:`AuditTooLarge` where it cannot
        tell."""
        if not self._audits(rows) or not spans:
            return [False] * len(spans)
        return combined_spans(cells, spans, self._alone_sets(rows), rows.n_root)  # type: ignore[arg-type,union-attr]

    def _earlier(self, rows: Rows) -> list[np.ndarray]:
        """Every row set of ``rows``' table released before (packed, once each): its subsets and cells, and the
        records this site's exact sums were over alone (:meth:`exact_sums`' levels)."""
        n, history = rows.n_root, self.history
        found = {bytes(old): old for old in (*history.row_sets(rows.lineage, n),  # type: ignore[union-attr]
                                             *history.summed_row_sets(rows.lineage, n))}  # type: ignore[union-attr]
        return list(found.values())

    def _alone_sets(self, rows: Rows) -> list[np.ndarray]:
        """Every row set of ``rows``' table whose count this site released alone (packed): the records it keeps,
        its subsets and cells, and the records its exact sums were over."""
        n = rows.n_root
        return [self._base(rows), *self.history.row_sets(rows.lineage, n),  # type: ignore[union-attr]
                *self.history.summed_row_sets(rows.lineage, n)]  # type: ignore[union-attr]

    def _pooled_pairs(self, row_sets: list[np.ndarray], rows: Rows) -> str | None:
        """The row sets of this site alone (the analyst sees their counts) against this site's records of
        the cells released pooled before (:func:`~dsfed_server.disclosure.differencing.pooled_pair_problem`)."""
        pooled = self.history.pooled_row_sets(rows.lineage, rows.n_root)  # type: ignore[union-attr]
        if not pooled:
            return None
        return pooled_pair_problem(pooled, [PooledCell(member, int(member.sum())) for member in row_sets],
                                   self.rule("disclosure.subset_min_difference"))

    def _pooled_problems(self, cells: list[PooledCell], rows: Rows | None, decided_pooled: bool = False
                         ) -> list[int]:
        """Which of this site's records of the cells of a pooled release (:class:`~dsfed_server.disclosure.
        differencing.PooledCell`) fail against every subset, cell and pooled cell released before from the same
        table (:func:`~dsfed_server.disclosure.differencing.pooled_problem_cells`,
        ``disclosure.subset_min_difference``)."""
        if not self._audits(rows) or not cells:
            return []
        before = self._earlier(rows)  # type: ignore[arg-type]
        earlier = [PooledCell(old, set_size(old)) for old in before]
        pooled = self.history.pooled_row_sets(rows.lineage, rows.n_root)  # type: ignore[union-attr]
        shared = self._shared(pooled) if decided_pooled else {}
        earlier += [cell for cell in pooled if cell.cell_id not in shared]
        return pooled_problem_cells(earlier, cells, self.rule("disclosure.subset_min_difference"),
                                    list(shared.values()))

    def _shared(self, pooled: list[PooledCell]) -> dict[str, PooledCell]:
        """The pooled cells of this site's history the analyst relayed as they are kept here (identity, pooled
        count, column): their pairs with a new pooled release are decided on the pooled records
        (:func:`~dsfed_server.disclosure.differencing.shared_pairs`); any other is decided here, on this
        site's records alone, as before the sites shared identities."""
        relayed = {(c.cell_id, c.count, c.column) for c in self.relayed_cells or []}
        return {cell.cell_id: cell for cell in pooled
                if cell.cell_id and (cell.cell_id, cell.count, cell.column) in relayed}

    def _shared_pairs(self, cells: list[PooledCell], rows: Rows | None, min_difference: int) -> SharedPairs:
        """This site's part of the pooled decision on pairs of ``cells`` and the relayed pooled cells
        (:func:`~dsfed_server.disclosure.differencing.shared_pairs`). Every site of the round derives the same
        pairs, so a site that keeps no history still takes part (holding none)."""
        relayed = sorted(set(self.relayed_cells or []), key=lambda c: (c.cell_id, c.count, c.column))
        held: dict[str, PooledCell] = {}
        if relayed and cells and self._audits(rows):
            held = self._shared(self.history.pooled_row_sets(rows.lineage, rows.n_root))  # type: ignore[union-attr]
        return shared_pairs(cells, relayed, held, min_difference)

    def agreed(self, cells: list[PooledCell], rows: Rows | None, release: Callable[[], Any], n_cells: int
               ) -> PooledSteps:
        """The last step of a pooled release of ``cells`` (``n_cells`` intervals of a protocol's values, in order)
        with no cut to merge (:meth:`coarsened`): ``release()`` runs only if no site objects to any of them, and
        every site refuses alike otherwise. Each site decides every pair with earlier cells on its own records (no
        shared floor: the sites' ``min_difference`` may differ, and with it the pairs)."""
        return self.coarsened(lambda exclude, kept_pooled: PooledRelease(None, [], cells, n_cells=n_cells), rows,
                              lambda _: release(), ordered=True)

    def coarsened(self, attempt: Callable[[frozenset[Cut], frozenset[Cut]], PooledRelease], rows: Rows | None,
                  on_release: Callable[[PooledRelease], Any], exclude: frozenset[Cut] = frozenset(),
                  shared: Floor | None = None, ordered: bool | None = None,
                  kept_pooled: frozenset[Cut] = frozenset()) -> PooledSteps:
        """The last steps of a pooled release of cells, coarsened where it must be, as a per-site release is:
        every site seals, per released cell of ``attempt(exclude, kept_pooled)``, whether its own records of it fail its
        audit (:meth:`_pooled_problems`); where no site objects to any, ``on_release`` releases the
        result and the cells join this site's history; otherwise the cut above each cell objected to (the
        one below, for the last) is dropped and every site tries again alike, and a release with no cut
        left to drop is refused. The analyst sees only the result and the cuts it dropped, never which
        site objected (``disclosure.subset_min_difference``).

        With the floor the sites share (``shared``), a pair of a new cell and an earlier pooled cell the analyst
        relays (its identity, the same at every site of its release) is decided on the pooled records instead,
        by the largest ``min_difference`` of the sites: the sites sum, per pair, their records in one cell and
        not the other, and a cell is objected to that differs from an earlier one by 1 to ``min_difference - 1``
        pooled records (:func:`~dsfed_server.disclosure.differencing.shared_pair_problems`, which says when the
        holders' own audits decide instead). A site alone cannot tell whether the others' records of the two
        are nested as its own are, and would object to every cell nested in an earlier one at this site by a
        few records. The released cells get an identity from a random number the sites sum in the same step
        (none of them chooses it), which the result carries (:class:`~dsfed_server.disclosure.relay.Recorded`)
        for the analyst to relay.

        The sites also merge a span of cells whose records their releases alone do not give are 1 to q - 1, and
        keep the spans some site held 1 to q - 1 records of (:meth:`_shares`); ``kept_pooled``: of ``exclude``,
        the cuts so dropped (``secure_aggregation.pooled_thresholds``, a reason of their own in the result)."""
        release = attempt(exclude, kept_pooled)
        problems = self._pooled_problems(release.own_cells, rows, decided_pooled=shared is not None)
        lined_up = bool(release.cuts) if ordered is None else ordered
        spans = cell_spans(release.n_cells, lined_up, release.shape)
        differ = max(self.rule("disclosure.subset_min_difference"), shared.min_difference if shared else 0)
        pairs = self._shared_pairs(release.own_cells, rows, differ) if shared else SharedPairs([], [], {})
        if release.cuts:  # per released cell: the cuts beside those objected to are merged
            vector = np.zeros(release.n_cells)
            vector[problems] = 1
        else:  # nothing to merge (categories, a protocol's groups): one objection, every site's vector alike
            vector = np.asarray([float(bool(problems))])
        tag = np.asarray([secrets.randbelow(2**40) for _ in range(2)], dtype=float)  # the cells' shared identity
        shares = self._shares(release, rows, spans)
        kind = kind_of(lined_up, release.shape, release.column)
        current = self._layout_here(release, rows, kind)
        before = self._earlier_releases(current, rows)
        unions = self._alone_unions(current, rows, before)
        piece_of, piece_cell, piece_size = self._pieces(current, rows, before)
        parted = np.bincount(piece_cell, minlength=release.n_cells) > 1  # cells earlier releases cut here
        thin_pieces = np.zeros(release.n_cells)
        thin_pieces[piece_cell[(piece_size < self.q) & parted[piece_cell]]] = float(self.q > 1)

        def advance(pooled: dict[str, np.ndarray], floor: Floor) -> tuple[Any, PooledSteps | None]:
            objected = set(np.flatnonzero(np.ravel(pooled["objections"]) > 0.5).tolist())
            if pairs.positions:
                both = shared_pair_problems(pairs, pooled, differ)
                objected |= both if release.cuts else {0} if both else set()
            if float(np.ravel(pooled.get(UNAUDITED, np.zeros(1)))[0]) > 0.5:
                raise self._refuse(
                    "a site of the round cannot tell which of its records of these pooled cells its own releases give "
                    "(its release history of the table is too large to audit), so it cannot keep another site's few "
                    "records of a cell from the pooled count less the sites' own",
                    "secure_aggregation.pooled_thresholds", "ask the sites' administrators")
            hidden = np.rint(np.ravel(pooled.get(HIDDEN, np.zeros(0))))
            exposed = apart({merged_at(spans[k], release.n_cells)
                             for k in np.flatnonzero((hidden > 0) & (hidden < floor.q))})
            objected |= exposed if release.cuts else {0} if exposed else set()  # a span's last cell merges upwards
            failing = np.rint(np.ravel(pooled.get(FAILING, np.zeros(hidden.size))))
            alone = np.rint(np.ravel(pooled.get(HOLDERS, np.zeros(hidden.size)))) == 1  # one site's hidden records
            revealed = apart({merged_at(spans[k], release.n_cells) for k in np.flatnonzero(alone & (hidden > 0) &
                                                                                         (failing == hidden))})
            if revealed and not release.cuts:
                raise self._refuse(
                    "every record of a span of these pooled cells that the sites' releases alone do not give is at "
                    f"sites whose records of it differ from their other releases by fewer than "
                    f"{self.rule('disclosure.subset_min_difference')}: the pooled count less the others' own would "
                    "single those records out", "disclosure.subset_min_difference",
                    "ask for fewer or coarser cells, or on the whole table")
            objected |= revealed

            def finish() -> tuple[Any, None]:  # the release and its records, in one transaction of the history
                cells = with_identities(release.own_cells, pooled["tag"])
                with self.recording():
                    result = on_release(release)
                    self.record_pooled_cells(cells, rows, kind if len(cells) == release.n_cells else "")
                    if THIN in pooled:
                        elsewhere = np.rint(np.ravel(pooled[THIN])) - shares[THIN]
                        if FAILING in pooled:
                            elsewhere += np.rint(np.ravel(pooled[FAILING])) - shares[FAILING] > 0.5
                        self._record_thin(release.own_cells, spans, elsewhere, rows)
                        self._record_exposed(release.own_cells, spans,
                                             (shares[HIDDEN] > 0) & (hidden == shares[HIDDEN]), shares[HIDDEN] > 0,
                                             rows, release.parts)
                    others = np.rint(np.ravel(pooled[PIECES])) - thin_pieces > 0.5
                    self._record_thin_pieces(piece_of, np.flatnonzero(others[piece_cell]), rows)
                return Recorded(result, [[c.cell_id, c.count, c.column] for c in cells]), None

            thin = np.rint(np.ravel(pooled.get(THIN, np.zeros(0))))[:release.n_cells]
            held, before = np.ravel(pooled[UNION])[:2] > 0.5  # some site released a union of these cells alone,
            pieces = np.rint(np.ravel(pooled[PIECES]))  # and some site is thin in a cell, or in a part of one
            if not objected and held and (thin.any() or before or pieces.any()):  # (alike at every site)
                elsewhere = (thin - shares[THIN][:release.n_cells] > 0.5) | (pieces - thin_pieces > 0.5)
                return None, self._union_round(release, unions, elsewhere, finish,
                                               lambda drop: self.coarsened(attempt, rows, on_release, exclude | drop,
                                                                           shared, ordered, kept_pooled | drop))
            if not objected:
                return finish()
            cuts = release.cuts
            if not cuts and exposed:
                raise self._refuse(
                    "a cell of this pooled table holds fewer than q records at some sites whose records of it are "
                    "not released alone, while every other site's are: the pooled count less the others' own "
                    "would be those few records'", "secure_aggregation.pooled_thresholds",
                    "ask for fewer or coarser cells, or on the whole table")
            if not cuts:
                raise self._refuse(
                    "a site's records of these pooled cells, with earlier cells or subsets of the same table, leave "
                    f"fewer than {self.rule('disclosure.subset_min_difference')} records, and the pooled counts "
                    "fewer too: comparing them would single those records out",
                    "disclosure.subset_min_difference",
                    "ask for fewer or wider cells, or over the whole table or a subset that differs more")
            drop = {cuts[min(j, len(cuts) - 1)] for j in objected}
            only_pooled = {cuts[min(j, len(cuts) - 1)] for j in exposed} - {
                cuts[min(j, len(cuts) - 1)] for j in objected - exposed}
            return None, self.coarsened(attempt, rows, on_release, exclude | drop, shared, ordered,
                                        kept_pooled | only_pooled)

        union = [float(bool(unions)), float(any(u.thin_before for u in unions))]
        return PooledSteps({"objections": vector, "tag": tag, UNION: np.asarray(union), PIECES: thin_pieces,
                            **pairs.fields,
                            **shares}, advance, frac_bits=8)

    def _union_round(self, release: PooledRelease, unions: list[Union], elsewhere: np.ndarray,
                     finish: Callable[[], tuple[Any, None]], merge: Callable[[frozenset[Cut]], PooledSteps]
                     ) -> PooledSteps:
        """A second sealed step of a pooled release some site held 1 to q - 1 records of a cell of (or of a part of
        one, :meth:`_pieces`), where some site released a union of its cells alone before (the first step sums a flag
        of each, and of a union holding records of a span another site was thin in at an earlier release): each site
        objects, per union of the cells (or of their refinement with the earlier releases of the column) that no span
        stands for whose records here it released alone before (``unions``, :meth:`_alone_unions`), to the cells whose
        merger with the next breaks it (for a union of the release's cells, its last cell of its first run) where
        another site was thin in a cell of it or a part of one (``elsewhere``, per cell) or it holds such an earlier
        span's records here (``merge``: the release again, those cuts dropped); a table of categories is refused.
        Where none objects, ``finish`` releases. A site cannot see the others' shares before the first sum, and a
        union none of whose cells or parts another site is thin in holds 0 or q or more records of each site's."""
        vector = np.zeros(release.n_cells if release.cuts else 1)
        for union in unions:
            if union.thin_before or elsewhere[list(union.touched)].any():
                vector[list(union.breaking) if release.cuts else 0] = 1

        def advance(pooled: dict[str, np.ndarray], floor: Floor) -> tuple[Any, PooledSteps | None]:
            objected = np.flatnonzero(np.ravel(pooled[UNION]) > 0.5).tolist()
            if not objected:
                return finish()
            if not release.cuts:
                raise self._refuse(UNION_ALONE, "secure_aggregation.pooled_thresholds",
                                   "ask for other cells, or for the pooled release first")
            cuts = release.cuts
            return None, merge(frozenset(cuts[min(j, len(cuts) - 1)] for j in objected))

        return PooledSteps({UNION: vector}, advance, frac_bits=8)

    def _shares(self, release: PooledRelease, rows: Rows | None, spans: list[Span]
                ) -> dict[str, np.ndarray]:
        """This site's part of the pooled check of a pooled release's cells against the releases of each site
        alone, per span of released cells (:func:`cell_spans`): whether it holds 1 to q - 1 records of it
        (:data:`THIN`, q its own), and how many of its records of it no release of this site alone gives
        (:data:`HIDDEN`: none where they give them, :meth:`_public_shares`). A span whose hidden records are 1 to
        q - 1 over the sites is merged upwards (or the table refused): the pooled count less the other sites'
        releases alone would be those records' (Denning & Schlörer 1983). A span some other site held 1 to q - 1
        records of is kept (:meth:`_record_thin`), so that this site does not release its own records of it
        alone later (:meth:`_thin_complement`). Each site also seals whether it holds hidden records of a span
        (:data:`HOLDERS`) and, where its hidden records would fail its audit as a release alone, how many
        (:data:`FAILING`, :meth:`_fails_alone`): a span whose hidden records are one site's, failing so, is that
        site's release alone and is merged (or the table refused); a span another site's share fails so is kept as a
        thin one. A release that names no number of cells takes no part."""
        if not spans:
            return {}
        sizes, public, unaudited = np.zeros(len(spans)), np.zeros(len(spans), dtype=bool), 0.0
        fails = np.zeros(len(spans), dtype=bool)
        if len(release.own_cells) == release.n_cells:
            cells = [packed_set(c.rows) for c in release.own_cells]
            counts = np.array([float(set_size(c)) for c in cells])
            sizes = np.array([counts[list(span)].sum() for span in spans])
            try:
                public = np.array(self._public_shares(cells, spans, rows), dtype=bool)
                fails = self._fails_alone(cells, spans, (sizes > 0) & ~public, rows,
                                          np.array([c.count for c in release.own_cells]))
            except AuditTooLarge:
                unaudited = 1.0
        thin = (sizes > 0) & (sizes < self.q) & ~public if self.q > 1 else np.zeros(len(spans), dtype=bool)
        hidden = np.where(public, 0.0, sizes)
        return {THIN: thin.astype(float), HIDDEN: hidden, HOLDERS: (hidden > 0).astype(float),
                FAILING: np.where(fails, hidden, 0.0), UNAUDITED: np.asarray([unaudited])}

    def _fails_alone(self, cells: list[np.ndarray], spans: list[Span], candidates: np.ndarray, rows: Rows | None,
                     pooled: np.ndarray) -> np.ndarray:
        """Per span of a pooled release's cells (``cells``: this site's records of each, packed), whether this site's
        records of it, were they released alone, would fail its audit of a release alone
        (``disclosure.subset_min_difference``: :func:`~dsfed_server.disclosure.differencing.row_set_problem` and
        :func:`~dsfed_server.disclosure.differencing.spanned_gap`) against its records of every cell of the release
        and the row sets it released alone before (:meth:`_alone_sets`, the levels of its exact sums among them), and
        the cells of the release outside the span that it holds every record of (``pooled``: the cells' pooled
        counts; the first :data:`HELD_CELLS`), which the pooled release gives as it would give them alone, and its
        records of pooled cells kept before of q records or more (:meth:`_kept_cells`), one by one and,
        :data:`KEPT_COMBINED` of them (the latest and those nearest the span:
        :func:`~dsfed_server.disclosure.differencing.nearest_sets`), in combination. Only the ``candidates`` (its
        records of the span not released alone, some) are audited, the first
        :data:`EXPOSED_AUDITS` of them so (cells, rows and columns, the shortest runs first), the rest by the bound
        :func:`~dsfed_server.disclosure.differencing.near_spans` (a union of atoms within q - 1 records; it does not
        see a few records that the span and earlier row sets together set apart) and against each kept cell within
        q - 1 records of their size. Where every record of a span that
        no site released alone is at one site, whose share fails so, the pooled count less the others' releases
        alone (none, where they hold none) is that site's release alone (Denning & Schlörer 1983): :meth:`coarsened`
        merges the span, and the other sites keep it as a span another site was thin in. :class:`AuditTooLarge`
        where the atoms are too many."""
        out = np.zeros(len(spans), dtype=bool)
        if not self._audits(rows) or not candidates.any():
            return out
        n, minimum = rows.n_root, self.rule("disclosure.subset_min_difference")  # type: ignore[union-attr]
        here = np.array([set_size(c) for c in cells])
        held = np.flatnonzero((here > 0) & (here == pooled))[:HELD_CELLS].tolist()
        within, earlier = np.bitwise_or.reduce(cells), self._alone_sets(rows)[1:]  # type: ignore[arg-type]
        exposed = self._kept_cells(rows)  # type: ignore[arg-type]
        chosen = sorted((k for k, span in enumerate(spans) if candidates[k] and len(span) < len(cells)),
                        key=lambda k: len(spans[k]))
        exact, bounded = chosen[:EXPOSED_AUDITS], chosen[EXPOSED_AUDITS:]
        kept_sizes = np.array([set_size(cell) for cell in exposed])

        def combined(member: np.ndarray) -> list[np.ndarray]:
            return nearest_sets(member, exposed, KEPT_COMBINED, KEPT_LATEST)

        def alike(k: int) -> list[np.ndarray]:  # kept cells whose size is within q - 1 of its records of span k
            return [exposed[j] for j in np.flatnonzero(np.abs(kept_sizes - here[list(spans[k])].sum()) < minimum)]

        for k in exact:
            member = np.bitwise_or.reduce([cells[j] for j in spans[k]])
            besides = [*earlier, *(cells[j] for j in held if j not in spans[k])]
            out[k] = bool(row_set_problem(besides, [bits(member, n).astype(bool)], minimum, within)
                          or self._spanned(member, [within, *besides, *combined(member)], n, unaudited_fails=True)
                          or differs_little(member, alike(k), minimum))
        near = near_spans(cells, [spans[k] for k in bounded], [within, *earlier], n, below=minimum)
        for k, fails in zip(bounded, near):
            close = alike(k)
            out[k] = fails or bool(close and differs_little(np.bitwise_or.reduce([cells[j] for j in spans[k]]), close,
                                                            minimum))
        return out

    def _record_exposed(self, cells: list[PooledCell], spans: list[Span], exposed: np.ndarray, held: np.ndarray,
                        rows: Rows | None, parts: Sequence[np.ndarray] = ()) -> None:
        """Keep this site's records of each released span whose every record no site released alone is here
        (``exposed``, per span), and of each cell it holds such records of (``held``, per span): the pooled count
        less the others' releases alone (none, where they hold none) gives them, as this site's release alone
        would, now for the first and, for the second, once the other sites holding records of the cell release
        theirs alone, which this site cannot see (Denning & Schlörer 1983). A span exposed now holding a cell that
        is not is kept whole (the others' shares of that cell are not given alone, the span's are); a span of cells
        exposed now is their union. They are kept apart from the releases alone that every audit combines (keeping
        them there grew the history past what a padding member's walk of the decile breaks could audit), with its
        records of each at 1 of each 0/1 quantity the release summed per cell (``parts``,
        :func:`~dsfed_server.disclosure.gate.own_parts`: the events, whose number the pooled release gives too).
        Those of q records or more here (:meth:`_kept_cells`) are audited against: by a later release alone
        (:meth:`_against_kept`) and by this site's share of a later pooled span (:meth:`_fails_alone`, its first
        :data:`EXPOSED_AUDITS` spans)."""
        if not self._audits(rows) or len(spans) != exposed.size or not cells:
            return
        single = {span[0] for span, shown in zip(spans, exposed) if shown and len(span) == 1}
        kept = [span for span, shown in zip(spans, exposed) if shown and (len(span) == 1 or not single >= set(span))]
        kept += [span for span, here in zip(spans, held) if here and len(span) == 1 and span[0] not in single]
        packed = [m for m in span_rows(cells, kept) if set_size(m)]
        if packed:
            self.history.record_exposed_row_sets(rows.lineage, rows.n_root, packed,  # type: ignore[union-attr]
                                                 analyst=self._analyst)
            within = [m & part for m in packed for part in parts]
            self.history.record_exposed_parts(rows.lineage, rows.n_root,  # type: ignore[union-attr]
                                              [m for m in within if set_size(m)], analyst=self._analyst)

    def _record_thin(self, cells: list[PooledCell], spans: list[Span], elsewhere: np.ndarray,
                     rows: Rows | None) -> None:
        """Keep this site's records of the spans of released cells some other site held 1 to q - 1 records of."""
        if not self._audits(rows) or len(spans) != elsewhere.size or not cells:
            return
        thin = [span for span, other in zip(spans, elsewhere) if other > 0.5]
        packed = [m for m in span_rows(cells, thin) if set_size(m)]
        if packed:
            self.history.record_thin_row_sets(rows.lineage, rows.n_root, packed,  # type: ignore[union-attr]
                                              analyst=self._analyst)

    def recording(self) -> AbstractContextManager[Any]:
        """One transaction of the release history for a release's records
        (:meth:`~dsfed_server.disclosure.history.History.transaction`; nothing to do without a history)."""
        return self.history.transaction() if self.history is not None else nullcontext()

    def record_pooled_cells(self, cells: list[PooledCell], rows: Rows | None, kind: str = "") -> None:
        """Keep this site's records of pooled cells and, where ``kind`` says how a whole release's cells lie
        (:func:`~dsfed_server.disclosure.unions.kind_of`), the release they make."""
        if self._audits(rows) and cells:
            self.history.record_pooled_row_sets(rows.lineage, rows.n_root, cells,  # type: ignore[union-attr]
                                                analyst=self._analyst)
            if kind:
                self.history.record_pooled_release(rows.lineage, rows.n_root, kind,  # type: ignore[union-attr]
                                                   [c.cell_id for c in cells], analyst=self._analyst)

    def _layout_here(self, release: PooledRelease, rows: Rows | None, kind: str) -> Layout | None:
        """This site's records of a pooled release's cells laid out as ``kind``
        (:func:`~dsfed_server.disclosure.unions.layout`); None where it keeps no history of them or does not hold its
        records of every cell."""
        if not self._audits(rows) or len(release.own_cells) != release.n_cells:
            return None
        cells = [packed_set(c.rows) for c in release.own_cells]
        return Layout(kind, *layout(cells, [c.count for c in release.own_cells], rows.n_root))  # type: ignore

    def _alone_unions(self, current: Layout | None, rows: Rows | None, before: Refined | None) -> list[Union]:
        """The unions of a pooled release's cells (``current``) that no span stands for
        (:func:`~dsfed_server.disclosure.unions.spanned`) whose records here a release of this site alone gave before
        (:meth:`_alone_sets`), and of intervals of a column, the unions of cells of their refinement with the
        earlier pooled releases of the column (``before``: theirs, :func:`~dsfed_server.disclosure.unions.across`)
        that its cuts make."""
        if current is None or current.sizes.size < 2:
            return []
        n = rows.n_root  # type: ignore[union-attr]
        kind, cell_of, sizes, counts = current.kind, current.cell_of, current.sizes, current.counts
        alone = self._alone_sets(rows)  # type: ignore[arg-type]
        found = (union_of_cells(member, cell_of, sizes) for member in alone)
        loose = {positions for positions in found
                 if positions is not None and not spanned(positions, counts, kind, sizes)}
        out = [Union(positions, (breaking_cell(positions),)) for positions in sorted(loose)]
        if before is None:
            return out
        after = refinement([*before.releases, current])
        made = [member for member in alone  # unions its cuts make: of the refinement with them, not without
                if across(member, after) and (whole_cells(member, before.cell_of, before.sizes) is None
                                              or strays(member, before.cell_of, after.cell_of >= 0))]
        thin = self.history.thin_row_sets(rows.lineage, n)  # type: ignore[union-attr]
        for member in made:
            cuts = breaking_cuts(member, before, cell_of)
            if cuts:  # none: a union of whole cells of the earlier releases with this one's total, given without it
                inside = cell_of[bits(member, n).astype(bool)]
                touched = tuple(int(k) for k in np.unique(inside[inside >= 0]))
                out.append(Union(touched, cuts[0], any(np.any(t & member) for t in thin)))
        return out

    def _earlier_releases(self, current: Layout | None, rows: Rows | None) -> Refined | None:
        """The refinement of the pooled releases of the column a pooled release's cells (``current``) are intervals
        of that this site kept before (:func:`~dsfed_server.disclosure.unions.refinement`); None where there are
        none."""
        column = column_of(current.kind) if current is not None else ""
        earlier = self._column_releases(rows).get(column, []) if column else []  # type: ignore[arg-type]
        return refinement(earlier) if earlier else None

    def _pieces(self, current: Layout | None, rows: Rows | None, before: Refined | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This site's parts of a pooled release's cells (``current``) that the earlier releases of its column cut
        (``before``: their refinement): per record the part (a cell of the refinement of all of them) that holds it
        (-1: none), and per part its cell of the release and its records here. The pooled count of each part is
        public (the records below the cuts of either release), so a site holding 1 to q - 1 records of one, in a
        cell it holds q or more of, is as thin as in a cell: the first sealed step sums, per cell, whether some site
        is (:data:`PIECES`), and the other sites keep their records of those parts as of a cell another site was thin
        in (:meth:`_record_thin_pieces`); a union released alone that touches one is merged (:meth:`_union_round`)."""
        none = np.zeros(0, dtype=np.int64)
        if current is None or before is None:
            return np.full(rows.n_root if rows is not None else 0, -1), none, none
        inside = current.cell_of >= 0
        keys, piece, sizes = np.unique(np.stack([before.cell_of[inside], current.cell_of[inside]]), axis=1,
                                       return_inverse=True, return_counts=True)
        piece_of = np.full(current.cell_of.size, -1)
        piece_of[inside] = np.ravel(piece)
        return piece_of, keys[1].astype(np.int64), sizes

    def _record_thin_pieces(self, piece_of: np.ndarray, pieces: np.ndarray, rows: Rows | None) -> None:
        """Keep this site's records of the parts of a pooled release's cells (:meth:`_pieces`) at ``pieces`` as of a
        cell another site was thin in."""
        packed = [np.packbits(piece_of == k) for k in pieces]
        if packed and self._audits(rows):
            self.history.record_thin_row_sets(rows.lineage, rows.n_root, packed,  # type: ignore[union-attr]
                                              analyst=self._analyst)

    def _column_releases(self, rows: Rows) -> dict[str, list[Layout]]:
        """This site's pooled releases of intervals of a column (over all its records or a subset's), by the
        column."""
        out: dict[str, list[Layout]] = {}
        for kind, cells in self.history.pooled_releases(rows.lineage, rows.n_root):  # type: ignore[union-attr]
            column = column_of(kind) or (cells[0].column if in_order(kind) else "")  # kept before kinds named it
            if column:
                found = layout([packed_set(c.rows) for c in cells], [c.count for c in cells], rows.n_root)
                out.setdefault(column, []).append(Layout(kind, *found))
        return out

    def _thin_union(self, row_sets: list[np.ndarray], rows: Rows, thin: list[np.ndarray]) -> int | None:
        """A record (its table position) of a pooled cell another site held 1 to q - 1 records of (``thin``: this
        site's records of such spans) that a row set of this site alone (``row_sets``) holds, where the row set is a
        union of a pooled release's cells that no span stands for; or that it holds records of, where it is cells of
        the refinement of pooled releases of one column that no release's cell or span stands for (one of them may
        be part of that pooled cell: :func:`~dsfed_server.disclosure.unions.across`); None if there is none. The
        union's pooled count less the sites' own would be the others' records of it, and the spans' checks at the
        pooled release did not see that union."""
        n = rows.n_root
        packed = [packed_set(member) for member in row_sets]
        within = [(m, cell) for m in packed for cell in thin if set_size(cell) and not np.any(cell & ~m)]
        for kind, cells in self.history.pooled_releases(rows.lineage, n) if within else ():  # type: ignore[union-attr]
            cell_of, sizes, counts = layout([packed_set(c.rows) for c in cells], [c.count for c in cells], n)
            for member, cell in within:
                positions = union_of_cells(member, cell_of, sizes)
                if positions is not None and not spanned(positions, counts, kind, sizes):
                    return int(np.flatnonzero(bits(cell, n))[0])
        touching = [(m, cell) for m in packed for cell in thin if np.any(cell & m)]
        for releases in self._column_releases(rows).values() if touching else ():
            refined = refinement(releases) if len(releases) > 1 else None
            for member, cell in touching:
                if refined is not None and across(member, refined):
                    return int(np.flatnonzero(bits(cell & member, n))[0])
        return None

    def _record_row_sets(self, row_sets: list[np.ndarray], rows: Rows | None) -> None:
        if self._audits(rows):
            for member in row_sets:
                self.history.record_row_set(rows.lineage, member, analyst=self._analyst)  # type: ignore[union-attr]

    # --- what the site service needs of the rules (the budget, secure aggregation), read here like every rule ---

    def caps(self) -> Caps:
        """The privacy budget's caps: per table over every analyst, and each analyst's share
        (``budget.epsilon_per_table`` ... ``budget.delta_per_analyst``)."""
        return Caps(Cap("table", self.rule("budget.epsilon_per_table"), self.rule("budget.delta_per_table")),
                    Cap("analyst", self.rule("budget.epsilon_per_analyst"), self.rule("budget.delta_per_analyst")))

    def warn_share(self) -> float:
        """The share of what remains of a budget above which a call's cost preview warns (``budget.warn_share``)."""
        return self.rule("budget.warn_share")

    def declared_floor(self, pooled: bool = True) -> dict[str, Any]:
        """What this site declares to the others of a sealed step: its q, cut margin, the fewest records two row
        sets differ by and, for a pooled release, its dominance rule (they use the largest:
        :func:`~dsfed_server.disclosure.gate.pooled_floor`; a relayed protocol checks per site)."""
        return {"q": self.q, "margin": self.floor.most,
                "dominance": self.rule("secure_aggregation.dominance_sites") if pooled else 0,
                "min_difference": self.rule("disclosure.subset_min_difference")}

    def checks_pooled(self) -> bool:
        """Whether this site checks pooled cells itself, and so takes part in pooled releases
        (``secure_aggregation.pooled_thresholds``)."""
        return self.rule("secure_aggregation.pooled_thresholds")

    def min_sites(self) -> int:
        """The fewest sites a secure sum that must hide each site's share goes over
        (``secure_aggregation.min_sites``)."""
        return self.rule("secure_aggregation.min_sites")

    def affords(self, rows: Rows | None) -> float:
        """How many functions of a column beyond its second moments this site's count affords over the records it
        keeps of ``rows``' table: ``disclosure.sums_per_record`` times them; :data:`UNCOUNTED` where it keeps no
        history to count with (``disclosure.cut_history`` off, q of 1, or records it cannot trace)."""
        if not self._audits(rows):
            return UNCOUNTED
        return self.rule(SUMS_RULE) * self.kept_records(rows)  # type: ignore[arg-type]

    def peers_outnumber(self, n: int, affords: float, pooled_affords: float, sites: int) -> bool:
        """Whether the other sites of a sum of ``n`` of this site's records, over ``sites`` sites whose counts
        afford ``pooled_affords`` functions over the records they keep (:meth:`affords`; this site ``affords``),
        afford on average more than ``disclosure.glm_peer_ratio`` (:math:`\\rho`) times this site's count over
        the ``n``. Their own parts at the same coefficients, released per site and counted there under their own
        rules, take this site's out of the sum; each of them affords at most its count over the records it keeps,
        however the sums split them into subsets, and their mean is no less than the smallest of them. Where they
        afford less, then, the analyst takes apart at most :math:`\\rho` times this site's own count of such
        functions (beside one set of peers and of their tables: :meth:`peer_set`, :meth:`same_peer_tables`);
        where they afford more, the end counts here, each of its functions as :math:`1/\\rho` of one
        (:data:`~dsfed_server.disclosure.equations.APART`), and the bound is the same: :math:`\\rho` times
        ``disclosure.sums_per_record`` functions per record."""
        others = sites - 1
        return others < 1 or pooled_affords - affords > self.rule(PEER_RULE) * self.rule(SUMS_RULE) * n * others

    def table_tag(self, table: str) -> float:
        """This site's tag of ``table``: a whole number below 2^24 keyed by the site's secret, summed over the sites
        of a fit so that each site learns a fingerprint of the other sites' tables (:meth:`same_peer_tables`)."""
        return float(int.from_bytes(hmac.new(self.secret, table.encode(), hashlib.sha256).digest()[:3], "big"))

    def same_peer_tables(self, table: str, fingerprint: float) -> None:
        """A fit over this site's whole ``table`` whose other sites keep no more than ``disclosure.glm_peer_ratio``
        times its records counts no end here: what bounds the analyst's taking it apart is their counts, per table
        they keep. So such fits go over the same tables of the other sites every time, for every analyst
        (``fingerprint``: the sum of their tags, :meth:`table_tag`, as the fit's start summed them), as they go over
        one set of sites (:meth:`peer_set`): beside another table of theirs, each of its counts would afford as
        much again (a site of 36 beside two peers of ten tables each: 30 ends where 3 are afforded)."""
        self.applied.setdefault(PEER_RULE)
        if self.history is None or not self.rule("disclosure.cut_history"):
            return
        mine = f"{round(fingerprint)}"
        if self.history.pin_peer_tables(table, mine, analyst=self._analyst) != mine:
            raise self._refuse(
                "fits over this table beside sites whose counts afford no more than disclosure.glm_peer_ratio times "
                "this site's went over other tables of theirs before (by any analyst): their own parts would take "
                "this site's end out of the sum once more for every table they keep", PEER_RULE,
                "fit over the same tables of the other sites as before (assignTable with the same tables)")

    def noise_share_over(self, n_sites: int) -> float:
        """This site's share of its DP noise variance in a secure sum over ``n_sites`` sites:
        1 / min(honest_sites, n_sites) (``secure_aggregation.honest_sites``)."""
        return 1.0 / min(self.rule("secure_aggregation.honest_sites"), n_sites)

    def plain_release(self) -> None:
        """``secure_aggregation.require``: a function offering secure sums is not released per site."""
        if self.rule("secure_aggregation.require"):
            raise self._refuse(f"{self.function} is released at this site only as a secure sum over sites",
                               "secure_aggregation.require",
                               "ask with the secure option (dsfed: FederatedSession.secure_sum)")

    def peer_set(self, pinned: dict[str, str], keys: dict[str, bytes], analyst: str) -> None:
        """One set of peers per table, for all analysts (``pinned``: the set recorded for each table the call
        read): the difference of sums over two site sets would isolate fewer than min_sites sites, and the other
        sites' own parts at a fit's estimate, which take this site's out of the sum as often as the smallest of
        them affords (:meth:`peers_outnumber`), would afford as much again beside every other set."""
        other = {table: peers for table, peers in pinned.items() if peers != ",".join(sorted(keys))}
        if other:
            table, peers = next(iter(other.items()))
            raise self._refuse(
                f"secure sums, pooled releases and relayed fits on {table} (by {analyst} or any other analyst) go "
                f"over the sites {peers}; sums over another set of sites would let the difference of the two isolate "
                f"fewer than {self.min_sites()} sites, or the other sites' own parts take this site's out of a fit "
                "beside each set", "secure_aggregation.min_sites",
                "ask with the same sites as before (retry once the missing site is back); a fit over fewer sites "
                "than min_sites is this site's own and counts here")

    def released_cuts(self, key: tuple[str, str]) -> list[Cut]:
        """The cuts this site has released on a column (its cut history; empty when not kept)."""
        return self._cut_history(key)

    def pooled_history(self, key: tuple[str, str]) -> list[Cut]:
        """In a pooled release: the cuts released before on a column at every site of the round, as
        relayed by the analyst; :class:`HistoryBehind` when they miss one this site released.

        A vector that is no table column, nor a monotone function of one (a column of several roots, a
        polynomial that turns, values without provenance), keeps its cuts under its own ordering: a
        near copy of it has a history of its own, and only the row-set audit, which per-site releases
        have, catches two releases on the two that differ by one record. Pooled releases are not
        audited by row sets, so such a vector is released per site only."""
        if key[0] == NO_TABLE and self.rule("disclosure.cut_history"):
            raise self._refuse(
                "a pooled release of cells on a vector that is no table column nor a monotone function of one "
                "(a combination of several columns, a function that turns, values without provenance): its cuts "
                "have no history the sites share, and a pooled release is not checked against earlier row sets",
                "disclosure.cut_history", "ask per site (secure=False), where every cell's records are audited, "
                "or bin a table column or a monotone transform of one")
        own = self._cut_history(key)
        relayed = (self.relayed_cuts or {}).get(key, [])
        missing = set(own) - set(relayed)
        if missing:
            raise HistoryBehind(key, own)
        return sorted(set(relayed))

    def record_pooled(self, key: tuple[str, str], cuts: list[Cut]) -> None:
        self._record_cuts(key, cuts, "pooled")

    def reference_edges(self, p: np.ndarray, edges: np.ndarray, root: RootColumn | None) -> np.ndarray:
        """Which edges of an analyst's reference CDF this site evaluates at its scores ``p``: the
        edges are cuts like any other (the records below an edge; the last one: at or below it), and
        :func:`gate.decide_local` keeps those that, with every cut released before on the column the
        scores come from (by any analyst), leave at least q records between cuts (:func:`gate.decide`;
        an edge outside the range the dictionary declares always fits). An end edge that does not fit
        refuses the reference. Every edge where the rules file's
        ``disclosure.cut_history`` is false (test profiles)."""
        edges = np.asarray(edges, dtype=float)
        if not self.rule("disclosure.cut_history"):
            return np.ones(edges.size, dtype=bool)
        if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
            raise CallError("the reference's edges must be finite and strictly increasing")
        cells = Intervals(np.asarray(p, dtype=float), cuts_from(edges[:-1], False) + (Cut(float(edges[-1]), True),),
                          render=lambda released: None, what="reference", column=root)
        lock = self.history.lock if self.history is not None else nullcontext()
        with lock:
            decided = decide_local(cells, self.floor, self._cut_history(cells.history_key),
                                   site_pick(self.secret, cells))
            if decided[0] is not KEEP or decided[-1] is not KEEP:
                raise self._refuse(
                    f"the reference's range [{edges[0]:g}, {edges[-1]:g}] cuts this site's records within {self.q} of "
                    "where this or an earlier release did; widen it to cover every score",
                    "disclosure.cut_history",
                    "use the range the data dictionary declares for the scores (e.g. [0, 1] for probabilities)")
            keep = np.array([d is KEEP for d in decided])
            self._record_cuts(cells.history_key, [c for c, k in zip(cells.root_cuts(), keep) if k], "reference")
        return keep

    def placement_within_bin(self, within_bin: str) -> None:
        """Placement values against a reference CDF are a step inside each of its bins ('tied'): linear
        inside a bin they are a strictly increasing function of each record's score, and against an
        analyst who knows every other record their sum is the last record's score (Matthews & Harel,
        Matthews & Harel (2013)). As a step, the sum is one per cell the gate released. ``'linear'`` only where the
        rules keep no cut history (test profiles)."""
        if within_bin == "linear" and self.rule("disclosure.cut_history"):
            raise self._refuse(
                "placement values linear inside a bin give, with every other record known, the last record's "
                "score; this site evaluates the reference as a step inside each of its bins",
                "disclosure.cut_history", "ask with within_bin = 'tied' (the dsfed client's default)")

    def factor_levels(self, n_levels: int, n: int, what: str) -> None:
        """A factor has at most max_factor_levels levels and at most factor_levels_density * n; in a
        pooled release n is the pooled count (the cells released are the pooled ones)."""
        max_levels, density = self.rule("disclosure.max_factor_levels"), self.rule("disclosure.factor_levels_density")
        if self.deferred is not None and n_levels <= max_levels:
            self.deferred.append((f"levels:{n_levels}:{what}", int(n)))
            return
        if n_levels > max_levels:
            raise self._refuse(
                f"{what} has more levels than the site's maximum of {max_levels}",
                "disclosure.max_factor_levels",
                "group levels into fewer categories",
            )
        if n_levels > density * n:
            raise self._refuse(
                f"{what} has more levels than {density:g} per record allows",
                "disclosure.factor_levels_density",
                "group levels into fewer categories",
            )

    def order_statistics(self, n: int) -> None:
        """Quantiles rest on at least ``quantile_min_multiple`` x q values: a few type-7 quantiles and
        the mean are linear equations in the order statistics, which on a handful of values give most
        of them exactly (the minimum and maximum among them)."""
        multiple = self.rule("disclosure.quantile_min_multiple")
        needed = math.ceil(multiple * self.q)
        if n < needed:
            raise self._refuse(
                f"quantiles of {n} values; this site releases quantiles of at least {needed} "
                f"({multiple:g} x q = {self.q})", "disclosure.quantile_min_multiple",
                f"use a larger table or subset (at least {needed} non-missing values)")

    def saturation(self, n_params: int, n: int) -> None:
        """A model's parameters are at most glm_saturation * n (nfilter.glm); pooled, n is the pooled count."""
        ratio = self.rule("disclosure.glm_saturation")  # applied here or, deferred, on the pooled count
        if self.deferred is not None:
            self.deferred.append(("saturation:" + str(n_params), int(n)))
            return
        if n_params > ratio * n:
            raise self._refuse(
                f"model has more parameters than {ratio:g} x the number of records allows",
                "disclosure.glm_saturation",
                "fit fewer parameters or use more records",
            )


    def mechanism(
        self, *, epsilon: float | None = None, delta: float | None = None, sensitivity: float | None = None
    ) -> AnalyticGaussian | None:
        """The site's DP mechanism. A client may ask for more privacy (smaller epsilon or delta,
        larger sensitivity), never for less: such a request is refused, never used.
        ``None`` when the rules file turns noise off (test profiles only)."""
        mechanism_kind, site_epsilon, site_delta, site_sensitivity = (
            self.rule(f"privacy.{key}") for key in ("mechanism", "epsilon", "delta", "score_l2_sensitivity"))
        for name, value in (("epsilon", epsilon), ("delta", delta), ("sensitivity", sensitivity)):
            if value is not None and not value > 0:
                raise CallError(f"{name} must be positive, got {value}", site=self.site, function=self.function,
                                hint="omit the privacy parameters to use the site's")
        weaker = [
            ("privacy.epsilon", epsilon is not None and epsilon > site_epsilon, f"epsilon {epsilon} > {site_epsilon}"),
            ("privacy.delta", delta is not None and delta > site_delta, f"delta {delta} > {site_delta}"),
            ("privacy.score_l2_sensitivity", sensitivity is not None and sensitivity < site_sensitivity,
             f"sensitivity {sensitivity} < {site_sensitivity}"),
        ]
        for rule, is_weaker, detail in weaker:
            if is_weaker:
                raise self._refuse(
                    f"requested less privacy than the site allows ({detail})", rule,
                    "omit the privacy parameters to use the site's, or ask for more privacy",
                )
        if mechanism_kind == "none":
            return None
        return AnalyticGaussian(
            epsilon=min(epsilon or site_epsilon, site_epsilon),
            delta=min(delta or site_delta, site_delta),
            sensitivity=max(sensitivity or 0.0, site_sensitivity),
            share=self.noise_share,
        )

    def noisy(self, values: np.ndarray, label: str, mechanism: AnalyticGaussian | None, *,
              partition: str | None = None) -> np.ndarray:
        """The values, sorted (no record order is released), plus the mechanism's noise.

        The noise is seeded by the site secret, the function, the label, the
        mechanism's parameters and the sorted values themselves: asking again,
        under another symbol name or with the rows reordered, gets the same noise.

        Every noisy release is charged to the analyst's privacy budget on each site
        table the call read (:mod:`dsfed_server.disclosure.ledger`): checked here,
        before the noise is drawn (a release that would overspend raises
        :class:`~dsfed_core.errors.BudgetExceeded`), and spent by the service only
        once the call has succeeded. A release the analyst already received (same
        seed) costs nothing. Releases of one call that give the same ``partition``
        are about disjoint records (parallel composition: they cost the most
        expensive one); without a partition, each release is charged in full.
        """
        values = np.sort(np.asarray(values, dtype=float))
        if mechanism is None:
            return values
        seed_parts = (self.function, label, repr(mechanism), content_digest(values))
        if self.scope is not None:
            for key in BUDGET_RULES:
                self.applied.setdefault(key)
            self.scope.check(self.function, self.scope.release_key(*seed_parts), mechanism, partition)
        rng = seeded_rng(self.secret, *seed_parts)
        return mechanism.randomise(values, rng)

    def check_analyst_data(self, params: Any = None, args: dict[str, Any] | None = None) -> None:
        """Analyst-supplied vectors (values derived from no site table, e.g. referenceScoresDS's
        table) are never combined record by record with site data in one call, unless the rules
        file's ``disclosure.combine_analyst_vectors`` allows it (dsBase#250: a 0/1 mask isolating
        one record in a sum). An analyst-supplied *table* passed to a table parameter (a lookup,
        such as the pooled reference scores of placementSumsDS) is not record by record."""
        scope = self.scope
        if scope is None or not scope.sources or self.rule("disclosure.combine_analyst_vectors"):
            return
        aligned = scope.analyst_vectors > 0
        if params is not None and args is not None and scope.analyst_tables:
            aligned = aligned or any(
                p.type is not P.TABLE and id(args.get(p.name)) in scope.analyst_tables for p in params)
        if aligned:
            raise self._refuse(
                "a vector or table the analyst supplied cannot be combined record by record with this "
                "site's data: it could act as a mask that singles out a record",
                "disclosure.combine_analyst_vectors",
                "use variables of the site's tables; analyst-supplied values can only serve as lookups "
                "(e.g. the pooled reference scores)",
            )


def enforce_contract(guard: Guard, declared: tuple[str, ...]) -> None:
    """Refuse a call whose function applied a rule it does not declare (its registry entry's ``checks``):
    the declaration is what site governance reviews, so a rule applied beside it is a bug, and nothing
    the call computed is released."""
    undeclared = [rule for rule in guard.applied if rule not in declared and rule not in CALL_RULES]
    if undeclared:
        raise ContractViolation(
            f"{guard.function} applied the rule(s) {', '.join(undeclared)}, which its registry entry does not "
            f"declare (declared: {', '.join(declared) or 'none'}); nothing was released",
            site=guard.site, function=guard.function, rule=undeclared[0],
            hint="this is a bug in the function's declaration, report it to the site's administrator")
