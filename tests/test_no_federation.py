"""Sites without a ``[federation]`` section (no peer identity keys pinned) do what docs/site-admin.md
says: they answer plain calls, and a DataSHIELD client's ``glmDS2`` at the analyst's coefficients,
and refuse the native GLM even with ``secure=False``, naming ``secure_aggregation.peers``: the sites
derive its iterates from parts they seal for each other, and without pinned keys the analyst could
forge those parts and so choose the coefficients. Two in-process sites under the shipped rules;
references: pandas' mean and numpy's binomial deviance on the pooled records."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import DEFAULT_RULES, ROOT, write_table


def _frames() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    frames = {}
    for site, n in (("north", 120), ("south", 90)):
        x = np.round(rng.normal(size=n), 3)
        frames[site] = pd.DataFrame({"y": rng.binomial(1, 1 / (1 + np.exp(-(0.2 + 0.9 * x)))), "x": x})
    return frames


@pytest.fixture
def unpinned(tmp_path: Path):
    frames = _frames()
    spec = {}
    for name, frame in frames.items():
        write_table(tmp_path / "data" / name, frame)
        spec[name] = (tmp_path / "data" / name, DEFAULT_RULES)
    provisioned = provision(tmp_path / "run", spec)
    for site in provisioned.values():  # the [federation] section provision writes, up to the next section
        text = site.config.read_text()
        stripped = re.sub(r"\n\[federation\]\n(?:(?!\[).*\n)*", "\n", text)
        assert "[federation]" in text and "[federation]" not in stripped and "peers." not in stripped
        site.config.write_text(stripped)
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    assert all(not s.config.federation.peers for s in services.values())
    return frames, provisioned, services


def test_plain_calls_answer_and_the_native_glm_is_refused_naming_the_peers_rule(unpinned):
    frames, provisioned, services = unpinned
    pooled = pd.concat(frames.values(), ignore_index=True)
    beta = np.array([0.1, 0.5])
    mu = 1 / (1 + np.exp(-(beta[0] + beta[1] * pooled.x)))
    deviance = -2 * np.sum(pooled.y * np.log(mu) + (1 - pooled.y) * np.log(1 - mu))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        assert session.mean("D$x").mean == pytest.approx(pooled.x.mean(), rel=1e-12)
        parts = session.aggregate("glmDS2", "y ~ x", "binomial", beta.tolist(), None, None, "D")
        assert sum(part["dev"] for part in parts.values()) == pytest.approx(deviance, rel=1e-10)
        with pytest.raises(FederatedCallError) as refused:
            ds_glm(session, "y ~ x", "D", family="binomial", secure=False)
    assert set(refused.value.failures) == set(frames)
    assert {e.rule for e in refused.value.failures.values()} == {"secure_aggregation.peers"}


def test_the_site_admin_guide_says_so():
    guide = " ".join((ROOT / "docs" / "site-admin.md").read_text().split())
    assert "Without a `[federation]` section the site refuses every secure sum" in guide
    assert "native client's GLM even with `secure=False`" in guide
    assert "The site still answers plain calls, and a DataSHIELD client's `ds.glm`" in guide
