"""The engines under the catalog serve the same tables (dsfed_server/engines): the validation over
DuckDB, reading CSV files, Parquet files or a DuckDB database file, equals the in-memory engine's
(noise off; tests/test_postgresql.py does the same for PostgreSQL). A site whose table does not fit
an address-space limit the in-memory engine exceeds completes the validation through DuckDB, which
reads only the columns the analysis names."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from conftest import http_builder, inprocess_builder
from dsfed_core.errors import BackendUnavailable
from dsfed_client.errors import FederatedCallError
from dsfed_client.analyses.suite import validate
from dsfed_server.dictionary import CatalogError, Variable, write_dictionary
from dsfed_server.launch import LocalSites
from dsfed_server.pooled import suite
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService
from dsfed_server.synthetic import binormal
from sitekit import NO_NOISE, ROOT, assert_same_report, write_table


def _sites(tmp: Path, frames: dict[str, pd.DataFrame], layout: str, engine: str):
    """The sites of ``frames`` with their table ``P.t`` as CSV, Parquet or a DuckDB database file."""
    spec, catalogs = {}, {}
    for name, frame in frames.items():
        data = tmp / "data" / name
        write_table(data, frame)
        csv = data / "P" / "t.csv"
        catalogs[name] = {"engine": engine}
        if layout == "parquet":
            pd.read_csv(csv).to_parquet(csv.with_suffix(".parquet"), index=False)
            csv.unlink()
        elif layout == "database":
            database = tmp / f"{name}.duckdb"
            with duckdb.connect(str(database)) as con:  # typed columns, as a database holds them
                con.register("frame", frame)
                con.execute("CREATE SCHEMA P")
                con.execute("CREATE TABLE P.t AS SELECT * FROM frame")
            csv.unlink()
            catalogs[name]["database"] = str(database)
        spec[name] = (data, NO_NOISE)
    provisioned = provision(tmp / "run", spec, catalog=lambda name: catalogs[name])
    return provisioned, {name: SiteService.from_config_file(p.config) for name, p in provisioned.items()}


def _report(provisioned, services) -> tuple[dict, dict[str, pd.DataFrame]]:
    """The validation's report over the sites, and each site's table as its catalog serves it."""
    tables = {name: service.catalog.frame("P.t") for name, service in services.items()}
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        report = validate(session, "D$y", "D$score").to_dict()
    for service in services.values():
        service.catalog.close()
    return report, tables


@pytest.fixture(scope="module")
def in_memory(gbsg2_frames, tmp_path_factory) -> tuple[dict, dict[str, pd.DataFrame]]:
    return _report(*_sites(tmp_path_factory.mktemp("memory"), gbsg2_frames, "csv", "memory"))


@pytest.mark.parametrize("layout", ["csv", "parquet", "database"])
def test_validation_over_duckdb_equals_the_memory_engine(layout, gbsg2_frames, in_memory, tmp_path):
    provisioned, services = _sites(tmp_path, gbsg2_frames, layout, "duckdb")
    for service in services.values():  # the start-up check ran in SQL and found nothing to read
        assert type(service.catalog.engine).__name__ == "DuckDBEngine"
        info = service.catalog.info("P.t")
        assert service.catalog.engine.suspect_columns(info, info.variables) == []
    report, tables = _report(provisioned, services)
    want_report, want_tables = in_memory
    for name, table in tables.items():  # every column served as the memory engine serves it
        pd.testing.assert_frame_equal(table, want_tables[name])
    assert assert_same_report(report, want_report) > 20


def test_a_parquet_value_outside_its_range_stops_the_site(tmp_path):
    """The start-up check runs in SQL over the Parquet file; the offending record is named."""
    frame = pd.DataFrame({"y": [0, 1] * 10, "score": np.linspace(0.1, 0.9, 20)})
    provisioned, _ = _sites(tmp_path, {"s1": frame}, "parquet", "duckdb")
    path = tmp_path / "data" / "s1" / "P" / "t.parquet"
    broken = frame.copy()
    broken.loc[6, "score"] = 1.5  # the dictionary declares [0, 1]
    broken.to_parquet(path, index=False)
    with pytest.raises(CatalogError, match=rf"{path}:score:7: value 1\.5 is outside the declared range \[0, 1\]"):
        SiteService.from_config_file(provisioned["s1"].config)


def _csv_site(tmp: Path):
    """One DuckDB site over a CSV file of 20 records (y, score): its config, service and file."""
    frame = pd.DataFrame({"y": [0, 1] * 10, "score": np.linspace(0.1, 0.9, 20)})
    provisioned, services = _sites(tmp, {"s1": frame}, "csv", "duckdb")
    return provisioned, services, tmp / "data" / "s1" / "P" / "t.csv"


def _replace_record(path: Path, record: int, line: str) -> None:
    """Record ``record`` (1 = the line after the header) of a CSV file replaced by ``line``."""
    lines = path.read_text().splitlines()
    lines[record] = line
    path.write_text("\n".join(lines) + "\n")


def test_nan_in_a_csv_number_column_stops_the_site(tmp_path):
    """DuckDB would cast the text 'nan' to a number; the start-up check counts it as none, as the
    catalog's typing (and the in-memory engine) do."""
    provisioned, _, path = _csv_site(tmp_path)
    _replace_record(path, 4, "1,nan")
    with pytest.raises(CatalogError, match=rf"{path}:score:4: value 'nan' is not a number"):
        SiteService.from_config_file(provisioned["s1"].config)


