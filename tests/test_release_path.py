"""The release path is decided by each function's declaration, and only the disclosure layer calls the gate.

Every registry entry declares what its implementation returns (``cells``: a declaration of cells for the
release gate; ``pooled_only`` or ``relayable``: a protocol's steps; ``secure_sum``: additive fields), and the
service picks the release from that declaration (:meth:`dsfed_server.registry.FunctionSpec.release_of`):
a result the entry does not declare is a programming error, raised, never released. The walk over the
registry reads each implementation's return annotation, so a declaration that disagrees with its
function fails here, before any call runs it.

No module of :mod:`dsfed_server.functions`, nor the call context they reach the site through
(:class:`~dsfed_server.context.CallContext`), calls the gate itself or imports its release functions: a
function returns a declaration and the service releases it, or, for a release of several steps (cells
first, then sums computed on the released cells; a protocol's cuts before its statistics; what the release
history records of a subset, a derived column, an analyst's reference, exact sums or quantiles before anything
is read from it; a protocol's decisions on pooled counts), it yields the declaration of each step
(:mod:`dsfed_server.disclosure.declared`) and the service releases it part-way. The walk flags every call
of a method of the :class:`~dsfed_server.disclosure.checks.Guard` that releases or records a release
(reached as ``guard`` or ``<...>.guard``) and of a protocol's
:class:`~dsfed_server.disclosure.protocol_cuts.ProtocolCuts` that records, audits or decides its cuts
(reached as ``cuts`` or ``<...>.cuts``); a second walk holds the function modules to those names
(parameters so annotated, assignments). There are no exceptions.
"""

from __future__ import annotations

import ast
import collections.abc
import inspect
import types
import typing
from typing import Any

import numpy as np
import pytest

from dsfed_core.errors import DisclosureRefusal
from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server.disclosure import declared
from dsfed_server.disclosure.gate import Categories, Intervals
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_server.registry import REGISTRY, FunctionSpec, SecureSum, UndeclaredRelease
from sitekit import ROOT

FUNCTIONS = ROOT / "dsfed_server" / "functions"
# the modules a function runs in: its own, and the call context through which it reads and says what it sums
WALKED = [*sorted(FUNCTIONS.glob("*.py")), ROOT / "dsfed_server" / "context.py"]
# what the gate's module offers for releasing, which only the disclosure layer and the service call
GATE_RELEASES = {"release_local", "release_pooled"}
# the Guard's methods that release cells or record a release, which only the disclosure layer and the service call:
# releases, and the checks of what a function keeps or sums that record it in the release history
GUARD_RELEASES = {"release", "release_groups", "group_cells", "joint_cells", "agreed", "coarsened", "record_pooled",
                  "record_pooled_cells", "subset_rows", "derived_cuts", "reference_edges", "exact_sums", "quantiles_of"}
# a protocol's cuts (ProtocolCuts): those that record a release, audit the cells before one, or decide its cuts on
# pooled counts (the gate's decision)
CUT_RELEASES = {"record", "record_cells", "audited", "fits", "dominated"}
RELEASES_OF = {"guard": GUARD_RELEASES, "cuts": CUT_RELEASES}


def _returned(spec: FunctionSpec) -> set[str]:
    """The releases an implementation's return annotation names: cells, steps or a value (of a generator that
    declares releases part-way, what it returns). ``Any``, or no annotation, names none: the function must
    say what it returns."""
    hint = typing.get_type_hints(spec.impl).get("return", Any)
    if typing.get_origin(hint) is collections.abc.Generator:
        assert inspect.isgeneratorfunction(spec.impl), f"{spec.name}: annotated a Generator but is no generator"
        assert typing.get_args(hint)[0] == declared.Declared, f"{spec.name}: yields {typing.get_args(hint)[0]}"
        hint = typing.get_args(hint)[2]
    else:
        assert not inspect.isgeneratorfunction(spec.impl), f"{spec.name}: a generator not annotated as one"
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    assert Any not in members, (f"{spec.name} ({spec.impl.__module__}.{spec.impl.__name__}) is annotated to return "
                                "Any: annotate what it returns (a declaration of cells, PooledSteps or its value)")
    return {"cells" if member in (Intervals, Categories) else "steps" if member is PooledSteps else "value"
            for member in members}


@pytest.mark.parametrize("spec", list(REGISTRY), ids=lambda spec: spec.name)
def test_each_declaration_agrees_with_what_its_function_returns(spec):
    returned = _returned(spec)
    assert ("cells" in returned) == spec.cells, f"{spec.name}: returns {returned}, declares cells={spec.cells}"
    if "steps" in returned:
        assert spec.pooled_only or spec.relayable or spec.secure_sum is not None, spec.name
    if spec.pooled_only:
        assert returned == {"steps"}, spec.name
    if spec.cells and spec.secure_sum is None and not spec.relayable:
        assert returned == {"cells"}, spec.name


