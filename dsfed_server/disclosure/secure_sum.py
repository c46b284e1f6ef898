"""Secure aggregation: the analyst receives the sum over sites of a result vector, never one
site's contribution (institutional privacy, Wu et al. 2012, "secure summation").

Protocol (pairwise additive masks, as Bonawitz et al. 2017 without the drop-out recovery):

1. **Keys.** For a *round* named by the analyst (16 random bytes, hex), each site draws a
   fresh X25519 key pair (``secureKeyDS``), keeps the private key in the analyst's session
   (never released, never stored on disk) and returns the public key signed with its
   long-term Ed25519 **identity key** (derived from the site secret). The analyst relays
   the list of all sites' signed keys (the *roster*) with every secure call.
2. **Roster check.** A site takes part only if its own key is in the roster unchanged,
   every other entry names a peer pinned in the site's config (``[federation] peers``)
   and carries a valid signature by that peer over (round, name, key), and the roster
   holds at least ``secure_aggregation.min_sites`` sites. The analyst cannot insert a key
   of its own (man in the middle), so it never holds a private key that opens a mask.
3. **Masks.** Sites *i* and *j* agree on :math:`s_{ij} = \\mathrm{X25519}(sk_i, pk_j)`
   (equal to :math:`\\mathrm{X25519}(sk_j, pk_i)`). For step *t* of the round the mask
   stream is ChaCha20 keyed by :math:`\\mathrm{HKDF}(s_{ij}, \\text{salt} = \\text{round},
   \\text{info} = (i, j, t, c))`, read as unsigned 64-bit integers :math:`r_{ij}^{(t)}`, where
   *c* is a digest of the call as the site received it and of the fixed-point scale: masks
   cancel only if every site ran the very same call (an analyst who sends different calls to
   different sites in one step decodes noise, not one site's value).
4. **Masked vector.** Site *i* encodes its values :math:`v_i` in fixed point (clipped to the
   range in which K such values cannot wrap; the number clipped is the vector's last word, so
   the analyst learns only how many values were clipped over all sites, not where),
   :math:`x_i = \\mathrm{round}(v_i 2^f) \\bmod 2^{64}`, and sends
   :math:`y_i = x_i + \\sum_{j > i} r_{ij} - \\sum_{j < i} r_{ji} \\bmod 2^{64}` (sites
   ordered by name). The masks cancel in :math:`\\sum_i y_i = \\sum_i x_i \\bmod 2^{64}`,
   which the analyst reads as a signed integer and divides by :math:`2^f`: the exact sum
   of the encoded values. Each :math:`y_i` alone is uniform on :math:`\\mathbb{Z}_{2^{64}}`
   to anyone without one of site *i*'s pairwise seeds.

A step number is used once per round (a second vector under the same masks would reveal
the difference of the two). A site's disclosure rules (q-threshold, small bins, DP noise)
apply to its own contribution before masking, exactly as without secure aggregation.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from dsfed_core.errors import NOT_A_PEER, CallError, DisclosureRefusal
from dsfed_core.wire import decode_f64

ROUND_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_FRAC_BITS = 40
MAX_ROUNDS_PER_SESSION = 16
_RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, what: str, size: int) -> bytes:
    try:
        data = base64.b64decode(str(text), validate=True)
    except (ValueError, TypeError):
        data = b""
    if len(data) != size:
        raise CallError(f"secure aggregation: {what} must be {size} bytes in base64",
                        hint="relay every site's secureKeyDS answer for the round, unchanged")
    return data


# --- identities -----------------------------------------------------------------------------


def identity_key(secret: bytes) -> Ed25519PrivateKey:
    """The site's long-term Ed25519 signing key, derived from its secret (HKDF-SHA256)."""
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"dsfed site identity v1").derive(secret)
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_identity(secret: bytes) -> str:
    """The site's identity public key as pinned in its peers' configs (base64 of 32 bytes)."""
    return _b64(identity_key(secret).public_key().public_bytes(*_RAW))


