"""The analyst's side of secure aggregation: relay the sites' signed keys, add the masked
vectors, read the sum (protocol: ``dsfed_server.disclosure.secure_sum``).

The analyst never holds a key that opens a mask: each site's answer is uniform on
:math:`\\mathbb{Z}_{2^{64}}` alone, and only the sum over all sites of a round, in which
the pairwise masks cancel, decodes to numbers. If any site fails during a secure call,
the call raises and nothing is decoded (a partial sum is still masked).
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np


def new_round_id() -> str:
    """16 random bytes as hex: a round's id (sites key a round once per session)."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class SecureSum:
    r"""The sum over sites of an aggregate's additive fields; no site's own contribution.

    ``values[name]`` is a float (a scalar field), an array, or a list of arrays (a field
    sent as a list of vectors, e.g. the levels of a histogram); ``public`` holds each
    site's request-determined fields (e.g. coefficient names, its noise sd); ``shares`` is what
    the analyst received from each site: its masked vector, uniform on :math:`\mathbb{Z}_{2^{64}}`.
    """

    function: str
    values: dict[str, Any]
    public: dict[str, dict[str, Any]]
    sites: tuple[str, ...]
    frac_bits: int
    shares: dict[str, np.ndarray]
    clipped: int = 0  # values the sites had to clip to the fixed-point range (summed: not which site)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def __repr__(self) -> str:
        return f"SecureSum({self.function}, fields={list(self.values)}, sites={list(self.sites)})"


def _masked(answer: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(answer["masked"], validate=True), dtype="<u8").astype(np.uint64)


def unmask_sum(function: str, answers: dict[str, dict[str, Any]]) -> SecureSum:
    """Add the sites' masked vectors modulo :math:`2^{64}` and decode the fixed-point sum.

    Every site must have masked the same fields with the same layout for the same sites, or
    the masks would not cancel; anything else raises instead of returning a wrong sum. The last
    word, the number of values the sites clipped, also checks the sum: if the masks did not cancel
    (sites that ran different calls), it is a random 64-bit number and almost surely out of range.
    """
    shares = {site: a["secure"] for site, a in answers.items()}
    first = next(iter(shares.values()))
    for site, share in shares.items():
        for key in ("round", "step", "sites", "frac_bits", "fields", "layout"):
            if share[key] != first[key]:
                raise ValueError(f"secure sum of {function}: {site} sent another {key} than the other sites; "
                                 "nothing was decoded")
    if sorted(shares) != sorted(first["sites"]):
        raise ValueError(f"secure sum of {function}: answers from {sorted(shares)} for a round over "
                         f"{first['sites']}; nothing was decoded")
    masked = {site: _masked(share) for site, share in shares.items()}
    total = np.zeros_like(masked[next(iter(masked))])
    for vector in masked.values():
        total = total + vector  # modulo 2^64
    frac_bits = int(first["frac_bits"])
    flat = total.view(np.int64).astype(float) / 2.0**frac_bits
    values: dict[str, Any] = {}
    offset = 0
    for name in first["fields"]:
        layout = first["layout"][name]
        if "parts" in layout:
            parts = []
            for size in layout["parts"]:
                parts.append(flat[offset:offset + size])
                offset += size
            values[name] = parts
        else:
            size = int(np.prod(layout["shape"], dtype=int))
            arr = flat[offset:offset + size].reshape(layout["shape"])
            values[name] = float(arr) if arr.ndim == 0 else arr
            offset += size
    clipped = int(total[-1:].view(np.int64)[0])  # the last word: values clipped at the sites, summed
    if not 0 <= clipped <= len(shares) * (total.size - 1):
        # a count out of range is what a sum whose masks did not cancel looks like (odds 2^-50)
        raise ValueError(f"secure sum of {function}: the sites' answers do not add up (their masks did not "
                         "cancel: the sites did not all run the same call on symbols made the same way); "
                         "nothing was decoded")
    return SecureSum(function, values, {s: a.get("public", {}) for s, a in answers.items()},
                     tuple(first["sites"]), frac_bits, masked, clipped)
