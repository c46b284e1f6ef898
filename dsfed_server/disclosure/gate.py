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

**Per site** (:func:`release_local`). Interval cuts are decided in increasing order
(:func:`decide`); a cut is kept only if the cells on both sides of it, among the cuts kept so far
and every cut of the history this site keeps for the variable
(:mod:`dsfed_server.disclosure.history`), hold at least q of the site's records (and the secret
margin below); otherwise it is dropped and its cell merged with the next (the result lists the
dropped cuts: coarsened, never suppressed, so every record is counted). A cell with no record between two different
cuts is not released either (of such cuts one is kept, at random): that "empty" and "one record" answer alike
is what stops a bisection from reading a record's value. A cut that would leave a non-empty cell
below q refuses the whole release when the declaration asks to refuse rather than merge
(``bins.small_bin_policy = "refuse"`` for histograms). Categorical cells are not merged: one
non-zero cell below q refuses the table (as dsBase's ``tableDS``). The released cells' row sets
(:class:`LocalRelease`) are then audited by the site's guard against every subset and cell
released before from the same table, across columns
(:meth:`dsfed_server.disclosure.checks.Guard.release`, ``disclosure.subset_min_difference``).

**Pooled** (:func:`pooled_vector`, :func:`release_pooled`), under secure aggregation with
``secure_aggregation.pooled_thresholds``: every site bins its records on the *refined* cells
(the requested cuts together with every cut of the relayed history), the sites add the counts and
sums among themselves (:mod:`dsfed_server.disclosure.relay`), and each site takes the same
decisions on the pooled counts with the largest q of the sites: the analyst sees pooled cells,
so the pooled cells are what is checked (check what is released). A requested cut not kept moves to the history
cut nearest to it in value (or is dropped); the released cells are unions of refined cells, so no
second round is needed for the cells. The sites' random picks and margins use a key only they know:
the sum of a secret share every site adds to the pooled vector (:data:`NONCE`). Each site's records
of the released cells (:class:`PooledRelease`) are then audited against its earlier cells and subsets
of the table with the pooled counts (:meth:`dsfed_server.disclosure.checks.Guard.coarsened`),
and the sites release the result only if none of them objects (a second pooled step).

A fixed minimum count would still leak to an analyst who knows every record but one: which of
their cuts first reached q records shows the held-out record's rank. Every new cell therefore
holds q records plus a secret margin the site draws for it (:class:`Floor`,
``disclosure.cut_margin``); measured in ``tests/test_adversarial.py``. What remains: which cell
of at least q records holds that record, and its label from exact class counts (only noise hides
those).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Literal, Sequence

import numpy as np

from dsfed_server.disclosure.differencing import PooledCell, Rows, packed_rows
from dsfed_server.disclosure.mechanisms import content_digest, extended, keyed, rng_of, seeded_rng
from dsfed_server.disclosure.provenance import NO_TABLE, RootColumn, Transform, ordering_key
from dsfed_core.errors import CallError, DisclosureRefusal
from dsfed_server.rowbatches import row_batches

Policy = Literal["merge", "refuse"]


@dataclass(frozen=True, order=True)
class Cut:
    """A cut on a numeric variable: the records below it are those ``< value`` (``inclusive``
    False: cells ``[a, b)``) or ``<= value`` (``inclusive`` True: R's ``cut``/``hist``, ``(a, b]``)."""

    value: float
    inclusive: bool


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


def cell_sums(x: np.ndarray, cuts: Sequence[Cut], weights: dict[str, np.ndarray] | None = None
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per cell of ``cuts`` (:func:`cell_index`), the count of ``x``'s values and the sums of each of
    ``weights`` (vectors aligned with ``x``: outcomes, predictions, class indicators), a batch of rows
    at a time (:mod:`~dsfed_server.rowbatches`: no per-record index or float copy of a whole column)."""
    size = len(cuts) + 1
    counts = np.zeros(size)
    sums = {name: np.zeros(size) for name in weights or {}}
    for rows in row_batches(x.size):
        idx = cell_index(x[rows], cuts)
        counts += np.bincount(idx, minlength=size)
        for name, v in (weights or {}).items():
            sums[name] += np.bincount(idx, weights=v[rows], minlength=size)
    return counts, sums


@dataclass(frozen=True)
class Released:
    """The cells that leave the site, for a declaration's ``render``.

    ``cuts``: the cuts the cells lie between (intervals; ``()`` for categories); ``counts`` and
    ``sums[name]``: per cell (shape of the categories); ``dropped``: requested cuts the gate did
    not release (their cells merged with the next); ``moved``: requested cut -> the history cut it
    was released at; ``pooled``: the cells are pooled over the sites of a secure sum; ``totals``:
    the declaration's totals (summed over the sites when pooled); ``why``: the site's reason for
    what it dropped or moved, and what the analyst can do (:func:`coarsening_reason`; empty when
    released as requested)."""

    cuts: tuple[Cut, ...]
    counts: np.ndarray
    sums: dict[str, np.ndarray]
    dropped: tuple[Cut, ...] = ()
    moved: dict[Cut, Cut] = field(default_factory=dict)
    pooled: bool = False
    totals: dict[str, float] = field(default_factory=dict)
    why: str = ""

    def describe(self) -> dict[str, Any]:
        """What the gate did, in the result's JSON (``dropped``/``moved`` as cut values, ``why``)."""
        return {"pooled": self.pooled, "coarsened": bool(self.dropped or self.moved),
                "dropped": [c.value for c in self.dropped],
                "moved": [[a.value, b.value] for a, b in self.moved.items()], "why": self.why}


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
    # the groups (boolean over the table) a derived column's few-valued roots and comparisons make: released alone,
    # a cell is audited and kept with its part in each (:func:`~dsfed_server.disclosure.provenance.strata`)
    strata: tuple[np.ndarray, ...] = field(default=(), repr=False)
    # what the declaring function keeps once a pooled release of these cells passed every site's audit (the
    # release itself; never an attempt the audit may still coarsen, nor one the analyst left unfinished)
    on_pooled: Callable[[PooledRelease], None] | None = field(default=None, repr=False)
    _sorted_root: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if list(self.cuts) != sorted(self.cuts) or len(set(self.cuts)) != len(self.cuts):
            raise CallError(f"the {self.what}' edges must be strictly increasing")

    @property
    def history_key(self) -> tuple[str, str]:
        """Where this release's cuts are kept: the table column, or the values' own ordering."""
        return self.column.key if self.column is not None else (NO_TABLE, ordering_key(self.x))

    @property
    def root(self) -> np.ndarray:
        """Every value of the column the cuts are checked in, in the column's units: the table
        column's (its records with a value), or the values' own without provenance."""
        return self.x if self.column is None else self.column.values

    def root_values(self) -> np.ndarray:
        """:attr:`root`, sorted (a copy)."""
        return np.sort(self.root)

    @property
    def all_of_column(self) -> bool:
        """The values are every record of the table column with a value, untransformed, read from the table
        itself (not a subset of it: its condition is the analyst's, and with it whether it drops a record with a
        value) and dropping none but those the column misses: their intervals are the column's. A pooled
        release's sites agree on it (:func:`subset_share`)."""
        column = self.column
        return (column is not None and column.table_rows and column.transform.identity
                and self.x.size == column.values.size)

    @property
    def subset(self) -> bool:
        """The values are not the column's records, all of them (a subset, or records dropped)."""
        return self.column is not None and (not self.column.whole or self.x.size != self.column.values.size)

    def root_cuts(self) -> tuple[Cut, ...]:
        """The requested cuts in the column's units (:meth:`to_root`)."""
        return self.to_root(self.cuts)

    def to_root(self, cuts: Sequence[Cut]) -> tuple[Cut, ...]:
        """``cuts`` on these values in the column's units: a monotone transform maps each back to the cut
        on the column that parts the column's records exactly as it parts the vector's (:func:`root_cut`)."""
        if self.column is None or self.column.transform.identity:
            return tuple(cuts)
        transform = self.column.transform
        values = transform.inverse(np.array([c.value for c in cuts], dtype=float),
                                   np.array([c.inclusive for c in cuts]))
        if self._sorted_root is None:
            self._sorted_root = self.root_values()
        return tuple(root_cut(c, float(v), transform, self._sorted_root) for v, c in zip(values, cuts))

    def from_root(self, cuts: Sequence[Cut]) -> dict[Cut, Cut]:
        """Cuts on the column (a history) as cuts on these values, each mapped to the column's cut it
        comes from (a transform that is not defined at one leaves it out: no value lies there)."""
        if self.column is None or self.column.transform.identity:
            return {c: c for c in cuts}
        transform = self.column.transform
        out: dict[Cut, Cut] = {}
        for cut in sorted(cuts):
            if not np.isfinite(cut.value):
                out.setdefault(cut, cut)
                continue
            value = float(transform.forward(np.array([cut.value]))[0])
            if np.isfinite(value):
                out.setdefault(Cut(value, cut.inclusive if transform.increasing else not cut.inclusive), cut)
        return out

    def column_in_own_units(self) -> np.ndarray:
        """Every value of the column through the transform; a record where the transform is not defined
        at the end of the vector's range its side of the column lies at (-inf or +inf)."""
        column = self.column
        values = column.values  # type: ignore[union-attr]
        if column.transform.identity:  # type: ignore[union-attr]
            return values
        mapped = column.transform.forward(values)  # type: ignore[union-attr]
        missing = np.isnan(mapped)
        if missing.any():
            defined = values[~missing]
            low = values < (defined.min() if defined.size else np.inf)
            toward = low == column.transform.increasing  # type: ignore[union-attr]
            mapped[missing] = np.where(toward[missing], -np.inf, np.inf)
        return mapped


def root_cut(cut: Cut, value: float, transform: Transform, root: np.ndarray) -> Cut:
    """The cut on a root column (``root``: its values, sorted) that parts its records as ``cut`` parts
    their transformed values, near ``value`` (the transform's inverse at the cut). The inverse is
    computed in floating point: a record at the boundary could fall on the other side of it, and a cut
    kept in the history one record off would let a later cut difference that record out. So the
    records next to ``value`` are read through the transform, and the cut is placed between the last
    record on one side and the first on the other (a decreasing transform puts the vector's lower cell
    above: its root cut keeps the other records below, inclusively)."""
    if not np.isfinite(value) or root.size == 0:
        return Cut(value, False)
    at = int(np.searchsorted(root, value))
    lo, hi = max(0, at - 64), min(root.size, at + 64)
    mapped = transform.forward(root[lo:hi])
    known = np.isfinite(mapped)
    lower = (mapped <= cut.value) if cut.inclusive else (mapped < cut.value)
    below = lower if transform.increasing else ~lower  # the records the root cut keeps below it
    keep, other = np.flatnonzero(known & below), np.flatnonzero(known & ~below)
    if (keep.size and other.size and keep[-1] > other[0]) or (not other.size and hi < root.size) or (
            not keep.size and lo > 0):
        raise CallError("a cut on a transformed column could not be mapped back to its column",
                        hint="cut the column itself")
    last = float(root[lo + keep[-1]]) if keep.size else -np.inf
    first = float(root[lo + other[0]]) if other.size else np.inf
    if transform.increasing:  # strictly below the cut: last < cut <= first
        return Cut(value if last < value <= first else (first if np.isfinite(first) else np.nextafter(last, np.inf)),
                   False)
    return Cut(value if last <= value < first else (last if np.isfinite(last) else np.nextafter(first, -np.inf)),
               True)


@dataclass
class Categories:
    """Cells of one or two categorical variables: ``codes`` is each record's cell (flat index)."""

    codes: np.ndarray
    shape: tuple[int, ...]
    render: Callable[[Released], dict[str, Any]]
    what: str = "table"
    totals: dict[str, float] = field(default_factory=dict)
    rows: Rows | None = None  # the records of ``codes``: their positions in the table (None: not known)
    labels: tuple[tuple[str | None, ...], ...] = ()  # each axis' level labels: a pooled release sums cells
    # of the same labels only (SiteService checks that every site of the round declares these)


Cells = Intervals | Categories


def _refuse_small(what: str, q: int, pooled: bool) -> DisclosureRefusal:
    where = "pooled over the sites " if pooled else ""
    return DisclosureRefusal(
        f"{what} has a non-zero cell {where}below the minimum count of {q}",
        rule="disclosure.q_threshold",
        hint="merge categories, ask for fewer or wider bins, or use more records")


def margin_note(floor: Floor) -> str:
    """What the secret margin adds to the minimum, in a refusal or a coarsening's reason."""
    if floor.most <= 0 or floor.q <= 1:
        return ""
    return (f", or fewer than {floor.q} plus the site's secret margin of 0 to {floor.most} records "
            "(disclosure.cut_margin: drawn per cell with a key only the sites hold, so sites with other secrets "
            "may draw otherwise; which of the two applies is not said, as that would tell the cell's count)")


def _refuse_small_bin(what: str, floor: Floor, pooled: bool) -> DisclosureRefusal:
    """A release whose rules refuse rather than merge a small bin (``bins.small_bin_policy``)."""
    where = " pooled over the sites" if pooled else ""
    return DisclosureRefusal(
        f"{what} would have a non-empty bin with fewer than {floor.q} records{where}{margin_note(floor)}, alone or "
        "with the cuts released before on this variable by any analyst (an empty bin next to a cut released "
        "before counts as one: it would say that no record lies there)", rule="bins.small_bin_policy",
        hint="ask for fewer, wider bins")


def coarsening_reason(floor: Floor, history: Sequence[Cut], dropped: Sequence[Cut], moved: dict[Cut, Cut],
                      audited: int = 0, dominated: int = 0, kept_pooled: int = 0) -> str:
    """Why the gate dropped or moved requested cuts, and what the analyst can do: the rule of each
    kind of change, the site's ``q`` and margin, and whether cuts released before on the column (by
    any analyst, ``history``) took part. ``audited``, ``dominated``, ``kept_pooled``: of ``dropped``, those the
    row-set audit, the dominance rule, or a site's few records of a pooled cell dropped. It names no count the
    release does not show."""
    if not dropped and not moved:
        return ""
    earlier = sum(1 for c in history if np.isfinite(c.value))
    reasons = []
    if len(dropped) > audited + dominated + kept_pooled:
        reasons.append(
            f"merged: a bin beside each merged edge would hold fewer than {floor.q} records{margin_note(floor)}, or "
            "none (an empty bin between two edges is merged, so that 'empty' and 'one record' answer alike)"
            + (f", counted with the {earlier} cuts released before on this column by any analyst "
               "(disclosure.cut_history)" if earlier else ""))
    if audited:
        reasons.append(f"{audited} edge(s) merged as a bin would differ from a subset or cell released before from "
                       "this table in too few records (disclosure.subset_min_difference)")
    if kept_pooled:
        reasons.append(f"{kept_pooled} edge(s) merged as a site holds fewer than q records of a bin released pooled, "
                       "which the sites' releases alone would then give by subtraction "
                       "(secure_aggregation.pooled_thresholds)")
    if dominated:
        reasons.append(f"{dominated} edge(s) merged as a pooled bin would hold fewer than {floor.q} records outside "
                       "its largest sites (secure_aggregation.dominance_sites)")
    if moved:
        reasons.append("moved: an edge that would part the records at, or a few records from, a cut released "
                       "before on this column by any analyst is released at that cut (disclosure.cut_history)")
    remedy = "ask for fewer, wider bins" + (
        ", or for edges at the cuts released before (the edges moved to show them): the history is kept for "
        "every analyst and does not reset" if earlier else "")
    return "; ".join(reasons) + f". To do: {remedy}."


# --- the decisions on cuts --------------------------------------------------------------------


KEEP = "keep"  # decide(): the requested cut is released as it is
TWIN = "twin"  # decide(): dropped for a cut kept with no record between them (nothing held merges)

Pick = Callable[[Sequence[int]], int]  # decide(): which of a group of requested cuts (their indices) is kept


def first(members: Sequence[int]) -> int:
    """A :data:`Pick` for decisions whose kept cuts are not released as values."""
    return members[0]


def seeded_pick(key: bytes, *parts: str) -> Pick:
    """A :data:`Pick` the analyst cannot simulate: uniform over the group, seeded by a key only
    the sites hold (HMAC-SHA256 over ``parts`` and the group's position), so a repeat picks the same."""
    common = keyed(key, "gate pick", *parts)  # hashed once: the parts name every requested cut

    def pick(members: Sequence[int]) -> int:
        rng = rng_of(extended(common, ",".join(map(str, members))))
        return members[int(rng.integers(len(members)))]
    return pick


@dataclass(frozen=True)
class Agreed:
    """A pooled release's column as every site reads it, so that all take the same decisions: the
    hull of the ranges their data dictionaries declare (None: a site declares none) and whole
    numbers only if every site declares them. Each site sends its own in the sealed meta
    (:func:`dictionary_meta`), which the analyst cannot alter."""

    declared: tuple[float, float] | None
    integer: bool

    @classmethod
    def of(cls, metas: dict[str, dict[str, Any]]) -> Agreed:
        ranges, integer = [], True
        for site, meta in metas.items():
            span, whole = meta.get("range"), meta.get("integer")
            if not isinstance(whole, bool) or not (span is None or (
                    isinstance(span, list) and len(span) == 2
                    and all(isinstance(v, (int, float)) and np.isfinite(v) for v in span) and span[0] <= span[1])):
                raise CallError(f"pooled release: site {site}'s declared column range is not two increasing finite "
                                "numbers", hint=f"site {site}'s data dictionary needs fixing by its administrator")
            ranges.append(span)
            integer = integer and whole
        if any(span is None for span in ranges):
            return cls(None, integer)
        return cls((float(min(s[0] for s in ranges)), float(max(s[1] for s in ranges))), integer)


def dictionary_meta(column: RootColumn | None) -> dict[str, Any]:
    """What this site's data dictionary declares of a pooled release's column, for :class:`Agreed`."""
    declared = column.declared if column is not None else None
    return {"range": list(declared) if declared is not None else None,
            "integer": column is not None and column.integer}


@dataclass(frozen=True)
class Floor:
    """The fewest records a new cell may hold: ``q``, plus a margin of 0 to ``most`` records that
    the site draws for each cell (its ranks in the column) with a key the analyst does not hold
    (``disclosure.cut_margin``). A cell of ``q + most`` records or more always holds enough; a
    smaller one with probability 1 - 2^-(spare + 1), ``spare`` the records it holds beyond ``q``
    (a geometric margin, capped at ``most``). The same cell always draws the same margin, so
    asking again tells nothing new.

    Why: with a fixed minimum, an analyst who knows every record but one sees which requested cut
    first reached q records after the held-out one, and so its rank among the others. With a
    margin, every drop or keep of a cut is at most twice as likely with the record on one side of
    it than on the other, and where the minimum was reached no longer names a rank slot."""

    q: int
    most: int = 0
    key: bytes = field(default=b"", repr=False)
    parts: tuple[str, ...] = ()
    agreed: Agreed | None = None  # pooled: the column as every site's dictionary declares it
    dominance: int = 0  # pooled: a cell holds q records outside its this-many largest sites
    sites: int = 1  # pooled: the sites of the sum
    min_difference: int = 0  # pooled: the largest subset_min_difference the sites declared (0: none declared)

    def on(self, *parts: str) -> Floor:
        """The same floor, its margins drawn for the cells of one column (its history key)."""
        return replace(self, parts=self.parts + parts)

    def column(self, column: RootColumn | None) -> RootColumn | None:
        """The column whose declared range and whole numbers decide which cuts are public: this
        site's, or in a pooled release the one all sites agree on (:class:`Agreed`)."""
        if column is None or self.agreed is None:
            return column
        return replace(column, declared=self.agreed.declared, integer=self.agreed.integer)

    def holds(self, a: int, b: int) -> bool:
        """Whether a new cell between ranks ``a`` and ``b`` (records below each) holds enough."""
        spare = b - a - self.q
        if spare < 0 or spare >= self.most or self.q <= 1:
            return spare >= 0
        return spare >= min(_margin(self.key, self.parts, f"{a}:{b}"), self.most)


@functools.lru_cache(maxsize=1 << 16)
def _margin(key: bytes, parts: tuple[str, ...], cell: str) -> int:
    """The secret margin of a column's cell (its ranks, ``"a:b"``; :class:`Floor`): the same draw each time,
    kept for the next check of the same cell."""
    return int(seeded_rng(key, "gate margin", *parts, cell).geometric(0.5)) - 1


def decide(spaces: list[tuple[dict[int, Cut], list[int]]], floor: Floor, *, again: Sequence[bool],
           outside: Sequence[bool], pick: Pick, same: Sequence[Any] | None = None, ends: bool = True) -> list[Any]:
    """Per requested cut: :data:`KEEP`; :data:`TWIN`, not kept because another new cut with no
    record between them is; or None, not kept (it would leave fewer than q records to a cut used,
    or sit at the rank of a released cut without being it).

    ``spaces``: per space of records (the release's own records, the whole column they come from,
    pooled or not), the history's cuts by rank (records below the cut; 0 and n included) and the
    requested cuts' ranks in that space, in the requested (increasing) order.

    * A cut ``outside`` the declared range (no record can lie beyond it: public) is kept.
    * The others go in groups of equal ranks (no record between them). A group is kept if in every
      space the new cells on both sides of it, to the neighbouring used cuts (the history's and
      those kept so far), hold enough records (``floor``: at least q, and a secret margin when
      fewer than q + ``floor.most``), or it holds a cut released before (``again``) at the rank of
      a history cut: **every released cell holds at least q records** (a pooled release checks
      again the cells of the cuts released before: :func:`sound_cells`).
    * A cell with no record between two different cuts is never released inside the records'
      range: "empty" against "one record" would answer whether a record lies between them, and a
      bisection would read a score to any precision. Of a kept group one cut is released: the one
      released before, or the one ``pick`` chooses (uniform, with a key the analyst does not hold,
      so where the released cut lies between two records tells nothing of either).
    * At an end (no record below the group, or none above it) the group is kept whole if no cut was
      released at that end before: "nothing below t" is answered once, after which every cut there
      is at the rank of a released one, so a bisection for the smallest value stops at its first
      "empty" answer (it pins the value to a width w of its range W with probability about w / W).
      With q = 1 (single records released) a group is kept whole anywhere. Without ``ends`` (values of no
      table column: a combination of several columns, or values without provenance) an end is never answered
      so: each such combination is a column of its own with its own first answer, and one built so that a
      chosen record alone may lie at its end (``D$y*1000 - D$w`` with that record's ``w`` unique) would
      answer what the record holds; the group is then dropped, as a cell of one record would be.
    * Cuts with the same ``same`` key are one cut (no value the column may hold lies between them:
      :func:`canonical`) and are kept together."""
    used = [sorted(history) for history, _ in spaces]
    n = len(spaces[0][1])
    out: list[Any] = [None] * n
    k = 0
    while k < n:
        ranks = tuple(requested[k] for _, requested in spaces)
        group = [k]
        while group[-1] + 1 < n and tuple(requested[group[-1] + 1] for _, requested in spaces) == ranks:
            group.append(group[-1] + 1)
        k = group[-1] + 1
        if any(outside[i] for i in group):  # beside a cut outside the declared range: no record between
            for i in group:
                out[i] = KEEP if outside[i] or floor.q <= 1 else None  # q <= 1: nothing to hide between cuts
            continue
        before = next((i for i in group if again[i]), None)
        fits, end = True, floor.q <= 1  # single records may be released: nothing to hide between cuts
        for (history, _), u, r in zip(spaces, used, ranks):
            i = bisect.bisect_left(u, r)
            if i < len(u) and u[i] == r:
                at = history.get(r)
                released = at is not None and bool(np.isfinite(at.value))
                if floor.q <= 1 or (ends and before is None and not released and r in (u[0], u[-1])):
                    end = True
                else:
                    fits &= before is not None and released
            elif not (floor.holds(u[i - 1], r) and floor.holds(r, u[i])):
                fits = False
        if not fits:
            continue
        chosen = pick(group) if before is None else before
        for i in group:
            one = end or i == chosen or (same is not None and same[i] == same[chosen])
            out[i] = KEEP if one else TWIN if before is None else None
        for u, r in zip(used, ranks):
            if r not in u:
                bisect.insort(u, r)
    return out


def canonical(cut: Cut, column: RootColumn | None) -> Cut:
    """The cut as the column's declared values see it: on whole numbers ``< 51`` and ``<= 50.5`` are
    ``<= 50`` (the dictionary, not the data, says so)."""
    if column is None or not column.integer or not np.isfinite(cut.value):
        return cut
    return Cut(float(np.floor(cut.value) if cut.inclusive else np.ceil(cut.value) - 1), True)


def outside(cut: Cut, column: RootColumn | None) -> bool:
    """No record can lie below the cut, or none above it: the declared range says so (public)."""
    cut = canonical(cut, column)
    declared = column.declared if column is not None else None
    if not np.isfinite(cut.value):
        return True
    if declared is None:
        return False
    lo, hi = declared
    return cut.value < lo or (cut.value == lo and not cut.inclusive) or cut.value > hi or (
        cut.value == hi and cut.inclusive)


def ranks(sorted_x: np.ndarray, cuts: Sequence[Cut]) -> list[int]:
    """How many of the (sorted) values lie below each cut: those ``< value``, or ``<= value`` for an inclusive cut."""
    values = np.array([c.value for c in cuts], dtype=float)
    inclusive = np.array([c.inclusive for c in cuts], dtype=bool)
    return np.where(inclusive, np.searchsorted(sorted_x, values, "right"),
                    np.searchsorted(sorted_x, values, "left")).tolist()


def _history_ranks(sorted_x: np.ndarray, history: Sequence[Cut]) -> dict[int, Cut]:
    by_rank: dict[int, Cut] = {}
    ordered = sorted(history)
    for rank, cut in zip(ranks(sorted_x, ordered), ordered):
        by_rank.setdefault(rank, cut)
    by_rank.setdefault(0, Cut(-np.inf, False))
    by_rank.setdefault(int(sorted_x.size), Cut(np.inf, False))
    return by_rank


def _effective(requested: Sequence[Cut], decided: list[Any]) -> tuple[tuple[Cut, ...], tuple[Cut, ...], dict]:
    """The released cuts, the dropped ones and the moved ones, from :func:`decide`'s answers."""
    released, dropped, moved = [], [], {}
    for cut, d in zip(requested, decided):
        if d is KEEP:
            released.append(cut)
        elif d is None or d is TWIN:
            dropped.append(cut)
        else:
            moved[cut] = d
            released.append(d)
    return tuple(sorted(set(released))), tuple(dropped), moved


# --- per-site release ----------------------------------------------------------------------------


def site_pick(key: bytes, cells: Intervals) -> Pick:
    """The pick of a site (``key``: its secret) among requested cuts with no record between them."""
    return seeded_pick(key, *cells.history_key, *(repr(c) for c in cells.cuts))


def decide_local(cells: Intervals, floor: Floor, history: Sequence[Cut], pick: Pick,
                 exclude: Collection[Cut] = ()) -> list[Any]:
    """:func:`decide` for one site: in the release's own records (its cells), and in the column
    they come from, with every cut released before on it (``history``, in the column's units);
    ``floor``: keyed by the site's secret; ``pick``: :func:`site_pick`. Requested cuts in
    ``exclude`` are dropped before anything is decided."""
    x = np.sort(cells.x)
    # values of the whole column as it is (or without provenance) are the column's: sorted alike
    same_values = cells.column is None or (not cells.subset and cells.column.transform.identity)
    root = x if same_values else cells.root_values()
    chosen = [i for i, c in enumerate(cells.cuts) if c not in exclude]
    root_cuts = cells.root_cuts()
    column = cells.column
    released = {canonical(h, column) for h in history}
    same = [canonical(root_cuts[i], column) for i in chosen]
    decided = decide([(_history_ranks(x, ()), ranks(x, [cells.cuts[i] for i in chosen])),
                      (_history_ranks(root, history), ranks(root, [root_cuts[i] for i in chosen]))],
                     floor.on(*cells.history_key),
                     again=[c in released for c in same], outside=[outside(cells.cuts[i], column) for i in chosen],
                     pick=pick, same=same, ends=column is not None)
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


Snap = Callable[[Intervals, Floor, Sequence[Cut], list[Any], Collection[Cut]], tuple[list[Any], dict[Cut, Cut]]]


def release_local(cells: Cells, floor: Floor, history: Sequence[Cut] = (), exclude: Collection[Cut] = (),
                  snap: Snap | None = None, kept_pooled: Collection[Cut] = ()) -> LocalRelease:
    """The declaration's result as this site releases it alone (module docstring), with the cuts it
    released and its cells' row sets; ``floor``: keyed by the site's secret (:func:`decide_local`);
    ``snap``: moves a dropped cut onto an earlier one where it may
    (:func:`~dsfed_server.disclosure.snapping.snap_dropped`; None: dropped cuts stay dropped); ``kept_pooled``: of
    ``exclude``, the cuts dropped so that a site's few records of a pooled cell stay pooled."""
    q = floor.q
    if isinstance(cells, Categories):
        size = int(np.prod(cells.shape))
        counts = np.bincount(cells.codes, minlength=size).reshape(cells.shape)
        if np.any((counts > 0) & (counts < q)):
            raise _refuse_small(cells.what, q, pooled=False)
        return LocalRelease(cells.render(Released((), counts, {}, totals=dict(cells.totals))), [],
                            _row_sets(cells.rows, cells.codes, size))
    decided = decide_local(cells, floor, history, site_pick(floor.key, cells), exclude)
    if cells.policy == "refuse" and any(d is None for d in decided):
        raise _refuse_small_bin(cells.what, floor, pooled=False)
    decided, snapped = snap(cells, floor, history, decided, exclude) if snap is not None else (decided, {})
    kept, dropped, moved = _effective(cells.cuts, decided)
    idx = cell_index(cells.x, kept)
    size = len(kept) + 1
    counts = np.bincount(idx, minlength=size)
    sums = {name: np.bincount(idx, weights=v, minlength=size) for name, v in cells.sums.items()}
    root_of = {**dict(zip(cells.cuts, cells.root_cuts())), **snapped}
    why = coarsening_reason(floor, history, dropped, moved,
                            audited=sum(1 for c in dropped if c in exclude and c not in kept_pooled),
                            kept_pooled=sum(1 for c in dropped if c in kept_pooled))
    return LocalRelease(cells.render(Released(kept, counts, sums, dropped, moved, totals=dict(cells.totals), why=why)),
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
    roots: dict[Cut, Cut] = field(default_factory=dict)  # a history cut in the values' units -> the column's


COLUMN_COUNTS = "column_counts"  # a pooled vector's field: per refined cell, the column's records (all of them)
SUBSET = "subset"  # a pooled vector's field: the sites whose records are not all of the column's (subset_share)
SQUARES = "squares"  # a pooled vector's field: per cell, this site's count squared (scaled by SQUARE_UNIT)
SQUARE_UNIT = 2.0 ** 20  # squares travel in this unit, so a cell of 10^8 records still fits the fixed point


def subset_share(cells: Intervals) -> np.ndarray:
    """This site's share of :data:`SUBSET`: 1 where its values have a column and are not all of its records
    (:attr:`Intervals.all_of_column`). Summed, every site of a pooled release knows alike whether the cells are
    intervals of the column at every site (a cut history keeps them apart) or a subset's somewhere."""
    return np.asarray([float(cells.column is not None and not cells.all_of_column)])


def squares(counts: np.ndarray, dominance: bool) -> np.ndarray:
    """This site's share of :data:`SQUARES`: its count in each cell, squared, where its rules apply the
    dominance rule; zeros otherwise (no site learns more of the others than the rule needs: a round in
    which some sites apply it and some do not is refused, :func:`pooled_floor`)."""
    counts = np.asarray(counts, dtype=float)
    return counts ** 2 / SQUARE_UNIT if dominance else np.zeros_like(counts)


def largest_sites(pooled_squares: np.ndarray, floor: Floor) -> np.ndarray:
    r"""Per cell, an upper bound on the records its ``floor.dominance`` largest sites hold together:
    :math:`\sum_{k\ \mathrm{largest}} c_s \le \sqrt{k \sum_s c_s^2}` (Cauchy-Schwarz), from the
    pooled sum of the squares (each site's rounding to the fixed point allowed for)."""
    total = np.maximum(np.asarray(pooled_squares, dtype=float), 0.0) * SQUARE_UNIT + floor.sites
    return np.sqrt(floor.dominance * total)


def dominated_group(counts: np.ndarray, keep: Sequence[bool], pooled_squares: np.ndarray, floor: Floor) -> int | None:
    """The first group holding fewer than q records outside its ``floor.dominance`` largest sites, of the
    groups between the breaks ``keep`` marks (one per break between the groups of pooled ``counts``; a
    group the breaks not kept merge spans the groups it joins): the bound of :func:`largest_sites` per
    group, summed over the groups it joins. None: none is, or the rule is off."""
    if not floor.dominance:
        return None
    n = np.rint(np.asarray(counts, dtype=float)).astype(np.int64)
    largest = largest_sites(pooled_squares, floor)
    bounds = [0] + [i + 1 for i, k in enumerate(keep) if k] + [n.size]
    for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        count = n[a:b].sum()
        if count > 0 and count - min(largest[a:b].sum(), count) < floor.q:
            return j
    return None


def _refuse_dominated(what: str, floor: Floor) -> DisclosureRefusal:
    sites = "site" if floor.dominance == 1 else f"{floor.dominance} sites"
    return DisclosureRefusal(
        f"{what} would have a pooled cell holding fewer than {floor.q} records outside its largest contributing "
        f"{sites}: that cell would be one site's records with a few of the others', which a site that made up its "
        "records, with the analyst, could subtract", rule="secure_aggregation.dominance_sites",
        hint="ask for fewer, wider bins, or per site")


def _undominated(cells: Intervals, plan: PooledPlan, kept: list[Cut], counts: np.ndarray,
                 pooled_squares: np.ndarray, floor: Floor) -> tuple[list[Cut], list[Cut]]:
    """The kept cuts after merging every released cell that holds fewer than q records outside its
    largest sites (``secure_aggregation.dominance_sites``; merged with the cell above it, the top one
    with the one below), and the cuts so dropped; refused where the release asks to refuse rather than
    merge, or when the whole range is such a cell."""
    bound = largest_sites(pooled_squares, floor)
    position = {cut: i for i, cut in enumerate(plan.refined)}
    kept, dropped = list(kept), []
    edges = [0] + [position[c] + 1 for c in kept] + [len(plan.refined) + 1]

    def short(a: int, b: int) -> bool:
        total = counts[a:b].sum()
        return bool(total > 0 and total - min(bound[a:b].sum(), total) < floor.q)

    bad = [short(a, b) for a, b in zip(edges[:-1], edges[1:])]  # per cell between the kept cuts
    while True in bad:
        if cells.policy == "refuse" or not kept:
            raise _refuse_dominated(cells.what, floor)
        i = bad.index(True)
        j = i if i < len(kept) else i - 1  # the cut above the cell, or below the top one
        dropped.append(kept.pop(j))
        del edges[j + 1]
        bad[j:j + 2] = [short(edges[j], edges[j + 1])]  # the two cells merged; the others as they were
    return kept, dropped


def pooled_vector(cells: Cells, history: Sequence[Cut] = (), *, dominance: bool = False
                  ) -> tuple[PooledPlan, dict[str, np.ndarray]]:
    """This site's counts and sums on the refined cells (summed over sites, never released as such).
    ``history``: every cut released before on the column, at any site of the round (relayed);
    ``dominance``: this site applies ``secure_aggregation.dominance_sites`` (its squared counts go in)."""
    totals = {f"total:{name}": np.array([float(v)]) for name, v in cells.totals.items()}
    if isinstance(cells, Categories):
        counts = np.bincount(cells.codes, minlength=int(np.prod(cells.shape))).astype(float)
        return PooledPlan((), (), (), cells.shape), {"counts": counts, SQUARES: squares(counts, dominance),
                                                            **totals}
    roots = cells.from_root(history)  # a transformed column's history in the values' units (every site alike)
    own_history = tuple(sorted(roots))
    refined = tuple(sorted(set(cells.cuts) | set(own_history)))
    size = len(refined) + 1
    counts, sums = cell_sums(cells.x, refined, cells.sums)
    fields = {"counts": counts, SQUARES: squares(counts, dominance), **{f"sum:{name}": v for name, v in sums.items()}}
    # the column's records per cell, which a subset's differ from (records dropped: a condition, a missing value
    # in another column), and whether they differ; every site sends both, so the vectors have one length
    fields[COLUMN_COUNTS] = cell_sums(cells.column_in_own_units(), refined)[0] if cells.subset else counts.copy()
    fields[SUBSET] = subset_share(cells)
    return PooledPlan(refined, cells.cuts, own_history, (size,), roots), {**fields, **totals}


def pooled_space(cuts: Sequence[Cut], refined: Sequence[Cut], history: Sequence[Cut], refined_counts: np.ndarray
                 ) -> tuple[dict[int, Cut], list[int]]:
    """A space of :func:`decide` from pooled counts between the ``refined`` cuts (``cuts`` and
    ``history`` among them): the history's cuts by rank, and the ranks of ``cuts``."""
    below = np.concatenate([[0], np.cumsum(np.rint(refined_counts).astype(np.int64))])  # below refined cut i: [i + 1]
    position = {cut: i for i, cut in enumerate(refined)}
    by_rank: dict[int, Cut] = {}
    for cut in sorted(history):
        by_rank.setdefault(int(below[position[cut] + 1]), cut)
    by_rank.setdefault(0, Cut(-np.inf, False))
    by_rank.setdefault(int(below[-1]), Cut(np.inf, False))
    return by_rank, [int(below[position[c] + 1]) for c in cuts]


def fits_pooled(cuts: Sequence[Cut], refined: Sequence[Cut], history: Sequence[Cut], refined_counts: np.ndarray,
                floor: Floor, key: tuple[str, str]) -> np.ndarray:
    """Which of ``cuts`` (site-derived, on the site's grid) the gate keeps with ``history`` of the
    column ``key``, on pooled counts between all cuts (no moving; of cuts with no record between,
    the first)."""
    released = set(history)
    decided = decide([pooled_space(cuts, refined, history, refined_counts)], floor.on(*key),
                     again=[c in released for c in cuts],
                     outside=[outside(c, None) for c in cuts], pick=first, ends=key[0] != NO_TABLE)
    return np.array([d is KEEP for d in decided], dtype=bool)


NONCE = "gate:nonce"  # a pooled vector's field: every site's secret share of the key of the gate's draws


def nonce(key: bytes, column: tuple[str, str]) -> np.ndarray:
    """This site's share of the pooled key of a column's margins and picks (:data:`NONCE`): only the
    sites see the sum of the shares. The same for every call on the column (a site pools a table
    with one set of peers only), so a cell asked for again draws the same margin."""
    return seeded_rng(key, "gate nonce", *column).integers(0, 2 ** 16, size=8).astype(float)


def pooled_floor(metas: dict[str, dict[str, Any]], pooled: dict[str, np.ndarray]) -> Floor:
    """The floor the sites of a pooled release share, from what each declared in its sealed meta:
    the largest q, margin and dominance rule of the sites, the column they agree on (a release binning a column),
    keyed by the pooled :data:`NONCE` (removed from ``pooled``; without one, no margin)."""
    q = max(_declared(site, meta, "q", "q_threshold", 1) for site, meta in metas.items())
    most = max(_declared(site, meta, "margin", "cut_margin", 0) for site, meta in metas.items())
    rules = {site: _declared(site, meta, "dominance", "dominance_sites", 0) for site, meta in metas.items()}
    dominance = max(rules.values())
    if dominance and min(rules.values()) == 0:
        off = ", ".join(sorted(site for site, k in rules.items() if k == 0))
        raise DisclosureRefusal(
            f"a site of the round applies the dominance rule, which needs every site's squared counts; {off} "
            "does not apply it", rule="secure_aggregation.dominance_sites",
            hint="ask per site, or ask the sites' boards to agree on dominance_sites")
    differ = max(_declared(site, meta, "min_difference", "subset_min_difference", 1) if "min_difference" in meta
                 else 0 for site, meta in metas.items())
    agreed = Agreed.of(metas) if all("range" in meta for meta in metas.values()) else None
    shares = pooled.pop(NONCE, None)
    if shares is None:
        return Floor(q, agreed=agreed, dominance=dominance, sites=len(metas), min_difference=differ)
    return Floor(q, most, content_digest(np.rint(shares)), agreed=agreed, dominance=dominance, sites=len(metas),
                 min_difference=differ)


def _declared(site: str, meta: dict[str, Any], name: str, key: str, lowest: int) -> int:
    value = meta.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not lowest <= value <= 1000:
        raise CallError(f"pooled release: site {site}'s declared {key} is not a whole number in {lowest}..1000",
                        hint=f"site {site} runs another version of dsfed; its administrator should update it")
    return value


def _nearest_by_value(cut: Cut, history: Sequence[Cut]) -> Cut | None:
    """The finite history cut nearest to ``cut`` in value (ties: the lower), or None."""
    finite = [h for h in history if np.isfinite(h.value)]
    return min(finite, key=lambda h: (abs(h.value - cut.value), h), default=None)


def sound_cells(refined: Sequence[Cut], requested: Sequence[Cut], counts: np.ndarray, floor: Floor,
                checked: set[Cut], decided: list[Any]) -> list[Any]:
    """``decided`` (:func:`decide`'s answers, the cuts not kept maybe moved to a history cut) without
    the cuts released before, or moved to one, that bound a pooled cell of too few records
    (:class:`Floor`; an empty cell at an end is the end's answer): such a cut is dropped instead (its
    cell merged with the next). ``checked``: the requested cuts :func:`decide` kept on the pooled
    counts themselves. A cut released before was checked only where it was released: one public at a
    site (beyond its declared range, no record there) or kept on one site's records can lie a few
    pooled records from the next cut. ``refined``: the cuts the pooled ``counts`` lie between (``requested``
    and every cut ``decided`` moves to among them); ``decided``: one answer per ``requested`` cut."""
    position = {cut: i for i, cut in enumerate(refined)}
    below = np.concatenate([[0], np.cumsum(counts)])
    n = int(below[-1])
    out = list(decided)
    while True:
        kept = sorted({c for c, d in zip(requested, out) if d is KEEP} | {d for d in out if isinstance(d, Cut)})
        ranks = [0] + [int(below[position[c] + 1]) for c in kept] + [n]
        def sound(a: int, b: int) -> bool:
            return floor.holds(a, b) or (a == b and a in (0, n))

        unsound = {c for j, c in enumerate(kept) if c not in checked and not (
            sound(ranks[j], ranks[j + 1]) and sound(ranks[j + 1], ranks[j + 2]))}
        if not unsound:
            return out
        out = [None if (d is KEEP and c in unsound) or (isinstance(d, Cut) and d in unsound) else d
               for c, d in zip(requested, out)]


@dataclass(frozen=True)
class PooledRelease:
    """A pooled release as one site sees it: the result (the same at every site), the cuts released (in
    the column's units, for the history) and, per released cell, this site's records of it (boolean over
    the table; empty when the records are not known) with the cell's pooled count."""

    result: Any
    root_cuts: list[Cut]
    own_cells: list[PooledCell]
    cuts: tuple[Cut, ...] = ()  # the cuts between the released cells, in the values' units (none: categories)
    n_cells: int = 0  # how many cells were released
    shape: tuple[int, ...] = ()  # of a table of categories: its shape (the cells in C order)
    parts: tuple[np.ndarray, ...] = ()  # this site's records (packed) at 1 of each 0/1 quantity summed per cell
    column: str = ""  # the column the cells are intervals of (over all its records or a subset's); "": none


def own_parts(rows: Rows | None, sums: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """This site's records (packed over the table) at 1 of each quantity of ``sums`` that is 0 or 1 on every
    record (the events), one of a quantity and its complement: a pooled release gives its sum per cell, which is
    the number of the cell's records among them."""
    if rows is None:
        return ()
    out: dict[bytes, None] = {}
    for values in map(np.asarray, sums.values()):
        if values.size == rows.index.size and np.isin(values, (0, 1)).all():
            ones, rest = packed_rows(rows, values == 1), packed_rows(rows, values != 1)
            if ones is not None and rest not in out:
                out[ones] = None
    return tuple(np.frombuffer(packed, dtype=np.uint8) for packed in out)


def own_cells(rows: Rows | None, cell_of_record: np.ndarray, counts: np.ndarray, column: str = ""
              ) -> list[PooledCell]:
    """Per cell, this site's records of it over the table (none too; packed, 1 bit a record: a release of
    many cells over a large table holds them all until the audit) with the cell's pooled count;
    ``column``: the column the cells are intervals of, over all its records ("": other cells)."""
    if rows is None or rows.index.size != cell_of_record.size:
        return []
    out = []
    member = np.zeros(rows.n_root, dtype=bool)
    for k, count in enumerate(np.ravel(counts)):
        member[:] = False
        member[rows.index[cell_of_record == k]] = True
        out.append(PooledCell(np.packbits(member), int(count), column))
    return out


def interval_column(cells: Intervals, subset: bool) -> str:
    """The column ``cells`` are intervals of, over all its records; "" for a subset (``subset``: pooled, some site's
    records of the cells are not all of its column's) or values without one. Alike at every site of a pooled
    release: the sites pair their cells with earlier ones by it (:func:`~.differencing.shared_pairs`)."""
    return "" if cells.column is None or subset else "$".join(cells.history_key)


def release_pooled(cells: Cells, plan: PooledPlan, pooled: dict[str, np.ndarray], floor: Floor,
                   exclude: Collection[Cut] = (), kept_pooled: Collection[Cut] = ()) -> PooledRelease:
    """The declaration's result from the pooled refined cells, decided with the pooled counts and
    the sites' shared ``floor`` (:func:`pooled_floor`), the cuts it released, in the column's units
    (for every site's history), and this site's records of each released cell. Cuts in ``exclude``
    (effective cuts a row-set audit of an earlier attempt objected to, or, ``kept_pooled``, the check that a site's
    few records of a cell stay pooled) are dropped, their cells merged."""
    q = floor.q
    counts = np.rint(pooled["counts"]).astype(np.int64)
    totals = {name[6:]: float(v[0]) for name, v in pooled.items() if name.startswith("total:")}
    if isinstance(cells, Categories):
        counts = counts.reshape(plan.shape)
        if np.any((counts > 0) & (counts < q)):
            raise _refuse_small(cells.what, q, pooled=True)
        if floor.dominance:
            others = counts - np.minimum(largest_sites(pooled[SQUARES], floor).reshape(plan.shape), counts)
            if np.any((counts > 0) & (others < q)):
                raise _refuse_dominated(cells.what, floor)
        return PooledRelease(cells.render(Released((), counts, {}, pooled=True, totals=totals)), [],
                             own_cells(cells.rows, cells.codes, counts), (), int(counts.size), plan.shape)
    position = {cut: i for i, cut in enumerate(plan.refined)}
    spaces = [pooled_space(plan.requested, plan.refined, plan.history, counts)]
    own_space = float(np.ravel(pooled[SUBSET])[0]) > 0.5  # some site's records are not all of its column's
    if own_space:
        spaces.append(pooled_space(plan.requested, plan.refined, plan.history, pooled[COLUMN_COUNTS]))
    column = floor.column(cells.column)
    released_before = {canonical(h, column) for h in plan.history}
    same = [canonical(c, column) for c in plan.requested]
    again = [c in released_before for c in same]
    public = [outside(c, column) for c in plan.requested]
    on_column = floor.on(*cells.history_key)  # the margins drawn for this column's cells
    decided = decide(spaces, on_column, again=again, same=same, outside=public, ends=column is not None,
                     pick=seeded_pick(floor.key, *(repr(c) for c in plan.requested)))  # alike at every site
    checked = {c for c, d, a, o in zip(plan.requested, decided, again, public) if d is KEEP and (o or not a)}
    if cells.policy == "refuse" and any(
            d is None for d in sound_cells(plan.refined, plan.requested, counts, on_column, checked, decided)):
        raise _refuse_small_bin(cells.what, floor, pooled=True)
    if not own_space:  # a cut not kept moves to the released cut nearest in value, if any
        decided = [d if d is KEEP else _nearest_by_value(c, plan.history) or d for c, d in zip(plan.requested, decided)]
    decided = sound_cells(plan.refined, plan.requested, counts, on_column, checked, decided)
    kept, dropped, moved = _effective(plan.requested, decided)
    dominated = 0
    if floor.dominance:
        still, merged = _undominated(cells, plan, list(kept), counts, pooled[SQUARES], floor)
        gone = set(merged)
        kept = tuple(still)
        more = tuple(c for c in plan.requested if c in gone or moved.get(c) in gone)
        dropped, dominated = dropped + more, len(more)
        moved = {c: m for c, m in moved.items() if m not in gone}
    audited = pooled_share = 0
    if exclude:
        gone = set(exclude)
        kept = tuple(c for c in kept if c not in gone)
        more = tuple(c for c in plan.requested if (c in gone or moved.get(c) in gone) and c not in dropped)
        pooled_share = sum(1 for c in more if c in kept_pooled or moved.get(c) in kept_pooled)
        dropped, audited = dropped + more, len(more) - pooled_share
        moved = {c: m for c, m in moved.items() if m not in gone}
    # released cell k = the refined cells between kept cut k - 1 and kept cut k
    bounds = [0] + [position[c] + 1 for c in kept] + [len(plan.refined) + 1]
    merged_counts = np.array([counts[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
    sums = {name[4:]: np.array([pooled[name][a:b].sum() for a, b in zip(bounds[:-1], bounds[1:])])
            for name in pooled if name.startswith("sum:")}
    released = Released(kept, merged_counts, sums, dropped, moved, pooled=True, totals=totals,
                        why=coarsening_reason(floor, plan.history, dropped, moved, audited=audited,
                                              dominated=dominated, kept_pooled=pooled_share))
    new = [c for c in kept if c not in plan.roots]
    in_root = dict(zip(new, cells.to_root(new)))  # this site's records parted exactly so, for its history
    own = own_cells(cells.rows, cell_index(cells.x, kept), merged_counts, interval_column(cells, own_space))
    return PooledRelease(cells.render(released), [plan.roots.get(c) or in_root[c] for c in kept], own, tuple(kept),
                         len(kept) + 1, parts=own_parts(cells.rows, cells.sums),
                         column=interval_column(cells, False))
