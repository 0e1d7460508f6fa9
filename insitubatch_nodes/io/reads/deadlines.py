"""Deadlines: the timeouts of many reads on one event loop, behind one timer.

`asyncio.timeout` arms a timer per read: a handle pushed onto the loop's heap, cancelled
when the read completes and left there until the heap is swept, each push and pop a dozen
Python-level comparisons; behind latency, with hundreds of reads in flight and thousands a
second, that was some 6 us of the loop's CPU per read for a timer that almost never fires.
Reads of one policy share one timeout, so their deadlines come in the order the reads
started: one timer set at the earliest deadline is enough, and it fires about once per
timeout period, not once per read. An `asyncio.Timeout` per read (its object, its enter
and exit) cost some 5 us more, so a read is watched by its task alone: at its deadline the
task is cancelled and marked, and `drop` takes the cancellation back exactly as
`asyncio.timeout` does (`Task.uncancel`), so a read past its deadline ends as it would
there: a `TimeoutError`, with an outside cancellation still a cancellation.
"""

from __future__ import annotations

import asyncio
import math


class Watch:
    """One read being watched: its task, the cancellations it had before, and whether its
    deadline passed. Made by `Deadlines.watch`.

    Args:
        task: the task the read runs in.
    """

    __slots__ = ("cancelling", "expired", "task", "timer")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False
        self.timer: asyncio.TimerHandle | None = None  # out of deadline order: its own

    def expire(self) -> None:
        """The deadline passed: cancel the read's task, saying why."""
        self.expired = True
        self.task.cancel()


class Deadlines:
    """Expires watched reads at their deadlines, with one timer (see the module). One per
    event loop; used from that loop's thread only.

    A watched read goes::

        watch = deadlines.watch(seconds)
        try:
            found = await read()
        except BaseException as err:
            if deadlines.drop(watch) and isinstance(err, asyncio.CancelledError):
                raise TimeoutError from err
            raise
        deadlines.drop(watch)
    """

    def __init__(self) -> None:
        self._due: dict[Watch, float] = {}  # in the order of their deadlines
        self._latest = -math.inf
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, seconds: float) -> Watch:
        """Cancel the current task `seconds` from now, unless `drop`ped first.

        Args:
            seconds: how long from now.
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None, "a deadline watches the task a read runs in"
        watch = Watch(task)
        when = loop.time() + seconds
        if when < self._latest:  # out of order (another timeout): a timer of its own
            watch.timer = loop.call_at(when, watch.expire)
            return watch
        self._latest = when
        self._due[watch] = when
        if self._timer is None:
            self._timer = loop.call_at(when, self._expire)
        return watch

    def drop(self, watch: Watch) -> bool:
        """Stop watching a read (it is over): whether its deadline cancelled it, that
        cancellation now taken back (the read then raises `TimeoutError` in its stead).

        Args:
            watch: what `watch` returned for the read.
        """
        self._due.pop(watch, None)
        if watch.timer is not None:
            watch.timer.cancel()
        if not watch.expired:
            return False
        watch.expired = False  # dropped twice: taken back once
        return watch.task.uncancel() <= watch.cancelling

    def _expire(self) -> None:
        """Expire what is due, and set the timer for the earliest deadline left."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        while due:
            watch, when = next(iter(due.items()))
            if when > now:
                self._timer = loop.call_at(when, self._expire)
                return
            del due[watch]
            watch.expire()
