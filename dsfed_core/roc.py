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
