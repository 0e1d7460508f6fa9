"""The self-tuning in-flight target against simulated stores: it reaches what saturates
latency, stops at a bandwidth cap instead of growing without end, keeps within a user's
cap and the memory allowed, and follows a store that changes."""

from __future__ import annotations

import heapq
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.inflight_target import CEILING, FLOOR, InflightTarget


class Link:
    """A store `rtt_s` away behind a link of `bandwidth` bytes/s, replies sent one after
    another: a read sent at t arrives `rtt_s` later, or once the replies ahead of it
    have crossed, plus its own crossing."""

    def __init__(self, rtt_s: float, bandwidth: float) -> None:
        self.rtt_s = rtt_s
        self.bandwidth = bandwidth

    def rate(self, reads: int, nbytes: int) -> float:
        """Bytes per second delivered with `reads` in flight at all times."""
        crossing = nbytes / self.bandwidth
        return min(self.bandwidth, reads * nbytes / (self.rtt_s + crossing))


def _run(
    target: InflightTarget,
    link: Link,
    nbytes: int,
    now: float,
    reads: int,
    arrivals: list[float] | None = None,
) -> float:
    """Keep `target.limit` reads in flight (a read is sent as soon as one completes and
    the limit allows) until `reads` have completed, and then until no probe is under way;
    the time after. Each arrival's time goes to `arrivals`."""
    crossing = nbytes / link.bandwidth
    link_free = now
    pending: list[tuple[float, float]] = []  # (arrives, sent)

    def send(at: float) -> None:
        nonlocal link_free
        arrives = max(at + link.rtt_s, link_free) + crossing
        link_free = arrives
        heapq.heappush(pending, (arrives, at))

    for _ in range(target.limit):
        send(now)
    done = 0
    while done < reads or target.probing:
        now, sent = heapq.heappop(pending)
        target.observe(sent, now, nbytes)
        done += 1
        if arrivals is not None:
            arrivals.append(now)
        while len(pending) < target.limit:
            send(now)
    return now


@settings(max_examples=100, deadline=None)
@given(
    rtt_ms=st.floats(0.2, 300),
    bandwidth_mb=st.floats(5, 20_000),
    nbytes=st.integers(1_000, 200_000_000),
)
def test_it_reaches_the_rate_the_link_allows_without_running_away(
    rtt_ms: float, bandwidth_mb: float, nbytes: int
) -> None:
    link = Link(rtt_ms / 1000, bandwidth_mb * 1e6)
    target = InflightTarget()
    arrivals: list[float] = []
    _run(target, link, nbytes, 0.0, reads=8000, arrivals=arrivals)
    best = link.rate(CEILING, nbytes)  # the most any allowed number of reads gets
    assert link.rate(target.limit, nbytes) >= 0.9 * best  # the target, between probes
    later = arrivals[len(arrivals) // 2 :]  # and what it delivered, probes included
    if later[-1] - later[0] > 20 * link.rtt_s:  # long enough for a rate to mean anything
        delivered = (len(later) - 1) * nbytes / (later[-1] - later[0])
        assert delivered >= 0.85 * best
    product = link.bandwidth * (link.rtt_s + nbytes / link.bandwidth) / nbytes  # saturating
    assert target.limit <= max(FLOOR, 8 * math.ceil(product))  # no growth past the cap


@settings(max_examples=100, deadline=None)
@given(
    cap=st.integers(1, 2000),
    max_bytes=st.one_of(st.none(), st.integers(1, 1 << 34)),
    nbytes=st.integers(1_000, 200_000_000),
)
def test_a_cap_and_the_memory_allowed_are_never_exceeded(
    cap: int, max_bytes: int | None, nbytes: int
) -> None:
    target = InflightTarget(cap=cap, max_bytes=max_bytes)
    assert target.limit <= cap
    _run(target, Link(0.05, 1e12), nbytes, 0.0, reads=6000)  # far and fast: wants the most
    assert 1 <= target.limit <= cap  # a user's cap replaces the ceiling
    if max_bytes is not None:
        assert target.limit <= max(1, max_bytes // nbytes)


def test_it_follows_a_store_that_gets_nearer_and_one_that_gets_slower() -> None:
    nbytes = 100_000
    target = InflightTarget()
    now = _run(target, Link(0.1, 1e10), nbytes, 0.0, reads=8000)
    assert target.limit == CEILING  # 100 ms away and fast: as many as allowed
    now = _run(target, Link(0.001, 1e8), nbytes, now + 11, reads=12000)  # near, 100 MB/s
    assert target.limit <= 8  # the product is 1 read: no point in a thousand
    _run(target, Link(0.03, 1e10), nbytes, now + 11, reads=8000)  # 30 ms away again
    assert link_rate_share(target.limit, Link(0.03, 1e10), nbytes) >= 0.9


def link_rate_share(limit: int, link: Link, nbytes: int) -> float:
    return link.rate(limit, nbytes) / link.rate(CEILING, nbytes)
