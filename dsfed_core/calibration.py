"""Calibration statistics of grouped predictions, computed alike by the analyst (from released group
sums) and by the sites (from pooled group sums they keep to themselves, ``decileGroupsDS``)."""

from __future__ import annotations

import numpy as np


def hosmer_lemeshow(n: np.ndarray, observed: np.ndarray, expected: np.ndarray) -> float:
    """:math:`C = \\sum_g (O_{1g}-E_{1g})^2/E_{1g} + (O_{0g}-E_{0g})^2/E_{0g}` over groups of ``n``
    records with ``observed`` events and ``expected`` = the sum of their predictions (Hosmer &
    Lemeshow 1980; Wu et al. (2012); R's ``hoslem.test``).

    One group of 20 with 5 events where 4 were expected: :math:`1/4 + 1/16 = 0.3125`:

    >>> hosmer_lemeshow(np.array([20.0]), np.array([5.0]), np.array([4.0]))
    0.3125
    """
    n, o1, e1 = (np.asarray(v, dtype=float) for v in (n, observed, expected))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sum((o1 - e1) ** 2 / e1 + ((n - o1) - (n - e1)) ** 2 / (n - e1)))


def calibration_errors(n: np.ndarray, observed: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """ECE and MCE over groups (Huang 2020, eq. 3.6): the share-weighted mean and the largest of
    :math:`|O_{1g} - E_{1g}| / n_g`.

    Gaps 1/10 and 6/30 in groups of 10 and 30 records: ECE = 0.25 * 0.1 + 0.75 * 0.2 = 0.175, MCE 0.2:

    >>> [round(v, 12) for v in calibration_errors(np.array([10.0, 30.0]), np.array([3.0, 6.0]),
    ...                                           np.array([2.0, 12.0]))]
    [0.175, 0.2]
    """
    n, o1, e1 = (np.asarray(v, dtype=float) for v in (n, observed, expected))
    gap = np.abs(o1 - e1) / n
    return float(np.sum(n / n.sum() * gap)), float(gap.max())
