"""The types of a registry function's parameters (:mod:`dsfed_server.registry`).

Below both the registry and the disclosure layer, which asks of a call's arguments whether one
was passed to a table parameter (:meth:`~dsfed_server.disclosure.checks.Guard.check_analyst_data`).
"""

from __future__ import annotations

from enum import Enum


class P(Enum):
    """Parameter types. Values come only from literals or from the workspace."""

    OBJECT = "object"  # any workspace value: a symbol, table$column, or a nested assign call
    TABLE = "table"  # a data-frame symbol
    VECTOR = "vector"  # a column/vector: symbol, table$column, or the same as a string ("D$age")
    STRING = "string"
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    NUMBERS = "numbers"  # c(...) of numbers, one number, or "1,2,3"
    STRINGS = "strings"  # c(...) of strings or one string
    FORMULA = "formula"  # y ~ x1 + x2, unquoted or as a string
    EXPRESSION = "expression"  # arithmetic over columns and numbers (log(D$x + 1)), unquoted or as a string
    NAME = "name"  # a column or table name, bare or quoted, not resolved
    SCALAR = "scalar"  # one number, string or boolean literal
