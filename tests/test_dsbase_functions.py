"""The dsBase-compatible registry entries (namesDS, levelsDS, isValidDS, histogramDS1/2, corDS,
dataFrameSubsetDS2) through dsfed's native client, over HTTP and in-process: results against
pooled references (pandas/numpy) and R, and each disclosure rule refusing with its name."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import GBSG2_SITES, inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_server.functions.histogram import outward_range, r_seq
from rref import r_eval
from sitekit import make_sites, rules_variant


def _refused(exc: pytest.ExceptionInfo, site: str, rule: str) -> None:
    err = exc.value.failures[site]
    assert (err.kind, err.rule) == ("disclosure_refused", rule), err


# --- names, levels, validity -------------------------------------------------------------------


def _valid(values: pd.Series, q: int = 5) -> bool:
    """isValidDS's rule, from the fixture data: no level (or length) with 0 < n < q."""
    counts = pd.Series([len(values)]) if pd.api.types.is_numeric_dtype(values) else values.value_counts()
    return not ((counts > 0) & (counts < q)).any()


def test_namesDS_levelsDS_isValidDS(gbsg2_session, gbsg2_frames):
    assert dict(gbsg2_session.aggregate_expr('namesDS("D")')) == {s: list(f.columns) for s, f in gbsg2_frames.items()}
    with pytest.raises(FederatedCallError) as exc:
        gbsg2_session.aggregate_expr('namesDS("D$age")')
    assert "not a list" in exc.value.failures["site1"].message
    for pattern in ("levelsDS(D$tgrade)", 'levelsDS("D$tgrade")'):
        assert set(map(str, gbsg2_session.aggregate_expr(pattern).values())) == {
            str({"Levels": ["I", "II", "III"], "ValidityMessage": "VALID ANALYSIS"})}
    for column in ("age", "tgrade", "horTh"):
        got = dict(gbsg2_session.aggregate_expr(f"isValidDS(D${column})"))
        assert got == {s: _valid(f[column]) for s, f in gbsg2_frames.items()}
    assert not all(gbsg2_session.aggregate_expr("isValidDS(D$tgrade)").values())  # site3 has 3 of grade I
    assert set(gbsg2_session.aggregate_expr("isValidDS(D)").values()) == {True}


def test_isValidDS_and_levelsDS_on_small_data(tmp_path):
    frames = {
        "small": pd.DataFrame({"x": [1.0, 2.0, 3.0], "g": ["a", "b", "a"]}),
        "rare": pd.DataFrame({"x": np.arange(20.0), "g": ["a"] * 17 + ["b"] * 3}),
        "ids": pd.DataFrame({"x": np.arange(20.0), "g": [f"p{i:02d}" for i in range(20)]}),
    }
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        assert dict(session.aggregate_expr("isValidDS(T$x)")) == {"small": False, "rare": True, "ids": True}
        assert dict(session.aggregate_expr("isValidDS(T$g)")) == {"small": False, "rare": False, "ids": False}
        assert dict(session.aggregate_expr("isValidDS(T)")) == {"small": False, "rare": True, "ids": True}
        with pytest.raises(FederatedCallError) as exc:  # 20 levels in 20 rows; 2 levels in 3 rows
            session.aggregate_expr("levelsDS(T$g)")
        assert set(exc.value.failures) == {"ids", "small"}
        _refused(exc, "ids", "disclosure.factor_levels_density")
        _refused(exc, "small", "disclosure.factor_levels_density")
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate_expr("levelsDS(T$x)")
        assert exc.value.failures["small"].kind == "bad_call"


# --- histograms ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_outward_range_covers_and_hides_the_extremes(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.normal(rng.uniform(-50, 50), rng.uniform(0.01, 30), 200), [rng.uniform(100, 500)]])
    q = 5
    lo, hi = outward_range(values, q)
    assert lo <= values.min() and hi >= values.max() and lo < hi
    assert outward_range(values, q) == (lo, hi)  # deterministic: repeating it reveals nothing new
    assert outward_range(values[::-1].copy(), q) == (lo, hi)
    if lo == -hi and np.log10(hi) % 1 == 0 and hi >= 10 * np.abs(values).max():
        # no grid has q-record end cells (a lone value of the other sign): not even the signs are told
        assert (values < 0).sum() < q or (values > 0).sum() < q
        return
    steps = [m * 10.0**k for k in range(-6, 5) for m in (1, 2, 2.5, 5)]
    on_grid = [s for s in steps if np.isclose(lo / s, round(lo / s), rtol=0, atol=1e-9)
               and np.isclose(hi / s, round(hi / s), rtol=0, atol=1e-9)]
    # both ends lie on a grid whose end cells each hold at least q values
    assert any(np.sum(values <= lo + s) >= q and np.sum(values >= hi - s) >= q for s in on_grid)


