"""The error kinds of a site, and their wire form: one hierarchy for both sides.

Every error a site raises to an analyst names the site, the function and, for a
refusal, the rule of the site's rules file that refused it, plus a hint on what
to do. A site sends :meth:`SiteError.to_wire` (the HTTP layer and the in-process
transport alike); the client rebuilds the same class with :func:`from_wire`, so
``except DisclosureRefusal`` means the same on both sides.
"""

from __future__ import annotations

from typing import Any


class SiteError(Exception):
    """Base class of errors a site reports to the analyst."""

    kind = "error"
    http_status = 400

    def __init__(
        self,
        message: str,
        *,
        site: str = "",
        function: str = "",
        rule: str | None = None,
        hint: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.site = site
        self.function = function
        self.rule = rule
        self.hint = hint
        self.status = status  # the HTTP status the client received (None on the site's side)

    def at(self, *, site: str | None = None, function: str | None = None) -> "SiteError":
        """Fill in the site and the function where they are not yet known."""
        if site and not self.site:
            self.site = site
        if function and not self.function:
            self.function = function
        return self

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "site": self.site,
            "function": self.function,
            "rule": self.rule,
            "message": self.message,
            "hint": self.hint,
        }

    def __str__(self) -> str:
        where = f"site {self.site!r}" if self.site else "site"
        if self.function:
            where += f", function {self.function}"
        text = f"{where}: {self.message}"
        if self.rule:
            text += f" [rule {self.rule}]"
        if self.hint:
            text += f" -- {self.hint}"
        return text


SHAPES_DIFFER = "has another length than this site's"
"""What a site says (rule ``secure_aggregation.peers``) when a peer's vector of a pooled or relayed step
has another length than its own: the sites computed answers of different shapes (a model over a factor
whose levels differ between sites); the client recognises it and aligns the levels."""

NOT_A_PEER = "is not a peer of this site"
"""What a site says (rule ``secure_aggregation.peers``) of a roster entry whose site it has not pinned
(``[federation] peers``): it takes part in no secure sum and no relayed protocol with it. The client
recognises it and fits a plain GLM at coefficients it sends instead, as DataSHIELD's ``ds.glm`` does."""


class DisclosureRefusal(SiteError):
    """A result would disclose too much under the site's rules; nothing is returned."""

    kind = "disclosure_refused"
    http_status = 403


class BudgetExceeded(DisclosureRefusal):
    """A noisy release would exceed the analyst's privacy budget on a table (``[budget]``);
    the message states what remains. Nothing is released and nothing is spent."""

    kind = "budget_exceeded"
    http_status = 403


class CallError(SiteError):
    """The call is malformed: outside the grammar, unknown function, bad argument."""

    kind = "bad_call"
    http_status = 422


class NotEnabled(DisclosureRefusal):
    """The function exists but the site's rules file (or the session's profile) does not enable it."""

    kind = "not_enabled"
    http_status = 403


class AuthError(SiteError):
    """Missing or wrong credentials."""

    kind = "unauthenticated"
    http_status = 401


class TooManyFailedLogins(AuthError):
    """Too many failed logins from a client address or for a user name (the site config's ``[login]``)."""

    kind = "throttled"
    http_status = 429

    def __init__(self, message: str, *, retry_after: int = 0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class LoginsBusy(TooManyFailedLogins):
    """Every password-check slot is taken (``login.concurrent_checks``): try again in a moment."""


class Forbidden(SiteError):
    """Authenticated, but not allowed (other analyst's session, wrong role)."""

    kind = "forbidden"
    http_status = 403


class NotFound(SiteError):
    """No such session, symbol or table."""

    kind = "not_found"
    http_status = 404


class StaleHandle(SiteError):
    """A call named a symbol by a handle (its name and the digest of its definition) that no longer
    holds that definition: removed, or replaced by another assign. Nothing ran."""

    kind = "stale_handle"
    http_status = 409


class ProtocolError(SiteError):
    """A request the HTTP layer refuses before a route runs: a body that is not JSON, a method the
    path does not have. It keeps the HTTP layer's status (400, 405)."""

    kind = "bad_request"

    def __init__(self, message: str, *, http_status: int = 400, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.http_status = http_status


class InternalError(SiteError):
    """A fault of the site (a bug), not of the call: HTTP 500, with an error id the site's server log
    and audit log hold too."""

    kind = "internal_error"
    http_status = 500


class ContractViolation(InternalError):
    """A function applied a disclosure rule its registry entry does not declare (``checks=``): a bug
    in the declaration, never the analyst's doing. Nothing is released; ``rule`` names the rule."""


class BackendUnavailable(SiteError):
    """The function's implementation needs a backend (R) that this site lacks."""

    kind = "backend_unavailable"
    http_status = 503


class NotSupported(NotFound):
    """A request of a protocol dsfed speaks (Opal's ``/ws``) for something a dsfed site does not
    serve (projects, taxonomies, resources, saved workspaces), with what to use instead: HTTP 404, as
    Opal answers for what it does not have (a client error, which clients read as "not here")."""

    kind = "not_supported"


class InsufficientMemory(SiteError):
    """A call would read more of a table than the memory the site may use holds; refused before the
    site runs short (or as soon as its engine does), saying which limit and what to read instead."""

    kind = "insufficient_memory"
    http_status = 507


class SiteUnavailable(SiteError):
    """The site could not be reached or did not answer in time (raised by the client)."""

    kind = "unavailable"
    http_status = 503


def _kinds(cls: type[SiteError]) -> dict[str, type[SiteError]]:
    found = {cls.kind: cls}
    for sub in cls.__subclasses__():
        found = {**_kinds(sub), **found}
    return found


_BY_KIND: dict[str, type[SiteError]] = _kinds(SiteError)


def from_wire(body: dict[str, Any], *, site: str, status: int | None = None) -> SiteError:
    """Rebuild an error from a site's ``{"type", "site", "function", "rule", "message", "hint"}``
    (an unknown ``type`` gives a plain :class:`SiteError` keeping that kind)."""
    kind = str(body.get("type") or "error")
    error = _BY_KIND.get(kind, SiteError)(
        str(body.get("message") or "error"), site=site, function=str(body.get("function") or ""),
        rule=body.get("rule"), hint=body.get("hint"), status=status)
    error.kind = kind
    return error
