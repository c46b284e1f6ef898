"""The error of a federated call. The error kinds of one site (:class:`~dsfed_core.errors.SiteError`
and its subclasses: a refusal names the site, the function and the rule) are the sites' own,
from :mod:`dsfed_core.errors`."""

from __future__ import annotations

from dsfed_core.errors import SiteError


class FederatedCallError(Exception):
    """At least one site failed a call; no pooled result is returned.

    ``failures`` maps each failing site to its :class:`~dsfed_core.errors.SiteError`.
    """

    def __init__(self, function: str, failures: dict[str, SiteError], n_sites: int) -> None:
        self.function = function
        self.failures = failures
        self.n_sites = n_sites
        lines = "\n".join(f"  - {err}" for err in failures.values())
        super().__init__(
            f"{len(failures)} of {n_sites} site(s) failed {function or 'the call'}; "
            f"no pooled result is returned:\n{lines}"
        )


class BudgetWarning(UserWarning):
    """A noisy call would use more than a site's ``budget.warn_share`` of the privacy budget that
    remains on a table (the analyst's share or the table's): issued before the call is sent.

    The call then runs. To stop before it instead, turn the warning into an error::

        warnings.simplefilter("error", BudgetWarning)

    and the call raises ``BudgetWarning`` before any site runs it (nothing is spent).
    """


class RecordsLeftOut(UserWarning):
    """A site left records out of a table it assigned, and said how many and why (a pattern of missing
    values that few of its records share): every release of the table is over the others."""