def test_data_changed_after_start_refuses_the_call_saying_what_to_do(tmp_path):
    """A file replaced in place while the site runs: the first call reading the changed column is
    refused, naming the table, file, column and record, and what the site administrator does."""
    provisioned, services, path = _csv_site(tmp_path)
    _replace_record(path, 3, "1,high")
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("Y", "P.t", variables=["y"])  # an unchanged column is still served
        with pytest.raises(FederatedCallError) as refused:
            session.assign_table("D", "P.t", variables=["score"])
    failure = refused.value.failures["s1"]
    assert failure.kind == "backend_unavailable"
    assert "table P.t at this site does not agree with its data dictionary" in failure.message
    assert f"{path}:score:3: value 'high' is not a number" in failure.message
    assert "dsfed-server check" in failure.hint and "restarts the site" in failure.hint


def test_a_csv_file_that_loses_records_after_a_read_refuses_the_next_read(tmp_path):
    """The records are counted once, at the first read, and every column is read into arrays of
    that many rows: a file that lost a record since (replaced in place) refuses the next column's
    read, instead of serving a column a record shorter than the first (misaligned rows)."""
    provisioned, services, path = _csv_site(tmp_path)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("Y", "P.t", variables=["y"])
        path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")  # 19 records left
        with pytest.raises(FederatedCallError) as refused:
            session.assign_table("D", "P.t", variables=["score"])
    failure = refused.value.failures["s1"]
    assert failure.kind == "backend_unavailable"
    assert "19 rows, not the 20 it had when first read: the table changed while the site served it" in failure.message
    assert "restarts the site" in failure.hint


# --- bounded memory ---------------------------------------------------------------------------

N_BIG = 1_000_000
WIDE = 150  # columns the validation does not read: 1.2 GB the in-memory engine loads, DuckDB only checks in SQL
SUITE_RULES = ROOT / "disclosure_rules" / "site1.toml"  # bench/suite.py's: noise as Schalk et al. 2024, pooled releases
HEADROOM = 2**30  # the big site's address space beyond an idle site's: less than its table's WIDE columns


def _idle_address_space(tmp: Path) -> int:
    """The address space (VmPeak) of a started site serving a small table, on this machine: the
    libraries and threads every site process maps, whatever its data."""
    rng = np.random.default_rng(3)
    write_table(tmp / "data", pd.DataFrame({"y": rng.integers(0, 2, 200), "score": rng.uniform(0, 1, 200)}))
    provisioned = provision(tmp / "run", {"idle": (tmp / "data", SUITE_RULES)}, catalog={"engine": "duckdb"})
    with LocalSites(provisioned.values(), tmp / "proc", start_timeout=300) as sites:
        return sites.processes["idle"].peak_address_space()


def _wide_sites(tmp: Path, engine: str) -> dict[str, ProvisionedSite]:
    """Three sites of N_BIG records as Parquet files; the first holds WIDE columns besides y and score."""
    rng = np.random.default_rng(17)
    spec = {}
    for k, n in enumerate((N_BIG, N_BIG, N_BIG)):
        scores = binormal(n, rng, auc=0.8, prevalence=0.3)  # dsfed synth's design, as in bench/suite.py
        frame = pd.DataFrame({"y": scores["y"], "score": scores["score"],
                              **{f"v{j}": rng.uniform(-1, 1, n) for j in range(WIDE if k == 0 else 2)}})
        folder = tmp / "data" / f"s{k + 1}" / "P"
        folder.mkdir(parents=True)
        frame.to_parquet(folder / "t.parquet", index=False)
        write_dictionary(folder / "t.dictionary.json", "P", "t", [
            Variable("y", "integer", "", "outcome", ("0", "1")),
            Variable("score", "decimal", "", "predicted probability", (), (0.0, 1.0)),
            *(Variable(name, "decimal", "", name, (), (-1.0, 1.0)) for name in frame.columns[2:])])
        spec[f"s{k + 1}"] = (folder.parent, SUITE_RULES)
    return provision(tmp / "run", spec, catalog={"engine": engine})


