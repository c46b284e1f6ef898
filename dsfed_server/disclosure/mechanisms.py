"""Differential-privacy mechanisms, with noise the analyst cannot average away.

:class:`AnalyticGaussian` calibrates the Gaussian mechanism exactly (Balle &
Wang 2018, "Improving the Gaussian Mechanism for Differential Privacy",
Theorem 8): the mechanism :math:`M(x) = f(x) + N(0, \\sigma^2)` with
:math:`\\ell_2`-sensitivity :math:`\\Delta` is :math:`(\\varepsilon, \\delta)`-DP iff

.. math:: \\Phi\\Big(\\frac{\\Delta}{2\\sigma} - \\frac{\\varepsilon\\sigma}{\\Delta}\\Big)
          - e^{\\varepsilon}\\,\\Phi\\Big(-\\frac{\\Delta}{2\\sigma} - \\frac{\\varepsilon\\sigma}{\\Delta}\\Big)
          \\le \\delta ,

and the smallest such :math:`\\sigma` is the root of equality (the left side
decreases in :math:`\\sigma`). Schalk et al. (2024) use this mechanism for the noisy scores.

Noise is drawn from a generator seeded by HMAC-SHA256 of the site's secret and
the query's content (:func:`seeded_rng`): the same query on the same data gives
the same noise, so repeating it and averaging gains nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass

import numpy as np
from scipy import special


def privacy_loss_delta(sigma: float, *, epsilon: float, sensitivity: float) -> float:
    """:math:`\\delta(\\sigma)` of the Gaussian mechanism (Balle & Wang 2018, Theorem 8)."""
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    return float(special.ndtr(a) - math.exp(epsilon + special.log_ndtr(b)))


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest :math:`\\sigma` with :math:`\\delta(\\sigma) \\le \\delta` (root found by Brent's method)."""
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")

    def gap(log_sigma: float) -> float:
        return privacy_loss_delta(math.exp(log_sigma), epsilon=epsilon, sensitivity=sensitivity) - delta

    lo, hi = math.log(sensitivity) - 30.0, math.log(sensitivity) + 30.0
    if gap(lo) <= 0:  # delta so large that (almost) no noise is needed
        return math.exp(lo)
    from scipy.optimize import brentq  # noqa: PLC0415  (0.2 s to import: not on the site's start-up path)

    root = brentq(gap, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    return math.exp(root)


@dataclass(frozen=True)
class AnalyticGaussian:
    """The analytic Gaussian mechanism for fixed (epsilon, delta, sensitivity)."""

    epsilon: float
    delta: float
    sensitivity: float
    # this site's share of the noise variance: 1, or 1/h under secure aggregation, where the
    # sum over sites carries the rest (rules: secure_aggregation.honest_sites)
    share: float = 1.0

    @property
    def calibrated_sigma(self) -> float:
        """The noise sd that gives (epsilon, delta) at this sensitivity (Theorem 8)."""
        return analytic_gaussian_sigma(epsilon=self.epsilon, delta=self.delta, sensitivity=self.sensitivity)

    @property
    def sigma(self) -> float:
        """The sd of the noise this site adds: the calibrated sd times sqrt(share)."""
        return self.calibrated_sigma * math.sqrt(self.share)

    def variance(self) -> float:
        return self.sigma**2

    def randomise(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.asarray(values, dtype=float) + rng.normal(0.0, self.sigma, size=np.shape(values))


def keyed(secret: bytes, *parts: bytes | str) -> hmac.HMAC:
    """HMAC-SHA256 under ``secret`` over ``parts`` (each after its length), open for more: a long common
    prefix of many seeds is hashed once and copied (:func:`extended`)."""
    return extended(hmac.new(secret, digestmod=hashlib.sha256), *parts)


def extended(mac: hmac.HMAC, *parts: bytes | str) -> hmac.HMAC:
    """A copy of ``mac`` over ``parts`` more; ``mac`` itself unchanged."""
    mac = mac.copy()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        mac.update(len(data).to_bytes(8, "big"))
        mac.update(data)
    return mac


def rng_of(mac: hmac.HMAC) -> np.random.Generator:
    """A generator seeded by the digest of ``mac``."""
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(mac.digest(), "big")))


def seeded_rng(secret: bytes, *parts: bytes | str) -> np.random.Generator:
    """A generator seeded by HMAC-SHA256(secret, parts): same site, same query -> same noise."""
    return rng_of(keyed(secret, *parts))


def content_digest(*arrays: np.ndarray) -> bytes:
    """SHA-256 of the values a query releases noise about (not of the names used to reach them)."""
    digest = hashlib.sha256()
    for array in arrays:
        arr = np.ascontiguousarray(np.asarray(array, dtype=float))
        digest.update(arr.shape[0].to_bytes(8, "big"))
        digest.update(arr.tobytes())
    return digest.digest()
