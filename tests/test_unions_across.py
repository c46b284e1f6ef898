"""``unions.union_across`` and ``unions.thin_part`` against set arithmetic on record numbers: which row sets are a
union of cells of two or more pooled releases and of no one release's, and which part of such a union makes another
site's share of it thin (docs/governance.md, "A union of cells of two or more pooled releases")."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dsfed_server.disclosure.differencing import PooledCell, packed_set
from dsfed_server.disclosure.unions import CATEGORIES, ORDERED, ReleaseCells, thin_part, union_across

N = 40


def _packed(records: set[int]) -> np.ndarray:
    rows = np.zeros(N, dtype=bool)
    rows[list(records)] = True
    return packed_set(rows)


def _release(cells: list[set[int]], kind: str = ORDERED) -> ReleaseCells:
    return ReleaseCells(kind, [PooledCell(_packed(c), 10 + len(c)) for c in cells])


MEN = [set(range(0, 4)), set(range(4, 8)), set(range(8, 12)), set(range(12, 16))]  # four bins of the men
WOMEN = [set(range(20, 24)), set(range(24, 28)), set(range(28, 32)), set(range(32, 36))]  # and of the women


def test_a_bin_of_the_men_and_one_of_the_women_is_a_union_across_the_two_releases():
    member = _packed(MEN[3] | WOMEN[0])
    assert union_across(member, [_release(MEN), _release(WOMEN)]) == [(3,), (0,)]


def test_a_row_set_holding_part_of_a_cell_is_no_union():
    member = _packed(MEN[3] | {20, 21})
    assert union_across(member, [_release(MEN), _release(WOMEN)]) is None


def test_a_row_set_one_release_makes_up_is_left_to_that_releases_check():
    # its records in no cell (38, 39: an outcome missing) are left out, as union_of_cells leaves them
    assert union_across(_packed(MEN[1] | MEN[3] | {38, 39}), [_release(MEN), _release(WOMEN)]) is None
    assert union_across(_packed(MEN[3] | WOMEN[0]), [_release(MEN), _release(MEN[3:] + [WOMEN[0]])]) is None


def test_releases_taken_whole_are_a_sum_of_totals():
    men, women = _release(MEN), _release(WOMEN)
    assert union_across(_packed(set().union(*MEN, *WOMEN)), [men, women]) is None
    assert union_across(_packed(set().union(*MEN, WOMEN[1])), [men, women]) == [(0, 1, 2, 3), (1,)]


def test_a_release_the_others_make_up_without_is_not_needed():
    releases = [_release(WOMEN), _release(MEN), _release(WOMEN)]  # the women's bins released twice
    member = _packed(MEN[3] | WOMEN[0])
    assert union_across(member, releases) == [(0,), (3,), (0,)]
    assert union_across(member, releases, needed=0) is None
    assert union_across(member, releases, needed=1) == [(0,), (3,), (0,)]
    assert union_across(_packed(MEN[3]), releases, needed=0) is None  # no cell of the women's in it


def test_the_thin_part_of_a_union_across_releases():
    men, women = _release(MEN), _release(WOMEN)
    run, apart = [(2, 3), (0,)], [(0, 3), (0,)]  # the men's run of bins 2 and 3, or bins 0 and 3 apart
    thin_bin = _packed(MEN[3])
    # a run that was not thin holds 0 or q or more of the other site's records, whatever its bins held
    assert thin_part(run, [men, women], [thin_bin]) is None
    thin_run = _packed(MEN[2] | MEN[3])
    assert np.array_equal(thin_part(run, [men, women], [thin_bin, thin_run]), thin_run)
    # bins apart are no span: a thin bin in them is enough
    assert np.array_equal(thin_part(apart, [men, women], [thin_bin]), thin_bin)
    # a thin set outside the union
    assert thin_part(run, [men, women], [_packed(MEN[0])]) is None
    # categories: one is a span (a thin set of another release inside it is not enough), two are none
    categories, inside = _release(MEN, CATEGORIES), _packed({4, 5})
    assert thin_part([(1,), (0,)], [categories, women], [inside]) is None
    assert np.array_equal(thin_part([(1, 2), (0,)], [categories, women], [inside]), inside)


def _oracle(member: set[int], releases: list[list[set[int]]]) -> list[tuple[int, ...]] | None:
    """The same question on Python sets: the cells (with records) inside the row set, per release; a union across
    releases where together they hold every record of it some cell holds and no one release's do."""
    anywhere = member & set().union(*(c for cells in releases for c in cells))
    if not anywhere:
        return None
    parts = [tuple(k for k, c in enumerate(cells) if c and c <= member) for cells in releases]
    covered = [set().union(*(cells[k] for k in part)) for part, cells in zip(parts, releases)]
    if not anywhere <= set().union(*covered) or any(anywhere <= c for c in covered):
        return None
    totals = [set().union(*(c for c in cells)) for cells in releases]
    if all(not part or set().union(*(cells[k] for k in part)) == total
           for part, cells, total in zip(parts, releases, totals)):
        return None  # each release taken whole
    return parts


@st.composite
def _case(draw: st.DrawFn) -> tuple[set[int], list[list[set[int]]]]:
    releases = []
    for _ in range(draw(st.integers(2, 4))):
        records = sorted(draw(st.sets(st.integers(0, N - 1), min_size=2, max_size=N)))
        cuts = sorted(draw(st.sets(st.integers(1, len(records) - 1), max_size=5)))
        edges = [0, *cuts, len(records)]
        releases.append([set(records[a:b]) for a, b in zip(edges, edges[1:])])
    cells = [c for cells in releases for c in cells]
    member = set().union(*(c for c, keep in zip(cells, draw(st.lists(st.booleans(), min_size=len(cells),
                                                                     max_size=len(cells)))) if keep))
    member |= draw(st.sets(st.integers(0, N - 1), max_size=3))  # a few records more, in some cell or none
    return member, releases


@settings(max_examples=300, deadline=None)
@given(_case())
def test_union_across_is_what_set_arithmetic_says(case: tuple[set[int], list[list[set[int]]]]):
    member, releases = case
    assert union_across(_packed(member), [_release(cells) for cells in releases]) == _oracle(member, releases)
