"""Every registry function on the GBSG2 sites equals a pooled reference computed
independently with pandas/numpy from the fixture files, through both transports."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client import Call, Ref


def test_lengthDS_and_dimDS(gbsg2_session, gbsg2_frames):
    lengths = gbsg2_session.aggregate("lengthDS", Ref("D$age"))
    assert dict(lengths) == {s: len(f) for s, f in gbsg2_frames.items()}
    assert gbsg2_session.length("D$age").n == sum(len(f) for f in gbsg2_frames.values())
    dims = gbsg2_session.aggregate("dimDS", Ref("D"))
    assert dict(dims) == {s: list(f.shape) for s, f in gbsg2_frames.items()}
    # DataSHIELD clients send object names as strings: lengthDS("D$age")
    assert dict(gbsg2_session.aggregate_expr('lengthDS("D$age")')) == dict(lengths)


def test_colnamesDS_and_classDS(gbsg2_session, gbsg2_frames):
    names = gbsg2_session.aggregate("colnamesDS", Ref("D"))
    assert all(v == list(gbsg2_frames[s].columns) for s, v in names.items())
    expected = {"D": "data.frame", "D$age": "integer", "D$score": "numeric", "D$tgrade": "factor"}
    for ref, cls in expected.items():
        assert set(gbsg2_session.aggregate("classDS", Ref(ref)).values()) == {cls}


def test_meanDS_pooled(gbsg2_session, gbsg2_pooled, gbsg2_frames):
    for column in ("age", "score", "pnodes"):
        pooled = gbsg2_session.mean(f"D${column}")
        assert pooled.mean == pytest.approx(gbsg2_pooled[column].mean(), rel=1e-12)
        assert pooled.n_valid == len(gbsg2_pooled)
        for site, frame in gbsg2_frames.items():
            assert pooled.per_site[site] == pytest.approx(frame[column].mean(), rel=1e-12)
    raw = gbsg2_session.aggregate_expr("meanDS(D$age)")["site1"]
    assert set(raw) == {"EstimatedMean", "Nmissing", "Nvalid", "Ntotal", "ValidityMessage"}


def test_varDS_pooled(gbsg2_session, gbsg2_pooled):
    for column in ("age", "score", "estrec"):
        pooled = gbsg2_session.var(f"D${column}")
        assert pooled.variance == pytest.approx(np.var(gbsg2_pooled[column], ddof=1), rel=1e-12)


def test_quantileMeanDS_R_backed_equals_python_type7(gbsg2_session, gbsg2_frames):
    """The R-backed entry (R quantile type 7 through rpy2) against numpy's 'linear' method (= type 7)."""
    result = gbsg2_session.aggregate_expr("quantileMeanDS(D$score)")
    probs = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95]
    for site, frame in gbsg2_frames.items():
        expected = np.quantile(frame["score"].to_numpy(), probs, method="linear")
        got = [result[site][k] for k in ("5%", "10%", "25%", "50%", "75%", "90%", "95%")]
        np.testing.assert_allclose(got, expected, rtol=1e-13)
        assert result[site]["Mean"] == pytest.approx(frame["score"].mean(), rel=1e-13)


def test_table1DDS_pooled(gbsg2_session, gbsg2_pooled):
    table = gbsg2_session.table1d("D$horTh")
    expected = gbsg2_pooled["horTh"].value_counts()
    assert table.as_dict() == {k: int(expected[k]) for k in ("no", "yes")}


def test_table2DDS_pooled(gbsg2_session, gbsg2_pooled):
    table = gbsg2_session.table2d("D$y", "D$cens")
    expected = pd.crosstab(gbsg2_pooled["y"], gbsg2_pooled["cens"])
    assert table.rows == ["0", "1"] and table.cols == ["0", "1"]
    np.testing.assert_array_equal(table.counts, expected.reindex(index=[0, 1], columns=[0, 1], fill_value=0).to_numpy())


def test_histogramDS_pooled(gbsg2_session, gbsg2_pooled):
    breaks = [20, 42.5, 50.5, 58.5, 85]
    hist = gbsg2_session.histogram("D$age", breaks)
    # R's hist(): right-closed intervals, the first one closed on the left too
    expected = pd.cut(gbsg2_pooled["age"], breaks, right=True, include_lowest=True).value_counts(sort=False)
    np.testing.assert_array_equal(hist.edges, breaks)
    np.testing.assert_array_equal(hist.counts, expected.to_numpy())


def test_subsetDS_then_mean(gbsg2_session, gbsg2_pooled):
    gbsg2_session.assign("older", Call("subsetRowsDS", Ref("D"), "age", ">=", 50))
    pooled = gbsg2_session.mean("older$score")
    subset = gbsg2_pooled[gbsg2_pooled["age"] >= 50]
    assert pooled.n_valid == len(subset)
    assert pooled.mean == pytest.approx(subset["score"].mean(), rel=1e-12)
    gbsg2_session.assign("pre", Call("subsetRowsDS", Ref("D"), "menostat", "==", "Pre"))
    assert gbsg2_session.length("pre$age").n == int((gbsg2_pooled["menostat"] == "Pre").sum())


def test_assign_table_variables_column_and_symbols(gbsg2_session):
    gbsg2_session.assign_table("V", "GBSG2.validation", variables=["y", "score"])
    assert set(map(tuple, gbsg2_session.aggregate("colnamesDS", Ref("V")).values())) == {("y", "score")}
    gbsg2_session.assign_expr("age", "D$age")
    symbols = gbsg2_session.symbols()
    for listing in symbols.values():
        assert {"name": "age", "class": "integer"} in listing
    gbsg2_session.remove("age")
    assert all(all(s["name"] != "age" for s in listing) for listing in gbsg2_session.symbols().values())


def test_functions_listing_has_docs(gbsg2_session):
    listing = gbsg2_session.functions()["site1"]
    by_name = {f["name"]: f for f in listing["functions"]}
    assert {"meanDS", "table2DDS", "quantileMeanDS", "subsetRowsDS"} <= set(by_name)
    assert by_name["quantileMeanDS"]["backend"] == "R" and by_name["quantileMeanDS"]["available"]
    assert all(f["doc"] for f in listing["functions"])
    assert "disclosure.q_threshold" in by_name["meanDS"]["checks"]


def test_a_pooled_only_protocol_asked_per_site_is_refused_by_its_declaration(gbsg2_session):
    """The registry declares the protocols released only pooled (``pooled_only``: the Hosmer-Lemeshow
    deciles, the spline knots and errors); the service refuses them per site, before the function
    runs, naming the function and the pooled option, and the same calls pooled are answered."""
    from dsfed_client import FederatedCallError

    with pytest.raises(FederatedCallError) as exc:
        gbsg2_session.aggregate("decileGroupsDS", Ref("D$y"), Ref("D$score"), 10)
    assert len(exc.value.failures) == 5
    for failure in exc.value.failures.values():
        assert failure.message.startswith("decileGroupsDS runs only as a pooled release over the sites")
        assert "pooled option" in failure.hint
    pooled = gbsg2_session.pooled("decileGroupsDS", Ref("D$y"), Ref("D$score"), 10)
    assert pooled["df"] == 8
