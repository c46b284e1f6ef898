"""The postgresql engine (dsfed_server/engines/postgresql.py) against a throwaway PostgreSQL cluster
(tests/pgkit.py; scripts/install-postgresql.sh installs the server).

Reference: the same GBSG2 sites served by the in-memory engine (the first releases' path, pandas
over the CSV files): the full validation gives the same report, field by field. Site 3's table holds
every column as text (a staging table), so the SQL checks' text-to-number path is exercised too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

import pandas as pd
import psycopg
import pytest

from conftest import ROOT, inprocess_builder
from dsfed_client.analyses.suite import validate
from dsfed_client.errors import FederatedCallError
from dsfed_server.dictionary import CatalogError
from dsfed_server.disclosure.history import History
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService
from dsfed_server.tomlfile import ConfigFileError
from pgkit import READER, Cluster, cluster, column_types, password_file
from sitekit import NO_NOISE, assert_same_report, make_sites, whole_table_sum, write_table

TEXT_SITE = "site3"  # its table holds every column as text


@pytest.fixture(scope="module")
def pg() -> Iterator[Cluster]:
    with cluster() as running:
        yield running


def database(tmp: Path, site: str) -> str:
    """The database of ``site`` among the sites :func:`pg_sites` makes under ``tmp``."""
    return f"{tmp.name}_{site}".lower().replace("-", "_")


def pg_sites(pg: Cluster, tmp: Path, frames: dict[str, pd.DataFrame], *, text_sites: tuple[str, ...] = (),
             stored: dict[str, pd.DataFrame] | None = None, user: str = READER,
             password: str = "reader-password", rules: Path = NO_NOISE) -> dict[str, ProvisionedSite]:
    """Sites whose table P.t is ``frames[site]`` (or ``stored[site]``) in database :func:`database`:
    the dictionaries as sitekit.write_table writes them from ``frames`` (and no data file beside
    them), no-noise rules unless ``rules``."""
    tmp.mkdir(parents=True, exist_ok=True)
    secret = password_file(tmp, password)
    spec, databases = {}, {}
    for name, frame in frames.items():
        data = tmp / "data" / name
        write_table(data, frame)
        (data / "P" / "t.csv").unlink()
        databases[name] = database(tmp, name)
        pg.create_database(databases[name])
        pg.load(databases[name], "P", "t", (stored or {}).get(name, frame),
                column_types(frame, as_text=name in text_sites))
        spec[name] = (data, rules)
    return provision(tmp / "run", spec, catalog=lambda site: {
        "engine": "postgresql", "dsn": pg.dsn(databases[site], user), "password_file": str(secret)})


def test_validation_over_postgresql_equals_memory_engine(pg, gbsg2_frames, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pgval")
    provisioned = pg_sites(pg, tmp / "pg", gbsg2_frames, text_sites=(TEXT_SITE,))
    services = {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}
    for service in services.values():  # the checks ran in SQL, and found nothing to read at start
        info = service.catalog.info("P.t")
        assert type(service.catalog.engine).__name__ == "PostgreSQLEngine"
        assert service.catalog.engine.suspect_columns(info, info.variables) == []
    mem_provisioned, mem_services = make_sites(tmp / "mem", gbsg2_frames, rules=NO_NOISE, catalog={"engine": "memory"})
    for name, service in services.items():  # every column served the same, typed by the same dictionary
        pd.testing.assert_frame_equal(service.catalog.frame("P.t"), mem_services[name].catalog.frame("P.t"))
    reports = {}
    for label, (prov, serv) in {"pg": (provisioned, services), "mem": (mem_provisioned, mem_services)}.items():
        with inprocess_builder(prov, serv).login() as session:
            session.assign_table("D", "P.t")
            reports[label] = validate(session, "D$y", "D$score").to_dict()
    for service in (*services.values(), *mem_services.values()):
        service.catalog.close()
    compared = assert_same_report(reports["pg"], reports["mem"])
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


WRITE_GRANTS = {
    "insert": ('GRANT INSERT ON "P"."t" TO {role}', "can write table"),
    "update-one-column": ('GRANT UPDATE (age) ON "P"."t" TO {role}', "can write table"),
    "truncate": ('GRANT TRUNCATE ON "P"."t" TO {role}', "can write table"),
    "create-in-schema": ('GRANT CREATE ON SCHEMA "P" TO {role}', "can create tables in the schema"),
    "member-of-a-writer": ("CREATE ROLE {role}_etl NOLOGIN; GRANT DELETE ON \"P\".\"t\" TO {role}_etl; "
                           "GRANT {role}_etl TO {role}; ALTER ROLE {role} NOINHERIT", "can write table"),
    "superuser": ("ALTER ROLE {role} SUPERUSER", "is (or may become) a superuser"),
}


@pytest.mark.parametrize("value, problem", [("abc", "is not a number"), ("1e99999", "is outside the declared range"),
                                            ("40.5", "is not a whole number"), ("  41 ", None)])
def test_text_that_is_no_whole_number_in_range_stops_the_site(pg, gbsg2_frames, tmp_path, value, problem):
    """An integer variable held as text: the SQL check (a regex, then numeric) finds what pandas refuses."""
    clean = gbsg2_frames["site1"]
    stored = clean.astype({"age": str})
    stored.loc[6, "age"] = value
    provisioned = pg_sites(pg, tmp_path, {"site1": clean}, stored={"site1": stored}, text_sites=("site1",))
    if problem is None:  # surrounding spaces: a number, as in a CSV file
        service = SiteService.from_config_file(provisioned["site1"].config)
        assert service.catalog.column("P.t", "age").iloc[6] == 41
        service.catalog.close()
        return
    with pytest.raises(CatalogError, match=f":P.t:age:7: value {value!r} {problem}"):
        SiteService.from_config_file(provisioned["site1"].config)


@pytest.mark.parametrize("grant", list(WRITE_GRANTS))
def test_a_role_that_can_write_is_refused_at_start(pg, gbsg2_frames, tmp_path, grant):
    role = f"writer_{grant.replace('-', '_')}"
    pg.create_role(role, "writer-password")
    provisioned = pg_sites(pg, tmp_path, {"site1": gbsg2_frames["site1"]}, user=role, password="writer-password")
    statements, refusal = WRITE_GRANTS[grant]
    with pg.superuser(database(tmp_path, "site1")) as db:
        db.execute(f'GRANT CONNECT ON DATABASE {database(tmp_path, "site1")} TO {role}')
        db.execute(f'GRANT USAGE ON SCHEMA "P" TO {role}')
        db.execute(f'GRANT SELECT ON "P"."t" TO {role}')
        for statement in statements.format(role=role).split("; "):
            db.execute(statement)
    with pytest.raises(CatalogError) as refused:
        SiteService.from_config_file(provisioned["site1"].config)
    message = str(refused.value)
    assert f"role {role!r} {refusal}" in message and "dsfed reads with a role that can only read" in message, message
    assert f"dbname={database(tmp_path, 'site1')}" in message  # which database (the dsn, without a password)


def test_the_sites_connection_cannot_write_even_when_granted(pg, gbsg2_frames, tmp_path):
    """The reader role starts the site; then the database's owner grants it INSERT by mistake: an
    INSERT through the engine's own connection still fails (default_transaction_read_only)."""
    provisioned = pg_sites(pg, tmp_path, {"site1": gbsg2_frames["site1"]})
    service = SiteService.from_config_file(provisioned["site1"].config)
    dbname = database(tmp_path, "site1")
    with pg.superuser(dbname) as db:
        db.execute(f'GRANT INSERT ON "P"."t" TO {READER}')
        try:
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                service.catalog.engine._connection.execute('INSERT INTO "P"."t" (age) VALUES (50)')
        finally:
            db.execute(f'REVOKE INSERT ON "P"."t" FROM {READER}')
        assert db.execute('SELECT count(*) FROM "P"."t"').fetchone()[0] == len(gbsg2_frames["site1"])
    assert service.catalog.row_count("P.t") == len(gbsg2_frames["site1"])
    service.catalog.close()


