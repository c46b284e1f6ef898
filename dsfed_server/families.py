"""GLM families as R's ``stats`` package defines them, for the site's share of IRLS.

Each family gives R's ``linkinv``, ``mu.eta``, ``variance``, ``dev.resids``
and ``mustart`` with R's numerical guards (``DBL_EPSILON`` clamps), so that
the distributed fit takes R's ``glm.fit`` path step by step and lands on R's
coefficients, not merely near them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

from dsfed_core.errors import CallError

EPS = np.finfo(float).eps
_PROBIT_THRESH = -special.ndtri(EPS)


@dataclass(frozen=True)
class Family:
    name: str
    link: str
    linkfun: Callable[[np.ndarray], np.ndarray]
    linkinv: Callable[[np.ndarray], np.ndarray]
    mu_eta: Callable[[np.ndarray], np.ndarray]
    variance: Callable[[np.ndarray], np.ndarray]
    dev_resids: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    mustart: Callable[[np.ndarray, np.ndarray], np.ndarray]
    validate_y: Callable[[np.ndarray], str | None]


_THRESH = 30.0  # R's C_logit_linkinv / C_logit_mu_eta cut-offs


def _logit_inv(eta: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        tmp = np.where(eta < -_THRESH, EPS, np.where(eta > _THRESH, 1 / EPS, np.exp(np.clip(eta, -_THRESH, _THRESH))))
    return tmp / (1 + tmp)


def _logit_mu_eta(eta: np.ndarray) -> np.ndarray:
    e = np.exp(np.clip(eta, -_THRESH, _THRESH))
    return np.where(np.abs(eta) > _THRESH, EPS, e / (1 + e) ** 2)


def _probit_inv(eta: np.ndarray) -> np.ndarray:
    return special.ndtr(np.clip(eta, -_PROBIT_THRESH, _PROBIT_THRESH))


def _probit_mu_eta(eta: np.ndarray) -> np.ndarray:
    return np.maximum(np.exp(-eta**2 / 2.0) / np.sqrt(2 * np.pi), EPS)  # the standard normal density


def _ylogy(y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y > 0, y * np.log(y / mu), 0.0)


def _binomial_dev(y: np.ndarray, mu: np.ndarray, w: np.ndarray) -> np.ndarray:
    """R's ``binomial_dev_resids`` for 0/1 outcomes: only one of its two terms is non-zero,
    ``1 * log(1 / mu)`` or ``1 * log(1 / (1 - mu))``, computed with R's arithmetic."""
    return 2 * w * np.log(1.0 / np.where(y > 0, mu, 1 - mu))


def _binary_y(y: np.ndarray) -> str | None:
    return None if np.all((y == 0) | (y == 1)) else "binomial outcome must be 0 or 1"


def _count_y(y: np.ndarray) -> str | None:
    return None if np.all(y >= 0) else "poisson outcome must be non-negative"


_LINKS = {
    "logit": (special.logit, _logit_inv, _logit_mu_eta),
    "probit": (special.ndtri, _probit_inv, _probit_mu_eta),
    "log": (np.log, lambda eta: np.maximum(np.exp(eta), EPS), lambda eta: np.maximum(np.exp(eta), EPS)),
    "identity": (lambda mu: mu, lambda eta: eta, lambda eta: np.ones_like(eta)),
}

_FAMILIES = {
    "binomial": ("logit", ("logit", "probit"), lambda mu: mu * (1 - mu), _binomial_dev,
                 lambda y, w: (w * y + 0.5) / (w + 1), _binary_y),
    "poisson": ("log", ("log", "identity"), lambda mu: mu,
                lambda y, mu, w: 2 * w * (_ylogy(y, mu) - (y - mu)), lambda y, w: y + 0.1, _count_y),
    "gaussian": ("identity", ("identity", "log"), lambda mu: np.ones_like(mu),
                 lambda y, mu, w: w * (y - mu) ** 2, lambda y, w: y.astype(float), lambda y: None),
}

# |eta| beyond which R's linkinv or mu.eta clamps (logit: C_logit_linkinv's THRESH; probit:
# -qnorm(DBL_EPSILON); log: exp(eta) < DBL_EPSILON): past it a fit's parts stop being smooth in
# eta and a linear predictor can act as a step. The identity link never clamps.
CLAMPED_BEYOND: dict[str, float | None] = {"logit": _THRESH, "probit": float(_PROBIT_THRESH),
                                           "log": float(-np.log(EPS)), "identity": None}

FAMILY_NAMES = tuple(_FAMILIES)
LINK_NAMES = tuple(_LINKS)


def family(name: str, link: str | None = None) -> Family:
    """R's ``binomial()``, ``poisson()``, ``gaussian()`` with the given (or canonical) link."""
    if name not in _FAMILIES:
        raise CallError(f"family {name!r} is not one of {', '.join(FAMILY_NAMES)}")
    canonical, allowed, variance, dev, mustart, validate = _FAMILIES[name]
    link = link or canonical
    if link not in allowed:
        raise CallError(f"family {name} takes link {' or '.join(allowed)}, not {link!r}")
    linkfun, linkinv, mu_eta = _LINKS[link]
    return Family(name, link, linkfun, linkinv, mu_eta, variance, dev, mustart, validate)
