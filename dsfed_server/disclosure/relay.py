"""Pooled releases: sums over sites that only the sites can read, relayed through the analyst.

Secure aggregation (:mod:`dsfed_server.disclosure.secure_sum`) gives the *analyst* the sum over
sites. A pooled release gives it to the *sites* first, so that each site can check the pooled
cells against its own rules before anything leaves (check what is released), and
derive the next round's parameters from an authenticated pooled result (data-dependent parameters come from the sites):

1. **Seal.** Site *i* encodes its vector :math:`x_i` in fixed point, adds its pairwise masks
   (``secure_sum.mask``: the masks cancel in the sum over sites) and encrypts the masked vector
   :math:`y_i` once for every peer *j* with ChaCha20-Poly1305 under
   :math:`k_{i \\to j} = \\mathrm{HKDF}(s_{ij}, \\text{salt} = \\text{round},
   \\text{info} = (i, j, \\text{step}, c))`, *c* the digest binding the call and the symbols it
   read. The additional data carry (round, step, i, j) and what *i* declares about itself (its
   q-threshold): authenticated, not secret. The analyst receives only ciphertexts.
2. **Open.** The analyst relays to every site *j* what each site declared and the ciphertext each
   peer sealed for *j* (the others' are no use to *j*: a relay grows with K, not K squared). Site
   *j* opens them -- only *i* (or *j*) holds :math:`s_{ij}`, so a vector the
   analyst forged, altered, replayed from another step, or made for another call does not open --
   and adds them to its own: :math:`\\sum_i y_i = \\sum_i x_i \\bmod 2^{64}`, the pooled vector.
   Every site computes the same pooled vector. A site sees the others' :math:`y_i` only, each
   still masked by the seeds it does not share (three sites or more).
3. The site then checks the pooled vector and releases what its rules allow
   (:mod:`dsfed_server.disclosure.gate`), or derives the next step's parameters from it.

Each step of a round is sealed once and opened once. A function may declare a protocol of
several steps (:class:`PooledSteps`): each pooled result then yields what the sites release now
and, derived from it at every site alike, this site's vector for the next step -- the next probes
of a quantile search, the next iterate of a GLM -- sealed in the same call (the next
round's parameters come from the sites, not from the analyst).

A **relayed** protocol (the ``relayed`` option; GLM fits) runs the same steps where pooled
checks are not available -- fewer sites than ``secure_aggregation.min_sites``, or a site that
checks per site only: each site checks its own counts before it seals anything, and the sites
still derive every step's parameters from the authenticated sum of the step before. Below
min_sites the masks hide nothing from the other sites (a site could subtract its own); what a
site then learns of a peer is that peer's per-site parts, which it checked before sealing.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from dsfed_server.disclosure.secure_sum import Round, pair_secret
from dsfed_core.errors import SHAPES_DIFFER, CallError, DisclosureRefusal

if TYPE_CHECKING:
    from dsfed_server.disclosure.gate import Floor

_NONCE = b"\0" * 12  # every key seals exactly one vector
MAX_PENDING = 64  # sealed steps a round keeps waiting for their relay


# what a pooled step gives: what the sites release now, and this site's next step
Step = tuple[dict[str, Any] | None, "PooledSteps | None"]


@dataclass
class PooledSteps:
    """A pooled protocol declared by a function: this site's vector for the first step (``fields``)
    and ``advance``: from a step's pooled vector and the sites' shared floor (:class:`gate.Floor`:
    the largest q and cut margin of the sites, keyed by the pooled nonce), what the sites
    release now (None: nothing) and this site's next step (None: the protocol is done). A step that
    releases cuts or cells before that is a generator: it yields their declarations
    (:mod:`dsfed_server.disclosure.declared`), which the service releases, and returns the pair.
    ``frac_bits``: the fixed-point bits of this step's vector (None: those the analyst asked for, which
    the analyst lowers and asks again when values did not fit)."""

    fields: dict[str, np.ndarray]
    advance: Callable[[dict[str, np.ndarray], "Floor"], Step | Generator[Any, Any, Step]]
    frac_bits: int | None = None
    history_key: tuple[str, str] | None = None  # the table column whose cut history the protocol uses


@dataclass
class Recorded:
    """What a pooled release gives (``result``) and the cells every site recorded with it, each as
    ``[identity, pooled count, column]``: the analyst relays them with later pooled releases, whose pairs with
    them the sites then decide on the pooled records (:meth:`~dsfed_server.disclosure.checks.Guard.coarsened`)."""

    result: Any
    cells: list[list[Any]]


@dataclass
class PendingStep:
    """This site's sealed contribution to one pooled step, kept until the analyst relays the others'.

    ``finish`` turns the decoded pooled fields into what the site releases (after its checks);
    ``call`` is the digest the vectors are bound to; ``meta`` what this site declared about itself."""

    function: str
    call: bytes
    masked: np.ndarray
    layout: dict[str, list[int]]
    frac_bits: int
    meta: dict[str, Any]
    finish: Callable[..., Any]
    sources: frozenset = frozenset()
    history_key: tuple[str, str] | None = None  # its cut history goes back with the release
    relayed: bool = False  # a relayed protocol: checked per site when sealed, the sum released as it is
    asked_bits: int | None = None  # the fraction bits the analyst asked for (a step's None means these)
    held: dict[str, Any] | None = None  # the step before's answer, given when this one opens (every site recorded it)


def _relay_key(shared: bytes, round_id: str, sender: str, receiver: str, step: int, call: bytes) -> bytes:
    info = (b"dsfed relay v1\0" + sender.encode() + b"\0" + receiver.encode() + b"\0" + step.to_bytes(8, "big")
            + call)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=bytes.fromhex(round_id), info=info).derive(shared)


def _aad(round_id: str, step: int, sender: str, receiver: str, meta: dict[str, Any]) -> bytes:
    return json.dumps([round_id, step, sender, receiver, meta], sort_keys=True, separators=(",", ":")).encode()


def seal(site: str, rnd: Round, keys: dict[str, bytes], step: int, call: bytes, masked: np.ndarray,
         meta: dict[str, Any]) -> dict[str, str]:
    """This site's masked vector sealed for each peer (base64 by peer name)."""
    data = np.ascontiguousarray(masked, dtype="<u8").tobytes()
    sealed = {}
    for name, public in sorted(keys.items()):
        if name == site:
            continue
        key = _relay_key(pair_secret(rnd, public), rnd.round_id, site, name, step, call)
        box = ChaCha20Poly1305(key).encrypt(_NONCE, data, _aad(rnd.round_id, step, site, name, meta))
        sealed[name] = base64.b64encode(box).decode("ascii")
    return sealed