def parse_identity(text: str) -> Ed25519PublicKey:
    """A pinned peer identity (base64 of the raw 32-byte Ed25519 public key)."""
    return Ed25519PublicKey.from_public_bytes(_unb64(text, "a peer identity key", 32))


def _signed_message(round_id: str, site: str, public: bytes, pooled: bool) -> bytes:
    """What a site signs for a round: its key, and whether it checks pooled releases on the pooled
    cells (``secure_aggregation.pooled_thresholds``), a promise its peers rely on."""
    return (b"dsfed secure-aggregation key v2\0" + round_id.encode() + b"\0" + site.encode() + b"\0" + public
            + (b"\0pooled" if pooled else b"\0per-site"))


# --- rounds ---------------------------------------------------------------------------------


@dataclass
class Round:
    """This site's key pair for one round of one analyst session."""

    round_id: str
    private: X25519PrivateKey
    public: bytes
    pooled: bool = False  # this site's secure_aggregation.pooled_thresholds, signed with its key
    used_steps: set[int] = field(default_factory=set)
    peers: tuple[str, ...] | None = None  # fixed by the first secure call of the round
    shared: dict[bytes, bytes] = field(default_factory=dict)  # X25519 results by peer key (one per pair)
    pooled_peers: dict[str, bool] = field(default_factory=dict)  # each roster site's signed pooled flag
    pending: dict[int, Any] = field(default_factory=dict)  # pooled steps sealed, awaiting their relay (relay.py)


def check_round_id(round_id: str) -> str:
    if not isinstance(round_id, str) or not ROUND_ID.fullmatch(round_id):
        raise CallError("secure aggregation: round must be 32 lower-case hex digits (16 random bytes)",
                        hint="the dsfed client draws it; other clients: secrets.token_hex(16)")
    return round_id


def new_round(rounds: dict[str, Round], round_id: str, *, pooled: bool = False) -> Round:
    """A fresh X25519 key pair for ``round_id`` in a session's rounds (a round is keyed once);
    ``pooled``: this site checks pooled releases on the pooled cells (signed in its key bundle)."""
    check_round_id(round_id)
    if round_id in rounds:
        raise CallError(f"secure aggregation round {round_id} already has keys in this session",
                        hint="draw a new round id")
    while len(rounds) >= MAX_ROUNDS_PER_SESSION:
        rounds.pop(next(iter(rounds)))
    private = X25519PrivateKey.generate()
    rounds[round_id] = Round(round_id, private, private.public_key().public_bytes(*_RAW), pooled=pooled)
    return rounds[round_id]


def key_bundle(site: str, identity: Ed25519PrivateKey, rnd: Round) -> dict[str, str]:
    """What a site publishes for a round: its name, X25519 public key, whether it checks pooled
    releases on pooled cells, and its signature over all three."""
    return {"site": site, "round": rnd.round_id, "key": _b64(rnd.public), "pooled": rnd.pooled,
            "signature": _b64(identity.sign(_signed_message(rnd.round_id, site, rnd.public, rnd.pooled)))}


