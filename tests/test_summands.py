"""A derived column written as its summands (:mod:`dsfed_server.summands`): what its sum is a sum of,
each over the records where it is not 0, against the expression multiplied out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_core.calltree import Column, Limits
from dsfed_core.parser import parse_expression
from dsfed_server.disclosure.differencing import whole_table
from dsfed_server.disclosure.expressions import Meaning, Root
from dsfed_server.summands import summands

AGE = np.array([30.0, 40.0, 55.0, 60.0, 70.0, 80.0])
SCORE = np.array([0.1, 0.0, 0.3, 0.4, 0.5, 0.6])
INCOME = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
HIGH = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
Y = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
COLUMNS = {"age": AGE, "score": SCORE, "income": INCOME, "high": HIGH, "y": Y}


def _records(packed: bytes) -> list[int]:
    return list(np.flatnonzero(np.unpackbits(np.frombuffer(packed, dtype=np.uint8), count=AGE.size)))


def _summands(text: str) -> tuple[tuple[str, tuple[str, ...], bytes, bytes], ...]:
    node = parse_expression(text, Limits(max_length=1000, max_name_length=100, max_depth=50))
    leaves = {leaf: Meaning.of_root(Root("t", leaf.column, (0.0, 100.0))) for leaf in node.leaves()
              if isinstance(leaf, Column)}
    rows = whole_table("t", AGE.size)
    return summands(node, leaves, lambda leaf: COLUMNS[leaf.column], AGE.size, rows)


def written(text: str) -> dict[str, tuple[tuple[str, ...], list[int]]]:
    return {core: (roots, _records(support)) for core, roots, support, _ in _summands(text)}


def over(text: str) -> dict[str, list[int]]:
    """Each summand's records through its indicator factors."""
    return {core: _records(held) for core, _, _, held in _summands(text)}


def test_an_indicator_times_a_power_plus_a_pad_is_the_power_over_the_cell_and_the_pad_over_the_table():
    got = written("ifelse(D$age > 50, 1, 0)*D$score^2 + 1e-6*D$income")
    assert got == {
        "*([>(age, 50.0)]1, ^(score, 2.0))": (("age", "score"), [2, 3, 4, 5]),  # the cell's records
        "income": (("income",), [0, 1, 2, 3, 4, 5]),
    }


def test_a_number_inside_a_product_multiplies_out():
    got = written("(ifelse(D$age > 50, 1, 0) + 1e-13)*D$score^3")
    assert got["*([>(age, 50.0)]1, ^(score, 3.0))"] == (("age", "score"), [2, 3, 4, 5])
    assert got["^(score, 3.0)"] == (("score",), [0, 2, 3, 4, 5])  # the score is 0 at record 1


def test_both_branches_of_an_ifelse_each_under_its_condition():
    got = written("ifelse(D$age > 50, D$score, 1) + 2")
    assert got == {"[>(age, 50.0)]score": (("age", "score"), [2, 3, 4, 5]),
                   "[!>(age, 50.0)]1": (("age",), [0, 1])}


@pytest.mark.parametrize("text", ["D$score*2 + D$age", "D$age - D$score/4"])
def test_a_straight_line_in_columns_is_its_columns(text):
    got = written(text)
    assert set(got) == {"score", "age"}
    assert got["age"] == (("age",), [0, 1, 2, 3, 4, 5])


def test_a_summands_indicator_factors_name_the_records_it_sums_over_whatever_its_other_factors_are():
    """``D$y*D$high + D$age``: the outcome's ones over the records of ``high`` (both 0/1 factors: the records of
    both), the age over all; ``D$score*D$high`` sums the score over ``high``'s records, although the score is 0 at
    record 1 (a value, not the expression's)."""
    assert over("D$y*D$high + D$age") == {"*(high, y)": [1, 4], "age": [0, 1, 2, 3, 4, 5]}
    assert over("D$score*D$high + 1e-13*D$age") == {"*(high, score)": [1, 2, 4], "age": [0, 1, 2, 3, 4, 5]}
    assert over("ifelse(D$age > 50, D$score, 0)") == {"[>(age, 50.0)]score": [2, 3, 4, 5]}
