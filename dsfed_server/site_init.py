"""``dsfed-server init DIR --csv FILE...``: a new site's files, for its administrator to review.

Writes under ``DIR``::

    site.toml                     the site config (an analyst and a governance user, fresh credentials)
    rules.toml                    a copy of the packaged disclosure_rules/default.toml
    site.secret                   32 random bytes, mode 600
    data/<project>/<table>.csv    each CSV, copied
    data/<project>/<table>.dictionary.json   inferred from the CSV (see :func:`infer_variables`)

The inference is a draft: a declared ``range`` is a statement about what values *can* be, so the
administrator replaces the observed bounds written here by the field's real limits, and checks
every type, unit, label and category before the site serves anyone. A column that looks like a
record identifier (:func:`identifier_reason`) is marked ``"identifier": true``, which no function
may read; the administrator unmarks it if it is not one.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dsfed_server.catalog import BOOLEAN_SPELLINGS, CatalogError, Variable, write_dictionary
from dsfed_server.provision import Credential, new_credentials, write_secret, write_site_config

MAX_CATEGORIES = 20
"""A text column with at most this many distinct values is inferred as categorical."""

_WORDS = {"True", "False", "TRUE", "FALSE", "true", "false", "yes", "no"}

DISTINCT_MIN_RECORDS = 20
"""A whole-number or text column whose values are all distinct, in at least this many records with
none missing, is taken for an identifier (fewer records are distinct by chance too often)."""

# id, ID, patient_id, id_number, record.id, uuid, mrn, ssn, ...; camelCase patientId / PatientID
_ID_WORD = re.compile(r"(?:^|[_.\s-])(?:id|ids|identifier|uuid|guid|mrn|ssn|nhs)(?:$|[_.\s-])", re.IGNORECASE)
_ID_CAMEL = re.compile(r"[a-z0-9](?:Id|ID)$")


def identifier_reason(name: str, col: pd.Series, variable: Variable) -> str | None:
    """Why the column ``name`` (as read from the CSV, text) looks like a record identifier, or None:
    its name (``id``, ``patient_id``, ``patientId``, ``mrn``, ...), or every value distinct (a whole
    number or text column of at least :data:`DISTINCT_MIN_RECORDS` records, none missing; decimal
    measurements are distinct without identifying anyone by themselves)."""
    if _ID_WORD.search(name) or _ID_CAMEL.search(name):
        return "named like an identifier"
    values = col.dropna()
    distinct_kind = variable.value_type == "integer" or (variable.value_type == "text" and not variable.categories)
    if distinct_kind and len(values) == len(col) >= DISTINCT_MIN_RECORDS and values.is_unique:
        return f"all {len(col)} values distinct"
    return None


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


def infer_variables(path: Path) -> tuple[list[Variable], dict[str, str]]:
    """A draft dictionary of a CSV: ``boolean`` for the documented spellings (not 0/1 alone: a 0/1
    column is an ``integer`` with categories 0 and 1), ``integer``/``decimal`` for numbers with the
    observed whole-number bounds as ``range``, ``text`` with categories up to
    :data:`MAX_CATEGORIES` distinct values, free text beyond; a likely identifier marked as one.
    Returns the variables and, for each column marked identifier, why."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    variables, flagged = [], {}
    for name in map(str, frame.columns):
        variable = _infer(name, frame[name])
        reason = identifier_reason(name, frame[name], variable)
        if reason is not None:
            variable = replace(variable, identifier=True)
            flagged[name] = reason
        variables.append(variable)
    return variables, flagged


@dataclass(frozen=True)
class InitializedSite:
    config: Path
    credentials: list[Credential]
    tables: dict[str, Path]  # project.table -> dictionary file
    identifiers: dict[str, dict[str, str]]  # project.table -> column marked identifier -> why


def _table_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._]", "_", path.stem)
    return name if name[:1].isalpha() else f"t_{name}"


def init_site(directory: Path, csvs: list[Path], *, name: str, project: str = "main", port: int = 8001
              ) -> InitializedSite:
    """Write a new site under ``directory`` (which must not exist or be empty)."""
    if directory.exists() and any(directory.iterdir()):
        raise CatalogError(f"{directory}: not empty; dsfed-server init writes a new site into an empty directory")
    tables, identifiers = {}, {}
    for csv in csvs:
        if not csv.is_file():
            raise CatalogError(f"{csv}: no such file")
        table = _table_name(csv)
        folder = directory / "data" / project
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(csv, folder / f"{table}.csv")
        dictionary = folder / f"{table}.dictionary.json"
        variables, identifiers[f"{project}.{table}"] = infer_variables(csv)
        write_dictionary(dictionary, project, table, variables)
        tables[f"{project}.{table}"] = dictionary
    shutil.copyfile(packaged_rules(), directory / "rules.toml")
    write_secret(directory / "site.secret")
    credentials = new_credentials((("analyst", "analyst"), ("governance", "governance")))
    config = directory / "site.toml"
    write_site_config(config, name=name, data_dir=Path("data"), rules=Path("rules.toml"),
                      audit_log=Path(f"{name}-audit.jsonl"), secret_file=Path("site.secret"),
                      ledger=Path(f"{name}-ledger.sqlite"), credentials=credentials, port=port)
    return InitializedSite(config, credentials, tables, identifiers)