def verify_roster(site: str, rnd: Round, roster: Any, peers: dict[str, Ed25519PublicKey], min_sites: int
                  ) -> dict[str, bytes]:
    """The roster's X25519 keys by site name, after every check of step 2 (module docstring)."""
    if not isinstance(roster, list) or not all(isinstance(e, dict) for e in roster):
        raise CallError("secure aggregation: the roster must be a list of {site, key, signature}",
                        hint="relay every site's secureKeyDS answer for the round, unchanged")
    keys: dict[str, bytes] = {}
    flags: dict[str, bool] = {}
    for entry in roster:
        name = entry.get("site")
        if not isinstance(name, str) or name in keys:
            raise CallError(f"secure aggregation: roster entry {name!r} is missing a name or repeated",
                            hint="relay every site's secureKeyDS answer for the round once, unchanged")
        public = _unb64(entry.get("key"), f"the key of {name}", 32)
        signature = _unb64(entry.get("signature"), f"the signature of {name}", 64)
        pooled = entry.get("pooled", False)
        if not isinstance(pooled, bool):
            raise CallError(f"secure aggregation: roster entry {name!r} has a 'pooled' flag that is not true/false",
                            hint="relay every site's secureKeyDS answer for the round once, unchanged")
        if name == site:
            if public != rnd.public or pooled != rnd.pooled:
                raise DisclosureRefusal(
                    "the roster carries another key under this site's name", rule="secure_aggregation.peers",
                    hint="relay every site's secureKeyDS answer unchanged")
        else:
            if name not in peers:
                raise DisclosureRefusal(
                    f"{name} {NOT_A_PEER}", rule="secure_aggregation.peers",
                    hint="a secure or pooled release needs every site to pin the others' identity keys "
                         "([federation] peers in each site config, docs/site-admin.md); ask the sites' governance, "
                         "or ask per site (secure=False)")
            try:
                peers[name].verify(signature, _signed_message(rnd.round_id, name, public, pooled))
            except InvalidSignature:
                raise DisclosureRefusal(
                    f"the key of {name} in the roster is not signed by {name}'s pinned identity key",
                    rule="secure_aggregation.peers",
                    hint="relay every site's secureKeyDS answer for this round unchanged") from None
        keys[name] = public
        flags[name] = pooled
    if site not in keys:
        raise CallError("secure aggregation: this site is not in the roster",
                        hint="include this site's secureKeyDS answer for the round in the roster")
    if len(keys) < min_sites:
        raise DisclosureRefusal(
            f"a secure sum over {len(keys)} sites; this site takes part in sums over at least {min_sites}",
            rule="secure_aggregation.min_sites", hint="add sites to the session")
    if rnd.peers is not None and tuple(sorted(keys)) != rnd.peers:
        raise DisclosureRefusal(
            "this round's roster changed; a round keeps the sites of its first secure call",
            rule="secure_aggregation.min_sites", hint="start a new session")
    rnd.peers = tuple(sorted(keys))
    rnd.pooled_peers = flags
    return keys


# --- fixed point and masks --------------------------------------------------------------------


def check_frac_bits(frac_bits: Any) -> int:
    if not isinstance(frac_bits, int) or isinstance(frac_bits, bool) or not 0 <= frac_bits <= MAX_FRAC_BITS:
        raise CallError(f"secure aggregation: frac_bits must be an integer in 0..{MAX_FRAC_BITS}",
                        hint="omit frac_bits for the default 24")
    return frac_bits


def encode_fixed(values: np.ndarray, frac_bits: int, n_sites: int) -> tuple[np.ndarray, int]:
    """:math:`\\mathrm{round}(v 2^f) \\bmod 2^{64}`, and how many values had to be clipped to keep
    the sum over ``n_sites`` sites inside the signed 64-bit range. The count travels masked with
    the values: a refusal here would tell the analyst which site holds a large value."""
    scaled = np.nan_to_num(np.rint(np.asarray(values, dtype=float) * 2.0**frac_bits), nan=np.inf)
    limit = np.floor(2.0**63 / n_sites) - 1024  # below the bound after float64 rounding
    clipped = int(np.count_nonzero(np.abs(scaled) > limit))
    return np.clip(scaled, -limit, limit).astype(np.int64).view(np.uint64), clipped


def _stream(shared: bytes, round_id: str, low: str, high: str, step: int, call: bytes, length: int) -> np.ndarray:
    info = b"dsfed mask v2\0" + low.encode() + b"\0" + high.encode() + b"\0" + step.to_bytes(8, "big") + call
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=bytes.fromhex(round_id), info=info).derive(shared)
    encryptor = Cipher(algorithms.ChaCha20(key, b"\0" * 16), mode=None).encryptor()
    return np.frombuffer(encryptor.update(b"\0" * (8 * length)), dtype="<u8").astype(np.uint64)


