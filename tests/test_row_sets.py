"""A subset symbol holds the positions of its rows in the table it subsets, not a copy of its columns
(``dsfed_server/rowsets.py``). Measured with tracemalloc (numpy reports its buffers to it) around real
assign calls at one in-process site; the expected sizes are counted by hand from the subsets' sizes.
What is read through a subset -- a fit, a mean, a subset of it -- equals R on the same rows of the
site's data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rref import r_eval
from sitekit import held_by, make_sites

from conftest import inprocess_builder
from dsfed_client import Call, Ref
from dsfed_client.aggregation import last_release
from dsfed_client.analyses.glm import ds_glm
from dsfed_client.errors import FederatedCallError
from dsfed_server.synthetic import binormal

N = 400_000
POSITION = 4  # bytes a kept record: an int32 position in the site table
COPY = 8 + 8 + 8 + 8  # bytes a record of a copy of the table: y, x2 (int64), score, x1 (float64)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    frame = pd.DataFrame(binormal(N, np.random.default_rng(21), auc=0.8, prevalence=0.3))
    provisioned, services = make_sites(tmp_path_factory.mktemp("rowsets"), {"site1": frame})
    return {"provisioned": provisioned, "services": services, "frame": frame}


def test_subsets_hold_row_positions_and_read_as_the_rows_they_name(site):
    frame = site["frame"]
    first = frame[frame["x1"] > 0]
    second = first[first["score"] < 0.5]
    third = second[second["x2"] == 1]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        held_first, _ = held_by(lambda: session.assign("S", Call("dataFrameSubsetDS2", "D", "D$x1", "0", 5)))
        # a subset of the subset: positions in D, not in a table built from S
        held_second, peak_second = held_by(
            lambda: session.assign("S2", Call("dataFrameSubsetDS2", "S", "S$score", "0.5", 3)))
        session.assign("S3", Call("dataFrameSubsetDS2", "S2", "S2$x2", "1", 1, **{"keep.cols": [1, 2]}))
        fit = ds_glm(session, "y ~ score + x1", "S2")
        means = session.aggregate("meanDS", Ref("S3$score"))["site1"]
        classes = session.aggregate("classDS", Ref("S3"))["site1"]
        with pytest.raises(FederatedCallError, match="no column 'x1'.*columns: y, score"):
            session.aggregate("meanDS", Ref("S3$x1"))
    # the positions alone (a copy would hold 32 bytes a record: 8 x as much)
    assert held_first < 1.1 * POSITION * len(first) + 65_536 < COPY * len(first)
    assert held_second < 1.1 * POSITION * len(second) + 65_536 < COPY * len(second)
    # S's rows are not built into a table to subset it: the call reads S$score and the site column the
    # condition's cut is checked in (a sorted copy of each), not S's four columns (32 bytes a record more)
    read = 8 * len(first) + 8 * N
    assert peak_second < 2 * read
    reference = r_eval("coef(glm(y ~ score + x1, family = binomial))", y=second["y"].to_numpy(dtype=float),
                       score=second["score"].to_numpy(), x1=second["x1"].to_numpy())
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)
    assert means["Nvalid"] == len(third)
    assert means["EstimatedMean"] == pytest.approx(float(r_eval("mean(s)", s=third["score"].to_numpy())[0]), rel=1e-12)
    assert classes == "data.frame"


def test_complete_cases_of_a_table_hold_row_positions(tmp_path):
    """``completeCasesDS`` of a table with missing values keeps the positions of its complete rows;
    what is read through it is the complete rows (R's ``complete.cases``)."""
    rng = np.random.default_rng(22)
    frame = pd.DataFrame(binormal(100_000, rng, auc=0.75, prevalence=0.4))
    frame.loc[rng.uniform(size=len(frame)) < 0.2, "x1"] = np.nan
    provisioned, services = make_sites(tmp_path, {"site1": frame})
    complete = frame[frame.notna().all(axis=1)]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        held, _ = held_by(lambda: session.assign("C", Call("completeCasesDS", "D")))
        fit = ds_glm(session, "y ~ x1 + x2", "C")
    assert held < 1.1 * POSITION * len(complete) + 65_536 < COPY * len(complete)
    reference = r_eval("coef(glm(y ~ x1 + x2, family = binomial))", y=complete["y"].to_numpy(dtype=float),
                       x1=complete["x1"].to_numpy(), x2=complete["x2"].to_numpy(dtype=float))
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)


def test_a_table_combined_from_columns_shares_them(site):
    """``dataFrameDS`` and ``cbindDS`` of a table's columns hold those columns, not copies; the
    combined table reads as the columns it names (R's ``data.frame`` of them)."""
    frame = site["frame"]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        held, _ = held_by(lambda: session.assign("T", Call("dataFrameDS", "D$x1,D$score,D$y", None, False, True,
                                                               "D$x1,D$score,D$y", True, False)))
        held_cbind, _ = held_by(lambda: session.assign("B", Call("cbindDS", "D$score,D$x2", "score,x2")))
        fit = ds_glm(session, "y ~ x1 + score", "T")
        means = session.aggregate("meanDS", Ref("B$x2"))["site1"]
    assert held < 65_536 and held_cbind < 65_536  # copies would hold 24 and 16 bytes a record
    reference = r_eval("coef(glm(y ~ x1 + score, family = binomial))", y=frame["y"].to_numpy(dtype=float),
                       x1=frame["x1"].to_numpy(), score=frame["score"].to_numpy())
    np.testing.assert_allclose(fit.params, reference, rtol=1e-8)
    assert means["EstimatedMean"] == pytest.approx(float(frame["x2"].mean()), rel=1e-12)