def _spec(**declared: Any) -> FunctionSpec:
    return FunctionSpec(name="fakeDS", kind="aggregate", params=(), impl=lambda ctx: None, doc="", **declared)


CELLS = Categories(np.zeros(4, dtype=np.int64), (1,), lambda released: None)
STEPS = PooledSteps({}, lambda pooled, floor: (None, None))


@pytest.mark.parametrize("declared, result, release", [
    ({"cells": True}, CELLS, "cells"),
    ({"cells": True, "secure_sum": SecureSum(("n",))}, {"n": 1}, "value"),
    ({"pooled_only": True}, STEPS, "steps"),
    ({"relayable": True}, STEPS, "steps"),
    ({"secure_sum": SecureSum(("n",))}, STEPS, "steps"),
    ({}, {"mean": 1.0}, "value"),
])
def test_the_release_is_the_declared_one(declared, result, release):
    assert _spec(**declared).release_of(result) == release


@pytest.mark.parametrize("declared, result, message", [
    ({}, CELLS, "does not declare cells=True"),
    ({"secure_sum": SecureSum(("n",))}, CELLS, "does not declare cells=True"),
    ({}, STEPS, "declares neither pooled_only, relayable nor a secure sum"),
    ({"cells": True}, {"counts": [1]}, "declares cells=True and nothing else"),
    ({"pooled_only": True}, {"n": 1}, "declares pooled_only and nothing else"),
    ({}, (step for step in ()), "declares releases part-way"),
])
def test_a_result_its_entry_does_not_declare_is_a_programming_error(declared, result, message):
    with pytest.raises(UndeclaredRelease, match=message):
        _spec(**declared).release_of(result)


