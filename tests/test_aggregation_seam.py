"""One aggregation seam: the session decides how per-site parts become what the analyst sees.

The analyses never branch on the mode (read from their source), every analysis that releases
takes ``secure``, and a pooled analysis asks no site for a release of its own: the histogram AUC
with ``secure=True`` used to collect every site's plain ``lengthDS`` to choose its depth.
"""

from __future__ import annotations

import ast
import inspect
from importlib import import_module

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, GBSG2_SITES, audit_records, inprocess_builder
from dsfed_client.analyses.curves import auc_levels, ds_hist_auc
from rref import R_PROC, r_reference
from sitekit import ROOT, make_sites, rules_variant

NO_NOISE = ROOT / "disclosure_rules" / "testing-no-noise.toml"
ANALYSES = ("calibration", "curves", "decision", "discrimination", "glm", "recalibration", "suite",
            "smooth_calibration", "thresholds", "heterogeneity")
SEAM_ONLY = {"pooled", "pooled_steps", "secure_sum", "pooled_capability"}  # the session's releases by mode
ASSIGN_ONLY = {"ds_apply_recalibration"}  # stores a vector at the sites, releases nothing
PER_SITE_ONLY = {"ds_heterogeneity"}  # each site's own estimates: per-site releases by definition


def _mode_branches(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp)):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            if names & {"secure", "pooled"}:
                found.append(f"line {node.lineno}: branch on {sorted(names & {'secure', 'pooled'})}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SEAM_ONLY:
            found.append(f"line {node.lineno}: .{node.func.attr}()")
    return found


def test_no_analysis_branches_on_the_mode():
    offending = {}
    for name in ANALYSES:
        path = ROOT / "dsfed_client" / "analyses" / f"{name}.py"
        found = _mode_branches(ast.parse(path.read_text()))
        if found:
            offending[name] = found
    assert offending == {}
    # the check can fail: the seam itself branches and calls the session's pooled releases
    assert _mode_branches(ast.parse((ROOT / "dsfed_client" / "aggregation.py").read_text()))


def test_every_releasing_analysis_takes_secure():
    missing = []
    for name in ANALYSES:
        module = import_module(f"dsfed_client.analyses.{name}")
        for fname, func in vars(module).items():
            if (fname.startswith("ds_") or fname == "validate") and inspect.isfunction(func) \
                    and func.__module__ == module.__name__ and fname not in ASSIGN_ONLY | PER_SITE_ONLY:
                parameter = inspect.signature(func).parameters.get("secure")
                if parameter is None or "None" not in str(parameter.annotation):
                    missing.append(fname)
    assert missing == []


def _functions_since(provisioned, marks: dict[str, int]) -> set[str]:
    return {r["function"] for name, p in provisioned.items() for r in audit_records(p)[marks[name]:]}


def _hist_auc(tmp_path, rules, secure: bool):
    frames = {s: pd.read_csv(FIXTURES / s / "GBSG2" / "validation.csv")[["y", "score"]] for s in GBSG2_SITES}
    provisioned, services = make_sites(tmp_path, frames, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        marks = {name: len(audit_records(p)) for name, p in provisioned.items()}
        result = ds_hist_auc(session, "D$y", "D$score", secure=secure, roc_glm=False)
        called = _functions_since(provisioned, marks)
    return result, called, pd.concat(frames.values(), ignore_index=True)


def test_a_pooled_histogram_auc_asks_no_site_for_its_own_count(tmp_path):
    """The depth comes from a pooled count (table1DDS's total, checked pooled), not from every site's
    lengthDS: auc_levels of the 686 records as one noisy part. Noise off, the sites merge exact leaves
    of fewer than q records pooled with a neighbour (the test profile's small_bin_policy), and the AUC
    is pROC's AUC of the scores binned into the leaves released (ties within a leaf count one half,
    ``within_bin='tied'``)."""
    result, called, pooled = _hist_auc(tmp_path, NO_NOISE, secure=True)
    assert "lengthDS" not in called and "table1DDS" in called
    edges = result.histograms.edges
    grid = np.linspace(0, 1, 2 ** auc_levels(len(pooled), 1) + 1)
    assert all(np.isclose(grid, e).any() for e in edges) and edges.size > (grid.size - 1) // 2
    leaf = np.clip(np.searchsorted(edges, pooled.score.to_numpy(), side="right") - 1, 0, edges.size - 2)
    assert result.auc == pytest.approx(r_reference("proc_ref", R_PROC, y=pooled.y.to_numpy(),
                                                   p=leaf.astype(float))[0], rel=1e-12)


def test_a_per_site_histogram_auc_counts_with_lengthDS(tmp_path):
    """Per site, the count is the sites' lengthDS and the depth that of five noisy parts (bins the
    sites merge where a site's own bin holds fewer than q records)."""
    rules = rules_variant(tmp_path / "merge.toml", small_bin_policy='"merge"')
    result, called, pooled = _hist_auc(tmp_path, rules, secure=False)
    assert "lengthDS" in called and "table1DDS" not in called
    assert result.histograms.edges.size <= 2**auc_levels(len(pooled), len(GBSG2_SITES)) + 1
