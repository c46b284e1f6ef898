"""The one seam between per-site answers and what the analyst sees: how an analysis' sums,
binned sums, histogram levels and multi-step protocols are released.

Two strategies, in the spirit of Flower's ``Strategy`` classes (the analyses call them and never
ask which one they hold):

- :class:`PerSite`: every site releases its own part, checked by its own rules, and the analyst
  sums the parts (a multi-step protocol is relayed: each site checks its own counts);
- :class:`Pooled`: the sites sum their parts among themselves under secure aggregation, check
  the **pooled** cells against their rules (what the analyst will see) and release only the sums;
  multi-step protocols derive each step's parameters from the authenticated pooled result.

Every analysis takes ``secure``: ``True`` (pooled), ``False`` (per site) or ``None`` (pooled
where every site offers it, else per site, saying why); :meth:`FederatedSession.aggregation`
turns it into a strategy, the only place that decides.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, TypeVar

import numpy as np
import pandas as pd

from dsfed_client import pooling
from dsfed_client.calls import Ref
from dsfed_client.errors import FederatedCallError
from dsfed_client.quantile_search import quantile_groups
from dsfed_client.sites import Sites
from dsfed_core.wire import decode_f64

T = TypeVar("T")
_BIN_FIELDS = ("n", "sum_p", "sum_y")
# a refusal by these rules means "this federation offers no pooled release here" (then secure=None
# falls back to per-site releases), rather than a refusal of the analysis
_NO_POOLED_RULES = ("secure_aggregation.", "functions.enabled")


def no_pooled_release(exc: FederatedCallError) -> bool:
    """Whether a failed pooled release means that the federation offers none (rules
    ``secure_aggregation.*`` or ``functions.enabled`` at every failing site)."""
    return all(e.rule is not None and e.rule.startswith(_NO_POOLED_RULES) for e in exc.failures.values())


def _as(asked: float, released: float) -> str:
    """A released edge, with the digits that tell it from the edge asked (0.1 as 0.10000001; 17
    significant digits tell any two doubles apart, 0.3 from 0.30000000000000004)."""
    for digits in range(4, 18):
        if f"{released:.{digits}g}" != f"{asked:.{digits}g}":
            return f"{released:.{digits}g}"
    return f"{released:.4g}"


# the same binned sums asked on explicit edges: edges -> (function, arguments)
Again = Callable[[np.ndarray], tuple[str, tuple[Any, ...]]]


def _misaligned(binned: BinnedSums) -> dict[float, float]:
    """Requested edges that some sites moved onto one cut released before (all of them onto the same one)
    where the summed cells have no edge at that cut: each with that cut."""
    targets: dict[float, set[float]] = {}
    for pairs in binned.moved.values():
        for asked, released in pairs:
            targets.setdefault(asked, set()).add(released)
    kept = set(binned.edges.tolist())
    return {e: next(iter(c)) for e, c in targets.items() if len(c) == 1 and next(iter(c)) not in kept}


def _moves(pairs: Any) -> list[tuple[float, float]]:
    """The (asked, released) edges a site moved onto a cut released before, less those the cut
    equals: an edge released at an earlier cut of its own value is released as asked."""
    return [(float(a), float(b)) for a, b in pairs if float(a) != float(b)]


@dataclass(frozen=True)
class BinnedSums:
    """Per-cell counts, sums of predictions and sums of outcomes over all sites, on the cells the
    sites' release gate released (``dsfed_server/disclosure/gate.py``).

    ``edges`` are the released cells' edges: the requested ones, except those the gate coarsened
    (``coarsened``: per site, or ``"pooled"``, the requested edges whose cells it merged with the
    next one or moved to an earlier cut). Every record is in exactly one cell: nothing is left out.
    ``moved``: of those, the edges the gate released as a cut released before on the column
    (requested edge, released cut). ``pooled``: the cells were checked pooled over the sites
    (secure aggregation with ``pooled_thresholds``), otherwise per site and summed on the edges
    every site released. ``why``: per site, or ``"pooled"``, the site's reason for what it coarsened
    and what to do (the rule, its minimum count and secret margin, and whether cuts released before
    on the column, by any analyst, took part)."""

    edges: np.ndarray
    n: np.ndarray
    sum_p: np.ndarray
    sum_y: np.ndarray
    requested: np.ndarray
    pooled: bool
    coarsened: dict[str, list[float]]
    per_site: dict[str, pd.DataFrame]
    moved: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    # per site: requested edges it released as asked, then was asked again at the cut other sites had moved
    # them onto (released before on the column), so that every site's cells line up (PerSite.bins)
    aligned: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @property
    def asked(self) -> np.ndarray:
        """The edges of the cells asked for: the requested edges, and the released cells' outer ends
        where they lie beyond them (a request of inner edges only, such as decision thresholds,
        asks for one cell more than it names edges)."""
        if self.edges.size == 0:
            return self.requested
        if self.requested.size == 0:
            return self.edges[[0, -1]]
        lo, hi = float(self.edges[0]), float(self.edges[-1])
        return np.concatenate([[lo] if lo < self.requested[0] else [], self.requested,
                               [hi] if hi > self.requested[-1] else []])

    @property
    def was_coarsened(self) -> bool:
        return self.edges.size != self.asked.size or not np.array_equal(self.edges, self.asked)

    def note(self) -> str:
        """One line on how the cells were checked and what the gate did to them: the edges whose
        cells it merged with the next (fewer cells), and the edges it released as a cut released
        before on the column (as many cells, their edges shifted)."""
        how = "checked pooled over the sites" if self.pooled else "checked at each site"
        if not self.was_coarsened:
            return f"{how}; released as requested"
        merged, shifted = [], []
        for where, values in self.coarsened.items():
            moved = {a: b for a, b in self.moved.get(where, ()) if (a, b) not in self.aligned.get(where, ())}
            if kept := [v for v in values if v not in moved and v not in dict(self.aligned.get(where, ()))]:
                merged.append(f"{where}: {', '.join(f'{v:.4g}' for v in kept)}")
            if moved:
                shifted.append(f"{where}: {', '.join(f'{a:.4g} as {_as(a, b)}' for a, b in moved.items())}")
        what = ([f"cells merged with the next at edges {'; '.join(merged)}"] if merged else []) + (
            [f"edges released as cuts released before on this column ({'; '.join(shifted)})"] if shifted else [])
        aligned = {a: b for pairs in self.aligned.values() for a, b in pairs}
        if aligned:
            what.append("edges asked again at every site at the cut other sites had moved them onto, so that the "
                        "sites' cells line up (" + "; ".join(
                            f"{a:.4g} as {_as(a, b)} at {', '.join(w for w, p in self.aligned.items() if a in dict(p))}"
                            for a, b in aligned.items()) + ")")
        if differ := self._differ():
            what.append("cells merged in the sum over the sites, which released different edges there (" + "; ".join(
                f"{e:.4g}: " + ", ".join(f"{where} {released}" for where, released in sites.items())
                for e, sites in differ.items()) + "); per site (secure=False) a summed cell is one every site "
                "released; ask pooled (secure=True), where the sites check the pooled cells, or fewer, wider bins")
        reasons: dict[str, list[str]] = {}
        for where, text in self.why.items():
            if text:
                reasons.setdefault(text.rstrip(". "), []).append(where)
        why = "".join(f". Why ({', '.join(where)}): {text}" for text, where in reasons.items())
        return (f"{how}; COARSENED to {self.edges.size - 1} of {self.asked.size - 1} cells asked: "
                + "; ".join(what or ["edges differ from those asked"]) + why)

    def _differ(self) -> dict[float, dict[str, str]]:
        """Per site, of each requested inner edge that no summed cell has although some site released it
        (as asked or moved): what each site released there (per site only)."""
        if self.pooled or not self.per_site:
            return {}
        released = {site: set(frame["lower"].tolist()[1:]) for site, frame in self.per_site.items()}
        moved = {site: dict(self.moved.get(site, ())) for site in self.per_site}
        kept = set(self.edges.tolist())
        out: dict[float, dict[str, str]] = {}
        for e in self.requested.tolist()[1:-1]:
            at = {site: moved[site].get(e, e) for site in self.per_site}
            if any(v in kept for v in at.values()) or not any(v in released[s] for s, v in at.items()):
                continue
            out[e] = {site: (f"at {_as(e, v)}" if v != e else "as asked") if v in released[site] else "merged"
                      for site, v in at.items()}
        return out


@dataclass(frozen=True)
class LevelSums:
    """A hierarchical histogram's noisy counts per class and level, summed over the sites
    (``scoreHistogramDS``), with what the analyst needs to make them consistent; or, noise off,
    each part's exact leaf counts (``exact``)."""

    counts: dict[str, list[np.ndarray]]  # class -> [total (if released), level 1, ..., level L]
    variance: np.ndarray  # noise variance of one count per level, summed over the parts
    first_level: int
    mechanism: dict[str, dict[str, Any]]  # per part: site, or "pooled"
    reference: Ref | None = None  # handle on the reference the sites derived from pooled levels
    exact: dict[str, Any] | None = None  # noise off: part -> {"negatives"/"positives": {edges, counts}}