def _refused(message: str) -> DisclosureRefusal:
    return DisclosureRefusal(message, rule="secure_aggregation.peers",
                             hint="relay every site's sealed answer of this step unchanged, in the next call")


def open_relay(site: str, rnd: Round, keys: dict[str, bytes], step: int, pending: PendingStep, relay: Any
               ) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """The pooled vector (sum of every site's masked vector, modulo :math:`2^{64}`) and what each
    site declared about itself, after opening the vector each peer sealed for this site."""
    if not isinstance(relay, dict) or set(relay) != set(keys):
        raise CallError("pooled release: the relay must hold one entry per site of the round",
                        hint="relay every site's answer of the sealing call, keyed by site name")
    total = pending.masked.copy()
    metas: dict[str, dict[str, Any]] = {site: pending.meta}
    for sender in sorted(keys):
        if sender == site:
            continue
        entry = relay[sender]
        meta = entry.get("meta") if isinstance(entry, dict) else None
        sealed = entry.get("sealed") if isinstance(entry, dict) else None
        box = sealed.get(site) if isinstance(sealed, dict) else None
        if not isinstance(meta, dict) or not isinstance(box, str):
            raise _refused(f"the relay holds no vector that {sender} sealed for this site")
        try:
            data = base64.b64decode(box, validate=True)
            key = _relay_key(pair_secret(rnd, keys[sender]), rnd.round_id, sender, site, step, pending.call)
            plain = ChaCha20Poly1305(key).decrypt(_NONCE, data, _aad(rnd.round_id, step, sender, site, meta))
        except (ValueError, InvalidTag):
            raise _refused(f"the vector relayed as {sender}'s was not sealed by {sender} for this step and call "
                           f"(altered, forged, from another step, or {sender} ran another call)") from None
        vector = np.frombuffer(plain, dtype="<u8").astype(np.uint64)
        if vector.size != total.size:
            raise DisclosureRefusal(
                f"{sender}'s vector {SHAPES_DIFFER}: the sites computed answers of different shapes (a model "
                "over a factor whose levels differ between sites, or cut histories that differ)",
                rule="secure_aggregation.peers",
                hint="give a factor the same levels at every site (glmDS2's xlev: the union of the levels "
                     "levelsDS gives at each site), or ask again")
        total = total + vector  # modulo 2^64
        metas[sender] = meta
    return total, metas


def decode(total: np.ndarray, layout: dict[str, list[int]], frac_bits: int) -> tuple[dict[str, np.ndarray], int]:
    """The pooled fields (by name, with their shapes) and the number of values the sites clipped
    to the fixed-point range (the vector's last word)."""
    flat = total[:-1].view(np.int64).astype(float) / 2.0**frac_bits
    fields, offset = {}, 0
    for name, shape in layout.items():
        size = int(np.prod(shape, dtype=int))
        fields[name] = flat[offset:offset + size].reshape(shape)
        offset += size
    return fields, int(total[-1:].view(np.int64)[0])
