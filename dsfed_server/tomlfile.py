"""Load a TOML file into a pydantic model, reporting errors as ``file:line: reason``.

Both the site config and the rules file are read this way, so a site
administrator always gets the file, the line and the reason of the first thing
to fix, and the server does not start on a file it does not fully understand.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


HIDDEN_VALUE = "hidden_value"
"""The type of a validation error (``PydanticCustomError(HIDDEN_VALUE, message)``) whose value the
message never shows: a credential's hash. Nor is a table or an array ever shown (it would show every
user's hashes)."""


class ConfigFileError(Exception):
    """A config or rules file that cannot be used; the message is ``file:line: reason``."""


def _key_pattern(key: str) -> re.Pattern[str]:
    quoted = re.escape(key)
    return re.compile(rf"^\s*(?:{quoted}|\"{quoted}\"|'{quoted}')\s*=")


def locate(text: str, loc: tuple[str | int, ...]) -> int:
    """Best line number (1-based) for the value at ``loc`` in TOML ``text``.

    ``loc`` is a pydantic error location: table names, keys and array indices.
    Tables (``[a.b]``) and arrays of tables (``[[users]]``) are followed; the
    line of the innermost key found is returned, else the table header, else 1.
    """
    lines = text.splitlines()
    table: list[str] = []
    aot_count: dict[str, int] = {}
    best = 1
    best_depth = -1
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            table = [part.strip().strip("\"'") for part in header.group(2).split(".")]
            if header.group(1) == "[[":
                name = ".".join(table)
                aot_count[name] = aot_count.get(name, -1) + 1
                table = table + [str(aot_count[name])]
            depth = _match_depth(table, loc)
            if depth > best_depth:
                best, best_depth = number, depth
            continue
        depth = _match_depth(table, loc)
        if depth != len(table):
            continue
        rest = [str(p) for p in loc[depth:]]
        if rest and isinstance(loc[depth], str) and _key_pattern(rest[0]).match(line):
            if depth + 1 > best_depth:
                best, best_depth = number, depth + 1
    return best


def _match_depth(table: list[str], loc: tuple[str | int, ...]) -> int:
    """How many leading parts of ``table`` equal the leading parts of ``loc``; -1 if they diverge.
    A table inside ``loc`` (``[[users]]`` for an error on all users) matches all of ``loc``."""
    for i, part in enumerate(table[:len(loc)]):
        if str(loc[i]) != part:
            return -1
    return min(len(table), len(loc))


def _entry(data: object, loc: tuple[str | int, ...]) -> str:
    """`` ([[users]] entry 'analyst')`` when ``loc`` goes through an array entry with a ``name``."""
    named = ""
    for i, part in enumerate(loc):
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
            if isinstance(data, dict) and isinstance(data.get("name"), str):
                named = f" ([[{'.'.join(map(str, loc[:i]))}]] entry {data['name'][:64]!r})"
        else:
            break
    return named


def _reason(error: dict, data: object) -> str:
    loc = ".".join(str(p) for p in error["loc"]) + _entry(data, tuple(error["loc"]))
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {loc!r} (not part of this file's schema; check the spelling)"
    if kind == "missing":
        return f"missing key {loc!r}"
    value = error.get("input")
    if kind == HIDDEN_VALUE or isinstance(value, (dict, list, tuple)):
        return f"{loc}: {error['msg']}"
    return f"{loc}: {error['msg']} (got {value!r})"


def load_toml_model(path: str | Path, model: type[M]) -> M:
    """Parse ``path`` and validate it against ``model``; raise :class:`ConfigFileError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(f"{path}:0: cannot read file: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = match.group(1) if match else "1"
        raise ConfigFileError(f"{path}:{line}: not valid TOML: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        messages = [f"{path}:{locate(text, tuple(err['loc']))}: {_reason(err, data)}" for err in exc.errors()]
        raise ConfigFileError("\n".join(messages)) from None
