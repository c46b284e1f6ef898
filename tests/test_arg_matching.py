"""R's argument matching (R Language Definition 4.3.2) in ``registry.match``, against R itself.

For each call, R is given a function with the registered function's formal arguments and binds
the same call with ``match.call``; ``match`` must bind every argument to the same parameter, or
refuse exactly when R does. Arguments carry their position as value so each binding is visible."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

import pytest

from dsfed_core.calltree import Arg, Literal
from dsfed_core.errors import CallError
import dsfed_server.functions  # noqa: F401  (registers every function)
from dsfed_server.registry import REGISTRY, FunctionSpec, match
from rref import r_eval

R_MATCH = """
f <- function({formals}) NULL
tryCatch({{
  a <- as.list(match.call(f, quote(f({args}))))[-1]
  paste(names(a), unlist(a), sep = "=")
}}, error = function(e) paste0("ERROR: ", conditionMessage(e)))
"""


def r_binds(spec: FunctionSpec, args: list[Arg]) -> dict[str, int] | str:
    """What R's match.call binds: {parameter: argument number}, or R's error message."""
    formals = ", ".join(f"`{p.name}`" for p in spec.params)
    out = [str(v) for v in r_eval(R_MATCH.format(formals=formals, args=_text(args)))]
    if out and out[0].startswith("ERROR: "):
        return out[0]
    return {item.rsplit("=", 1)[0]: int(item.rsplit("=", 1)[1].rstrip("L")) for item in out}


def dsfed_binds(spec: FunctionSpec, args: list[Arg]) -> dict[str, int] | str:
    """What ``match`` binds, in the same form; a refusal as its message."""
    try:
        return {name: node.value for name, node in match(spec, tuple(args)).items()}
    except CallError as error:
        return f"ERROR: {error}"


def _text(args: list[Arg]) -> str:
    return ", ".join(f"`{a.name}` = {a.value.value}L" if a.name else f"{a.value.value}L" for a in args)


def assert_binds_as_r(spec: FunctionSpec, args: list[Arg]) -> None:
    want, got = r_binds(spec, args), dsfed_binds(spec, args)
    if isinstance(want, str):
        assert isinstance(got, str), (spec.name, _text(args), want, got)
    else:
        assert got == want, (spec.name, _text(args), want, got)


@st.composite
def calls(draw: st.DrawFn) -> tuple[FunctionSpec, list[Arg]]:
    """A registered function and a call to it: some of its parameters (or a stray name), each given
    by exact name, by a prefix of its name, or by position, in a random order."""
    spec = draw(st.sampled_from([s for s in REGISTRY if len(s.params) > 1]))
    names = [p.name for p in spec.params] + ["zz"]
    chosen = draw(st.lists(st.sampled_from(names), max_size=len(names) + 1))
    args = []
    for number, name in enumerate(chosen, start=1):
        how = draw(st.sampled_from(["exact", "partial", "positional"]))
        tag = {"exact": name, "positional": None,
               "partial": name[:draw(st.integers(1, max(1, len(name) - 1)))]}[how]
        args.append(Arg(tag, Literal(number)))
    return spec, draw(st.permutations(args))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls())
def test_match_binds_as_r_does(call: tuple[FunctionSpec, list[Arg]]) -> None:
    assert_binds_as_r(*call)


ISSUE_CALLS = [  # R's matching: named arguments first, then the unnamed ones in order
    ("histogramDS2", [None, None, None, None, "method.indicator", None, None],
     {"xvect": 1, "num.breaks": 2, "min": 3, "max": 4, "method.indicator": 5, "k": 6, "noise": 7}),
    ("glmDS1", [None, "family", None, None, None],
     {"formula": 1, "family": 2, "weights": 3, "offset": 4, "data": 5}),
    ("glmDS2", [None, "fam", "beta", None, None, "dataN"],
     {"formula": 1, "family": 2, "beta.vect": 3, "offset": 4, "weights": 5, "dataName": 6}),
]


@pytest.mark.parametrize("name,tags,expected", ISSUE_CALLS, ids=[c[0] for c in ISSUE_CALLS])
def test_issue_calls_bind_as_r(name: str, tags: list[str | None], expected: dict[str, int]) -> None:
    spec = REGISTRY.get(name)
    args = [Arg(tag, Literal(i)) for i, tag in enumerate(tags, start=1)]
    assert r_binds(spec, args) == expected
    assert dsfed_binds(spec, args) == expected


@pytest.mark.parametrize("name,tags,words", [
    ("histogramDS2", [None, "m"], "matches multiple formal arguments"),  # min, max, method.indicator
    ("histogramDS2", ["k", "k"], "matched by multiple actual arguments"),
    ("histogramDS2", ["xvect", "xv"], "unused argument"),  # xv partially matches nothing left
    ("glmDS1", [None] * 9, "unused arguments"),  # two beyond its seven formals
])
def test_refusals_carry_r_meaning(name: str, tags: list[str | None], words: str) -> None:
    spec = REGISTRY.get(name)
    args = [Arg(tag, Literal(i)) for i, tag in enumerate(tags, start=1)]
    assert words in r_binds(spec, args)
    assert words in dsfed_binds(spec, args)
