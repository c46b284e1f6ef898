"""Closed forms of the binormal ROC model, shared by the analyst's estimators and the pooled reference."""

from __future__ import annotations

import numpy as np
from scipy import special


def binormal_auc(a: float, b: float) -> float:
    """The area under the binormal ROC curve :math:`ROC(t) = \\Phi(a + b\\,\\Phi^{-1}(t))`:
    :math:`AUC = \\Phi(a / \\sqrt{1 + b^2})` (Schalk et al. 2024, the ROC-GLM's AUC; Pepe 2003, §5.2).

    >>> round(binormal_auc(1.0, 1.0), 6)  # Phi(1 / sqrt(2)) = Phi(0.707107)
    0.76025
    """
    return float(special.ndtr(a / np.sqrt(1.0 + b * b)))


def roc_glm_rows(pv: np.ndarray, thresholds: int, weights: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Schalk et al.'s (2024) ROC-GLM intermediate data from placement values ``pv`` (each of weight one, or
    ``weights``): thresholds :math:`t_j = j/(n_T+1)`, responses :math:`u_{ij} = 1(PV_i \\le t_j)` aggregated per
    threshold as rows ``(u, x = \\Phi^{-1}(t_j), w)``, ``u`` alternating 0 and 1; ``w`` the weight of the
    placement values above :math:`t_j` (``u = 0``) and at or below it (``u = 1``).

    >>> u, x, w = roc_glm_rows(np.array([0.2, 0.6]), 1)  # t = 0.5: one above, one at or below
    >>> u.tolist(), w.tolist()
    ([0, 1], [1.0, 1.0])
    """
    t = np.arange(1, thresholds + 1) / (thresholds + 1)
    order = np.argsort(pv, kind="stable")
    weight = np.ones(pv.size) if weights is None else np.asarray(weights, dtype=float)[order]
    below = np.concatenate([[0.0], np.cumsum(weight)])[np.searchsorted(pv[order], t, side="right")]
    return (np.tile([0, 1], thresholds).astype(np.int64), np.repeat(special.ndtri(t), 2),
            np.column_stack([weight.sum() - below, below]).ravel())
