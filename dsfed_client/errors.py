"""Errors the analyst sees. Each names the site, the function and, for a refusal, the rule."""

from __future__ import annotations

from typing import Any


class SiteCallError(Exception):
    """One site answered a call with an error."""

    def __init__(
        self,
        message: str,
        *,
        site: str,
        function: str = "",
        rule: str | None = None,
        hint: str | None = None,
        type: str = "error",
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.site = site
        self.function = function
        self.rule = rule
        self.hint = hint
        self.type = type
        self.status = status

    def __str__(self) -> str:
        text = f"site {self.site!r}"
        if self.function:
            text += f", function {self.function}"
        text += f": {self.message}"
        if self.rule:
            text += f" [rule {self.rule}]"
        if self.hint:
            text += f" -- {self.hint}"
        return text


class DisclosureRefused(SiteCallError):
    """The site's disclosure rules refused to release the result."""


class BudgetExceededError(DisclosureRefused):
    """A noisy release would exceed the analyst's privacy budget at the site; the message says what remains."""


class NotEnabledError(DisclosureRefused):
    """The function is not enabled in the site's rules file."""


class BadCallError(SiteCallError):
    """The call is outside the grammar, names an unknown function or has a bad argument."""


class AuthenticationError(SiteCallError):
    """Missing or wrong credentials."""


class TooManyFailedLoginsError(AuthenticationError):
    """The site refuses logins from this address or for this user name for a while (HTTP 429);
    the hint says how long."""


class ForbiddenError(SiteCallError):
    """Not allowed: another analyst's session, or a role the user lacks."""


class NotFoundError(SiteCallError):
    """No such session, symbol or table at the site."""


class BackendUnavailableError(SiteCallError):
    """The function needs a backend (R) the site does not have."""


class SiteInternalError(SiteCallError):
    """A fault of the site, not of the call (HTTP 500); the hint gives the error id its
    administrator finds in the site's server log and audit log."""


class SiteUnavailable(SiteCallError):
    """The site could not be reached or did not answer in time."""


_BY_TYPE: dict[str, type[SiteCallError]] = {
    "disclosure_refused": DisclosureRefused,
    "not_enabled": NotEnabledError,
    "budget_exceeded": BudgetExceededError,
    "bad_call": BadCallError,
    "unauthenticated": AuthenticationError,
    "throttled": TooManyFailedLoginsError,
    "forbidden": ForbiddenError,
    "not_found": NotFoundError,
    "backend_unavailable": BackendUnavailableError,
    "internal_error": SiteInternalError,
}


def from_wire(body: dict[str, Any], *, site: str, status: int | None = None) -> SiteCallError:
    """Rebuild an error from a site's ``{"type", "site", "function", "rule", "message", "hint"}``."""
    cls = _BY_TYPE.get(str(body.get("type")), SiteCallError)
    return cls(
        str(body.get("message") or "error"),
        site=site,
        function=str(body.get("function") or ""),
        rule=body.get("rule"),
        hint=body.get("hint"),
        type=str(body.get("type") or "error"),
        status=status,
    )


class FederatedCallError(Exception):
    """At least one site failed a call; no pooled result is returned.

    ``failures`` maps each failing site to its :class:`SiteCallError`.
    """

    def __init__(self, function: str, failures: dict[str, SiteCallError], n_sites: int) -> None:
        self.function = function
        self.failures = failures
        self.n_sites = n_sites
        lines = "\n".join(f"  - {err}" for err in failures.values())
        super().__init__(
            f"{len(failures)} of {n_sites} site(s) failed {function or 'the call'}; "
            f"no pooled result is returned:\n{lines}"
        )
