"""The postgresql engine (dsfed_server/engines/postgresql.py) against a throwaway PostgreSQL cluster
(tests/pgkit.py; scripts/install-postgresql.sh installs the server).

Reference: the same GBSG2 sites served by the in-memory engine (the first releases' path, pandas
over the CSV files): the full validation gives the same report, field by field. Site 3's table holds
every column as text (a staging table), so the SQL checks' text-to-number path is exercised too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import psycopg
import pytest

from conftest import inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_server.catalog import CatalogError
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService
from pgkit import READER, Cluster, cluster
from sitekit import NO_NOISE, make_sites, write_table

TEXT_SITE = "site3"  # its table holds every column as text


@pytest.fixture(scope="module")
def pg() -> Iterator[Cluster]:
    with cluster() as running:
        yield running


def column_types(frame: pd.DataFrame, as_text: bool = False) -> dict[str, str]:
    """PostgreSQL column types for ``frame``'s columns (all text when ``as_text``)."""
    def kind(col: pd.Series) -> str:
        if as_text or not pd.api.types.is_numeric_dtype(col):
            return "text"
        return "bigint" if pd.api.types.is_integer_dtype(col) else "double precision"
    return {name: kind(col) for name, col in frame.items()}


def password_file(pg: Cluster, directory: Path, password: str = "reader-password") -> Path:
    path = directory / "reader.password"
    path.write_text(password + "\n")
    os.chmod(path, 0o600)
    return path


def database(tmp: Path, site: str) -> str:
    """The database of ``site`` among the sites :func:`pg_sites` makes under ``tmp``."""
    return f"{tmp.name}_{site}".lower().replace("-", "_")


def pg_sites(pg: Cluster, tmp: Path, frames: dict[str, pd.DataFrame], *, text_sites: tuple[str, ...] = (),
             stored: dict[str, pd.DataFrame] | None = None, user: str = READER,
             password: str = "reader-password") -> dict[str, ProvisionedSite]:
    """Sites whose table P.t is ``frames[site]`` (or ``stored[site]``) in database :func:`database`:
    the dictionaries as sitekit.write_table writes them from ``frames`` (and no data file beside
    them), no-noise rules."""
    tmp.mkdir(parents=True, exist_ok=True)
    secret = password_file(pg, tmp, password)
    spec, databases = {}, {}
    for name, frame in frames.items():
        data = tmp / "data" / name
        write_table(data, frame)
        (data / "P" / "t.csv").unlink()
        databases[name] = database(tmp, name)
        pg.create_database(databases[name])
        pg.load(databases[name], "P", "t", (stored or {}).get(name, frame),
                column_types(frame, as_text=name in text_sites))
        spec[name] = (data, NO_NOISE)
    return provision(tmp / "run", spec, catalog=lambda site: {
        "engine": "postgresql", "dsn": pg.dsn(databases[site], user), "password_file": str(secret)})


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """A report's ``to_dict()`` as ``path -> leaf``."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}.{key}").items()}
    if isinstance(value, (list, tuple)):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}[{i}]").items()}
    return {prefix: value}


def assert_same_report(got: dict[str, Any], want: dict[str, Any]) -> int:
    """Every field equal, numbers to 1e-12 (relative, or absolute near zero); returns the numbers compared."""
    got, want = flat(got), flat(want)
    assert sorted(got) == sorted(want)
    numbers = 0
    for key, expected in want.items():
        actual = got[key]
        if isinstance(expected, (int, float)) and not isinstance(expected, bool) and expected is not None:
            numbers += 1
            assert isinstance(actual, (int, float)), key
            if math.isnan(expected):
                assert math.isnan(actual), key
            else:
                assert actual == pytest.approx(expected, rel=1e-12, abs=1e-12), key
        else:
            assert actual == expected, key
    return numbers


def test_validation_over_postgresql_equals_memory_engine(pg, gbsg2_frames, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pgval")
    provisioned = pg_sites(pg, tmp / "pg", gbsg2_frames, text_sites=(TEXT_SITE,))
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    assert all(type(s.catalog.engine).__name__ == "PostgreSQLEngine" for s in services.values())
    mem_provisioned, mem_services = make_sites(tmp / "mem", gbsg2_frames, rules=NO_NOISE, catalog={"engine": "memory"})
    reports = {}
    for label, (prov, serv) in {"pg": (provisioned, services), "mem": (mem_provisioned, mem_services)}.items():
        with inprocess_builder(prov, serv).login() as session:
            session.assign_table("D", "P.t")
            reports[label] = validate(session, "D$y", "D$score").to_dict()
    for service in (*services.values(), *mem_services.values()):
        service.catalog.close()
    compared = assert_same_report(reports["pg"], reports["mem"])
    print(f"{compared} numbers compared; fields: {sorted(reports['mem'])}")
    assert compared > 20


@pytest.mark.parametrize("as_text", [False, True], ids=["typed", "text"])
def test_value_outside_its_range_stops_the_site_naming_table_column_row(pg, gbsg2_frames, tmp_path, as_text):
    clean = gbsg2_frames["site1"]
    stored = clean.copy()
    stored.loc[6, "age"] = 150  # the 7th record, beyond the range the dictionary declares (from the clean frame)
    provisioned = pg_sites(pg, tmp_path, {"site1": clean}, stored={"site1": stored},
                           text_sites=("site1",) if as_text else ())
    with pytest.raises(CatalogError) as refused:
        SiteService.from_config_file(provisioned["site1"].config)
    message = str(refused.value)
    assert f"/{database(tmp_path, 'site1')}:P.t:age:7: value " in message, message
    low, high = clean.age.min(), clean.age.max()  # the range write_table declares
    shown = repr("150" if as_text else 150)  # as the column holds it: text, or a number
    assert f"value {shown} is outside the declared range [{low}, {high}]" in message, message
