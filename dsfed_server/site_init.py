"""``dsfed-server init DIR --csv FILE...``: a new site's files, for its administrator to review.

Writes under ``DIR``::

    site.toml                     the site config (an analyst and a governance user, fresh credentials)
    rules.toml                    a copy of the packaged disclosure_rules/default.toml
    site.secret                   32 random bytes, mode 600
    data/<project>/<table>.csv    each CSV, read as exports write it (:func:`read_export`) and written
                                  back plainly: missing values as empty fields, text trimmed
    data/<project>/<table>.dictionary.json   inferred from the CSV (see :func:`infer_variables`)

Everything ``init`` changed or guessed is listed for review (:attr:`InitializedSite.review`): the
missing-value spellings it read as missing, the values it trimmed, categories that differ only in
case, every range it derived from the data (and values far from the rest, such as a ``999`` code),
and the ``score_columns`` of the rules file, which ``init`` sets to the columns that look like
prediction scores. The inference is a draft: a declared ``range`` is a statement about what values *can* be, so the
administrator replaces the observed bounds written here by the field's real limits, and checks
every type, unit, label and category before the site serves anyone. A column that looks like a
record identifier (:func:`identifier_reason`) is marked ``"identifier": true``, which no function
may read; the administrator unmarks it if it is not one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from dsfed_server.dictionary import BOOLEAN_SPELLINGS, CatalogError, Variable, write_dictionary
from dsfed_server.provision import Credential, new_credentials, write_secret, write_site_config

NA_SPELLINGS = ("", "NA", "NaN", "nan", "N/A", "NULL", ".")
"""Fields read as a missing value: empty, R's ``NA``, pandas' and spreadsheets' ``NaN``, SAS's and
Stata's ``.``; the review counts each spelling per column."""

FAR_IQR = 5.0
"""A number more than this many interquartile ranges beyond the quartiles is named in the review
(a missing-value code such as 999, a unit slip): the derived range includes it."""

_SCORE_NAME = re.compile(r"score|prob|risk|pred", re.IGNORECASE)

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


def read_export(path: Path) -> tuple[pd.DataFrame, list[str]]:
    """A CSV as spreadsheet and statistics exports write it: every field text, any line ending;
    each of :data:`NA_SPELLINGS` missing, text trimmed of surrounding whitespace. Returns the frame
    (text, missing as None) and one review line per column changed."""
    raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    frame, notes = pd.DataFrame(index=raw.index), []
    for name in map(str, raw.columns):
        col = raw[name]
        trimmed = col.str.strip()
        spelled = {s: int((trimmed == s).sum()) for s in NA_SPELLINGS if s and (trimmed == s).any()}
        if spelled:
            shown = ", ".join(f"{s!r} {k}" for s, k in spelled.items())
            notes.append(f"{name}: read as missing: {shown} (written back as empty fields)")
        changed = int(((trimmed != col) & ~trimmed.isin(NA_SPELLINGS)).sum())
        if changed:
            notes.append(f"{name}: {changed} value{'s' if changed != 1 else ''} trimmed of surrounding whitespace "
                         f"(such as {col[trimmed != col].iloc[0]!r})")
        frame[name] = trimmed.where(~trimmed.isin(NA_SPELLINGS), None)
    return frame, notes


def _far_values(numbers: pd.Series) -> pd.Series:
    """Values beyond :data:`FAR_IQR` interquartile ranges from the quartiles, with their counts."""
    q1, q3 = numbers.quantile([0.25, 0.75])
    spread = max(q3 - q1, 1e-12)
    far = numbers[(numbers < q1 - FAR_IQR * spread) | (numbers > q3 + FAR_IQR * spread)]
    return far.value_counts().sort_index()


def review_variable(variable: Variable, col: pd.Series) -> list[str]:
    """What the administrator checks in an inferred variable: a range derived from the data (and
    the values far from the rest in it), categories that differ only in case."""
    notes = []
    if variable.range is not None:
        numbers = pd.to_numeric(col.dropna())
        far = _far_values(numbers)
        low, high = variable.range
        line = (f"{variable.name}: range [{low:g}, {high:g}] derived from the data: replace it by what the field "
                "can hold")
        if len(far):
            shown = ", ".join(f"{v:g} ({k} record{'s' if k != 1 else ''})" for v, k in far.items())
            line += (f"; values far from the rest: {shown}: a missing-value code or an error? Write such records' "
                     "value as an empty field, then narrow the range")
        notes.append(line)
    folded: dict[str, list[str]] = {}
    for category in variable.categories:
        folded.setdefault(category.casefold(), []).append(category)
    for spellings in folded.values():
        if len(spellings) > 1:
            counts = ", ".join(f"{c!r} {int((col == c).sum())}" for c in spellings)
            notes.append(f"{variable.name}: categories differing only in case: {counts}; if they are one category, "
                         "write it one way in the CSV")
    return notes


