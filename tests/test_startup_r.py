"""A site starts without starting R (0.35 s of its start-up), starts R on the first call that needs
it, and a site without R refuses those calls clearly: real site processes on loopback, R's own
``quantile`` as the reference."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rref import r_eval
from sitekit import make_sites

from conftest import http_builder
from dsfed_client import FederatedCallError
from dsfed_server.launch import LocalSites


def _r_mapped(pid: int) -> bool:
    """Whether R's shared library is loaded into the process (R was started)."""
    return any(line.rstrip().endswith("/libR.so") for line in open(f"/proc/{pid}/maps"))


@pytest.fixture
def one_site(tmp_path: Path) -> dict:
    x = np.random.default_rng(5).normal(60, 10, 200).round(1)
    provisioned, _ = make_sites(tmp_path, {"site1": pd.DataFrame({"age": x})})
    return {"provisioned": provisioned, "x": x, "run": tmp_path / "proc"}


def test_the_site_starts_r_only_when_a_call_needs_it(one_site):
    with LocalSites(one_site["provisioned"].values(), one_site["run"]) as local:
        pid = local.processes["site1"].process.pid
        with http_builder(one_site["provisioned"], local.urls).login() as session:
            listed = {f["name"]: f for f in session.functions()["site1"]["functions"]}
            assert listed["quantileMeanDS"]["available"] is True
            assert not _r_mapped(pid)  # started and listed its functions: R not started
            session.assign_table("D", "P.t")
            got = session.aggregate("quantileMeanDS", "D$age")["site1"]
        assert _r_mapped(pid)
    expected = r_eval("quantile(x, c(0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95), type = 7, names = FALSE)",
                      x=one_site["x"])
    assert [got[k] for k in ("5%", "10%", "25%", "50%", "75%", "90%", "95%")] == pytest.approx(expected, rel=1e-14)


def test_a_site_without_r_lists_its_r_functions_unavailable_and_refuses_them(one_site, monkeypatch):
    monkeypatch.delenv("R_HOME", raising=False)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # no R on it
    with LocalSites(one_site["provisioned"].values(), one_site["run"]) as local:
        with http_builder(one_site["provisioned"], local.urls).login() as session:
            listed = {f["name"]: f for f in session.functions()["site1"]["functions"]}
            session.assign_table("D", "P.t")
            with pytest.raises(FederatedCallError) as refused:
                session.aggregate("quantileMeanDS", "D$age")
            mean = session.aggregate("meanDS", "D$age")["site1"]  # the session goes on
        log = local.processes["site1"].log_file.read_text()
    assert listed["quantileMeanDS"]["available"] is False
    error = refused.value.failures["site1"]
    assert "quantileMeanDS is implemented in R" in str(error) and "R is not installed" in str(error)
    assert "install R and rpy2" in (error.hint or "")
    assert "R is not available; quantileMeanDS will be refused" in log
    assert mean["EstimatedMean"] == pytest.approx(one_site["x"].mean(), rel=1e-14)
