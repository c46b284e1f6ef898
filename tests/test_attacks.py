"""Attacks on a dsfed site, each of which must fail; every test names the rule that stops it.

1. differencing through subsets (remove one record; nested subsets differing by one record;
   overlapping subsets whose intersection is one record) -- ``disclosure.subset_min`` and
   ``disclosure.subset_min_difference``;
2. a mask vector made by the analyst (referenceScoresDS's table) that isolates one record in a
   sum (dsBase#250) -- ``disclosure.combine_analyst_vectors``;
3. averaging repeated noisy queries -- seeded noise, and the budget ledger for new draws
   (``budget.epsilon_per_analyst``, the analyst's cap under the table's budget);
4. a client sending a tiny sensitivity or a large epsilon/delta -- ``privacy.*``;
5. smuggled code or serialized objects -- the parser and the structured-call reader;
6. reconstructing a held-out record from a released ROC curve and the rest of the data
   (Matthews & Harel 2013): succeeds on an exact empirical ROC curve computed
   outside dsfed, fails on what dsfed releases (ROC-GLM (a, b); noisy scores);
7. a crafted reference CDF (steps around one record) that turns histogram placement sums into
   threshold counts, through the histogram reference or Schalk et al.'s (2024) reference scores -- the
   site's reference cuts (``disclosure.cut_history``: q on the union of the references'
   bins and every cut released before, :mod:`dsfed_server.disclosure.gate`).

Attacks by a hostile analyst through both doors, across accounts and restarts, are in
``tests/test_adversarial.py``.
"""

from __future__ import annotations

import base64
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from dsfed_client import Call, FederatedCallError, Ref
from dsfed_client.analyses.discrimination import ds_roc_glm
from dsfed_core.wire import decode_f64
from dsfed_core.errors import BudgetExceeded
from conftest import inprocess_builder, read_site_csv
from sitekit import ROOT, make_sites, rules_variant

N = 120
TARGET_AGE = 55  # exactly one record has this age


def _frame(seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.choice([a for a in range(30, 80) if a != TARGET_AGE], N)
    age[37] = TARGET_AGE
    y = rng.integers(0, 2, N)
    return pd.DataFrame({
        "age": age,
        "income": np.round(rng.normal(50_000, 12_000, N), 2),
        "y": y,
        "score": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.15, N), 0.001, 0.999),
    })


@pytest.fixture
def site(tmp_path):
    frame = _frame()
    provisioned, services = make_sites(tmp_path, {"a": frame})  # default.toml: the conservative defaults
    return provisioned, services, frame


def _refusal(exc: pytest.ExceptionInfo) -> tuple[str, str | None]:
    err = exc.value.failures["a"]
    return err.kind, err.rule


# --- 1. differencing ----------------------------------------------------------------------


def test_subset_leaving_out_one_record_is_refused(site):
    provisioned, services, _ = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        for call in (Call("subsetRowsDS", Ref("D"), "age", "!=", TARGET_AGE),
                     Call("dataFrameSubsetDS2", "D", "D$age", str(TARGET_AGE), 2)):
            with pytest.raises(FederatedCallError) as exc:
                s.assign("S", call)
            assert _refusal(exc) == ("disclosure_refused", "disclosure.subset_min")


def test_nested_subsets_differing_by_one_record_are_refused(site):
    """age >= 55 and age > 55 differ only by the one person aged 55: N x mean on both would
    give that person's income. The second subset is refused, as a cut of age within q records of
    the first one's (its row set would be refused too: the cut history is checked first, as the
    more specific reason); also from a new session."""
    provisioned, services, frame = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("A", Call("subsetRowsDS", Ref("D"), "age", ">=", TARGET_AGE))
        a = s.mean("A$income")
        with pytest.raises(FederatedCallError) as exc:
            s.assign("B", Call("subsetRowsDS", Ref("D"), "age", ">", TARGET_AGE))
        assert _refusal(exc) == ("disclosure_refused", "disclosure.cut_history")
        with pytest.raises(FederatedCallError) as exc:  # the same subset through dsBase's function
            s.assign("B", Call("dataFrameSubsetDS2", "D", "D$age", str(TARGET_AGE), 5))
        assert _refusal(exc) == ("disclosure_refused", "disclosure.cut_history")
    with inprocess_builder(provisioned, services).login() as s:  # a new session does not forget
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.assign("B", Call("subsetRowsDS", Ref("D"), "age", ">", TARGET_AGE))
        assert _refusal(exc) == ("disclosure_refused", "disclosure.cut_history")
    # what the attack would have disclosed: it is one record's value
    older = frame[frame.age > TARGET_AGE]
    leaked = a.mean * a.n_valid - older.income.sum()
    assert leaked == pytest.approx(frame.income[frame.age == TARGET_AGE].item())