def test_a_table_that_loses_records_after_a_read_refuses_the_next_read(pg, gbsg2_frames, tmp_path):
    """The records are counted once, in the first read's snapshot, and every column is read into
    arrays of that many rows: after the owner deletes a record, the next column's read is refused
    instead of serving a column a record shorter than the first (rows that no longer line up)."""
    frame = gbsg2_frames["site1"]
    provisioned = pg_sites(pg, tmp_path, {"site1": frame})
    service = SiteService.from_config_file(provisioned["site1"].config)
    with inprocess_builder(provisioned, {"site1": service}).login() as session:
        session.assign_table("A", "P.t", variables=["age"])
        with pg.superuser(database(tmp_path, "site1")) as db:
            db.execute('DELETE FROM "P"."t" WHERE ctid = (SELECT min(ctid) FROM "P"."t")')
        with pytest.raises(FederatedCallError) as refused:
            session.assign_table("D", "P.t", variables=["pnodes"])
    failure = refused.value.failures["site1"]
    assert failure.kind == "backend_unavailable"
    assert (f"{len(frame) - 1} rows, not the {len(frame)} it had when first read: the table changed while the "
            "site served it") in failure.message
    service.catalog.close()


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "columns-read-later-not-checked"])
def test_an_update_while_the_site_runs_reads_no_record(pg, gbsg2_frames, tmp_path, monkeypatch, checked):
    """Red team (default.toml: the release history kept). The whole-table mean age of one run; in the next, the
    table checked with one column read (pnodes), then the youngest record's age raised by 7 by an UPDATE (the
    same number of records; PostgreSQL writes the row anew, and the engine reads ORDER BY ctid), then the age
    read: the two means give the 7 (the control, without the check of the columns read later in a run). The age
    is checked as it is read, and the table refused for the rest of the run."""
    if not checked:
        monkeypatch.setattr(History, "columns_read", lambda self, table, columns: None)
    provisioned = pg_sites(pg, tmp_path, {"site1": gbsg2_frames["site1"]},
                           rules=ROOT / "disclosure_rules" / "default.toml")
    sums, failure = [], None
    for run in range(2):
        service = SiteService.from_config_file(provisioned["site1"].config)
        with inprocess_builder(provisioned, {"site1": service}).login() as session:
            if run:
                session.assign_table("A", "P.t", variables=["pnodes"])
                with pg.superuser(database(tmp_path, "site1")) as db:
                    db.execute('UPDATE "P"."t" SET age = age + 7 WHERE ctid = '
                               '(SELECT ctid FROM "P"."t" ORDER BY age, ctid LIMIT 1)')
            total, refused = whole_table_sum(session, "age")
            if total is None:
                failure = refused
            else:
                sums.append(total)
        service.catalog.close()
    read = sums[1] - sums[0] if len(sums) == 2 else None
    print(f"ATTACK whole-table mean age across an UPDATE while the site runs (PostgreSQL, default.toml; "
          f"{'checked' if checked else 'not checked'} as read): read {read} (truth 7), "
          f"refused {failure and failure.rule}")
    if not checked:
        assert read == pytest.approx(7, abs=1e-6)
        return
    assert read is None and failure.rule == "disclosure.subset_min_difference"
    assert "table P.t changed while the site served it (age" in failure.message


