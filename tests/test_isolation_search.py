"""Property-based search for call sequences that isolate a record.

``hypothesis`` generates sequences of releases a hostile analyst could ask for against a small
known table at default rules: cuts on a column (``groupSumsDS``, ``countBelowDS``, ``histogramDS``,
``calibrationBinsDS``, ``thresholdBinsDS``) with cut values placed between neighbouring records (where differencing
works), subsets by a numeric condition, a derived table (``calibrationFrameDS``'s logit of the
score), GLM coefficients of any size, from two accounts. From the truth, every released cell and
subset becomes a row set over the table's records; a record is isolated when its indicator lies
in the span of the row sets and the table (then a combination of the released sums is its value).
The check is an independent rank test (``rank([M | e_i]) == rank(M)``), not the site's code.

CI runs ``ISOLATION_EXAMPLES`` examples (default 40); ``bench/RESULTS.md`` records a longer run:
``ISOLATION_EXAMPLES=500 .venv/bin/python -m pytest tests/test_isolation_search.py -q``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import special
from sitekit import make_sites
from test_adversarial import TARGET_AGE, _frame

from conftest import inprocess_builder
from dsfed_client import Call, FederatedCallError, Ref

FRAME = _frame()
N = len(FRAME)
EXAMPLES = int(os.environ.get("ISOLATION_EXAMPLES", "40"))
COLUMNS = ("score", "age", "income")


def _between(column: str) -> list[float]:
    """Cut values between every two neighbouring distinct values of a column (and just off each)."""
    v = np.unique(FRAME[column].to_numpy(dtype=float))
    return [float(c) for c in np.r_[(v[:-1] + v[1:]) / 2, v]]


CANDIDATES = {c: _between(c) for c in COLUMNS}
cut_op = st.tuples(
    st.just("cut"),
    st.sampled_from(("groupSumsDS", "countBelowDS", "histogramDS", "calibrationBinsDS", "thresholdBinsDS")),
    st.sampled_from(COLUMNS),
    st.sampled_from(("D", "S", "C")),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
    st.sampled_from(("analyst", "analyst2")),
)
subset_op = st.tuples(
    st.just("subset"),
    st.sampled_from(("age", "income", "score")),
    st.sampled_from((">", ">=", "<", "<=")),
    st.integers(0, 10**6),
    st.sampled_from(("analyst", "analyst2")),
)
glm_op = st.tuples(st.just("glm"), st.floats(-1e6, 1e6), st.floats(-1e4, 1e4), st.sampled_from(("analyst", "analyst2")))
derived_op = st.tuples(st.just("derived"), st.sampled_from(("analyst", "analyst2")))
sequences = st.lists(st.one_of(cut_op, subset_op, glm_op, derived_op), min_size=3, max_size=14)


def _isolated(sets: list[np.ndarray]) -> list[int]:
    """Records whose indicator is in the span of the row sets: rank test per record."""
    m = np.column_stack([np.ones(N), *sets]).astype(float)
    rank = np.linalg.matrix_rank(m)
    eye = np.eye(N)
    return [i for i in range(N) if np.linalg.matrix_rank(np.column_stack([m, eye[:, i]])) == rank]


def _cells(rows: np.ndarray, x: np.ndarray, edges: list, inclusive: bool) -> list[np.ndarray]:
    """The released cells as row sets over the table: records of ``rows`` between released edges."""
    e = np.array([-np.inf if v is None and i == 0 else np.inf if v is None else v for i, v in enumerate(edges)],
                 dtype=float)
    side = "left" if inclusive else "right"
    cell = np.clip(np.searchsorted(e, x, side=side) - 1, 0, e.size - 2)
    out = []
    for k in range(e.size - 1):
        member = np.zeros(N, dtype=bool)
        member[rows[cell == k]] = True
        out.append(member)
    return out


class Analyst:
    """One account's session and its symbols' rows (positions in the table) known from the truth."""

    def __init__(self, session: Any) -> None:
        self.session = session
        session.assign_table("D", "P.t")
        self.rows: dict[str, np.ndarray] = {"D": np.arange(N)}

    def values(self, table: str, column: str) -> tuple[np.ndarray, np.ndarray] | None:
        rows = self.rows.get(table)
        if rows is None:
            return None
        if table == "C":  # calibrationFrameDS: lp = logit(score); other columns are not in it
            return (rows, special.logit(FRAME.score.to_numpy()[rows])) if column == "score" else None
        return rows, FRAME[column].to_numpy(dtype=float)[rows]


def _run(analysts: dict[str, Analyst], op: tuple, released: list[np.ndarray]) -> None:
    kind, who = op[0], analysts[op[-1]]
    try:
        if kind == "subset":
            _, column, cmp, pick, _ = op
            value = CANDIDATES[column][pick % len(CANDIDATES[column])]
            who.session.assign("S", Call("subsetRowsDS", Ref("D"), column, cmp, value))
            x = FRAME[column].to_numpy(dtype=float)
            mask = {">": x > value, ">=": x >= value, "<": x < value, "<=": x <= value}[cmp]
            who.rows["S"] = np.flatnonzero(mask)
            member = np.zeros(N, dtype=bool)
            member[mask] = True
            released.append(member)  # its size and sums are releasable
        elif kind == "derived":
            who.session.assign("C", Call("calibrationFrameDS", Ref("D$y"), Ref("D$score")))
            who.rows["C"] = np.arange(N)
        elif kind == "glm":
            _, b0, b1, _ = op
            result = who.session.aggregate("glmDS2", "y ~ age", "binomial", [b0, b1], None, None, "D")
            eta = b0 + b1 * FRAME.age.to_numpy()
            assert np.all(np.abs(eta) <= 20), "a GLM was released at a saturating linear predictor"
            assert result["a"]["Nvalid"] == N
        else:
            _, function, column, table, picks, _ = op
            known = who.values(table, column)
            if known is None:
                return
            rows, x = known
            values = sorted({CANDIDATES[column][p % len(CANDIDATES[column])] for p in picks})
            if column == "score" and table == "C":
                values = sorted({float(special.logit(min(max(v, 1e-6), 1 - 1e-6))) for v in values})
            name = "lp" if table == "C" else column
            target = Ref(f"{table}${name}")
            lo, hi = float(np.min(x)) - 1.0, float(np.max(x)) + 1.0
            values = [v for v in values if lo < v < hi]
            if not values:
                return
            if function == "countBelowDS":
                result = who.session.aggregate("countBelowDS", target, values)["a"]
                for t, count in zip(values, result["counts"]):
                    if count is not None:
                        released.extend(_cells(rows, x, [lo, t, hi], inclusive=True)[:1])
                return
            if function == "calibrationBinsDS":
                if name != "score":
                    return
                bins = 2 + picks[0] % 40
                result = who.session.aggregate("calibrationBinsDS", Ref(f"{table}$y"), target, bins)["a"]
                released.extend(_cells(rows, x, result["edges"], inclusive=False))
                return
            if function == "thresholdBinsDS":  # decision thresholds: cells [a, b)
                inner = [v for v in values if 0 < v < 1]
                if name != "score" or not inner:
                    return
                result = who.session.aggregate("thresholdBinsDS", Ref(f"{table}$y"), target, inner)["a"]
                released.extend(_cells(rows, x, result["edges"], inclusive=False))
                return
            if function == "groupSumsDS":
                if name != "score":
                    return
                result = who.session.aggregate("groupSumsDS", Ref(f"{table}$y"), target, [0.0, *values, 1.0])["a"]
                released.extend(_cells(rows, x, result["edges"], inclusive=True))
                return
            result = who.session.aggregate("histogramDS", target, [lo, *values, hi])["a"]
            released.extend(_cells(rows, x, result["edges"], inclusive=True))
    except FederatedCallError as exc:  # refused: nothing released
        assert exc.failures["a"].kind == "disclosure_refused", str(exc)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=sequences)
def test_no_call_sequence_isolates_a_record(ops):
    """Whatever the sequence, no record's indicator is in the span of what was released."""
    with tempfile.TemporaryDirectory(prefix="dsfed-isolation-") as tmp:
        provisioned, services = make_sites(Path(tmp), {"a": FRAME})
        released: list[np.ndarray] = []
        with inprocess_builder(provisioned, services).login() as one, \
                inprocess_builder(provisioned, services, "analyst2").login() as two:
            analysts = {"analyst": Analyst(one), "analyst2": Analyst(two)}
            for op in ops:
                _run(analysts, op, released)
    assert _isolated(released) == [], f"isolated by {ops}"


def test_the_search_sees_an_isolating_sequence():
    """The check itself: the cells of two cuts one record apart, and two nested subsets, isolate
    the record (what the site must refuse)."""
    x = FRAME.score.to_numpy()
    order = np.argsort(x)
    t1, t2 = (x[order[19]] + x[order[20]]) / 2, (x[order[20]] + x[order[21]]) / 2
    rows = np.arange(N)
    sets = _cells(rows, x, [0, t1, 1], True) + _cells(rows, x, [0, t2, 1], True)
    assert _isolated(sets) == [int(order[20])]
    age = FRAME.age.to_numpy()
    assert _isolated([age >= TARGET_AGE, age > TARGET_AGE]) == [int(np.flatnonzero(age == TARGET_AGE)[0])]