def _gate_calls(tree: ast.Module) -> list[tuple[str, int]]:
    """(enclosing top-level function, line) of each call of a release method of a Guard (``guard.<m>(...)``,
    ``<...>.guard.<m>(...)``) or of a protocol's cuts (``cuts.<m>(...)``, ``<...>.cuts.<m>(...)``), and each
    import or use of the gate's release functions, in a module."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and where == "<module>":
            where = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if node.func.attr in RELEASES_OF.get(name, ()):
                found.append((where, node.lineno))
        if isinstance(node, ast.ImportFrom) and any(alias.name in GATE_RELEASES for alias in node.names):
            found.append((where, node.lineno))
        if isinstance(node, ast.Attribute) and node.attr in GATE_RELEASES:
            found.append((where, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return found


# the walk finds a Guard and a protocol's cuts by these names, which these types' holders must use
NAME_OF = {"Guard": "guard", "ProtocolCuts": "cuts"}


def _name(node: ast.AST | None) -> str:
    """The last name of ``x``, ``a.x``, ``x(...)`` or the annotation ``"x"``; empty for anything else."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1]
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _renamed(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of each Guard or protocol's cuts held under another name than the walk looks for: a
    parameter annotated ``Guard`` not named ``guard`` (``ProtocolCuts``: ``cuts``), or ``guard``,
    ``<...>.guard``, ``cuts`` or a new ``ProtocolCuts(...)`` assigned to another name (``<...>.cuts`` is
    left alone: released cells' cuts are a tuple of that name)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and NAME_OF.get(_name(node.annotation), node.arg) != node.arg:
            found.append((node.arg, node.lineno))
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += zip(target.elts, node.value.elts)
                else:
                    pairs.append((target, node.value))
        for target, value in pairs:
            held = ("cuts" if isinstance(value, ast.Call) and _name(value) == "ProtocolCuts"
                    or isinstance(value, ast.Name) and value.id == "cuts"
                    else "guard" if isinstance(value, (ast.Name, ast.Attribute)) and _name(value) == "guard" else "")
            if held and _name(target) != held:
                found.append((_name(target), node.lineno))
    return found


def test_a_guard_and_a_protocols_cuts_go_by_the_names_the_walk_reads():
    renamed = {(path.name, name, line) for path in WALKED
               for name, line in _renamed(ast.parse(path.read_text(encoding="utf-8")))}
    assert not renamed, f"name a Guard 'guard' and a ProtocolCuts 'cuts', so the walk finds their calls: {renamed}"
    source = ("def f(ctx, g: Guard, cuts: 'ProtocolCuts', guard: Guard):\n"
              "    check = ctx.guard\n"
              "    self.guard, self.kept = guard, cuts\n"
              "    edges = ProtocolCuts(ctx.guard, p, column)\n"
              "    rows = ctx.guard.subset_rows(x, mask)\n"
              "    kept = released.cuts\n")
    found = sorted(_renamed(ast.parse(source)), key=lambda at: at[1])
    assert found == [("g", 1), ("check", 2), ("kept", 3), ("edges", 4)]


def test_no_function_module_calls_the_gate():
    calls = {(path.name, where, line) for path in WALKED
             for where, line in _gate_calls(ast.parse(path.read_text(encoding="utf-8")))}
    assert not calls, ("functions call the release gate themselves; return a declaration (cells=True), or yield "
                       f"one part-way (dsfed_server.disclosure.declared): {sorted(calls)}")


def test_the_walk_finds_a_call_of_the_gate():
    source = ("def f(ctx):\n    return ctx.guard.release(cells)\n"
              "from dsfed_server.disclosure.gate import release_local\n"
              "def g(ctx, guard, cuts):\n"
              "    guard.group_cells(codes, 4, rows)\n"
              "    def advance(pooled, floor):\n"
              "        self.cuts.record(kept)\n"
              "        return ctx.guard.agreed(cells, rows, out)\n"
              "    cuts.fits(kept, pooled, floor)\n"
              "    rows = ctx.guard.subset_rows(x, mask, condition)\n"
              "    guard.min_count(n, 'records'), self.cuts.dominated(kept, pooled, squares, floor)\n"
              "    return self.coarsened(breaks), guard.rule('disclosure.q_threshold')\n")
    assert _gate_calls(ast.parse(source)) == [("f", 2), ("<module>", 3), ("g", 5), ("g", 7), ("g", 8), ("g", 9),
                                              ("g", 10), ("g", 11)]


class _Guard:
    """What :func:`declared.run` asks of a Guard here: a release of categories that refuses a table with a
    cell below 3 records, and otherwise renders the released counts."""

    def release(self, cells: Categories) -> Any:
        counts = np.bincount(cells.codes, minlength=int(np.prod(cells.shape)))
        if np.any((counts > 0) & (counts < 3)):
            raise DisclosureRefusal("a cell below 3", rule="disclosure.q_threshold")
        return cells.render(counts)


def _table(codes: list[int]) -> Categories:
    return Categories(np.asarray(codes, dtype=np.int64), (2,), lambda released: released.tolist())


def test_the_service_releases_each_declared_step_and_sends_back_what_it_released():
    def function():
        first = yield _table([0, 0, 0, 1, 1, 1])
        try:
            yield _table([0, 1, 1, 1])
        except DisclosureRefusal as refused:  # raised where the function yielded
            return {"first": first, "second": refused.rule}

    assert declared.run(function(), _Guard()) == {"first": [3, 3], "second": "disclosure.q_threshold"}


def test_an_uncaught_refusal_of_a_step_refuses_the_call():
    def function():
        yield _table([0, 1, 1, 1])
        return {"mean": 1.0}

    with pytest.raises(DisclosureRefusal, match="a cell below 3"):
        declared.run(function(), _Guard())



class _Cuts:
    """What :func:`declared.release` asks of a protocol's cuts, noting each call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def record(self, cuts: Any) -> None:
        self.calls.append(("record", list(cuts)))

    def record_cells(self, released: Any, values: Any, bounds: Any, counts: Any) -> None:
        self.calls.append(("record_cells", list(released), list(bounds)))

    def audited(self, values: Any, bounds: Any, counts: Any, release: Any) -> Any:
        self.calls.append(("audited", list(bounds)))
        return release


@pytest.mark.parametrize("cells, calls", [
    ({}, [("record", ["root"])]),
    ({"values": np.zeros(3), "bounds": ["on p"], "counts": np.ones(2)},
     [("record_cells", ["root"], ["on p"])]),
])
def test_a_protocols_cuts_are_recorded_with_their_cells_kept(cells, calls):
    cuts = _Cuts()
    step = declared.ProtocolCells(cuts, ["root"], **cells)  # type: ignore[arg-type]
    assert declared.release(_Guard(), step) is None  # type: ignore[arg-type]
    assert cuts.calls == calls


def test_audited_cells_record_their_cuts_and_release_the_result_only_once_every_site_agrees():
    cuts = _Cuts()
    step = declared.ProtocolCells(cuts, ["root"], np.zeros(3), ["on p"], np.ones(2),  # type: ignore[arg-type]
                                  audited=True, result={"table": 1})
    agreed = declared.release(_Guard(), step)  # type: ignore[arg-type]
    assert cuts.calls == [("audited", ["on p"])]  # nothing recorded before the sites agree
    assert agreed() == {"table": 1} and cuts.calls[-1] == ("record", ["root"])


class _JointGuard:
    """What :func:`declared.release` asks of a Guard for joint cells: merges both scores' cuts in pairs once."""

    def joint_cells(self, xa: Any, xb: Any, cuts_a: Any, cuts_b: Any, rows: Any) -> Any:
        return cuts_a[1::2], cuts_b[1::2], f"merged {len(xa)} records"


def test_joint_cells_send_back_the_cuts_released_and_why():
    step = declared.JointCells(np.zeros(5), np.ones(5), ("a0", "a1"), ("b0", "b1", "b2"),  # type: ignore[arg-type]
                               None)
    assert declared.release(_JointGuard(), step) == (("a1",), ("b1",), "merged 5 records")  # type: ignore[arg-type]


class _Noted:
    """A Guard or a protocol's cuts that notes each call of a method (name, arguments) and answers its name."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> str:
            self.calls.append((method, args, kwargs))
            return f"{method} answered"

        return call


@pytest.mark.parametrize("make, method, args, kwargs", [
    (lambda cuts: declared.SubsetRows("table", "mask", "condition"), "subset_rows",
     ("table", "mask", "condition"), {}),
    (lambda cuts: declared.DerivedCuts(("cells",), ("rows of 1",), "rows", strata=("groups",)), "derived_cuts",
     (["cells"], ["rows of 1"], "rows"), {"strata": ("groups",)}),
    (lambda cuts: declared.DerivedCuts([], ["level"], None, what="the map's knots", instead="or fewer steps"),
     "derived_cuts", ([], ["level"], None), {"strata": (), "what": "the map's knots", "instead": "or fewer steps"}),
    (lambda cuts: declared.ReferenceEdges("p", "edges", "root"), "reference_edges", ("p", "edges", "root"), {}),
    (lambda cuts: declared.ExactSums("rows", (("f", ("age",), None),)), "exact_sums",
     ("rows", [("f", ("age",), None)], None), {"steps": 1, "alone": False, "levels": (), "sets": ()}),
    (lambda cuts: declared.ExactSums("rows", [], ["group"], hint="fit it pooled", steps=3, alone=True,
                                     levels=["level"], sets=["set"]), "exact_sums",
     ("rows", [], ["group"]), {"hint": "fit it pooled", "steps": 3, "alone": True, "levels": ["level"],
                               "sets": ["set"]}),
    (lambda cuts: declared.QuantilesOf("rows", "log(age)", ("age",)), "quantiles_of", ("rows", "log(age)", ("age",)),
     {}),
    (lambda cuts: declared.CandidateCuts(cuts, ["c"], "counts", "floor"), "fits", (["c"], "counts", "floor", None), {}),
    (lambda cuts: declared.CandidateCuts(cuts, ["c"], "counts", "floor", ["h"]), "fits",
     (["c"], "counts", "floor", ["h"]), {}),
    (lambda cuts: declared.DominatedCells(cuts, ["c"], "counts", "squares", "floor"), "dominated",
     (["c"], "counts", "squares", "floor"), {}),
    (lambda cuts: declared.PlacedCuts(cuts, ["c"], "counts", "floor", move=True), "placed",
     (["c"], "counts", "floor"), {"move": True}),
])
def test_each_declaration_goes_to_its_check_and_sends_back_what_it_answered(make, method, args, kwargs):
    """What a subset, a derived column, a reference or exact sums record goes through the call's Guard; a
    protocol's decisions on pooled counts through its cuts (which hold the guard of the call that began it)."""
    guard, cuts = _Noted(), _Noted()
    assert declared.release(guard, make(cuts)) == f"{method} answered"  # type: ignore[arg-type]
    asked = cuts if method in ("fits", "placed", "dominated") else guard
    assert asked.calls == [(method, args, kwargs)] and not (guard if asked is cuts else cuts).calls


def test_a_function_that_keeps_a_subset_receives_its_rows_and_a_refusal_where_it_yielded():
    class Subsets:
        def subset_rows(self, parent: Any, mask: Any, condition: Any) -> Any:
            if int(np.sum(mask)) < 3:
                raise DisclosureRefusal("subset would hold fewer rows than the site's minimum of 3",
                                        rule="disclosure.subset_min")
            return np.flatnonzero(mask).tolist()

    def function(mask: list[bool]):
        rows = yield declared.SubsetRows("D", np.asarray(mask))
        return {"rows": rows}

    assert declared.run(function([True, False, True, True]), Subsets()) == {"rows": [0, 2, 3]}  # type: ignore[arg-type]
    with pytest.raises(DisclosureRefusal, match="fewer rows than the site's minimum"):
        declared.run(function([True, False, False, True]), Subsets())  # type: ignore[arg-type]
