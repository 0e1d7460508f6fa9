"""Range coalescing: every range served exactly once, inside its request; no gap wider
than allowed is bridged; requests stay within the span limit."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.byte_ranges import coalesce

ranges_strategy = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 2_000)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=40,
)


@given(ranges_strategy, st.integers(0, 3_000), st.integers(1, 8_000))
def test_coalesce_serves_each_range_once_within_bounds(
    ranges: list[tuple[int, int]], max_gap: int, max_span: int
) -> None:
    merged = coalesce(ranges, max_gap=max_gap, max_span=max_span)
    served = sorted(i for request in merged for i in request.members)
    assert served == list(range(len(ranges)))
    for request in merged:
        members = sorted(ranges[i] for i in request.members)
        assert request.start == members[0][0]
        assert request.stop == max(hi for _, hi in members)
        assert all(request.start <= lo and hi <= request.stop for lo, hi in members)
        widest = max(hi - lo for lo, hi in members)
        assert request.stop - request.start <= max(max_span, widest)
        reach = members[0][1]
        for lo, hi in members[1:]:  # no bridged gap wider than max_gap
            assert lo - reach <= max_gap
            reach = max(reach, hi)
    starts = [request.start for request in merged]
    assert starts == sorted(starts)
    for before, after in itertools.pairwise(merged):  # nothing left unmerged
        lo, hi = min(ranges[i] for i in after.members)
        assert lo - before.stop > max_gap or max(hi, before.stop) - before.start > max_span


def test_adjacent_ranges_merge_and_distant_ones_do_not() -> None:
    merged = coalesce([(100, 200), (0, 100), (5_000, 5_100)], max_gap=10, max_span=1_000)
    expected = [(0, 200, (1, 0)), (5_000, 5_100, (2,))]
    assert [(m.start, m.stop, m.members) for m in merged] == expected


def test_the_span_limit_splits_a_run_of_adjacent_ranges() -> None:
    merged = coalesce([(i * 100, i * 100 + 100) for i in range(10)], max_gap=0, max_span=300)
    assert [(m.start, m.stop) for m in merged] == [(0, 300), (300, 600), (600, 900), (900, 1000)]


def test_bad_limits_and_backwards_ranges_are_refused() -> None:
    with pytest.raises(ValueError, match="max_gap"):
        coalesce([(0, 1)], max_gap=-1, max_span=10)
    with pytest.raises(ValueError, match="backwards"):
        coalesce([(5, 1)], max_gap=0, max_span=10)
