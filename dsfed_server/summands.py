"""The summands of a derived column: what the sum of the column is a sum of, term by term.

A sum over records is linear: the sum of ``ifelse(cell, 1, 0)*D$score^k + 1e-13*D$income`` over the
table is the sum of ``score^k`` over the records of the cell plus a sum over the table that the analyst
knows (``meanDS(D$income)``). Counting the column's sum as one function summed over the whole table
would let the cell's few records answer as many functions as the table may
(:mod:`dsfed_server.disclosure.equations`). So the site writes the column as a sum of **summands**,
each a product of factors (a function of one column, a gated piece, the branch of an ``ifelse`` under
its condition), multiplying out sums inside products (``(C + 1e-13)*f`` is ``C*f + 1e-13*f``), and
counts each summand's sum over the records where that summand is not 0. A release of the column's
sum tells no more than the summands' sums, so counting those errs on the side of the records.

Each summand also names the records its **indicator factors** hold (a factor that takes one value wherever it is
not 0: a 0/1 column, a comparison, an ``ifelse``'s condition; or two values, ``a + (b - a)`` times the indicator of
``b``: a coding 1/2): the row set its sum is over, read from the expression's factors, not from where the other
factors happen to be 0. ``D$y*D$high + D$age`` counts the records of both ``y`` and ``high`` (the events of
``high``), ``D$age*D$sex`` with ``sex`` coded 1/2 sums the age over the records of ``sex`` 2 (besides the table),
as a subset of them would; the row-set audit compares those records with every other row set released from the
table (Chin & Ozsoyoglu 1982). A factor of three values or more is no indicator (its sums over each value's records
are the moment count's, :mod:`dsfed_server.disclosure.equations`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from dsfed_core.calltree import Arith, Column, Literal, Node, Symbol
from dsfed_core.errors import CallError
from dsfed_server.arithmetic import evaluate, truth
from dsfed_server.disclosure.differencing import Rows, bits
from dsfed_server.disclosure.expressions import Meaning, node_forms

Leaf = Column | Symbol
MAX_SUMMANDS = 64  # summands a column is written as at most (a product of sums multiplies their numbers)
ONE = "1"  # the constant summand: no function of a record on its own, the other factor's in a product


@dataclass(frozen=True)
class Summand:
    """A product of factors: its text up to a straight line (its core), its root columns, the
    records (of the column's) where it is not 0, and those its indicator factors hold (all where it has none)."""

    core: str
    roots: frozenset[str]
    support: np.ndarray
    over: np.ndarray

    def times(self, other: "Summand") -> "Summand":
        a, b = sorted((self.core, other.core))
        core = b if a == ONE else a if b == ONE else f"*({a}, {b})"
        return Summand(core, self.roots | other.roots, self.support & other.support, self.over & other.over)


class _Writer:
    def __init__(self, meanings: dict[Leaf, Meaning], read: Callable[[Leaf], np.ndarray], n: int,
                 rows: Rows) -> None:
        self.meanings, self.read, self.n, self.rows = meanings, read, n, rows

    def factor(self, node: Node) -> list[Summand]:
        """``node`` as one factor: its values computed, not 0 where it is not 0."""
        values = evaluate(node, self.read, self.n).values
        core = node_forms(node, self.meanings.__getitem__)[1]
        roots = frozenset(r.column for leaf in columns_read(node) for r in self.meanings[leaf].roots)
        support = np.isfinite(values) & (values != 0)
        distinct = np.unique(values[np.isfinite(values)])
        if np.unique(values[support]).size == 1:  # one value wherever it is not 0: c times an indicator
            over = support
        elif distinct.size == 2:  # a + (b - a) times the indicator of b (a coding 1/2, or -1/1)
            over = values == distinct[1]
        else:
            over = np.ones(self.n, dtype=bool)
        return [Summand(core, roots, support, over)]

    def summands(self, node: Node) -> list[Summand]:
        if isinstance(node, Literal) or not columns_read(node):  # a number: the constant summand, if not 0
            value = evaluate(node, self.read, self.n).values
            every = np.ones(self.n, dtype=bool)
            return [Summand(ONE, frozenset(), every, every)] if np.any(value != 0) else []
        if isinstance(node, (Column, Symbol)):
            found = self.meanings[node]
            if found.summands is None:
                return self.factor(node)
            return [Summand(core, frozenset(roots), self._here(support), self._here(over))
                    for core, roots, support, over in found.summands()]
        if not isinstance(node, Arith):
            return self.factor(node)
        op, args = node.op, [a.value for a in node.args]
        if op == "(" or op == "neg":
            return self.summands(args[0])
        if op in ("+", "-"):
            return self._checked(self.summands(args[0]) + self.summands(args[1]), node)
        if op == "*":
            numbers = [not columns_read(a) for a in args]
            if any(numbers):
                return self.summands(args[numbers.index(False)])
            return self._checked([s.times(t) for s in self.summands(args[0]) for t in self.summands(args[1])], node)
        if op == "/" and not columns_read(args[1]):
            return self.summands(args[0])
        if op == "/":  # the divisor as written: 1/(x + c) is another function for every c
            (divisor,) = self.factor(args[1])
            text = node_forms(args[1], self.meanings.__getitem__)[0]
            reciprocal = Summand(f"/(1.0, {text})", divisor.roots, divisor.support, divisor.over)
            return [s.times(reciprocal) for s in self.summands(args[0])]
        if op == "ifelse":
            test = truth(args[0], self.read, self.n)
            condition = node_forms(args[0], self.meanings.__getitem__)[0]
            roots = frozenset(r.column for leaf in columns_read(args[0]) for r in self.meanings[leaf].roots)
            out = []
            for branch, holds, mark in ((args[1], test == 1.0, ""), (args[2], test == 0.0, "!")):
                out += [Summand(f"[{mark}{condition}]{s.core}", s.roots | roots, s.support & holds, s.over & holds)
                        for s in self.summands(branch)]  # a constant branch: the condition's indicator
            return self._checked(out, node)
        return self.factor(node)

    def _here(self, packed: bytes) -> np.ndarray:
        """Records of the root table (packed) as a boolean over the column's records."""
        return bits(np.frombuffer(packed, dtype=np.uint8), self.rows.n_root)[self.rows.index].astype(bool)

    @staticmethod
    def _checked(found: list[Summand], node: Node) -> list[Summand]:
        if len(found) > MAX_SUMMANDS:
            raise CallError(f"{node.to_text()[:60]!r} multiplies out to more than {MAX_SUMMANDS} terms",
                            hint="write it with fewer sums inside products")
        return found


def summands(expression: Node, meanings: dict[Leaf, Meaning], read: Callable[[Leaf], np.ndarray], n: int,
             rows: Rows) -> tuple[tuple[str, tuple[str, ...], bytes, bytes], ...]:
    """The summands of ``expression`` (module docstring) over the records ``rows`` of its table, as a
    :class:`~dsfed_server.disclosure.expressions.Meaning` keeps them: each one's core, its root columns,
    the records of the root table where it is not 0 and those its indicator factors hold (packed)."""
    out = []
    for s in _Writer(meanings, read, n, rows).summands(expression):
        if not s.roots:
            continue  # a number: the count of the records, which the analyst has
        out.append((s.core, tuple(sorted(s.roots)), packed_rows(s.support, rows), packed_rows(s.over, rows)))
    return tuple(out)


def packed_rows(member: np.ndarray, rows: Rows) -> bytes:
    """The records of ``member`` (boolean over ``rows``) as a row set of the root table, packed."""
    full = np.zeros(rows.n_root, dtype=bool)
    full[rows.index[member]] = True
    return np.packbits(full).tobytes()


def columns_read(node: Node) -> list[Leaf]:
    """The columns and symbols an expression reads, each once, in order."""
    if isinstance(node, (Column, Symbol)):
        return [node]
    if not isinstance(node, Arith):
        return []
    leaves = (leaf for leaf in node.leaves() if isinstance(leaf, (Column, Symbol)))
    return list(dict.fromkeys(leaves))  # type: ignore[misc]
