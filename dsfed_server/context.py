"""What an implementation sees of the site during one call.

Implementations get values, never nodes: the dispatcher has already resolved
symbols and ``table$column`` references against the caller's own workspace.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from functools import partial
from itertools import combinations
from typing import Any, Callable, Protocol

import numpy as np
import pandas as pd
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dsfed_core.calltree import Call, Column, Limits, Node, Symbol
from dsfed_server.catalog import Catalog
from dsfed_server.config import SiteConfig
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.declared import Declared, ExactSums, QuantilesOf
from dsfed_server.disclosure.differencing import ROWS, Rows, bits, few_levels
from dsfed_server.disclosure.expressions import Meaning, forms
from dsfed_server.disclosure.mechanisms import content_digest
from dsfed_server.disclosure.provenance import NO_TABLE, RootColumn, meaning, root_column, strata
from dsfed_server.disclosure.rules import Rules
from dsfed_server.modelframe import integer_view
from dsfed_server.models import ModelStore
from dsfed_server.rowsets import RowSet, subset_of
from dsfed_server.views import ColumnView, Held, read_value
from dsfed_core.errors import CallError
from dsfed_core.parser import parse
from dsfed_server.workspace import Session

# value attribute: what the site says of an assigned value (records it left out of a table, and why)
NOTE = "dsfed.note"
# table attribute: the counts of records a site table summarizes without holding them row by row (the
# ROC-GLM's counts over a site's positives), by what they count; every call that reads the table applies q
# to each (CallContext._read), this site's own or, in a pooled release, summed over the sites
RECORDS_BEHIND = "dsfed.records_behind"
# table attribute: the table holds counts at the resolution of cells released pooled (a site-derived reference's
# leaves), which this site's own records of a cell may not fill: only a pooled release reads it (CallContext._read)
POOLED_ONLY = "dsfed.pooled_only"


class Site(Protocol):
    """What a call reaches of its site (the service's :class:`~dsfed_server.service.calls.CallPipeline`): its name,
    configuration, rules and limits, its tables, its approved models, its secure-aggregation identity,
    and the calls nested in an argument."""

    name: str
    config: SiteConfig
    rules: Rules
    limits: Limits
    catalog: Catalog
    models: ModelStore
    identity: Ed25519PrivateKey

    def run_nested(self, session: Session, call: Call) -> Any:
        """A call inside another call's arguments (only assign-kind functions give values)."""


@dataclass
class CallContext:
    service: Site
    session: Session
    function: str
    guard: Guard
    # a relayed protocol (relay.py): its steps' parameters come from the sites, as in a pooled release,
    # but every count is checked here, per site, before anything is sealed
    relayed: bool = False
    # what this call gives reaches the analyst only inside a sum over at least secure_aggregation.min_sites
    # sites (a relayed protocol over that many; a pooled release always is)
    hidden: bool = False
    # a relayed protocol over other sites too: its iterates are the sum's, which their records move
    beside: bool = False

    @property
    def limits(self) -> Limits:
        return self.service.limits

    @property
    def site(self) -> str:
        return self.service.name

    @staticmethod
    def record_rows(*vectors: pd.Series, missing: bool = False) -> Rows | None:
        """Where the records with a value in every one of ``vectors`` (the same records, in the same
        order; ``missing``: all of them, a table counting missing values as a level) sit in the site
        table: for the release history's row sets; None when not known."""
        first = vectors[0].attrs.get(ROWS)
        if not isinstance(first, Rows) or first.index.size != len(vectors[0]):
            return None
        for other in vectors[1:]:
            rows = other.attrs.get(ROWS)
            if not (isinstance(rows, Rows) and rows.lineage == first.lineage
                    and (rows.index is first.index or np.array_equal(rows.index, first.index))):
                return None
        if missing:
            return first
        complete = np.ones(len(vectors[0]), dtype=bool)
        for vector in vectors:
            complete &= vector.notna().to_numpy()
        return first if complete.all() else Rows(first.lineage, first.index[complete], first.n_root)

    def summed(self, *vectors: pd.Series, squares: bool = False, products: bool = False,
               by: tuple[pd.Series, ...] = (), cells: np.ndarray | None = None) -> Generator[Declared, Any, None]:
        """The release gives exact sums of ``vectors`` over the records with a value in all of them and in
        the factors ``by`` (and of their squares, and of each two's product), in each of the groups
        ``cells`` numbers (one number a record, negative for a record of no group: a group withheld; None:
        all of them together): declared (:class:`~dsfed_server.disclosure.declared.ExactSums`, a function
        ``yield from`` it), the site counts the functions each group of records answers
        (:meth:`~dsfed_server.disclosure.checks.Guard.exact_sums`).
        A sum is over the records where the summed values are not 0 (a column that is 0 outside a cell,
        ``ifelse(cell, f(x), 0)``, is summed over the cell). A vector the site cannot write as a function
        of its roots counts as a function of its own values."""
        rows = self.record_rows(*vectors, *by)
        if rows is None:
            return
        complete = np.ones(len(vectors[0]), dtype=bool)
        for vector in (*vectors, *by):
            complete &= vector.notna().to_numpy()
        cores: list[_Summed] = []
        indicators: list[np.ndarray] = []
        for vector in vectors:
            found = self.meaning(vector)
            terms = found.summands() if found.summands is not None else ()
            indicators += _indicator_sets(terms, rows)
            if terms and all(len(support) == (rows.n_root + 7) // 8 for _, _, support, _ in terms):
                cores += [(core, roots, partial(_support, support, rows)) for core, roots, support, _ in terms]
                continue
            core, roots = self._written(vector, found)
            if core:  # a number is no function of a record
                cores.append((core, roots, partial(_nonzero, vector, complete)))
        functions = list(cores)
        if squares:  # of a sum of summands: each one's square and each two's product
            functions += [(f"^({core}, 2.0)", roots, nonzero) for core, roots, nonzero in cores]
            functions += [_product(a, b) for a, b in combinations(cores, 2)]
        elif products:
            functions += [_product(a, b) for a, b in combinations(cores, 2)]
        groups = None if cells is None else [cells == c for c in np.unique(cells) if c >= 0]
        levels = [level for vector in vectors
                  for level in few_levels(vector.to_numpy(dtype=float, na_value=np.nan)[complete], 2 if squares else 1)]
        if len(vectors) == 1 and not products:  # its sums over each value's records give their number alone
            yield ExactSums(rows, functions, groups, alone=self.own_sums, levels=levels, sets=indicators)
        else:  # the other columns' too
            yield ExactSums(rows, functions, groups, alone=self.own_sums, sets=levels + indicators)

    def indicator_sets(self, vector: pd.Series, rows: Rows) -> list[np.ndarray]:
        """The records each summand of a derived ``vector`` sums over through its 0/1 factors, and the others
        (:func:`_indicator_sets`)."""
        found = self.meaning(vector)
        return _indicator_sets(found.summands() if found.summands is not None else (), rows)

    def summand_sets(self, vector: pd.Series, rows: Rows) -> list[np.ndarray]:
        """The records of ``rows`` each summand of a derived ``vector`` sums over through its 0/1 factors (boolean
        over them; all of them for a summand without one), one per summand in the expression's order: as many at
        every site. Empty for a column without summands."""
        found = self.meaning(vector)
        return _over_sets(found.summands() if found.summands is not None else (), rows)

    def written(self, vector: pd.Series) -> tuple[str, tuple[str, ...]]:
        """``vector`` as a function of root columns: its core (:func:`~dsfed_server.disclosure.expressions.
        forms`; "" for a number) and the names of its roots. A column the site cannot write as a function of
        named roots (no provenance: its root is only its records' order, which every monotone transform
        shares) is a function of its own values, and such columns all count under one root. A column of
        categories is itself (its name), a function of no other."""
        if not pd.api.types.is_numeric_dtype(vector.dtype) or pd.api.types.is_bool_dtype(vector.dtype):
            return str(vector.name), (str(vector.name),)
        return self._written(vector, self.meaning(vector))

    @staticmethod
    def _written(vector: pd.Series, found: Meaning) -> tuple[str, tuple[str, ...]]:
        written = forms(found)
        unknown = any(r.table == NO_TABLE for r in found.roots)
        core = written[1] if written is not None and not unknown else "values#" + content_digest(
            vector.to_numpy(dtype=float, na_value=np.nan)).hex()[:24]
        return core, tuple(sorted(r.column if r.table != NO_TABLE else UNKNOWN_ROOT for r in found.roots))

    def quantiles(self, vector: pd.Series) -> Generator[Declared, Any, None]:
        """The release gives quantiles of ``vector`` (a monotone function of one root column) over its
        non-missing records: declared (:class:`~dsfed_server.disclosure.declared.QuantilesOf`, a function
        ``yield from`` it) and checked with the quantiles released before
        (:meth:`~dsfed_server.disclosure.checks.Guard.quantiles_of`)."""
        found = self.meaning(vector)
        written = forms(found)
        if written is not None and not any(r.table == NO_TABLE for r in found.roots):
            yield QuantilesOf(self.record_rows(vector), written[1], tuple(sorted(r.column for r in found.roots)))

    def root_column(self, vector: pd.Series) -> RootColumn | None:
        """The site table column ``vector``'s values come from (:mod:`~dsfed_server.disclosure.provenance`);
        in a pooled release on a table assigned with each site's own (``assignTable(tables = ...)``), named by
        the map's label, the same at every site (:mod:`~dsfed_server.disclosure.shared_tables`)."""
        root = root_column(self.service.catalog, vector)
        shared = self.session.shared_tables.get(root.table) if root is not None and self.pooled else None
        return root if shared is None or root is None else replace(root, table=shared)

    def strata(self, vector: pd.Series) -> tuple[np.ndarray, ...]:
        """The groups a derived column's few-valued roots and comparisons make
        (:func:`~dsfed_server.disclosure.provenance.strata`), for a release of this site alone; none in a pooled
        release."""
        return () if self.pooled else strata(self.service.catalog, vector)

    def meaning(self, vector: pd.Series) -> Meaning:
        """What ``vector`` is as a function of root columns (:func:`~dsfed_server.disclosure.provenance.meaning`)."""
        return meaning(self.service.catalog, vector)

    @property
    def pooled(self) -> bool:
        """This call is the first step of a pooled release (:mod:`dsfed_server.disclosure.relay`):
        what it returns is summed over the sites before anything is checked and released."""
        return self.guard.deferred is not None

    @property
    def own_sums(self) -> bool:
        """Whether the analyst reads this site's own sums: a per-site release, or a relayed protocol over
        fewer than ``secure_aggregation.min_sites`` sites (whose other sites may subtract theirs), not a
        pooled release nor a relayed one over min_sites sites or more."""
        return not (self.pooled or self.hidden)

    def parse_reference(self, text: str) -> Node:
        """Read a string such as ``"D$age"`` as a reference to a workspace value."""
        node = parse(text, self.limits)
        if not isinstance(node, (Symbol, Column, Call)):
            raise CallError(f"{text!r} does not name a symbol or a table$column")
        return node

    def note_source(self, table: str) -> None:
        """Record that this call reads the site table ``table`` (project.table): the values it
        assigns derive from it, and noisy releases are charged to it (privacy ledger)."""
        scope = self.session.scope
        if scope is not None:
            scope.sources.add(table)

    def _read(self, name: str, value: Any) -> Any:
        attrs = getattr(self.session.get(name), "attrs", {})
        if attrs.get(POOLED_ONLY):
            self.guard.pooled_only(name)
        for what, n in attrs.get(RECORDS_BEHIND, {}).items():
            self.guard.min_count(n, what)
        scope = self.session.scope
        if scope is not None:
            scope.symbols.add(name)
            scope.read(self.session.sources.get(name, frozenset()), value)
            self.guard.check_analyst_data()
        return value

    def subset(self, table: pd.DataFrame | RowSet, mask: np.ndarray, rows: Rows,
               columns: list[int] | None = None) -> RowSet | pd.DataFrame:
        """Rows ``mask`` and columns ``columns`` (positions) of ``table`` (a table, or a subset as a
        symbol holds it), which hold ``rows``, as the workspace keeps them: positions in the table a
        symbol holds (:mod:`~dsfed_server.rowsets`)."""
        return subset_of(self.session.symbols, table, mask, rows, columns)

    def site_subset(self, name: str) -> RowSet | None:
        """Symbol ``name``'s subset of site data as it is held (its rows, not built: for a function
        that builds only what it reads of it, ``Param(rows_only=True)``), read as :meth:`resolve`
        reads a symbol; None for any other value, or a subset of values the analyst supplied
        (resolved and checked as tables)."""
        value = self.session.get(name)
        if not isinstance(value, RowSet) or not self.session.sources.get(name):
            return None
        return self._read(name, value)

    def held(self, node: Symbol | Column) -> tuple[Held, Any]:
        """What symbol ``node`` names (or whose column it names) as the workspace holds it, for a
        value that keeps what it read (:mod:`~dsfed_server.views`), and what :meth:`resolve` reads."""
        name = node.name if isinstance(node, Symbol) else node.table
        held = Held(name, self.session.get(name), node.column if isinstance(node, Column) else None)
        return held, self._read(name, held.read())

    def resolve(self, node: Node) -> Any:
        if isinstance(node, (Symbol, Column)):
            return self.held(node)[1]
        if isinstance(node, Call):
            value = self.service.run_nested(self.session, node)
            return read_value(node.function, value)  # a subset or a view made for this call
        raise CallError(f"expected a symbol, table$column or call, got {node.to_text()!r}")

    @staticmethod
    def is_table(value: Any) -> bool:
        return isinstance(value, pd.DataFrame)

    @staticmethod
    def class_of(value: Any) -> str:
        return r_class(value)


# a summed function: its core, its root columns, and where (over the summed records) it is not 0
_Summed = tuple[str, tuple[str, ...], Callable[[], np.ndarray]]
UNKNOWN_ROOT = "(a column without provenance)"


def _product(a: _Summed, b: _Summed) -> _Summed:
    """The product of two summed functions."""
    first, second = sorted((a[0], b[0]))
    return f"*({first}, {second})", tuple(sorted({*a[1], *b[1]})), lambda: a[2]() & b[2]()


def _support(packed: bytes, rows: Rows) -> np.ndarray:
    """A summand's records (packed over the root table) among the records ``rows``."""
    return bits(np.frombuffer(packed, dtype=np.uint8), rows.n_root)[rows.index] == 1


def _indicator_sets(terms: tuple[tuple[str, tuple[str, ...], bytes, bytes], ...], rows: Rows) -> list[np.ndarray]:
    """The records each of a derived column's summands ``terms`` sums over through its 0/1 factors
    (:mod:`dsfed_server.summands`: the ones of ``D$high`` in ``D$y*D$high + D$age``), and the others of ``rows``,
    boolean over ``rows``: a sum of the column gives a sum over each, as a subset of them would. Empty for a column
    without summands, or one whose summands sum over all of ``rows``."""
    out: dict[bytes, np.ndarray] = {}
    for member in _over_sets(terms, rows):
        if member.any() and not member.all():
            out.setdefault(np.packbits(member).tobytes(), member)
    return [side for member in out.values() for side in (member, ~member)]


def _over_sets(terms: tuple[tuple[str, tuple[str, ...], bytes, bytes], ...], rows: Rows) -> list[np.ndarray]:
    """Each summand's records through its 0/1 factors among ``rows`` (boolean over them; all of them where its
    records are of another table)."""
    return [_support(over, rows) if len(over) == (rows.n_root + 7) // 8 else np.ones(rows.index.size, dtype=bool)
            for *_, over in terms]


def _nonzero(vector: pd.Series, complete: np.ndarray) -> np.ndarray:
    """Where ``vector`` is not 0 among its records ``complete``."""
    return vector.to_numpy(dtype=float, na_value=np.nan)[complete] != 0


def r_class(value: Any) -> str:
    """The R class name DataSHIELD clients expect for a workspace value (an object of another kind
    names its own in ``R_CLASS``: a fitted model is a ``glm``)."""
    own = getattr(type(value), "R_CLASS", None)
    if isinstance(own, str):
        return own
    if isinstance(value, (pd.DataFrame, RowSet)):
        return "data.frame"
    if isinstance(value, ColumnView):
        return "numeric"
    if isinstance(value, pd.Series):
        dtype = value.dtype
        if isinstance(dtype, pd.CategoricalDtype):
            return "factor"
        if pd.api.types.is_bool_dtype(dtype):
            return "logical"
        if pd.api.types.is_integer_dtype(dtype):
            return "integer"
        if pd.api.types.is_float_dtype(dtype):
            return "numeric"
        return "character"
    return type(value).__name__


def numeric(values: pd.Series, what: str = "x", *, whole: bool = False) -> np.ndarray:
    """A numeric vector as float64 with NaN for missing; refuses factors and text. ``whole``: a
    whole-number column with no missing value as it is stored instead (:func:`integer_view`)."""
    if not isinstance(values, pd.Series):
        raise CallError(f"{what} must be a vector, got {r_class(values)}")
    cls = r_class(values)
    if cls not in ("integer", "numeric", "logical"):
        raise CallError(f"{what} must be numeric, got a {cls} vector")
    view = integer_view(values) if whole else None
    return values.to_numpy(dtype=float, na_value=np.nan) if view is None else view
