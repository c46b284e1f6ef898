"""What ``dsfed report`` computes -- ``validate()`` over the five GBSG2 sites, their shipped rules files, the noise
on -- released whole under several site secrets.

A site draws the secret margins of its cells and its picks with its own secret (32 random bytes at provisioning), so
an audit whose refusals protect no record can refuse an honest report under some secrets only. Here each site's
secret comes from a seed, so that each run tries the same secrets; the noise is drawn afresh at every run. Refused
or uncomputed sections are listed in ``ValidationReport.failed``: a report released whole has none, is pooled, and
every estimate is finite.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from conftest import FIXTURES, GBSG2_SITES, RULES, inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_server import provision as provisioning
from dsfed_server.provision import provision
from dsfed_server.service import SiteService

SEEDS = range(4)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_report_is_released_whole_under_each_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int):
    def write_secret(path: Path) -> None:
        path.write_bytes(hashlib.sha256(f"honest-report:{seed}:{path.name}".encode()).digest())
        path.chmod(0o600)

    monkeypatch.setattr(provisioning, "write_secret", write_secret)
    provisioned = provision(tmp_path, {s: (FIXTURES / s, RULES / f"{s}.toml") for s in GBSG2_SITES})
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    try:
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "GBSG2.validation")
            report = validate(session, "D$y", "D$score")
    finally:
        for service in services.values():
            service.close()
    assert report.failed == {}, report.failed
    assert report.mode == "pooled"
    d = report.discrimination
    assert d is not None and 0.5 < d.auc < 1 and 0.5 < d.roc_glm_auc < 1
    assert all(math.isfinite(v) for v in (d.ci.lower, d.ci.upper, *d.roc_glm_ci, report.brier.brier))
