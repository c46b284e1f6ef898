"""The release path is decided by each function's declaration, and only the disclosure layer calls the gate.

Every registry entry declares what its implementation returns (``cells``: a declaration of cells for the
release gate; ``pooled_only`` or ``relayable``: a protocol's steps; ``secure_sum``: additive fields), and the
service picks the release from that declaration (:meth:`dsfed_server.registry.FunctionSpec.release_of`):
a result the entry does not declare is a programming error, raised, never released. The walk over the
registry reads each implementation's return annotation, so a declaration that disagrees with its
function fails here, before any call runs it.

No module of :mod:`dsfed_server.functions` calls the gate itself (``guard.release``) or imports its
release functions: a function returns a declaration and the service releases it, or, for a release of
several steps (cells first, then sums computed on the released cells), it calls a named method of the
:class:`~dsfed_server.disclosure.checks.Guard`. The one exception is :func:`curves.placement_cells`, the
reference's bins released per site before the ROC-GLM's table is read through them.
"""

from __future__ import annotations

import ast
import types
import typing
from typing import Any

import numpy as np
import pytest

from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server.disclosure.gate import Categories, Intervals
from dsfed_server.disclosure.relay import PooledSteps
from dsfed_server.registry import REGISTRY, FunctionSpec, SecureSum, UndeclaredRelease
from sitekit import ROOT

FUNCTIONS = ROOT / "dsfed_server" / "functions"
# (module file, function): the releases of several steps that call the gate from dsfed_server/functions
SANCTIONED = {("curves.py", "placement_cells")}
# what the gate's module offers for releasing, which only the disclosure layer and the service call
GATE_RELEASES = {"release_local", "release_pooled"}


def _returned(spec: FunctionSpec) -> set[str]:
    """The releases an implementation's return annotation names: cells, steps or a value."""
    hint = typing.get_type_hints(spec.impl).get("return", Any)
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
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
])
def test_a_result_its_entry_does_not_declare_is_a_programming_error(declared, result, message):
    with pytest.raises(UndeclaredRelease, match=message):
        _spec(**declared).release_of(result)


def _gate_calls(tree: ast.Module) -> list[tuple[str, int]]:
    """(enclosing function, line) of each ``<...>guard.release(...)`` call and each import of the gate's
    release functions in a module."""
    found = []

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and where == "<module>":
            where = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "release":
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id == "guard") or (
                    isinstance(owner, ast.Attribute) and owner.attr == "guard"):
                found.append((where, node.lineno))
        if isinstance(node, ast.ImportFrom) and any(alias.name in GATE_RELEASES for alias in node.names):
            found.append((where, node.lineno))
        if isinstance(node, ast.Attribute) and node.attr in GATE_RELEASES:
            found.append((where, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "<module>")
    return found


def test_no_function_module_calls_the_gate_but_the_named_multi_step_releases():
    calls = {(path.name, where, line) for path in sorted(FUNCTIONS.glob("*.py"))
             for where, line in _gate_calls(ast.parse(path.read_text(encoding="utf-8")))}
    stray = {(module, where, line) for module, where, line in calls if (module, where) not in SANCTIONED}
    assert not stray, ("functions call the release gate themselves; return a declaration (cells=True) or call a "
                       f"named Guard method: {sorted(stray)}")
    assert {(module, where) for module, where, _ in calls} == SANCTIONED  # the exceptions are still needed


def test_the_walk_finds_a_call_of_the_gate():
    source = ("def f(ctx):\n    return ctx.guard.release(cells)\n"
              "from dsfed_server.disclosure.gate import release_local\n")
    assert _gate_calls(ast.parse(source)) == [("f", 2), ("<module>", 3)]