def test_outward_range_by_hand():
    ages = np.array([29, 34, 36, 41, 41, 42, 43, 43] + [55] * 30 + [64, 65, 65, 65, 66, 66, 67, 69], dtype=float)
    assert outward_range(ages, 5) == (25.0, 75.0)  # [25, 50] and [50, 75] hold >= 5; steps 10 and 20 do not
    assert outward_range(np.array([-0.5] + [3.0] * 10), 5) == (-100.0, 100.0)  # a lone negative value
    assert outward_range(np.array([7.0] * 6), 5) == (7.0, 7.01)


def test_histogramDS1_range_covers_the_pooled_data(gbsg2_session, gbsg2_pooled):
    ranges = gbsg2_session.aggregate_expr("histogramDS1(D$age, 1, 3, 0.25)")
    assert min(r[0] for r in ranges.values()) <= gbsg2_pooled["age"].min()
    assert max(r[1] for r in ranges.values()) >= gbsg2_pooled["age"].max()
    assert all(r[0] < gbsg2_pooled["age"].min() or r[0] % 5 == 0 for r in ranges.values())


def r_hist(values: np.ndarray, lo: float, hi: float, n: int) -> dict[str, np.ndarray]:
    out = r_eval(f"h <- hist(x, breaks = seq({lo!r}, {hi!r}, by = ({hi!r} - {lo!r}) / {n}), plot = FALSE); "
                 "c(h$breaks, h$counts, h$density, h$mids)", x=values)
    return {"breaks": out[: n + 1], "counts": out[n + 1 : 2 * n + 1], "density": out[2 * n + 1 : 3 * n + 1],
            "mids": out[3 * n + 1 :]}


@pytest.mark.parametrize("column,lo,hi,n", [("age", 20.0, 80.0, 2), ("score", 0.3, 1.0, 2), ("age", 0.0, 100.0, 2)])
def test_histogramDS2_equals_R_hist(gbsg2_session, gbsg2_frames, column, lo, hi, n):
    result = gbsg2_session.aggregate_expr(f"histogramDS2(D${column}, {n}, {lo}, {hi}, 1, 3, 0.25)")
    for site, frame in gbsg2_frames.items():
        ref = r_hist(frame[column].to_numpy(float), lo, hi, n)
        h = result[site]["histobject"]
        assert result[site]["invalidcells"] == 0 and h["xname"] == "xvect" and h["equidist"] is True
        np.testing.assert_array_equal(h["breaks"], ref["breaks"])
        np.testing.assert_array_equal(h["counts"], ref["counts"])
        np.testing.assert_allclose(h["density"], ref["density"], rtol=1e-14)
        np.testing.assert_allclose(h["mids"], ref["mids"], rtol=1e-14)


def test_histogramDS2_equals_R_hist_with_values_on_the_breaks(tmp_path):
    values = np.round(np.random.default_rng(5).normal(size=2000), 1)  # many values exactly on breaks
    rules = rules_variant(tmp_path / "q1.toml", q_threshold="1", factor_levels_density="0.5")
    provisioned, services = make_sites(tmp_path, {"s": pd.DataFrame({"x": values})}, rules=rules)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        for lo, hi, n in [(-4.0, 4.0, 16), (-4.5, 4.3, 11), (-5.0, 5.0, 3)]:
            h = session.aggregate_expr(f"histogramDS2(T$x, {n}, {lo}, {hi}, 1, 3, 0.25)")["s"]["histobject"]
            ref = r_hist(values, lo, hi, n)
            np.testing.assert_array_equal(h["counts"], ref["counts"])
            np.testing.assert_array_equal(h["breaks"], ref["breaks"])


def test_r_seq_is_Rs_seq():
    for lo, hi, n in [(0.0, 1.0, 3), (21.3, 80.7, 7), (-5.0, 5.0, 10), (0.1, 0.7, 6)]:
        np.testing.assert_array_equal(r_seq(lo, hi, (hi - lo) / n),
                                      r_eval(f"seq({lo!r}, {hi!r}, by = ({hi!r} - {lo!r}) / {n})"))


