"""dsBase's data-management functions (asFactorDS1/2, asNumericDS, numNaDS, dataFrameDS, cbindDS,
completeCasesDS, lsDS, meanSdGpDS, tapplyDS, tapplyDS.assign) on small sites: results against R on
the same records, each stricter-than-dsBase rule refusing with its name, and the differencing
attacks those rules stop, with what the attack recovers where dsBase would have answered."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from rref import r_eval
from sitekit import make_sites

RNG = np.random.default_rng(18)
N = 40
FRAME = pd.DataFrame({
    "x": np.round(RNG.normal(50, 10, N), 1),
    "y": np.where(np.arange(N) == 7, np.nan, np.round(RNG.normal(0, 1, N), 3)),  # one missing value
    "k": np.array([1] * 16 + [2] * 14 + [3] * 10),
    "g": np.array(["a", "b"] * (N // 2)),
    "z": np.where(np.arange(N) < 10, np.nan, np.arange(N, dtype=float)),  # ten missing values
})
# what the site serves under the shipped rules: record 7 alone misses y (and z), a pattern of missing
# values no other record shares, so it is left out of every release (docs/governance.md, "Missing
# values"); the nine others missing z alone share their pattern and stay
KEPT = FRAME.drop(index=7).reset_index(drop=True)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    with inprocess_builder(*make_sites(tmp_path_factory.mktemp("dm"), {"s": FRAME})).login() as s:
        s.assign_table("D", "P.t")
        yield s


def _one(result):
    return result["s"]


def _symbols(session) -> list[str]:
    return [r["name"] for r in session.symbols()["s"]]


def _refused(exc: pytest.ExceptionInfo, rule: str) -> str:
    err = exc.value.failures["s"]
    assert (err.kind, err.rule) == ("disclosure_refused", rule), err
    return err.message


def test_asFactorDS1_levels_equal_R_and_rare_values_are_not_told(session):
    k = FRAME["k"].to_numpy()
    assert _one(session.aggregate_expr('asFactorDS1("D$k")')) == list(r_eval("levels(factor(k))", k=k))
    assert _one(session.aggregate_expr('asFactorDS1("D$g")')) == ["a", "b"]
    with pytest.raises(FederatedCallError) as exc:  # 40 distinct x: too many levels, as in dsBase
        session.aggregate_expr('asFactorDS1("D$x")')
    _refused(exc, "disclosure.factor_levels_density")


def test_asFactorDS1_refuses_a_level_held_by_fewer_than_q(tmp_path):
    """dsBase releases every distinct value of a variable within the level-density limit; a rare
    value (an extreme) would be told. dsfed refuses, naming the level and the rule."""
    frame = pd.DataFrame({"v": [1] * 20 + [2] * 17 + [9] * 3})  # the value 9: 3 records < q = 5
    with inprocess_builder(*make_sites(tmp_path, {"s": frame})).login() as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate_expr('asFactorDS1("D$v")')
    assert "level '9'" in _refused(exc, "disclosure.q_threshold")


def test_asFactorDS2_and_asNumericDS_equal_R(session):
    session.assign_expr("F", 'asFactorDS2("D$k", "1,2,3,4", FALSE, 1)')
    assert _one(session.aggregate_expr('classDS("F")')) == "factor"
    levels = _one(session.aggregate_expr("levelsDS(F)"))["Levels"]
    assert levels == list(r_eval("levels(factor(k, levels = c('1', '2', '3', '4')))", k=FRAME["k"].to_numpy()))
    session.assign_expr("N", 'asNumericDS("F")')
    want = float(r_eval("mean(as.numeric(as.character(factor(k, levels = 1:4))))", k=KEPT["k"].to_numpy())[0])
    assert _one(session.aggregate_expr("meanDS(N)"))["EstimatedMean"] == pytest.approx(want, rel=1e-14)


def test_asFactorDS2_levels_that_leave_values_out_are_refused(session):
    """dsBase's factor(x, levels = "1") turns every other record into NA: an analyst-chosen cut whose
    NA count singles out records. dsfed takes only levels that cover every value."""
    with pytest.raises(FederatedCallError) as exc:
        session.assign_expr("F1", 'asFactorDS2("D$k", "1", FALSE, 1)')
    assert "leave out" in exc.value.failures["s"].message and "F1" not in _symbols(session)


def test_numNaDS(session):
    assert _one(session.aggregate_expr("numNaDS(D$z)")) == int(r_eval("sum(is.na(z))", z=KEPT["z"].to_numpy())[0])
    # the one record missing y is not in the table the site serves: y has no missing value there
    assert _one(session.aggregate_expr("numNaDS(D$y)")) == 0


def test_numNaDS_refuses_a_group_of_fewer_than_q(tmp_path):
    """Without a release history (no record left out), one missing value is a group of one record."""
    from sitekit import rules_variant

    rules = rules_variant(tmp_path / "rules.toml", cut_history="false")
    with inprocess_builder(*make_sites(tmp_path, {"s": FRAME}, rules)).login() as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate_expr("numNaDS(D$y)")
    _refused(exc, "disclosure.q_threshold")


def test_completeCasesDS_cannot_single_out_the_record_with_a_missing_value(session):
    """The attack: the mean of x over all records and over the complete cases (dropping the one record
    whose y is missing) give that record's x exactly. dsBase's completeCasesDS checks nothing, so the
    attack recovers x[7]; at a dsfed site the record is in neither (its pattern of missing values is
    its own, so the site left it out of the table), and the difference is 0."""
    full = _one(session.aggregate_expr("meanDS(D$x)"))
    session.assign_expr("XY", 'cbindDS("D$x,D$y", "x,y")')
    session.assign_expr("C", 'completeCasesDS("XY")')
    complete = _one(session.aggregate_expr("meanDS(C$x)"))
    recovered = full["EstimatedMean"] * full["Nvalid"] - complete["EstimatedMean"] * complete["Nvalid"]
    assert recovered == pytest.approx(0.0, abs=1e-9)  # the attack recovers nothing
    # what dsBase would have answered: the mean over all 40, and from it x[7] exactly
    dsbase_recovers = FRAME["x"].mean() * N - FRAME.dropna(subset=["y"])["x"].mean() * (N - 1)
    assert dsbase_recovers == pytest.approx(FRAME["x"][7], abs=1e-9)


def test_completeCasesDS_and_dataFrameDS_equal_R(session):
    z = FRAME["z"].to_numpy()
    session.assign_expr("V", 'completeCasesDS("D$z")')
    assert _one(session.aggregate_expr('lengthDS("V")')) == int(r_eval("sum(complete.cases(z))", z=z)[0])
    session.assign_expr("T", 'dataFrameDS("D$x,D$z,D$g", NULL, FALSE, TRUE, "D$x,D$z,D$g", TRUE, TRUE)')
    assert _one(session.aggregate_expr('dimDS("T")')) == [30, 3]
    assert _one(session.aggregate_expr('colnamesDS("T")')) == ["x", "z", "g"]
    assert _one(session.aggregate_expr('classDS("T$g")')) == "factor"  # strAsFactors
    session.assign_expr("B", 'cbindDS("D$x,D$x,D$k", "D$x,D$x,k")')
    assert _one(session.aggregate_expr('colnamesDS("B")')) == list(
        r_eval("make.names(c('x', 'x', 'k'), unique = TRUE)"))
    names = _one(session.aggregate_expr("lsDS(NULL, 1)"))["objects.found"]
    assert names == sorted(_symbols(session), key=lambda n: (n.lower(), n.swapcase()))
    found = _one(session.aggregate_expr('lsDS("_:A:_", 1)'))
    assert found["objects.found"] == names and found["search.filter.final"] == "*"


def test_meanSdGpDS_and_tapplyDS_equal_R_tapply(session):
    x, g = KEPT["x"].to_numpy(), KEPT["g"].to_numpy()
    got = _one(session.aggregate_expr("meanSdGpDS(D$x, D$g)"))
    np.testing.assert_allclose(got["Mean_gp"], r_eval("tapply(x, g, mean)", x=x, g=g), rtol=1e-14)
    np.testing.assert_allclose(got["StDev_gp"], r_eval("tapply(x, g, sd)", x=x, g=g), rtol=1e-13)
    assert got["N_gp"] == [20, 19] and got["Nvalid"] == N - 1 and got["Table_valid"] is True
    summed = _one(session.aggregate_expr('tapplyDS("D$x", "D$g", "sum")'))
    np.testing.assert_allclose(summed["Sum"], r_eval("tapply(x, g, sum)", x=x, g=g), rtol=1e-14)
    assert summed["dimnames"] == [["D$g.a", "D$g.b"]] and summed["N"] == [20, 19]
    session.assign_expr("TA", 'tapplyDS.assign("D$x", "D$g", "mean")')
    assert _one(session.aggregate_expr('colnamesDS("TA")')) == ["Mean", "N"]


def test_tapplyDS_assign_refuses_a_group_of_fewer_than_q(tmp_path):
    """dsBase's tapplyDS.assign checks nothing: a group of one record keeps that record's value as
    its 'mean' on the server, for any later function to release. dsfed refuses it like tapplyDS."""
    frame = pd.DataFrame({"x": np.arange(30.0), "g": ["a"] * 29 + ["b"]})
    with inprocess_builder(*make_sites(tmp_path, {"s": frame})).login() as s:
        s.assign_table("D", "P.t")
        s.assign_expr("G", 'asFactorDS2("D$g", "a,b", FALSE, 1)')
        for text in ('tapplyDS.assign("D$x", "G", "mean")', 'tapplyDS("D$x", "G", "mean")'):
            with pytest.raises(FederatedCallError) as exc:
                s.assign_expr("TA", text) if "assign" in text else s.aggregate_expr(text)
            _refused(exc, "disclosure.q_threshold")


def test_tableDS_two_way_equals_R_table_and_refuses_uncovering_levels(session):
    k, g = KEPT["k"].to_numpy(), KEPT["g"].to_numpy()
    got = _one(session.aggregate_expr('tableDS("D$k", "D$g", NULL, "1,2,3", "a,b", NULL, NULL, "no", NULL)'))
    want = r_eval("as.vector(table(factor(k, levels = 1:3), factor(g, levels = c('a', 'b'))))", k=k, g=g)
    assert got["counts"] == [int(v) for v in want] and got["dim"] == [3, 2] and got["names"] == ["rvar", "cvar"]
    with pytest.raises(FederatedCallError) as exc:  # levels 1, 2 only: the records with k = 3 would become NA
        session.aggregate_expr('tableDS("D$k", NULL, NULL, "1,2", NULL, NULL, NULL, "always", NULL)')
    assert "leave out" in exc.value.failures["s"].message


def test_tableDS_pooled_releases_what_sites_alone_refuse(tmp_path, gbsg2_pooled):
    """Menopausal status by hormone therapy: sites 1 and 5 hold a cell of 4 and 3 records and refuse
    the table alone; pooled over the five sites every cell holds at least q, and the pooled table
    equals R's table() on the pooled records."""
    from conftest import FIXTURES, GBSG2_SITES, RULES
    from dsfed_client import Ref
    from dsfed_server.provision import provision
    from dsfed_server.service import SiteService

    provisioned = provision(tmp_path, {s: (FIXTURES / s, RULES / f"{s}.toml") for s in GBSG2_SITES})
    services = {n: SiteService.from_config_file(p.config) for n, p in provisioned.items()}
    args = ("Pre,Post", "no,yes", None, None, "no", None)
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "GBSG2.validation")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate_expr('tableDS("D$menostat", "D$horTh", NULL, "Pre,Post", "no,yes", NULL, NULL, "no", NULL)')
        assert {site for site, e in exc.value.failures.items() if e.rule == "disclosure.q_threshold"} == {
            "site1", "site5"}
        pooled = s.pooled("tableDS", Ref("D$menostat"), Ref("D$horTh"), None, *args)
    want = r_eval("as.vector(table(factor(m, levels = c('Pre', 'Post')), factor(h, levels = c('no', 'yes'))))",
                  m=gbsg2_pooled["menostat"].to_numpy(), h=gbsg2_pooled["horTh"].to_numpy())
    assert pooled["pooled"] and pooled["counts"] == [int(v) for v in want]


