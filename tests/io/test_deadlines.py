"""Deadlines: reads of one loop time out behind one timer, as under `asyncio.timeout`:
a read past its deadline raises TimeoutError, one cancelled from outside stays cancelled
(also when its deadline passes while the cancellation is on its way), and the task's
cancellation count is left as it was."""

from __future__ import annotations

import asyncio
import time

import pytest

from insitubatch_nodes.core.inflight_target import InflightTarget
from insitubatch_nodes.io.reads.deadlines import Deadlines
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.read_slots import ReadSlots


async def _watched(deadlines: Deadlines, seconds: float, takes: float) -> str:
    watch = deadlines.watch(seconds)
    try:
        await asyncio.sleep(takes)
    except BaseException as err:
        if deadlines.drop(watch) and isinstance(err, asyncio.CancelledError):
            raise TimeoutError from err
        raise
    deadlines.drop(watch)
    return "done"


def test_reads_past_their_deadline_time_out_and_the_others_finish() -> None:
    async def main() -> list[object]:
        deadlines = Deadlines()
        runs = [  # (timeout, duration): in and out of deadline order, early and late
            (0.05, 0.01),
            (0.05, 0.2),
            (0.08, 0.01),
            (0.02, 0.2),  # earlier than the deadlines before it
            (0.1, 0.2),
            (0.1, 0.02),
        ]
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcomes = await asyncio.gather(
            *(_watched(deadlines, s, t) for s, t in runs), return_exceptions=True
        )
        assert loop.time() - started < 0.19  # every late read ended at its deadline
        return outcomes

    outcomes = asyncio.run(main())
    assert outcomes[0] == outcomes[2] == outcomes[5] == "done"
    for late in (1, 3, 4):
        assert isinstance(outcomes[late], TimeoutError), outcomes[late]


def test_a_cancelled_read_stays_cancelled_and_a_dropped_one_never_expires() -> None:
    async def main() -> None:
        deadlines = Deadlines()
        task = asyncio.create_task(_watched(deadlines, 0.05, 1.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # A read dropped when it ended is not touched when its deadline passes later.
        assert await _watched(deadlines, 0.02, 0.0) == "done"
        await asyncio.sleep(0.05)
        assert await _watched(deadlines, 0.05, 0.01) == "done"

    asyncio.run(main())


def test_read_slots_time_a_read_from_when_it_holds_its_slot() -> None:
    """Three reads for one slot, each 40 ms, under a 60 ms timeout: none times out (the
    queue is not the read), and a read that hangs does."""
    slots = ReadSlots(InflightTarget(cap=1), FetchStats())

    async def read() -> bytes:
        await asyncio.sleep(0.04)
        return b"x"

    async def hangs() -> bytes:
        await asyncio.sleep(10)
        return b"never"

    async def main() -> None:
        queued = await asyncio.gather(*(slots.run(read, timeout_s=0.06) for _ in range(3)))
        assert queued == [b"x"] * 3
        with pytest.raises(TimeoutError):
            await slots.run(hangs, timeout_s=0.05)
        assert slots.in_flight == 0
        assert await slots.run(read, timeout_s=0.06) == b"x"

    asyncio.run(main())


def test_an_outside_cancel_that_meets_the_deadline_stays_a_cancellation() -> None:
    """Cancelled from outside and past its deadline in the same loop iteration, a read
    ends cancelled (as under `asyncio.timeout`), and a read that times out leaves its
    task's cancellation count where it was, so an enclosing timeout still works."""

    async def main() -> None:
        deadlines = Deadlines()
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(_watched(deadlines, 0.02, 1.0))
        await asyncio.sleep(0)  # watched from now: its deadline is in 20 ms
        loop.call_later(0.03, task.cancel)
        loop.call_later(0.005, time.sleep, 0.05)  # holds the loop past both: one iteration
        with pytest.raises(asyncio.CancelledError):
            await task

        async def times_out_then_sleeps() -> str:
            with pytest.raises(TimeoutError):
                await _watched(deadlines, 0.01, 1.0)
            current = asyncio.current_task()
            assert current is not None and current.cancelling() == 0
            await asyncio.sleep(1.0)
            return "not cut short"

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):  # the outer deadline still fires
                await times_out_then_sleeps()

    asyncio.run(main())
