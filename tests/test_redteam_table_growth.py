"""Red team: temporal differencing across a table that grows between two runs of its site.

The site's export gains records while it is down: the hospital appends this month's admissions to the
CSV file the catalog reads, and the administrator restarts the site (the engines count a table's records
once per run and refuse a read of another number, so a restart is how the site serves the grown table).
The release history keeps every row set over the table's record positions; the first 60 records are the
same records at the same positions after the growth.

60 records in four wards of 15; the BMI is missing at 5 of them (a pattern 5 share, so the site keeps
them, docs/governance.md): 1 each of wards a, b and c, 2 of ward d. Before the growth the analyst asks
the table of the ward and the mean age by ward (``meanSdGpDS(D$age, D$ward)``). Ten admissions are
appended, all to ward d, and the site restarts. Then the analyst asks the mean of ``D$age + 0*D$bmi`` by
ward (the age over the records with a BMI). Wards a, b and c hold no new record: each group is its ward
of before less the one record missing its BMI, and the earlier ward sums less these read that record's
age -- the very comparison the row-set audit withholds on a table that did not grow.

The attack knows the truth and counts the old records whose age it read exactly. With the earlier row sets
forgotten once the table grew (the control: the history looked up only at the table's current size, as
before the fix) it reads 3, one of each of wards a, b and c. Now the earlier row sets apply to the grown
table (its first 60 records are checked unchanged by their digest, and the earlier sets read with the new
records outside them): groups a, b and c each differ by one record from an earlier ward cell, the site
withholds them (and d, which would complete their sum), and the attack reads nothing.

A table whose earlier records changed (edited, deleted) cannot be matched with its history, and a whole-table mean
before and after a deletion or an edit reads the record (found by review: the site refused the audited releases
only, and the mean of 59 records against that of 60 gave the deleted record's age): the table is refused when
assigned, saying what the site administrator does. The same records in another order are matched with those of
before, and the earlier row sets read at their positions now.
"""

from __future__ import annotations

import json
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import inprocess_builder
from dsfed_client import FederatedCallError
from dsfed_core.errors import DisclosureRefusal
from dsfed_server.disclosure import history
from dsfed_server.catalog import Catalog
from dsfed_server.disclosure.checks import Guard
from dsfed_server.disclosure.differencing import PooledCell
from dsfed_server.disclosure.equations import Summed
from dsfed_server.disclosure.history import History
from dsfed_server.service import SiteService
from sitekit import make_sites, whole_table_sum, write_table
from test_derived_column_attacks import synthetic_frame

WARDS = ("a", "b", "c", "d")
LACKING = [0, 1, 2, 3, 7]  # positions missing their BMI (ward = position % 4): one of a, b, c; two of d
NEW = 10  # admissions appended to ward d


def frame() -> pd.DataFrame:
    data = synthetic_frame(11, 60)
    data["ward"] = np.array(WARDS)[np.arange(60) % 4]
    data["bmi"] = np.round(np.random.default_rng(2).normal(26, 4, 60), 1)
    data.loc[LACKING, "bmi"] = np.nan
    return data


def admissions(old: pd.DataFrame) -> pd.DataFrame:
    """Ten new records of ward d, each value one an old record holds (within the dictionary's ranges)."""
    rng = np.random.default_rng(3)
    new = old.iloc[rng.choice(np.flatnonzero(old.bmi.notna()), NEW, replace=False)].reset_index(drop=True)
    new["ward"] = "d"
    new["score"] = np.round(rng.uniform(0.01, 0.99, NEW), 6)
    return new