def test_overlapping_subsets_whose_intersection_is_one_record_are_refused(site):
    """age >= 55 and age <= 55: each leaves out many rows and they differ in many rows, but their
    sums minus the table's sum is the 55-year-old's value (inclusion-exclusion). Refused."""
    provisioned, services, frame = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("A", Call("subsetRowsDS", Ref("D"), "age", ">=", TARGET_AGE))
        with pytest.raises(FederatedCallError) as exc:
            s.assign("B", Call("dataFrameSubsetDS2", "D", "D$age", str(TARGET_AGE), 4))
        assert _refusal(exc) == ("disclosure_refused", "disclosure.cut_history")
        # and a subset of the subset that leaves out the one record
        with pytest.raises(FederatedCallError) as exc:
            s.assign("C", Call("subsetRowsDS", Ref("A"), "age", ">", TARGET_AGE))
        assert _refusal(exc)[1] in ("disclosure.subset_min", "disclosure.subset_min_difference")
        # ordinary, well-separated subsets still work
        s.assign("E", Call("subsetRowsDS", Ref("D"), "age", "<", 45))
        assert s.length("E$age").n == int((frame.age < 45).sum())


# --- 2. analyst-made mask vectors (dsBase#250) ----------------------------------------------


def _masks(position: int, n: int) -> tuple[Call, Call]:
    """Two tables from referenceScoresDS whose 'score' columns are [0..0, 1, 0..0, 2 x5] and
    [0..0, 0, 0..0, 2 x5]: sum(x * m1) - sum(x * m2) = x[position]. Three levels in m1 and a
    smallest level of 5 in m2 pass corDS's binary-variable check."""
    rest = n - position - 1 - 5
    m1 = Call("referenceScoresDS", [0.0] * position + [1.0], [0.0] * rest + [2.0] * 5)
    m2 = Call("referenceScoresDS", [0.0] * (position + 1), [0.0] * rest + [2.0] * 5)
    return m1, m2


def test_mask_vector_isolating_one_record_is_refused(site, tmp_path):
    provisioned, services, frame = site
    target = int(np.flatnonzero(frame.age == TARGET_AGE)[0])
    m1, m2 = _masks(target, N)
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("M1", m1)  # making the table is allowed: it holds only the analyst's numbers
        s.assign("M2", m2)
        attempts = [
            Call("corDS", Ref("D$income"), Ref("M1$score")),
            Call("corDS", Ref("M1"), Ref("D$income")),  # the analyst's table as a whole
            Call("brierDS", Ref("D$y"), Ref("M1$class")),
            Call("table2DDS", Ref("D$y"), Ref("M1$class")),
        ]
        for call in attempts:
            with pytest.raises(FederatedCallError) as exc:
                s.aggregate(call.function, *call.args)
            assert _refusal(exc) == ("disclosure_refused", "disclosure.combine_analyst_vectors"), call.function
        # a row filter by comparison with the analyst's vector
        with pytest.raises(FederatedCallError) as exc:
            s.assign("S", Call("dataFrameSubsetDS2", "D", "D$income", "M1$score", 5))
        assert _refusal(exc) == ("disclosure_refused", "disclosure.combine_analyst_vectors")

    # the rule is what stops it: a site that allows analyst vectors leaks the record exactly
    rules = rules_variant(tmp_path / "permissive.toml", combine_analyst_vectors="true")
    provisioned2, services2 = make_sites(tmp_path / "permissive", {"a": frame}, rules=rules)
    with inprocess_builder(provisioned2, services2).login() as s:
        s.assign_table("D", "P.t")
        s.assign("M1", m1)
        s.assign("M2", m2)
        c1 = s.aggregate("corDS", Ref("D$income"), Ref("M1$score"))["a"]["sums.of.products"][0][1]
        c2 = s.aggregate("corDS", Ref("D$income"), Ref("M2$score"))["a"]["sums.of.products"][0][1]
    assert c1 - c2 == pytest.approx(frame.income[target], abs=1e-6)