def test_histogramDS2_small_bins_refused_or_merged_by_policy(tmp_path):
    values = pd.DataFrame({"x": [1.0] * 10 + [2.5] * 2 + [3.5] * 10 + [5.5] * 8})
    # the gate's rule at a fixed minimum (no secret margin: its own test draws it)
    refuse = make_sites(tmp_path / "r", {"r": values},
                        rules=rules_variant(tmp_path / "refuse.toml", small_bin_policy='"refuse"', cut_margin="0"))
    merge = make_sites(tmp_path / "m", {"m": values}, rules=rules_variant(tmp_path / "merge.toml", cut_margin="0"))
    for provisioned, services in (refuse, merge):
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("T", "P.t")
            call = "histogramDS2(T$x, 6, 0, 6, 1, 3, 0.25)"  # (2,3] holds 2 < q = 5
            if "r" in services:
                with pytest.raises(FederatedCallError) as exc:
                    session.aggregate_expr(call)
                _refused(exc, "r", "bins.small_bin_policy")
                with pytest.raises(FederatedCallError) as exc:  # values below min: not counted
                    session.aggregate_expr("histogramDS2(T$x, 1, 3, 6, 1, 3, 0.25)")
                assert exc.value.failures["r"].kind == "bad_call"
                session.assign_expr("U", 'dataFrameSubsetDS2("T", "T$x", "2", 5, NULL, NULL, FALSE)')
                with pytest.raises(FederatedCallError) as exc:  # U: 2 x 2.5 below min = 3: the same
                    session.aggregate_expr("histogramDS2(U$x, 1, 3, 6, 1, 3, 0.25)")  # answer (a refusal by
                assert exc.value.failures["r"].kind == "bad_call"  # count would say 'fewer than q outside')
                with pytest.raises(FederatedCallError) as exc:  # 8 values above 5: not small, but not counted
                    session.aggregate_expr("histogramDS2(U$x, 1, 2, 5, 1, 3, 0.25)")
                assert "do not span" in exc.value.failures["r"].message
                with pytest.raises(FederatedCallError) as exc:  # more bins than the level rules allow
                    session.aggregate_expr("histogramDS2(T$x, 11, 0, 6, 1, 3, 0.25)")
                _refused(exc, "r", "disclosure.factor_levels_density")
            else:
                result = session.aggregate_expr(call)["m"]
                h = result["histobject"]
                # the release gate, cuts in increasing order: (0,1]=10 keeps 1 or 2 (no record between: one
                # of them, at random); (2,3] holds 2 -> cut 3 dropped; (2,4]=12 keeps 4 or 5; (5,6]=8
                b = h["breaks"]
                assert b[0] == 0 and b[1] in (1, 2) and b[2] in (4, 5) and b[3] == 6 and h["counts"] == [10, 12, 8]
                assert h["equidist"] is (len(set(np.diff(b))) == 1) and sum(h["counts"]) == len(values)
                # the requested bins not released as asked are named, and counted as dsBase counts its
                # suppressed bins
                as_asked = {(lo, hi) for lo, hi in zip(b[:-1], b[1:]) if hi - lo == 1}
                merged = [[k, k + 1.0] for k in range(6) if (k, k + 1.0) not in as_asked]
                assert result["merged"] == merged and result["invalidcells"] == len(merged) >= 3
                assert "fewer than 5 records" in result["why"] and "fewer, wider bins" in result["why"]


# --- correlation -----------------------------------------------------------------------------


def test_corDS_pooled_equals_R_cor(gbsg2_session, gbsg2_pooled):
    gbsg2_session.assign_table("N", "GBSG2.validation", variables=["age", "tsize", "score"])
    parts = list(gbsg2_session.aggregate_expr('corDS("N")').values())
    n = np.asarray(parts[0]["complete.counts"]) * 0 + sum(np.asarray(p["complete.counts"]) for p in parts)
    sp = sum(np.asarray(p["sums.of.products"]) for p in parts)
    s = sum(np.asarray(p["sums"]) for p in parts)
    ss = sum(np.asarray(p["sums.of.squares"]) for p in parts)
    cor = (n * sp - s * s.T) / np.sqrt((n * ss - s**2) * (n * ss.T - (s.T) ** 2))
    frame = gbsg2_pooled[["age", "tsize", "score"]]
    ref = r_eval("as.vector(cor(cbind(a, t, s)))", a=frame["age"], t=frame["tsize"], s=frame["score"]).reshape(3, 3)
    np.testing.assert_allclose(cor, ref, rtol=1e-12)
    assert all(p["class"] == "data.frame" and p["na.counts"]["Number of NAs in each column"] == [[0, 0, 0]]
               for p in parts)


