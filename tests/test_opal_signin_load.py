"""Sign-ins at the Opal door under load: DataSHIELD's clients (PyPI ``datashield``, R's DSOpal) give up at
a 429, so a sign-in there waits for a password-check slot up to ``[login] signin_wait_s`` in a queue of
at most ``check_queue`` logins; a native login waits ``check_wait_s`` (its client waits as
``Retry-After`` says). A real loopback site that checks one password at a time (``concurrent_checks =
1``), 24 analysts at one moment.
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.to_thread
import numpy as np
import pandas as pd
import pytest
import requests
from datashield import DSLoginBuilder, DSSession

from dsfed_server.api import create_app
from dsfed_server.launch import LocalSites
from dsfed_server.provision import ProvisionedSite, provision
from opalkit import opal_value
from sitekit import ACCESS_LINE, DEFAULT_RULES, make_sites, write_table

ANALYSTS = 24
SIGN_IN = "/ws/system/subject-profile/_current"  # where R's opalr sends the credentials first


def _site(tmp_path: Path, login: str) -> tuple[ProvisionedSite, pd.DataFrame]:
    frame = pd.DataFrame({"v": np.random.default_rng(5).normal(50.0, 5.0, 120)})
    write_table(tmp_path / "data", frame)
    users = tuple((f"analyst{i:02d}", "analyst") for i in range(ANALYSTS))
    site = provision(tmp_path / "run", {"busy": (tmp_path / "data", DEFAULT_RULES)}, users=users)["busy"]
    site.config.write_text(site.config.read_text() + f"\n[login]\nconcurrent_checks = 1\n{login}\n")
    return site, frame


def _at_once(users: list[str], act) -> dict[str, object]:
    """``act(user)`` in one thread per user, released at one moment: each one's answer or exception."""
    start, out = threading.Barrier(len(users)), {}

    def run(user: str) -> None:
        start.wait()
        try:
            out[user] = act(user)
        except Exception as exc:  # noqa: BLE001  (every failure is reported by the caller)
            out[user] = exc

    threads = [threading.Thread(target=run, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    return out


@pytest.mark.parametrize("signin_wait_s", [30, 0.25], ids=["signin-waits", "as-a-native-login"])
def test_datashield_clients_signing_in_at_once_all_get_in(tmp_path: Path, signin_wait_s: float):
    """24 unmodified PyPI ``datashield`` clients open a session and read ``meanDS`` at one moment. With
    the site's ``signin_wait_s = 30`` every one gets in and reads pandas' mean. With ``signin_wait_s =
    0.25``, the native ``check_wait_s`` and what every sign-in got before the Opal door waited longer,
    some are refused (HTTP 429, rule login.concurrent_checks) and the client fails: the finding this fixes."""
    site, frame = _site(tmp_path, f"check_wait_s = 0.25\nsignin_wait_s = {signin_wait_s}")
    users = [f"analyst{i:02d}" for i in range(ANALYSTS)]
    with LocalSites([site], tmp_path / "proc") as local:
        def analyse(user: str) -> float:
            builder = DSLoginBuilder()
            builder.add("busy", local.urls["busy"], user=user, password=site.credentials[user].password)
            session = DSSession(builder.build())
            session.open()
            try:
                session.assign_table("D", table="P.t", asynchronous=False)
                answer = session.aggregate("meanDS(D$v)", asynchronous=False)["busy"]
                return opal_value(answer)["EstimatedMean"]
            finally:
                session.close()

        answers = _at_once(users, analyse)
    failed = {u: str(a) for u, a in answers.items() if isinstance(a, Exception)}
    print(f"SIGN-INS 24 at once, one check at a time, signin_wait_s = {signin_wait_s}: {len(failed)} failed")
    if signin_wait_s == 30:
        assert failed == {}
        assert answers == {user: pytest.approx(frame["v"].mean(), rel=1e-12) for user in users}
    else:  # the client says only "Failed to authenticate"; the site's access log has the 429s
        assert failed and all("Failed to authenticate" in message for message in failed.values()), failed
        access = site.audit_log.with_name("busy-access.log").read_text().splitlines()
        assert [ACCESS_LINE.match(line).group("status") for line in access].count("429") >= len(failed)


def test_sign_ins_past_the_queue_are_refused_at_once_naming_the_rule(tmp_path: Path):
    """``check_queue = 3``: of 24 plain-HTTP sign-ins at one moment (the route and credentials R's opalr
    and the Python client send), one is checked, at most 3 wait, and the others get 429 at once with
    ``Retry-After`` and the rule login.check_queue; every one the queue took gets in. Signing in again
    one at a time, each refused one gets in."""
    site, _ = _site(tmp_path, "check_queue = 3\nsignin_wait_s = 30")
    users = [f"analyst{i:02d}" for i in range(ANALYSTS)]
    with LocalSites([site], tmp_path / "proc") as local:
        def sign_in(user: str) -> requests.Response:
            return requests.get(local.urls["busy"] + SIGN_IN, auth=(user, site.credentials[user].password),
                                timeout=120)

        answers = _at_once(users, sign_in)
        statuses = {user: answer.status_code for user, answer in answers.items()}
        refused = [user for user, status in statuses.items() if status == 429]
        print(f"SIGN-INS 24 at once, check_queue = 3: {ANALYSTS - len(refused)} in, {len(refused)} refused")
        assert set(statuses.values()) <= {200, 429} and refused, statuses
        assert ANALYSTS - len(refused) >= 1 + 3  # the one checked first and the 3 the queue took
        for user in refused:
            body = answers[user].json()
            assert "login.check_queue" in str(body) and answers[user].headers["Retry-After"] == "1", body
        assert all(sign_in(user).status_code == 200 for user in refused)


def test_logins_waiting_for_a_check_get_threads_of_their_own(tmp_path: Path):
    """The server's worker threads are the calls' 40 (anyio's default) and one for every login the site lets
    check or wait at once: sign-ins waiting up to ``signin_wait_s`` (a flood of guesses at the Opal door fills
    the queue) hold none of the threads the analysts' calls run in. The app's lifespan, as uvicorn runs it,
    sets the limiter of the loop it serves on."""
    _, services = make_sites(tmp_path, {"s1": pd.DataFrame({"v": np.arange(10.0)})})
    service = services["s1"]
    app = create_app(service)

    async def tokens() -> float:
        async with app.router.lifespan_context(app):
            return anyio.to_thread.current_default_thread_limiter().total_tokens

    login = service.config.login
    assert anyio.run(tokens) == 40 + login.concurrent_checks + login.check_queue == 40 + login.concurrent_checks + 32