def score_candidates(variables: list[Variable], frame: pd.DataFrame) -> list[str]:
    """Columns that look like prediction scores: decimals within [0, 1] named like a score (score,
    prob, risk, pred)."""
    found = []
    for v in variables:
        if v.value_type != "decimal" or v.identifier or not _SCORE_NAME.search(v.name):
            continue
        numbers = pd.to_numeric(frame[v.name].dropna())
        if len(numbers) and numbers.min() >= 0.0 and numbers.max() <= 1.0:
            found.append(v.name)
    return found


def infer_variables(frame: pd.DataFrame) -> tuple[list[Variable], dict[str, str]]:
    """A draft dictionary of a table read by :func:`read_export`: ``boolean`` for the documented
    spellings (not 0/1 alone: a 0/1 column is an ``integer`` with categories 0 and 1),
    ``integer``/``decimal`` for numbers with the observed whole-number bounds as ``range``, ``text``
    with categories up to :data:`MAX_CATEGORIES` distinct values, free text beyond; a likely
    identifier marked as one. Returns the variables and, for each column marked identifier, why."""
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
    review: dict[str, list[str]]  # project.table (or "rules.toml") -> what init changed or guessed


def _table_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._]", "_", path.stem)
    return name if name[:1].isalpha() else f"t_{name}"


def init_site(directory: Path, csvs: list[Path], *, name: str, project: str = "main", port: int = 8001
              ) -> InitializedSite:
    """Write a new site under ``directory`` (which must not exist or be empty)."""
    if directory.exists() and any(directory.iterdir()):
        raise CatalogError(f"{directory}: not empty; dsfed-server init writes a new site into an empty directory")
    tables, identifiers, review, scores = {}, {}, {}, []
    for csv in csvs:
        if not csv.is_file():
            raise CatalogError(f"{csv}: no such file")
        table = _table_name(csv)
        folder = directory / "data" / project
        folder.mkdir(parents=True, exist_ok=True)
        frame, notes = read_export(csv)
        frame.to_csv(folder / f"{table}.csv", index=False)
        dictionary = folder / f"{table}.dictionary.json"
        variables, identifiers[f"{project}.{table}"] = infer_variables(frame)
        write_dictionary(dictionary, project, table, variables)
        tables[f"{project}.{table}"] = dictionary
        review[f"{project}.{table}"] = notes + [n for v in variables if not v.identifier
                                                for n in review_variable(v, frame[v.name])]
        scores += [c for c in score_candidates(variables, frame) if c not in scores]
    review["rules.toml"] = [_write_rules(directory / "rules.toml", scores)]
    write_secret(directory / "site.secret")
    credentials = new_credentials((("analyst", "analyst"), ("governance", "governance")))
    config = directory / "site.toml"
    write_site_config(config, name=name, data_dir=Path("data"), rules=Path("rules.toml"),
                      audit_log=Path(f"{name}-audit.jsonl"), secret_file=Path("site.secret"),
                      ledger=Path(f"{name}-ledger.sqlite"), credentials=credentials, port=port)
    return InitializedSite(config, credentials, tables, identifiers, review)


_SCORE_LINE = re.compile(r"^score_columns = .*$", re.MULTILINE)


def _write_rules(path: Path, scores: list[str]) -> str:
    """The packaged rules at ``path``, with ``score_columns`` set to ``scores`` if any; the review line."""
    text = packaged_rules().read_text()
    if not scores:
        path.write_text(text)
        packaged = _SCORE_LINE.search(text).group(0)
        return (f"score_columns: no column looks like a prediction score; rules.toml keeps `{packaged}`: set it to "
                "the columns holding your models' predicted probabilities (the only values released with noise)")
    path.write_text(_SCORE_LINE.sub(f"score_columns = {json.dumps(scores)}", text, count=1))
    return (f"score_columns = {json.dumps(scores)} set in rules.toml (decimals in [0, 1] named like scores): the only "
            "columns whose values are released with noise; add or remove columns as your models' predictions are")