def call_digest(call: str, frac_bits: int) -> bytes:
    """What binds a step's masks to the call: SHA-256 of the call as received and the scale."""
    return hashlib.sha256(f"{frac_bits}\0{call}".encode()).digest()


def pair_secret(rnd: Round, public: bytes) -> bytes:
    """:math:`s_{ij} = \\mathrm{X25519}(sk_i, pk_j)`, computed once per peer key and round."""
    shared = rnd.shared.get(public)
    if shared is None:
        shared = rnd.shared[public] = rnd.private.exchange(X25519PublicKey.from_public_bytes(public))
    return shared


def mask(site: str, rnd: Round, keys: dict[str, bytes], step: int, call: bytes, length: int) -> np.ndarray:
    """:math:`\\sum_{j > i} r_{ij} - \\sum_{j < i} r_{ji} \\bmod 2^{64}` for this site *i*."""
    total = np.zeros(length, dtype=np.uint64)
    for name, public in keys.items():
        if name == site:
            continue
        shared = pair_secret(rnd, public)
        low, high = sorted((site, name))
        r = _stream(shared, rnd.round_id, low, high, step, call, length)
        total = total + r if site == low else total - r
    return total


def use_step(rnd: Round, step: Any) -> int:
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 2**63:
        raise CallError("secure aggregation: step must be a non-negative integer",
                        hint="number the secure calls of a round 1, 2, 3, ...")
    if step in rnd.used_steps:
        raise CallError(f"secure aggregation: step {step} of round {rnd.round_id} was already used",
                        hint="each secure call of a round takes a new step number")
    rnd.used_steps.add(step)
    return step


# --- result fields ------------------------------------------------------------------------------


def _field_array(value: Any, name: str) -> tuple[np.ndarray, dict[str, Any]]:
    """A result field as a flat float array and its layout: ``{"shape": [...]}`` for a number or
    a (nested) list of numbers, ``{"parts": [n1, n2, ...]}`` for a list of float64 vectors."""
    if isinstance(value, dict) and "f64" in value:
        arr = decode_f64(value)
        return arr, {"shape": [arr.size]}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "f64" in v for v in value):
        parts = [decode_f64(v) for v in value]
        return np.concatenate(parts), {"parts": [p.size for p in parts]}
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise CallError(f"secure aggregation: result field {name} is not a vector of numbers here",
                        hint="under these rules the function's result cannot be summed securely (e.g. exact "
                             "histograms with noise off); ask without the secure option") from None
    return arr.ravel(), {"shape": list(arr.shape)}


def masked_result(result: dict[str, Any], fields: tuple[str, ...], public: tuple[str, ...], *, site: str,
                  rnd: Round, keys: dict[str, bytes], step: int, frac_bits: int, call: str) -> dict[str, Any]:
    """The summable ``fields`` of a result, encoded and masked as one vector; ``public`` fields
    (determined by the request, e.g. coefficient names) as they are; everything else dropped."""
    check_frac_bits(frac_bits)
    arrays, layouts, clipped = [], {}, 0
    fields = tuple(name for name in fields if name in result)  # e.g. totals only when asked for
    for name in fields:
        arr, layouts[name] = _field_array(result[name], name)
        encoded_field, n_clipped = encode_fixed(arr, frac_bits, len(keys))
        arrays.append(encoded_field)
        clipped += n_clipped
    arrays.append(np.array([clipped], dtype=np.uint64))  # the last word: values clipped here (masked)
    encoded = np.concatenate(arrays)
    masked = encoded + mask(site, rnd, keys, step, call_digest(call, frac_bits), encoded.size)
    return {
        "secure": {"round": rnd.round_id, "step": step, "sites": sorted(keys), "frac_bits": frac_bits,
                   "fields": list(fields), "layout": layouts,
                   "masked": _b64(masked.astype("<u8").tobytes())},
        "public": {name: result[name] for name in public if name in result},
    }
