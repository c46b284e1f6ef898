"""Logging in to dsfed sites with the unmodified PyPI DataSHIELD client (datashield + datashield-opal)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

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
