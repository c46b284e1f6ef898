"""Pooled reference computations in numpy/scipy, on all records in one place.

What a single analyst with every record would compute. The demo prints these
beside the distributed results, and the benchmark times them against dsfed and
pooled R. They share no code with the distributed path but the binormal AUC's
closed form (:func:`dsfed_core.roc.binormal_auc`). Site tooling: the client does
not ship it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dsfed_core.roc import binormal_auc
from scipy import special, stats


def _midranks(x: np.ndarray) -> np.ndarray:
    return stats.rankdata(x, method="average")


def auc_delong(y: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Empirical AUC and DeLong variance by midranks (Sun & Xu 2014, fast DeLong)."""
    pos, neg = p[y == 1], p[y == 0]
    m, n = pos.size, neg.size
    tz = _midranks(np.concatenate([pos, neg]))
    tx, ty = _midranks(pos), _midranks(neg)
    auc = (tz[:m].sum() - m * (m + 1) / 2) / (m * n)
    v10 = (tz[:m] - tx) / n
    v01 = 1 - (tz[m:] - ty) / m
    return float(auc), float(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)


def _irls(X: np.ndarray, y: np.ndarray, w: np.ndarray, link: str, tol: float = 1e-10) -> np.ndarray:
    beta = np.zeros(X.shape[1])
    for _ in range(100):
        eta = X @ beta
        if link == "probit":
            mu, d = stats.norm.cdf(eta), stats.norm.pdf(eta)
        else:
            mu = special.expit(eta)
            d = mu * (1 - mu)
        mu = np.clip(mu, 1e-15, 1 - 1e-15)
        weight = w * d * d / (mu * (1 - mu))
        z = eta + (y - mu) / np.maximum(d, 1e-300)
        new = np.linalg.solve((X * weight[:, None]).T @ X, (X * weight[:, None]).T @ z)
        if np.max(np.abs(new - beta)) < tol:
            return new
        beta = new
    return beta


def roc_glm(y: np.ndarray, p: np.ndarray, n_thresholds: int = 99) -> tuple[float, float, float]:
    """Pooled ROC-GLM (Pepe 2003; Schalk et al. 2024): probit of u = 1(PV <= t) on Phi^-1(t), weighted."""
    neg = np.sort(p[y == 0])
    pv = (neg.size - np.searchsorted(neg, p[y == 1], side="right")) / neg.size
    t = np.arange(1, n_thresholds + 1) / (n_thresholds + 1)
    ones = np.searchsorted(np.sort(pv), t, side="right").astype(float)
    x = np.repeat(stats.norm.ppf(t), 2)
    u = np.tile([0.0, 1.0], n_thresholds)
    w = np.column_stack([pv.size - ones, ones]).ravel()
    a, b = _irls(np.column_stack([np.ones_like(x), x]), u, w, "probit")
    return float(a), float(b), binormal_auc(float(a), float(b))


def hosmer_lemeshow(y: np.ndarray, p: np.ndarray, g: int = 10, kind: str = "C") -> tuple[float, int]:
    """hoslem.test's C (type-7 quantile breaks, unique, include.lowest) or H (equal-width bins)."""
    breaks = np.unique(np.quantile(p, np.linspace(0, 1, g + 1))) if kind == "C" else np.arange(g + 1) / g
    idx = np.clip(np.searchsorted(breaks, p, side="left") - 1, 0, breaks.size - 2)
    n = np.bincount(idx, minlength=breaks.size - 1).astype(float)
    o = np.bincount(idx, weights=y, minlength=breaks.size - 1)
    e = np.bincount(idx, weights=p, minlength=breaks.size - 1)
    keep = n > 0
    n, o, e = n[keep], o[keep], e[keep]
    statistic = float(np.sum((o - e) ** 2 / e + ((n - o) - (n - e)) ** 2 / (n - e)))
    return statistic, int(keep.sum() - 2)


def ece_mce(y: np.ndarray, p: np.ndarray, g: int = 10) -> tuple[float, float]:
    breaks = np.unique(np.quantile(p, np.linspace(0, 1, g + 1)))
    idx = np.clip(np.searchsorted(breaks, p, side="left") - 1, 0, breaks.size - 2)
    n = np.bincount(idx, minlength=breaks.size - 1).astype(float)
    keep = n > 0
    gap = np.abs(np.bincount(idx, weights=y - p, minlength=breaks.size - 1)[keep] / n[keep])
    return float(np.sum(n[keep] / n.sum() * gap)), float(gap.max())


def suite(y: np.ndarray, p: np.ndarray, *, n_bins: int = 10, g: int = 10) -> dict[str, Any]:
    """Every estimator of the validation suite on pooled data."""
    y = np.asarray(y, dtype=float)
    p = np.asarray(p, dtype=float)
    auc, var = auc_delong(y, p)
    a, b, auc_glm = roc_glm(y, p)
    r = y - p
    finite = (p > 0) & (p < 1)
    lp = special.logit(p[finite])
    intercept, slope = _irls(np.column_stack([np.ones_like(lp), lp]), y[finite], np.ones_like(lp), "logit")
    edges = np.arange(n_bins + 1) / n_bins
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, n_bins - 1)
    counts = np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        curve = np.bincount(idx, weights=y, minlength=n_bins) / counts
    hl_c, df_c = hosmer_lemeshow(y, p, g, "C")
    hl_h, df_h = hosmer_lemeshow(y, p, g, "H")
    ece, mce = ece_mce(y, p, g)
    return {
        "auc": auc, "auc_variance": var, "roc_glm_a": a, "roc_glm_b": b, "roc_glm_auc": auc_glm,
        "brier": float(np.mean(r * r)),
        "spiegelhalter_z": float(np.dot(r, 1 - 2 * p) / np.sqrt(np.sum((1 - 2 * p) ** 2 * p * (1 - p)))),
        "calibration_intercept": float(intercept), "calibration_slope": float(slope),
        "calibration_curve": curve.tolist(), "hl_c": hl_c, "hl_c_df": df_c, "hl_h": hl_h, "hl_h_df": df_h,
        "ece": ece, "mce": mce,
    }
