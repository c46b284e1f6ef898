"""Property-based search for derived expressions and sums that isolate a record.

``hypothesis`` writes random expressions over the whole grammar of derived columns -- arithmetic,
``log``/``exp``/``sqrt``/``abs``, ``pmin``/``pmax``, ``ifelse`` on comparisons, and the cuts in disguise
a hostile analyst writes (a sign as ``(x - t)/sqrt((x - t)^2)``, a steep logistic step, an algebraic
step, a narrow bump, a spike ``log(x - t)``) at values ``t`` placed between neighbouring records,
with negligible terms (``+ 1e-13*D$income``) added at random -- derives them (later ones may read
earlier ones), and asks for what returns exact sums of them: means, variances, correlations and a
distributed GLM fit, per site through the native door, per site through the DataSHIELD door with the
unmodified PyPI client, and pooled over three sites under secure aggregation.

The oracle is independent of the site's code: R evaluates every accepted expression on the true
records (rpy2), every released number becomes the per-record contributions it sums (a mean: the
values and the count of valid records; a variance: also the squares; a correlation and a gaussian
GLM: the products), and a record is isolated when its indicator lies in the span of those
contribution vectors and the table's count vector (its leverage, by SVD, is 1 to within 1e-9):
then a combination of released sums is that record's value.

CI runs ``EXPRESSION_EXAMPLES`` examples per door (default 25; the pooled search a fifth of that);
``bench/RESULTS.md`` records a longer run: ``EXPRESSION_EXAMPLES=300 .venv/bin/python -m pytest
tests/test_expression_search.py -q``.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from datashield import DSError, DSLoginBuilder, DSSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import inprocess_builder
from dsfed_client import Call, FederatedCallError, Ref
from dsfed_client.analyses import ds_glm
from dsfed_client.analyses.glm import ConvergenceError
from rref import r_eval
from sitekit import make_sites, serve
from test_derived_column_attacks import fixed_secrets

EXAMPLES = int(os.environ.get("EXPRESSION_EXAMPLES", "25"))
N = 40
COLUMNS = ("score", "age", "income")


def _frame(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "score": rng.choice(np.arange(20_000, 980_000), N, replace=False) / 1e6,
        "age": rng.integers(25, 90, N),
        "income": np.round(rng.normal(50_000, 12_000, N), 2),
        "y": rng.integers(0, 2, N),
    })


FRAME = _frame(11)
SITES = {f"s{i}": _frame(20 + i) for i in range(3)}


def _between(column: str, frame: pd.DataFrame = FRAME) -> list[str]:
    """Values between neighbouring records of a column, as the expression writes them."""
    v = np.unique(frame[column].to_numpy(dtype=float))
    return [repr(float(c)) for c in (v[:-1] + v[1:]) / 2]


DISGUISED = ("(D${c} - {t})/sqrt((D${c} - {t})^2)", "2/(1 + exp(1e9*({t} - D${c}))) - 1",
             "exp(-1e6*(D${c} - {t})^2)", "log(D${c} - {t})", "1e12*(D${c} - {t})/sqrt(1 + 1e24*(D${c} - {t})^2)",
             "sqrt((D${c} - {t})^2)")
GATED = ("ifelse(D${c} > {t}, 1, 0)", "pmin(D${c}, {t})", "abs(D${c} - {t})")
number = st.sampled_from(("0.5", "2", "10", "40", "1e-13", "1e9"))
negligible = st.sampled_from(("", " + 1e-13*D$income", " + 1e-13*D$age", " * (1 + 1e-13*D$score)"))


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(("+", "-", "*", "/")), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})")
    unary = st.tuples(st.sampled_from(("log", "exp", "sqrt", "abs")), inner).map(lambda t: f"{t[0]}({t[1]})")
    power = st.tuples(inner, st.sampled_from(("2", "3", "0.5", "-1"))).map(lambda t: f"({t[0]})^{t[1]}")
    return st.one_of(binary, unary, power)


def sequences_around(focus: tuple[str, int]) -> st.SearchStrategy[list[tuple]]:
    """Sequences whose cuts lie mostly at the two values around one record of one column (``focus``:
    the column and the record's rank), where two cuts in disguise would bracket it, and sometimes
    anywhere."""
    c, rank = focus
    between = _between(c)
    rank = min(rank, len(between) - 1)  # a whole-number column has fewer distinct values than records
    near = st.sampled_from(between[max(0, rank - 1):rank + 1])
    cut_at = st.one_of(st.tuples(st.just(c), near), st.tuples(st.just(c), near),
                       st.sampled_from(COLUMNS).flatmap(lambda o: st.tuples(st.just(o), st.sampled_from(_between(o)))))
    disguised = st.tuples(st.sampled_from(DISGUISED), cut_at, negligible).map(
        lambda d: d[0].format(c=d[1][0], t=d[1][1]) + d[2])
    gated = st.tuples(st.sampled_from(GATED), cut_at).map(lambda d: d[0].format(c=d[1][0], t=d[1][1]))
    atom = st.one_of(st.sampled_from(COLUMNS).map(lambda o: f"D${o}"), number, disguised, disguised, gated,
                     st.sampled_from(("V1", "V2")))
    tree = st.tuples(st.recursive(atom, _grow, max_leaves=3), negligible).map(lambda t: t[0] + t[1])
    # a cut in disguise on its own, or scaled, or times a column (a record's value read at the cut)
    read = st.tuples(st.sampled_from(COLUMNS), disguised).map(lambda t: f"D${t[0]}*({t[1]})")
    expression = st.one_of(disguised, disguised, disguised, disguised, read, tree, tree) \
        .filter(lambda text: len(text) <= 80)  # the shipped strings.max_length
    derive = st.tuples(st.just("derive"), expression)
    symbol = st.sampled_from(("V1", "V2", "V3"))
    aggregate = st.one_of(st.tuples(st.sampled_from(("mean", "var")), symbol),
                          st.tuples(st.sampled_from(("cor", "glm")), symbol, symbol))
    # mostly a derived column then a sum of it: what the attacks of tests/test_derived_column_attacks.py do
    pair = st.tuples(derive, st.tuples(st.sampled_from(("mean", "var")), st.just("latest")))
    steps = st.one_of(pair.map(list), pair.map(list), derive.map(lambda d: [d]), aggregate.map(lambda a: [a]))
    return st.lists(steps, min_size=2, max_size=6).map(lambda groups: [op for g in groups for op in g])


# the record to bracket: anywhere, or next to an end (where one cut alone leaves it by itself)
sequences = st.tuples(st.sampled_from(COLUMNS), st.one_of(st.integers(1, N - 3), st.sampled_from((1, N - 3)))) \
    .flatmap(sequences_around)


# --- the oracle ------------------------------------------------------------------------------------


def r_values(texts: dict[str, str], frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every accepted derived column evaluated by R on the true records (R's NaN and +-Inf: missing,
    as the site stores them)."""
    if not texts:
        return {}
    body = "; ".join(f"{name} <- rep_len({re.sub(r'D[$]', '', text)}, n)" for name, text in texts.items())
    out = r_eval(f"suppressWarnings({{ n <- length(score); {body}; c({', '.join(texts)}) }})",
                 **{c: frame[c].to_numpy(dtype=float) for c in COLUMNS})
    values = np.asarray(out, dtype=float).reshape(len(texts), len(frame))
    values[~np.isfinite(values)] = np.nan
    return dict(zip(texts, values))


def contributions(op: tuple, values: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The per-record contribution vectors of the sums a released aggregate is made of."""
    kind, names = op[0], op[1:]
    if any(n not in values for n in names):
        return []
    arrays = [values[n] for n in names]
    valid = np.logical_and.reduce([np.isfinite(a) for a in arrays])
    v = [np.where(valid, a, 0.0) for a in arrays]
    out = [valid.astype(float), *v]
    if kind in ("var", "cor", "glm"):
        out += [a * a for a in v]
    if kind in ("cor", "glm") and len(v) == 2:
        out.append(v[0] * v[1])
    return out


def isolated(released: list[np.ndarray], n: int) -> list[int]:
    """Records whose indicator lies in the span of the released contributions and the count vector:
    leverage 1 to within 1e-9 (columns scaled to unit length; singular values below 1e-12 of the
    largest are no direction)."""
    columns = [np.ones(n)] + [c for c in released if np.any(c)]
    m = np.column_stack([c / np.linalg.norm(c) for c in columns])
    u, s, _ = np.linalg.svd(m, full_matrices=False)
    basis = u[:, s > 1e-12 * s[0]]
    leverage = np.sum(basis ** 2, axis=1)
    return [int(i) for i in np.flatnonzero(leverage > 1 - 1e-9)]


def test_the_oracle_sees_the_attacks_it_must():
    """The check itself: a sign at two cuts bracketing one record, and the record's income read through
    their difference, isolate it; a plain mean and variance of the columns do not."""
    x = FRAME.score.to_numpy()
    order = np.argsort(x)
    t1, t2 = (x[order[19]] + x[order[20]]) / 2, (x[order[20]] + x[order[21]]) / 2
    signs = {"V1": np.sign(x - t1) + 1e-13 * FRAME.income.to_numpy(), "V2": np.sign(x - t2)}
    assert isolated(contributions(("mean", "V1"), signs) + contributions(("mean", "V2"), signs), N) == [int(order[20])]
    plain = {c: FRAME[c].to_numpy(dtype=float) for c in COLUMNS}
    assert isolated(sum((contributions(("var", c), plain) for c in COLUMNS), []), N) == []


# --- the searches -----------------------------------------------------------------------------------


class NativeDoor:
    def __init__(self, session: Any) -> None:
        self.session = session
        session.assign_table("D", "P.t")

    def derive(self, name: str, text: str) -> None:
        self.session.derive(name, text)

    def aggregate(self, op: tuple) -> None:
        kind, names = op[0], op[1:]
        if kind == "mean":
            self.session.aggregate("meanDS", Ref(names[0]))
        elif kind == "var":
            self.session.aggregate("varDS", Ref(names[0]))
        elif kind == "cor":
            self.session.aggregate("corDS", Ref(names[0]), Ref(names[1]))
        else:
            self.session.assign("T", Call("dataFrameDS", f"{names[0]},{names[1]}", clnames="a,b"))
            ds_glm(self.session, "a ~ b", "T", family="gaussian", secure=self.secure)

    secure: bool = False


class DataSHIELDDoor:
    """The unmodified PyPI client through /ws: assign texts as ds.make sends them, aggregate texts."""

    def __init__(self, session: DSSession) -> None:
        self.session = session
        session.assign_table("D", table="P.t", asynchronous=False)

    def derive(self, name: str, text: str) -> None:
        self.session.assign_expr(name, text, asynchronous=False)

    def aggregate(self, op: tuple) -> None:
        kind, names = op[0], op[1:]
        text = {"mean": f"meanDS({names[0]})", "var": f"varDS({names[0]})",
                "cor": f"corDS({names[0]}, {names[-1]})"}.get(kind)
        if text is not None:
            self.session.aggregate(text, asynchronous=False)


REFUSED = (FederatedCallError, DSError, ConvergenceError)


def _search(door: Any, ops: list[tuple], frame: pd.DataFrame) -> list[np.ndarray]:
    """Run ``ops`` through ``door``; the contributions of what was released (refusals release
    nothing; a derived column refused does not exist)."""
    texts: dict[str, str] = {}
    released: list[np.ndarray] = []
    k = 0
    for op in ops:
        try:
            if op[0] == "derive":
                name = f"V{k + 1}"
                if any(re.search(rf"\b{s}\b", op[1]) and s not in texts for s in ("V1", "V2", "V3")):
                    continue
                door.derive(name, op[1])
                texts[name] = op[1]
                k = min(k + 1, 2)
            else:
                if "latest" in op:  # the column derived last
                    if not texts:
                        continue
                    op = (op[0], list(texts)[-1])
                door.aggregate(op)
                released += contributions(op, r_values(texts, frame))
        except REFUSED as exc:
            # a refusal or a bad call releases nothing; a fault of the site is a bug the search found
            assert "internal error" not in str(exc), f"{op}: {exc}"
            continue
    return released


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(ops=sequences)
def test_no_derived_expression_isolates_a_record_native(ops):
    with tempfile.TemporaryDirectory(prefix="dsfed-expressions-") as tmp:
        with fixed_secrets("a"):  # the gate's secret draws alike at every run: a failure replays
            provisioned, services = make_sites(Path(tmp), {"a": FRAME})
        with inprocess_builder(provisioned, services).login() as session:
            released = _search(NativeDoor(session), ops, FRAME)
    assert isolated(released, N) == [], f"isolated by {ops}"


@pytest.fixture(scope="module")
def ws_site(tmp_path_factory: pytest.TempPathFactory):
    with fixed_secrets("ws"):
        provisioned, services = make_sites(tmp_path_factory.mktemp("ws-expressions"), {"a": FRAME})
    with serve(services["a"]) as url:
        yield provisioned["a"], url


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
@given(ops=sequences)
def test_no_derived_expression_isolates_a_record_datashield_door(ws_site, ops):
    """The same search through /ws. One site serves every example, so the cut history builds up over
    the examples, as a hostile analyst's would; the oracle checks each example's releases."""
    provisioned, url = ws_site
    cred = provisioned.credentials["analyst"]
    builder = DSLoginBuilder()
    builder.add("a", url, user=cred.user, password=cred.password)
    session = DSSession(builder.build())
    session.open()
    try:
        released = _search(DataSHIELDDoor(session), [op for op in ops if op[0] != "glm"], FRAME)
    finally:
        session.close()
    assert isolated(released, N) == [], f"isolated by {ops}"


@settings(max_examples=max(1, EXAMPLES // 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(ops=sequences)
def test_no_derived_expression_isolates_a_record_pooled(ops):
    """Three sites under secure aggregation: a GLM is the pooled sink (its sums pooled over the sites,
    the iterates the sites' own); its contributions are over the union of the sites' records."""
    pooled_frame = pd.concat(SITES.values(), ignore_index=True)
    ops = [op for op in ops if op[0] in ("derive", "glm")]
    with tempfile.TemporaryDirectory(prefix="dsfed-expressions-pooled-") as tmp:
        with fixed_secrets(",".join(SITES)):
            provisioned, services = make_sites(Path(tmp), SITES)
        with inprocess_builder(provisioned, services).login() as session:
            door = NativeDoor(session)
            door.secure = True
            released = _search(door, ops, pooled_frame)
    assert isolated(released, len(pooled_frame)) == [], f"isolated by {ops}"
