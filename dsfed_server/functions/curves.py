"""Site parts of federated ROC and PR curves from hierarchical histograms (Xu &
Cormode 2025), and of the AUC, DeLong variance and ROC-GLM from histogram placement values.

``scoreHistogramDS`` counts the scores of the negatives and of the positives in a
hierarchical histogram: level :math:`l = 0, \\dots, L` splits ``[lower, upper]`` into
:math:`b^l` equal-width bins :math:`[e_j, e_{j+1})` (the last one also closed; scores
outside the range are counted in the end bins). What leaves the site:

* **noise on** (the site's analytic Gaussian mechanism): every count of every level,
  with Gaussian noise. Adding or removing one record changes one count by 1 on each
  level of its own class's histogram, so the vector of all counts of both classes, with
  level :math:`l` scaled by :math:`\\sqrt{w_l}`, has :math:`\\ell_2`-sensitivity
  :math:`\\sqrt{\\sum_l w_l}`. The site's mechanism is calibrated for that sensitivity
  and its noise divided by :math:`\\sqrt{w_l}` on level :math:`l`, so the whole release
  costs one (epsilon, delta) of the site's rules, split across levels by the weights
  :math:`w_l \\propto \\text{decay}^{\\,l}` (``decay = 1``: equal noise on every level).
  Neighbouring data sets are "one record added or removed" (unbounded DP); the noise
  needs no small-bin rule.
* **noise off** (test profiles only): the exact leaf counts of each class, through the
  site's small-bin policy (:meth:`Guard.histogram`: a bin with 0 < n < q refuses the
  whole histogram, or is merged with a neighbour, as ``bins.small_bin_policy`` says).
  The coarser levels are sums of the leaves and are not sent. The leaves may also be given
  as explicit ``edges`` (cuts like any other, through the same gate), so that an analyst can
  refine the leaves that hold both classes until each holds one distinct score: the exact
  AUC. Either way at least q records, positives and negatives stand behind the call (rule A1).

The analyst post-processes the pooled counts into two global CDFs and may store them at
every site (``histReferenceDS``, edges and cumulative counts only). The sites then
evaluate them at their own exact scores and release only sums over at least q records
(``histPlacementSumsDS``), or build the ROC-GLM's intermediate table
(``histRocGlmDataDS``), as Schalk et al. (2024) do from its noisy scores.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Sequence

import numpy as np
import pandas as pd

from dsfed_server.context import POOLED_ONLY, CallContext
from dsfed_core.histograms import global_cdfs, level_variances
from dsfed_server.disclosure import gate
from dsfed_server.disclosure.checks import GATE_RULES, NOISE_RULES
from dsfed_server.disclosure.declared import CandidateCuts, Declared, ProtocolCells
from dsfed_server.disclosure.differencing import Rows, records_digest
from dsfed_server.disclosure.gate import Intervals, Released, cuts_from
from dsfed_server.disclosure.mechanisms import content_digest
from dsfed_server.disclosure.protocol_cuts import ProtocolCuts
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_core.errors import CallError
from dsfed_core.wire import encode_f64
from dsfed_server.functions.validation import complete_pairs, outcome_and_score, roc_glm_table
from dsfed_server.registry import P, Param, SecureSum, register
from dsfed_server.rowbatches import row_batches

_TRUTH = Param("truth", P.VECTOR, "the 0/1 outcome, e.g. D$y")
_SCORE = Param("score", P.VECTOR, "the predicted score or probability, e.g. D$score")
_A1 = ("disclosure.q_threshold",)
MAX_LEAVES = 4096
SITE_DERIVED = "site-derived:"  # the definition of a reference the sites derived from a pooled release: + its digest
CLOSED = "closed"  # a site-derived reference's column: the edge is a cut ``<= edge`` released before
_WITHIN = Param("within_bin", P.STRING, "'tied': every score of a bin counts as tied (one half); 'linear': the CDF "
                "is linear inside a bin (only where the rules keep no cut history)", required=False, default="tied",
                choices=("linear", "tied"))


def level_counts(p: np.ndarray, y: np.ndarray, lower: float, upper: float, levels: int, branching: int
                 ) -> dict[str, list[np.ndarray]]:
    """Counts of the negatives' and the positives' scores ``p`` (``y`` 0 or 1) on every level 0..L of
    the hierarchy (level l: b**l equal bins), a batch of rows at a time."""
    leaves = branching**levels
    both = np.zeros(2 * leaves, dtype=np.int64)  # the negatives' leaves, then the positives'
    for rows in row_batches(p.size):
        leaf = np.clip(np.floor((p[rows] - lower) / (upper - lower) * leaves), 0, leaves - 1).astype(np.int64)
        both += np.bincount(leaf + leaves * y[rows].astype(np.int64, copy=False), minlength=2 * leaves)
    out = {}
    for name, counts in (("negatives", [both[:leaves]]), ("positives", [both[leaves:]])):
        for _ in range(levels):
            counts.append(counts[-1].reshape(-1, branching).sum(axis=1))
        out[name] = counts[::-1]
    return out


def _exact_leaves(ctx: CallContext, y: np.ndarray, p: np.ndarray, score: pd.Series, shape: dict[str, Any],
                  rows: Rows | None, edges: np.ndarray | None = None) -> Intervals:
    """Noise off: the leaf counts of each class, released by the gate (a leaf holding fewer than q
    records, both classes together, is merged or refused as ``bins.small_bin_policy`` says); the
    leaves are ``branching**levels`` equal bins of ``[lower, upper]``, or those between ``edges``."""
    lower, upper = shape["lower"], shape["upper"]
    inner = (np.linspace(lower, upper, shape["branching"] ** shape["levels"] + 1) if edges is None else edges)[1:-1]

    def render(released: Released) -> dict[str, Any]:
        edges = [lower, *(c.value for c in released.cuts), upper]
        return {"mechanism": "none", **shape, **released.describe(),
                **{name: {"edges": edges, "counts": np.rint(released.sums[name]).astype(int).tolist()}
                   for name in ("negatives", "positives")}}

    return Intervals(p, cuts_from(inner, inclusive=False), render,
                     {"negatives": y == 0, "positives": y == 1},
                     policy=ctx.guard.rule("bins.small_bin_policy"), what="score histogram",
                     column=ctx.root_column(score), strata=ctx.strata(score), rows=rows)


def level_weights(levels: int, decay: float) -> np.ndarray:
    """Precision weights :math:`w_l \\propto \\text{decay}^l` (largest 1) of levels 0..L."""
    w = decay ** np.arange(levels + 1, dtype=float)
    return w / w.max()


@register(
    "scoreHistogramDS",
    "aggregate",
    [
        _TRUTH,
        _SCORE,
        Param("lower", P.NUMBER, "lower end of the score range", required=False, default=0.0),
        Param("upper", P.NUMBER, "upper end of the score range", required=False, default=1.0),
        Param("levels", P.INTEGER, "levels below the root (the leaves are branching^levels bins)", required=False,
              default=10, minimum=0, maximum=12),
        Param("branching", P.INTEGER, "bins each bin splits into", required=False, default=2, choices=(2, 4, 8, 16)),
        Param("decay", P.NUMBER, "share of the privacy budget of level l is proportional to decay^l", required=False,
              default=1.0, minimum=0.125, maximum=8.0),
        Param("totals", P.STRING, "'noisy': the class totals are level 0 of the noisy hierarchy; 'exact': they are "
              "released exactly (counts of at least q, rule A1) and levels 1..L get the whole budget",
              required=False, default="noisy", choices=("noisy", "exact")),
        Param("epsilon", P.NUMBER, "ask for a smaller epsilon than the site's (never larger)", required=False),
        Param("delta", P.NUMBER, "ask for a smaller delta than the site's (never larger)", required=False),
        Param("edges", P.NUMBERS, "noise off only: increasing leaf edges, in place of the equal leaves of [lower, "
              "upper] (scores outside them are counted in the end leaves)", required=False),
    ],
    checks=("bins.small_bin_policy", *NOISE_RULES, *GATE_RULES),
    secure_sum=SecureSum(("negatives", "positives", "n_negative", "n_positive", "variance"),
                         public=("mechanism", "lower", "upper", "levels", "branching", "decay", "first_level", "sd",
                                 "epsilon", "delta", "sensitivity")),
    cells=True,  # the exact leaves, noise off
)
def score_histogram(ctx: CallContext, truth: pd.Series, score: pd.Series, lower: float, upper: float, levels: int,
                    branching: int, decay: float, totals: str, epsilon: float | None, delta: float | None,
                    edges: list[float] | None) -> dict[str, Any] | Intervals | PooledSteps:
    """Hierarchical histograms of the negatives' and the positives' scores (Xu & Cormode 2025,
    "Quantiles Estimation via Histograms"), noised per level with the site's Gaussian mechanism, or
    exact leaves under the site's small-bin policy when noise is off, at equal leaves or at
    ``edges`` (see the module docstring)."""
    if not upper > lower:
        raise CallError(f"upper ({upper}) must be greater than lower ({lower})")
    if branching**levels > MAX_LEAVES:
        raise CallError(f"branching^levels = {branching**levels} leaves; at most {MAX_LEAVES}")
    # the site's mechanism (its epsilon, delta, and whatever the Guard records for it), calibrated for
    # its score sensitivity; the analytic Gaussian's sigma is proportional to the sensitivity
    # (its privacy depends on sensitivity / sigma only), so rescaling its noise by
    # sensitivity / mechanism.sensitivity calibrates it exactly for the counts' sensitivity
    mechanism = ctx.guard.mechanism(epsilon=epsilon, delta=delta)
    leaf_edges = None if edges is None else np.asarray(edges, dtype=float)
    if leaf_edges is not None:
        if mechanism is not None:
            raise CallError("edges are for exact leaves only (noise off); the noisy hierarchy has branching^levels "
                            "equal leaves of [lower, upper]", hint="give lower, upper and levels instead")
        if not (2 <= leaf_edges.size <= MAX_LEAVES + 1 and np.all(np.isfinite(leaf_edges))
                and np.all(np.diff(leaf_edges) > 0)):
            raise CallError(f"edges must be 2 to {MAX_LEAVES + 1} strictly increasing finite numbers")
        lower, upper = float(leaf_edges[0]), float(leaf_edges[-1])
    y, p = outcome_and_score(ctx, truth, score)
    shape = {"lower": float(lower), "upper": float(upper), "levels": levels, "branching": branching}
    first = 0 if totals == "noisy" else 1
    if first > levels:
        raise CallError("totals = 'exact' needs at least one level below the root")
    if mechanism is None:
        return _exact_leaves(ctx, y, p, score, shape, ctx.record_rows(truth, score), leaf_edges)
    classes = level_counts(p, y, lower, upper, levels, branching)
    weights = level_weights(levels, decay)[first:]
    sensitivity = float(np.sqrt(weights.sum()))
    flat = np.concatenate([c for name in ("negatives", "positives") for c in classes[name][first:]]).astype(float)
    scale = np.concatenate([np.full(branching**l, 1 / np.sqrt(weights[l - first]))
                            for l in range(first, levels + 1)] * 2)
    # the Guard's seeded noise (site secret, function, label, mechanism, content): the label carries
    # the counts' digest and the shape, so the same query on the same data gets the same noise
    label = f"hierarchical-histogram {shape} decay={decay!r} first={first} {content_digest(flat).hex()}"
    rescale = sensitivity / mechanism.sensitivity
    noise = ctx.guard.noisy(np.zeros(flat.size), label, mechanism) * scale * rescale
    noisy = flat + noise
    sd = mechanism.sigma * rescale / np.sqrt(weights)
    out = {"mechanism": "analytic_gaussian", **shape, "decay": float(decay), "first_level": first, "sd": sd.tolist(),
           "variance": (sd**2).tolist(), "epsilon": mechanism.epsilon, "delta": mechanism.delta,
           "sensitivity": sensitivity}
    m = levels + 1 - first
    bounds = np.cumsum([0] + [branching**l for l in range(first, levels + 1)] * 2)
    parts = [noisy[bounds[i]:bounds[i + 1]] for i in range(2 * m)]
    if first == 1:
        out["n_negative"], out["n_positive"] = int(classes["negatives"][0][0]), int(classes["positives"][0][0])
    if ctx.pooled:
        return _pooled_histograms(ctx, out, parts[:m], parts[m:], p, score)
    out["negatives"] = [encode_f64(v) for v in parts[:m]]
    out["positives"] = [encode_f64(v) for v in parts[m:]]
    return out


def _pooled_histograms(ctx: CallContext, out: dict[str, Any], negatives: list[np.ndarray],
                       positives: list[np.ndarray], p: np.ndarray, score: pd.Series) -> PooledSteps:
    """The noisy histograms as a pooled release: summed among the sites, then released, and the
    global CDFs derived from them kept at every site as the symbol the result names (the
    histogram AUC's reference comes from the sites, derived alike from the same pooled counts).

    The reference's leaf edges are cuts for the exact sums later evaluated against it (placement
    sums): the sites count the score column's records between all cuts -- the leaf edges with every
    cut released before on the column -- and keep, on the pooled counts, only the leaf edges the
    release gate would (a dropped edge merges two leaves of the reference). Its leaves were checked on the
    pooled counts of the records it was derived from only: an exact read of it goes through cells audited for
    the records read (:func:`hist_placement_sums` pooled, and what reads the cells it released). The step
    declares the kept leaf edges (:class:`~dsfed_server.disclosure.declared.ProtocolCells`, the cuts alone:
    no sum is read on the noisy counts between them), which the service records in the column's history
    before the release leaves."""
    sizes = [v.size for v in negatives]
    leaves = gate.cuts_from(np.linspace(out["lower"], out["upper"], out["branching"] ** out["levels"] + 1)[1:-1],
                            inclusive=False)
    cuts = ProtocolCuts(ctx.guard, p, ctx.root_column(score))
    root_leaves = cuts.to_root(leaves)  # the leaf edges as cuts on the score column (a transform mapped back)
    fields = {"negatives": np.concatenate(negatives), "positives": np.concatenate(positives),
              "variance": np.asarray(out["variance"]), **cuts.counted(root_leaves)}
    if "n_negative" in out:
        fields["n_negative"] = np.asarray(float(out["n_negative"]))
        fields["n_positive"] = np.asarray(float(out["n_positive"]))
    # what the request determines (a site's own epsilon and delta are in its rules, not in the pooled result)
    public = {k: out[k] for k in ("mechanism", "lower", "upper", "levels", "branching", "decay", "first_level",
                                  "sensitivity")}
    session, sources = ctx.session, frozenset(ctx.session.scope.sources) if ctx.session.scope else frozenset()
    name_length = ctx.limits.max_name_length  # the analyst names the reference in later calls: within the limit

    def advance(pooled: dict[str, np.ndarray], floor: gate.Floor
                ) -> Generator[Declared, Any, tuple[dict[str, Any], None]]:
        split = np.cumsum(sizes)[:-1]
        release = {**public, "pooled": True, "variance": pooled["variance"].tolist(),
                   "negatives": [v.tolist() for v in np.split(pooled["negatives"], split)],
                   "positives": [v.tolist() for v in np.split(pooled["positives"], split)]}
        if "n_negative" in pooled:
            release["n_negative"], release["n_positive"] = float(pooled["n_negative"]), float(pooled["n_positive"])
        refined = cuts.pooled_counts(pooled)
        kept = yield CandidateCuts(cuts, root_leaves, refined, floor)  # the leaf edges the gate keeps
        added = earlier_edges(cuts, out["lower"], out["upper"], leaves, root_leaves, kept, refined, floor)
        digest = content_digest(*(np.atleast_1d(v) for v in pooled.values())).hex()
        reference = derived_reference(release, kept, added)
        name = session.keep_derived("ref", digest, reference, SITE_DERIVED, sources, name_length)
        yield ProtocolCells(cuts, [root_leaves[i] for i in np.flatnonzero(kept)])  # the kept leaf edges alone
        release["reference"], release["reference_digest"] = name, session.definitions[name]
        release["reference_knots_dropped"] = int(len(leaves) - kept.sum())
        release["reference_edges_added"] = [[c.value, c.inclusive] for c in added]
        return release, None

    return PooledSteps(fields, advance, history_key=cuts.key)


def earlier_edges(cuts: ProtocolCuts, lower: float, upper: float, leaves: Sequence[gate.Cut],
                  root_leaves: Sequence[gate.Cut], kept: np.ndarray, counted: np.ndarray, floor: gate.Floor
                  ) -> list[gate.Cut]:
    """The cuts released before on the score's column (``cuts.history``: a calibration curve's bins, the
    Hosmer-Lemeshow breaks) inside the reference's range (``lower``, ``upper``) that the reference takes as
    edges besides the leaf edges ``kept``, in the score's units, in increasing order.

    A leaf edge within q records (and the margin) of an earlier cut is dropped (:meth:`ProtocolCuts.fits`),
    merging two leaves into one cell whose pairs count one half. The earlier cut itself is released already:
    as an edge it costs no new disclosure, and the reference's cell beside it is bounded by two released cuts
    instead of reaching to the next kept leaf edge. An earlier cut is taken where, on the pooled counts between
    all cuts (``counted``, :meth:`ProtocolCuts.counted`), the cells it bounds in the reference -- to the edge
    taken before it and to the next kept leaf edge -- hold enough records (``floor``, as the gate asks of a new
    cell; a kept leaf edge holds enough to every earlier cut already). Not taken at a leaf edge's value (no
    two edges of one value); mapped from the column to the score as
    :meth:`ProtocolCuts.to_root` maps the other way (a decreasing transform: the order and the closed side
    turn; a score without provenance: its own history, as it is)."""
    on_score = cuts.cells.from_root(cuts.history)  # the score's cut -> the column's
    values = {c.value for c in leaves}
    candidates = {c: r for c, r in on_score.items() if lower < c.value < upper and c.value not in values}
    if not candidates:
        return []
    position = {cut: i for i, cut in enumerate(cuts.refined)}
    below = np.concatenate([[0], np.cumsum(np.rint(np.asarray(counted, dtype=float)).astype(np.int64))])
    n = int(below[-1])
    increasing = cuts.cells.column is None or cuts.cells.column.transform.increasing

    def rank(root: gate.Cut) -> int:  # the pooled records below a cut of the column, counted from the score's low end
        r = int(below[position[root] + 1])
        return r if increasing else n - r

    floor = floor.on(*cuts.key)

    def enough(a: int, b: int) -> bool:  # the cell between the score's ranks a < b, drawn as the gate does (column)
        return floor.holds(a, b) if increasing else floor.holds(n - b, n - a)

    order = sorted([(leaf, rank(root), True) for leaf, root, keep in zip(leaves, root_leaves, kept) if keep]
                   + [(c, rank(root), False) for c, root in candidates.items()])
    nexts, following = [], n  # the rank of the next kept leaf edge above each (the upper end: all records)
    for _, r, leaf in reversed(order):
        nexts.append(following)
        following = r if leaf else following
    added, last = [], 0
    for (cut, r, leaf), after in zip(order, reversed(nexts)):
        if leaf:
            last = r
        elif (last < r < after and enough(last, r) and enough(r, after)
              and not (added and added[-1].value == cut.value)):
            added.append(cut)
            last = r
    return added


def derived_reference(release: dict[str, Any], kept: np.ndarray, added: Sequence[gate.Cut] = ()) -> pd.DataFrame:
    """The global CDFs of both classes (cumulative counts at the leaf edges ``kept``, the cuts released
    before ``added`` (:func:`earlier_edges`) and the two ends) from a pooled histogram release, as every
    site derives them (:mod:`dsfed_core.histograms`): the tree's consistent cumulative counts, not made
    monotone (the AUC is linear in them, so the noise adds no bias), so a noisy CDF may dip, and a
    placement value fall a little outside [0, 1]. At an added edge each class's count is interpolated
    linearly inside its leaf, as :func:`cell_lines` reads the reference between edges; the column
    ``closed`` says which edges are cuts ``<= edge`` (R's ``(a, b]``: a Hosmer-Lemeshow break), the others
    ``< edge`` (:func:`reference_cuts`)."""
    levels = {cls: ([np.array([release[key]])] if key in release else [])
              + [np.asarray(v, dtype=float) for v in release[cls]]
              for cls, key in (("negatives", "n_negative"), ("positives", "n_positive"))}
    variances = level_variances(np.asarray(release["variance"], dtype=float), int(release["first_level"]))
    cums = global_cdfs(levels, variances, int(release["branching"]))
    edges = np.linspace(release["lower"], release["upper"], int(release["branching"]) ** int(release["levels"]) + 1)
    keep = np.concatenate([[True], kept, [True]])
    extra = np.array([c.value for c in added], dtype=float)
    at = np.concatenate([edges[keep], extra])
    order = np.argsort(at, kind="stable")
    table = {"edge": at, **{name: np.concatenate([cums[cls][keep], np.interp(extra, edges, cums[cls])])
                             for name, cls in (("neg", "negatives"), ("pos", "positives"))},
             CLOSED: np.concatenate([np.zeros(keep.sum(), dtype=bool), [c.inclusive for c in added]])}
    return pd.DataFrame({k: v[order] for k, v in table.items()}).reset_index(drop=True)


@register(
    "histReferenceDS",
    "assign",
    [
        Param("edges", P.NUMBERS, "increasing bin edges of the global CDFs"),
        Param("negatives", P.NUMBERS, "cumulative count of all sites' negatives below each edge"),
        Param("positives", P.NUMBERS, "cumulative count of all sites' positives below each edge"),
    ],
)
def hist_reference(ctx: CallContext, edges: list[float], negatives: list[float], positives: list[float]
                   ) -> pd.DataFrame:
    """Store the analyst's global CDFs of both classes (from the pooled, post-processed histograms)
    as a table (edge, neg, pos) of cumulative counts; they are linear between the edges."""
    e, c0, c1 = (np.asarray(v, dtype=float) for v in (edges, negatives, positives))
    if not (e.size >= 2 and c0.size == e.size and c1.size == e.size):
        raise CallError("edges, negatives and positives must have the same length (at least 2)")
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(c0)) and np.all(np.isfinite(c1))):
        raise CallError("edges and cumulative counts must be finite numbers")
    if np.any(np.diff(e) <= 0):
        raise CallError("edges must be strictly increasing")
    for name, c in (("negatives", c0), ("positives", c1)):
        if np.any(np.diff(c) < 0) or c[0] != 0 or not c[-1] > 0:
            raise CallError(f"{name} must be cumulative counts: from 0, non-decreasing, ending above 0")
    return pd.DataFrame({"edge": e, "neg": c0, "pos": c1})


def reference_table(reference: pd.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The reference's edges and the cumulative counts of both classes at them (``neg``, ``pos``)."""
    if not {"edge", "neg", "pos"} <= set(reference.columns):
        raise CallError("the reference must be a table made by histReferenceDS or derived by scoreHistogramDS")
    return reference["edge"].to_numpy(dtype=float), {name: reference[name].to_numpy(dtype=float)
                                                      for name in ("neg", "pos")}


def reference_cells(edges: np.ndarray, closed: np.ndarray | None = None) -> tuple[gate.Cut, ...]:
    """The cuts of the reference's bins: its edges, the ends included (below the first edge a score's CDF is
    0, above the last 1); an inner edge is a cut ``< edge``, or ``<= edge`` where ``closed``."""
    inner = (cuts_from(edges[1:-1], inclusive=False) if closed is None
             else tuple(gate.Cut(float(e), bool(c)) for e, c in zip(edges[1:-1], closed[1:-1])))
    return (gate.Cut(float(edges[0]), False), *inner, gate.Cut(float(edges[-1]), True))


def reference_cuts(reference: pd.DataFrame) -> tuple[gate.Cut, ...]:
    """:func:`reference_cells` of a reference table (its column ``closed``, where it has one: a site-derived
    reference whose edges include cuts released before, :func:`derived_reference`)."""
    edges, _ = reference_table(reference)
    closed = reference[CLOSED].to_numpy(dtype=bool) if CLOSED in reference.columns else None
    return reference_cells(edges, closed)


def cell_lines(cuts: Sequence[gate.Cut], edges: np.ndarray, cdf: np.ndarray, within_bin: str, complement: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """A placement value per cell between ``cuts`` as a line :math:`V = a + b x` in the score (``b = 0``
    for 'tied': the CDF at the cell's mid-point; 'linear': the CDF interpolated between the cell's bounds),
    with the CDF the reference's (``cdf`` at ``edges``, linear between them, 0 below and 1 above);
    ``complement``: one minus it (a negative's :math:`V_{01} = 1 - \\tilde F_1`)."""
    bounds = np.array([-np.inf, *(c.value for c in cuts), np.inf])
    finite = np.clip(bounds, edges[0], edges[-1])  # a cell beyond the reference's range: its CDF is flat
    at = np.interp(finite, edges, cdf) / cdf[-1]  # the CDF at the cells' bounds
    if within_bin == "linear":
        width = np.diff(finite)
        b = np.divide(np.diff(at), width, out=np.zeros_like(width), where=width > 0)
        a = at[:-1] - b * finite[:-1]
    else:  # ties one half
        a, b = 0.5 * (at[:-1] + at[1:]), np.zeros(at.size - 1)
    return (1.0 - a, -b) if complement else (a, b)


def placement_cells(ctx: CallContext, p: np.ndarray, reference: pd.DataFrame, score: pd.Series, rows: Rows | None
                    ) -> Generator[Declared, Any, tuple[tuple[gate.Cut, ...], dict[str, Any]]]:
    """The cells of the reference's bins this site releases for the scores ``p`` alone (the release gate:
    the cut history, the secret margin, the row-set audit; :meth:`Guard.release`), and what the gate did.
    A table that stays on the site but is built from the reference (the ROC-GLM's) is read through these
    cells, as the placement sums are: anything computed from it depends on a record only through its cell.
    Released before anything is read through them: the cells are declared part-way
    (:mod:`~dsfed_server.disclosure.declared`), and a caller yields from it."""
    cuts, described = yield Intervals(p, reference_cuts(reference), lambda released: (released.cuts, {
        **released.describe(), "cuts": [c.value for c in released.cuts[1:-1]]}),
                                      what="reference's bins", column=ctx.root_column(score),
                                      strata=ctx.strata(score), rows=rows)
    return cuts, described


def placements(reference: pd.DataFrame, cuts: Sequence[gate.Cut], y: np.ndarray, p: np.ndarray, within_bin: str
               ) -> tuple[np.ndarray, np.ndarray]:
    """Placement values against the reference read at the cells between ``cuts``: :math:`V_{10} = \\tilde
    F_0(x)` of the positives and :math:`V_{01} = 1 - \\tilde F_1(x)` of the negatives, in record order."""
    edges, cdfs = reference_table(reference)
    out = []
    for cls, cdf, complement in ((1, cdfs["neg"], False), (0, cdfs["pos"], True)):
        x = p[y == cls]
        a, b = cell_lines(cuts, edges, cdf, within_bin, complement)
        cell = gate.cell_index(x, cuts)
        out.append(a[cell] + b[cell] * x)
    return out[0], out[1]


def pooled_cells_key(reference: pd.DataFrame, rows: Rows, p: np.ndarray) -> tuple[bytes, bytes, bytes]:
    """Which reference, read at which records' scores: the key of :attr:`Session.pooled_cells` (the scores'
    values too, so that another column's release against the same reference over the same records, or the
    symbol assigned again, keeps cells of its own)."""
    edges, cdfs = reference_table(reference)
    closed = (reference[CLOSED].to_numpy(dtype=float),) if CLOSED in reference.columns else ()
    return content_digest(edges, cdfs["neg"], cdfs["pos"], *closed), records_digest(rows), content_digest(p)


def pooled_cells(ctx: CallContext, reference: pd.DataFrame, rows: Rows | None, p: np.ndarray
                 ) -> tuple[tuple[gate.Cut, ...], dict[str, Any]]:
    """The cells a pooled release of the placement sums against ``reference`` over the same records and scores
    released, once every site's audit passed them (``histPlacementSumsDS`` pooled), and what its gate did."""
    found = None if rows is None else ctx.session.pooled_cells.get(pooled_cells_key(reference, rows, p))
    if found is None:
        raise CallError(
            "a reference the sites derived is read at the cells a pooled release of its placement sums over the same "
            "records and scores released, and there was none for this reference, these records and scores",
            hint="release histPlacementSumsDS against the reference pooled first, over the records complete in the "
                 "outcome and the scores (the dsfed client does), or make this for the site alone")
    return found


@register(
    "histPlacementSumsDS",
    "aggregate",
    [
        _TRUTH,
        _SCORE,
        Param("reference", P.TABLE, "global CDFs of both classes, from histReferenceDS"),
        _WITHIN,
    ],
    checks=GATE_RULES,
    cells=True,
)
def hist_placement_sums(ctx: CallContext, truth: pd.Series, score: pd.Series, reference: pd.DataFrame,
                        within_bin: str) -> Intervals:
    """Sums and sums of squares of this site's placement values against the histogram CDFs.

    For a positive with score :math:`x`, :math:`V_{10} = \\tilde F_0(x)` (share of all negatives
    below it); for a negative, :math:`V_{01} = 1 - \\tilde F_1(x)` (share of all positives above
    it). With ``within_bin = 'tied'`` and bins that separate all distinct scores, these are
    DeLong's placement values exactly (ties one half); with ``'linear'`` that holds when, in
    addition, every score lies at its bin's mid-point. ``'linear'`` is refused where the site keeps
    a cut history (:meth:`~dsfed_server.disclosure.checks.Guard.placement_within_bin`).

    **The reference's bins are cells.** A placement value depends on a record only through its bin
    (and, ``'linear'``, its score within it), so the sums are linear in each bin's counts of both
    classes -- and the reference's step values, noisy reals the analyst knows, weigh those counts
    differently in every reference: the sums against a handful of references, or even one at full
    precision, give the counts per bin back. So the bins are released as the cells they are
    (:class:`~dsfed_server.disclosure.gate.Intervals` between the reference's edges, per site or
    pooled: the cut history, the row-set audit, the secret margin, the dominance rule), and the sums
    are computed from the released cells only: the CDFs at the released cells' bounds (linear between
    the reference's edges), a bin the gate merged counting as one. The reference's ends are cuts
    too (below the first edge a positive's :math:`V_{10}` is 0, above the last 1).

    **Each class against its own CDF.** ``sum_v00`` sums the negatives' :math:`V_{00} = \\tilde F_0(x)`,
    ``sum_v11`` the positives' :math:`V_{11} = \\tilde F_1(x)`, at the same released cells, as
    :math:`V_{10}` and :math:`V_{01}` are. With ties one half, an exact reference and cells whose bounds are
    the reference's edges, each mean is one half whatever the data (:math:`\\sum_c n_c (C_{c-1} + n_c/2) =
    N^2/2`); under the noise it moves with the same leaf estimates as :math:`\\bar V_{10}` (resp.
    :math:`\\bar V_{01}`), which makes it a control variate of known mean for them (Glynn & Szechtman 2002).
    Both are further linear combinations of the released cells' class counts with the reference's values,
    as ``sum_v10`` and ``sum_v01`` are, so the same gate covers them: no new rule, and they are pooled
    wherever the other fields are (the pooled release renders them from the pooled cells). Where a site's own gate
    merged or moved cells (a per-site release; ``own_cells_coarsened`` 1, what ``placement_cells`` says), the
    own-class means are not one half without noise, and the sum over the sites counts such sites.
    """
    ctx.guard.placement_within_bin(within_bin)
    y, p = outcome_and_score(ctx, truth, score)
    edges, cdfs = reference_table(reference)
    positive = y == 1
    sums = {"n1": positive.astype(float)}
    if within_bin == "linear":
        sums |= {"p1": np.where(positive, p, 0.0), "p0": np.where(positive, 0.0, p),
                 "pp1": np.where(positive, p * p, 0.0), "pp0": np.where(positive, 0.0, p * p)}

    def render(released: Released) -> dict[str, Any]:
        n = np.asarray(released.counts, dtype=float)
        n1 = np.asarray(released.sums["n1"], dtype=float)
        out = {"n1": int(round(n1.sum())), "n0": int(round((n - n1).sum()))}
        # v10, v01: each class against the other's CDF; v00, v11: each class against its own (sums only)
        for name, cdf, count, linear_sums, complement in (("v10", cdfs["neg"], n1, ("p1", "pp1"), False),
                                                           ("v01", cdfs["pos"], n - n1, ("p0", "pp0"), True),
                                                           ("v00", cdfs["neg"], n - n1, ("p0", "pp0"), False),
                                                           ("v11", cdfs["pos"], n1, ("p1", "pp1"), False)):
            a, b = cell_lines(released.cuts, edges, cdf, within_bin, complement)  # V = a + b x within a cell
            s1, s2 = ((np.asarray(released.sums[k], dtype=float) for k in linear_sums) if within_bin == "linear"
                      else (np.zeros_like(count), np.zeros_like(count)))
            out[f"sum_{name}"] = float((a * count + b * s1).sum())
            if name in ("v10", "v01"):
                out[f"sumsq_{name}"] = float((a * a * count + 2 * a * b * s1 + b * b * s2).sum())
        # per site: 1 where this site's gate merged or moved cells of its own (placement_cells says which)
        out["own_cells_coarsened"] = 0 if released.pooled else int(bool(released.dropped or released.moved))
        # the released cells' inner cuts too (cuts of the column's history): what the AUC's ties are bounded by
        return {**out, "placement_cells": {**released.describe(), "cuts": [c.value for c in released.cuts[1:-1]]}}

    rows = ctx.record_rows(truth, score)

    def keep(release: gate.PooledRelease) -> None:  # what later pooled reads of the reference over them read at
        if rows is not None:
            ctx.session.pooled_cells[pooled_cells_key(reference, rows, p)] = (
                release.cuts, release.result["placement_cells"])

    return Intervals(p, reference_cuts(reference), render, sums, what="reference's bins", column=ctx.root_column(score),
                     strata=ctx.strata(score), rows=rows, on_pooled=keep)


@register(
    "histRocGlmDataDS",
    "assign",
    [
        _TRUTH,
        _SCORE,
        Param("reference", P.TABLE, "global CDFs of both classes, from histReferenceDS"),
        Param("thresholds", P.INTEGER, "number of equidistant thresholds t_j = j / (n + 1)", minimum=2,
              maximum=1000),
        _WITHIN,
        Param("pooled", P.BOOLEAN, "TRUE: read only by pooled releases (a site-derived reference's leaves); FALSE: "
              "read per site too (the cells this site releases)", required=False, default=False),
        Param("placed", P.STRING, "'positives': the positives' placement values against the negatives' CDF "
              "(the ROC curve); 'negatives': the negatives' against the positives' CDF (its inverse)",
              required=False, default="positives", choices=("negatives", "positives")),
    ],
    checks=GATE_RULES,
)
def hist_roc_glm_data(ctx: CallContext, truth: pd.Series, score: pd.Series, reference: pd.DataFrame,
                      thresholds: int, within_bin: str, pooled: bool, placed: str
                      ) -> Generator[Declared, Any, pd.DataFrame]:
    """The site's intermediate ROC-GLM table (Schalk et al. 2024, "The ROC-GLM") from the histogram CDF:
    :math:`PV_i = 1 - \\tilde F_0(x_i)` for the positives, :math:`u_{ij} = 1(PV_i \\le t_j)`,
    stored as rows ``(u, x = \\Phi^{-1}(t_j), w = count)``; the table stays on the site.

    ``placed = 'negatives'``: the same table from the negatives' placement values against the positives'
    CDF, :math:`PV_j = 1 - \\tilde F_1(x_j)`, whose distribution is the inverse of the ROC curve,
    :math:`P(PV_j \\le s) = ROC^{-1}(s)` (placement values of either class: Pepe & Cai 2004). The
    client fits it where the positives' CDF carries the less noise; the cells read are the same, so is what the
    table tells.

    The table's counts ``w`` are read like any column (a mean of ``w`` over its rows ``u = 1`` is linear in the
    positives' placement values, on a grid the analyst picks), so the table tells this site's counts of
    each class per cell of the reference's bins it reads (and so do the sums of a fit over it: linear in
    ``w`` at each iterate). ``pooled = FALSE``: :math:`\\tilde F_0` is read at the cells this site releases
    (:func:`placement_cells`), as per-site placement sums are. ``pooled = TRUE``: at the cells a pooled
    release of the placement sums against the same reference, over the same records, released
    (``histPlacementSumsDS`` pooled first: the pooled gate, the row-set audit, the dominance rule), and the
    table is read only by pooled releases (:data:`~dsfed_server.context.POOLED_ONLY`), whose sums over the
    sites tell no more than those pooled cells' counts."""
    ctx.guard.placement_within_bin(within_bin)
    y, (p,) = complete_pairs(ctx, truth, {"score": score})
    rows = ctx.record_rows(truth, score)
    if pooled:
        cuts = pooled_cells(ctx, reference, rows, p)[0]
    else:
        cuts, _ = yield from placement_cells(ctx, p, reference, score, rows)
    v10, v01 = placements(reference, cuts, y, p, within_bin)
    table = roc_glm_table(1.0 - v10 if placed == "positives" else v01, thresholds, y)
    table.attrs[POOLED_ONLY] = pooled
    return table
