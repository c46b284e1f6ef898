"""A hostile analyst with valid credentials against a site at default rules.

Every attack class the issue names, each as its own test, run through the native door (``/v1``)
and the DataSHIELD door (``/ws``, the unmodified PyPI DataSHIELD client), with one account or
two, and across a restart of the site. An attack is split into a first and a second part (the
first cut and the one next to it; the first subset and the nested one), and the scenarios put
the parts in one session, in two accounts, in two doors, or on both sides of a restart. Each
attack knows the truth, counts the records it recovered (expected: none) and names the rule that
stopped it. The site holds one table of 50 records; every test gets its own copy of it, as the
release history is kept per table.
"""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pytest
from datashield import DSError, DSSession
from opalkit import logins, opal_value
from scipy import special
from sitekit import ROOT, write_table

from conftest import http_builder
from dsfed_client import Call, FederatedCallError, Ref
from dsfed_core.wire import decode_f64
from dsfed_server.launch import LocalSites
from dsfed_server.provision import provision

SITE = "a"
N = 50
Q = 5  # default.toml's q_threshold
MARGIN = 5  # default.toml's cut_margin: cells of Q + MARGIN records are always released
TARGET_AGE = 55  # exactly one record has this age
TABLES = 120
SCENARIOS = ("v1", "ws", "analyst2", "v1-then-ws", "restart")


