"""The site's reading of derived expressions (dsfed_server/disclosure/expressions.py), without sites:
the two measures against their closed forms, the shipped limits against the constructs of a hostile
analyst and the transforms an honest one writes, and the map of a transformed column's cuts back to
its root, which must part the records exactly as the cut parts the transformed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dsfed_core.calltree import Limits
from dsfed_core.parser import parse_expression
from dsfed_server.disclosure.expressions import (CONCENTRATION, DOMINANCE, ExpressionRefused, Meaning, Root,
                                                 classify, concentration, dominance)
from dsfed_server.disclosure.gate import Cut, root_cut
from dsfed_server.disclosure.provenance import Transform
from dsfed_server.disclosure.rules import load_rules
from sitekit import DEFAULT_RULES

RULES = load_rules(DEFAULT_RULES).disclosure
ROOTS = {
    "age": Root("t", "age", (18.0, 100.0), True),
    "pnodes": Root("t", "pnodes", (0.0, 51.0), True),
    "progrec": Root("t", "progrec", (0.0, 5000.0), True),
    "score": Root("t", "score", (0.0, 1.0)),
    "income": Root("t", "income", (0.0, 1e6)),
    "weight": Root("t", "weight", (30.0, 200.0)),
    "height": Root("t", "height", (120.0, 220.0)),
    "x": Root("t", "x", (0.0, 100.0)),
    "z": Root("t", "z"),  # no declared range
}
LIMITS = Limits(max_length=1000, max_name_length=100, max_depth=50)


def read(text: str, concentration_limit: float = RULES.derived_concentration,
         dominance_limit: float = RULES.derived_dominance):
    return classify(parse_expression(text, LIMITS), lambda leaf: Meaning.of_root(ROOTS[leaf.column]),
                    concentration_limit, dominance_limit)


# --- the measures against their closed forms --------------------------------------------------------


def test_dominance_of_a_square_and_an_exponential_equals_the_closed_form():
    """Uniform on [0, 1]: x^2 has median 1/4, mean distance from it 1/4 and farthest 3/4 (3); exp(k x)
    has median e^(k/2), mean distance (e^k - 2 e^(k/2) + 1)/k and farthest e^k - e^(k/2)."""
    x = np.linspace(0.0, 1.0, 200_001)
    w = np.ones(x.size)
    assert dominance(x ** 2, w, x ** 2) == pytest.approx(3.0, rel=1e-4)
    k = 12.0
    closed = k * (math.exp(k) - math.exp(k / 2)) / (math.exp(k) - 2 * math.exp(k / 2) + 1)
    assert dominance(np.exp(k * x), w, np.exp(k * x)) == pytest.approx(closed, rel=1e-4)


def test_concentration_of_a_ramp_equals_the_closed_form():
    """A ramp rising linearly over [a, a + h] of [0, 1] and flat elsewhere: its variation sits in a
    part of share h, so the largest share over the square root of the length is 1/sqrt(h) (the lengths
    are read on a geometric ladder of ratio 1.02: within 1 %)."""
    x = np.linspace(0.0, 1.0, 10_001)
    ramp = np.clip((x - 0.4) / 0.04, 0.0, 1.0)
    assert concentration(x, np.abs(np.diff(ramp))) == pytest.approx(1 / math.sqrt(0.04), rel=0.01)


# --- what the shipped limits let through, and what they refuse ------------------------------------------

HONEST = ["log(D$age)", "D$age/10", "D$age - 50", "(D$age - 50)^2", "(D$age/10)^2", "log(D$pnodes + 1)",
          "log(D$progrec + 1)", "log(D$income + 1)", "sqrt(D$x)", "exp(-D$x/50)", "D$x^3",
          "D$weight/(D$height/100)^2", "D$age*D$score", "1/(1 + exp(-10*(D$score - 0.5)))",
          "ifelse(D$age > 60, log(D$x + 1), 0)", "pmin(D$x, 50) + abs(D$age - 60)", "2*D$z + 1"]


@pytest.mark.parametrize("text", HONEST)
def test_transforms_an_analyst_writes_pass_the_shipped_limits(text):
    read(text)


EITHER = "either"  # both measures refuse it; which is read first is the classifier's order
ATTACKS = {  # a cut, a spike or a bump in disguise, each with the rule that refuses it
    "(D$score - 0.5)/sqrt((D$score - 0.5)^2) + 1e-13*D$income": CONCENTRATION,  # sign(score - 0.5)
    # a step at 0.5 (its exp overflows past 0.5: the part left rises 1e300-fold next to the cut)
    "2/(1 + exp(1e9*(0.5 - D$score))) - 1": EITHER,
    "D$x + 1e-12/(1 + exp(-1e9*(D$x - 50)))": EITHER,  # a step hidden under a negligible factor
    "exp(-40*(D$score - 0.3)^2)": CONCENTRATION,  # a bump at 0.3
    "exp(-1e12*(D$score - 0.3)^2)": CONCENTRATION,  # a bump narrower than the grid
    "sqrt((D$x - 42.5)^2)": CONCENTRATION,  # abs in disguise: a kink the gate would not see
    "1/(D$pnodes - 3)": CONCENTRATION,  # missing at 3, inside the range
    "D$x^D$age": CONCENTRATION,  # a power that reads a column
    "log(D$weight/D$height^2)": CONCENTRATION,  # non-linear in several roots
    "log(D$x - 40)": DOMINANCE,  # a spike just above 40
    "log(D$income + 1e-6)": DOMINANCE,  # a spike at 0
    "1/(D$x + 1e-6)": CONCENTRATION,  # a spike at 0 whose tail is steep inside the range too
    "exp(D$x)": CONCENTRATION,  # the largest record dominates, and the rise is steep
    "log(D$score)": DOMINANCE,  # -Inf at 0, a spike
    "D$z^2": CONCENTRATION,  # non-linear in a root without a declared range
}


@pytest.mark.parametrize("text", list(ATTACKS))
def test_cuts_spikes_and_bumps_in_disguise_are_refused(text):
    with pytest.raises(ExpressionRefused) as refused:
        read(text)
    assert refused.value.rule in ({CONCENTRATION, DOMINANCE} if ATTACKS[text] == EITHER else {ATTACKS[text]})


def test_a_negligible_term_changes_nothing():
    """What refuses a part refuses it whatever is added to it, however small or large."""
    for text in ("(D$score - 0.5)/sqrt((D$score - 0.5)^2)", "exp(-40*(D$score - 0.3)^2)"):
        for extra in ("", " + 1e-13*D$income", " + 1e6*D$age", " * (1 + 1e-13*D$income)"):
            with pytest.raises(ExpressionRefused):
                read(text + extra)


def test_missing_parts_become_cuts_at_the_end_of_the_range():
    """log(pnodes) is missing at 0: the records kept are those above 0, a cut the gate checks."""
    assert [(r.column, op, v) for r, op, v in read("log(D$pnodes) + sqrt(D$x - 5)").missing_cuts] == [
        ("pnodes", ">", 0.0), ("x", ">", pytest.approx(5.0, abs=1e-12))]


def test_a_monotone_function_of_one_root_keeps_its_root_and_direction():
    assert read("log(D$age)").meaning.monotone == 1
    assert read("1 - D$score").meaning.monotone == -1
    assert read("(D$age - 50)^2").meaning.monotone == 0  # a polynomial that turns: no root order
    several = read("D$age + 1e-13*D$income").meaning
    assert several.function is None and {r.column for r in several.roots} == {"age", "income"}


# --- a transformed column's cuts, mapped back to the root -------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=5, max_size=60), st.floats(0.0, 60.0), st.booleans(),
       st.sampled_from(["log", "neg", "square"]))
def test_a_cut_on_a_transform_parts_the_root_records_as_it_parts_the_values(ints, where, inclusive, kind):
    """For every record, being below the mapped root cut is being below the cut on the transformed
    value: the history the gate keeps in the root's units is exactly what was released."""
    root = np.sort(np.asarray(ints, dtype=float))
    forward = {"log": lambda v: np.log(v + 1.0), "neg": lambda v: -v / 7.0, "square": lambda v: (v / 10.0) ** 2}[kind]
    transform = Transform(kind, forward, kind != "neg", domain=(0.0, 60.0))
    cut = Cut(float(forward(np.array([where]))[0]), inclusive)
    value = float(transform.inverse(np.array([cut.value]), np.array([inclusive]))[0])
    mapped = root_cut(cut, value, transform, root)
    transformed = forward(root)
    lower = transformed <= cut.value if inclusive else transformed < cut.value
    below_root = root <= mapped.value if mapped.inclusive else root < mapped.value
    # an increasing transform keeps the lower cell below; a decreasing one puts it above
    assert np.array_equal(below_root, lower if transform.increasing else ~lower)
