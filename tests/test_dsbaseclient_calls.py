"""dsBaseClient's own call texts (tests/fixtures/dsbaseclient_calls.json: each with the dsBaseClient
file and commit it comes from) run end to end through the unmodified PyPI ``datashield`` client over
``/ws`` against the five GBSG2 sites, in the order the client functions send them. Each answer is
checked against R on that site's data (or the pooled data), or is a refusal whose message names the
rule; R itself confirms that each text is what the quoted dsBaseClient line sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import GBSG2_SITES
from dsfed_server.functions.datamanagement import NO_MESSAGES
from dsfed_server.functions.tables import SUBSET_DONE
from opalkit import ds_session, opal_value
from rref import r_eval

CALLS = json.loads((Path(__file__).parent / "fixtures" / "dsbaseclient_calls.json").read_text())["calls"]
Q = 5  # the GBSG2 sites' q_threshold and subset_min


def test_each_text_is_what_the_dsbaseclient_line_sends():
    """R evaluates each quoted line with its bindings and turns the call into text as DSI does
    (``deparse``), or takes the text the client pasted together."""
    source = "c(" + ", ".join(
        f"local({{ {c['bindings']}; .v <- {c['r'].split('<-', 1)[1]}; "
        + ("paste(deparse(.v, width.cutoff = 500L), collapse = '\\n')" if c["as"] == "call" else ".v") + " })"
        for c in CALLS) + ")"
    texts = [str(t) for t in r_eval(source)]
    assert texts == [c["text"] for c in CALLS]


def _send(session, call: dict[str, Any], site: str) -> tuple[Any, str | None]:
    """The call at one site, sent as the client sends it (asynchronously): (its answer, None), or
    (None, the error text the client holds: the failed command's error, dsfed's message)."""
    try:
        if call["door"] == "assign":
            session.assign_expr(call["symbol"], call["text"], conn_names=[site])
            return None, None
        return opal_value(session.aggregate(call["text"], conn_names=[site])[site]), None
    except Exception:  # the client raises DSError and keeps the site's error document
        return None, " ".join(map(str, session.get_errors()[site].get_error()["arguments"]))


@pytest.fixture(scope="module")
def outcomes(gbsg2_http, gbsg2_provisioned) -> dict[str, dict[str, tuple[Any, str | None]]]:
    """Every call, in the fixture's order, at every site, in one DataSHIELD session."""
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        return {c["id"]: {site: _send(session, c, site) for site in GBSG2_SITES} for c in CALLS}


# the categories of the GBSG2 data dictionary (opal_fixtures), in its order: Opal assigns these as factors
DICTIONARY = {"horTh": "c('no', 'yes')", "menostat": "c('Pre', 'Post')", "tgrade": "c('I', 'II', 'III')"}


def _r_levels(frame: pd.DataFrame, column: str) -> list[str]:
    """R's ``levels(factor(x))`` of the factor Opal assigns from the dictionary."""
    return [str(v) for v in r_eval(f"levels(factor(factor(x, levels = {DICTIONARY[column]})))",
                                   x=frame[column].to_numpy())]


def _refused(outcome: tuple[Any, str | None], rule: str) -> None:
    answer, error = outcome
    assert answer is None and error is not None, outcome
    assert f"[rule {rule}]" in error, error


def _ran(outcome: tuple[Any, str | None]) -> Any:
    answer, error = outcome
    assert error is None, error
    return answer


@pytest.mark.parametrize("call_id, column", [("asFactor-levels", "horTh"), ("asFactor-levels-rare", "tgrade"),
                                             ("table-levels", "menostat")])
def test_asFactorDS1_gives_Rs_levels_or_refuses_a_rare_level(outcomes, gbsg2_frames, call_id, column):
    for site, frame in gbsg2_frames.items():
        if frame[column].value_counts().min() < Q:  # site3 holds 3 records of tgrade I
            _refused(outcomes[call_id][site], "disclosure.q_threshold")
            assert "level 'I'" in outcomes[call_id][site][1]
        else:
            assert _ran(outcomes[call_id][site]) == _r_levels(frame, column)


def test_asFactorDS2_then_testObjExistsDS(outcomes):
    for site in GBSG2_SITES:
        _ran(outcomes["asFactor-assign"][site])
        assert _ran(outcomes["asFactor-exists"][site]) == {"test.obj.exists": True, "test.obj.class": "factor"}


