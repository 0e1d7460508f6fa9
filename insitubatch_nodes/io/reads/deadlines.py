"""Deadlines: the timeouts of many reads on one event loop, behind one timer.

`asyncio.timeout` arms a timer per read: a handle pushed onto the loop's heap, cancelled
when the read completes and left there until the heap is swept, each push and pop a dozen
Python-level comparisons; behind latency, with hundreds of reads in flight and thousands a
second, that was some 6 us of the loop's CPU per read for a timer that almost never fires.
Reads of one policy share one timeout, so their deadlines come in the order the reads
started: one timer set at the earliest deadline is enough, and it fires about once per
timeout period, not once per read. The expiry itself is asyncio's own (`asyncio.Timeout`
rescheduled to now), so a read past its deadline ends exactly as under `asyncio.timeout`:
a `TimeoutError`, with an outside cancellation still a cancellation.
"""

from __future__ import annotations

import asyncio
import math


class Deadlines:
    """Expires watched `asyncio.Timeout`s at their deadlines, with one timer (see the
    module). One per event loop; used from that loop's thread only."""

    def __init__(self) -> None:
        self._due: dict[asyncio.Timeout, float] = {}  # in the order of their deadlines
        self._latest = -math.inf
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, timeout: asyncio.Timeout, seconds: float) -> None:
        """Expire `timeout` `seconds` from now, unless `drop`ped first.

        Args:
            timeout: an entered `asyncio.Timeout` that has no deadline of its own
                (`asyncio.Timeout(None)`); it must be dropped before it is exited.
            seconds: how long from now.
        """
        loop = asyncio.get_running_loop()
        when = loop.time() + seconds
        if when < self._latest:  # out of order (another timeout): a timer of its own
            timeout.reschedule(when)
            return
        self._latest = when
        self._due[timeout] = when
        if self._timer is None:
            self._timer = loop.call_at(when, self._expire)

    def drop(self, timeout: asyncio.Timeout) -> None:
        """Stop watching `timeout` (its read is over).

        Args:
            timeout: a timeout passed to `watch`.
        """
        self._due.pop(timeout, None)

    def _expire(self) -> None:
        """Expire what is due, and set the timer for the earliest deadline left."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        while due:
            timeout, when = next(iter(due.items()))
            if when > now:
                self._timer = loop.call_at(when, self._expire)
                return
            del due[timeout]
            timeout.reschedule(when)  # in the past: asyncio expires it next iteration
