"""A site holds the columns a call reads once: a derived table keeps the outcome column it was made
from (not a float copy of it) and its parent's record positions, and adds only the columns it
computes. Measured with tracemalloc (numpy reports its buffers to it) around real calls at one
in-process site of a million records; the expected sizes are counted by hand from the table's shape."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pandas as pd
import pytest
from rref import r_eval
from sitekit import NO_NOISE, make_sites

from conftest import inprocess_builder
from dsfed_client import Call, Ref
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.synthetic import binormal

N = 1_000_000
FLOAT = 8 * N  # one float64 column of the table


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    frame = pd.DataFrame(binormal(N, np.random.default_rng(11), auc=0.8, prevalence=0.3))
    provisioned, services = make_sites(tmp_path_factory.mktemp("shared"), {"site1": frame}, rules=NO_NOISE)
    return {"provisioned": provisioned, "services": services, "frame": frame}


def _held_by(call) -> tuple[int, int]:
    """The bytes a call leaves held, and its peak above what was held before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before, peak - before


def test_a_derived_table_adds_only_the_column_it_computes(site):
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t", variables=["y", "score"])
        held, peak = _held_by(lambda: session.assign("C", Call("calibrationFrameDS", Ref("D$y"), Ref("D$score"))))
        fit = ds_glm(session, "y ~ lp", "C")  # the calibration intercept and slope, on the shared column
    # lp = logit(p) is 8 bytes a record; a float or int64 copy of y, or of the records' positions,
    # would be 8 more each
    assert 0.95 * FLOAT < held < 1.1 * FLOAT
    assert peak < 1.6 * FLOAT  # 1 - p, divided and logged in place: no second column-sized array
    y, p = site["frame"]["y"].to_numpy(dtype=float), site["frame"]["score"].to_numpy(dtype=float)
    reference = r_eval("coef(glm(y ~ qlogis(p), family = binomial))", y=y, p=p)
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)
