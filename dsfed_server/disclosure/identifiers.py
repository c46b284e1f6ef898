"""Identifier columns: a call naming one is refused before anything runs.

A data dictionary marks a column that identifies records (``"identifier": true``, see
:mod:`dsfed_server.catalog`), and the catalog serves no function such a column. A call that names
one nonetheless (``meanDS(D$patient_id)``, a formula ``"y ~ patient_id"``, ``assignTable``'s
variables, ``deriveDS(log(D$patient_id))``) is refused here with the rule that refuses it, instead
of the "no such column" it would otherwise meet: both front doors read every call through
``CallPipeline.tree`` (:mod:`dsfed_server.service.calls`), which calls :func:`refuse_identifiers`. The
names are the site's, over all its tables, as a call's symbols are not tied to a table until it runs.
"""

from __future__ import annotations

from dsfed_core.calltree import Call, Node, referenced_names
from dsfed_core.errors import DisclosureRefusal

RULE = "dictionary.identifier"


def refuse_identifiers(node: Node, identifiers: dict[str, list[str]]) -> Node:
    """``node`` unchanged, if it names no identifier column (name -> the tables declaring it);
    otherwise :class:`DisclosureRefusal` naming the column, its tables and the rule."""
    if not identifiers:
        return node
    named = next((name for name in referenced_names(node) if name in identifiers), None)
    if named is None:
        return node
    raise DisclosureRefusal(
        f"{named!r} is an identifier column of {', '.join(identifiers[named])} at this site: no function may "
        "read it, so no call may name it (as a column, symbol, formula variable or in a string)",
        rule=RULE, function=node.function if isinstance(node, Call) else None,
        hint="leave the column out of the call and analyse the others (the site's table listing shows which); "
             "a symbol of that name needs another name",
    )