# --- 3. averaging repeated noisy queries ----------------------------------------------------


def test_averaging_repeated_noisy_queries_gains_nothing_and_new_draws_run_out_of_budget(site):
    provisioned, services, frame = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        first = s.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["a"]
        repeats = [s.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["a"] for _ in range(20)]
        assert all(r == first for r in repeats)  # the same noise: the average is the first answer
        # fresh draws need a new query (here: a slightly smaller epsilon each time); each is charged
        draws = []
        with pytest.raises(FederatedCallError) as exc:
            for k in range(1, 200):
                draws.append(s.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), epsilon=1 - k / 1000)["a"])
        assert isinstance(exc.value.failures["a"], BudgetExceeded)
        assert _refusal(exc) == ("budget_exceeded", "budget.epsilon_per_analyst")
        assert "remaining epsilon" in exc.value.failures["a"].message
    assert len(draws) < 30  # far too few draws to average the noise away
    listing = services["a"].budget(services["a"].login_password(
        "governance", provisioned["a"].credentials["governance"].password))
    assert listing["spending"][0]["queries"] == len(draws) + 1  # the 20 repeats cost nothing


# --- 4. a client asking for less privacy -------------------------------------------------------


@pytest.mark.parametrize("kwargs,expected", [
    ({"sensitivity": 1e-9}, ("disclosure_refused", "privacy.score_l2_sensitivity")),
    ({"epsilon": 1000.0}, ("disclosure_refused", "privacy.epsilon")),
    ({"delta": 0.5}, ("disclosure_refused", "privacy.delta")),
    ({"epsilon": -1.0}, ("bad_call", None)),
    ({"delta": -1e-3}, ("bad_call", None)),
])
def test_client_cannot_buy_less_noise(site, kwargs, expected):
    provisioned, services, _ = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"), **kwargs)
        assert _refusal(exc) == expected
        text = "noisyScoresDS(D$y, D$score, " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate_expr(text)
        assert _refusal(exc)[0] in (expected[0], "bad_call")


# --- 5. smuggled code and serialized objects ---------------------------------------------------


class _Touch:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


@pytest.mark.parametrize("text", [
    'eval(parse(text = "system(\'id\')"))',
    'unserialize(charToRaw("X"))',
    'meanDS(D$age); system("id")',
    'base::system("id")',
    'meanDS(`D`$age)',
    'meanDS(get("D")$age)',
    'do.call("meanDS", list(D$age))',
    'meanDS(D$age[1])',
    'function(x) system(x)',
    'meanDS(D$age %*% 2)',
    'meanDS(D$age <- 1)',
    '{meanDS(D$age)}',
])
def test_code_in_call_text_is_refused(site, text):
    provisioned, services, _ = site
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError) as exc:
            s.aggregate_expr(text)
        assert _refusal(exc)[0] == "bad_call"  # the parser or the registry lookup, never run


