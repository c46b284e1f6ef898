"""Smooth (spline) calibration at the sites: the knots of a restricted cubic spline of logit(p) from
pooled quantiles, its basis, and the calibration errors of the fitted curve (Austin & Steyerberg
2019, "The Integrated Calibration Index (ICI) and related metrics").

**Knots come from the sites**, as every data-dependent parameter does. ``rms::rcs(qlogis(p), 4)`` puts
its knots at the 5, 35, 65 and 95 % type-7 quantiles of logit(p). A knot is a data-dependent parameter,
and one of the analyst's choosing would be a differencing tool: the GLM's parts are sums of
:math:`(x_i - t)_+^3` times outcomes, a piecewise cubic in :math:`t` whose breakpoints are the
records' values, so a few fits at knots the analyst moves recover records; the GLM's saturation
limit (parameters per record) does not stop that, since each fit has four parameters. So
``rcsKnotsDS`` is a pooled protocol (:class:`OrderSearch`): the sites find, on pooled counts sealed
from the analyst, the order statistics the quantiles need (as ``decileGroupsDS`` does); once each
one's bracket holds a single distinct value, the pooled sum of logit(p) over the bracket divided by
its pooled count *is* that value, exactly. Every site computes the knots from them and keeps them
as a symbol whose definition says the sites derived it; ``rcsFrameDS`` builds the basis only from
such a symbol. What leaves is the knots (and the 1 and 99 % quantiles bounding the curve):
type-7 quantiles, as ``quantileMeanDS`` releases them, on at least ``quantile_min_multiple`` x q
pooled records.

**The knots are cuts, which the site controls.** A knot :math:`t` (and a bound of the range) cuts the score column
at :math:`\\mathrm{expit}(t)`: beside a cut released before on that column (an H-L break, a
calibration bin, a threshold) it would single out the records between the two. So, once the search
settles, one more pooled step counts the column's records between all cuts -- these with the
column's cut history, as ``decileGroupsDS`` checks its breaks -- and the sites release the knots
only if, pooled, every cell between cuts holds 0 or at least q records
(:class:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts`), and otherwise refuse
(``disclosure.cut_history``). The 1 or 99 % quantile, a near-extreme record's value on a few
hundred records, is released only where it fits too; else the range ends at the outer knot on that
side (``range_withheld`` says so). The released cuts join the history, and the cells between them the
table's pooled row sets: the knots' ranks tell their pooled counts, so a later release over a subset at
the same cuts would difference against them into the few records the two differ by; the row-set audit
of every later release sees them (as it sees Hosmer-Lemeshow's groups). The knots themselves release no
sum over their cells and are not audited against earlier cells (a refusal would be their only answer:
docs/governance.md, "Pooled releases").

**Coefficients come from the pooled fit.** ``splineErrorsDS`` evaluates the fitted curve at the
records only at the maximum-likelihood coefficients of the pooled data: its first step pools the
score vector :math:`U(\\beta)` and information :math:`I(\\beta)` and the sites go on only if the
score statistic :math:`U^T I^{-1} U` is below :data:`SCORE_TOLERANCE` (the log-likelihood is
strictly concave, so only coefficients within a hair of the distributed GLM's qualify: no steep
curve of the analyst's making turns the errors into a record's indicator).
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import special

from dsfed_core.errors import CallError, DisclosureRefusal
from dsfed_core.quantiles import Bracket, narrow, probes
from dsfed_core.splines import rcs_probs, rcs_term, rcs_term_names, type7_order, type7_quantile
from dsfed_server.context import CallContext, numeric
from dsfed_server.modelframe import COMPUTED, ComputedColumn, LazyColumn
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.declared import CandidateCuts, Declared, DominatedCells, ProtocolCells
from dsfed_server.disclosure.differencing import Rows
from dsfed_server.disclosure.gate import Floor
from dsfed_server.disclosure.mechanisms import content_digest
from dsfed_server.disclosure.protocol_cuts import REFINED, ProtocolCuts
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_server.functions.curves import SITE_DERIVED
from dsfed_server.functions.validation import complete_pairs, derived_rows, kept, outcome_and_score
from dsfed_server.registry import P, Param, SecureSum, register
from dsfed_server.rowbatches import row_batches

MAX_ROUNDS = 16  # each round narrows every bracket 100-fold; float resolution is reached well before
RCS_MIN_N = 100  # below, rcspline.eval puts the outer knots at the 5th smallest and largest value: one record each
RANGE_PROBS = (0.01, 0.99)  # the curve is drawn, and Emax taken, between these quantiles of logit(p)
SCORE_TOLERANCE = 1e-6  # U' I^-1 U at the coefficients: about twice the log-likelihood they miss the maximum by
_CHECKS = ("disclosure.q_threshold", "disclosure.quantile_min_multiple")


class OrderSearch:
    """One site's side of a pooled search for order statistics (1-based ranks) of ``key`` in
    [``lower``, ``upper``], ending with their exact values of ``value`` (a monotone increasing function
    of the key, applied to a bracket's keys when its sum is needed; None: the key itself). ``key``
    comes sorted (increasing) and is kept as it is: the search holds nothing else of record size.

    Counts at probes narrow a bracket :math:`(a, b]` per rank (:mod:`dsfed_core.quantiles`) until it
    holds one distinct key; then the pooled count and sum of ``value`` over the bracket give the
    value. ``ranks(n)`` names the ranks once the pooled n is known; ``finish(n, values, ties, extra,
    floor)`` makes the release, or the step that decides on it (``ties``: the pooled count at each
    rank's value; ``extra``: the pooled ``extra`` fields of the first step; ``floor``: the sites'
    shared floor, its q the largest). ``history_key``: the table column whose cut history the
    protocol uses (its steps carry the key of the gate's draws)."""

    def __init__(self, key: np.ndarray, value: Callable[[np.ndarray], np.ndarray] | None,
                 ranks: Callable[[int], list[int]],
                 finish: Callable[[int, dict[int, float], dict[int, int], dict[str, np.ndarray], Floor],
                                  dict[str, Any] | PooledSteps],
                 extra: dict[str, np.ndarray], lower: float = 0.0, upper: float = 1.0,
                 history_key: tuple[str, str] | None = None) -> None:
        self.key, self.value = key, value
        self.ranks, self.finish, self.extra = ranks, finish, extra
        self.lower, self.upper, self.history_key = lower, upper, history_key
        self.brackets: dict[int, Bracket] = {}
        self.rounds, self.n = 0, 0
        self.pooled_extra: dict[str, np.ndarray] = {}

    def start(self) -> PooledSteps:
        return self.counts(probes([], first=True, lower=self.lower, upper=self.upper))

    def counts(self, thresholds: list[float]) -> PooledSteps:
        below = np.searchsorted(self.key, np.asarray(thresholds, dtype=float), side="right").astype(float)
        first = not self.rounds
        fields = {"n": np.asarray(float(self.key.size)), **self.extra, "counts": below} if first else {"counts": below}
        self.rounds += 1

        def advance(pooled: dict[str, np.ndarray], floor: Floor) -> tuple[None, PooledSteps]:
            if first:
                self.n = int(round(float(pooled["n"])))
                self.pooled_extra = {name: pooled[name] for name in self.extra}
                self.brackets = {j: Bracket.start(j, self.n, self.lower, self.upper) for j in self.ranks(self.n)}
            known = {t: (int(round(c)),) * 2 for t, c in zip(thresholds, pooled["counts"])}
            for bracket in self.brackets.values():
                narrow(bracket, known)
            following = probes(list(self.brackets.values()), first=False, lower=self.lower, upper=self.upper)
            if following and self.rounds < MAX_ROUNDS:
                return None, self.counts(following)
            return None, self.bracket_sums()

        return PooledSteps(fields, advance, frac_bits=None if first and self.extra else 0, history_key=self.history_key)

    def bracket_sums(self) -> PooledSteps:
        """This site's count and sum of ``value`` in every rank's bracket."""
        ranks = sorted(self.brackets)
        if not all(self.brackets[j].settled for j in ranks):
            raise CallError(f"the pooled search did not isolate the order statistics in {MAX_ROUNDS} rounds")
        lo = np.searchsorted(self.key, [self.brackets[j].a for j in ranks], side="right")
        hi = np.searchsorted(self.key, [self.brackets[j].b for j in ranks], side="right")
        value = self.value or (lambda keys: keys)
        sums = np.array([value(self.key[a:b]).sum() for a, b in zip(lo, hi)])

        def advance(pooled: dict[str, np.ndarray], floor: Floor) -> tuple[dict[str, Any] | None, PooledSteps | None]:
            counts = np.rint(pooled["count"]).astype(int)
            values = {j: float(s / c) for j, s, c in zip(ranks, pooled["sum"], counts)}
            out = self.finish(self.n, values, dict(zip(ranks, counts.tolist())), self.pooled_extra, floor)
            return (None, out) if isinstance(out, PooledSteps) else (out, None)

        return PooledSteps({"count": (hi - lo).astype(float), "sum": sums}, advance, frac_bits=None,
                           history_key=self.history_key)


def _quantile_ranks(probs: tuple[float, ...]) -> Callable[[int], list[int]]:
    """The order statistics R's type-7 quantiles at ``probs`` need (j and j + 1 each), and 1 and n."""
    def ranks(n: int) -> list[int]:
        needed = {1, n}
        for prob in probs:
            j, _ = type7_order(n, prob)
            needed.update({j, min(j + 1, n)})
        return sorted(needed)
    return ranks


def _enough(multiple: float, n: int, floor: Floor, what: str) -> None:
    """Quantiles rest on at least ``quantile_min_multiple`` x q pooled values (q the sites' largest)."""
    needed = math.ceil(multiple * floor.q)
    if n < needed:
        raise DisclosureRefusal(
            f"{what}: quantiles of {n} pooled values; the sites release quantiles of at least {needed} "
            f"({multiple:g} x q = {floor.q})", rule="disclosure.quantile_min_multiple",
            hint="use more records")


@register(
    "rcsKnotsDS",
    "aggregate",
    [Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y"),
     Param("score", P.VECTOR, "the predicted probability, e.g. D$score"),
     Param("nk", P.INTEGER, "number of knots (rms::rcs)", required=False, default=4, minimum=3, maximum=7)],
    checks=_CHECKS + ("disclosure.cut_history", "secure_aggregation.pooled_thresholds",
                      "secure_aggregation.dominance_sites"),
    pooled_only=True,
)
def rcs_knots(ctx: CallContext, truth: pd.Series, score: pd.Series, nk: int) -> PooledSteps:
    """The knots of ``rms::rcs(qlogis(p), nk)`` on the pooled records with 0 < p < 1 (those
    ``val.prob`` keeps), found by the sites (module docstring) and kept at every site as the symbol
    the release names; released with the 1 and 99 % quantiles of logit(p) (``range``) where the
    release gate passes them as cuts on the score column (:func:`_gated_knots`).

    ``Hmisc::rcspline.eval``'s rules: type-7 quantiles at :func:`~dsfed_core.splines.rcs_probs`. Its
    other branches are refused, saying so: fewer than 100 records (the outer knots would be the 5th
    smallest and largest values, one record each); 5 % or more of the records tied at the lowest or
    highest value (``fractied``: knots moved to the next values); knots that are not distinct."""
    y, p = outcome_and_score(ctx, truth, score, probability=True)
    finite = (p > 0) & (p < 1)
    multiple = ctx.guard.rule("disclosure.quantile_min_multiple")
    probs = rcs_probs(nk)
    session, sources = ctx.session, frozenset(ctx.session.scope.sources) if ctx.session.scope else frozenset()
    name_length = ctx.limits.max_name_length
    values, rows = kept(p, finite), ctx.record_rows(truth, score)
    if rows is not None and not finite.all():
        rows = Rows(rows.lineage, rows.index[finite], rows.n_root)
    cuts = ProtocolCuts(ctx.guard, values, ctx.root_column(score), rows)

    def keep(knots: list[float]) -> dict[str, Any]:
        """Every site keeps the knots as the symbol the release names."""
        digest = content_digest(np.asarray(knots)).hex()
        name = session.keep_derived("knots", digest, pd.DataFrame({"knot": knots}), SITE_DERIVED, sources, name_length)
        return {"knots_symbol": name, "knots_digest": session.definitions[name]}

    def finish(n: int, order: dict[int, float], ties: dict[int, int], extra: dict, floor: Floor) -> PooledSteps:
        _enough(multiple, n, floor, "the knots")
        if n < RCS_MIN_N:
            raise CallError(
                f"{n} pooled records with 0 < p < 1: below {RCS_MIN_N} (rms's fixed rule, not a rules-file setting) "
                "rms puts the outer knots at the 5th smallest and largest logit(p), each one record's value, "
                "which these sites do not release",
                hint="use the binned calibration curve (ds_calibration_curve) or a validation on more records")
        for end, rank in (("lowest", 1), ("highest", n)):
            if ties[rank] / n >= 0.05:
                raise CallError(f"{ties[rank]} of {n} records tie at the {end} p: rms would move that knot "
                                "(rcspline.eval's fractied rule), which these sites do not reproduce",
                                hint="use the binned calibration curve (ds_calibration_curve) for scores with "
                                     "so many ties")
        knots = [type7_quantile(order, n, prob) for prob in probs]
        if len(set(knots)) < nk:
            raise CallError(f"the {nk} knots at the {probs} quantiles of logit(p) are not distinct (tied scores)",
                            hint="ask for fewer knots (nk)")
        bounds = [type7_quantile(order, n, prob) for prob in RANGE_PROBS]
        return _gated_knots(cuts, values, knots, bounds,
                            lambda final, released, moved, reason: {
                                "knots": final, "range": released, "range_withheld": reason,
                                "knots_moved": [[probs[i], to] for i, to in moved],
                                "n": n, "nk": nk, **keep(final), "pooled": True})

    search = OrderSearch(np.sort(values), special.logit, _quantile_ranks(probs + RANGE_PROBS), finish, {},
                         history_key=cuts.key)
    return search.start()


def _gated_knots(cuts: ProtocolCuts, values: np.ndarray, knots: list[float], bounds: list[float],
                 release: Callable[[list[float], list[float], list[tuple[int, float]], str | None], dict[str, Any]]
                 ) -> PooledSteps:
    """The release gate's step on the knots and the range's ``bounds`` (logit(p)): each value :math:`t`
    as the cut :math:`p \\le \\mathrm{expit}(t)` on the score column, decided with the column's
    released history on pooled counts between all cuts
    (:class:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts`; each decision declared,
    :class:`~dsfed_server.disclosure.declared.CandidateCuts` and, for the dominance of the cells between the
    knots, :class:`~dsfed_server.disclosure.declared.DominatedCells`), as ``decileGroupsDS`` decides on
    the H-L table.

    A knot the gate refuses moves to the nearest cut released before on the column
    (:func:`_moved_knots`): that cut is public already, so the knot adds nothing, and the spline's
    fit at it is as good a calibration curve (the knots are a convention, not an estimate); the
    release lists the moves (``release``'s third argument: which knot, onto which cut; not the refused
    value). Knots that cannot so move (no earlier
    cut, a transformed column, two knots on one cut) are refused. Then each bound is released where
    it fits with the knots and the history, else replaced by the outer knot on its side (the reason
    in ``release``'s last argument). The step declares its release
    (:class:`~dsfed_server.disclosure.declared.ProtocolCells`), which the service carries out before the
    knots leave: the released cuts join the history, and the cells between them -- each site's records of
    ``values`` (the protocol's, 0 < p < 1) in each, with its pooled count, which the knots' ranks tell --
    the table's pooled row sets (:meth:`ProtocolCuts.record_cells`), against which every later release is
    audited."""
    on_values = {v: gate.cuts_from([float(special.expit(v))], inclusive=True)[0] for v in [*knots, *bounds]}
    to_values = dict(zip(cuts.to_root(list(on_values.values())), on_values.values()))  # column's cut -> p's

    def as_cuts(logits: list[float]) -> tuple[gate.Cut, ...]:
        return tuple(sorted(set(cuts.to_root([on_values[v] for v in logits]))))

    knot_cuts, bound_cuts = as_cuts(knots), [as_cuts([b])[0] for b in bounds]
    counted = cuts.counted(set(knot_cuts) | set(bound_cuts))
    history = cuts.history
    column = cuts.cells.column
    identity = column is None or column.transform.identity
    grid = sorted(set(on_values.values()) | (set(history) if identity else set()))  # where a released cut can lie
    fields = {**counted, gate.SQUARES: cuts.squares(counted[REFINED]), "own": gate.cell_sums(values, grid)[0]}

    def advance(pooled: dict[str, np.ndarray], floor: Floor
                ) -> Generator[Declared, Any, tuple[dict[str, Any], None]]:
        refined = cuts.pooled_counts(pooled)

        def fits(candidates: list[gate.Cut]) -> CandidateCuts:
            return CandidateCuts(cuts, candidates, refined, floor)

        final, knot_cuts_kept, moved = yield from _moved_knots(knots, list(knot_cuts), history, fits,
                                                               movable=identity)
        if final is None:
            raise DisclosureRefusal(
                f"the knots of logit(p), as cuts on the score column with the cuts released before on it, would "
                f"single out fewer than {floor.q} records", rule="disclosure.cut_history",
                hint="cuts released before on this score column (thresholds, calibration bins, H-L breaks) lie "
                     "within q records of a knot, and no earlier cut could take its place; the sites do not "
                     "release these knots for this column")
        new = [c for c in knot_cuts_kept if c not in history]
        ends = sorted(set(bound_cuts))
        kept_ends = dict(zip(ends, (yield CandidateCuts(cuts, ends, refined, floor,
                                                        sorted(set(history) | set(new))))))
        kept = [kept_ends[c] for c in bound_cuts]
        released = [b if k else knot for b, k, knot in zip(bounds, kept, (final[0], final[-1]))]
        cells = knot_cuts_kept + [c for c, k in zip(bound_cuts, kept) if k]
        if (yield DominatedCells(cuts, cells, refined, pooled[gate.SQUARES], floor)):
            raise DisclosureRefusal(
                f"a cell between the knots (and the range's ends) would hold fewer than {floor.q} records outside "
                "its largest contributing site: a site that made up its records could have placed a knot on "
                "another site's record", rule="secure_aggregation.dominance_sites",
                hint="use the binned calibration curve (ds_calibration_curve), or ask over records the sites "
                     "hold in more even shares")
        reason = None if all(kept) else (
            f"the {' and '.join(f'{100 * p:g} %' for p, k in zip(RANGE_PROBS, kept) if not k)} quantile of logit(p) "
            f"would single out fewer than {floor.q} records (with the knots and the cuts released before on the "
            "score column): the range ends at the outer knot there")
        on_p = sorted({to_values.get(c, c) for c in cells})  # the cells' cuts on the protocol's values
        position = {c: i for i, c in enumerate(grid)}
        ends = [0, *(position[c] + 1 for c in on_p), len(grid) + 1]
        own = np.rint(pooled["own"]).astype(np.int64)

        yield ProtocolCells(cuts, new + [c for c, k in zip(bound_cuts, kept) if k], values, on_p,
                            np.array([own[a:b].sum() for a, b in zip(ends[:-1], ends[1:])]))
        return release(final, released, moved, reason), None

    # the analyst's fraction bits: the squares travel as counts squared over gate.SQUARE_UNIT
    return PooledSteps(fields, advance, frac_bits=None, history_key=cuts.key)


def _moved_knots(knots: list[float], cuts: list[gate.Cut], history: list[gate.Cut],
                 fits: Callable[[list[gate.Cut]], CandidateCuts], *, movable: bool
                 ) -> Generator[Declared, Any, tuple[list[float] | None, list[gate.Cut], list[tuple[int, float]]]]:
    """The knots the gate keeps: each refused one (logit scale, with its cut ``cuts[i]`` on the
    column) moved to the nearest cut of ``history`` strictly inside (0, 1), until every new knot fits
    with the history and the moved ones; ``None`` where that fails (the knots must stay distinct).
    ``fits`` declares the new knots' cuts of each try (:class:`~dsfed_server.disclosure.declared.CandidateCuts`),
    which the service decides on the pooled counts. Returns the knots, their cuts, and the moves ``(i, to)``:
    which knot moved onto which cut (logit scale) -- never the value it moved from, which the gate refused to
    release."""
    knots, cuts, moved = list(knots), list(cuts), []
    inside = [c for c in history if 0 < c.value < 1]
    for _ in range(len(knots)):
        new = [i for i, c in enumerate(cuts) if c not in history]
        kept = yield fits([cuts[i] for i in new])
        if kept.all():
            return knots, cuts, moved
        if not movable or not inside:
            return None, cuts, moved
        for i in (new[j] for j in np.flatnonzero(~kept)):
            nearest = min(inside, key=lambda c: abs(c.value - cuts[i].value))
            moved.append((i, float(special.logit(nearest.value))))
            knots[i], cuts[i] = moved[-1][1], nearest
        if len(set(knots)) < len(knots) or knots != sorted(knots):
            return None, cuts, moved
    return None, cuts, moved


@dataclass(frozen=True)
class SplineTerm:
    """Basis term ``j`` (0-based: ``lp{j+1}``) of ``rms::rcs`` at ``knots``, as a function of ``lp``
    (:func:`~dsfed_core.splines.rcs_term`): ``rcsFrameDS``'s table computes it when read, 8 bytes a
    record it does not keep."""

    knots: tuple[float, ...]
    j: int

    def __call__(self, lp: np.ndarray) -> np.ndarray:
        return rcs_term(lp, self.knots, self.j)


@register(
    "rcsFrameDS",
    "assign",
    [Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y"),
     Param("score", P.VECTOR, "the predicted probability, e.g. D$score"),
     Param("knots", P.TABLE, "the knots the sites derived (rcsKnotsDS's knots_symbol)")],
    checks=("disclosure.q_threshold",),
)
def rcs_frame(ctx: CallContext, truth: pd.Series, score: pd.Series, knots: pd.DataFrame) -> pd.DataFrame:
    """A table for ``glm(y ~ rms::rcs(qlogis(p), knots), binomial)`` by the distributed GLM: columns
    ``y`` (its parent's column) and ``lp`` = logit(p), and the spline basis terms ``lp1, ...,
    lp{nk-2}`` of ``lp`` at the knots the sites derived (:func:`~dsfed_core.splines.rcs_term`),
    computed from ``lp`` as they are read (:data:`~dsfed_server.modelframe.COMPUTED`: the GLM a batch
    of rows at a time; ``S$lp1`` whole), so the table's column names are ``y, lp``. Records with
    p = 0 or 1 are left out (as ``val.prob``). Knots the analyst made are refused (module docstring)."""
    if not ctx.session.derived_by_sites(knots, SITE_DERIVED) or "knot" not in knots.columns:
        raise CallError("knots must be the symbol the sites derived (rcsKnotsDS's knots_symbol): knots of the "
                        "analyst's choosing would move the spline's kinks between records",
                        hint="run rcsKnotsDS pooled and pass the symbol its release names")
    y, (p,) = complete_pairs(ctx, truth, {"score": score}, probability=True)  # the GLM on it applies q
    finite = (p > 0) & (p < 1)
    y, p = kept(y, finite), kept(p, finite)
    t = tuple(knots["knot"].to_numpy(dtype=float).tolist())
    frame = pd.DataFrame({"y": y, "lp": special.logit(p)}, copy=False)
    frame.attrs[COMPUTED] = {name: ComputedColumn("lp", SplineTerm(t, j))
                             for j, name in enumerate(rcs_term_names(len(t))[1:])}
    return derived_rows(frame, truth, score, finite, {"y": (truth.name, "identity"), "lp": (score.name, "logit")})


def _frame_columns(frame: pd.DataFrame) -> tuple[np.ndarray, tuple[np.ndarray | LazyColumn, ...]]:
    """The outcome and the spline terms (lp, lp1, ...) of a table ``rcsFrameDS`` made: its stored
    columns (not copies), the basis terms computed a batch at a time as they are read
    (:class:`~dsfed_server.modelframe.LazyColumn`); the design is the terms after an intercept
    column (:func:`_design_rows`)."""
    computed = frame.attrs.get(COMPUTED, {})
    terms = ["lp", *computed]
    if ("y" not in frame.columns or "lp" not in frame.columns or terms != rcs_term_names(len(terms) + 1)
            or not all(isinstance(c.function, SplineTerm) and c.source == "lp" for c in computed.values())):
        raise CallError("the table must be one rcsFrameDS made (columns y, lp; lp1, ... computed from lp)")
    lp = frame["lp"].to_numpy(dtype=float)
    return numeric(frame["y"], "y", whole=True), (lp, *(LazyColumn(lp, c.function) for c in computed.values()))


def _design_rows(terms: tuple[np.ndarray | LazyColumn, ...], rows: slice) -> np.ndarray:
    """The design rows (intercept, lp, lp1, ...) of a batch of records."""
    return np.column_stack([np.ones(rows.stop - rows.start), *(t[rows] for t in terms)])


@register(
    "splineErrorsDS",
    "aggregate",
    [Param("frame", P.TABLE, "the table rcsFrameDS made"),
     Param("coefficients", P.NUMBERS, "the pooled fit's coefficients (intercept, lp, lp1, ...)")],
    checks=_CHECKS + ("secure_aggregation.pooled_thresholds",),
    pooled_only=True,
)
def spline_errors(ctx: CallContext, frame: pd.DataFrame, coefficients: list[float]) -> PooledSteps:
    """ICI, E50 and E90 of the fitted calibration curve (Austin & Steyerberg 2019, eqs. for ICI and
    :math:`E_{50}`, :math:`E_{90}`): with :math:`e_i = |\\hat c(p_i) - p_i|`,
    :math:`\\hat c(p) = \\mathrm{expit}(\\beta^T x(\\mathrm{logit}\\,p))`, the pooled mean of :math:`e_i`
    and its type-7 median and 90th percentile, exactly (:class:`OrderSearch`), after the sites have
    checked on pooled sums that ``coefficients`` are the pooled maximum-likelihood fit (module docstring)."""
    y, terms = _frame_columns(frame)
    beta = np.asarray(coefficients, dtype=float)
    if beta.size != len(terms) + 1 or not np.all(np.isfinite(beta)):
        raise CallError(f"coefficients must be {len(terms) + 1} finite numbers (intercept, lp, lp1, ...)")
    ctx.guard.min_count(y.size, "complete records")
    multiple = ctx.guard.rule("disclosure.quantile_min_multiple")
    error = np.empty(y.size)
    score, info = np.zeros(beta.size), np.zeros((beta.size, beta.size))
    for rows in row_batches(y.size):  # the search keeps the errors; the rest is a batch's
        x = _design_rows(terms, rows)
        mu = special.expit(x @ beta)
        error[rows] = np.abs(mu - special.expit(x[:, 1]))
        score += x.T @ (y[rows] - mu)
        info += (x * (mu * (1 - mu))[:, None]).T @ x

    def finish(n: int, order: dict[int, float], ties: dict[int, int], extra: dict, floor: Floor) -> dict[str, Any]:
        _enough(multiple, n, floor, "the calibration errors")
        return {"ici": float(extra["sum_error"]) / n, "e50": type7_quantile(order, n, 0.5),
                "e90": type7_quantile(order, n, 0.9), "n": n, "pooled": True}

    extra = {"sum_error": np.asarray(error.sum())}
    error.sort()  # this call's own array: sorted in place for the search
    search = OrderSearch(error, None, _quantile_ranks((0.5, 0.9)), finish, extra)
    fields = {"score": score, "info": info}

    def checked(pooled: dict[str, np.ndarray], floor: Floor) -> tuple[None, PooledSteps]:
        u, info = pooled["score"], pooled["info"]
        try:  # as a sum of squares: a pooled I rounded to fixed point must not make it negative
            statistic = float(np.sum(np.linalg.solve(np.linalg.cholesky(info), u) ** 2))
        except np.linalg.LinAlgError:  # I not positive definite: no maximum of the log-likelihood
            statistic = np.inf
        if not statistic < SCORE_TOLERANCE:
            raise CallError(f"these coefficients are not the pooled fit of this table: the score statistic is "
                            f"{statistic:.3g} (at most {SCORE_TOLERANCE:g})",
                            hint="pass the coefficients of the distributed GLM fitted on this very table")
        return None, search.start()

    return PooledSteps(fields, checked)


@register("calibrationLossDS", "aggregate", [Param("frame", P.TABLE, "the table rcsFrameDS made")],
          checks=("disclosure.q_threshold",), secure_sum=SecureSum(("n", "n1", "loglik")))
def calibration_loss(ctx: CallContext, frame: pd.DataFrame) -> dict[str, Any]:
    """Sums for the log loss and Nagelkerke's R² of the predictions themselves (``val.prob``'s R2):
    :math:`\\ell = \\sum_i y_i \\log p_i + (1 - y_i)\\log(1 - p_i) = \\sum_i y_i\\,\\mathrm{lp}_i -
    \\log(1 + e^{\\mathrm{lp}_i})`, with the counts of records and events."""
    y, (lp, *_) = _frame_columns(frame)
    n1 = int(y.sum())
    ctx.guard.min_count(y.size, "complete records")
    ctx.guard.min_count(n1, "positives (truth = 1)")
    ctx.guard.min_count(y.size - n1, "negatives (truth = 0)")
    loglik = sum(float(np.sum(y[rows] * lp[rows] - np.logaddexp(0.0, lp[rows]))) for rows in row_batches(y.size))
    return {"n": int(y.size), "n1": n1, "loglik": loglik}
