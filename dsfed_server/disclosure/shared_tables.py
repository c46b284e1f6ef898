"""One name for differently named per-site tables in pooled releases: a label bound to the tables.

A site names a table after its file (``main.north`` at one hospital, ``main.south`` at another), and
an analyst's login maps each site to its own (DataSHIELD's ``DSLoginBuilder`` does the same). A
pooled release needs the sites to agree on three things named after the table column: the cut
history each relays to the others (the union is checked against every cut released before at any
site of the round), the key of the secret margins and picks the gate draws for the column's cells
(:class:`~dsfed_server.disclosure.gate.Floor`: the same cell must always draw the same margin, or
asking again averages it away), and the call's definition, to which the masks are bound.

The **label** is the sorted ``site=table`` pairs of the analyst's map (:func:`label`), sent alike to
every site in ``assignTable(tables = ...)`` (so the definition digest is the same everywhere). It
is not chosen freely: each site loads the table the label names for it, and a pooled step refuses
a label whose sites are not the round's (:func:`check_round`), so the same tables pooled by the
same sites always have the same label (a site pools a table with one set of peers only: the ledger
pins them). The label keys the relay, the margins and the answers of a pooled release only; a
site keeps the cuts under its own table's name (:func:`own_key`), so its cut history is one per
table whatever labels an analyst uses, and per-site releases never see a label (their margins are
the site's own).
"""

from __future__ import annotations

from typing import Collection, Mapping

from dsfed_core.errors import CallError, DisclosureRefusal

PREFIX = "tables:"  # a history key's table part that is a label (site=table pairs), not a site table
RULE = "secure_aggregation.pooled_thresholds"


def label(tables: Mapping[str, str]) -> str:
    """The label of a per-site table map: ``tables:`` and the sorted ``site=table`` pairs; the table's
    own name where every site names the same (so that map and a plain assignment are one key)."""
    if len(set(tables.values())) == 1:
        return next(iter(tables.values()))
    return PREFIX + ",".join(f"{site}={table}" for site, table in sorted(tables.items()))


def entries(pairs: list[str]) -> dict[str, str]:
    """A map from ``assignTable``'s ``tables`` (``"site=project.table"`` strings, one per site)."""
    out: dict[str, str] = {}
    for pair in pairs:
        site, sep, table = pair.partition("=")
        if not sep or not site or not table or "," in pair or "=" in table or site in out:
            raise CallError(f"tables: {pair!r} is not site=project.table (one per site, no ',' in either)",
                            hint="give each site's table once, as LoginBuilder.append(..., table=...) does")
        out[site] = table
    return out


def parse(text: str) -> dict[str, str] | None:
    """The map a label stands for; None for a site table's own name."""
    return entries(text[len(PREFIX):].split(",")) if text.startswith(PREFIX) else None


def own_key(key: tuple[str, str], site: str) -> tuple[str, str]:
    """Where this site keeps the cuts of a history key: under its own table for a label."""
    tables = parse(key[0])
    if tables is None:
        return key
    if site not in tables:
        raise CallError(f"the label {key[0]!r} names no table of site {site}")
    return tables[site], key[1]


def check_round(key: tuple[str, str] | None, sites: Collection[str]) -> None:
    """Refuse a pooled step on a label whose sites are not the round's: another map for the same tables
    (a site added that is not in the round) would draw the column's margins afresh."""
    tables = parse(key[0]) if key is not None else None
    if tables is not None and set(tables) != set(sites):
        raise DisclosureRefusal(
            f"the tables were assigned for the sites {', '.join(sorted(tables))}, and this round pools "
            f"{', '.join(sorted(sites))}: a pooled release on each site's own table runs at the sites the table "
            "map names", rule=RULE,
            hint="assign the table with a map of exactly the session's sites (LoginBuilder tables), and pool over them")
