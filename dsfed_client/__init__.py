"""dsfed analyst client: one session over several sites, pooled non-disclosive results.

The names below load with their modules on first use (PEP 562's module ``__getattr__``), so the
``dsfed`` command line starts without numpy, pandas or requests (bench/cli_start.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dsfed_core.errors import AuthError, CallError, DisclosureRefusal, SiteError, SiteUnavailable

if TYPE_CHECKING:
    from dsfed_client.calls import Call, Formula, Ref
    from dsfed_client.errors import BudgetWarning, FederatedCallError, RecordsLeftOut
    from dsfed_client.session import FederatedSession, LoginBuilder

_LAZY = {
    "Call": "dsfed_client.calls",
    "Formula": "dsfed_client.calls",
    "Ref": "dsfed_client.calls",
    "BudgetWarning": "dsfed_client.errors",
    "FederatedCallError": "dsfed_client.errors",
    "RecordsLeftOut": "dsfed_client.errors",
    "FederatedSession": "dsfed_client.session",
    "LoginBuilder": "dsfed_client.session",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'dsfed_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AuthError",
    "BudgetWarning",
    "Call",
    "CallError",
    "DisclosureRefusal",
    "FederatedCallError",
    "FederatedSession",
    "Formula",
    "LoginBuilder",
    "RecordsLeftOut",
    "Ref",
    "SiteError",
    "SiteUnavailable",
]
