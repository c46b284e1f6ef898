"""Property-based isolation search over derived expressions, read through quantiles and cells.

``hypothesis`` writes random expression trees over the grammar of derived columns (``+ - * / ^``,
``abs``, ``sqrt``, ``exp``, ``log``, ``pmin``/``pmax``, comparisons in ``ifelse``) on the columns of
a synthetic table (score, y, age, income, weight, height), with the cuts in disguise a hostile analyst
writes: a sign as ``(x - t)/sqrt((x - t)^2)`` or ``(x - t)/abs(x - t)``, a steep logistic step
``2/(1 + exp(1e9*(t - x))) - 1``, bumps ``exp(-40*(x - c)^2)`` and ``exp(-1e6*(x - c)^2)``, an
indicator of the cell between two cuts, and negligible terms (``+ 1e-13*D$income``). Cut values and
centres lie between neighbouring records of a column, mostly the two around one record, where
differencing works (Denning and Schlörer 1983; Dinur and Nissim 2003). After each column
is derived the analyst asks for ``meanDS``, ``varDS``, ``quantileMeanDS``, ``histogramDS`` and
``thresholdBinsDS`` of it, per site, and on three in-process sites the pooled ``histogramDS`` and
``thresholdBinsDS`` (``session.pooled``) next to per-site means.

The oracle is computed from the truth, not the site's code: R evaluates every accepted expression on
the true records (rpy2). A released exact sum of a column f over records R (a mean or the mean of
``quantileMeanDS``: f; a variance: f and f^2; a cell of ``thresholdBinsDS``: f over the cell) isolates
a record when one record carries nearly all of it, |f(x_i)| >= (1 - 1e-6) sum_j |f(x_j)| with f
nonzero somewhere, or when f is nonzero at one record only; so does f - a g for two released sums f
and g (a = 1, or the scale that cancels them at one record), which the analyst holds as well.
Counts (cells, and the records a column is valid at, which ``Nmissing`` releases) are row sets; a
record is isolated when its indicator lies in their span with the table's, ``rank([M | e_i]) ==
rank(M)`` (the test of ``tests/test_isolation_search.py``).
Quantiles themselves are order statistics DataSHIELD releases by design (its ``quantileMeanDS``); the
search counts only their mean. Nor does the oracle solve for a small group's values from many gentle
functions summed over it (the moment attack; ``tests/test_moment_attacks.py`` measures that one).

The property: no sequence released under the shipped rules isolates a record (refusals are fine).
``test_the_search_can_fail`` runs the same oracle on sequences as if every call had been released,
and asks hypothesis to find one that isolates: without the rules the search finds one; and a site
whose rules are opened releases attacks the oracle calls isolating.

CI runs ``EXPRESSION_EXAMPLES`` examples per site (default 40; the pooled search a third of that);
``bench/RESULTS.md`` records a longer run: ``EXPRESSION_EXAMPLES=300 .venv/bin/python -m pytest
tests/test_expression_search_cells.py -q``.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from conftest import inprocess_builder
from dsfed_client import FederatedCallError, Ref
from dsfed_core.errors import SiteError
from rref import r_eval
from sitekit import make_sites, rules_variant
from test_derived_column_attacks import fixed_secrets, synthetic_frame
from test_pooled_shared_cells import BENDS, Cells

EXAMPLES = int(os.environ.get("EXPRESSION_EXAMPLES", "40"))
COLUMNS = ("score", "y", "age", "income", "weight", "height")
CUT_COLUMNS = ("score", "age", "income", "weight", "height")
MAX_LENGTH = 80  # the shipped strings.max_length: longer texts are refused before they are read
DOMINANT = 1 - 1e-6
FRAME = synthetic_frame(71)
SITES = {f"s{i}": synthetic_frame(80 + i) for i in range(3)}
POOLED_FRAME = pd.concat(SITES.values(), ignore_index=True)
REFUSED = (FederatedCallError, SiteError, ValueError)  # ValueError: the client saw the sites disagree

Op = tuple[Any, ...]


# --- what the analyst writes -------------------------------------------------------------------------


def _between(frame: pd.DataFrame, column: str) -> list[str]:
    """Values between neighbouring distinct records of a column, as the expression writes them."""
    v = np.unique(frame[column].to_numpy(dtype=float))
    return [repr(float(c)) for c in (v[:-1] + v[1:]) / 2]


SIGNS = ("(D${c} - {t})/sqrt((D${c} - {t})^2)", "(D${c} - {t})/abs(D${c} - {t})",
         "2/(1 + exp(1e9*({t} - D${c}))) - 1")
BUMPS = ("exp(-40*(D${c} - {t})^2)", "exp(-1e6*(D${c} - {t})^2)")
GATED = ("ifelse(D${c} > {t}, 1, 0)", "ifelse(D${c} <= {t}, D$income, 0)", "pmin(D${c}, {t})",
         "pmax(D${c} - {t}, 0)", "abs(D${c} - {t})", "(D${c} > {t})*1")
GENTLE = ("D$score^2", "1 - D$score", "sqrt(D$score)", "0.5*D$score + 0.25", "(D$age - 20)/80", "log(D$age)",
          "D$weight/(D$height/100)^2", "D${c} - {t}", "(D${c} - {t})^2", "exp(-D$score)", "D$score*D$y",
          "ifelse(D$y == 1, D$score, 1 - D$score)", "pmax(D$score, 0.5)")
NEGLIGIBLE = ("", "", " + 1e-13*D$income", " + 1e-13*D$age", " * (1 + 1e-13*D$weight)")
NUMBERS = ("0.5", "2", "10", "40", "1e-13", "1e9")


def _grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(("+", "-", "*", "/")), inner).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})")
    unary = st.tuples(st.sampled_from(("log", "exp", "sqrt", "abs")), inner).map(lambda t: f"{t[0]}({t[1]})")
    power = st.tuples(inner, st.sampled_from(("2", "3", "0.5", "-1"))).map(lambda t: f"({t[0]})^{t[1]}")
    extreme = st.tuples(st.sampled_from(("pmin", "pmax")), inner, inner).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")
    choose = st.tuples(st.sampled_from(("D$age", "D$score", "D$y")), st.sampled_from((">", "<=", "==")),
                       st.sampled_from(("0.5", "1", "60")), inner, inner) \
        .map(lambda t: f"ifelse({t[0]} {t[1]} {t[2]}, {t[3]}, {t[4]})")
    return st.one_of(binary, unary, power, extreme, choose)


def expressions(frame: pd.DataFrame, column: str, rank: int) -> st.SearchStrategy[str]:
    """Expression texts whose cuts lie mostly at the two values around the record of rank ``rank`` of
    ``column`` (two cuts in disguise bracket it), sometimes anywhere, at most MAX_LENGTH long."""
    between = _between(frame, column)
    rank = min(max(rank, 1), len(between) - 1)
    near = st.sampled_from(between[rank - 1:rank + 1])
    anywhere = st.sampled_from(CUT_COLUMNS).flatmap(
        lambda o: st.tuples(st.just(o), st.sampled_from(_between(frame, o))))
    cut = st.one_of(st.tuples(st.just(column), near), st.tuples(st.just(column), near), anywhere)
    centre = frame[column].sort_values().to_numpy(dtype=float)
    at_record = st.sampled_from([repr(float(v)) for v in centre[max(0, rank - 1):rank + 2]])
    sign = st.tuples(st.sampled_from(SIGNS), cut).map(lambda d: d[0].format(c=d[1][0], t=d[1][1]))
    bump = st.tuples(st.sampled_from(BUMPS), st.one_of(at_record, near)).map(lambda d: d[0].format(c=column, t=d[1]))
    gated = st.tuples(st.sampled_from(GATED), cut).map(lambda d: d[0].format(c=d[1][0], t=d[1][1]))
    cell = st.just(f"ifelse(D${column} > {between[rank - 1]} & D${column} < {between[rank]}, 1, 0)")
    disguised = st.tuples(st.one_of(sign, sign, bump, gated, cell), st.sampled_from(NEGLIGIBLE)).map("".join)
    # what analysts derive (and what a cut or a bump hides behind): some of it in [0, 1], as thresholdBinsDS wants
    gentle = st.tuples(st.sampled_from(GENTLE), cut).map(lambda d: d[0].format(c=d[1][0], t=d[1][1]))
    atom = st.one_of(st.sampled_from(COLUMNS).map(lambda c: f"D${c}"), st.sampled_from(NUMBERS), gentle, disguised,
                     disguised)
    tree = st.tuples(st.recursive(atom, _grow, max_leaves=3), st.sampled_from(NEGLIGIBLE)).map("".join)
    read = st.tuples(st.sampled_from(COLUMNS), sign).map(lambda t: f"D${t[0]}*({t[1]})")  # a value read at a cut
    return st.one_of(disguised, disguised, gated, read, gentle, gentle, tree, tree) \
        .filter(lambda s: len(s) <= MAX_LENGTH)


def sequences(frame: pd.DataFrame) -> st.SearchStrategy[list[Op]]:
    """A hostile analyst's sequence: derived columns, each followed by releases of it (or of an earlier
    one): ("derive", text), ("mean"|"var"|"quantile", k), ("hist"|"bins", k, picks); k counts back
    from the column derived last, picks choose cut values between neighbouring values of the column."""
    focus = st.tuples(st.sampled_from(CUT_COLUMNS), st.one_of(st.integers(1, len(frame) - 3), st.just(1)))

    def around(f: tuple[str, int]) -> st.SearchStrategy[list[Op]]:
        derive = expressions(frame, *f).map(lambda text: ("derive", text))
        back = st.sampled_from((0, 0, 0, 1))
        summed = st.tuples(st.sampled_from(("mean", "var", "quantile")), back)
        cells = st.tuples(st.sampled_from(("hist", "bins")), back, st.lists(st.integers(0, 10**6), min_size=1,
                                                                             max_size=3))
        group = st.tuples(derive, st.lists(st.one_of(summed, summed, cells), min_size=1, max_size=3)) \
            .map(lambda g: [g[0], *g[1]])
        return st.lists(group, min_size=1, max_size=4).map(lambda gs: [op for g in gs for op in g])

    return focus.flatmap(around)


# --- the oracle ----------------------------------------------------------------------------------------


def r_values(text: str, frame: pd.DataFrame) -> np.ndarray:
    """The derived column R computes on the true records (NaN and +-Inf: missing, as the site keeps
    them). Earlier derived columns are not referenced by this grammar, so one text is one column."""
    body = re.sub(r"D[$]", "", text)
    out = r_eval(f"suppressWarnings({{ n <- length(score); as.numeric(rep_len({body}, n)) }})",
                 **{c: frame[c].to_numpy(dtype=float) for c in COLUMNS})
    values = np.asarray(out, dtype=float)
    values[~np.isfinite(values)] = np.nan
    return values


@dataclass
class Released:
    """What the analyst holds, as per-record vectors over the table: exact sums (contributions, zero
    outside the records summed) and row sets whose counts were released."""

    n: int
    sums: list[np.ndarray] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)

    def summed(self, values: np.ndarray, *, squares: bool = False) -> None:
        valid = np.isfinite(values)
        f = np.where(valid, values, 0.0)
        self.rows.append(valid)
        self.sums += [valid.astype(float), f] + ([f * f] if squares else [])


def dominated(f: np.ndarray) -> bool:
    """One record carries (nearly) all of a sum: nonzero at one record only, or |f_i| at least
    (1 - 1e-6) of sum |f_j|."""
    a = np.abs(f)
    nonzero = np.count_nonzero(a)
    return nonzero == 1 or (nonzero > 1 and float(a.max()) >= DOMINANT * float(a.sum()))


def _difference_isolates(f: np.ndarray, g: np.ndarray) -> int | None:
    """A record that carries (nearly) all of f - a g for some a: a = 1, or a = f_k/g_k at a record k
    (the scale that cancels one record: what two sums written to cancel everywhere but at one record
    use). None when no such record."""
    scales = np.unique(np.r_[1.0, f[g != 0] / g[g != 0]])
    d = f[None, :] - scales[:, None] * g[None, :]
    a = np.abs(d)
    a[a <= 1e-300] = 0.0
    nonzero = np.count_nonzero(a, axis=1)
    top = a.max(axis=1)
    hit = (nonzero == 1) | ((nonzero > 1) & (top >= DOMINANT * a.sum(axis=1)))
    if not np.any(hit):
        return None
    return int(np.argmax(a[np.flatnonzero(hit)[0]]))


def span_isolated(rows: list[np.ndarray], n: int) -> list[int]:
    """Records whose indicator is in the span of the released row sets and the table: rank test."""
    m = np.column_stack([np.ones(n), *rows]).astype(float)
    rank = np.linalg.matrix_rank(m)
    eye = np.eye(n)
    return [i for i in range(n) if np.linalg.matrix_rank(np.column_stack([m, eye[:, i]])) == rank]


def isolated(released: Released) -> list[str]:
    """Every way the releases isolate a record (empty: none)."""
    found = [f"a sum dominated by record {int(np.argmax(np.abs(f)))}" for f in released.sums if dominated(f)]
    sums = [f for f in released.sums if np.any(f)]
    for i, f in enumerate(sums):
        for g in sums[i + 1:]:
            record = _difference_isolates(f, g)
            if record is not None:
                found.append(f"a difference of two sums dominated by record {record}")
    found += [f"record {i} in the span of the released row sets" for i in span_isolated(released.rows, released.n)]
    return found


def cells(values: np.ndarray, edges: list[float | None], *, inclusive: bool) -> list[np.ndarray]:
    """The released cells as row sets: records whose value lies between released edges (histogramDS's
    cells (a, b], thresholdBinsDS's [a, b)); None at an end is open."""
    e = np.array([-np.inf if v is None and i == 0 else np.inf if v is None else v for i, v in enumerate(edges)],
                 dtype=float)
    valid = np.isfinite(values)
    where = np.clip(np.searchsorted(e, np.where(valid, values, 0.0), side="left" if inclusive else "right") - 1,
                    0, e.size - 2)
    return [valid & (where == k) for k in range(e.size - 1)]


def cut_values(values: np.ndarray, picks: list[int], *, lo: float = -np.inf, hi: float = np.inf) -> list[float]:
    """Cut values between neighbouring distinct values of a derived column, chosen by ``picks``."""
    v = np.unique(values[np.isfinite(values)])
    mids = [float(m) for m in (v[:-1] + v[1:]) / 2 if lo < m < hi and np.isfinite(m)]
    return sorted({mids[p % len(mids)] for p in picks}) if mids else []


# --- running a sequence --------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    """The rule (or kind) a refusal names."""
    if isinstance(exc, FederatedCallError):
        return "; ".join(sorted({str(e.rule or e.kind) for e in exc.failures.values()}))
    if isinstance(exc, SiteError):
        return str(exc.rule or exc.kind)
    return f"{type(exc).__name__}: {str(exc)[:80]}"


class Door:
    """One session's derive and releases, and what they released as the oracle's vectors over
    ``frame`` (the sites' tables one after the other). ``released`` replaces the session: every call
    passes, at the cuts asked for (the site without its rules)."""

    def __init__(self, session: Any, frame: pd.DataFrame, sites: dict[str, pd.DataFrame] | None = None,
                 *, pooled: bool = False, bend: Callable[[Cells], Cells] | None = None) -> None:
        self.session, self.frame, self.pooled, self.bend = session, frame, pooled, bend
        self.sites = sites or {"a": frame}
        self.offsets = dict(zip(self.sites, np.cumsum([0] + [len(f) for f in self.sites.values()])))
        self.out = Released(len(frame))
        self.derived: list[tuple[str, np.ndarray]] = []
        self.log: list[str] = []  # what each call did: released, or the refusal's first line
        if session is not None:
            session.assign_table("D", "P.t")

    def _site(self, site: str, values: np.ndarray) -> np.ndarray:
        """A site's part of a column over the whole frame: NaN at the other sites' records."""
        out = np.full(len(self.frame), np.nan)
        lo = self.offsets[site]
        out[lo:lo + len(self.sites[site])] = values[lo:lo + len(self.sites[site])]
        return out

    def _call(self, function: str, *args: Any, cells_of: bool = False) -> dict[str, dict[str, Any]] | None:
        """The call per site (or pooled for cells when ``pooled``): {site: result}, None when refused."""
        if self.session is None:
            return {}
        try:
            if cells_of and self.pooled:
                if self.bend is not None:  # the earlier pooled cells the analyst relays, as it bends them
                    self.session._pooled_cells = self.bend(self.session._pooled_cells)
                return {"pooled": self.session.pooled(function, *args)}
            return self.session.aggregate(function, *args)
        except REFUSED as exc:
            text = str(exc)
            assert "internal error" not in text.lower(), f"{function}: a fault of the site: {text}"
            self.log.append(f"{function} refused: {_reason(exc)}")
            return None
        finally:
            if not self.log or not self.log[-1].startswith(f"{function} refused"):
                self.log.append(f"{function} released")

    def run(self, op: Op) -> None:
        kind = op[0]
        if kind == "derive":
            name = f"V{len(self.derived) + 1}"
            if self.session is not None:
                try:
                    self.session.derive(name, op[1])
                except REFUSED as exc:
                    assert "internal error" not in str(exc).lower(), f"derive {op[1]!r}: {exc}"
                    self.log.append(f"derive refused: {_reason(exc)}")
                    return
                self.log.append(f"derive {op[1]!r} accepted")
            self.derived.append((name, r_values(op[1], self.frame)))
            return
        if op[1] >= len(self.derived):
            return
        name, values = self.derived[-1 - op[1]]
        if kind in ("mean", "var", "quantile"):
            function = {"mean": "meanDS", "var": "varDS", "quantile": "quantileMeanDS"}[kind]
            result = self._call(function, Ref(name))
            if result is None:
                return
            for site in (result or self.sites):
                self.out.summed(self._site(site, values), squares=kind == "var")
            return
        lo, hi = (0.0, 1.0) if kind == "bins" else (-np.inf, np.inf)
        cuts = cut_values(values, op[2], lo=lo, hi=hi)
        if not cuts:
            return
        valid = values[np.isfinite(values)]
        if kind == "hist":
            breaks = [float(valid.min()) - 1.0, *cuts, float(valid.max()) + 1.0]
            result = self._call("histogramDS", Ref(name), breaks, cells_of=True)
        else:
            breaks = [0.0, *cuts, 1.0]
            result = self._call("thresholdBinsDS", Ref("D$y"), Ref(name), cuts, cells_of=True)
        if result is None:
            return
        for site, answer in (result.items() if result else [(s, {"edges": breaks}) for s in self.sites]):
            column = values if site == "pooled" else self._site(site, values)
            self.out.rows.append(np.isfinite(column))  # Nmissing
            for cell in cells(column, answer["edges"], inclusive=kind == "hist"):
                self.out.rows.append(cell)
                if kind == "bins":  # sum_p: the column summed over the cell
                    self.out.sums.append(np.where(cell, column, 0.0))


def as_if_released(ops: list[Op], frame: pd.DataFrame = FRAME) -> Released:
    """The oracle's vectors for ``ops`` as if the site released every call as asked."""
    door = Door(None, frame)
    for op in ops:
        door.run(op)
    return door.out


def _settings(examples: int) -> settings:
    """Reproducible in CI: derandomized, no example database."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# --- the tests ----------------------------------------------------------------------------------------


def test_the_oracle_sees_the_attacks_it_must():
    """The check itself: a sign with a negligible term at two cuts bracketing one record, an indicator
    of one record, a bump at one record's value, and two histograms one record apart isolate it; the
    plain columns' means and variances, and a gentle function, do not."""
    x = FRAME.score.to_numpy()
    order = np.argsort(x)
    t1, t2 = float(x[order[19]] + x[order[20]]) / 2, float(x[order[20]] + x[order[21]]) / 2
    sign = "(D$score - {t})/sqrt((D$score - {t})^2)"
    ops = [("derive", sign.format(t=t1) + " + 1e-13*D$income"), ("mean", 0),
           ("derive", sign.format(t=t2)), ("mean", 0)]
    assert isolated(as_if_released(ops))
    scaled = [("derive", f"2*({sign.format(t=t1)})"), ("mean", 0), ("derive", sign.format(t=t2)), ("var", 0)]
    assert isolated(as_if_released(scaled)) == [f"a difference of two sums dominated by record {order[20]}"]
    for text in (f"ifelse(D$score > {t1!r} & D$score < {t2!r}, 1, 0) + 1e-13*D$income",
                 f"exp(-1e6*(D$score - {float(x[order[20]])!r})^2)"):
        assert isolated(as_if_released([("derive", text), ("mean", 0)])), text
    hist = [("derive", "D$score*2"), ("hist", 0, [19]), ("hist", 0, [20])]
    assert isolated(as_if_released(hist)) == ["record %d in the span of the released row sets" % order[20]]
    plain = [op for c in COLUMNS for op in (("derive", f"D${c}"), ("var", 0))]
    assert isolated(as_if_released(plain + [("derive", "log(D$age)"), ("quantile", 0)])) == []


def test_the_search_can_fail():
    """Without the rules (every call released as asked), hypothesis finds an isolating sequence in
    the very strategy the searches draw from."""
    found = find(sequences(FRAME), lambda ops: bool(isolated(as_if_released(ops))),
                 settings=settings(_settings(200), phases=[Phase.generate]))  # found, not shrunk: CI time
    assert isolated(as_if_released(found))


def test_a_site_without_its_rules_releases_what_the_oracle_calls_isolating(tmp_path: Path) -> None:
    """The whole path can fail: a site whose rules are opened as far as they go (q = 1, no cut history
    or margin, the loosest concentration and dominance) derives and releases two histograms one record
    apart, an indicator of one record with a negligible term, and two steps one record apart; the
    oracle sees each isolate that record (Dinur and Nissim 2003)."""
    x = FRAME.score.to_numpy()
    order = np.argsort(x)
    t1, t2 = float(x[order[19]] + x[order[20]]) / 2, float(x[order[20]] + x[order[21]]) / 2
    rules = rules_variant(tmp_path / "open.toml", q_threshold="1", subset_min="1", subset_min_difference="1",
                          cut_history="false", cut_margin="0", derived_concentration="1000",
                          derived_dominance="1000000")
    provisioned, services = make_sites(tmp_path, {"a": FRAME}, rules)
    attacks = ([("derive", "D$score*2"), ("hist", 0, [19]), ("hist", 0, [20])],
               [("derive", f"ifelse(D$score > {t1!r} & D$score < {t2!r}, 1, 0) + 1e-13*D$income"), ("mean", 0)],
               [("derive", f"ifelse(D$score > {t1!r}, 1, 0)"), ("mean", 0),
                ("derive", f"ifelse(D$score > {t2!r}, 1, 0)"), ("mean", 0)])
    for ops in attacks:
        with inprocess_builder(provisioned, services).login() as session:
            door = Door(session, FRAME)
            for op in ops:
                door.run(op)
        assert not any("refused" in line for line in door.log), door.log
        assert any(str(order[20]) in what for what in isolated(door.out)), (ops, isolated(door.out))


@_settings(EXAMPLES)
@given(ops=sequences(FRAME))
def test_no_derived_expression_isolates_a_record_per_site(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory(prefix="dsfed-expression-cells-") as tmp:
        with fixed_secrets("a"):  # the gate's secret draws alike at every run: a failure replays
            provisioned, services = make_sites(Path(tmp), {"a": FRAME})
        with inprocess_builder(provisioned, services).login() as session:
            door = Door(session, FRAME)
            for op in ops:
                door.run(op)
    assert isolated(door.out) == [], f"isolated by {ops}"


@_settings(max(1, EXAMPLES // 3))
@given(ops=sequences(POOLED_FRAME), bend=st.sampled_from(list(BENDS)))
def test_no_derived_expression_isolates_a_record_pooled(ops: list[Op], bend: str) -> None:
    """Three sites: histograms and decision-threshold cells pooled under secure aggregation (their
    cells over the union of the sites' records), means, variances and quantiles per site. The earlier pooled
    cells the analyst relays with each pooled release (their identities and pooled counts, on which the sites
    decide pairs of cells) are bent as a hostile analyst would (``tests/test_pooled_shared_cells.py``'s bends)."""
    with tempfile.TemporaryDirectory(prefix="dsfed-expression-cells-pooled-") as tmp:
        with fixed_secrets(",".join(SITES)):
            provisioned, services = make_sites(Path(tmp), SITES)
        with inprocess_builder(provisioned, services).login() as session:
            door = Door(session, POOLED_FRAME, SITES, pooled=True, bend=BENDS[bend])
            for op in ops:
                door.run(op)
    assert isolated(door.out) == [], f"isolated by {ops} (relay {bend})"
