"""A site that dies or hangs mid-session: the client raises, within a bounded time,
an error naming that site, and returns no pooled result."""

from __future__ import annotations

import os
import signal
import time

import pytest

from dsfed_client import FederatedCallError, SiteUnavailable
from dsfed_server.launch import LocalSites
from conftest import http_builder


@pytest.fixture
def three_sites(gbsg2_provisioned, tmp_path):
    subset = [gbsg2_provisioned[s] for s in ("site1", "site2", "site3")]
    with LocalSites(subset, tmp_path) as sites:
        yield sites


def test_killed_site_is_named_and_nothing_is_pooled(three_sites, gbsg2_provisioned):
    with http_builder(gbsg2_provisioned, three_sites.urls, read_timeout=5).login() as session:
        session.assign_table("D", "GBSG2.validation")
        assert session.mean("D$age").n_valid > 0
        three_sites.processes["site2"].kill()
        start = time.monotonic()
        with pytest.raises(FederatedCallError) as exc:
            session.mean("D$age")
        assert time.monotonic() - start < 10
    assert set(exc.value.failures) == {"site2"}
    err = exc.value.failures["site2"]
    assert isinstance(err, SiteUnavailable) and err.function == "meanDS"
    assert "site2" in str(exc.value) and "no pooled result" in str(exc.value)


def test_hung_site_times_out(three_sites, gbsg2_provisioned):
    process = three_sites.processes["site3"].process
    with http_builder(gbsg2_provisioned, three_sites.urls, read_timeout=2).login() as session:
        session.assign_table("D", "GBSG2.validation")
        os.kill(process.pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(FederatedCallError) as exc:
                session.mean("D$age")
            assert time.monotonic() - start < 8
        finally:
            os.kill(process.pid, signal.SIGCONT)
    err = exc.value.failures["site3"]
    assert isinstance(err, SiteUnavailable) and "no answer within 2 s" in err.message
