"""The count of functions each group of records answers (:mod:`dsfed_server.disclosure.equations`),
against groups and spans worked out by hand, and the function texts it counts by."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dsfed_server.disclosure.equations import Summed, allowed, too_many
from dsfed_core.calltree import Limits
from dsfed_core.parser import parse_expression
from dsfed_server.disclosure.expressions import Meaning, Root, classify, forms

N = 40


def rows(*ranges: tuple[int, int]) -> bytes:
    """The packed row set of the records in the ranges [a, b) of a table of N."""
    mask = np.zeros(N, dtype=bool)
    for a, b in ranges:
        mask[a:b] = True
    return np.packbits(mask).tobytes()


def sums(functions: list[str], where: bytes, roots: tuple[str, ...] = ("x",)) -> list[Summed]:
    return [Summed(f, roots, where) for f in functions]


def test_a_group_answers_its_second_moments_and_a_quarter_of_its_values_beyond():
    """8 records (share 0.25): the column, its square, and two functions more; the third refused. 40
    records: ten more."""
    cell, table = rows((0, 8)), rows((0, N))
    assert allowed(8, 0.25) == 2 and allowed(40, 0.25) == 10
    assert too_many([], sums(["x", "^(x, 2.0)", "exp(x)", "log(x)"], cell), N, 0.25) is None
    assert too_many(sums(["x", "^(x, 2.0)", "exp(x)", "log(x)"], cell), sums(["sqrt(x)"], cell), N, 0.25) == ("x",)
    powers = [f"^(x, {k}.0)" for k in range(3, 13)]  # ten beyond the square
    assert too_many(sums(powers[:-1], table), sums(powers[-1:], table), N, 0.25) is None
    assert too_many(sums(powers, table), sums(["exp(x)"], table), N, 0.25) == ("x",)


def test_second_moments_the_same_function_again_and_other_columns_cost_nothing():
    cell = rows((0, 8))
    earlier = sums(["exp(x)", "log(x)"], cell)
    assert too_many(earlier, sums(["exp(x)"], cell), N, 0.25) is None  # nothing new
    assert too_many(earlier, sums(["exp(y)", "log(y)"], cell, ("y",)), N, 0.25) is None
    assert too_many(earlier, sums(["x", "^(x, 2.0)"], cell) + sums(["*(x, y)"], cell, ("x", "y")), N, 0.25) is None


def test_the_difference_of_two_nested_sets_is_a_group():
    """Two functions summed over the table and over all but 4 records: the 4 records answer both (a
    difference of sums), more than their one (0.25 x 4); one is within it."""
    table, most = rows((0, N)), rows((0, N - 4))
    earlier = sums(["exp(x)"], table) + sums(["exp(x)"], most) + sums(["log(x)"], table)
    assert too_many(earlier[:1], earlier[1:], N, 0.25) is None
    assert too_many(earlier, sums(["log(x)"], most), N, 0.25) == ("x",)
    # the same function over a set that singles out no small group with the others
    assert too_many(earlier, sums(["log(x)"], rows((0, 20))), N, 0.25) is None


def test_an_atom_in_the_span_of_the_sets_is_a_group():
    """A = [0, 20), B = [10, 30), A or B = [0, 30): the intersection [10, 20) is A + B - (A or B), not a
    difference of two nested sets; with three functions summed over each of the three sets, its 10
    records answer three (allowed: 2) and are refused; over A and B alone they are not a group (no
    combination gives them)."""
    a, b, union = rows((0, 20)), rows((10, 30)), rows((0, 30))
    functions = ["exp(x)", "log(x)", "sqrt(x)"]
    assert too_many(sums(functions, a), sums(functions, b), N, 0.25) is None
    assert too_many(sums(functions, a) + sums(functions, b), sums(functions, union), N, 0.25) == ("x",)
    # one function fewer over the union: the intersection answers two
    assert too_many(sums(functions, a) + sums(functions, b), sums(functions[:2], union), N, 0.25) is None


def test_a_function_of_two_columns_counts_for_each():
    """Over 8 records, x*y is a second moment; x^2*y counts for x (and y): with two functions of x
    beyond its second moments already, it is refused for x."""
    cell = rows((0, 8))
    earlier = sums(["exp(x)", "log(x)"], cell) + sums(["*(x, y)"], cell, ("x", "y"))
    assert too_many(earlier, sums(["*(^(x, 2.0), y)"], cell, ("x", "y")), N, 0.25) == ("x",)
    assert too_many(earlier[:1], sums(["*(^(x, 2.0), y)"], cell, ("x", "y")), N, 0.25) is None


@pytest.mark.parametrize("a, b, same", [
    ("2*log(x) + 1", "log(x)", True),
    ("-(x/10 - 3)", "x", True),
    ("exp(x/25)", "exp(x/50)", False),
    ("(x + 1)^2", "x^2", False),  # the same space of functions, counted twice: errs on the records' side
])
def test_a_function_is_counted_up_to_a_straight_line_in_it(a, b, same):
    root = Root("t", "x", (1.0, 100.0))

    def core(text: str) -> str:
        node = parse_expression(re.sub(r"\bx\b", "D$x", text),
                                Limits(max_length=1000, max_name_length=100, max_depth=50))
        meaning = classify(node, lambda _: Meaning.of_root(root), 3.0, 20.0).meaning
        return forms(meaning)[1]  # type: ignore[index]

    assert (core(a) == core(b)) is same, (core(a), core(b))
