"""``dsfed-server init DIR --csv FILE...``: a new site's files, for its administrator to review.

Writes under ``DIR``::

    site.toml                     the site config (an analyst and a governance user, fresh credentials)
    rules.toml                    a copy of the packaged disclosure_rules/default.toml
    site.secret                   32 random bytes, mode 600
    data/<project>/<table>.csv    each CSV, copied
    data/<project>/<table>.dictionary.json   inferred from the CSV (see :func:`infer_variables`)

The inference is a draft: a declared ``range`` is a statement about what values *can* be, so the
administrator replaces the observed bounds written here by the field's real limits, and checks
every type, unit, label and category before the site serves anyone.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dsfed_server.catalog import BOOLEAN_SPELLINGS, CatalogError, Variable, write_dictionary
from dsfed_server.provision import Credential, new_credentials, write_secret, write_site_config

MAX_CATEGORIES = 20
"""A text column with at most this many distinct values is inferred as categorical."""

_WORDS = {"True", "False", "TRUE", "FALSE", "true", "false", "yes", "no"}


def packaged_rules() -> Path:
    """The packaged default rules file (``dsfed_server/disclosure_rules/default.toml``)."""
    return Path(str(resources.files("dsfed_server") / "disclosure_rules" / "default.toml"))


def _infer(name: str, col: pd.Series) -> Variable:
    values = col.dropna()
    distinct = set(values)
    if distinct and distinct <= set(BOOLEAN_SPELLINGS) and distinct & _WORDS:
        return Variable(name, "boolean", "", name, ())
    numbers = pd.to_numeric(values, errors="coerce")
    if len(values) and numbers.notna().all():
        whole = bool(np.all(np.floor(numbers) == numbers))
        kind = "integer" if whole else "decimal"
        if whole and distinct <= {"0", "1"}:
            return Variable(name, kind, "", name, ("0", "1"))
        low, high = float(np.floor(numbers.min())), float(np.ceil(numbers.max()))
        return Variable(name, kind, "", name, (), (low, high if high > low else low + 1))
    if 0 < len(distinct) <= MAX_CATEGORIES:
        return Variable(name, "text", "", name, tuple(sorted(distinct)))
    return Variable(name, "text", "", name, ())


def infer_variables(path: Path) -> list[Variable]:
    """A draft dictionary of a CSV: ``boolean`` for the documented spellings (not 0/1 alone: a 0/1
    column is an ``integer`` with categories 0 and 1), ``integer``/``decimal`` for numbers with the
    observed whole-number bounds as ``range``, ``text`` with categories up to
    :data:`MAX_CATEGORIES` distinct values, free text beyond."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    return [_infer(str(name), frame[name]) for name in frame.columns]


@dataclass(frozen=True)
class InitializedSite:
    config: Path
    credentials: list[Credential]
    tables: dict[str, Path]  # project.table -> dictionary file


def _table_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._]", "_", path.stem)
    return name if name[:1].isalpha() else f"t_{name}"


def init_site(directory: Path, csvs: list[Path], *, name: str, project: str = "main", port: int = 8001
              ) -> InitializedSite:
    """Write a new site under ``directory`` (which must not exist or be empty)."""
    if directory.exists() and any(directory.iterdir()):
        raise CatalogError(f"{directory}: not empty; dsfed-server init writes a new site into an empty directory")
    tables = {}
    for csv in csvs:
        if not csv.is_file():
            raise CatalogError(f"{csv}: no such file")
        table = _table_name(csv)
        folder = directory / "data" / project
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(csv, folder / f"{table}.csv")
        dictionary = folder / f"{table}.dictionary.json"
        write_dictionary(dictionary, project, table, infer_variables(csv))
        tables[f"{project}.{table}"] = dictionary
    shutil.copyfile(packaged_rules(), directory / "rules.toml")
    write_secret(directory / "site.secret")
    credentials = new_credentials((("analyst", "analyst"), ("governance", "governance")))
    config = directory / "site.toml"
    write_site_config(config, name=name, data_dir=Path("data"), rules=Path("rules.toml"),
                      audit_log=Path(f"{name}-audit.jsonl"), secret_file=Path("site.secret"),
                      ledger=Path(f"{name}-ledger.sqlite"), credentials=credentials, port=port)
    return InitializedSite(config, credentials, tables)