def test_corDS_rules(tmp_path):
    rng = np.random.default_rng(3)
    frames = {
        "narrow": pd.DataFrame({f"x{j}": rng.normal(size=8) for j in range(3)}),  # 3 variables > 0.33 x 8
        "binary": pd.DataFrame({"x": rng.normal(size=30), "b": [1] * 2 + [0] * 28}),
    }
    provisioned, services = make_sites(tmp_path, frames)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate_expr('corDS("T")')
        _refused(exc, "narrow", "disclosure.glm_saturation")
        _refused(exc, "binary", "disclosure.q_threshold")
        assert "binary variable b" in exc.value.failures["binary"].message
        with pytest.raises(FederatedCallError) as exc:
            session.aggregate_expr("corDS(T$x)")
        assert "y must also be a numeric vector" in exc.value.failures["binary"].message


# --- subsetting ------------------------------------------------------------------------------


def test_dataFrameSubsetDS2_equals_pandas(gbsg2_session, gbsg2_pooled):
    gbsg2_session.assign_expr("S", 'dataFrameSubsetDS2("D", "D$age", "50", 6, NULL, NULL, FALSE)')
    subset = gbsg2_pooled[gbsg2_pooled["age"] >= 50]
    assert gbsg2_session.length("S$age").n == len(subset)
    assert gbsg2_session.mean("S$score").mean == pytest.approx(subset["score"].mean(), rel=1e-12)
    gbsg2_session.assign_expr("P", "dataFrameSubsetDS2(\"D\", \"D$menostat\", \"'Pre'\", 1, \"2,12\", NULL, FALSE)")
    assert set(map(tuple, gbsg2_session.aggregate_expr('colnamesDS("P")').values())) == {("age", "score")}
    assert gbsg2_session.length("P$age").n == int((gbsg2_pooled["menostat"] == "Pre").sum())
    gbsg2_session.assign_expr("K", 'dataFrameSubsetDS2("D", "ONES", "ONES", 1, NULL, "1,3,5", FALSE)')
    assert set(map(tuple, gbsg2_session.aggregate_expr('dimDS("K")').values())) <= {
        (n, 9) for n in gbsg2_session.aggregate_expr('lengthDS("D$age")').values()}


def test_dataFrameSubsetDS2_rules(tmp_path):
    frame = pd.DataFrame({"x": np.arange(40.0), "g": ["a"] * 37 + ["b"] * 3,
                          "y": [np.nan] * 2 + [float(i) for i in range(38)]})
    provisioned, services = make_sites(tmp_path, {"s": frame})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("T", "P.t")
        for call in ('dataFrameSubsetDS2("T", "T$g", "\'b\'", 1, NULL, NULL, FALSE)',   # 3 rows
                     'dataFrameSubsetDS2("T", "T$g", "\'b\'", 2, NULL, NULL, FALSE)',   # leaves out 3
                     'dataFrameSubsetDS2("T", "T$x", "37", 5, NULL, NULL, FALSE)'):     # 2 rows
            with pytest.raises(FederatedCallError) as exc:
                session.assign_expr("S", call)
            _refused(exc, "s", "disclosure.subset_min")
        # the two records missing y share a pattern of missing values no other record has: the site
        # leaves them out of the table (docs/governance.md, "Missing values"), which holds 38
        session.assign_expr("S", 'dataFrameSubsetDS2("T", "T$y", "10", 3, NULL, NULL, TRUE)')  # y < 10 or NA
        assert session.length("S$x").n == 10
        session.assign_expr("S", 'dataFrameSubsetDS2("T", "T$y", "37", 4, NULL, NULL, TRUE)')  # y <= 37 or NA
        assert session.length("S$x").n == 38
        session.assign_expr("S", 'dataFrameSubsetDS2("T", "T$y", "37", 4, NULL, NULL, FALSE)')  # no NA left
        assert session.length("S$x").n == 38
        with pytest.raises(FederatedCallError) as exc:  # two numeric columns: a cut on their combination
            session.assign_expr("S", 'dataFrameSubsetDS2("T", "T$y", "T$x", 4, NULL, NULL, FALSE)')
        assert "a comparison takes a column" in exc.value.failures["s"].message
        with pytest.raises(FederatedCallError) as exc:
            session.assign_expr("S", 'dataFrameSubsetDS2("T", "T$g", "\'a\'", 3, NULL, NULL, FALSE)')
        assert "only be compared with == or !=" in exc.value.failures["s"].message
        assert [r["name"] for r in session.symbols()["s"]] == ["S", "T"]


def test_sites_list_the_new_functions(gbsg2_session):
    listed = {f["name"] for f in gbsg2_session.functions()["site1"]["functions"]}
    assert {"namesDS", "levelsDS", "isValidDS", "histogramDS1", "histogramDS2", "corDS", "dataFrameSubsetDS2"} <= listed
    assert set(gbsg2_session.functions()) == set(GBSG2_SITES)
