"""What a release strategy and a per-site protocol call on a session: the sites' releases.

:class:`~dsfed_client.session.FederatedSession` is one; the strategies of
:mod:`dsfed_client.aggregation` and the per-site quantile search
(:mod:`dsfed_client.quantile_search`) are typed with this protocol, so that the session, which
builds the strategies, sits above them and not beside them.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Protocol


class Sites(Protocol):
    """The releases of the sites of one session."""

    @property
    def sites(self) -> list[str]:
        """The sites' names, in the order they were added."""

    def aggregate(self, function: str, *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        """Each site's own release of an aggregate call, by site."""

    def pooled(self, function: str, *args: Any, frac_bits: int = 40, **kwargs: Any) -> dict[str, Any]:
        """One release the sites pooled among themselves under secure aggregation."""

    def pooled_steps(self, function: str, *args: Any, frac_bits: int = 40, relayed: bool = False,
                     **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every release of a pooled protocol of several steps, as it comes."""

    def pooled_capability(self) -> tuple[bool, str]:
        """Whether every site offers pooled releases, and if not, why."""
