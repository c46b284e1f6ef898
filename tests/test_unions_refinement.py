"""The cells of the common refinement of pooled releases of one column (:mod:`dsfed_server.disclosure.unions`).

Each release is a set of cuts on one site's values; its cells are the intervals between them. Two releases over the
same records give the records below every cut of either, so every interval between two cuts of any of them, and
every union of such intervals, has a known pooled count. The reference here works on the values and the cuts alone
(which interval holds each record), independently of the row sets the site's functions read.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from dsfed_server.disclosure.unions import ORDERED, Layout, across, breaking_cuts, labels, layout, refinement

N = 60
GRID = np.round(np.linspace(0.05, 0.95, 19), 2)  # where the cuts fall


def _release(x: np.ndarray, cuts: list[float]) -> Layout:
    """A pooled release at ``cuts`` of the values ``x`` (one site; the pooled counts are its own)."""
    cell = np.searchsorted(np.sort(cuts), x, side="right")
    cells = [np.packbits(cell == k) for k in range(len(cuts) + 1)]
    return Layout(ORDERED, *layout(cells, [int(np.count_nonzero(cell == k)) for k in range(len(cuts) + 1)], x.size))


def _atom(x: np.ndarray, cuts: set[float]) -> np.ndarray:
    """Per record, the interval between the cuts of all releases that holds it."""
    return np.searchsorted(np.array(sorted(cuts)), x, side="right")


def _whole(member: np.ndarray, part: np.ndarray) -> list[int] | None:
    """The parts (per record) ``member`` (boolean) holds every record of, if it holds no record of another."""
    held = sorted(set(part[member].tolist()))
    return held if all(member[part == k].all() for k in held) else None


def _one_release_stands_for(member: np.ndarray, x: np.ndarray, cuts: list[float]) -> bool:
    """Whether ``member`` is one cell of the release at ``cuts``, a run of its cells that each hold records, or all
    of its records."""
    cell = np.searchsorted(np.sort(cuts), x, side="right")
    held = _whole(member, cell)
    if held is None:
        return False
    return len(held) == 1 or held == list(range(held[0], held[-1] + 1)) or member.all()


cut_sets = st.lists(st.sampled_from(GRID.tolist()), min_size=1, max_size=4, unique=True)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), releases=st.lists(cut_sets, min_size=2, max_size=3),
       lower=st.sampled_from(GRID.tolist()), upper=st.sampled_from(GRID.tolist()), fold=st.booleans())
def test_a_union_across_releases_is_found_where_the_cuts_make_one(seed, releases, lower, upper, fold):
    """A member between two grid values (or, ``fold``, outside them: a cell of a fold) is found exactly where it is
    one or more non-empty intervals between the releases' cuts, not all of them, that no one release stands for."""
    x = np.random.default_rng(seed).uniform(0, 1, N)
    member = (x >= min(lower, upper)) & (x < max(lower, upper))
    if fold:
        member = ~member
    atoms = _atom(x, set().union(*map(set, releases)))
    held = _whole(member, atoms)
    expected = (held is not None and 0 < len(held) < np.unique(atoms).size
                and not any(_one_release_stands_for(member, x, cuts) for cuts in releases))
    found = across(np.packbits(member), refinement([_release(x, cuts) for cuts in releases]))
    assert found == expected


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), earlier=cut_sets, latest=cut_sets, picked=st.sets(st.integers(0, 8), min_size=1))
def test_the_cuts_whose_merger_breaks_a_union_are_those_between_its_intervals_and_others(seed, earlier, latest,
                                                                                          picked):
    """A union of intervals of the refinement of an earlier release and the latest: every cut of the latest whose
    drop alone breaks it (an interval between the remaining cuts then holds records of the union and records outside
    it) is named on its own, and every run of cuts named breaks it when dropped together."""
    x = np.random.default_rng(seed).uniform(0, 1, N)
    atoms = _atom(x, set(earlier) | set(latest))
    member = np.isin(atoms, sorted(picked))
    latest = sorted(latest)

    def breaks(dropped: set[int]) -> bool:
        kept = [cut for j, cut in enumerate(latest) if j not in dropped]
        return _whole(member, _atom(x, set(earlier) | set(kept))) is None

    cell_of = labels([np.packbits(np.searchsorted(latest, x, side="right") == k) for k in range(len(latest) + 1)], N)
    named = breaking_cuts(np.packbits(member), refinement([_release(x, earlier)]), cell_of)
    assert [run[0] for run in named if len(run) == 1] == [j for j in range(len(latest)) if breaks({j})]
    assert all(breaks(set(run)) for run in named)


def test_cells_of_two_releases_over_two_subsets_together_are_a_union_across_them():
    """Thresholds at 0.5 pooled over the men and over the women: the men below 0.5 with the women at or above it is a
    union of a cell of each (the two pooled cells summed); the men below 0.5 alone, or all the men, is one release's
    cell or its whole (each checked at its release), and all the records the site's total."""
    rng = np.random.default_rng(1)
    x, men = rng.uniform(0, 1, N), rng.uniform(0, 1, N) < 0.5

    def over(subset: np.ndarray) -> Layout:
        cell = np.where(subset, (x >= 0.5).astype(int), -1)
        cells = [np.packbits(cell == k) for k in (0, 1)]
        return Layout(ORDERED, *layout(cells, [int(np.count_nonzero(cell == k)) for k in (0, 1)], N))

    refined = refinement([over(men), over(~men)])
    assert across(np.packbits((men & (x < 0.5)) | (~men & (x >= 0.5))), refined)
    assert not across(np.packbits(men & (x < 0.5)), refined)
    assert not across(np.packbits(men), refined)
    assert not across(np.packbits(np.ones(N, dtype=bool)), refined)  # the site's total, given without the cells
