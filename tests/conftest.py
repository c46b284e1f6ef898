"""Shared fixtures: GBSG2 sites (in-process and as real server processes on loopback),
the pooled reference data read straight from the fixture files, and synthetic sites."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

from dsfed_client import LoginBuilder
from dsfed_server.inprocess import in_process
from dsfed_server.launch import LocalSites
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService
from sitekit import close_made_sites

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "opal_fixtures"
RULES = ROOT / "disclosure_rules"
GBSG2_SITES = ("site1", "site2", "site3", "site4", "site5")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, those allowed longest (their timeout) first among them, the rest in their order: xdist's
    workers steal tests from each other's queues, so a long test started late leaves the others idle to the end; the
    longest first, the short ones fill in."""
    def order(item: pytest.Item) -> tuple[int, float]:
        if item.get_closest_marker("slow") is None:
            return 1, 0.0
        timeout = item.get_closest_marker("timeout")
        return 0, -float(timeout.args[0] if timeout and timeout.args else item.config.getini("timeout") or 0)

    items.sort(key=order)


def read_site_csv(site: str) -> pd.DataFrame:
    """The raw fixture file, read independently of dsfed's catalog."""
    return pd.read_csv(FIXTURES / site / "GBSG2" / "validation.csv")


@pytest.fixture(scope="session")
def gbsg2_frames() -> dict[str, pd.DataFrame]:
    return {s: read_site_csv(s) for s in GBSG2_SITES}


@pytest.fixture(scope="session")
def gbsg2_pooled(gbsg2_frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(gbsg2_frames.values(), ignore_index=True)


def without_cut_history(rules: Path, out: Path) -> Path:
    """A copy of a rules file with ``disclosure.cut_history = false``."""
    text = rules.read_text()
    assert text.count("cut_history = true") == 1
    out.write_text(text.replace("cut_history = true", "cut_history = false"))
    return out


@pytest.fixture(scope="session")
def gbsg2_provisioned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ProvisionedSite]:
    """The five GBSG2 sites with the demo's rules, shared by the whole test session -- except that
    these keep no cut history across releases (``disclosure.cut_history = false``): dozens of tests
    release bins, breaks and subsets on the same columns of these sites, and a history shared
    between them would make each test's outcome depend on the ones run before it. The history is
    tested on sites of its own (test_attacks.py, test_pooled_release.py, test_demo.py)."""
    run = tmp_path_factory.mktemp("gbsg2")
    (run / "rules").mkdir()
    rules = {s: without_cut_history(RULES / f"{s}.toml", run / "rules" / f"{s}.toml") for s in GBSG2_SITES}
    return provision(run, {s: (FIXTURES / s, rules[s]) for s in GBSG2_SITES})


@pytest.fixture(scope="session")
def gbsg2_http(gbsg2_provisioned: dict[str, ProvisionedSite], tmp_path_factory: pytest.TempPathFactory):
    """Five real site server processes on free loopback ports."""
    with LocalSites(gbsg2_provisioned.values(), tmp_path_factory.mktemp("gbsg2-run")) as sites:
        yield sites


@pytest.fixture(scope="session")
def gbsg2_services(gbsg2_provisioned: dict[str, ProvisionedSite]) -> Iterator[dict[str, SiteService]]:
    services = {name: SiteService.from_config_file(p.config) for name, p in gbsg2_provisioned.items()}
    yield services
    for service in services.values():
        service.close()


@pytest.fixture(scope="module", autouse=True)
def _close_made_sites() -> Iterator[None]:
    """The sites a module's tests made (sitekit.make_sites), closed after its last test: a site left open
    holds its DuckDB database (eight threads with DuckDB 2.0) and its access log's file, and FastAPI's
    caches of route functions keep the last 80 or so sites whose app was made alive, open, for the rest of
    the run."""
    yield
    close_made_sites()


def http_builder(provisioned: dict[str, ProvisionedSite], urls: dict[str, str], user: str = "analyst",
                 *, token: bool = False, read_timeout: float = 60.0) -> LoginBuilder:
    builder = LoginBuilder()
    for name, url in urls.items():
        cred = provisioned[name].credentials[user]
        if token:
            builder.append(name, url, token=cred.token, read_timeout=read_timeout)
        else:
            builder.append(name, url, user=cred.user, password=cred.password, read_timeout=read_timeout)
    return builder


def inprocess_builder(provisioned: dict[str, ProvisionedSite], services: dict[str, SiteService],
                      user: str = "analyst") -> LoginBuilder:
    builder = LoginBuilder()
    for name, service in services.items():
        cred = provisioned[name].credentials[user]
        builder.append_inprocess(in_process(service), user=cred.user, password=cred.password)
    return builder


@pytest.fixture(params=["http", "inprocess"])
def gbsg2_session(request: pytest.FixtureRequest, gbsg2_provisioned, gbsg2_services):
    """An analyst session over the five GBSG2 sites, through each transport in turn, with D assigned."""
    if request.param == "http":
        urls = request.getfixturevalue("gbsg2_http").urls
        builder = http_builder(gbsg2_provisioned, urls)
    else:
        builder = inprocess_builder(gbsg2_provisioned, gbsg2_services)
    with builder.login() as session:
        session.assign_table("D", "GBSG2.validation")
        yield session


def audit_records(provisioned: ProvisionedSite) -> list[dict]:
    import json

    return [json.loads(line) for line in provisioned.audit_log.read_text().splitlines()]