def test_a_subset_made_inside_another_call_is_read_as_its_rows(site):
    """A subset call nested in another call (``dimDS(dataFrameSubsetDS2(...))``, ``completeCasesDS(
    subsetRowsDS(...))``) is read as the table of its rows, as a subset symbol is."""
    frame = site["frame"]
    kept = frame[frame["x1"] > 0.5]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        dims = session.aggregate("dimDS", Call("dataFrameSubsetDS2", "D", "D$x1", "0.5", 5))["site1"]
        session.assign("C", Call("completeCasesDS", Call("subsetRowsDS", "D", "x1", ">", 0.5)))
        means = session.aggregate("meanDS", Ref("C$score"))["site1"]
    assert list(dims) == [len(kept), frame.shape[1]]
    assert means["Nvalid"] == len(kept)
    assert means["EstimatedMean"] == pytest.approx(float(kept["score"].mean()), rel=1e-12)


def test_a_subset_that_drops_the_source_of_a_computed_column_says_so(tmp_path):
    """``rcsFrameDS`` computes ``lp1`` from ``lp``; a subset keeping ``y`` only cannot read ``lp1``,
    and the error says which column to keep (as for the table itself)."""
    rng = np.random.default_rng(23)
    frames = {s: pd.DataFrame(binormal(5000, rng, auc=0.8, prevalence=0.3)) for s in ("a", "b", "c")}
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t", variables=["y", "score"])
        knots = last_release(session.aggregation(True).steps("rcsKnotsDS", Ref("D$y"), Ref("D$score")))
        session.assign("S", Call("rcsFrameDS", Ref("D$y"), Ref("D$score"),
                                 Ref(knots["knots_symbol"], knots["knots_digest"])))
        session.assign("S2", Call("dataFrameSubsetDS2", "S", "S$lp", "0", 5, **{"keep.cols": [1]}))
        with pytest.raises(FederatedCallError, match="'lp1' is computed from 'lp', which this table no longer has"):
            session.aggregate("meanDS", Ref("S2$lp1"))


def test_a_glm_on_a_subset_builds_only_the_columns_its_formula_names(tmp_path):
    """``ds_glm(y ~ score, S)`` on a subset of a table of ten columns reads y and score of the
    subset's rows: its peak stays below what building the subset's ten columns alone would take
    (80 bytes a kept record; 116 were measured before); the fit is R's on the same rows."""
    rng = np.random.default_rng(24)
    frame = pd.DataFrame(binormal(N, rng, auc=0.8, prevalence=0.3))
    for k in range(6):
        frame[f"z{k}"] = rng.normal(size=N)
    provisioned, services = make_sites(tmp_path, {"site1": frame})
    kept = frame[frame["x1"] > 0]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.assign("S", Call("dataFrameSubsetDS2", "D", "D$x1", "0", 5))
        for column in frame.columns:  # the site's columns read before anything is measured
            session.aggregate("meanDS", Ref(f"D${column}"))
        fits = []
        _, peak = held_by(lambda: fits.append(ds_glm(session, "y ~ score", "S")))
    assert peak < 10 * 8 * len(kept)
    reference = r_eval("coef(glm(y ~ score, family = binomial))", y=kept["y"].to_numpy(dtype=float),
                       score=kept["score"].to_numpy())
    np.testing.assert_allclose(fits[0].params, reference, rtol=1e-8)


def test_calls_that_read_a_subsets_shape_or_one_column_do_not_build_it(site):
    """``dimDS``, ``colnamesDS`` and ``exists(where = S)`` read a subset's rows and column names only;
    ``subsetRowsDS`` and ``subsetDS`` of a subset read the condition's column (and, for complete
    cases, one column at a time): none builds the subset's four columns (32 bytes a record). The
    answers are the pandas subsets' own."""
    frame = site["frame"]
    first = frame[frame["x1"] > 0]
    second = first[first["score"] > 0.3]
    with inprocess_builder(site["provisioned"], site["services"]).login() as session:
        session.assign_table("D", "P.t")
        session.assign("S", Call("dataFrameSubsetDS2", "D", "D$x1", "0", 5))
        answers, peaks = [], []
        for call in (lambda: session.aggregate("dimDS", Ref("S")), lambda: session.aggregate("colnamesDS", Ref("S")),
                     lambda: session.aggregate("exists", "x2", Ref("S"))):
            _, peak = held_by(lambda: answers.append(call()["site1"]))
            peaks.append(peak)
        _, peak_rows = held_by(lambda: session.assign("R", Call("subsetRowsDS", "S", "score", ">", 0.3)))
        _, peak_dsbase = held_by(lambda: session.assign("B", Call("subsetDS", "S", True, None, None, 1, 0.7, "score")))
        means = [session.aggregate("meanDS", Ref(f"{t}$x2"))["site1"] for t in ("R", "B")]
    assert answers == [[len(first), 4], ["y", "score", "x1", "x2"], True]
    assert max(peaks) < 1_000_000 < 32 * len(first)
    read = 8 * len(first) + 8 * N  # S$score, and the site column whose cut history checks the condition
    assert peak_rows < 2 * read and peak_dsbase < 2 * read
    third = first[first["score"] > 0.7]
    assert [m["Nvalid"] for m in means] == [len(second), len(third)]
    assert means[0]["EstimatedMean"] == pytest.approx(float(second["x2"].mean()), rel=1e-12)
