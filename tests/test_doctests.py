"""The examples in the docstrings run (doctest), so the documented numbers cannot drift.

Each example's expected value is a hand computation stated beside it (a pooled mean and variance,
the H-L statistic of a small table, the DeLong moments of four scores, a binormal AUC) or the
documented output format of the results base."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "dsfed_client.results",
    "dsfed_client.params",
    "dsfed_client.pooling",
    "dsfed_client.analyses.discrimination",
    "dsfed_client.analyses.calibration",
    "dsfed_client.analyses.curves",
    "dsfed_client.analyses.recalibration",
    "dsfed_client.analyses.comparison",
    "dsfed_client.analyses.thresholds",
    "dsfed_client.analyses.decision",
    "dsfed_client.analyses.smooth_calibration",
    "dsfed_core.splines",
    "dsfed_client.analyses.meta",
    "dsfed_core.roc",
    "dsfed_core.calibration",
    "dsfed_server.disclosure.expressions",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no doctest examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed"