def test_a_renamed_copy_shares_its_columns_cut_history(tmp_path):
    """The attack: release a histogram of D$x cut at 20, then one of a cbindDS copy of x under another
    name cut at 21; the two differ by the one record in (20, 21]. The copy's column remembers the
    table column it copies, so the second cut meets the first in the column's history: the shipped
    policy moves it onto the first (dsfed_server/disclosure/snapping.py; refusing, under policy
    refuse), so the second histogram repeats the first, and the record's presence is not told."""
    frame = pd.DataFrame({"x": np.arange(40.0)})
    with inprocess_builder(*make_sites(tmp_path, {"s": frame})).login() as s:
        s.assign_table("D", "P.t")
        first = _one(s.aggregate_expr("histogramDS(D$x, c(0, 20, 39))"))
        s.assign_expr("B", 'cbindDS("D$x", "renamed")')
        second = _one(s.aggregate_expr("histogramDS(B$renamed, c(0, 21, 39))"))
    assert first["counts"] == [21, 19]
    # no released cell ends at 21: no difference of counts is the one record in (20, 21]
    assert 21.0 not in second["edges"] and second["moved"] == [[21.0, 20.0]]
    assert second["edges"] == first["edges"] and second["counts"] == first["counts"]


def test_numbers_become_text_as_R_writes_them():
    """asFactorDS1's levels and asCharacterDS's values: R's as.character of each number."""
    from dsfed_server.functions.datamanagement import r_character  # noqa: PLC0415

    values = np.array([1 / 3, 100000, 1e-4, 2, 123456, 1e15, 0.1 + 0.2, -1.5, 0.5])
    assert [r_character(v) for v in values] == list(r_eval("as.character(x)", x=values))
