"""Logging in to dsfed sites with the unmodified PyPI DataSHIELD client (datashield + datashield-opal)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from datashield import DSLoginBuilder, DSSession

TABLE = "GBSG2.validation"


def logins(http, provisioned, *, token: bool = False, profile: str = "default", user: str = "analyst",
           password: str | None = None) -> list:
    """DSLoginBuilder entries for every site of ``http`` (a LocalSites), by password or API token."""
    builder = DSLoginBuilder()
    for name, url in http.urls.items():
        cred = provisioned[name].credentials[user]
        if token:
            builder.add(name, url, token=cred.token, profile=profile)
        else:
            builder.add(name, url, user=cred.user, password=password or cred.password, profile=profile)
    return builder.build()


@contextmanager
def ds_session(http, provisioned, *, assign: bool = True, **kwargs) -> Iterator[DSSession]:
    """An open DSSession over the sites, with the GBSG2 table assigned to D unless ``assign`` is False."""
    session = DSSession(logins(http, provisioned, **kwargs))
    session.open()
    try:
        if assign:
            session.assign_table("D", table=TABLE)
        yield session
    finally:
        session.close()


def opal_value(answer: Any) -> Any:
    """An Opal answer as plain values, the way a client written against Opal reads one: the typed
    form of ``jsonlite::serializeJSON`` (sent for results ``toJSON`` refuses) decoded, a named list as
    a dict, a length-1 vector as its element, a 1-d array as its values, a matrix as its rows; the
    plain form as it is."""
    if not (isinstance(answer, dict) and "type" in answer and set(answer) <= {"type", "attributes", "value"}):
        return answer
    attributes, value = answer.get("attributes", {}), answer.get("value")
    if answer["type"] == "NULL":
        return None
    if answer["type"] == "list":
        items = [opal_value(v) for v in value]
        return dict(zip(attributes["names"]["value"], items)) if "names" in attributes else items
    if "dim" in attributes and len(attributes["dim"]["value"]) == 1:  # a 1-d array (a table): its values
        return value
    if "dim" in attributes:
        n_rows, n_cols = attributes["dim"]["value"]
        return [[value[i + j * n_rows] for j in range(n_cols)] for i in range(n_rows)]
    return value[0] if len(value) == 1 else value