def test_ds_table_main_call_equals_R_table(outcomes, gbsg2_frames):
    for site, frame in gbsg2_frames.items():
        want = r_eval(f"as.vector(table(factor(factor(x, levels = {DICTIONARY['menostat']}), "
                      "levels = c('Post', 'Pre')), "
                      "useNA = 'always'))", x=frame["menostat"].to_numpy())
        assert _ran(outcomes["table-main"][site]) == [int(v) for v in want]


def test_ds_dataFrame_calls(outcomes, gbsg2_frames):
    for site in GBSG2_SITES:
        assert _ran(outcomes["dataFrame-class"][site]) == "factor"
        _ran(outcomes["dataFrame-assign"][site])
        assert _ran(outcomes["dataFrame-exists"][site]) == {"test.obj.exists": True, "test.obj.class": "data.frame"}
        assert _ran(outcomes["dataFrame-message"][site]) == NO_MESSAGES
        _ran(outcomes["cbind-assign"][site])


def test_ds_dataFrameSubset_and_ds_subset(outcomes, gbsg2_frames):
    for site, frame in gbsg2_frames.items():
        assert _ran(outcomes["dataFrameSubset-check"][site]) == SUBSET_DONE
        _refused(outcomes["dataFrameSubset-assign"][site], "strings.max_name_length")  # its default newobj
        _ran(outcomes["dataFrameSubset-assign-named"][site])
        _refused(outcomes["dataFrameSubset-small"][site], "disclosure.subset_min")  # age > 70: 0 to 4 rows
        _ran(outcomes["subset-threshold"][site])
        _ran(outcomes["subset-complete"][site])


def test_ds_quantileMean_calls_combine_to_the_pooled_mean(outcomes, gbsg2_frames, gbsg2_pooled):
    weighted, total = 0.0, 0
    for site, frame in gbsg2_frames.items():
        assert _ran(outcomes["quantileMean-exists"][site]) is True
        quantiles = _ran(outcomes["quantileMean-quantiles"][site])
        want = r_eval("c(quantile(x, c(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)), mean(x))", x=frame["age"].to_numpy())
        np.testing.assert_allclose(quantiles, want, rtol=1e-13)
        n, missing = _ran(outcomes["quantileMean-length"][site]), _ran(outcomes["quantileMean-missing"][site])
        assert (n, missing) == (len(frame), int(frame["age"].isna().sum()))
        weighted += quantiles[7] * (n - missing)  # ds.quantileMean's combination
        total += n - missing
    assert weighted / total == pytest.approx(float(r_eval("mean(x)", x=gbsg2_pooled["age"].to_numpy())[0]), rel=1e-13)


def test_what_the_assigned_objects_hold(gbsg2_http, gbsg2_provisioned, gbsg2_frames):
    """The objects the assign texts made, read back: their columns, sizes and values against R."""
    with ds_session(gbsg2_http, gbsg2_provisioned) as session:
        for call in CALLS:
            if call["door"] == "assign" and call["id"] != "dataFrameSubset-assign":
                session.assign_expr(call["symbol"], call["text"])
        assert set(map(tuple, session.aggregate('colnamesDS("df_new")').values())) == {("age", "tgrade", "y")}
        assert set(map(tuple, session.aggregate('colnamesDS("cbind.newobj")').values())) == {("age", "score")}
        levels = session.aggregate("levelsDS(horThF)")
        lengths = {key: session.aggregate(f'lengthDS("{key}$age")') for key in
                   ("older", "subsetObject", "subsetComplete")}
        means = session.aggregate('meanDS(cbind.newobj$score)')
    for site, frame in gbsg2_frames.items():
        assert levels[site]["Levels"] == _r_levels(frame, "horTh")
        older = int(r_eval("sum(x >= 50)", x=frame["age"].to_numpy())[0])
        assert lengths["older"][site] == lengths["subsetObject"][site] == older
        assert lengths["subsetComplete"][site] == len(frame)
        assert means[site]["EstimatedMean"] == pytest.approx(float(r_eval("mean(x)", x=frame["score"].to_numpy())[0]),
                                                             rel=1e-14)
