"""A site holds the columns a call reads once: a derived table keeps the outcome column it was made
from (not a float copy of it) and its parent's record positions, and adds only the columns it
computes. Measured with tracemalloc (numpy reports its buffers to it) around real calls at one
in-process site of a million records; the expected sizes are counted by hand from the table's shape."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from rref import r_eval
from sitekit import NO_NOISE, held_by, make_sites

from conftest import inprocess_builder
from dsfed_client import Call, Ref
from dsfed_client.aggregation import last_release
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.synthetic import binormal

N = 1_000_000
FLOAT = 8 * N  # one float64 column of the table


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    frame = pd.DataFrame(binormal(N, np.random.default_rng(11), auc=0.8, prevalence=0.3))
    provisioned, services = make_sites(tmp_path_factory.mktemp("shared"), {"site1": frame}, rules=NO_NOISE)
    return {"provisioned": provisioned, "services": services, "frame": frame}


def test_a_derived_table_adds_only_the_column_it_computes(site):
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t", variables=["y", "score"])
        held, peak = held_by(lambda: session.assign("C", Call("calibrationFrameDS", Ref("D$y"), Ref("D$score"))))
        fit = ds_glm(session, "y ~ lp", "C")  # the calibration intercept and slope, on the shared column
    # lp = logit(p) is 8 bytes a record; a float or int64 copy of y, or of the records' positions,
    # would be 8 more each
    assert 0.95 * FLOAT < held < 1.1 * FLOAT
    assert peak < 1.6 * FLOAT  # 1 - p, divided and logged in place: no second column-sized array
    y, p = site["frame"]["y"].to_numpy(dtype=float), site["frame"]["score"].to_numpy(dtype=float)
    reference = r_eval("coef(glm(y ~ qlogis(p), family = binomial))", y=y, p=p)
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)


@pytest.fixture(scope="module")
def three_sites(tmp_path_factory: pytest.TempPathFactory) -> dict:
    rng = np.random.default_rng(12)
    frames = {s: pd.DataFrame(binormal(N // 3, rng, auc=0.8, prevalence=0.3)) for s in ("a", "b", "c")}
    provisioned, services = make_sites(tmp_path_factory.mktemp("spline"), frames, rules=NO_NOISE)
    return {"provisioned": provisioned, "services": services, "frames": frames}


def test_the_spline_table_stores_lp_and_computes_its_basis_when_read(three_sites):
    """``rcsFrameDS`` keeps lp = logit(p) (8 bytes a record, over the three sites together) and
    computes the basis terms lp1, lp2 when a call reads them: the GLM a batch at a time, ``S$lp1``
    whole for the call. The fit and a basis column equal R's ``rms::rcs`` at the same knots."""
    frames = three_sites["frames"]
    with inprocess_builder(three_sites["provisioned"], three_sites["services"]).login() as session:
        session.assign_table("D", "P.t", variables=["y", "score"])
        knots = last_release(session.aggregation(True).steps("rcsKnotsDS", Ref("D$y"), Ref("D$score")))
        handle = Ref(knots["knots_symbol"], knots["knots_digest"])
        held, _ = held_by(lambda: session.assign("S", Call("rcsFrameDS", Ref("D$y"), Ref("D$score"), handle)))
        fit = ds_glm(session, "y ~ lp + lp1 + lp2", "S", secure=True, null_model=False)
        means = session.aggregate("meanDS", Ref("S$lp2"))
    # lp alone; with lp1 and lp2 stored the three sites would hold 3 x as much
    assert 0.95 * FLOAT < held < 1.3 * FLOAT
    pooled = pd.concat(frames.values(), ignore_index=True)
    k = np.asarray(knots["knots"])
    reference = r_eval("coef(glm(y ~ rms::rcs(qlogis(p), k), family = binomial))",
                       y=pooled["y"].to_numpy(dtype=float), p=pooled["score"].to_numpy(dtype=float), k=k)
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)
    p_a = frames["a"]["score"].to_numpy(dtype=float)
    mean_a = r_eval("mean(rms::rcs(qlogis(p), k)[, 3])", p=p_a, k=k)
    assert means["a"]["EstimatedMean"] == pytest.approx(float(mean_a[0]), rel=1e-10)


def test_a_computed_column_carries_its_tables_history_as_a_stored_one():
    """``S$lp1`` of a table that computes it has the table's attrs (its records' positions, its
    columns' provenance), as ``S$lp`` has: the release history counts what is released from it."""
    from dsfed_server.disclosure.differencing import ROWS, whole_table
    from dsfed_server.functions.splines import SplineTerm
    from dsfed_server.modelframe import COMPUTED, ComputedColumn, computed_column

    lp = np.linspace(-3, 3, 7)
    table = pd.DataFrame({"y": np.arange(7) % 2, "lp": lp})
    table.attrs[ROWS] = whole_table("test-lineage", 7)
    table.attrs[COMPUTED] = {"lp1": ComputedColumn("lp", SplineTerm((-2.0, 0.0, 1.0, 2.5), 0))}
    lp1 = computed_column(table, "lp1")
    assert lp1.attrs == table["lp"].attrs and lp1.attrs[ROWS] is table.attrs[ROWS]
    expected = r_eval("rms::rcs(lp, c(-2, 0, 1, 2.5))[, 2]", lp=lp)  # rms's first non-linear term
    np.testing.assert_allclose(lp1.to_numpy(), expected, rtol=1e-12)
    # a subset that dropped lp keeps the declaration (pandas carries attrs): reading lp1 says why it cannot
    from dsfed_core.errors import NotFound
    with pytest.raises(NotFound, match="computed from 'lp', which this table no longer has"):
        computed_column(table[["y"]], "lp1")
