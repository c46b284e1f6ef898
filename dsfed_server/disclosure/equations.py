"""Sums of many functions over one group of records: a group answers fewer equations than it holds values.

The cut history and the row-set audit (:mod:`dsfed_server.disclosure.differencing`) keep every group
of records the site releases sums over at q records or more, and no record in the span of the groups.
They treat a sum as one number about a group. But a group of *m* records summed through *m* different
functions of one column gives *m* equations in its *m* values: the power sums
:math:`\\sum x_i, \\sum x_i^2, \\ldots, \\sum x_i^m` are the coefficients of the polynomial whose roots the
values are (Newton's identities), and ``exp(k*x)``, ``log(x + c)`` or ``sqrt(x)`` serve as well. Each
function is gentle (:mod:`~dsfed_server.disclosure.expressions` passes it), each group holds q records,
and still the analyst reads every value of the group; with sums of products of two columns
(``corDS``) the values of different columns pair up into records. This is the classical moment attack
on statistical databases (Denning & Schlörer 1983): what protects the values is that the equations
are fewer than the unknowns.

So the site keeps, per table and for all analysts together, which **function** it summed over which
**row set** (the function as text up to a straight line in it, :func:`~dsfed_server.disclosure.
expressions.forms`: the sum of ``2*log(x) + 1`` is the sum of ``log(x)``; a derived column's sum is
the sum of its terms' sums, each over the records where that term is not 0), and refuses a release
that would let some group *G* of records answer more than :math:`\\lfloor \\rho |G| \\rfloor` functions
of a column beyond its **second moments** (rule ``disclosure.sums_per_record``, :math:`\\rho`). The
second moments -- the column itself, its square, its product with another column -- are what means,
variances and covariances release, which every group that passed the gate may answer (DataSHIELD's
summaries of any q records); beyond them, a group answers at most a share :math:`\\rho` of its values.
A function of several columns counts for each of them.

A function's sums over its row sets give its sum over every group whose indicator lies in their linear
span (Chin & Ozsoyoglu 1982). The groups checked are the row sets themselves, the difference of every
two nested ones (the whole table less a subset), and every **atom** of the row sets (records that
belong to the same sets) whose indicator lies in the span of all of them: a function counts on a group
when the group's indicator lies in the span of that function's own row sets. Computed over the atoms,
as the row-set audit is.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from dsfed_server.disclosure.differencing import MAX_AUDIT_WORK, AuditTooLarge, _atoms, _incidence

RULE = "disclosure.sums_per_record"
APART = "apart: "
"""Begins the name of a function of a fit's end that the other sites of a sum, whose counts afford much more, could take
out of the sum with their own parts (:meth:`~dsfed_server.disclosure.checks.Guard.peers_outnumber`): it counts a
share of a function (:func:`too_many`'s ``apart``)."""


@dataclass(frozen=True)
class Summed:
    """A function (its core, :func:`~dsfed_server.disclosure.expressions.forms`) of root columns
    ``roots``, summed exactly over the records ``rows`` of a table (packed by ``np.packbits``)."""

    function: str
    roots: tuple[str, ...]
    rows: bytes


def second_moment(function: str, roots: tuple[str, ...]) -> bool:
    """Whether ``function`` is a column itself, its square, or the product of two columns: what the
    means, variances and covariances of a group release, which every group that passed the gate may
    answer (DataSHIELD's summaries of any q records)."""
    if len(roots) == 1:
        return function in (roots[0], f"^({roots[0]}, 2.0)")
    return len(roots) == 2 and function == f"*({roots[0]}, {roots[1]})"


def allowed(size: float, per_record: float) -> int:
    """How many functions of a column beyond its second moments a group of ``size`` records may answer."""
    return int(np.floor(per_record * size + 1e-9))


def too_many(earlier: list[Summed], new: list[Summed], n: int, per_record: float, apart: float = 1.0
             ) -> tuple[str, ...] | None:
    """None if the sums ``new`` may be released after the sums ``earlier`` over a table of ``n``
    records, else the column (root name) some group of records would answer too many functions of
    (module docstring). A function named :data:`APART` counts ``apart`` of one: the analyst takes it out of a
    sum only with as many functions of each other site's records, counted there, so a group answers at most
    ``per_record / apart`` such functions of its values in all. Raises
    :class:`~dsfed_server.disclosure.differencing.AuditTooLarge` when the row sets are too many over too many atoms
    to check."""
    seen = {(s.function, s.rows) for s in earlier}
    fresh = [s for s in new if (s.function, s.rows) not in seen and not second_moment(s.function, s.roots)]
    if not fresh:
        return None
    touched = {c for s in fresh for c in s.roots}  # only functions of these columns are counted
    everything = [s for s in earlier if touched.intersection(s.roots) and not second_moment(s.function, s.roots)] \
        + fresh
    sets = list(dict.fromkeys(s.rows for s in everything))
    index = {rows: j for j, rows in enumerate(sets)}
    packed = [np.frombuffer(rows, dtype=np.uint8) for rows in sets]
    first, counts = _atoms(packed, n)
    if first.size * len(sets) ** 2 > MAX_AUDIT_WORK:
        raise AuditTooLarge(f"{len(sets)} row sets summed over {first.size:,} groups of records")
    incidence = _incidence(packed, first)
    inside = incidence.any(axis=1)  # the atom of records in no set is in no sum
    incidence, counts = incidence[inside], counts[inside].astype(float)
    weight = np.sqrt(counts)
    groups = _groups(incidence, weight)
    limit = np.floor(per_record * (counts @ groups) + 1e-9)
    weighted = groups * weight[:, None]

    roots_of: dict[str, tuple[str, ...]] = {}
    sets_now: dict[str, set[int]] = {}
    sets_before: dict[str, set[int]] = {}
    for s in everything:
        roots_of[s.function] = s.roots
        sets_now.setdefault(s.function, set()).add(index[s.rows])
        if (s.function, s.rows) in seen:
            sets_before.setdefault(s.function, set()).add(index[s.rows])
    spans: dict[frozenset[int], np.ndarray] = {}

    def answered(members: set[int] | None) -> np.ndarray:
        """For each group, whether a function summed over the sets ``members`` is summed over it."""
        if not members:
            return np.zeros(groups.shape[1], dtype=bool)
        key = frozenset(members)
        if key not in spans:
            spans[key] = _in_span(incidence[:, sorted(key)] * weight[:, None], weighted)
        return spans[key]

    for column in sorted(touched):
        mine = [(f, apart if f.startswith(APART) else 1.0) for f, roots in roots_of.items() if column in roots]
        now = sum(share * answered(sets_now[f]) for f, share in mine)
        before = sum(share * answered(sets_before.get(f)) for f, share in mine)
        if np.any((now > limit + 1e-9) & (now > before + 1e-9)):
            return (column,)
    return None


def _groups(incidence: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The groups checked, as 0/1 columns over the atoms: the sets, the differences of nested sets,
    and the atoms whose indicator lies in the span of all the sets."""
    columns = [incidence[:, j] for j in range(incidence.shape[1])]
    for a, b in combinations(range(incidence.shape[1]), 2):
        big, small = (a, b) if incidence[:, a].sum() >= incidence[:, b].sum() else (b, a)
        if np.all(incidence[:, small] <= incidence[:, big]):
            difference = incidence[:, big] - incidence[:, small]
            if difference.any():
                columns.append(difference)
    q = _basis(incidence * weight[:, None])
    for atom in np.flatnonzero(np.einsum("ij,ij->i", q, q) > 1 - 1e-9):  # its leverage is 1: in the span
        alone = np.zeros(incidence.shape[0])
        alone[atom] = 1.0
        columns.append(alone)
    unique = np.unique(np.array(columns), axis=0)
    return unique.T


def _basis(matrix: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the column span of ``matrix`` (the left singular vectors it has)."""
    u, s, _ = np.linalg.svd(matrix, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return np.zeros((matrix.shape[0], 0))
    return u[:, s > s[0] * max(matrix.shape) * np.finfo(float).eps * 10]


def _in_span(basis: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """For each column of ``vectors``, whether it lies in the column span of ``basis`` (both weighted
    over the atoms: an atom of c records weighs sqrt(c), so that the span is the span over records)."""
    q = _basis(basis)
    residual = vectors - q @ (q.T @ vectors)
    norms = np.einsum("ij,ij->j", vectors, vectors)
    return np.einsum("ij,ij->j", residual, residual) <= 1e-9 * np.maximum(norms, 1.0)
