"""Loading a site's data fails loudly: booleans in every documented spelling round-trip, and a value
that fits no spelling, R's ``NA`` or a column-order difference stops ``dsfed-server check`` with
``file:column:row`` and what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dsfed_server.catalog import Catalog
from dsfed_server.dictionary import CatalogError, Variable, write_dictionary
from dsfed_server.provision import provision
from sitekit import ROOT

FLAGS = [True, False, True, True, None, False]


def _site(tmp_path: Path, csv_text: str, variables: list[Variable]) -> Path:
    folder = tmp_path / "data" / "P"
    folder.mkdir(parents=True)
    (folder / "t.csv").write_text(csv_text)
    write_dictionary(folder / "t.dictionary.json", "P", "t", variables)
    return tmp_path / "data"


def _check(tmp_path: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    site = provision(tmp_path / "run", {"s1": (data_dir, ROOT / "disclosure_rules" / "default.toml")})["s1"]
    return subprocess.run([sys.executable, "-m", "dsfed_server.cli", "check", str(site.config)],
                          capture_output=True, text=True, timeout=120)


FLAG = Variable("flag", "boolean", "", "flag", ())
AGE = Variable("age", "integer", "years", "age", (), (0.0, 120.0))


def test_pandas_booleans_round_trip(tmp_path: Path):
    frame = pd.DataFrame({"flag": pd.array(FLAGS, dtype="boolean"), "age": [50, 60, 70, 40, 30, 20]})
    folder = tmp_path / "P"
    folder.mkdir()
    frame.to_csv(folder / "t.csv", index=False)  # writes True/False
    write_dictionary(folder / "t.dictionary.json", "P", "t", [FLAG, AGE])
    loaded = Catalog(tmp_path).frame("P.t")
    assert "True" in (folder / "t.csv").read_text()
    assert loaded["flag"].tolist() == [True, False, True, True, pd.NA, False]


def test_r_booleans_round_trip(tmp_path: Path):
    folder = tmp_path / "P"
    folder.mkdir()
    r = ("write.csv(data.frame(flag = c(TRUE, FALSE, TRUE, TRUE, NA, FALSE), age = c(50L, 60L, 70L, 40L, 30L, 20L)),"
         f" '{folder / 't.csv'}', row.names = FALSE, na = '')")
    subprocess.run(["Rscript", "-e", r], check=True, capture_output=True, timeout=120)
    write_dictionary(folder / "t.dictionary.json", "P", "t", [FLAG, AGE])
    assert "TRUE" in (folder / "t.csv").read_text()
    assert Catalog(tmp_path).frame("P.t")["flag"].tolist() == [True, False, True, True, pd.NA, False]


@pytest.mark.parametrize("true, false", [("true", "false"), ("1", "0"), ("yes", "no")])
def test_other_boolean_spellings(tmp_path: Path, true: str, false: str):
    data = _site(tmp_path, f"flag,age\n{true},1\n{false},2\n,3\n{true},4\n", [FLAG, AGE])
    assert Catalog(data).frame("P.t")["flag"].tolist() == [True, False, pd.NA, True]


def test_unmapped_boolean_stops_check_with_file_column_row(tmp_path: Path):
    data = _site(tmp_path, "flag,age\nTrue,1\nFalse,2\nmaybe,3\nTrue,4\n", [FLAG, AGE])
    result = _check(tmp_path, data)
    assert result.returncode == 2
    message = result.stderr.strip()
    assert f"{data / 'P' / 't.csv'}:flag:3: value 'maybe' is not a boolean" in message
    assert "True/False/TRUE/FALSE" in message and "Traceback" not in message


def test_r_na_gets_the_hint(tmp_path: Path):
    data = _site(tmp_path, "flag,age\nTRUE,1\nFALSE,NA\nTRUE,NA\n", [FLAG, AGE])
    with pytest.raises(CatalogError) as caught:
        Catalog(data).validate_all()
    message = str(caught.value)
    assert ":age:2: value 'NA' is not a number (1 more row like it)" in message
    assert "write.csv(..., na = \"\")" in message


def test_column_order_is_named(tmp_path: Path):
    data = _site(tmp_path, "age,flag\n1,TRUE\n", [FLAG, AGE])
    with pytest.raises(CatalogError, match=r"in a different order \(file: \['age', 'flag'\]; "
                                           r"dictionary: \['flag', 'age'\]\); reorder"):
        Catalog(data).validate_all()


def test_check_prints_each_column(tmp_path: Path):
    rng = np.random.default_rng(3)
    flags = rng.choice(["True", "False", ""], size=40)
    ages = rng.integers(20, 90, size=40).astype(str)
    ages[:5] = ""
    csv = "flag,age\n" + "".join(f"{f},{a}\n" for f, a in zip(flags, ages))
    data = _site(tmp_path, csv, [FLAG, AGE])
    result = _check(tmp_path, data)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  ")}
    expected_flag = (f"n 40 missing {int((flags == '').sum())} True {int((flags == 'True').sum())}, "
                     f"False {int((flags == 'False').sum())}")
    assert " ".join(lines["flag"].split()) == f"flag boolean {expected_flag}"
    assert " ".join(lines["age"].split()) == "age integer n 40 missing 5"
