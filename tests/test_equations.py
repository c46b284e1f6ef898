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
    """8 records (rule 0.25): two functions of a column, the third refused; 40 records: ten."""
    cell = rows((0, 8))
    assert allowed(8, 1, 0.25) == 2 and allowed(40, 1, 0.25) == 10 and allowed(8, 2, 0.25) == 5
    assert too_many([], sums(["x", "^(x, 2.0)"], cell), N, 0.25) is None
    assert too_many(sums(["x", "^(x, 2.0)"], cell), sums(["exp(x)"], cell), N, 0.25) == ("x",)
    table = rows((0, N))
    assert too_many(sums([f"^(x, {k}.0)" for k in range(1, 10)], table), sums(["exp(x)"], table), N, 0.25) is None
    assert too_many(sums([f"^(x, {k}.0)" for k in range(1, 11)], table), sums(["exp(x)"], table), N, 0.25) == ("x",)


def test_the_same_function_again_and_other_columns_cost_nothing():
    cell = rows((0, 8))
    earlier = sums(["x", "^(x, 2.0)"], cell)
    assert too_many(earlier, sums(["x"], cell), N, 0.25) is None  # nothing new
    assert too_many(earlier, sums(["y", "^(y, 2.0)"], cell, ("y",)), N, 0.25) is None


def test_the_difference_of_two_nested_sets_is_a_group():
    """Three functions summed over the table and over all but 4 records: the 4 records answer all three
    (a difference of sums), more than their second moments; two functions are their mean and variance."""
    table, most = rows((0, N)), rows((0, N - 4))
    earlier = sums(["x", "^(x, 2.0)"], table) + sums(["x", "^(x, 2.0)"], most)
    assert too_many(earlier[:2], earlier[2:], N, 0.25) is None
    assert too_many(earlier + sums(["exp(x)"], table), sums(["exp(x)"], most), N, 0.25) == ("x",)
    # the same function over sets that do not single out the 4 (no difference of them is that group)
    assert too_many(earlier + sums(["exp(x)"], table), sums(["exp(x)"], rows((0, 20))), N, 0.25) is None


def test_an_atom_in_the_span_of_the_sets_is_a_group():
    """A = [0, 20), B = [10, 30), A or B = [0, 30): the intersection [10, 20) is A + B - (A or B), not a
    difference of two nested sets; with three functions summed over each of the three sets, its 10
    records answer three functions (allowed: 2) and are refused; over A and B alone they are not a
    group (no combination gives them)."""
    a, b, union = rows((0, 20)), rows((10, 30)), rows((0, 30))
    functions = ["x", "^(x, 2.0)", "exp(x)"]
    assert too_many(sums(functions, a), sums(functions, b), N, 0.25) is None
    assert too_many(sums(functions, a) + sums(functions, b), sums(functions, union), N, 0.25) == ("x",)
    # one function fewer over the union: the intersection answers two, its second moments
    assert too_many(sums(functions, a) + sums(functions, b), sums(functions[:2], union), N, 0.25) is None


def test_products_count_for_the_pair():
    """Over 8 records, two columns answer their five second moments (x, x^2, y, y^2, x*y); a sixth
    function of the pair is refused for the pair, though each column alone is within its own limit."""
    cell = rows((0, 8))
    second = sums(["x", "^(x, 2.0)"], cell) + sums(["y", "^(y, 2.0)"], cell, ("y",)) \
        + sums(["*(x, y)"], cell, ("x", "y"))
    assert too_many(second[:4], second[4:], N, 0.25) is None
    assert too_many(second, sums(["*(^(x, 2.0), y)"], cell, ("x", "y")), N, 0.25) == ("x", "y")


@pytest.mark.parametrize("a, b, same", [
    ("2*log(x) + 1", "log(x)", True),
    ("-(x/10 - 3)", "x", True),
    ("exp(x/25)", "exp(x/50)", False),
    ("(x + 1)^2", "x^2", False),  # the same space of functions, counted twice: errs on the records' side
])
def test_a_function_is_counted_up_to_a_straight_line_in_it(a, b, same):
    root = Root("t", "x", (1.0, 100.0))

    def core(text: str) -> str:
        node = parse_expression(re.sub(r"\bx\b", "D$x", text), Limits(max_length=1000, max_name_length=100, max_depth=50))
        meaning = classify(node, lambda _: Meaning.of_root(root), 3.0, 20.0).meaning
        return forms(meaning)[1]  # type: ignore[index]

    assert (core(a) == core(b)) is same, (core(a), core(b))
