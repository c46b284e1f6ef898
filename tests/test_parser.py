"""The safe parser: what it accepts becomes the expected call tree; everything
outside the grammar is refused with a clear reason, and nothing is evaluated."""

from __future__ import annotations

import pytest

from dsfed_core.calltree import Arg, Call, Column, Formula, FormulaTerm, Limits, Literal, Symbol, Vector, to_json
from dsfed_core.errors import CallError
from dsfed_core.parser import from_json, parse

L = Limits(max_length=80, max_name_length=20, max_depth=4)


@pytest.mark.parametrize(
    "text,tree",
    [
        ("meanDS(D$age)", Call("meanDS", (Arg(None, Column("D", "age")),))),
        ('lengthDS("D$age")', Call("lengthDS", (Arg(None, Literal("D$age")),))),
        ("f(x, n=3, p=-0.5, ok=TRUE, none=NULL, miss=NA)", None),
        ("histogramDS(D$age, c(20, 40.5, 1e2))", Call("histogramDS", (
            Arg(None, Column("D", "age")), Arg(None, Vector((Literal(20), Literal(40.5), Literal(100.0))))))),
        ("glmDS2(y ~ x1 + x2, family='binomial')", Call("glmDS2", (
            Arg(None, Formula("y", (FormulaTerm(("x1",)), FormulaTerm(("x2",))))),
            Arg("family", Literal("binomial"))))),
        ("g(y ~ a*b - 1)", Call("g", (Arg(None, Formula("y", (
            FormulaTerm(("a",)), FormulaTerm(("b",)), FormulaTerm(("a", "b"))), intercept=False)),))),
        ("outer(inner(D))", Call("outer", (Arg(None, Call("inner", (Arg(None, Symbol("D")),))),))),
    ],
)
def test_accepted(text, tree):
    node = parse(text, L)
    if tree is not None:
        assert node == tree
    # the canonical text parses back to the same tree, and the JSON form round-trips
    assert parse(node.to_text(), L) == node
    assert from_json(to_json(node), L) == node


@pytest.mark.parametrize(
    "text,reason",
    [
        ('system("ls")x', "unexpected"),
        ("`x`", "backtick"),
        ("D[1,]", "indexing"),
        ("D[[1]]", "indexing"),
        ("x <- meanDS(D$age)", "assignment"),
        ("meanDS(D$age) -> x", "assignment"),
        ("x = 1", "assignment"),
        ("meanDS(D$age + 1)", "only allowed inside a model formula"),
        ("meanDS(D$age * 2)", "only allowed inside a model formula"),
        ("meanDS(D$age); q()", "one call per request"),
        ("base::system('ls')", "namespace"),
        ("meanDS(D$age > 3)", "comparison"),
        ("meanDS(!x)", "logical"),
        ("meanDS(x %in% y)", "%-operators"),
        ("f((1))", "parentheses"),
        ("function(x) x", "'function' is not allowed"),
        ("{meanDS(D$age)}", "braces"),
        ("meanDS(D@age)", "slot"),
        ("meanDS(D$a$b)", "one level"),
        ("f(c(1, 'a'))", "mixes"),
        ("f(c(g(1)))", "literal"),
        ("f('" + "a" * 81 + "')", "exceeds the limit"),
        ("f(" + "a" * 21 + ")", "exceeds the limit"),
        ("f(g(h(i(j(1)))))", "nested deeper"),
        ("f('\\x41')", "escape"),
        ("", "empty"),
    ],
)
def test_refused(text, reason):
    with pytest.raises(CallError) as exc:
        parse(text, L)
    assert reason in str(exc.value)


def test_limits_name_the_rule():
    with pytest.raises(CallError) as exc:
        parse("f('" + "a" * 81 + "')", L)
    assert exc.value.rule == "strings.max_length"
    with pytest.raises(CallError) as exc:
        parse("f(g(h(i(j(1)))))", L)
    assert exc.value.rule == "parser.max_depth"


@pytest.mark.parametrize(
    "tree",
    [
        {"call": "f", "args": [{"eval": "1"}]},
        {"call": "f", "args": [{"lit": {"nested": 1}}]},
        {"call": "f", "args": [{"lit": float("inf")}]},
        {"col": ["D"]},
        {"vec": [1, "a"]},
        {"call": 3},
        "meanDS(D$age)",
    ],
)
def test_structured_calls_refuse_unknown_shapes(tree):
    with pytest.raises(CallError):
        from_json(tree, L)


def test_unregistered_and_evaluating_calls_are_refused_by_the_site(gbsg2_services, gbsg2_provisioned):
    from dsfed_client import FederatedCallError
    from conftest import inprocess_builder

    with inprocess_builder(gbsg2_provisioned, gbsg2_services).login() as session:
        session.assign_table("D", "GBSG2.validation")
        for text in ('system("ls")', 'eval(parse(text="1"))', "get('D')", "meanDS(eval(D$age))"):
            with pytest.raises(FederatedCallError) as exc:
                session.aggregate_expr(text)
            err = exc.value.failures["site1"]
            assert err.kind == "bad_call" and "not a registered function" in err.message
        with pytest.raises(FederatedCallError) as exc:  # an aggregate cannot be nested in a call
            session.aggregate_expr("meanDS(meanDS(D$age))")
        assert "cannot be an argument" in exc.value.failures["site1"].message
        with pytest.raises(FederatedCallError) as exc:  # a formula only where a parameter is one
            session.aggregate_expr("meanDS(y ~ x)")
        assert "not a model formula" in exc.value.failures["site1"].message


def test_raw_float64_vectors_are_read_as_numbers_only():
    import base64

    import numpy as np

    values = np.array([0.5, -1.25, 3e-7])
    node = from_json({"f64": base64.b64encode(values.astype("<f8").tobytes()).decode()}, L)
    np.testing.assert_array_equal(node.array, values)
    for bad in ("not base64!", base64.b64encode(b"1234567").decode(),
                base64.b64encode(np.array([np.inf]).astype("<f8").tobytes()).decode()):
        with pytest.raises(CallError):
            from_json({"f64": bad}, L)


@pytest.mark.parametrize("formula,where", [("y ~ x1 / x2", "'/'"), ("y ~ poly(x1, 2)", "'poly'")])
def test_a_formula_refuses_transforms_saying_what_a_formula_takes(formula, where):
    """A formula reads variables, factor(), I() and log() joined by +, -, * and :; anything else is
    told what a formula takes (R's nesting operator '/', poly())."""
    with pytest.raises(CallError) as exc:
        parse(f'glmDS2({formula}, "binomial")', L)
    assert where in exc.value.message and "joined by +, -, * and :" in exc.value.message
    assert "outside a model formula" not in exc.value.message
