"""The release gate: the one place that decides which cells of a binned release leave the site.

A function whose result depends on where each record's value falls -- a table, a histogram,
calibration bins, Hosmer-Lemeshow groups, counts below thresholds -- does not count or check
anything itself. It *declares* its cells and returns the declaration:

* :class:`Intervals`: cells between cuts on one numeric variable (the values, the requested
  cuts, the per-record quantities summed per cell);
* :class:`Categories`: cells of one or two categorical variables (a cell index per record).

The gate bins the records, applies the site's rules and hands the released cells
(:class:`Released`) to the declaration's ``render``, which shapes the function's result. The
same declaration is released in one of two ways:

**Per site** (:func:`release_local`). Interval cuts are taken in increasing order; a cut is kept
only if the cells on both sides of it, among the cuts kept so far and every cut of the history
this site keeps for the variable (:mod:`dsfed_server.disclosure.history`), hold 0 or at least q of the
site's records; otherwise it is dropped and its cell merged with the next (the result lists the
dropped cuts: coarsened, never suppressed, so every record is counted). A cell that still holds
0 < n < q records -- possible only when the declaration asks to refuse rather than merge
(``bins.small_bin_policy = "refuse"`` for histograms) -- refuses the whole release. Categorical
cells are not merged: one non-zero cell below q refuses the table (as dsBase's ``tableDS``).
The released cells' row sets (:class:`LocalRelease`) are then audited by the site's guard against
every subset and cell released before from the same table, across columns
(:meth:`dsfed_server.disclosure.checks.Guard.release`, ``disclosure.subset_min_difference``).

**Pooled** (:func:`pooled_vector`, :func:`release_pooled`), under secure aggregation with
``secure_aggregation.pooled_thresholds``: every site bins its records on the *refined* cells
(the requested cuts together with every cut of the relayed history), the sites add the counts and
sums among themselves (:mod:`dsfed_server.disclosure.relay`), and each site takes the same
decisions on the pooled counts with the largest q of the sites: the analyst sees pooled cells,
so the pooled cells are what is checked (rule 1). A requested cut that would leave fewer than q
pooled records on one side moves to the nearest history cut (or is dropped); the released cells
are unions of refined cells, so no second round is needed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Literal, Sequence

import numpy as np

from dsfed_server.disclosure.differencing import Rows
from dsfed_server.disclosure.provenance import TRANSFORMS, RootColumn, ordering_key
from dsfed_server.errors import CallError, DisclosureRefusal

Policy = Literal["merge", "refuse"]


@dataclass(frozen=True, order=True)
class Cut:
    """A cut on a numeric variable: the records below it are those ``< value`` (``inclusive``
    False: cells ``[a, b)``) or ``<= value`` (``inclusive`` True: R's ``cut``/``hist``, ``(a, b]``)."""

    value: float
    inclusive: bool

    def below(self, sorted_x: np.ndarray) -> int:
        """How many of the (sorted) values lie below the cut."""
        return int(np.searchsorted(sorted_x, self.value, "right" if self.inclusive else "left"))


def cuts_from(values: Sequence[float], inclusive: bool) -> tuple[Cut, ...]:
    return tuple(Cut(float(v), inclusive) for v in values)


def condition_cuts(op: str, value: float) -> tuple[Cut, ...]:
    """The cuts a subset condition ``x op value`` makes on a numeric column (``==`` and ``!=``: the
    records equal to the value are a cell of their own)."""
    v = float(value)
    below, at_or_below = Cut(v, False), Cut(v, True)
    return {">=": (below,), "<": (below,), ">": (at_or_below,), "<=": (at_or_below,),
            "==": (below, at_or_below), "!=": (below, at_or_below)}[op]


def cell_index(x: np.ndarray, cuts: Sequence[Cut]) -> np.ndarray:
    """Each value's cell among the cells that ``cuts`` (sorted) make: the number of cuts it lies above."""
    strict = np.array([c.value for c in cuts if not c.inclusive], dtype=float)
    inclusive = np.array([c.value for c in cuts if c.inclusive], dtype=float)
    return np.searchsorted(strict, x, "right") + np.searchsorted(inclusive, x, "left")


@dataclass(frozen=True)
class Released:
    """The cells that leave the site, for a declaration's ``render``.

    ``cuts``: the cuts the cells lie between (intervals; ``()`` for categories); ``counts`` and
    ``sums[name]``: per cell (shape of the categories); ``dropped``: requested cuts the gate did
    not release (their cells merged with the next); ``moved``: requested cut -> the history cut it
    was released at; ``pooled``: the cells are pooled over the sites of a secure sum; ``totals``:
    the declaration's totals (summed over the sites when pooled)."""

    cuts: tuple[Cut, ...]
    counts: np.ndarray
    sums: dict[str, np.ndarray]
    dropped: tuple[Cut, ...] = ()
    moved: dict[Cut, Cut] = field(default_factory=dict)
    pooled: bool = False
    totals: dict[str, float] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """What the gate did, in the result's JSON (``dropped``/``moved`` as cut values)."""
        return {"pooled": self.pooled, "coarsened": bool(self.dropped or self.moved),
                "dropped": [c.value for c in self.dropped],
                "moved": [[a.value, b.value] for a, b in self.moved.items()]}


@dataclass
class Intervals:
    """Cells between ``cuts`` (increasing) on the values ``x`` of one numeric variable; ``sums``
    holds per-record quantities summed per cell. ``column`` is the site table column ``x`` comes
    from (:mod:`dsfed_server.disclosure.provenance`; None: values without provenance), whose
    release history the cuts are checked against."""

    x: np.ndarray
    cuts: tuple[Cut, ...]
    render: Callable[[Released], Any]
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    policy: Policy = "merge"
    what: str = "bins"
    column: RootColumn | None = None
    totals: dict[str, float] = field(default_factory=dict)  # counts that are not cells (e.g. missing values)
    rows: Rows | None = None  # the records of ``x``: their positions in the table (None: not known)

    def __post_init__(self) -> None:
        if list(self.cuts) != sorted(self.cuts) or len(set(self.cuts)) != len(self.cuts):
            raise CallError(f"the {self.what}' edges must be strictly increasing")

    @property
    def history_key(self) -> tuple[str, str]:
        """Where this release's cuts are kept: the table column, or the values' own ordering."""
        return self.column.key if self.column is not None else ("(no table)", ordering_key(self.x))

    def root_values(self) -> np.ndarray:
        """Every value of the column the cuts are checked in (sorted), in the column's units: the
        table column's (all its records), or the values' own without provenance."""
        return np.sort(self.x if self.column is None else self.column.values)

    @property
    def subset(self) -> bool:
        """The values are not the column's records, all of them (a subset, or records dropped)."""
        return self.column is not None and (not self.column.whole or self.x.size != self.column.values.size)

    def root_cuts(self) -> tuple[Cut, ...]:
        """The requested cuts in the column's units (a monotone transform maps them back)."""
        if self.column is None:
            return self.cuts
        values = self.column.inverse(np.array([c.value for c in self.cuts], dtype=float))
        return tuple(Cut(float(v), c.inclusive) for v, c in zip(values, self.cuts))


@dataclass
class Categories:
    """Cells of one or two categorical variables: ``codes`` is each record's cell (flat index)."""

    codes: np.ndarray
    shape: tuple[int, ...]
    render: Callable[[Released], dict[str, Any]]
    what: str = "table"
    totals: dict[str, float] = field(default_factory=dict)
    rows: Rows | None = None  # the records of ``codes``: their positions in the table (None: not known)


Cells = Intervals | Categories


def _refuse_small(what: str, q: int, pooled: bool) -> DisclosureRefusal:
    where = "pooled over the sites " if pooled else ""
    return DisclosureRefusal(
        f"{what} has a non-zero cell {where}below the minimum count of {q}",
        rule="disclosure.q_threshold",
        hint="merge categories, ask for fewer or wider bins, or use more records")


def _refuse_small_bin(what: str, q: int, pooled: bool) -> DisclosureRefusal:
    """A release whose rules refuse rather than merge a small bin (``bins.small_bin_policy``)."""
    where = " pooled over the sites" if pooled else ""
    return DisclosureRefusal(
        f"{what} would have a non-empty bin with fewer than {q} records{where} (alone or with the "
        "cuts released before on this variable)", rule="bins.small_bin_policy",
        hint="ask for fewer, wider bins")


# --- the decisions on cuts --------------------------------------------------------------------


KEEP = "keep"  # decide(): the requested cut is released as it is


def decide(spaces: list[tuple[dict[int, Cut], list[int]]], q: int, *, snap: bool) -> list[Any]:
    """Per requested cut: :data:`KEEP`, the history cut it is released at instead (``snap``), or
    None (dropped: its cell merges with the next).

    ``spaces``: per space of records (the release's own records, the whole column they come from,
    pooled or not), the history's cuts by rank (records below the cut; 0 and n included) and the
    requested cuts' ranks in that space, in the requested (increasing) order. A requested cut is
    kept if in every space it equals a cut used so far or lies at least q records from both
    neighbouring used cuts; a kept cut counts as used for the next ones. With ``snap`` (one space
    only) a cut that does not fit moves to the nearest used history cut, if that is not an end."""
    used = [sorted(history) for history, _ in spaces]
    out: list[Any] = []
    for k in range(len(spaces[0][1])):
        ranks = [requested[k] for _, requested in spaces]
        fits, nearest = True, None
        for u, r in zip(used, ranks):
            i = bisect.bisect_left(u, r)
            if i < len(u) and u[i] == r:
                continue
            lo, hi = u[i - 1], u[i]
            if r - lo < q or hi - r < q:
                fits = False
                nearest = lo if r - lo <= hi - r else hi
        if fits:
            for u, r in zip(used, ranks):
                if r not in u:
                    bisect.insort(u, r)
            out.append(KEEP)
        elif snap and len(spaces) == 1 and nearest is not None:
            target = spaces[0][0].get(nearest)
            out.append(target if target is not None and np.isfinite(target.value) else None)
        else:
            out.append(None)
    return out


def _ranks(sorted_x: np.ndarray, cuts: Sequence[Cut]) -> list[int]:
    return [c.below(sorted_x) for c in cuts]


def _history_ranks(sorted_x: np.ndarray, history: Sequence[Cut]) -> dict[int, Cut]:
    by_rank: dict[int, Cut] = {}
    for cut in sorted(history):
        by_rank.setdefault(cut.below(sorted_x), cut)
    by_rank.setdefault(0, Cut(-np.inf, False))
    by_rank.setdefault(int(sorted_x.size), Cut(np.inf, False))
    return by_rank


def _effective(requested: Sequence[Cut], decided: list[Any]) -> tuple[tuple[Cut, ...], tuple[Cut, ...], dict]:
    """The released cuts, the dropped ones and the moved ones, from :func:`decide`'s answers."""
    released, dropped, moved = [], [], {}
    for cut, d in zip(requested, decided):
        if d is KEEP:
            released.append(cut)
        elif d is None:
            dropped.append(cut)
        else:
            moved[cut] = d
            released.append(d)
    return tuple(sorted(set(released))), tuple(dropped), moved


# --- per-site release ----------------------------------------------------------------------------


def decide_local(cells: Intervals, q: int, history: Sequence[Cut], exclude: Collection[Cut] = ()) -> list[Any]:
    """:func:`decide` for one site: in the release's own records (its cells), and in the column
    they come from, with every cut released before on it (``history``, in the column's units).
    Requested cuts in ``exclude`` are dropped before anything is decided."""
    x = np.sort(cells.x)
    root = cells.root_values()
    chosen = [i for i, c in enumerate(cells.cuts) if c not in exclude]
    root_cuts = cells.root_cuts()
    decided = decide([(_history_ranks(x, ()), _ranks(x, [cells.cuts[i] for i in chosen])),
                      (_history_ranks(root, history), _ranks(root, [root_cuts[i] for i in chosen]))], q, snap=False)
    out: list[Any] = [None] * len(cells.cuts)
    for i, d in zip(chosen, decided):
        out[i] = d
    return out


@dataclass(frozen=True)
class LocalRelease:
    """A per-site release: the result, the cuts released (in the column's units, for the history)
    and the row sets of the released cells (positions in the table; empty when not known)."""

    result: Any
    root_cuts: list[Cut]
    row_sets: list[np.ndarray]


def _row_sets(rows: Rows | None, cell_of_record: np.ndarray, size: int) -> list[np.ndarray]:
    if rows is None or rows.index.size != cell_of_record.size:
        return []
    out = []
    for k in range(size):
        member = np.zeros(rows.n_root, dtype=bool)
        member[rows.index[cell_of_record == k]] = True
        if member.any():
            out.append(member)
    return out


def release_local(cells: Cells, q: int, history: Sequence[Cut] = (), exclude: Collection[Cut] = ()) -> LocalRelease:
    """The declaration's result as this site releases it alone (module docstring), with the cuts it
    released and its cells' row sets."""
    if isinstance(cells, Categories):
        size = int(np.prod(cells.shape))
        counts = np.bincount(cells.codes, minlength=size).reshape(cells.shape)
        if np.any((counts > 0) & (counts < q)):
            raise _refuse_small(cells.what, q, pooled=False)
        return LocalRelease(cells.render(Released((), counts, {}, totals=dict(cells.totals))), [],
                            _row_sets(cells.rows, cells.codes, size))
    decided = decide_local(cells, q, history, exclude)
    if cells.policy == "refuse" and any(d is None for d in decided):
        raise _refuse_small_bin(cells.what, q, pooled=False)
    kept, dropped, moved = _effective(cells.cuts, decided)
    idx = cell_index(cells.x, kept)
    size = len(kept) + 1
    counts = np.bincount(idx, minlength=size)
    sums = {name: np.bincount(idx, weights=v, minlength=size) for name, v in cells.sums.items()}
    root_of = dict(zip(cells.cuts, cells.root_cuts()))
    return LocalRelease(cells.render(Released(kept, counts, sums, dropped, moved, totals=dict(cells.totals))),
                        [root_of[c] for c in kept], _row_sets(cells.rows, idx, size))


# --- pooled release ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PooledPlan:
    """How a declaration's pooled vector is laid out: the refined cuts (requested and history
    together, sorted, in the column's units), where the requested ones sit among them, and the
    cells' shape."""

    refined: tuple[Cut, ...]
    requested: tuple[Cut, ...]
    history: tuple[Cut, ...]
    shape: tuple[int, ...]
    own_space: bool  # the release's own records differ from the column's (a subset): both are counted


def pooled_vector(cells: Cells, history: Sequence[Cut] = ()) -> tuple[PooledPlan, dict[str, np.ndarray]]:
    """This site's counts and sums on the refined cells (summed over sites, never released as such).
    ``history``: every cut released before on the column, at any site of the round (relayed)."""
    totals = {f"total:{name}": np.array([float(v)]) for name, v in cells.totals.items()}
    if isinstance(cells, Categories):
        counts = np.bincount(cells.codes, minlength=int(np.prod(cells.shape))).astype(float)
        return PooledPlan((), (), (), cells.shape, False), {"counts": counts, **totals}
    if cells.column is not None and cells.column.inverse is not TRANSFORMS["identity"]:
        raise CallError(f"a pooled release of {cells.what} bins a table column, not a transform of one",
                        hint="bin the column itself")
    refined = tuple(sorted(set(cells.cuts) | set(history)))
    size = len(refined) + 1
    idx = cell_index(cells.x, refined)
    fields = {"counts": np.bincount(idx, minlength=size).astype(float)}
    for name, v in cells.sums.items():
        fields[f"sum:{name}"] = np.bincount(idx, weights=v, minlength=size)
    own_space = cells.subset
    if own_space:
        fields["column_counts"] = np.bincount(cell_index(cells.column.values, refined),  # type: ignore[union-attr]
                                              minlength=size).astype(float)
    return PooledPlan(refined, cells.cuts, tuple(history), (size,), own_space), {**fields, **totals}


def pooled_space(cuts: Sequence[Cut], refined: Sequence[Cut], history: Sequence[Cut], refined_counts: np.ndarray
                 ) -> tuple[dict[int, Cut], list[int]]:
    """A space of :func:`decide` from pooled counts between the ``refined`` cuts (``cuts`` and
    ``history`` among them): the history's cuts by rank, and the ranks of ``cuts``."""
    below = np.concatenate([[0], np.cumsum(np.rint(refined_counts).astype(np.int64))])  # below refined cut i: [i + 1]
    position = {cut: i for i, cut in enumerate(refined)}
    by_rank = {0: Cut(-np.inf, False), int(below[-1]): Cut(np.inf, False)}
    for cut in history:
        by_rank.setdefault(int(below[position[cut] + 1]), cut)
    return by_rank, [int(below[position[c] + 1]) for c in cuts]


def fits_pooled(cuts: Sequence[Cut], refined: Sequence[Cut], history: Sequence[Cut], refined_counts: np.ndarray,
                q: int) -> np.ndarray:
    """Which of ``cuts`` the gate keeps with ``history``, on pooled counts between all cuts (no moving)."""
    decided = decide([pooled_space(cuts, refined, history, refined_counts)], q, snap=False)
    return np.array([d is KEEP for d in decided], dtype=bool)


def release_pooled(cells: Cells, plan: PooledPlan, pooled: dict[str, np.ndarray], q: int
                   ) -> tuple[dict[str, Any], list[Cut]]:
    """The declaration's result from the pooled refined cells, decided with the pooled counts, and
    the cuts it released (for every site's history)."""
    counts = np.rint(pooled["counts"]).astype(np.int64)
    totals = {name[6:]: float(v[0]) for name, v in pooled.items() if name.startswith("total:")}
    if isinstance(cells, Categories):
        counts = counts.reshape(plan.shape)
        if np.any((counts > 0) & (counts < q)):
            raise _refuse_small(cells.what, q, pooled=True)
        return cells.render(Released((), counts, {}, pooled=True, totals=totals)), []
    position = {cut: i for i, cut in enumerate(plan.refined)}
    spaces = [pooled_space(plan.requested, plan.refined, plan.history, counts)]
    if plan.own_space:
        spaces.append(pooled_space(plan.requested, plan.refined, plan.history, pooled["column_counts"]))
    decided = decide(spaces, q, snap=True)
    if cells.policy == "refuse" and any(d is None for d in decided):
        raise _refuse_small_bin(cells.what, q, pooled=True)
    kept, dropped, moved = _effective(plan.requested, decided)
    # released cell k = the refined cells between kept cut k - 1 and kept cut k
    bounds = [0] + [position[c] + 1 for c in kept] + [len(plan.refined) + 1]
    merged_counts = np.array([counts[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
    sums = {name[4:]: np.array([pooled[name][a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
            for name in pooled if name.startswith("sum:")}
    released = Released(kept, merged_counts, sums, dropped, moved, pooled=True, totals=totals)
    return cells.render(released), list(kept)