@pytest.mark.slow
@pytest.mark.timeout(900)  # 223-242 s alone on two idle cores, 384 s beside two busy loops and other tests
def test_a_table_beyond_the_memory_limit_completes_the_validation(tmp_path):
    # the limit: an idle site's address space on this machine and HEADROOM, less than the wide table
    limit = _idle_address_space(tmp_path / "idle") + HEADROOM
    assert (WIDE + 2) * N_BIG * 8 > HEADROOM
    # the control: under that limit, the in-memory engine cannot even start the site; it stops saying why
    in_memory = _wide_sites(tmp_path / "memory", "memory")
    with pytest.raises(RuntimeError, match="site s1 exited with code 2 while starting(.|\n)*the table does not fit "
                                           "in the memory this site may use"):
        with LocalSites(in_memory.values(), tmp_path / "memory" / "proc", start_timeout=60,
                        address_space={"s1": limit}):
            pass
    provisioned = _wide_sites(tmp_path / "duckdb", "duckdb")
    with LocalSites(provisioned.values(), tmp_path / "duckdb" / "proc", start_timeout=300,
                    address_space={"s1": limit}) as sites:
        # a million records a site: the client's default wait for an answer, not the tests' 60 s (a pooled
        # placement-sums call took longer than 60 s on two loaded cores)
        with http_builder(provisioned, sites.urls, read_timeout=300).login() as session:
            session.assign_table("D", "P.t", variables=["y", "score"])
            report = validate(session, "D$y", "D$score")
        big = sites.processes["s1"]
        limits = Path(f"/proc/{big.process.pid}/limits").read_text()
        assert re.search(rf"Max address space\s+{limit}\s+{limit}\s+bytes", limits), limits  # the limit held
    pooled = pd.concat([pd.read_parquet(tmp_path / "duckdb" / "data" / s / "P" / "t.parquet", columns=["y", "score"])
                        for s in ("s1", "s2", "s3")])
    reference = suite(pooled["y"].to_numpy(dtype=float), pooled["score"].to_numpy(dtype=float))
    # exact sums released pooled (Brier); the AUC from the sites' noisy histograms, within its noise
    assert report.brier is not None and report.discrimination is not None, report.failed
    assert report.brier.brier == pytest.approx(reference["brier"], rel=1e-9)
    assert report.discrimination.auc == pytest.approx(reference["auc"], abs=0.01)


def _open_files(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if fd.exists() and Path(fd.readlink()) == path)


def test_a_closed_site_releases_its_database_threads_and_files(gbsg2_frames, tmp_path):
    """SiteService.close() closes the DuckDB database (its threads end), drops the columns read and
    closes the access log's file and the privacy ledger's and release history's SQLite file (their connections kept
    open for the next operation); a read after it is refused, nothing read."""
    threads = Path("/proc/self/task")
    gc.collect()  # services earlier tests left unreferenced end their threads now, not while this test counts
    before = len(list(threads.iterdir()))
    provisioned, services = _sites(tmp_path, {"site1": gbsg2_frames["site1"]}, "csv", "duckdb")
    service = services["site1"]
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
    access_log = provisioned["site1"].audit_log.with_name("site1-access.log")
    # read as a noisy call's budget check and a cut's gate read them (this site's rules add no noise and keep no cuts)
    assert service.ledger.total("P.t").epsilon == 0 and service.history.cuts("P.t", "age") == []
    ledger = service.history.path  # the ledger's file too
    made = len(list(threads.iterdir()))
    assert made > before and _open_files(access_log) == 1 and _open_files(ledger) >= 1
    service.close()
    assert len(list(threads.iterdir())) < made and _open_files(access_log) == 0 and _open_files(ledger) == 0
    with pytest.raises(BackendUnavailable, match="cannot read .* nothing was read"):
        service.catalog.frame("P.t")
