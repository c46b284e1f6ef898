"""The pooled remainder check's search against remainders built to be there (``differencing.pooled_problem_cells``).

Each case knows its remainder: a site of 40 records, all in A; R, 1 to q - 1 of them; A less R covered by two cells B
and C that overlap, and their intersection (so ``A - B - C + (B and C)`` is R: inclusion-exclusion, Chin & Ozsoyoglu
1982), or by two or three disjoint cells; and ``distractors`` large cells, each holding one record of R and about
half or more of A less R, released before. One of the family comes last; the check must refuse it. A distractor
taken by a greedy pass grows the union over a record of R, and no combination of the cells then counts that union.
Counted per setting: one pass (no cell dropped, the check before), and the shipped search.
"""

from __future__ import annotations

import numpy as np
import pytest

from dsfed_server.disclosure import differencing
from dsfed_server.disclosure.differencing import PooledCell, pooled_problem_cells

N, Q = 40, 5  # records at the site; the shipped subset_min_difference
CASES = 100


def _cell(mask: np.ndarray) -> PooledCell:
    """The site's records of a pooled cell, the pooled count its own (one site, or the others' alike)."""
    return PooledCell(np.packbits(mask), int(mask.sum()))


def _mask(records: np.ndarray) -> np.ndarray:
    mask = np.zeros(N, bool)
    mask[records] = True
    return mask


def _case(rng: np.random.Generator, distractors: int, union: bool
          ) -> tuple[list[np.ndarray], np.ndarray, list[np.ndarray], int]:
    """The earlier cells (A first), the last cell, the family (the last among them) and the size of R."""
    order = rng.permutation(N)
    size = int(rng.integers(1, Q))
    remainder, rest = order[:size], order[size:]
    if union:
        half = len(rest) // 2
        b, c = _mask(rest[:half + 4]), _mask(rest[half - 4:])
        family = [b, c, b & c]
    else:
        cuts = np.sort(rng.choice(np.arange(4, len(rest) - 3), int(rng.integers(1, 3)), replace=False))
        family = [_mask(part) for part in np.split(rest, cuts)]
    extra = [_mask(np.concatenate([rng.choice(remainder, 1),
                                   rng.choice(rest, int(rng.integers(len(rest) // 2, len(rest) - 5)), replace=False)]))
             for _ in range(distractors)]
    last = int(rng.integers(len(family)))
    earlier = [np.ones(N, bool), *(f for k, f in enumerate(family) if k != last), *extra]
    return earlier, family[last], family, size


def _refused(distractors: int, union: bool, seed: int) -> int:
    rng = np.random.default_rng(seed)
    refused = 0
    for _ in range(CASES):
        earlier, last, family, size = _case(rng, distractors, union)
        assert 0 < size < Q and N - int(np.logical_or.reduce(family).sum()) == size  # the family leaves R alone
        refused += pooled_problem_cells([_cell(m) for m in earlier], [_cell(last)], Q) == [0]
    return refused


@pytest.mark.parametrize("union", [True, False], ids=["overlapping", "disjoint"])
@pytest.mark.parametrize("distractors", [0, 1, 2, 3])
def test_every_constructed_remainder_is_refused(distractors, union, monkeypatch):
    shipped = _refused(distractors, union, seed=10 + distractors)
    monkeypatch.setattr(differencing, "REMAINDER_DROPS", 0)
    one_pass = _refused(distractors, union, seed=10 + distractors)
    print(f"{'overlapping' if union else 'disjoint'} family, {distractors} distractor(s): refused {shipped} of "
          f"{CASES} (one greedy pass: {one_pass})")
    assert shipped == CASES
    if union and distractors:  # the check before missed most: what the search is for
        assert one_pass < CASES // 2
