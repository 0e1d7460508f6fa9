"""Merging byte ranges of one object into few requests.

An object store charges a round trip per request, so inner chunks of a shard that lie
close together are fetched in one ranged GET. Merging is bounded both ways: a gap wider
than `max_gap` is never bridged (so a sliver of a shard never costs the whole shard), and
a merged request never spans more than `max_span` bytes unless a single range does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MergedRange:
    """One request: bytes `[start, stop)` of the object, serving `members` (indices into
    the ranges given to `coalesce`)."""

    start: int
    stop: int
    members: tuple[int, ...]


def coalesce(
    ranges: Sequence[tuple[int, int]], *, max_gap: int, max_span: int
) -> list[MergedRange]:
    """Group `[start, stop)` ranges (in any order, overlaps allowed) into requests, in
    increasing offset order."""
    if max_gap < 0 or max_span < 1:
        raise ValueError(f"need max_gap >= 0 and max_span >= 1, got {max_gap}, {max_span}")
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    merged: list[MergedRange] = []
    start = stop = 0
    members: list[int] = []
    for i in order:
        lo, hi = ranges[i]
        if hi < lo:
            raise ValueError(f"range {i} is backwards: {lo}..{hi}")
        if members and lo - stop <= max_gap and max(hi, stop) - start <= max_span:
            stop = max(stop, hi)
            members.append(i)
            continue
        if members:
            merged.append(MergedRange(start, stop, tuple(members)))
        start, stop, members = lo, hi, [i]
    if members:
        merged.append(MergedRange(start, stop, tuple(members)))
    return merged