def test_rows_an_update_moved_are_matched_with_the_earlier_records(pg, gbsg2_frames, tmp_path):
    """An UPDATE that changes no value still writes each row it touches anew, at the table's end (the engine reads
    ORDER BY ctid): between two runs, ten records moved. The site matches the records with those of the run
    before (docs/governance.md, 'A table that grows'), so the table is served, and the means by tumour grade of
    both runs equal pandas' over the records (default.toml: the release history kept)."""
    frame = gbsg2_frames["site1"]
    provisioned = pg_sites(pg, tmp_path, {"site1": frame}, rules=ROOT / "disclosure_rules" / "default.toml")
    for run in range(2):
        if run:
            with pg.superuser(database(tmp_path, "site1")) as db:
                db.execute('UPDATE "P"."t" SET age = age WHERE ctid IN (SELECT ctid FROM "P"."t" ORDER BY ctid '
                           'LIMIT 10)')
                assert db.execute('SELECT age FROM "P"."t" ORDER BY ctid LIMIT 1').fetchone()[0] != frame.age[0]
        service = SiteService.from_config_file(provisioned["site1"].config)
        with inprocess_builder(provisioned, {"site1": service}).login() as session:
            session.assign_table("D", "P.t")
            means = next(iter(session.aggregate_expr("meanSdGpDS(D$age, D$tgrade)").values()))
        service.catalog.close()
        assert means["Mean_gp"] == pytest.approx(frame.groupby("tgrade").age.mean().to_list(), rel=1e-12)


def test_a_password_file_others_can_read_is_refused(pg, gbsg2_frames, tmp_path):
    provisioned = pg_sites(pg, tmp_path, {"site1": gbsg2_frames["site1"]})
    os.chmod(tmp_path / "reader.password", 0o640)
    with pytest.raises(ConfigFileError, match="the database password file is readable by others; run chmod 600"):
        SiteService.from_config_file(provisioned["site1"].config)


def test_the_documented_role_starts_a_site(pg, gbsg2_frames, tmp_path):
    """docs/deployment.md's read-only role, made by its SQL (names swapped for the test's), serves the table."""
    doc = (ROOT / "docs" / "deployment.md").read_text()
    sql = next(b for b in re.findall(r"```sql\n(.*?)```", doc, re.S) if "CREATE ROLE dsfed_reader" in b)
    provisioned = pg_sites(pg, tmp_path, {"site1": gbsg2_frames["site1"]}, user="doc_reader", password="change-me")
    dbname = database(tmp_path, "site1")
    sql = (sql.replace("dsfed_reader", "doc_reader").replace("DATABASE hospital", f"DATABASE {dbname}")
           .replace('"GBSG2"', '"P"').replace('"validation"', '"t"'))
    with pg.superuser(dbname) as db:
        for statement in filter(None, (s.strip() for s in re.sub(r"--[^\n]*", "", sql).split(";"))):
            db.execute(statement)
    service = SiteService.from_config_file(provisioned["site1"].config)
    assert service.catalog.frame("P.t", ["age"]).age.tolist() == gbsg2_frames["site1"].age.tolist()
    service.catalog.close()
