"""dsfed analyst client: one session over several sites, pooled non-disclosive results."""

from dsfed_client.calls import Call, Formula, Ref
from dsfed_client.errors import (
    AuthenticationError,
    BadCallError,
    DisclosureRefused,
    FederatedCallError,
    SiteCallError,
    SiteUnavailable,
)
from dsfed_client.session import FederatedSession, LoginBuilder

__all__ = [
    "AuthenticationError",
    "BadCallError",
    "Call",
    "DisclosureRefused",
    "FederatedCallError",
    "FederatedSession",
    "Formula",
    "LoginBuilder",
    "Ref",
    "SiteCallError",
    "SiteUnavailable",
]
