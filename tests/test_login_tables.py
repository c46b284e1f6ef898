"""A per-site table map in the login (DataSHIELD's ``DSLoginBuilder`` has one): each site names its
table as its administrator did (``main.north``, ``main.south``, ...), ``assign_table("D")`` loads each
site's own, and every per-site answer is that site's table's (each site's mean equals pandas' mean
of that site's file). Every site is sent the whole map, so the sites share the symbol's definition
and pooled releases and protocols read it (dsfed_server/disclosure/shared_tables.py); the same table
everywhere gives an ordinary handle and pooled releases. Three in-process sites under the shipped
default rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dsfed_client import LoginBuilder, Ref
from dsfed_client.analyses.glm import ds_glm
from dsfed_server.inprocess import in_process
from dsfed_server.provision import provision
from dsfed_server.service import SiteService
from sitekit import DEFAULT_RULES, write_table

TABLES = {"site1": "north", "site2": "south", "site3": "valley"}


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tables")
    rng = np.random.default_rng(44)
    frames = {}
    for k, (site, table) in enumerate(TABLES.items()):
        n = (150, 100, 80)[k]
        frame = pd.DataFrame({"age": rng.integers(30 + 10 * k, 60 + 10 * k, n), "sex": rng.choice(["F", "M"], n)})
        write_table(tmp / "data" / site, frame, project="main", table=table)
        write_table(tmp / "data" / site, frame, project="main", table="common")
        frames[site] = frame
    provisioned = provision(tmp / "run", {site: (tmp / "data" / site, DEFAULT_RULES) for site in TABLES})
    services = {site: SiteService.from_config_file(p.config) for site, p in provisioned.items()}
    return provisioned, services, frames


def _login(sites, tables: dict[str, str]) -> LoginBuilder:
    provisioned, services, _ = sites
    builder = LoginBuilder()
    for site, service in services.items():
        builder.append_inprocess(in_process(service), user="analyst",
                                 password=provisioned[site].credentials["analyst"].password, table=tables.get(site))
    return builder


def test_each_site_assigns_its_own_table_and_answers_from_it(sites):
    _, _, frames = sites
    with _login(sites, {site: f"main.{table}" for site, table in TABLES.items()}).login() as session:
        handle = session.assign_table("D")
        assert handle.digest is not None  # every site is sent the whole map: one definition
        means = session.aggregate("meanDS", Ref("D$age"))
        assert {site: means[site]["EstimatedMean"] for site in TABLES} == pytest.approx(
            {site: frame["age"].mean() for site, frame in frames.items()}, rel=1e-12)
        pooled = session.mean("D$age")  # per-site means and counts, pooled by the client
        assert pooled.mean == pytest.approx(pd.concat(frames.values())["age"].mean(), rel=1e-12)
        age = session.assign("age", Ref("D$age"))
        assert age.digest is not None
        table = session.pooled("table1DDS", Ref("D$sex"))  # pooled, by the map's label
        assert dict(zip(table["levels"], table["counts"])) == pd.concat(frames.values())["sex"].value_counts().to_dict()
        for secure in (True, False):  # a pooled protocol, and one relayed per site
            fit = ds_glm(session, "age ~ 1", "D", family="gaussian", secure=secure)
            assert fit.params.iloc[0] == pytest.approx(pd.concat(frames.values())["age"].mean(), rel=1e-9)


def test_a_site_without_a_table_in_the_map_is_named(sites):
    with _login(sites, {"site1": "main.north"}).login() as session:
        with pytest.raises(ValueError) as refused:
            session.assign_table("D")
    assert "the login names no table for site2, site3" in str(refused.value)


def test_the_same_table_everywhere_is_an_ordinary_handle(sites):
    _, _, frames = sites
    with _login(sites, {site: "main.common" for site in TABLES}).login() as session:
        mapped = session.assign_table("D")
        named = session.assign_table("E", "main.common")
        assert mapped.digest is not None
        table = session.pooled("table1DDS", Ref("D$sex"))
        counts = pd.concat(frames.values())["sex"].value_counts()
        assert dict(zip(table["levels"], table["counts"])) == counts.to_dict()
        assert named.digest is not None