def _frame(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ages = rng.choice(np.r_[30:55, 56:80], N - 1, replace=True)
    age = np.r_[ages, TARGET_AGE]
    rng.shuffle(age)
    score = np.round(rng.uniform(0.02, 0.98, N), 6)
    while np.unique(score).size < N:
        score = np.round(rng.uniform(0.02, 0.98, N), 6)
    return pd.DataFrame({
        "age": age.astype(int),
        "income": np.round(rng.uniform(20000, 90000, N), 2),
        "y": rng.binomial(1, score).astype(int),
        "cens": rng.integers(0, 2, N),
        "score": score,
        "grade": np.r_[["I"] * 3, ["II"] * 24, ["III"] * 23],
    })


@dataclass
class Refused:
    """A refusal as the analyst sees it: the site's rule."""
    rule: str | None


class Door:
    """One analyst session through one front door, answering results or :class:`Refused`."""

    def __init__(self, kind: str, session: Any) -> None:
        self.kind, self.session = kind, session

    def aggregate(self, expr: str) -> Any:
        try:
            if self.kind == "v1":
                return self.session.aggregate_expr(expr)[SITE]
            return opal_value(self.session.aggregate(expr, asynchronous=False)[SITE])
        except (FederatedCallError, DSError) as exc:
            return self._refusal(exc)

    def call(self, function: str, *args: Any) -> Any:
        """A structured call (``/v1`` only), for arguments longer than call text may be."""
        try:
            return self.session.aggregate(function, *args)[SITE]
        except FederatedCallError as exc:
            return self._refusal(exc)

    def assign(self, symbol: str, expr: str) -> Refused | None:
        try:
            if self.kind == "v1":
                self.session.assign_expr(symbol, expr)
            else:
                self.session.assign_expr(symbol, expr, asynchronous=False)
        except (FederatedCallError, DSError) as exc:
            return self._refusal(exc)
        return None

    def _refusal(self, exc: Exception) -> Refused:
        if isinstance(exc, FederatedCallError):
            return Refused(exc.failures[SITE].rule)
        body = self.session.get_errors()[SITE].get_error()
        return Refused(body["error"]["rule"])


class Federation:
    """The site process over its provisioned directory; restartable, with a fresh table per test."""

    def __init__(self, tmp: Path) -> None:
        self.frame = _frame()
        data = tmp / "data" / SITE
        for i in range(TABLES):
            write_table(data, self.frame, table=f"t{i}")
        self.provisioned = provision(tmp / "run", {SITE: (data, ROOT / "disclosure_rules" / "default.toml")})
        self.procs = tmp / "procs"
        self.sites = LocalSites(self.provisioned.values(), self.procs).__enter__()
        self._next = iter(range(TABLES))

    def table(self) -> str:
        return f"P.t{next(self._next)}"

    def released_cuts(self, table: str, column: str) -> list[float]:
        """The values of the cuts the site released on a table's column (its release history: more
        than any analyst is told, for attacks that are given it)."""
        from dsfed_server.config import load_site_config, resolve

        config, base = load_site_config(self.provisioned[SITE].config)
        ledger = resolve(base, config.site.ledger)
        with sqlite3.connect(ledger) as db:
            rows = db.execute("SELECT table_key, value FROM released_cuts WHERE column_name = ?", (column,)).fetchall()
        return [value for key, value in rows if key.split(".")[-1] == table.split(".")[-1]]

    def restart(self) -> None:
        self.sites.stop()
        self.sites = LocalSites(self.provisioned.values(), self.procs).__enter__()

    @contextmanager
    def door(self, kind: str, user: str, table: str) -> Iterator[Door]:
        if kind == "v1":
            with http_builder(self.provisioned, self.sites.urls, user).login() as session:
                session.assign_table("D", table)
                yield Door("v1", session)
            return
        session = DSSession(logins(self.sites, self.provisioned, user=user))
        session.open()
        try:
            session.assign_table("D", table=table)
            yield Door("ws", session)
        finally:
            session.close()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    federation = Federation(tmp_path_factory.mktemp("adversarial"))
    try:
        yield federation
    finally:
        federation.sites.stop()


Part = Callable[[Door], Any]


def run_parts(fed: Federation, scenario: str, first: Part, second: Part) -> tuple[Any, Any]:
    """The attack's two parts on a fresh table, as the scenario places them."""
    table = fed.table()
    if scenario in ("v1", "ws"):
        with fed.door(scenario, "analyst", table) as door:
            return first(door), second(door)
    with fed.door("v1", "analyst", table) as door:
        before = first(door)
    if scenario == "restart":
        fed.restart()
    kind, user = {"analyst2": ("v1", "analyst2"), "v1-then-ws": ("ws", "analyst"),
                  "restart": ("v1", "analyst")}[scenario]
    with fed.door(kind, user, table) as door:
        return before, second(door)


def _num(v: float) -> str:
    return repr(float(v))


# --- 1. analyst-chosen cuts ---------------------------------------------------------------------


def _cells(result: dict, name: str) -> dict[float, tuple[int, float]]:
    """Released cumulative (records, events) at or below each released cut, as the analyst reads them."""
    if name == "histogramDS2":  # a merged answer's histogram object spreads a merged bin over the breaks
        released = result.get("released") or result["histobject"]  # asked for; 'released' is what the site cut
        edges, n, events = released["breaks"], released["counts"], None
    elif name == "histogramDS":
        edges, n, events = result["edges"], result["counts"], None
    else:
        edges, n, events = result["edges"], result["n"], result["sum_y"]
    n = np.atleast_1d(n)  # Opal's JSON unboxes a merged histogram's one count
    cum_n, cum_y = np.cumsum(n), np.cumsum(events) if events is not None else np.full(len(n), np.nan)
    return {float(e): (int(cum_n[j]), float(cum_y[j])) for j, e in enumerate(edges[1:-1]) if e is not None}


CUT_RELEASES: dict[str, Callable[[float], str]] = {
    "groupSumsDS": lambda t: f"groupSumsDS(D$y, D$score, c(0, {_num(t)}, 1))",
    "countBelowDS": lambda t: f"countBelowDS(D$score, c({_num(t)}))",
    "histogramDS": lambda t: f"histogramDS(D$score, c(0, {_num(t)}, 1))",
    # dsBase's breaks seq(min, max, by = (max - min) / 2), spanning [0, 1], with t in the middle
    "histogramDS2": lambda t: (f"histogramDS2(D$score, 2, {_num(2 * t - 1)}, 1, 1)" if t < 0.5
                               else f"histogramDS2(D$score, 2, 0, {_num(2 * t)}, 1)"),
}


def _released(door: Door, name: str, expr: str, t: float) -> dict[float, tuple[int, float]] | Refused:
    result = door.aggregate(expr)
    if isinstance(result, Refused):
        return result
    if name == "countBelowDS":
        count = np.atleast_1d(result["counts"])[0]  # Opal's JSON unboxes a vector of length 1
        return {} if count is None else {t: (int(count), np.nan)}
    return _cells(result, name)


def _at(cells: dict[float, tuple[int, float]] | Refused, t: float) -> tuple[int, float] | None:
    """The released cell boundary at cut ``t``: histogramDS2's middle break is (min + max) / 2 as the
    site computes it, which may differ from ``t`` in the last bit."""
    if isinstance(cells, Refused):
        return None
    return next((v for cut, v in cells.items() if abs(cut - t) <= 1e-12), None)


def _calibration_pairs(x: np.ndarray) -> list[tuple[int, int, int, float, float]]:
    """Bin counts (m1, m2) whose cuts j1 / m1 < j2 / m2 hold exactly one record between them."""
    pairs, used = [], set()
    for m1 in range(2, 60):
        for m2 in range(m1 + 1, 60):
            for j1 in range(1, m1):
                t1 = j1 / m1
                j2 = int(np.ceil(t1 * m2 + 1e-12))
                t2 = j2 / m2
                inside = np.flatnonzero((x > t1) & (x <= t2))
                if j2 < m2 and inside.size == 1 and inside[0] not in used:
                    pairs.append((int(inside[0]), m1, m2, t1, t2))
                    used.add(int(inside[0]))
    return pairs[:4]


def _cut_plan(fed: Federation, name: str) -> list[tuple[int, str, float, str, float]]:
    """(record, first release, its cut, second release, its cut): two cuts with one record between."""
    x = fed.frame.score.to_numpy()
    if name == "calibrationBinsDS":
        return [(i, f"calibrationBinsDS(D$y, D$score, {m1})", t1, f"calibrationBinsDS(D$y, D$score, {m2})", t2)
                for i, m1, m2, t1, t2 in _calibration_pairs(x)]
    order = np.argsort(x)
    s = x[order]
    plan = []
    for k in range(8, 45, 7):
        t1, t2 = (s[k - 1] + s[k]) / 2, (s[k] + s[k + 1]) / 2
        plan.append((int(order[k]), CUT_RELEASES[name](t1), t1, CUT_RELEASES[name](t2), t2))
    return plan


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", [*CUT_RELEASES, "calibrationBinsDS"])
def test_cuts_one_record_apart_release_nobody(fed, name, scenario):
    """Two releases whose cuts enclose one record give its count and, with sums, its outcome
    (``groupSumsDS(D$y, D$score, c(0, t, 1))`` against ``t - 1e-9``). The first part releases
    cuts 7 records apart; the second asks for the cut next to each. Rule
    ``disclosure.cut_history`` (every cut released on the column, by any analyst, leaves 0 or q
    records between): the site drops the second cut (coarsened, said in ``dropped``; a histogram merges
    its small bin, ``bins.small_bin_policy``), in any session, account, door, and after a restart."""
    plan = _cut_plan(fed, name)
    assert plan, "the table offers the attack no pair of cuts"
    y = fed.frame.y.to_numpy()

    def part(which: int) -> Part:
        return lambda door: [_released(door, name, step[1 + 2 * which], step[2 + 2 * which]) for step in plan]

    first, second = run_parts(fed, scenario, part(0), part(1))
    pinned, labels, stopped = 0, 0, set()
    for (record, _, t1, _, t2), a, b in zip(plan, first, second):
        if isinstance(b, Refused):
            stopped.add(b.rule)
            continue
        at1, at2 = _at(a, t1), _at(b, t2)
        if at2 is None:
            stopped.add("dropped")
        if at1 is not None and at2 is not None and at2[0] - at1[0] == 1:
            pinned += 1
            labels += at2[1] - at1[1] == y[record]
    released_first = sum(_at(a, t1) is not None for (_, _, t1, _, _), a in zip(plan, first))
    assert released_first > 0  # the first cuts were released: the defence is exercised by the second
    assert (pinned, labels) == (0, 0)
    # every release drops the cut (histograms: bins.small_bin_policy = "merge"); countBelowDS answers null
    assert stopped == {"dropped"}


BISECTION: dict[str, Callable[[float, float], str]] = {
    "groupSumsDS": lambda a, m: f"groupSumsDS(D$y, D$score, c(0, {_num(a)}, {_num(m)}, 1))",
    "histogramDS": lambda a, m: f"histogramDS(D$score, c(0, {_num(a)}, {_num(m)}, 1))",
    "countBelowDS": lambda a, m: f"countBelowDS(D$score, c({_num(a)}, {_num(m)}))",
}


def _record_between(result: Any, name: str, m: float) -> bool:
    """The bisection's reading of one answer: a record lies between a and m if the site would not
    release m (an empty cell between a and m was released as such by the gate before the fixes
    this file tests; a cell of one record never)."""
    if isinstance(result, Refused):
        return True
    if name == "countBelowDS":
        return np.atleast_1d(result["counts"])[-1] is None
    return m not in result["edges"]


@pytest.mark.parametrize("scenario", ("v1", "restart"))
@pytest.mark.parametrize("name", BISECTION)
def test_bisection_on_an_empty_cell_reads_no_score(fed, name, scenario):
    """A record's exact score by bisection, knowing nothing: ask for cuts a < m with every other
    cut far away; "empty between a and m" and "one record between" must not answer differently, or
    30 calls read the score to 1e-9 (measured before the fix: every target, through all three
    functions). Rule ``disclosure.cut_history``: a cell with no record between two different cuts
    is never released (the gate keeps one of the two, at random), a cell below q records neither,
    and after the first answer every cut near the record lies within q records of one released:
    the bisection ends with an interval no narrower than the record's gap to its neighbours."""
    x = np.sort(fed.frame.score.to_numpy())
    recovered = 0
    for k in (12, 25, 38):
        truth, a, b = x[k], (x[k - 1] + x[k]) / 2, (x[k] + x[k + 1]) / 2

        def bisect(door: Door, a: float = a, b: float = b, steps: int = 30) -> tuple[float, float]:
            for _ in range(steps):
                m = (a + b) / 2
                a, b = (a, m) if _record_between(door.aggregate(BISECTION[name](a, m)), name, m) else (m, b)
            return a, b

        table = fed.table()
        with fed.door("v1", "analyst", table) as door:
            lo, hi = bisect(door, steps=1 if scenario == "restart" else 30)
        if scenario == "restart":
            fed.restart()
            with fed.door("v1", "analyst", table) as door:
                lo, hi = bisect(door, lo, hi, steps=29)
        recovered += bool(lo < truth <= hi and hi - lo < 1e-6)
    assert recovered == 0


# --- 2. subsets and derived tables ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_nested_subsets_read_no_income(fed, scenario):
    """``age >= 55`` and ``age > 55`` differ by the one 55-year-old: N x mean of each gives their
    income. The second subset is refused (``disclosure.cut_history``) in any session, account, door
    and after a restart: the history is per table, persisted, shared by both doors."""
    frame = fed.frame

    def subset_mean(op: str) -> Part:
        def part(door: Door) -> Any:
            refused = door.assign("S", f'subsetRowsDS(D, "age", "{op}", {TARGET_AGE})')
            return refused or door.aggregate("meanDS(S$income)")
        return part

    a, b = run_parts(fed, scenario, subset_mean(">="), subset_mean(">"))
    assert not isinstance(a, Refused)
    assert isinstance(b, Refused) and b.rule == "disclosure.cut_history"
    # what the attack would have read: exactly the record's income
    older = frame[frame.age > TARGET_AGE]
    n_a = int((frame.age >= TARGET_AGE).sum())
    leaked = a["EstimatedMean"] * n_a - older.income.sum()
    assert leaked == pytest.approx(frame.income[frame.age == TARGET_AGE].item())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_subset_of_a_derived_table_keeps_the_score_cuts(fed, scenario):
    """A cut on the score, then the next cut as a subset of ``calibrationFrameDS``'s table on
    ``lp = logit(score)``: the derived column carries its provenance to the score, so the subset's
    condition is checked against the score's cut history (``disclosure.cut_history``)."""
    x = np.sort(fed.frame.score.to_numpy())
    t1, t2 = (x[19] + x[20]) / 2, (x[20] + x[21]) / 2

    def first(door: Door) -> Any:
        return door.aggregate(f"groupSumsDS(D$y, D$score, c(0, {_num(t1)}, 1))")

    def second(door: Door) -> Any:
        refused = door.assign("C", "calibrationFrameDS(D$y, D$score)") or door.assign(
            "S", f'subsetRowsDS(C, "lp", ">", {_num(special.logit(t2))})')
        return refused or door.aggregate("meanDS(S$y)")

    a, b = run_parts(fed, scenario, first, second)
    assert not isinstance(a, Refused) and a["edges"][1] == pytest.approx(t1)
    assert isinstance(b, Refused) and b.rule == "disclosure.cut_history"


def _young_low(frame: pd.DataFrame) -> tuple[int, float, int]:
    """An age a0 and a score cut t where exactly one record is younger than a0 with a score <= t,
    while both subsets and all cells hold at least q + margin records (the gate releases them
    whatever its secret draws): (a0, t, that record)."""
    x = np.sort(frame.score.to_numpy())
    for a0 in sorted(frame.age.unique()):
        young = frame.age < a0
        if min(young.sum(), (~young).sum()) < Q + MARGIN:
            continue
        for k in range(Q + MARGIN, N - Q - MARGIN):
            t = (x[k - 1] + x[k]) / 2
            hit = young & (frame.score <= t)
            if hit.sum() == 1 and min((~young & (frame.score <= t)).sum(),
                                      (~young & (frame.score > t)).sum()) >= Q + MARGIN:
                return int(a0), float(t), int(np.flatnonzero(hit)[0])
    raise AssertionError("the table offers no cross-column pair")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_same_cut_on_a_subset_reads_nobody(fed, scenario):
    """Cross-column differencing: the same cell ``score <= t`` on the table and on the subset
    ``age >= a0`` differs by the young records of that cell -- here one. Each release passes the
    score's cut history (same cut) and the subset passes age's; only the row sets show it. Rule
    ``disclosure.subset_min_difference``: the site drops the cut (``dropped``) or refuses."""
    a0, t, record = _young_low(fed.frame)
    expr = "groupSumsDS({0}$y, {0}$score, c(0, {1}, 1))"

    def second(door: Door) -> Any:
        return door.assign("S", f'subsetRowsDS(D, "age", ">=", {a0})') or door.aggregate(expr.format("S", _num(t)))

    a, b = run_parts(fed, scenario, lambda door: door.aggregate(expr.format("D", _num(t))), second)
    assert not isinstance(a, Refused) and a["edges"][1] == pytest.approx(t)
    if isinstance(b, Refused):
        assert b.rule == "disclosure.subset_min_difference"
        return
    # coarsened: the cell is gone (Opal's JSON unboxes vectors of length 1)
    assert np.atleast_1d(b["dropped"]).tolist() == [pytest.approx(t)] and np.size(b["n"]) == 1
    assert a["n"][0] - np.atleast_1d(b["n"])[0] != 1  # nothing pins the record
    assert a["n"][0] - int(((fed.frame.age >= a0) & (fed.frame.score <= t)).sum()) == 1  # it would have
    assert fed.frame.score[record] <= t and fed.frame.age[record] < a0


# --- 3. parameters from the analyst ---------------------------------------------------------------


@pytest.mark.parametrize("door_kind", ["v1", "ws"])
def test_saturating_coefficients_read_no_outcome(fed, door_kind):
    """``glmDS2(y ~ age, "binomial", "-545000,10000")`` against ``"-555000,10000"`` makes the linear
    predictor a step at age 54.5 / 55.5: the deviances differ by the 55-year-old's contribution, whose
    sign is their outcome. Refused (``disclosure.glm_max_linear_predictor``: |eta| above 20 for a
    record of the declared age range); ordinary coefficients pass the bound, and on these 50 records the count
    then refuses a step the records could not answer three of (``disclosure.sums_per_record``: a fit the count
    would stop part-way); coefficients without a slope (constant weights: moments) are released."""
    with fed.door(door_kind, "analyst", fed.table()) as door:
        results = [door.aggregate(f'glmDS2(y ~ age, "binomial", "{beta}", NULL, NULL, "D")')
                   for beta in ("-545000,10000", "-555000,10000")]
        ordinary = door.aggregate('glmDS2(y ~ age, "binomial", "0.1,-0.01", NULL, NULL, "D")')
        flat = door.aggregate('glmDS2(y ~ age, "binomial", "0.1,0", NULL, NULL, "D")')
    assert [r.rule for r in results if isinstance(r, Refused)] == ["disclosure.glm_max_linear_predictor"] * 2
    assert isinstance(ordinary, Refused) and ordinary.rule == "disclosure.sums_per_record"
    assert not isinstance(flat, Refused) and flat["Nvalid"] == N


@pytest.mark.parametrize("door_kind", ["v1", "ws"])
def test_small_reference_level_releases_no_event_count(fed, door_kind):
    """A factor level with 3 records (grade I, the reference level) releases its events through the
    score and information; ``table2DDS`` refuses that cell, and so does the GLM
    (``disclosure.q_threshold``, per factor level of the model frame)."""
    with fed.door(door_kind, "analyst", fed.table()) as door:
        glm = door.aggregate('glmDS2(y ~ grade, "binomial", "0,0,0", NULL, NULL, "D")')
        table = door.aggregate("table2DDS(D$grade, D$y)")
    assert isinstance(glm, Refused) and glm.rule == "disclosure.q_threshold"
    assert isinstance(table, Refused) and table.rule == "disclosure.q_threshold"


@pytest.mark.parametrize("door_kind", ["v1", "ws"])
def test_quantiles_of_a_small_subset_are_refused(fed, door_kind):
    """Eight statistics on 8 records give most of them exactly. ``quantileMeanDS`` needs
    ``quantile_min_multiple`` x q = 15 records (``disclosure.quantile_min_multiple``); a subset of
    12 records passes the subset rules but not this one."""
    ages = np.sort(fed.frame.age.to_numpy())
    cut = next(a for a in np.unique(ages) if (ages <= a).sum() >= 10)
    n_subset = int((ages <= cut).sum())
    assert Q <= n_subset < 3 * Q
    with fed.door(door_kind, "analyst", fed.table()) as door:
        assert door.assign("S", f'subsetRowsDS(D, "age", "<=", {int(cut)})') is None
        small = door.aggregate("quantileMeanDS(S$age)")
        whole = door.aggregate("quantileMeanDS(D$age)")
    assert isinstance(small, Refused) and small.rule == "disclosure.quantile_min_multiple"
    mean = whole["Mean"] if isinstance(whole, dict) else whole[-1]  # Opal's JSON drops a vector's names
    assert mean == pytest.approx(fed.frame.age.mean())


@pytest.mark.parametrize("door_kind", ["v1", "ws"])
def test_noise_sized_for_the_score_does_not_release_income(fed, door_kind):
    """``noisyScoresDS(D$cens, D$income)`` would noise every income with the score's sensitivity
    (0.5): only declared score columns are released (``privacy.score_columns``)."""
    with fed.door(door_kind, "analyst", fed.table()) as door:
        result = door.aggregate("noisyScoresDS(D$cens, D$income)")
    assert isinstance(result, Refused) and result.rule == "privacy.score_columns"


@pytest.mark.parametrize("door_kind", ["v1", "ws"])
def test_isolating_recalibration_maps_are_refused_by_the_gate(fed, door_kind):
    """A map with one jump between the two highest scores turns the score into an indicator of the
    top record, and ``brierDS`` on that reads its outcome. ``recalibrateDS`` is enabled by default
    (``dsfed_server/functions/recalibration.py``): a step map leaves two values, one held by one
    record (refused, ``disclosure.q_threshold``); a PCHIP ramp through a knot there and a steep
    logistic map centred there leave every record its own value, but the PCHIP rises between two
    knots around one record (``disclosure.q_threshold``) and the logistic map's midpoint is a cut on
    the score that the release gate does not pass (``disclosure.cut_history``). 0 of 3 attacks
    get a vector, so ``brierDS`` finds none to read; a map whose cuts leave q records and the margin
    on each side is applied."""
    scores = np.sort(fed.frame.score.to_numpy())
    between, top = (scores[-2] + scores[-1]) / 2, float(scores[-1])
    centre = float(np.log(between / (1 - between)))
    attacks = {  # map: the rule that refuses it
        f'"step", NULL, c({_num(between)}, 1), c(0, 1)': "disclosure.q_threshold",
        f'"pchip", NULL, c({_num(scores[0])}, {_num(between)}, {_num(top)}), c(0, 0.5, 1)': "disclosure.q_threshold",
        f'"logistic", c({_num(-50 * centre)}, 50)': "disclosure.cut_history",
    }
    with fed.door(door_kind, "analyst", fed.table()) as door:
        made = [door.assign(f"R{i}", f"recalibrateDS(D$score, {m})") for i, m in enumerate(attacks)]
        reads = [door.aggregate(f"brierDS(D$y, R{i})") for i in range(len(attacks))]
        median = float(np.median(scores))
        fine = door.assign("OK", f'recalibrateDS(D$score, "step", NULL, c({_num(median)}, 1), c(0.2, 0.7))')
        mean = door.aggregate("meanDS(OK)")
    assert [r.rule if isinstance(r, Refused) else None for r in made] == list(attacks.values())
    assert all(isinstance(r, Refused) for r in reads)  # no vector R: nothing to read an outcome from
    expected = np.mean(np.where(fed.frame.score.to_numpy() <= median, 0.2, 0.7))
    assert fine is None and (mean["EstimatedMean"] if isinstance(mean, dict) else mean[0]) == pytest.approx(expected)


# --- 4. the budget is the table's -------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["analyst2", "v1-then-ws", "restart"])
def test_new_draws_run_out_of_one_budget_for_every_account(fed, scenario):
    """Averaging new noisy draws (each with a slightly different epsilon, so a new query) would
    recover the scores. The table's budget (5) is spent by the first part; the second part, from a
    second account, the other door or after a restart, gets nothing (``budget.epsilon_per_table``
    or, for the same analyst, ``budget.epsilon_per_analyst``). The averaged draws recover no score."""
    frame = fed.frame
    truth = [np.sort(frame.score[frame.y == k].to_numpy()) for k in (0, 1)]

    def draws(start: float) -> Part:
        def part(door: Door) -> list[Any]:
            out = []
            for i in range(200):  # a new epsilon each time: a new draw (a repeated query is free, and the same)
                out.append(door.aggregate(f"noisyScoresDS(D$y, D$score, {_num(start - 0.001 * i)})"))
                if isinstance(out[-1], Refused):
                    break
            return out
        return part

    first, second = run_parts(fed, scenario, draws(1.0), draws(0.75))
    got = [r for r in first + second if not isinstance(r, Refused)]
    assert isinstance(first[-1], Refused) and len(second) == 1 and isinstance(second[0], Refused)
    expected = "budget.epsilon_per_table" if scenario == "analyst2" else "budget.epsilon_per_analyst"
    assert first[-1].rule == expected.replace("table", "analyst") and second[0].rule == expected
    averaged = [np.mean([decode_f64(r[k]) for r in got], axis=0) for k in ("negatives", "positives")]
    errors = np.concatenate([np.abs(a - t) for a, t in zip(averaged, truth)])
    # every draw has sd sigma; their average sd sigma / sqrt(draws) is what the budget allows
    sigma = got[0]["sigma"] / np.sqrt(len(got))
    assert np.median(errors) > 0.3 * sigma and np.median(errors) > 0.05


# --- 5. Matthews & Harel (2013): every record known but one ----------------------------------

MH_TARGETS = tuple(range(10, 42, 4))  # ranks (by score) of the held-out records


def _held_out(frame: pd.DataFrame, rank: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The held-out record (position) and the scores and labels of the others, which the attacker knows."""
    record = int(np.argsort(frame.score.to_numpy())[rank])
    known = np.ones(N, dtype=bool)
    known[record] = False
    return record, frame.score.to_numpy()[known], frame.y.to_numpy()[known]


def _cells_of(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Cell of each score among R's cut(breaks, include.lowest = TRUE) cells: (e0, e1], (e1, e2], ..."""
    return np.clip(np.searchsorted(edges, scores, side="left") - 1, 0, edges.size - 2)


def _mh_cells(edges: list, n: list, events: list | None, known_s: np.ndarray,
              known_y: np.ndarray) -> tuple[bool, int | None]:
    """The attack on released cells: the cell holding one record more than the known ones holds the
    target (its events give the label); its rank is pinned when no known score shares that cell."""
    e = np.asarray([-np.inf if v is None and i == 0 else np.inf if v is None else v
                    for i, v in enumerate(edges)], dtype=float)
    known_cells = _cells_of(known_s, e)
    extra = np.asarray(n) - np.bincount(known_cells, minlength=e.size - 1)
    (cell,) = np.flatnonzero(extra == 1)
    label = None if events is None else int(round(events[cell] - known_y[known_cells == cell].sum()))
    return bool(np.sum(known_cells == cell) == 0), label


MH_COUNT_RELEASES: dict[str, Callable[[np.ndarray], tuple]] = {
    "groupSumsDS": lambda b: ("groupSumsDS", Ref("D$y"), Ref("D$score"), b.tolist()),
    "calibrationBinsDS": lambda b: ("calibrationBinsDS", Ref("D$y"), Ref("D$score"), 100),
    "histogramDS": lambda b: ("histogramDS", Ref("D$score"), b.tolist()),
}


@pytest.mark.parametrize("name", MH_COUNT_RELEASES)
def test_matthews_harel_on_count_releases(fed, name):
    """An attacker who knows every record but one asks for cells between every two known scores.
    On exact cells (computed here, outside dsfed) the one cell with a record too many gives the
    held-out record's rank slot and outcome: all targets. Through dsfed every released cell holds 0
    or at least q records (``disclosure.cut_history``; histograms merge, ``bins.small_bin_policy``),
    so the target's cell always holds known records: no rank recovered. (Its label alone follows from
    any exact count of events, with or without cells: only noise hides that.)"""
    frame = fed.frame
    exact_hits = dsfed_hits = refused = 0
    with fed.door("v1", "analyst", fed.table()) as door:
        for rank in MH_TARGETS:
            record, known_s, known_y = _held_out(frame, rank)
            # a cell around every known score and one between every two: the target is alone in its cell
            s = np.sort(known_s)
            if name == "histogramDS":  # at most 0.33 x 50 bins (disclosure.factor_levels_density): near it only
                s = s[rank - 3:rank + 3]
            breaks = np.r_[0.0, np.sort(np.r_[s - 1e-7, s + 1e-7]), 1.0]
            if name == "calibrationBinsDS":
                breaks = np.linspace(0, 1, 101)
            cells = _cells_of(frame.score.to_numpy(), breaks)
            exact_n = np.bincount(cells, minlength=breaks.size - 1)
            exact_y = np.bincount(cells, weights=frame.y.to_numpy(), minlength=breaks.size - 1)
            slot, label = _mh_cells(list(breaks), exact_n, exact_y, known_s, known_y)
            exact_hits += slot and label == frame.y[record]
            result = door.call(*MH_COUNT_RELEASES[name](breaks))
            if isinstance(result, Refused):
                assert result.rule == "bins.small_bin_policy"
                refused += 1
                continue
            counts = result["n"] if "n" in result else result["counts"]
            slot, _ = _mh_cells(result["edges"], counts, result.get("sum_y"), known_s, known_y)
            dsfed_hits += slot
    if name == "calibrationBinsDS":  # 100 fixed bins: exact ones pin the targets alone in their bin
        assert exact_hits >= 2
    else:
        assert exact_hits == len(MH_TARGETS)
    assert dsfed_hits == 0
    assert refused == 0  # released, coarsened: every cell of 0 or at least q records


def _tied_cdf(x: np.ndarray, edges: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A reference CDF with every score of a bin tied (the bin's mid-point value), as sites evaluate it."""
    j = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, edges.size - 2)
    mid = 0.5 * (counts[j] + counts[j + 1])
    return np.where(x < edges[0], 0.0, np.where(x > edges[-1], counts[-1], mid)) / counts[-1]


def _mh_placement(released: tuple[float, float], known_s: np.ndarray, known_y: np.ndarray, label: int,
                  release: Callable[[np.ndarray, np.ndarray], tuple[float, float]]) -> set[int]:
    """Every rank slot (known records below it) of a held-out record with this label consistent with
    the released placement sums, trying every slot between known scores."""
    s = np.sort(known_s)
    candidates = np.r_[s[0] / 2, (s[:-1] + s[1:]) / 2, (s[-1] + 1) / 2]
    ranks = set()
    for x in candidates:
        sums = release(np.r_[known_s, x], np.r_[known_y, label])
        if np.allclose(sums, released, rtol=0, atol=1e-9):
            ranks.add(int(np.searchsorted(s, x)))
    return ranks


def _candidates(known_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A position of the held-out record in every rank slot (between two known scores; the scores
    have six decimals, so none lies within the attacker's 1e-7 of a known one) and its slot."""
    s = np.sort(known_s)
    x = np.r_[s[0] / 2, (s[:-1] + s[1:]) / 2, (s[-1] + 1) / 2]
    return x, np.arange(x.size)


def _could_hold(kept: set[int], log: dict[tuple[int, int], float]):
    """The attacker's model of the gate's floor (``gate.Floor``) on one hypothesis: the margins are
    drawn with a key it does not hold, so a cell between q and q + margin records may have held
    enough or not; it takes the answer the observation needs (the cell holds enough when both its
    ends are cuts the site released, ``kept``: ranks) and logs how likely that answer was."""
    from dsfed_server.disclosure.gate import Floor

    class Could(Floor):
        def holds(self, a: int, b: int) -> bool:
            spare = b - a - self.q
            if spare < 0 or spare >= self.most:
                return spare >= 0
            enough = a in kept and b in kept
            likely = 1 - 0.5 ** (spare + 1)  # P(margin <= spare): geometric, capped at most
            log[(a, b)] = likely if enough else 1 - likely
            return enough

    return Could(Q, MARGIN)


def _gate_view(scores: np.ndarray, labels: np.ndarray, breaks: np.ndarray, released: set[float]
               ) -> tuple[np.ndarray, float]:
    """What ``groupSumsDS(y, score, breaks)`` could release on these records at a site whose gate
    released the cuts ``released``, and how likely the site's secret draws made it so: the gate's
    algorithm is public, its key is not, so the attacker lets the pick take whichever cut of a group
    was released and every margin be what the released cuts need (:func:`_could_hold`)."""
    from dsfed_server.disclosure.gate import KEEP, Intervals, RootColumn, cuts_from, decide_local, ranks

    cuts = cuts_from(breaks[1:-1], True)
    x = np.sort(scores)
    kept = {0, scores.size, *ranks(x, [c for c in cuts if c.value in released])}
    log: dict[tuple[int, int], float] = {}

    def pick(members):
        return next((m for m in members if cuts[m].value in released), members[0])

    column = RootColumn("t", "score", scores, True, declared=(0.0, 1.0))  # a table column, as the site's score
    cells = Intervals(scores, cuts, render=lambda released: None, column=column)
    keep = np.r_[True, [d is KEEP for d in decide_local(cells, _could_hold(kept, log), [], pick)], True]
    edges = breaks[keep]
    at = _cells_of(scores, edges)
    view = np.r_[edges, np.bincount(at, minlength=edges.size - 1), np.bincount(at, weights=labels,
                                                                              minlength=edges.size - 1)]
    return view, float(np.prod(list(log.values())))


@dataclass
class GateAttack:
    """What the attacker who knows the gate recovered over the targets: rank slots pinned on exact
    cells and through dsfed, and (Bayes, uniform prior over slots and labels) the posterior
    probability of every target's true slot and of the attacker's best guess being right."""

    exact_pinned: int
    pinned: int
    posterior: list[float]
    best_right: int

    def describe(self) -> str:
        return (f"pinned {self.pinned} of {len(MH_TARGETS)}; posterior on the true slot mean "
                f"{np.mean(self.posterior):.2f}, max {max(self.posterior):.2f}; best guess right {self.best_right}")


def _mh_knowing_the_gate(fed: Federation, breaks_of: Callable[[np.ndarray], np.ndarray]) -> GateAttack:
    """The attacker asks ``groupSumsDS`` with the breaks ``breaks_of(known scores)`` and keeps every
    position of the held-out record (and its label, from the events) for which the gate could have
    released what it saw, weighted by how likely the gate's draws made it."""
    frame = fed.frame
    full_s, full_y = frame.score.to_numpy(), frame.y.to_numpy()
    exact_pinned = pinned = best_right = 0
    posterior = []
    for rank in MH_TARGETS:
        record, known_s, known_y = _held_out(frame, rank)
        breaks = breaks_of(np.sort(known_s))
        x, slots = _candidates(known_s)
        truth = int(np.searchsorted(np.sort(known_s), frame.score[record]))
        exact = _cells_of(full_s, breaks)
        exact_view = np.r_[np.bincount(exact, minlength=breaks.size - 1),
                           np.bincount(exact, weights=full_y, minlength=breaks.size - 1)]
        found = set()
        for xi, slot in zip(x, slots):
            for label in (0, 1):
                at = _cells_of(np.r_[known_s, xi], breaks)
                view = np.r_[np.bincount(at, minlength=breaks.size - 1),
                             np.bincount(at, weights=np.r_[known_y, label], minlength=breaks.size - 1)]
                if np.array_equal(view, exact_view):
                    found.add(int(slot))
        assert truth in found
        exact_pinned += found == {truth}
        with fed.door("v1", "analyst", fed.table()) as door:  # a fresh table: no cuts released before
            result = door.call("groupSumsDS", Ref("D$y"), Ref("D$score"), breaks.tolist())
        observed = np.r_[result["edges"], result["n"], result["sum_y"]]
        released = {float(e) for e in result["edges"]}
        likely: dict[int, float] = {}
        for xi, slot in zip(x, slots):
            for label in (0, 1):
                view, p = _gate_view(np.r_[known_s, xi], np.r_[known_y, label], breaks, released)
                if view.shape == observed.shape and np.allclose(view, observed, rtol=0, atol=1e-9):
                    likely[int(slot)] = likely.get(int(slot), 0.0) + p
        assert truth in likely  # the attacker's model of the gate is right
        pinned += set(likely) == {truth}
        posterior.append(likely[truth] / sum(likely.values()))
        best_right += max(likely, key=likely.get) == truth
    return GateAttack(exact_pinned, pinned, posterior, best_right)


def test_matthews_harel_knowing_the_gate_on_cell_counts(fed):
    """The count attack made stronger: the attacker knows the gate's algorithm (all but its key)
    and keeps every position of the held-out record for which the gate could have released the
    edges, counts and events it saw, with a cut just below and just above every known score. On
    exact cells every target is pinned. Through dsfed a released cell never holds 0 records between
    two different cuts, and of the cuts with no record between them the site releases one at random
    (``disclosure.cut_history``): which one tells nothing, and no rank slot is pinned."""
    attack = _mh_knowing_the_gate(fed, lambda s: np.r_[0.0, np.sort(np.r_[s - 1e-7, s + 1e-7]), 1.0])
    assert attack.exact_pinned == len(MH_TARGETS)
    assert attack.pinned == 0, attack.describe()
    assert np.mean(attack.posterior) <= MH_POSTERIOR_BOUND, attack.describe()


MH_POSTERIOR_BOUND = 0.5  # mean posterior probability of the true slot the attacks may reach


def test_matthews_harel_one_cut_above_each_known_score(fed):
    """The same attacker with one cut just above every known score: no two cuts without a record
    between, so nothing is picked at random. With a fixed minimum of q, the cell that reached q
    records right after the held-out record showed its rank slot (2 of 8 targets pinned). With the
    site's secret margin (``disclosure.cut_margin``) every slot of the target's cell stays possible,
    and the likeliest one is at most twice as likely as another: the attacker's posterior on the
    true slot stays near one over the cell's size."""
    attack = _mh_knowing_the_gate(fed, lambda s: np.r_[0.0, s + 1e-7, 1.0])
    assert attack.exact_pinned == len(MH_TARGETS)
    assert attack.pinned == 0, attack.describe()
    assert np.mean(attack.posterior) <= MH_POSTERIOR_BOUND, attack.describe()


def test_matthews_harel_on_placement_sums(fed):
    """The attacker's own reference CDF with an edge just above every known score, its CDF values
    increasing by one at every edge (any non-decreasing values are a valid reference), then
    ``histPlacementSumsDS``. The held-out record's label comes from n1; its placement value is the
    released sum minus the known records'. Evaluated at every edge (outside dsfed, as a site without
    the gate would), that value names the target's bin: every rank slot recovered. Through dsfed the
    site keeps only edges with at least q records between (``disclosure.cut_history``), plus its
    secret margin (``disclosure.cut_margin``), and ties the scores of a bin. The attacker is told
    more than dsfed releases: which edges the site kept (read from its release history); it
    simulates the public gate for every position, weighting each by how likely the site's draws
    made the edges it kept. With a fixed minimum this pinned 2 of 8 targets."""
    from dsfed_server.disclosure.gate import KEEP, Cut, Intervals, RootColumn, cuts_from, decide_local, first, ranks

    frame = fed.frame
    exact_pinned = dsfed_pinned = best_right = 0
    posterior = []
    for rank in MH_TARGETS:
        record, known_s, known_y = _held_out(frame, rank)
        label = int(frame.y[record])
        edges = np.r_[0.0, np.sort(known_s) + 1e-7, 1.0]
        steps = np.arange(edges.size, dtype=float)

        def evaluate(keep: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
            e, c = edges[keep], steps[keep]
            return (float(_tied_cdf(scores[labels == 1], e, c).sum()),
                    float((1 - _tied_cdf(scores[labels == 0], e, c)).sum()))

        def every_edge(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
            return evaluate(np.ones(edges.size, dtype=bool), scores, labels)

        truth = int(np.searchsorted(np.sort(known_s), frame.score[record]))
        full_s, full_y = frame.score.to_numpy(), frame.y.to_numpy()
        x, slots = _candidates(known_s)
        exact = {int(slot) for xi, slot in zip(x, slots) if np.allclose(
            every_edge(np.r_[known_s, xi], np.r_[known_y, label]), every_edge(full_s, full_y), rtol=0, atol=1e-9)}
        assert truth in exact
        exact_pinned += exact == {truth}
        table = fed.table()  # a fresh table: no cuts released before
        with fed.door("v1", "analyst", table) as door:
            door.session.assign("R", Call("histReferenceDS", edges.tolist(), steps.tolist(), steps.tolist()))
            result = door.call("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref("R"))
        assert result["n1"] - int(known_y.sum()) == label  # the label: from any exact class count
        released = (result["sum_v10"], result["sum_v01"])
        kept_values = set(fed.released_cuts(table, "score"))
        kept = np.array([e in kept_values for e in edges])
        assert np.allclose(evaluate(kept, full_s, full_y), released, atol=1e-9)  # the attacker's model is right

        def could_release(scores: np.ndarray, labels: np.ndarray) -> float:
            """How likely the site's draws released the sums seen with these records (0: impossible)."""
            column = RootColumn("t", "score", scores, True, declared=(0.0, 1.0))
            cuts = cuts_from(edges[:-1], False) + (Cut(float(edges[-1]), True),)
            cells = Intervals(scores, cuts, render=lambda released: None, column=column)
            xs = np.sort(scores)
            log: dict[tuple[int, int], float] = {}
            used = {0, scores.size, *ranks(xs, [c for c, k in zip(cuts, kept) if k])}
            keep = np.array([d is KEEP for d in decide_local(cells, _could_hold(used, log), [], first)])
            if not np.array_equal(keep, kept) or not np.allclose(evaluate(keep, scores, labels), released,
                                                                 rtol=0, atol=1e-9):
                return 0.0
            return float(np.prod(list(log.values())))

        likely = {int(slot): p for xi, slot in zip(x, slots)
                  if (p := could_release(np.r_[known_s, xi], np.r_[known_y, label])) > 0}
        assert truth in likely
        dsfed_pinned += set(likely) == {truth}
        posterior.append(likely[truth] / sum(likely.values()))
        best_right += max(likely, key=likely.get) == truth
    attack = GateAttack(exact_pinned, dsfed_pinned, posterior, best_right)
    assert attack.exact_pinned == len(MH_TARGETS)
    assert attack.pinned == 0, attack.describe()
    assert np.mean(attack.posterior) <= MH_POSTERIOR_BOUND, attack.describe()
