"""The privacy-budget ledger: spending accounted across queries, refusal stating what remains,
repeats free, provenance as the table key, governance listing, audit records, a real server
restart, and the accountant checked against an independent RDP conversion and the exact Gaussian
composition (references named in each test)."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pandas as pd
import pytest
import requests
from scipy import optimize, stats

from dsfed_client import Call, FederatedCallError, Ref
from dsfed_core.errors import BudgetExceeded
from dsfed_server.launch import LocalSites
from dsfed_server.disclosure.accountant import gaussian_rho, rdp_epsilon
from dsfed_server.disclosure.ledger import Ledger
from dsfed_server.disclosure.mechanisms import analytic_gaussian_sigma
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from conftest import audit_records, http_builder, inprocess_builder
from rref import gaussian_spent_reference
from sitekit import rules_variant, write_table

EPS, DELTA, SENS = 1.0, 1e-5, 0.1
BUDGET_EPS, BUDGET_DELTA = 2.5, 1e-3
N_SCORES = 12


def _frame(seed: int = 3, n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    cols = {"y": y, "age": rng.integers(30, 80, n)}
    for j in range(N_SCORES):
        cols[f"s{j}"] = np.clip(0.3 + 0.4 * y + rng.normal(0, 0.15, n), 0, 1)
    return pd.DataFrame(cols)


def _sites(tmp_path, analyst_eps: float = BUDGET_EPS, **rules_changes):
    rules = rules_variant(tmp_path / "rules.toml", epsilon=str(EPS), delta=str(DELTA), score_l2_sensitivity=str(SENS),
                          epsilon_per_table=str(BUDGET_EPS), delta_per_table=str(BUDGET_DELTA),
                          epsilon_per_analyst=str(analyst_eps), delta_per_analyst=str(BUDGET_DELTA),
                          score_columns="[" + ", ".join(f'"s{j}"' for j in range(N_SCORES)) + "]", **rules_changes)
    data = tmp_path / "data" / "a"
    write_table(data, _frame(3), table="t")
    write_table(data, _frame(4), table="u")
    provisioned = provision(tmp_path / "run", {"a": (data, rules)})
    return provisioned, {"a": SiteService.from_config_file(provisioned["a"].config)}


def _independent_spent(k: int) -> tuple[float, float]:
    """k releases of the analytic Gaussian (EPS, DELTA, SENS) against the budget's delta, by the
    independent reference (rref.gaussian_spent_reference)."""
    return gaussian_spent_reference(k, epsilon=EPS, delta=DELTA, sensitivity=SENS, budget_delta=BUDGET_DELTA)


def _query(session, j: int, table: str = "D"):
    return session.aggregate("noisyScoresDS", Ref(f"{table}$y"), Ref(f"{table}$s{j}"))["a"]


def test_spending_accumulates_and_overspending_is_refused_with_the_remaining_budget(tmp_path):
    provisioned, services = _sites(tmp_path)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        answered = []
        for j in range(N_SCORES):
            try:
                answered.append(_query(session, j))
            except FederatedCallError as exc:
                refusal = exc
                break
        else:
            pytest.fail("the budget never ran out")
        k = len(answered)
        # the number of answered queries is what the independent accountant allows
        assert _independent_spent(k)[0] <= BUDGET_EPS < _independent_spent(k + 1)[0]
        assert k > BUDGET_EPS / EPS  # RDP composition buys more than basic composition (2 queries)
        err = refusal.failures["a"]
        assert isinstance(err, BudgetExceeded)
        assert err.kind == "budget_exceeded" and err.rule == "budget.epsilon_per_analyst"
        spent = _independent_spent(k)[0]
        stated = float(err.message.split("remaining epsilon ")[1].split(",")[0].split(" ")[0])
        assert stated == pytest.approx(BUDGET_EPS - spent, abs=1e-4)
        assert "'P.t'" in err.message

        # a repeated query costs nothing: it returns the same numbers, even with the budget spent
        assert _query(session, 0) == answered[0]
        # a subset of the table is charged to the same table (provenance, not content)
        session.assign("S", Call("subsetRowsDS", Ref("D"), "age", ">=", 40))
        with pytest.raises(FederatedCallError) as exc:
            _query(session, N_SCORES - 1, "S")
        assert isinstance(exc.value.failures["a"], BudgetExceeded)
        # another table has its own budget
        session.assign_table("E", "P.u")
        assert _query(session, 0, "E")["sigma"] > 0

    # a second account shares the table's budget: a release already made is free for it too (the
    # same seeded noise), a new one is refused by the table's budget; another table still has budget
    with inprocess_builder(provisioned, services, user="analyst2").login() as other:
        other.assign_table("D", "P.t")
        assert _query(other, 0) == answered[0]
        with pytest.raises(FederatedCallError) as exc:
            _query(other, N_SCORES - 1)
        assert exc.value.failures["a"].rule == "budget.epsilon_per_table"
        assert "all analysts together" in exc.value.failures["a"].message
        other.assign_table("E", "P.u")
        assert _query(other, 1, "E")["sigma"] > 0

    # governance lists spending per analyst x table
    gov = services["a"].login_password("governance", provisioned["a"].credentials["governance"].password)
    listing = services["a"].budget(gov)
    rows = {(r["analyst"], r["table"]): r for r in listing["spending"]}
    assert set(rows) == {("analyst", "P.t"), ("analyst", "P.u"), ("analyst2", "P.u")}
    mine = rows[("analyst", "P.t")]
    assert mine["queries"] == k and mine["releases"] == 2 * k  # two classes per query, one charge
    assert mine["spent"]["epsilon"] == pytest.approx(_independent_spent(k)[0], rel=1e-4)
    assert mine["remaining"]["epsilon"] == pytest.approx(BUDGET_EPS - _independent_spent(k)[0], abs=1e-4)
    assert rows[("analyst2", "P.u")]["queries"] == 1
    tables = {r["table"]: r for r in listing["tables"]}
    assert tables["P.t"]["spent"]["epsilon"] == pytest.approx(_independent_spent(k)[0], rel=1e-4)
    assert tables["P.u"]["spent"]["epsilon"] == pytest.approx(_independent_spent(2)[0], rel=1e-4)
    analyst = services["a"].login_password("analyst", provisioned["a"].credentials["analyst"].password)
    with pytest.raises(Exception) as exc:
        services["a"].budget(analyst)
    assert getattr(exc.value, "kind", "") == "forbidden"

    # the audit log carries each spend, and each refusal with the budget rule
    records = [r for r in audit_records(provisioned["a"]) if r["function"] == "noisyScoresDS"]
    charged = [r for r in records if r["outcome"] == "ok" and r.get("privacy", {}).get("charges")]
    assert len(charged) == k + 1 + 1  # analyst on P.t and P.u, analyst2 on P.u
    first = charged[0]["privacy"]
    assert first["accountant"] == "rdp" and first["tables"] == ["P.t"]
    assert first["epsilon"] == EPS and first["delta"] == DELTA
    assert first["charges"][0]["rho"] == pytest.approx(
        gaussian_rho(sigma=analytic_gaussian_sigma(epsilon=EPS, delta=DELTA, sensitivity=SENS), sensitivity=SENS))
    repeat = [r for r in records if r["outcome"] == "ok" and r.get("privacy", {}).get("repeated_releases") == 2]
    assert repeat and repeat[0]["privacy"]["epsilon"] == 0
    refused = [r for r in records if r["outcome"] == "refused"]
    assert sorted(r["rule"] for r in refused) == ["budget.epsilon_per_analyst"] * 2 + ["budget.epsilon_per_table"]


def test_an_analysts_share_sits_under_the_tables_budget(tmp_path):
    """epsilon_per_analyst 1.7 under epsilon_per_table 2.5: the first analyst stops at their own
    share, the second at what is left of the table's; together they get exactly what the independent
    accountant allows on the table, no more."""
    analyst_eps = 1.7
    provisioned, services = _sites(tmp_path, analyst_eps=analyst_eps)
    answered: dict[str, int] = {}
    rules: dict[str, str] = {}
    j = 0
    for user in ("analyst", "analyst2"):
        with inprocess_builder(provisioned, services, user=user).login() as session:
            session.assign_table("D", "P.t")
            answered[user] = 0
            with pytest.raises(FederatedCallError) as exc:
                while j < N_SCORES:
                    _query(session, j)
                    answered[user] += 1
                    j += 1
            rules[user] = exc.value.failures["a"].rule
    k1, total = answered["analyst"], answered["analyst"] + answered["analyst2"]
    assert _independent_spent(k1)[0] <= analyst_eps < _independent_spent(k1 + 1)[0]
    assert _independent_spent(total)[0] <= BUDGET_EPS < _independent_spent(total + 1)[0]
    assert _independent_spent(answered["analyst2"])[0] <= analyst_eps
    assert rules == {"analyst": "budget.epsilon_per_analyst", "analyst2": "budget.epsilon_per_table"}


def test_an_analysts_share_above_the_tables_budget_is_an_invalid_rules_file(tmp_path):
    with pytest.raises(Exception, match="must not exceed the table"):
        _sites(tmp_path, analyst_eps=BUDGET_EPS * 2)


def test_a_refused_call_spends_nothing(tmp_path):
    """Spend only after success: a refused call leaves the ledger as it was."""
    provisioned, services = _sites(tmp_path)
    service = services["a"]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        with pytest.raises(FederatedCallError):
            session.aggregate("noisyScoresDS", Ref("D$y"), Ref("D$s0"), epsilon=5.0)  # asks for less privacy
    assert service.ledger.listing() == []


def test_the_ledger_is_append_only(tmp_path):
    ledger = Ledger(tmp_path / "l.sqlite")
    db = sqlite3.connect(tmp_path / "l.sqlite")
    db.execute("INSERT INTO spend (time, analyst, table_key, function, epsilon, delta, rho) "
               "VALUES ('t', 'a', 'P.t', 'f', 1, 0, 0)")
    db.commit()
    for statement in ("UPDATE spend SET epsilon = 0", "DELETE FROM spend"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(statement)
    assert ledger.total("P.t", "a").epsilon == 1 and ledger.total("P.t").epsilon == 1


def test_the_ledger_survives_a_restart_of_a_real_server_process(tmp_path):
    provisioned, _ = _sites(tmp_path)
    gov = provisioned["a"].credentials["governance"]

    def listing(url):
        response = requests.get(f"{url}/v1/budget", auth=(gov.user, gov.password), timeout=30)
        response.raise_for_status()
        return response.json()

    with LocalSites(provisioned.values(), tmp_path / "run1") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            first = [_query(session, j) for j in range(2)]
        before = listing(sites.urls["a"])
    with LocalSites(provisioned.values(), tmp_path / "run2") as sites:
        after = listing(sites.urls["a"])
        assert after["spending"] == before["spending"]
        assert after["spending"][0]["queries"] == 2
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            assert _query(session, 1) == first[1]  # a repeat after the restart is still free
            answered = 2
            with pytest.raises(FederatedCallError) as exc:
                for j in range(2, N_SCORES):
                    _query(session, j)
                    answered += 1
            assert isinstance(exc.value.failures["a"], BudgetExceeded)
            assert _independent_spent(answered)[0] <= BUDGET_EPS < _independent_spent(answered + 1)[0]
        analyst = provisioned["a"].credentials["analyst"]
        denied = requests.get(f"{sites.urls['a']}/v1/budget", auth=(analyst.user, analyst.password), timeout=30)
        assert denied.status_code == 403 and denied.json()["error"]["type"] == "forbidden"


CASES = [(0.5, 1, 1e-5), (1.0, 1, 1e-5), (3.7, 10, 1e-4), (10.0, 100, 1e-6), (2.0, 3, 0.01), (0.8, 50, 1e-5)]


@pytest.mark.parametrize("noise_multiplier,k,delta", CASES)
def test_rdp_accountant_bounds_the_exact_composition(noise_multiplier, k, delta):
    """RDP is an upper bound, never below the exact epsilon of the composition: k Gaussian releases
    with Delta/sigma = 1/z compose to one Gaussian with mu = sqrt(k)/z (Dong, Roth & Su 2022,
    Cor. 3.3), whose epsilon(delta) solves Balle & Wang's (2018) Theorem 8 (scipy.stats here);
    and it is within a small factor of it (the conversion is not loose)."""
    ours = rdp_epsilon(k * gaussian_rho(sigma=noise_multiplier, sensitivity=1.0), delta)
    mu = math.sqrt(k) / noise_multiplier

    def gap(eps):
        return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps + stats.norm.logcdf(-mu / 2 - eps / mu)) - delta

    exact = 0.0 if gap(0.0) <= 0 else optimize.brentq(gap, 0.0, 200.0)
    assert exact <= ours + 1e-9
    assert ours <= 1.6 * exact + 0.05


def test_a_calls_cost_is_known_before_it_runs_and_equals_its_charge(tmp_path):
    """``session.cost`` (POST /v1/sessions/{sid}/cost, OpenDP's privacy map) states a noisy call's
    charge per table before it runs, spending nothing, and the ledger then charges exactly that:
    the mechanism's (epsilon, delta) and rho = sensitivity^2 / (2 sigma^2) with sigma the analytic
    Gaussian's for the site's (or the analyst's smaller) epsilon. A call asking for less privacy
    than the site gives is refused by the same rule the call itself would meet."""
    provisioned, services = _sites(tmp_path)
    ledger = services["a"].ledger
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        for call, epsilon in ((("noisyScoresDS", Ref("D$y"), Ref("D$s0")), EPS),
                              (("scoreHistogramDS", Ref("D$y"), Ref("D$s1")), 0.5)):
            spent_before = ledger.total("P.t", "analyst")
            preview = session.cost(*call, epsilon=epsilon)["a"]
            assert ledger.total("P.t", "analyst") == spent_before  # nothing spent by asking
            (table,) = preview["tables"]
            sigma = analytic_gaussian_sigma(epsilon=epsilon, delta=DELTA, sensitivity=SENS)
            assert table["table"] == "P.t" and table["charge"] == pytest.approx(
                {"epsilon": epsilon, "delta": DELTA, "rho": gaussian_rho(sigma=sigma, sensitivity=SENS)}, rel=1e-12)
            assert table["remaining"]["epsilon"] == pytest.approx(BUDGET_EPS - table["spent"]["epsilon"])
            session.aggregate(*call, epsilon=epsilon)
            charged = ledger.total("P.t", "analyst")
            assert (charged.epsilon - spent_before.epsilon, charged.delta - spent_before.delta,
                    charged.rho - spent_before.rho) == pytest.approx(tuple(table["charge"].values()), rel=1e-12)
        assert session.cost("meanDS", Ref("D$age"))["a"]["tables"][0]["charge"] == {
            "epsilon": 0.0, "delta": 0.0, "rho": 0.0}
        with pytest.raises(FederatedCallError) as exc:
            session.cost("noisyScoresDS", Ref("D$y"), Ref("D$s2"), epsilon=2 * EPS)
        assert exc.value.failures["a"].rule == "privacy.epsilon"
    assert [r["kind"] for r in audit_records(provisioned["a"]) if r["function"] == "meanDS"] == ["cost"]


def test_an_analyst_sees_their_own_budget_equal_to_the_ledgers_figures(tmp_path):
    """``session.budget()`` (GET /v1/budget/mine, any analyst) over HTTP to a real site process: per
    table the analyst spent on, spent and remaining equal governance's ``GET /v1/budget`` row for
    that analyst and the independent RDP reference for k releases; another analyst's spending is
    not in it."""
    provisioned, _ = _sites(tmp_path)
    with LocalSites(provisioned.values(), tmp_path / "proc") as sites:
        with http_builder(provisioned, sites.urls).login() as session:
            session.assign_table("D", "P.t")
            session.assign_table("E", "P.u")
            for j in range(2):
                _query(session, j)
            _query(session, 0, "E")
            mine = session.budget()["a"]
        with http_builder(provisioned, sites.urls, "analyst2").login() as other:
            other.assign_table("D", "P.t")
            _query(other, 5)
            assert [t["table"] for t in other.budget()["a"]["tables"]] == ["P.t"]
        governance = provisioned["a"].credentials["governance"]
        listing = requests.get(f"{sites.urls['a']}/v1/budget", auth=(governance.user, governance.password),
                               timeout=10).json()
    assert mine["analyst"] == "analyst" and mine["budget"] == {"epsilon": BUDGET_EPS, "delta": BUDGET_DELTA}
    rows = {r["table"]: r for r in listing["spending"] if r["analyst"] == "analyst"}
    assert {t["table"]: (t["spent"], t["remaining"]) for t in mine["tables"]} == {
        table: (r["spent"], r["remaining"]) for table, r in rows.items()}
    by_table = {t["table"]: t for t in mine["tables"]}
    for table, k in (("P.t", 2), ("P.u", 1)):
        eps, delta = _independent_spent(k)
        assert by_table[table]["spent"]["epsilon"] == pytest.approx(eps, rel=1e-3)
        assert by_table[table]["remaining"]["epsilon"] == pytest.approx(BUDGET_EPS - eps, rel=1e-3)