def test_serialized_objects_are_never_unpickled(site, tmp_path):
    """A pickle whose loading would create a file, sent wherever a string or numbers may go."""
    provisioned, services, _ = site
    marker = tmp_path / "unpickled"
    payload = base64.b64encode(pickle.dumps(_Touch(marker))).decode()
    service = services["a"]
    user = service.login_password("analyst", provisioned["a"].credentials["analyst"].password)
    sid = service.open_session(user)["session"]
    service.assign_table(user, sid, "D", "P.t", None)
    from dsfed_core.errors import SiteError
    from dsfed_server.service import CallRequest

    attempts = [
        lambda: service.aggregate(user, sid, CallRequest(text=f'meanDS("{payload}")')),
        lambda: service.aggregate(user, sid, CallRequest(tree={"call": "meanDS", "args": [{"lit": payload}]})),
        lambda: service.aggregate(user, sid, CallRequest(tree={"call": "meanDS", "args": [{"py/reduce": payload}]})),
        lambda: service.aggregate(user, sid, CallRequest(tree={"pickle": payload})),
        lambda: service.assign(user, sid, "R", CallRequest(tree={"call": "referenceScoresDS",
                                                                 "args": [{"lit": payload}, {"lit": payload}]})),
        lambda: service.assign(user, sid, payload[:40], CallRequest(text="D$age")),
        lambda: service.assign_table(user, sid, "T", payload[:60], None),
        lambda: service.aggregate(user, sid, CallRequest(tree={"call": "dataFrameSubsetDS2", "args": [
            {"sym": "D"}, {"lit": "D$age"}, {"lit": payload}, {"lit": 1}]})),
    ]
    for attempt in attempts:
        with pytest.raises(SiteError) as exc:
            attempt()
        assert exc.value.kind in ("bad_call", "not_found"), exc.value
    assert not marker.exists()
    pickle.loads(base64.b64decode(payload))  # the payload is live: loading it does create the file
    assert marker.exists()


# --- 6. ROC-curve reconstruction (Matthews & Harel 2013) -----------------------------------------------------


