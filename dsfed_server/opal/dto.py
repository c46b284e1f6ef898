"""Opal's JSON documents (DTOs) for what a dsfed site offers, built from the service's answers.

Only the fields the DataSHIELD clients read, plus those that make the
documents recognisable to an Opal user. Pure functions.
"""

from __future__ import annotations

from typing import Any, Iterable

from dsfed_server import __version__
from dsfed_core.errors import SiteError

# The Opal REST protocol level dsfed answers under /ws (DataSHIELD profiles came with Opal 4.2).
OPAL_PROTOCOL_VERSION = "5.0.0"
METHOD_KEY = "DataShield.RFunctionDataShieldMethodDto.method"


def error(exc: SiteError) -> dict[str, Any]:
    """Opal's ``ClientErrorDto`` (``code``, ``status``, ``arguments``) plus dsfed's error as in ``/v1``.

    R's opalr shows ``arguments``; Python's datashield-opal keeps the whole
    document; both see dsfed's message naming the site, function and rule.
    """
    return {"code": exc.http_status, "status": exc.kind, "arguments": [str(exc)], "error": exc.to_wire()}


def subject(name: str, role: str) -> dict[str, Any]:
    return {"principal": name, "realm": "dsfed", "groups": [role], "otpEnabled": False}


def session(sid: str, user: str, profile: str, state: str = "RUNNING") -> dict[str, Any]:
    """A DataSHIELD R session: dsfed's sessions are ready at once, so ``state`` is RUNNING."""
    return {"id": sid, "user": user, "profile": profile, "context": "DataSHIELD", "state": state, "events": []}


def method(name: str) -> dict[str, Any]:
    """A DataSHIELD method, served by dsfed's registry entry of the same name."""
    return {"name": name, METHOD_KEY: {"func": f"dsfed::{name}", "rPackage": "dsfed", "version": __version__}}


def profile(name: str) -> dict[str, Any]:
    return {"name": name, "cluster": "dsfed", "enabled": True, "restrictedAccess": False}


def datasources(tables: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Projects with their table names (``tables``: the service's ``project.table`` descriptions)."""
    projects: dict[str, list[str]] = {}
    for table in tables:
        project, _, name = table["name"].partition(".")
        projects.setdefault(project, []).append(name)
    return [{"name": p, "type": "dsfed", "table": names} for p, names in projects.items()]


def table(project: str, description: dict[str, Any]) -> dict[str, Any]:
    name = description["name"].partition(".")[2]
    return {"name": name, "datasourceName": project, "entityType": "Participant",
            "variableCount": len(description["variables"]), "link": f"/datasource/{project}/table/{name}"}


def variables(description: dict[str, Any]) -> list[dict[str, Any]]:
    """Opal's ``VariableDto`` list from the table's data dictionary."""
    out = []
    for index, var in enumerate(description["variables"]):
        attributes = [{"name": "label", "value": var["label"]}] if var["label"] else []
        out.append({
            "name": var["name"],
            "entityType": "Participant",
            "valueType": var["valueType"],
            "unit": var["unit"],
            "isRepeatable": False,
            "index": index,
            "attributes": attributes,
            "categories": [{"name": c, "isMissing": False, "attributes": []} for c in var["categories"]],
        })
    return out