def with_stay(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` with a length of stay (days) added after its columns, one for each of its first 60 records."""
    return data.assign(stay=np.random.default_rng(4).integers(1, 30, 60)[data.index % 60])


def restart_with(provisioned: dict, services: dict, change) -> dict[str, SiteService]:
    """The site stopped, its data file changed by ``change(path)`` as an administrator would, and started
    again on the same configuration (the same ledger)."""
    services["s1"].catalog.close()
    change(provisioned["s1"].config.parent.parent / "data" / "s1" / "P" / "t.csv")
    return {"s1": SiteService.from_config_file(provisioned["s1"].config)}


def by_ward(session, expression: str) -> dict:
    return next(iter(session.aggregate_expr(f"meanSdGpDS({expression}, D$ward)").values()))


def unserved(csv: Path, data: pd.DataFrame, column: str, how: str) -> None:
    """The site's table written as ``data`` with ``column`` no longer served: ``removed`` from the data file and
    its dictionary, or declared an ``identifier`` in the dictionary."""
    write_table(csv.parent.parent, data.drop(columns=column) if how == "removed" else data)
    if how == "identifier":
        dictionary = csv.with_name("t.dictionary.json")
        spec = json.loads(dictionary.read_text())
        next(v for v in spec["variables"] if v["name"] == column)["identifier"] = True
        dictionary.write_text(json.dumps(spec))


def attack(tmp_path: Path, withheld: list[str], unserve: str | None = None, reordered: bool = False,
           grown: bool = True, added: bool = False) -> tuple[dict[str, float], str | None]:
    """The ages read of old records missing their BMI, per ward (where read), and the refusal's rule if the
    last release was refused; the groups the last release withheld are added to ``withheld``. ``unserve``:
    the income no longer served after the growth (:func:`unserved`); ``reordered``: the old records written
    in a random order; ``grown``: the admissions appended; ``added``: a length of stay added to the same records
    in a run between (:func:`with_stay`), the table assigned in it."""
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        before_n = session.table1d("D$ward").as_dict()
        before = by_ward(session, "D$age")
    base = with_stay(truth) if added else truth
    if added:
        services = restart_with(provisioned, services, lambda csv: write_table(csv.parent.parent, base))
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
    new = admissions(base)
    old = base.sample(frac=1, random_state=5) if reordered else base
    data = pd.concat([old, new[base.columns]], ignore_index=True) if grown else old
    services = restart_with(provisioned, services, lambda csv: data.to_csv(csv, index=False) if unserve is None
                            else unserved(csv, data, "income", unserve))
    read: dict[str, float] = {}
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.derive("V", "D$age + 0*D$bmi")
        try:
            after = by_ward(session, "V")
        except FederatedCallError as exc:
            return read, next(iter(exc.failures.values())).rule
    withheld.extend(after.get("withheld", []))
    for at, ward in enumerate(WARDS[:3]):
        if after["N_gp"][at] is None:
            continue
        lacking = before_n[ward] - after["N_gp"][at]
        ages = before["Mean_gp"][at] * before["N_gp"][at] - after["Mean_gp"][at] * after["N_gp"][at]
        if lacking == 1:
            read[ward] = ages
    return read, None


@pytest.mark.parametrize("mapped", [True, False], ids=["shipped", "history-at-current-size-only"])
def test_releases_after_the_table_grew_read_no_old_record(tmp_path: Path, monkeypatch, mapped: bool):
    if not mapped:  # the control: the history as it was looked up before the fix
        monkeypatch.setattr(history.History, "_decided", lambda self, table, n, min_growth=0: history._Decided((n,)))
    truth = frame()
    withheld: list[str] = []
    read, refused = attack(tmp_path, withheld)
    want = {WARDS[p % 4]: float(truth.age[p]) for p in LACKING if p % 4 < 3}
    recovered = sorted(w for w, age in read.items() if abs(age - want[w]) < 1e-6)
    print(f"ATTACK temporal differencing across a grown table (default.toml, {NEW} records appended, site "
          f"restarted; earlier row sets {'applied' if mapped else 'forgotten'}): read the age of "
          f"{len(recovered)} old records {recovered} (truth {want}, read {read}, refused {refused})")
    assert recovered == ([] if mapped else ["a", "b", "c"])
    assert refused is None and withheld == (["1", "2", "3", "4"] if mapped else [])


def test_an_honest_table_after_the_growth_is_released(tmp_path: Path):
    """The table of the ward and the mean age on the grown table, after the same releases on the table before:
    wards a, b and c hold the same records as before, ward d ten more, so every cell is released, equal to
    the counts and the mean of the 70 records."""
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.table1d("D$ward")
        by_ward(session, "D$age")
    new = admissions(truth)
    services = restart_with(provisioned, services,
                            lambda csv: new[truth.columns].to_csv(csv, mode="a", header=False, index=False))
    grown = pd.concat([truth, new], ignore_index=True)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        counts = session.table1d("D$ward").as_dict()
        means = by_ward(session, "D$age")
    assert counts == {w: int(n) for w, n in grown.ward.value_counts().items()}
    np.testing.assert_allclose(means["Mean_gp"], grown.groupby("ward").age.mean().to_numpy(), rtol=1e-12)


def changed_table(truth: pd.DataFrame, change: str) -> pd.DataFrame:
    """The data file as an administrator changed it otherwise than by records added at its end."""
    edited = truth.assign(age=truth.age.where(truth.index != 5, truth.age[5] + 7))
    return {"edited": edited, "deleted": truth.drop(index=5), "reordered-edited": edited.iloc[np.r_[1, 0, 2:60]],
            "added-before": pd.concat([admissions(truth)[truth.columns], truth])}[change]


@pytest.mark.parametrize("change", ["edited", "deleted", "reordered-edited", "added-before"])
def test_a_table_whose_earlier_records_changed_is_refused(tmp_path: Path, change: str):
    """Where the site's data file changed otherwise than by records added at its end (or reordered alone), the
    positions the release history keeps name other records than its releases were over, and a release now beside
    one then would single out the records changed: the table is refused when assigned, saying what the site
    administrator does; the history is not rewritten (the same refusal after a second restart, shown once). Records
    added before the earlier ones are refused too: which of them are the earlier ones the site cannot tell."""
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.table1d("D$ward")
    changed = changed_table(truth, change)
    for _ in range(2 if change == "edited" else 1):
        services = restart_with(provisioned, services, lambda csv: changed.to_csv(csv, index=False))
        with inprocess_builder(provisioned, services).login() as session:
            with pytest.raises(FederatedCallError) as refused:
                session.assign_table("D", "P.t")
        failure = next(iter(refused.value.failures.values()))
        assert failure.rule == "disclosure.subset_min_difference"
        assert "table P.t changed since it was read for releases" in failure.message
        assert "restores the table's earlier records, in their order" in failure.hint
        assert "exported again sorted as the earlier export was" in failure.hint and "ORDER BY ctid" in failure.hint


def age_sums_across(tmp_path: Path, truth: pd.DataFrame, change) -> tuple[dict, dict[str, SiteService], float,
                                                                          float | None, object]:
    """The sum of ages over the whole table (``meanDS``'s mean times its count) before the site's data file is
    changed by ``change(path)`` and the site restarted, and after (None, with the failure, where refused)."""
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        before = next(iter(session.aggregate_expr("meanDS(D$age)").values()))
    services = restart_with(provisioned, services, change)
    with inprocess_builder(provisioned, services).login() as session:
        try:
            session.assign_table("D", "P.t")
            after = next(iter(session.aggregate_expr("meanDS(D$age)").values()))
        except FederatedCallError as exc:
            return provisioned, services, before["EstimatedMean"] * before["Nvalid"], None, \
                next(iter(exc.failures.values()))
    return (provisioned, services, before["EstimatedMean"] * before["Nvalid"],
            after["EstimatedMean"] * after["Nvalid"], None)


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "no-check-when-assigned"])
@pytest.mark.parametrize("change", ["edited", "deleted"])
def test_a_whole_table_mean_before_and_after_a_change_reads_no_record(tmp_path: Path, monkeypatch, change: str,
                                                                     checked: bool):
    """A withdrawn consent (record 5 deleted) or a corrected age (record 5's age + 7), the site restarted: the
    mean age of the whole table before and after gives the record's age, or the correction, exactly -- no row
    set is audited for a whole table, so only the check when the table is assigned stands in the way (the
    control, without it, reads them)."""
    if not checked:
        monkeypatch.setattr(Guard, "table_unchanged", lambda self, table, n_root: None)
    truth = frame()
    changed = changed_table(truth, change)
    _, _, before, after, failure = age_sums_across(tmp_path, truth, lambda csv: changed.to_csv(csv, index=False))
    read, refused = (None if after is None else before - after), failure and failure.rule
    want = float(truth.age[5]) if change == "deleted" else -7.0
    print(f"ATTACK whole-table mean before and after record 5 {change} (default.toml, site restarted; "
          f"{'checked' if checked else 'not checked'} when assigned): read {read} (truth {want}), refused {refused}")
    if checked:
        assert read is None and refused == "disclosure.subset_min_difference"
    else:
        assert read == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "few-records-not-checked"])
def test_a_whole_table_mean_before_and_after_one_admission_reads_no_record(tmp_path: Path, monkeypatch,
                                                                            checked: bool):
    """One admission appended, the site restarted: the mean age of the whole table before and after gives the
    new record's age. A table grown by fewer than ``subset_min_difference`` (5) records since it was read is
    refused when assigned, and served again once it holds at least 5 more (six admissions: the means are then
    of six records' ages). The control, with the minimum left out of the check, reads the record."""
    if not checked:
        monkeypatch.setattr(Guard, "table_unchanged",
                            lambda self, table, n_root: self.history.table_records(table, n_root, 0))
    truth = frame()
    new = admissions(truth)
    provisioned, services, before, after, refused = age_sums_across(
        tmp_path, truth, lambda csv: new[truth.columns].iloc[:1].to_csv(csv, mode="a", header=False, index=False))
    read = None if after is None else after - before
    print(f"ATTACK whole-table mean before and after one admission (default.toml, site restarted; "
          f"{'checked' if checked else 'not checked'}): read {read} (truth {float(new.age[0])}), "
          f"refused {refused and refused.rule}")
    if not checked:
        assert read == pytest.approx(float(new.age[0]), abs=1e-6)
        return
    assert read is None and refused.rule == "disclosure.subset_min_difference"
    assert "1 record(s) more than when it was read" in refused.message and "batches of at least 5" in refused.hint
    services = restart_with(provisioned, services,  # five more: six since the table was read
                            lambda csv: new[truth.columns].iloc[1:6].to_csv(csv, mode="a", header=False, index=False))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        after = next(iter(session.aggregate_expr("meanDS(D$age)").values()))
    assert after["Nvalid"] == 66
    assert after["EstimatedMean"] == pytest.approx(pd.concat([truth.age, new.age[:6]]).mean(), rel=1e-12)


def data_file(provisioned: dict) -> Path:
    return provisioned["s1"].config.parent.parent / "data" / "s1" / "P" / "t.csv"


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "columns-read-later-not-checked"])
def test_a_whole_table_mean_across_an_edit_while_the_site_runs_reads_no_record(tmp_path: Path, monkeypatch,
                                                                               checked: bool):
    """The DuckDB engine reads a CSV file in place at every read of a column, and the catalog reads a column the
    first time a call names it: the site restarted, the ward read and the table checked unchanged (the age digested
    as the file held it then), record 5's age corrected in the file while the site runs, then the age read. The
    whole-table mean age of the earlier run against this one gives the correction, 7, within the run (found by
    review: the table's records were decided once a run). The age is checked as the catalog reads it, and the
    table refused for the run; the control, without that check, reads the 7."""
    if not checked:
        monkeypatch.setattr(history.History, "columns_read", lambda self, table, columns: None)
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        before = next(iter(session.aggregate_expr("meanDS(D$age)").values()))
    services = restart_with(provisioned, services, lambda csv: None)
    after, failure = None, None
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("W", "P.t", variables=["ward"])
        changed_table(truth, "edited").to_csv(data_file(provisioned), index=False)  # in place, the site running
        after, failure = whole_table_sum(session, "age")
    read = None if after is None else after - before["EstimatedMean"] * 60
    print(f"ATTACK whole-table mean before and after record 5's age edited while the site runs (default.toml, "
          f"DuckDB on the CSV file; {'checked' if checked else 'not checked'} as read): read {read} (truth 7.0), "
          f"refused {failure and failure.rule}")
    if not checked:
        assert read == pytest.approx(7.0, abs=1e-6)
        return
    assert read is None and failure.rule == "disclosure.subset_min_difference"
    assert "table P.t changed while the site served it (age:" in failure.message
    assert "stops the site before changing its data" in failure.hint
    with pytest.raises(DisclosureRefusal, match="changed while the site served it"):  # no copy of it kept
        services["s1"].catalog.column("P.t", "age")


def _served_once_kept(catalog: Catalog, ref: str, names: list[str]):
    """A column served as soon as it is kept, its check not done (the control)."""
    if all((ref, n) in catalog._columns for n in names):
        return [catalog._columns[(ref, n)] for n in names]
    return None


@pytest.mark.parametrize("waits", [True, False], ids=["shipped", "served-before-checked"])
def test_a_column_asked_for_while_its_check_runs_is_not_served_unchecked(tmp_path: Path, monkeypatch, waits: bool):
    """Record 5's age corrected in the file while the site runs, as in the test above; then two calls name the age
    at once: the first reads it from the file and keeps it while the history checks it (slowed down here, 0.3 s,
    so that the second call comes in meanwhile), the second finds it kept (found by review: a column was kept
    before its check, which ran outside the catalog's lock, and served so to a call meanwhile). The second call
    waits for the check, reads the age again and is refused; the control, a column served as soon as it is kept,
    serves it the corrected age unchecked."""
    if not waits:
        monkeypatch.setattr(Catalog, "_ready", _served_once_kept)
    checking = threading.Event()
    check = History.columns_read

    def slow_check(self: History, table: str, columns: list[str]) -> None:
        if "age" in columns:
            checking.set()
            time.sleep(0.3)
        check(self, table, columns)

    monkeypatch.setattr(History, "columns_read", slow_check)  # before the site starts: its catalog's on_read
    truth = frame()
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
    services = restart_with(provisioned, services, lambda csv: None)
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("W", "P.t", variables=["ward"])  # the table checked, the age digested as the file holds it
    changed_table(truth, "edited").to_csv(data_file(provisioned), index=False)  # in place, the site running
    catalog, outcomes = services["s1"].catalog, {}

    def ask(call: str) -> None:
        try:
            outcomes[call] = catalog.column("P.t", "age")
        except DisclosureRefusal as exc:
            outcomes[call] = exc

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert checking.wait(10)
    ask("second")
    first.join()
    second = outcomes["second"]
    read = None if isinstance(second, DisclosureRefusal) else float(second[5] - truth.age[5])
    print(f"ATTACK a column asked for while its first read is checked (default.toml, record 5's age edited while "
          f"the site runs; {'served once checked' if waits else 'served once kept'}): the second call read {read} "
          f"(truth 7.0), the first refused: {isinstance(outcomes['first'], DisclosureRefusal)}")
    assert isinstance(outcomes["first"], DisclosureRefusal)
    if not waits:
        assert read == pytest.approx(7.0, abs=1e-6)
        return
    assert read is None and "changed while the site served it (age:" in str(second)


@pytest.mark.parametrize("how", ["removed", "identifier"])
def test_a_column_no_longer_served_keeps_the_history_applied(tmp_path: Path, how: str):
    """The income removed from the dictionary and the file, or declared an identifier, as the ten admissions are
    appended: a column no longer served releases nothing, so the table is served and its earlier row sets
    apply over the columns served then and now (found by review: the income's digest, kept then, never matched
    again, and the table was refused for good). The attack through the earlier ward cells reads nothing: the
    groups are withheld as with every column served."""
    truth = frame()
    withheld: list[str] = []
    read, refused = attack(tmp_path, withheld, unserve=how)
    want = {WARDS[p % 4]: float(truth.age[p]) for p in LACKING if p % 4 < 3}
    recovered = sorted(w for w, age in read.items() if abs(age - want[w]) < 1e-6)
    print(f"ATTACK temporal differencing across a grown table whose income is no longer served ({how}; "
          f"default.toml): read the age of {len(recovered)} old records (read {read}, refused {refused})")
    assert recovered == [] and refused is None and withheld == ["1", "2", "3", "4"]


@pytest.mark.parametrize("how", ["removed", "identifier"])
def test_an_edit_beside_a_column_no_longer_served_is_refused(tmp_path: Path, how: str):
    """Record 5's age corrected as the income stops being served: the age is served then and now, so the table is
    refused when assigned, and the whole-table mean age before and after reads nothing."""
    truth = frame()
    changed = changed_table(truth, "edited")
    _, _, before, after, failure = age_sums_across(tmp_path, truth,
                                                   lambda csv: unserved(csv, changed, "income", how))
    assert after is None and failure.rule == "disclosure.subset_min_difference"
    assert "table P.t changed since it was read for releases (other values in its first 60" in failure.message


def _shared_only(table: str, size: int, n: int, then: dict[str, str], now: dict[str, str]):
    """The comparison without the check of a column served in place of another (the control)."""
    changed = any(now[column] != digest for column, digest in then.items() if column in now)
    return partial(history.table_changed, table, size, n) if changed else None


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "shared-columns-only"])
def test_a_column_renamed_and_edited_reads_no_record(tmp_path: Path, monkeypatch, checked: bool):
    """The income renamed ``earnings`` in the dictionary and the file, record 5's corrected by +700: compared over
    the columns served then and now only, the table is served, and the whole-table mean income before against
    the mean earnings after gives the correction (the control reads 700). A column served in place of one
    served then may be that one renamed: the table is refused, saying what the administrator does."""
    if not checked:
        monkeypatch.setattr(history, "_compared", _shared_only)
    truth = frame()
    renamed = truth.rename(columns={"income": "earnings"})
    renamed.loc[5, "earnings"] += 700
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        before = next(iter(session.aggregate_expr("meanDS(D$income)").values()))
    services = restart_with(provisioned, services, lambda csv: write_table(csv.parent.parent, renamed))
    read, failure = None, None
    with inprocess_builder(provisioned, services).login() as session:
        after, failure = whole_table_sum(session, "earnings")
        read = None if after is None else after - before["EstimatedMean"] * before["Nvalid"]
    print(f"ATTACK whole-table mean of a column renamed and edited (default.toml, site restarted; "
          f"{'checked' if checked else 'shared columns only'}): read {read} (truth 700), "
          f"refused {failure and failure.rule}")
    if not checked:
        assert read == pytest.approx(700, abs=1e-6)
        return
    assert read is None and failure.rule == "disclosure.subset_min_difference"
    assert "serves earnings, which it did not when it was read for releases, and no longer income" in failure.message
    assert "serves income again under the earlier name" in failure.hint


@pytest.mark.parametrize("checked", [True, False], ids=["shipped", "added-columns-not-recorded"])
def test_a_column_added_and_then_edited_reads_no_record(tmp_path: Path, monkeypatch, checked: bool):
    """A length of stay added to the dictionary and the file (the same 60 records) and its whole-table mean
    released; then record 5's corrected by +3 and the site restarted. The digests kept at 60 records were of the
    columns served then: without the added column's kept from the run that first served it (the control), its
    mean before and after the correction gives the 3. It is kept, and the table refused."""
    if not checked:
        monkeypatch.setattr(history.History, "_record_columns", lambda self, table, recorded, now: None)
    truth = frame()
    stays = truth.assign(stay=np.random.default_rng(4).integers(1, 30, 60))
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")  # its digests kept at 60 records, before the stay was served
    means, failure = [], None
    for data in (stays, stays.assign(stay=stays.stay.where(stays.index != 5, stays.stay[5] + 3))):
        services = restart_with(provisioned, services, lambda csv: write_table(csv.parent.parent, data))
        with inprocess_builder(provisioned, services).login() as session:
            total, refused = whole_table_sum(session, "stay")
            if total is None:
                failure = refused
            else:
                means.append(total)
    read = means[1] - means[0] if len(means) == 2 else None
    print(f"ATTACK whole-table mean of a column added, before and after an edit (default.toml; "
          f"{'checked' if checked else 'added columns not recorded'}): read {read} (truth 3), "
          f"refused {failure and failure.rule}")
    if not checked:
        assert read == pytest.approx(3, abs=1e-6)
        return
    assert read is None and failure.rule == "disclosure.subset_min_difference"
    assert "table P.t changed since it was read for releases (other values in its first 60" in failure.message


@pytest.mark.parametrize("column", ["age", "stay"])
def test_a_reorder_and_an_edit_after_a_column_added_is_refused(tmp_path: Path, column: str):
    """A length of stay added to the same 60 records in a run between, then the file written again shuffled with
    record 5's age, or its stay, corrected (to another record's value): the records' places are matched over the
    columns keyed then, and the records so taken checked against every digest kept, the stay's too: the table is
    refused when assigned."""
    truth = frame()
    stays = with_stay(truth)
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
    services = restart_with(provisioned, services, lambda csv: write_table(csv.parent.parent, stays))
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
    other = stays[column][stays[column] != stays[column][5]].iloc[0]  # a value another record holds: in range
    edited = stays.assign(**{column: stays[column].where(stays.index != 5, other)})
    services = restart_with(provisioned, services,
                            lambda csv: edited.sample(frac=1, random_state=5).to_csv(csv, index=False))
    with inprocess_builder(provisioned, services).login() as session:
        with pytest.raises(FederatedCallError) as refused:
            session.assign_table("D", "P.t")
    failure = next(iter(refused.value.failures.values()))
    assert failure.rule == "disclosure.subset_min_difference"
    assert "table P.t changed since it was read for releases (other values in its first 60" in failure.message


@pytest.mark.parametrize("grown,added", [(False, False), (True, False), (True, True)],
                         ids=["reordered", "reordered-grown", "column-added-then-reordered-grown"])
@pytest.mark.parametrize("moved", [True, False], ids=["shipped", "row-sets-not-moved"])
def test_releases_after_a_reorder_read_no_record(tmp_path: Path, monkeypatch, moved: bool, grown: bool,
                                                 added: bool):
    """The file written again with the 60 records in a random order (an export sorted otherwise, a PostgreSQL
    VACUUM FULL), and the ten admissions after them or not: records equal in every served column are
    interchangeable for every release, so the site sorts the first 60 records now and then by their values,
    maps each earlier position to the record now at its place, and checks the records so mapped against every
    digest it kept. The attack of the grown table, across the reorder: every group differs by one or two records
    from an earlier ward cell, and is withheld. The control, the reorder accepted but the earlier row sets read at
    their old positions, reads the age of 3 records. Where a length of stay was added in a run between (the
    records' places kept keyed on the columns served before it), the keys are built over those columns again
    (found by review: keyed over every column served now, the reorder was refused for good)."""
    if not moved:
        monkeypatch.setattr(history, "_now", lambda packed, n, order: bytes(packed))
    truth = frame()
    withheld: list[str] = []
    read, refused = attack(tmp_path, withheld, reordered=True, grown=grown, added=added)
    want = {WARDS[p % 4]: float(truth.age[p]) for p in LACKING if p % 4 < 3}
    recovered = sorted(w for w, age in read.items() if abs(age - want[w]) < 1e-6)
    print(f"ATTACK temporal differencing across a reordered table (default.toml, the file shuffled"
          f"{' and grown' if grown else ''}{', a column added in a run before' if added else ''}, site "
          f"restarted; earlier row sets {'moved' if moved else 'at their old positions'}): read the age of "
          f"{len(recovered)} old records {recovered} (truth {want}, read {read}, refused {refused})")
    assert refused is None
    assert (recovered, withheld) == (([], ["1", "2", "3", "4"]) if moved else (["a", "b", "c"], []))


@pytest.mark.parametrize("added", [False, True], ids=["reordered", "column-added-then-reordered"])
def test_an_honest_analysis_after_a_reorder_is_released(tmp_path: Path, added: bool):
    """The table of the ward and the mean age by ward before a reorder, again after it (the same releases over
    the same records) with a new mean, and again once ten admissions are appended to the reordered file in a
    later run: each released, equal to pandas over the records. Where a length of stay was added to the same
    records in a run between (its mean released), the same, and its mean after the reorder too."""
    truth = frame()
    base = with_stay(truth) if added else truth
    shuffled = base.sample(frac=1, random_state=5)
    grown = pd.concat([shuffled, admissions(base)[base.columns]], ignore_index=True)
    provisioned, services = make_sites(tmp_path, {"s1": truth})
    with inprocess_builder(provisioned, services).login() as session:
        session.assign_table("D", "P.t")
        session.table1d("D$ward")
        by_ward(session, "D$age")
    if added:
        services = restart_with(provisioned, services, lambda csv: write_table(csv.parent.parent, base))
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            session.aggregate_expr("meanDS(D$stay)")
    for data in (shuffled, grown):
        services = restart_with(provisioned, services, lambda csv: data.to_csv(csv, index=False))
        with inprocess_builder(provisioned, services).login() as session:
            session.assign_table("D", "P.t")
            counts = session.table1d("D$ward").as_dict()
            means = by_ward(session, "D$age")
            weight = next(iter(session.aggregate_expr("meanDS(D$weight)").values()))
            stay = next(iter(session.aggregate_expr("meanDS(D$stay)").values())) if added else None
        assert counts == {w: int(n) for w, n in data.ward.value_counts().items()}
        np.testing.assert_allclose(means["Mean_gp"], data.groupby("ward").age.mean().to_numpy(), rtol=1e-12)
        assert weight["EstimatedMean"] == pytest.approx(data.weight.mean(), rel=1e-12)
        assert stay is None or stay["EstimatedMean"] == pytest.approx(data.stay.mean(), rel=1e-12)


def test_every_kind_of_row_set_kept_is_read_at_its_records_positions_after_a_reorder(tmp_path: Path):
    """The four kinds of row set the history keeps over a table -- a subset's records, those of a function summed
    exactly, a pooled cell without an identity and one with -- kept over the 60 records, then read by the next
    run of the site over the records shuffled with ten admissions after them (a real catalog over the file): each
    holds the same records at their positions now (the shuffle known to the test; no two records are equal in
    every served column, so each record's position now is one). A row set kept in that run is kept at the
    positions of then, and read so again."""
    truth = frame()
    write_table(tmp_path / "data", truth)
    rng = np.random.default_rng(6)
    sets = rng.random((5, 60)) < 0.5
    catalog = Catalog(tmp_path / "data")
    kept = History(tmp_path / "ledger.sqlite", catalog.prefix_digests)
    kept.table_records("P.t", 60, 5)
    kept.record_row_set("P.t", sets[0], analyst="a")
    kept.record_sums("P.t", 60, [Summed("x", ("age",), np.packbits(sets[1]).tobytes())], analyst="a")
    kept.record_pooled_row_sets("P.t", 60, [PooledCell(sets[2], 40, "age"), PooledCell(sets[3], 41, "age", "c1")],
                                analyst="a")
    catalog.close()
    shuffle = rng.permutation(60)  # position now -> record then
    write_table(tmp_path / "data", pd.concat([truth.iloc[shuffle], admissions(truth)[truth.columns]]))
    catalog = Catalog(tmp_path / "data")
    later = History(tmp_path / "ledger.sqlite", catalog.prefix_digests)
    later.table_records("P.t", 70, 5)
    later.record_row_set("P.t", np.r_[sets[4][shuffle], np.zeros(10, dtype=bool)], analyst="a")
    catalog.close()

    def now(rows: np.ndarray) -> list[int]:
        return sorted(np.flatnonzero(np.isin(shuffle, np.flatnonzero(rows))).tolist())

    def read(packed) -> list[int]:
        return np.flatnonzero(np.unpackbits(np.frombuffer(bytes(packed), dtype=np.uint8), count=70)).tolist()

    for history_now in (later, History(tmp_path / "ledger.sqlite", Catalog(tmp_path / "data").prefix_digests)):
        assert sorted(map(read, history_now.row_sets("P.t", 70))) == sorted([now(sets[0]), now(sets[4])])
        assert [read(s.rows) for s in history_now.sums("P.t", 70)] == [now(sets[1])]
        assert sorted((read(c.rows), c.count, c.cell_id) for c in history_now.pooled_row_sets("P.t", 70)) == \
            sorted([(now(sets[2]), 40, ""), (now(sets[3]), 41, "c1")])