def _groups(y: np.ndarray, s: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """(positives, negatives) per distinct score, highest score first, and those scores."""
    scores = np.unique(s)[::-1]
    return [(int(np.sum((s == v) & (y == 1))), int(np.sum((s == v) & (y == 0)))) for v in scores], scores


def exact_roc(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical ROC curve: (FPR, TPR) at every distinct threshold, as pROC/sklearn publish it."""
    groups, _ = _groups(y, s)
    tp = np.cumsum([0] + [g[0] for g in groups])
    fp = np.cumsum([0] + [g[1] for g in groups])
    return fp / fp[-1], tp / tp[-1]


def _class_total(rates: np.ndarray, known: int) -> int | None:
    """The attacker's class size: the known count or one more, whichever makes every rate a fraction."""
    for total in (known, known + 1):
        if np.all(np.abs(rates * total - np.round(rates * total)) < 1e-9):
            return total
    return None


def roc_attack(fpr: np.ndarray, tpr: np.ndarray, y_known: np.ndarray, s_known: np.ndarray):
    """Matthews & Harel's (2013) attack for one held-out record: align the curve's steps with the known records'.
    Returns the consistent (label, (low, high)) solutions: label exact, score up to its rank."""
    P = _class_total(tpr, int(y_known.sum()))
    N = _class_total(fpr, int((1 - y_known).sum()))
    if P is None or N is None:
        return []
    full = [(int(round(dp)), int(round(dn))) for dp, dn in zip(np.diff(tpr) * P, np.diff(fpr) * N)]
    known, scores = _groups(y_known, s_known)
    solutions = []
    if len(full) == len(known):  # the record ties with a known score
        diff = [i for i in range(len(full)) if full[i] != known[i]]
        if len(diff) == 1:
            d = (full[diff[0]][0] - known[diff[0]][0], full[diff[0]][1] - known[diff[0]][1])
            if d in ((1, 0), (0, 1)):
                solutions.append((d[0], (scores[diff[0]], scores[diff[0]])))
    if len(full) == len(known) + 1:  # a score of its own, between two known ones
        for i, g in enumerate(full):
            if g in ((1, 0), (0, 1)) and full[:i] + full[i + 1:] == known:
                high = scores[i - 1] if i > 0 else np.inf
                low = scores[i] if i < len(scores) else -np.inf
                solutions.append((g[0], (low, high)))
    return solutions


def _recovered(solutions, label: int, score: float) -> bool:
    return bool(solutions) and all(lab == label for lab, _ in solutions) and any(
        lo <= score <= hi for _, (lo, hi) in solutions)


def _binormal_step_curve(a: float, b: float, P: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """The most an attacker can make of ROC-GLM's (a, b): the fitted curve Phi(a + b Phi^-1(t)) rounded to
    the step grid of P positives and N negatives (the attacker even knows P and N exactly)."""
    f = np.arange(N + 1) / N
    c = np.round(P * stats.norm.cdf(a + b * stats.norm.ppf(f))).astype(int)
    fpr, tpr = [0.0], [0.0]
    for j in range(N):
        if c[j] > round(tpr[-1] * P):
            fpr.append(j / N)
            tpr.append(c[j] / P)
        fpr.append((j + 1) / N)
        tpr.append(tpr[-1])
    fpr.append(1.0)
    tpr.append(1.0)
    return np.asarray(fpr), np.asarray(tpr)


HELD_OUT = (3, 40, 101, 177, 230)  # records of the pooled GBSG2 data the attacker does not know


def test_roc_reconstruction_works_on_an_exact_curve_and_fails_on_roc_glm(gbsg2_provisioned, gbsg2_services,
                                                                       gbsg2_pooled):
    y, s = gbsg2_pooled.y.to_numpy(), gbsg2_pooled.score.to_numpy()
    fpr, tpr = exact_roc(y, s)
    with inprocess_builder(gbsg2_provisioned, gbsg2_services).login() as session:
        session.assign_table("D", "GBSG2.validation")
        fit = ds_roc_glm(session, "D$y", "D$score")
    P, N = int(y.sum()), int((1 - y).sum())
    glm_fpr, glm_tpr = _binormal_step_curve(fit.a, fit.b, P, N)
    for i in HELD_OUT:
        keep = np.arange(y.size) != i
        # an exact empirical ROC curve (computed outside dsfed) gives the record away: Matthews & Harel's (2013) result
        assert _recovered(roc_attack(fpr, tpr, y[keep], s[keep]), int(y[i]), float(s[i]))
        # dsfed's ROC-GLM (two parameters under the sites' noise) does not
        assert not _recovered(roc_attack(glm_fpr, glm_tpr, y[keep], s[keep]), int(y[i]), float(s[i]))


def test_roc_reconstruction_fails_on_the_noisy_scores(gbsg2_provisioned, gbsg2_services):
    """The attacker has every site's noisy scores (sorted per class, analytic Gaussian noise from the
    site's rules) and every record but one. The held-out record's class follows from the class sizes
    (any count does that against an adversary who knows all other records; only noisy counts would
    not); its score cannot be placed: the likelihood of each rank slot, given the known scores and the
    released noisy ones, rarely points at the true rank."""
    with inprocess_builder(gbsg2_provisioned, gbsg2_services).login() as session:
        session.assign_table("D", "GBSG2.validation")
        released = session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$score"))["site1"]
    frame = read_site_csv("site1")
    sigma = released["sigma"]
    assert sigma > 0
    hits, mass = [], []
    for i in range(len(frame)):  # each site1 record held out in turn
        label = int(frame.y[i])
        noisy = decode_f64(released["positives" if label else "negatives"])
        known = np.sort(frame.score[(frame.y == label) & (frame.index != i)].to_numpy())
        assert noisy.size == known.size + 1  # the class of the held-out record (class sizes)
        loglik = np.empty(noisy.size)
        for r in range(noisy.size):  # the held-out record at rank r: residuals of the others
            loglik[r] = -np.sum((np.delete(noisy, r) - known) ** 2) / (2 * sigma**2)
        posterior = np.exp(loglik - special.logsumexp(loglik))
        true_slots = [r for r in range(noisy.size) if (known[r - 1] if r else -np.inf) <= frame.score[i]
                      <= (known[r] if r < known.size else np.inf)]
        hits.append(int(np.argmax(posterior)) in true_slots)
        mass.append(posterior[true_slots].sum())
    # the exact curve gives every rank with certainty; from the noisy scores the attacker's most likely
    # rank is right for few records (about 1 in 10 across site secrets, at the paper's epsilon = 5), and
    # the probability it puts on the true rank is small on average
    assert np.mean(hits) < 0.3
    assert np.mean(mass) < 0.2


# --- 7. a crafted reference CDF turned into threshold counts ------------------------------------


def _step_sum(pos_scores: np.ndarray, t: float) -> float:
    """Outside dsfed: the placement sum of the positives against a reference that steps at t."""
    return float(np.sum(pos_scores > t))


def test_crafted_step_reference_cannot_read_a_label(site):
    """histReferenceDS takes any CDF. A step just below and one just above a record make
    histPlacementSumsDS count the positives above each threshold; their difference is that
    record's label. On the raw data (outside dsfed) the attack reads every targeted label. Through
    dsfed the site keeps only edges whose cuts, with every cut the analyst used before, leave 0 or at
    least q records between them (rule disclosure.cut_history): the second step
    of a pair (or the first) is dropped, its bin merged with the next (the result's placement_cells say
    so), the site evaluates that reference without its step, and the difference no longer reads the label."""
    provisioned, services, frame = site
    order = np.argsort(frame.score.to_numpy(), kind="stable")
    x = frame.score.to_numpy()[order]
    labels = frame.y.to_numpy()[order]
    pos = frame.score[frame.y == 1].to_numpy()
    targets = [k for k in range(50, 70) if x[k - 1] < x[k] < x[k + 1]][:8]
    assert {int(labels[k]) for k in targets} == {0, 1}
    n0 = int((frame.y == 0).sum())
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        raw, dsfed, read = [], [], []
        for k in targets:
            sums, stepped = [], []
            for t in ((x[k - 1] + x[k]) / 2, (x[k] + x[k + 1]) / 2):
                s.assign("R", Call("histReferenceDS", [0.0, t, t + 1e-9, 1.0], [0, 0, n0, n0], [0, 0, 1, 1]))
                got = s.aggregate("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref("R"))["a"]
                sums.append(got["sum_v10"])
                cells = got["placement_cells"]
                # the step stands where the analyst put it: t or t + 1e-9 released there, not moved
                stepped.append(not cells["moved"] and not {t, t + 1e-9} <= set(cells["dropped"]))
            raw.append(_step_sum(pos, (x[k - 1] + x[k]) / 2) - _step_sum(pos, (x[k] + x[k + 1]) / 2))
            dsfed.append(sums[0] - sums[1])
            if all(stepped):  # both steps where asked: their difference is (a half of) the record's label
                read.append(k)
    np.testing.assert_array_equal(raw, labels[targets])  # the attack works on exact sums
    assert not np.array_equal(np.round(dsfed), labels[targets])  # and fails through dsfed
    # the two steps of a pair are one record apart: the site never releases both where they were asked
    assert read == []


def test_reference_cuts_keep_every_bin_at_zero_or_q_records(tmp_path):
    """Whatever references analysts send, the cuts the site uses, all together, leave at least q
    records between any two of them, and no empty bin between two different edges inside the
    range the dictionary declares (checked against the definition on random sequences; the history
    is the site's persisted one, for every analyst)."""
    from dsfed_server.disclosure.checks import Guard
    from dsfed_server.disclosure.history import History
    from dsfed_server.disclosure.provenance import RootColumn
    from dsfed_server.disclosure.rules import load_rules
    from dsfed_core.errors import DisclosureRefusal

    rng = np.random.default_rng(3)
    p = np.round(rng.random(200), 2)  # ties included
    column = RootColumn("P.t", "p", p, True, declared=(0.0, 1.0))
    guard = Guard(load_rules(ROOT / "disclosure_rules" / "default.toml"), "a", "placementSumsDS",
                  history=History(tmp_path / "ledger.sqlite"))
    q = guard.q
    used: set[int] = {0, p.size}
    answered = 0
    for _ in range(200):
        ends = np.sort(rng.choice([-0.1, 1.1, *rng.random(2)], 2, replace=False))  # ranges inside the data too
        edges = np.unique(np.concatenate([ends, rng.uniform(*ends, rng.integers(1, 40))]))
        try:
            keep = guard.reference_edges(p, edges, column)
        except DisclosureRefusal:  # refused: nothing released, nothing recorded
            continue
        answered += 1
        assert keep[0] and keep[-1]
        kept = edges[keep]
        x = np.sort(p)
        ranks = np.searchsorted(x, kept, "left")
        ranks[-1] = np.searchsorted(x, kept[-1], "right")
        inside = ranks[(kept > 0) & (kept < 1)]
        assert np.unique(inside).size == inside.size  # no empty bin between two edges inside [0, 1]
        used |= {int(r) for r in ranks}
        cuts = np.array(sorted(used))
        assert np.all(np.diff(cuts) >= q), cuts  # every region between any two cuts: 0 or >= q records
    assert answered > 20, answered


def test_crafted_two_edge_references_read_no_label(site):
    """The same attack with references of two edges only (both of them end edges, found in
    review): the ends of a reference are cuts too (below the first edge a positive's placement is 0),
    and the second step of every pair cuts within q records of the first: it is dropped, its bin merged
    (rule disclosure.cut_history), so no pair of sums around a record is released as the attack asks."""
    provisioned, services, frame = site
    x = np.sort(frame.score.to_numpy())
    targets = [k for k in range(20, 100) if x[k - 1] < x[k] < x[k + 1]]
    n0 = int((frame.y == 0).sum())
    pos = frame.score[frame.y == 1].to_numpy()
    labels = frame.y.to_numpy()[np.argsort(frame.score.to_numpy(), kind="stable")]
    pairs, rules = _step_pairs(provisioned, services, x, targets, "histPlacementSumsDS",
                               lambda t: Call("histReferenceDS", [t, t + 1e-9], [0, n0], [0, 1]))
    # a step at t: every positive at or above t counts 1 (none below): on exact sums, the pair's difference
    steps = [(_step_sum(pos, (x[k - 1] + x[k]) / 2), _step_sum(pos, (x[k] + x[k + 1]) / 2)) for k in targets]
    np.testing.assert_array_equal([a - b for a, b in steps], labels[targets])  # the attack works on exact sums
    read = [k for k, got, want in zip(targets, pairs, steps) if None not in got
            and np.allclose(got, want, rtol=0, atol=1e-9)]
    assert len(targets) > 40 and read == [] and rules <= {("disclosure_refused", "disclosure.cut_history")}


def _step_pairs(provisioned, services, x, targets, function, reference):
    """The attacker's loop: for each target record, a step reference just below and one just above
    it, then ``function``: per target the two ``sum_v10`` released (None where refused), and the
    rules that refused."""
    pairs, rules = [], set()
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        for k in targets:
            sums = []
            for t in ((x[k - 1] + x[k]) / 2, (x[k] + x[k + 1]) / 2):
                s.assign("R", reference(t))
                try:
                    sums.append(s.aggregate(function, Ref("D$y"), Ref("D$score"), Ref("R"))["a"]["sum_v10"])
                except FederatedCallError as exc:
                    sums.append(None)
                    rules.add((exc.failures["a"].kind, exc.failures["a"].rule))
            pairs.append(sums)
    return pairs, rules


def test_crafted_reference_scores_cannot_read_a_label(site):
    """The same attack through Schalk et al.'s (2024) placement sums (found in review): referenceScoresDS
    with a single negative reference score t makes placementSumsDS count the positives above t.
    Exactly computed, two such sums around one record give its label; through dsfed the site
    keeps the step of at most one reference of every pair (rule disclosure.cut_history):
    no pair of released sums is the pair of exact counts the attack needs."""
    provisioned, services, frame = site
    x = np.sort(frame.score.to_numpy())
    labels = frame.y.to_numpy()[np.argsort(frame.score.to_numpy(), kind="stable")]
    pos = frame.score[frame.y == 1].to_numpy()
    targets = [k for k in range(20, 100) if x[k - 1] < x[k] < x[k + 1]]
    exact = [_step_sum(pos, (x[k - 1] + x[k]) / 2) - _step_sum(pos, (x[k] + x[k + 1]) / 2) for k in targets]
    np.testing.assert_array_equal(exact, labels[targets])  # the attack works on exact sums
    pairs, _ = _step_pairs(provisioned, services, x, targets, "placementSumsDS",
                           lambda t: Call("referenceScoresDS", [t], [0.5]))
    counts = [(_step_sum(pos, (x[k - 1] + x[k]) / 2), _step_sum(pos, (x[k] + x[k + 1]) / 2)) for k in targets]
    assert len(targets) > 40
    assert not any(np.allclose(pair, count, rtol=0, atol=1e-9) for pair, count in zip(pairs, counts))
    guesses = [round(a - b) if None not in (a, b) else None for a, b in pairs]
    assert guesses != list(labels[targets])


@pytest.mark.parametrize("margin", ["0", "5"])
def test_crafted_reference_on_a_subset_cannot_read_a_label(tmp_path, margin):
    """The step attack split over the table and a subset of it (found in review): the first step
    on D, the second on S = D without its 10 lowest scores. S's own score ordering is new, but its
    scores are the table column's, and the site keeps the cuts of that column too: the second
    step cuts within q of the first and is dropped (its bin merged); with the default margin the
    site may drop the first step instead, and then the first sum is not the step the attack
    needs: either way no target gets both steps evaluated as asked."""
    frame = _frame()
    rules = rules_variant(tmp_path / "rules.toml", cut_margin=margin)
    provisioned, services = make_sites(tmp_path, {"a": frame}, rules)
    x = np.sort(frame.score.to_numpy())
    labels = frame.y.to_numpy()[np.argsort(frame.score.to_numpy(), kind="stable")]
    pos = frame.score[frame.y == 1].to_numpy()
    cut = float((x[9] + x[10]) / 2)
    targets = [k for k in range(20, 100, 6) if x[k - 1] < x[k] < x[k + 1]]
    n0 = int((frame.y == 0).sum())

    def ref(t: float) -> Call:
        return Call("histReferenceDS", [0.0, t, t + 1e-9, 1.0], [0, 0, n0, n0], [0, 0, 1, 1])

    steps, released = [], []
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("S", Call("subsetRowsDS", Ref("D"), "score", ">", cut))
        for k in targets:
            t1, t2 = (x[k - 1] + x[k]) / 2, (x[k] + x[k + 1]) / 2
            steps.append((_step_sum(pos, t1), _step_sum(pos[pos > cut], t2)))
            s.assign("R1", ref(t1))
            s.assign("R2", ref(t2))
            first = s.aggregate("histPlacementSumsDS", Ref("D$y"), Ref("D$score"), Ref("R1"))["a"]["sum_v10"]
            second = s.aggregate("histPlacementSumsDS", Ref("S$y"), Ref("S$score"), Ref("R2"))["a"]["sum_v10"]
            released.append((first, second))
    np.testing.assert_array_equal([a - b for a, b in steps], labels[targets])  # the attack works on exact sums
    read = [k for k, got, want in zip(targets, released, steps) if np.allclose(got, want, rtol=0, atol=1e-9)]
    assert read == []


def test_reference_scores_closer_than_any_margin_are_evaluated(site):
    """Reference scores a few ulps apart (noisy scores can fall that close) are evaluated, not
    refused: the site's step edges around them stay strictly increasing."""
    provisioned, services, frame = site
    neg = np.sort(np.concatenate([np.linspace(0.0, 1.0, 400), [0.5 + 1e-15, 0.5 + 3e-15]]))
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("R", Call("referenceScoresDS", neg.tolist(), np.linspace(0.0, 1.0, 300).tolist()))
        got = s.aggregate("placementSumsDS", Ref("D$y"), Ref("D$score"), Ref("R"))["a"]
    pos = frame.score[frame.y == 1].to_numpy()
    # 400 evenly spread negatives: the placement values are (nearly) the positives' scores
    assert got["n1"] == pos.size and abs(got["sum_v10"] - pos.sum()) < 0.02 * pos.size


def test_reference_scores_need_not_cover_every_record(site):
    """Honest noisy reference scores may start above a few of the site's lowest scores (found when
    a report run was refused): the site interpolates over them instead of refusing."""
    provisioned, services, frame = site
    x = np.sort(frame.score.to_numpy())
    neg = np.linspace((x[1] + x[2]) / 2, 1.0, 300)  # two site records lie below every reference score
    with inprocess_builder(provisioned, services).login() as s:
        s.assign_table("D", "P.t")
        s.assign("R", Call("referenceScoresDS", neg.tolist(), np.linspace(0.0, 1.0, 300).tolist()))
        got = s.aggregate("placementSumsDS", Ref("D$y"), Ref("D$score"), Ref("R"))["a"]
    assert got["n1"] == int(frame.y.sum()) and 0 < got["sum_v10"] < got["n1"]
