"""dsfed analyst client: one session over several sites, pooled non-disclosive results."""

from dsfed_client.calls import Call, Formula, Ref
from dsfed_client.errors import BudgetWarning, FederatedCallError
from dsfed_client.session import FederatedSession, LoginBuilder
from dsfed_core.errors import AuthError, CallError, DisclosureRefusal, SiteError, SiteUnavailable

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
    "Ref",
    "SiteError",
    "SiteUnavailable",
]
