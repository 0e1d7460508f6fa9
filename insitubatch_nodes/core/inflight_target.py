"""How many chunk reads to keep in flight, from what the reads themselves show.

A fixed number fits one store only: 64 reads in flight cap a store 30 ms away at about
2,100 reads/s, while a local disk or a bandwidth-capped link gains nothing from more and
a store of 154 MB chunks cannot hold 64 in memory. What saturates a store is its
bandwidth-delay product: the rate it delivers times the round trip of an unqueued read,
in reads. Both are measured as reads complete (as TCP's BBR does): the round trip is the
least seen lately (queueing behind a bandwidth cap, or behind a busy decode, lengthens
later round trips but not the least one, so it cannot make the target grow without end),
and the rate is the best delivered over the last few rounds (a round: about as many
completions as the target, so one round trip when latency is the limit); both are
remembered for 10 s and 10 rounds, whichever is longer. The target is
twice that product: room for the rate to rise if more reads would raise it, which a
latency-bound store shows by delivering more next round; the target then doubles per
round until bandwidth, the CPU, the memory allowance or the ceiling holds it.

Pure: time and read sizes come in as numbers, so the behaviour is tested without a clock
or a store (`tests/core/test_inflight_target.py`). Only IO settings follow it; the batches
never depend on it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

START = 64  # reads in flight before anything is measured: the former fixed default
CEILING = 1024  # reads in flight at most, however far and fast the store
FLOOR = 4
GAIN = 2.0
MIN_ROUND = 16  # completions in a round at least, so one slow read does not make a rate
WINDOW_S = 10.0  # a least round trip and a best rate are remembered this long, and
WINDOW_ROUNDS = 10  # for this many rounds (rounds of slow reads outlast the seconds)
MAX_STEP = 2.0  # the target moves by at most this factor per round
PROBE_READS = 1  # reads sent alone, once the queue drained, to measure a round trip again


@dataclass(frozen=True)
class Estimate:
    """What the reads have shown so far.

    Args:
        min_rtt_s: the least round trip seen in the window, in seconds.
        rate_bytes_s: the best delivered rate of a round in the window, bytes per second.
        read_bytes: mean bytes per read over the last round.
    """

    min_rtt_s: float
    rate_bytes_s: float
    read_bytes: float

    @property
    def bdp_reads(self) -> float:
        """The bandwidth-delay product, in reads."""
        return self.rate_bytes_s * self.min_rtt_s / max(1.0, self.read_bytes)


class InflightTarget:
    """The number of reads to keep in flight (`limit`), updated by `observe` (see the
    module).

    The least round trip is only a good base while some reads still go unqueued. A
    target above the link's product keeps a queue standing, and every round trip then
    includes it: if the least one were simply forgotten after a while, the queue would
    become the base and the target would grow on itself. So, as TCP's BBR does, a least
    round trip that has stood for the whole window is measured again: the target drops
    to one read until `PROBE_READS` reads sent then have come back (the queue drains
    first), and those give the new least round trip. That costs about two round trips
    every 10 s (under 1% at 30 ms, 3% at 150 ms).

    Args:
        cap: reads in flight at most (a user's `max_inflight`, which replaces
            `CEILING`), or None for `CEILING`.
        max_bytes: stored bytes in flight at most (the memory budget's share), or None.
        start: the target before any round has completed.
    """

    def __init__(
        self, *, cap: int | None = None, max_bytes: int | None = None, start: int = START
    ) -> None:
        self.cap = cap
        self.max_bytes = max_bytes
        self._limit = self._clamped(start, read_bytes=None)
        self._rtts: deque[tuple[float, float]] = deque()  # (time, rtt), rtt increasing
        self._rates: deque[tuple[float, float]] = deque()  # (time, rate), rate decreasing
        self._round_ends: deque[float] = deque(maxlen=WINDOW_ROUNDS)
        self._round_start: float | None = None
        self._round_reads = 0
        self._round_bytes = 0
        self._read_bytes: float | None = None
        self._probe: tuple[float, int] | None = None  # (since, the limit before it)
        self._probe_reads = 0
        self.estimate: Estimate | None = None

    @property
    def limit(self) -> int:
        """Reads to keep in flight now."""
        return self._limit

    @property
    def probing(self) -> bool:
        """Whether the target is down to one read to measure an unqueued round trip."""
        return self._probe is not None

    def _ceiling(self, read_bytes: float | None) -> int:
        ceiling = CEILING if self.cap is None else self.cap
        if self.max_bytes is not None and read_bytes:
            ceiling = min(ceiling, int(self.max_bytes // read_bytes))
        return max(1, ceiling)

    def _clamped(self, value: float, read_bytes: float | None) -> int:
        ceiling = self._ceiling(read_bytes)
        return max(min(FLOOR, ceiling), min(ceiling, math.ceil(value)))

    def observe(self, started: float, finished: float, nbytes: int) -> None:
        """One read completed.

        Args:
            started: when it was sent, in seconds on any monotonic clock.
            finished: when its bytes arrived, on the same clock.
            nbytes: its bytes.
        """
        rtt = max(0.0, finished - started)
        if self._probe is not None:
            since, before = self._probe
            if started >= since:  # sent once the queue was draining
                self._add_rtt(finished, rtt)
                self._probe_reads += 1
                if self._probe_reads >= PROBE_READS:
                    self._end_probe(finished, before)
            return  # a probe's reads say nothing of the rate
        self._add_rtt(finished, rtt)
        if self._round_start is None:
            self._round_start = started
        self._round_reads += 1
        self._round_bytes += nbytes
        elapsed = finished - self._round_start
        if self._round_reads >= max(MIN_ROUND, self._limit) and elapsed > 0:
            self._end_round(finished, elapsed)

    def _add_rtt(self, now: float, rtt: float) -> None:
        while self._rtts and self._rtts[-1][1] >= rtt:
            self._rtts.pop()
        self._rtts.append((now, rtt))

    def _end_round(self, now: float, elapsed: float) -> None:
        rate = self._round_bytes / elapsed
        self._read_bytes = self._round_bytes / self._round_reads
        while self._rates and self._rates[-1][1] <= rate:
            self._rates.pop()
        self._rates.append((now, rate))
        self._round_ends.append(now)
        self._start_round(now)
        horizon = -math.inf
        if len(self._round_ends) == WINDOW_ROUNDS:
            horizon = min(now - WINDOW_S, self._round_ends[0])
        while len(self._rates) > 1 and self._rates[0][0] < horizon:
            self._rates.popleft()
        if self._rtts[0][0] < horizon:  # the least round trip has stood the whole window
            self._probe = (now, self._limit)
            self._probe_reads = 0
            self._rtts.clear()
            self._limit = 1
            return
        self._limit = self._stepped(self._limit)

    def _end_probe(self, now: float, before: int) -> None:
        self._probe = None
        self._start_round(now)
        self._limit = self._stepped(before)

    def _start_round(self, now: float) -> None:
        self._round_start = now
        self._round_reads = 0
        self._round_bytes = 0

    def _stepped(self, limit: int) -> int:
        """The target after a round that ran at `limit`: twice the estimated product,
        moved by at most `MAX_STEP` from `limit`."""
        assert self._read_bytes is not None
        self.estimate = Estimate(self._rtts[0][1], self._rates[0][1], self._read_bytes)
        wanted = GAIN * self.estimate.bdp_reads
        stepped = min(limit * MAX_STEP, max(limit / MAX_STEP, wanted))
        return self._clamped(stepped, self._read_bytes)
