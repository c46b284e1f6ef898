"""Opal's table assignment as its clients send it: the table reference, the variable filter, and
the ``missings``, ``identifiers`` and ``id`` options, read as Opal reads them.

DSOpal assigns a table with ``PUT .../symbol/{sym}`` and the body ``project.table`` typed
``application/x-opal``; the Python client with ``PUT .../symbol/{sym}/table/{project.table}``. The
variables come as a Magma JavaScript filter: opalr writes ``name().any('a','b')`` (Magma's
``name()`` is the variable's name, ``any`` true when it equals one of the arguments), the Python
client ``name.any("a","b")``; dsfed reads exactly these (never evaluating anything) and refuses any
other script with the forms it accepts. ``missings`` tells Opal whether the values of a variable's
missing categories are kept as values (true) or become NA (false); a dsfed data dictionary declares
no missing categories, so both give the same table. ``identifiers`` names an Opal identifiers
mapping and ``id`` a column for the participants' identifiers: a dsfed site holds no mappings and
gives no identifiers to a session. Pure functions.
"""

from __future__ import annotations

import re

from dsfed_core.errors import CallError, DisclosureRefusal, NotFound

X_OPAL = "application/x-opal"
_ANY_NAMES = re.compile(r"^name(?:\(\))?\.any\((.*)\)$", re.S)
_QUOTED = re.compile(r"""\s*(?:"([^"\\]+)"|'([^'\\]+)')\s*(,|$)""")
_TABLE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\.[A-Za-z0-9_][A-Za-z0-9_-]*$")
IDENTIFIER_RULE = "dictionary.identifier"
FILTER_FORMS = "name().any('a', 'b') as R's DSOpal sends it, or name.any(\"a\", \"b\")"


def parse_variables(text: str | None) -> list[str] | None:
    """The variable names of Opal's filter ``name().any('a','b')`` / ``name.any("a","b")``; None
    for no filter (every variable)."""
    if text is None or not text.strip():
        return None
    match = _ANY_NAMES.match(text.strip())
    names: list[str] = []
    if match:
        rest = match.group(1)
        while rest.strip():
            item = _QUOTED.match(rest)
            if item is None:
                names = []
                break
            names.append(item.group(1) or item.group(2))
            rest = rest[item.end():]
            if item.group(3) == "" and rest.strip():
                names = []
                break
    if not names:
        raise CallError(f"variables filter {text[:80]!r} is not a list of variable names: dsfed reads {FILTER_FORMS}",
                        hint="in R, give the variables as a list or a vector of several names, e.g. "
                             "variables = list(\"age\") or c(\"age\", \"tsize\")")
    return names


def parse_table(body: str) -> str:
    """The ``project.table`` an ``application/x-opal`` assignment body names."""
    table = body.strip()
    if not _TABLE.match(table):
        raise CallError(f"an {X_OPAL} assignment names a table as project.table, got {table[:80]!r}",
                        hint="e.g. GBSG2.validation; the site's tables are listed by GET /ws/datasources")
    return table


def check_identifier_options(identifiers: str | None, id_column: str | None) -> None:
    """Refuse Opal's identifier options: a mapping (``identifiers``) the site does not hold, and a
    column of participant identifiers (``id``), which no session is given."""
    if id_column:
        raise DisclosureRefusal(
            f"the table cannot be assigned with a column of participant identifiers (id={id_column[:40]!r}): "
            "identifiers single out the people behind the records", rule=IDENTIFIER_RULE,
            hint="assign the table without id (DSOpal: id.name = NULL); rows are analysed without identifiers")
    if identifiers:
        raise NotFound(f"no identifiers mapping {identifiers[:40]!r}: a dsfed site holds no identifiers mappings",
                       hint="assign the table without identifiers")
