"""SQL the engines share: quoting, and the dictionary checks run inside the engine.

A check counts, per variable, the records whose value breaks its dictionary entry (a number that is
not one, a value outside the declared range, a fraction in an integer variable, a category or
boolean spelling not declared). It runs as one aggregate query over the table: nothing but the
counts leaves the engine. The catalog then reads a suspect column to name its first offending row.
"""

from __future__ import annotations

from typing import Callable

from dsfed_server.dictionary import BOOLEAN_SPELLINGS, Variable

TEXT_TYPES = ("VARCHAR", "TEXT", "CHARACTER VARYING", "CHARACTER", "STRING")


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """``value`` as a quoted SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def violation_counts(variables: tuple[Variable, ...], types: dict[str, str],
                     to_double: Callable[[str], str]) -> list[tuple[str, str]]:
    """``(variable, SQL aggregate)`` pairs: each aggregate counts the records of that variable that
    break its dictionary entry. ``types`` maps a column to its engine type (upper case);
    ``to_double(expr)`` is the engine's cast of text to a number that yields NULL when it fails."""
    spellings = tuple(BOOLEAN_SPELLINGS)
    out = []
    for v in variables:
        column = ident(v.name)
        text = types[v.name].upper().startswith(TEXT_TYPES)
        conditions = []
        if v.value_type in ("integer", "decimal"):
            number = to_double(f"trim({column})") if text else f"CAST({column} AS DOUBLE PRECISION)"
            if text:
                conditions.append(f"({column} IS NOT NULL AND trim({column}) <> '' AND {number} IS NULL)")
            bounds = v.declared_range
            if bounds is not None:
                conditions.append(f"({number} < {bounds[0]!r} OR {number} > {bounds[1]!r})")
            if v.value_type == "integer":
                conditions.append(f"({number} <> floor({number}))")
        elif v.value_type == "boolean" and text:
            conditions.append(f"({column} IS NOT NULL AND {column} NOT IN ({', '.join(map(literal, spellings))}))")
        elif v.value_type == "text" and v.categories:
            conditions.append(f"({column} IS NOT NULL AND CAST({column} AS VARCHAR) NOT IN "
                              f"({', '.join(map(literal, v.categories))}))")
        if conditions:
            out.append((v.name, f"count(*) FILTER (WHERE {' OR '.join(conditions)})"))
    return out
