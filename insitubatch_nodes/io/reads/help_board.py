"""Work the decode threads pick up between two chunks: the gather's copies (issue 33).

A decode thread that is busy runs one task of many chunks (a block's share, tens of
milliseconds), so a request queued in its executor waits that long, and the gather, which
never waits for a busy thread, ends up copying everything itself: on a host where decoding
is what limits, that is most of the drawing thread's time at one step per chunk, and on
one thread it caps what more cores can give. So the decode threads also look at a board
between two chunks (a chunk's decode is a fraction of a millisecond at one step per chunk)
and lend a hand with whatever is posted there: a copy posted is then picked up within a
chunk's decode, by every thread, busy or idle.

Looking costs one truthiness check of a deque per chunk when nothing is posted. Whoever
posts a job withdraws it when it no longer needs help, and a job must be safe to run by
any number of threads at once, and after it is done (it then finds nothing to do).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Protocol


class Job(Protocol):
    """Work any number of threads may run at once (see the module)."""

    def help(self) -> None:
        """Do some of the work, or none if none is left."""
        ...


class HelpBoard:
    """Jobs posted for the decode threads to help with between two chunks (see the
    module). Thread-safe: jobs are posted and withdrawn from any thread, and looked at from
    every decode thread."""

    def __init__(self) -> None:
        self._jobs: deque[Job] = deque()

    def post(self, job: Job) -> None:
        """Ask the decode threads to help with `job` until it is withdrawn.

        Args:
            job: the work (see `Job`).
        """
        self._jobs.append(job)

    def withdraw(self, job: Job) -> None:
        """Stop asking for help with `job` (a thread that picked it up already may still
        be running it). Safe to call for a job not posted.

        Args:
            job: a job posted before.
        """
        with contextlib.suppress(ValueError):
            self._jobs.remove(job)

    def lend_a_hand(self) -> int:
        """Help with the oldest job posted, if any: what a decode thread calls between two
        chunks. Returns the CPU nanoseconds this thread spent helping (0 when nothing was
        posted), so that a decode's own CPU can be counted without it."""
        if not self._jobs:
            return 0
        try:
            job = self._jobs[0]
        except IndexError:  # withdrawn meanwhile
            return 0
        started = time.thread_time_ns()
        job.help()
        return time.thread_time_ns() - started
