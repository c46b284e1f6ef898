"""Key agreement for secure aggregation (:mod:`dsfed_server.disclosure.secure_sum`)."""

from __future__ import annotations

from typing import Any

from dsfed_server.context import CallContext
from dsfed_server.disclosure.secure_sum import key_bundle, new_round
from dsfed_server.registry import P, Param, register


@register(
    "secureKeyDS",
    "aggregate",
    [Param("round", P.STRING, "the round's id: 32 hex digits the analyst draws at random")],
    checks=("secure_aggregation.pooled_thresholds",),
)
def secure_key(ctx: CallContext, round: str) -> dict[str, Any]:
    """A fresh X25519 public key for a secure-aggregation round, signed with the site's identity
    key (Ed25519). The private key stays in this session at the site. The analyst relays every
    site's answer (the roster) with each secure call of the round; the sites derive pairwise
    masks that cancel in the sum, so the analyst sees only sums over sites. The bundle also says,
    signed, whether this site checks pooled releases on the pooled cells
    (``secure_aggregation.pooled_thresholds``)."""
    pooled = ctx.guard.rule("secure_aggregation.pooled_thresholds")
    return key_bundle(ctx.site, ctx.service.identity, new_round(ctx.session.rounds, round, pooled=pooled))