@dataclass(frozen=True)
class RiskGroups:
    """Hosmer-Lemeshow C's groups (R's type-7 quantile groups of the scores) as this strategy
    finds them, with their sums; where the sites found and checked them pooled, the statistic
    they computed (the group table may then be withheld: ``withheld`` says why)."""

    bins: BinnedSums | None
    exact: bool
    uncertain_records: int
    cells: str
    coarsened: bool
    sizes: tuple[int, ...] = ()
    statistic: float | None = None
    df: int | None = None
    errors: tuple[float, float] | None = None  # ECE, MCE as the sites computed them
    withheld: str = ""
    # per group, whether the records at its upper edge are in it (R's cut: (a, b]); an edge the sites moved onto a
    # threshold released before holds them in the group above ([a, b)). Empty: every group (a, b]
    upper_closed: tuple[bool, ...] = ()


class Aggregation(ABC):
    """How per-site parts become what the analyst sees. ``note`` says why this strategy was
    chosen where the analyst left it to the session (``secure=None``)."""

    pooled: ClassVar[bool]
    mode: ClassVar[str]
    # whether the analyst sees each site's own parts, so that per-site estimates (heterogeneity across
    # sites) add no new kind of release; validate() asks for them by default only then
    per_site_parts: ClassVar[bool]

    def __init__(self, session: Sites, note: str = "") -> None:
        self.session = session
        self.note = note

    @abstractmethod
    def sum(self, function: str, *args: Any, **kwargs: Any) -> dict[str, float]:
        """The additive numeric fields of an aggregate, summed over the sites."""

    @abstractmethod
    def sum_described(self, function: str, *args: Any, described: str, **kwargs: Any
                      ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """:meth:`sum`, and the field ``described`` of every release summed (each site's, or the pooled one):
        what the sites' gates did to the cells the sums were computed over."""

    @abstractmethod
    def bins(self, function: str, requested: np.ndarray, *args: Any, again: Again | None = None) -> BinnedSums:
        """A binned-sums function (``calibrationBinsDS``, ``groupSumsDS``) on ``requested`` edges.
        ``again``: the same sums asked on explicit edges (the function and its arguments), with
        which per site the sites are asked to line up their cells where some moved an edge."""

    @abstractmethod
    def steps(self, function: str, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every release of a protocol of several steps (a GLM fit), whose parameters the sites derive."""

    @abstractmethod
    def count(self, column: str) -> int:
        """The number of records (missing values included) of a column over all sites."""

    @abstractmethod
    def histogram_levels(self, truth: str, score: str, **options: Any) -> LevelSums:
        """``scoreHistogramDS``'s noisy level counts of both classes, summed over the sites."""

    @abstractmethod
    def risk_groups(self, truth: str, score: str, n_groups: int) -> RiskGroups:
        """Hosmer-Lemeshow C's quantile groups of ``score`` and their sums."""

    @property
    @abstractmethod
    def noisy_parts(self) -> int:
        """How many independently noised parts a summed count holds (its noise grows with them)."""


class PerSite(Aggregation):
    """Each site releases its part under its own rules; the analyst sums the parts."""

    pooled = False
    mode = "per-site"
    per_site_parts = True

    def sum(self, function: str, *args: Any, **kwargs: Any) -> dict[str, float]:
        return pooling.summed_fields(self.session.aggregate(function, *args, **kwargs))

    def sum_described(self, function: str, *args: Any, described: str, **kwargs: Any
                      ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        results = self.session.aggregate(function, *args, **kwargs)
        return pooling.summed_fields(results), [r.get(described, {}) for r in results.values()]

    def bins(self, function: str, requested: np.ndarray, *args: Any, again: Again | None = None) -> BinnedSums:
        """Each site's cells, summed on the edges every site released. Where some sites moved a requested
        edge onto a cut released before on the column and others released it elsewhere (each site's
        gate and secret margin decide alone), the summed cell would merge; given ``again``, every site
        is asked once more at the cut the moving sites agree on (a cut each released before: no new
        cut where the earlier release was at every site), and the answer with more summed cells is kept."""
        first = self._binned(self.session.aggregate(function, *args), requested)
        targets = _misaligned(first)
        if again is None or not targets:
            return first
        function, call = again(np.array([targets.get(e, e) for e in requested.tolist()], dtype=float))
        second = self._binned(self.session.aggregate(function, *call), requested, first, targets)
        return second if second.edges.size > first.edges.size else first

    def _binned(self, results: dict[str, Any], requested: np.ndarray, first: BinnedSums | None = None,
                targets: dict[float, float] | None = None) -> BinnedSums:
        """The sites' binned sums; of a second ask at the edges ``targets`` moved, with the first ask's
        moves and reasons, and the moved edges named as requested."""
        edges, sums = pooling.pooled_bins(results, _BIN_FIELDS)
        back = {c: e for e, c in (targets or {}).items()}
        per_site = {}
        for site, r in results.items():
            n_k, p_k, y_k = (np.asarray(r[f], dtype=float) for f in _BIN_FIELDS)
            with np.errstate(invalid="ignore", divide="ignore"):
                per_site[site] = pd.DataFrame({"lower": r["edges"][:-1], "upper": r["edges"][1:],
                                               "n": n_k.astype(int),
                                               "mean_prediction": np.where(n_k > 0, p_k / n_k, np.nan),
                                               "mean_outcome": np.where(n_k > 0, y_k / n_k, np.nan)})
        moved = {s: [(back.get(a, a), b) for a, b in _moves(r["moved"])] for s, r in results.items()}
        dropped = {s: [back.get(float(v), float(v)) for v in r["dropped"]] for s, r in results.items()}
        why = {s: str(r.get("why", "")) for s, r in results.items()}
        aligned: dict[str, list[tuple[float, float]]] = {}
        if first is not None and targets:
            for s in results:
                before = dict(first.moved.get(s, ()))
                aligned[s] = [(e, c) for e, c in targets.items() if e not in before and e not in dict(moved[s])]
                moved[s] = sorted({**before, **dict(aligned[s]), **dict(moved[s])}.items())
                why[s] = why[s] or first.why.get(s, "")
        coarsened = {s: sorted(set(dropped[s]) | {a for a, _ in moved[s]}) for s in results}
        return BinnedSums(edges, sums["n"], sums["sum_p"], sums["sum_y"], requested, False, coarsened, per_site,
                          moved, why, {s: pairs for s, pairs in aligned.items() if pairs})

    def steps(self, function: str, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.session.pooled_steps(function, *args, relayed=True, **kwargs)

    def count(self, column: str) -> int:
        return sum(int(v) for v in self.session.aggregate("lengthDS", Ref(column)).values())

    def histogram_levels(self, truth: str, score: str, **options: Any) -> LevelSums:
        results = self.session.aggregate("scoreHistogramDS", Ref(truth), Ref(score), **options)
        mechanisms = {r["mechanism"] for r in results.values()}
        if mechanisms == {"none"}:
            return LevelSums({}, np.empty(0), 0, {s: {"mechanism": "none"} for s in results}, exact=dict(results))
        if "none" in mechanisms:
            raise ValueError("some sites add noise and some do not; use one rules profile for all sites")
        first = next(iter(results.values()))
        counts = {}
        for cls, key in (("negatives", "n_negative"), ("positives", "n_positive")):
            totals = ([np.array([float(sum(r[key] for r in results.values()))])]
                      if all(key in r for r in results.values()) else [])
            counts[cls] = totals + [sum(decode_f64(r[cls][lv]) for r in results.values())
                                    for lv in range(len(first[cls]))]
        variance = np.sum([np.square(r["sd"]) for r in results.values()], axis=0)
        mechanism = {s: {k: r[k] for k in ("mechanism", "epsilon", "delta", "sensitivity", "decay")}
                     for s, r in results.items()}
        return LevelSums(counts, variance, int(first.get("first_level", 0)), mechanism)

    def risk_groups(self, truth: str, score: str, n_groups: int) -> RiskGroups:
        groups = quantile_groups(self.session, score, n_groups)
        b = self.bins("groupSumsDS", groups.breaks, Ref(truth), Ref(score), [float(v) for v in groups.breaks])
        return RiskGroups(b, groups.exact, groups.uncertain_records, b.note(), b.was_coarsened)

    @property
    def noisy_parts(self) -> int:
        return len(self.session.sites)


class Pooled(Aggregation):
    """The sites sum their parts among themselves, check the pooled cells and release the sums."""

    pooled = True
    mode = "pooled"
    per_site_parts = False

    def sum(self, function: str, *args: Any, **kwargs: Any) -> dict[str, float]:
        return self.sum_described(function, *args, described="", **kwargs)[0]

    def sum_described(self, function: str, *args: Any, described: str, **kwargs: Any
                      ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        release = self.session.pooled(function, *args, **kwargs)
        sums = {k: float(v) for k, v in release.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return sums, [release.get(described, {})]

    def bins(self, function: str, requested: np.ndarray, *args: Any, again: Again | None = None) -> BinnedSums:
        r = self.session.pooled(function, *args)  # one set of cells, checked pooled: nothing to line up
        moved = _moves(r["moved"])
        return BinnedSums(np.asarray(r["edges"], dtype=float), *(np.asarray(r[f], dtype=float) for f in _BIN_FIELDS),
                          requested, True, {"pooled": sorted(r["dropped"] + [a for a, _ in moved])}, {},
                          {"pooled": moved}, {"pooled": str(r.get("why", ""))})

    def steps(self, function: str, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        return self.session.pooled_steps(function, *args, **kwargs)

    def count(self, column: str) -> int:
        return int(self.session.pooled("table1DDS", Ref(column))["total"])

    def histogram_levels(self, truth: str, score: str, **options: Any) -> LevelSums:
        r = self.session.pooled("scoreHistogramDS", Ref(truth), Ref(score), **options)
        if r.get("mechanism") == "none":
            return LevelSums({}, np.empty(0), 0, {"pooled": {"mechanism": "none"}}, exact={"pooled": r})
        counts = {cls: ([np.array([r[key]])] if key in r else []) + [np.asarray(v, dtype=float) for v in r[cls]]
                  for cls, key in (("negatives", "n_negative"), ("positives", "n_positive"))}
        return LevelSums(counts, np.asarray(r["variance"], dtype=float), int(r["first_level"]),
                         {"pooled": {k: r[k] for k in ("mechanism", "sensitivity", "decay")}},
                         Ref(r["reference"], r["reference_digest"]))

    def risk_groups(self, truth: str, score: str, n_groups: int) -> RiskGroups:
        r = self.session.pooled("decileGroupsDS", Ref(truth), Ref(score), n_groups)
        t = r["table"]
        bins = (BinnedSums(np.asarray(t["edges"]), *(np.asarray(t[f], dtype=float) for f in _BIN_FIELDS),
                           np.asarray(t["edges"]), True, {}, {}) if t else None)
        merged, moved, done = int(r["merged_groups"]), len(r.get("moved_breaks", [])), []
        if merged:
            done.append(f"{merged} group(s) merged with the next")
        if moved:  # onto cuts public already: the groups are not R's deciles there
            done.append(f"{moved} break(s) moved onto cuts released before on the score")
        cells = "groups found and checked pooled over the sites" + (
            f"; {', '.join(done)}: {r.get('why') or 'below q'}" if done else "")
        closed = tuple(bool(c) for c in (t or {}).get("upper_closed", ()))
        if not all(closed):
            cells += ("; the records at an edge moved onto a threshold released before are in the group above it "
                      "([a, b)), at R's edges in the group below ((a, b])")
        return RiskGroups(bins, bool(r["exact_grouping"]), 0, cells, bool(done), tuple(r["groups"]),
                          float(r["statistic"]), int(r["df"]), (float(r["ece"]), float(r["mce"])),
                          r.get("table_withheld") or "", closed)

    @property
    def noisy_parts(self) -> int:
        return 1  # each site adds its share of one site's noise


def choose(session: Sites, secure: bool | None) -> Aggregation:
    """The strategy ``secure`` asks for (see the module's docstring)."""
    if secure is True:
        return Pooled(session)
    if secure is False:
        return PerSite(session, "asked for per-site checking")
    offered, why = session.pooled_capability()
    return Pooled(session) if offered else PerSite(session, why)


def first_release(session: Sites, secure: bool | None,
                  release: Callable[[Aggregation], T]) -> tuple[Aggregation, T]:
    """Run an analysis' first release under the strategy ``secure`` asks for; where the session
    chose (``None``) and the sites refuse a pooled release for want of one, fall back to per-site
    releases, noting the refusal. The strategy returned serves the analysis' later releases."""
    aggregation = choose(session, secure)
    try:
        return aggregation, release(aggregation)
    except FederatedCallError as exc:
        if secure is not None or not aggregation.pooled or not no_pooled_release(exc):
            raise
        fallback = PerSite(session, f"a pooled release was refused: {exc}")
        return fallback, release(fallback)


def last_release(releases: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The last release of a protocol of several steps (:meth:`Aggregation.steps`), run to its end."""
    release: dict[str, Any] = {}
    for release in releases:
        pass
    return release
