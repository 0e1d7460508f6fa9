"""GroupedCalls: jobs that arrive while a call runs go together in the next call, each
job gets its own outcome, and cancellation never leaves a waiter hanging."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from insitubatch_nodes.device.grouped_calls import GroupedCalls


class GatedCall:
    """Records the groups it gets; its first call blocks until `release` is set."""

    def __init__(self, outcome: object = None) -> None:
        self.groups: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self._outcome = outcome

    def __call__(self, jobs: Sequence[int]) -> list[int | Exception]:
        self.groups.append(list(jobs))
        if len(self.groups) == 1:
            self.started.set()
            assert self.release.wait(10)
        if self._outcome is not None and len(self.groups) == 1:
            raise RuntimeError("the first call failed")
        return [ValueError(f"job {j} is odd") if j % 2 else j * 10 for j in jobs]


async def _until(event: threading.Event) -> None:
    for _ in range(10_000):
        if event.is_set():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the first call never started")


def test_jobs_that_wait_during_a_call_go_together_in_the_next() -> None:
    call = GatedCall()

    async def main() -> list[int | BaseException]:
        grouped: GroupedCalls[int, int] = GroupedCalls(call)
        first = asyncio.ensure_future(grouped.submit(0))
        await _until(call.started)
        later = [asyncio.ensure_future(grouped.submit(j)) for j in (2, 3, 4)]
        await asyncio.sleep(0.01)
        call.release.set()
        outcomes = await asyncio.gather(first, *later, return_exceptions=True)
        after = await grouped.submit(6)  # a new call once the queue ran dry
        return [*outcomes, after]

    outcomes = asyncio.run(main())
    assert call.groups == [[0], [2, 3, 4], [6]]
    assert outcomes[:2] == [0, 20] and outcomes[3:] == [40, 60]
    assert isinstance(outcomes[2], ValueError) and "job 3 is odd" in str(outcomes[2])


def test_a_failing_call_fails_its_own_jobs_only() -> None:
    call = GatedCall(outcome="raise")

    async def main() -> tuple[BaseException | int, int]:
        grouped: GroupedCalls[int, int] = GroupedCalls(call)
        first = asyncio.ensure_future(grouped.submit(0))
        await _until(call.started)
        second = asyncio.ensure_future(grouped.submit(2))
        await asyncio.sleep(0.01)
        call.release.set()
        failed, done = await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(done, int)
        return failed, done

    failed, done = asyncio.run(main())
    assert isinstance(failed, RuntimeError) and done == 20
    assert call.groups == [[0], [2]]


def test_a_cancelled_submit_drops_its_job_before_its_call() -> None:
    call = GatedCall()

    async def main() -> list[int]:
        grouped: GroupedCalls[int, int] = GroupedCalls(call)
        first = asyncio.ensure_future(grouped.submit(0))
        await _until(call.started)
        dropped = asyncio.ensure_future(grouped.submit(2))
        kept = asyncio.ensure_future(grouped.submit(4))
        await asyncio.sleep(0.01)
        dropped.cancel()
        call.release.set()
        return [await first, await kept]

    assert asyncio.run(main()) == [0, 40]
    assert call.groups == [[0], [4]]


def test_shutting_the_loop_down_cancels_the_waiting_jobs_too() -> None:
    """What the fetch loop's shutdown does (it cancels every task): the call's own task
    going away leaves no submitter awaiting forever."""
    call = GatedCall()

    async def main() -> None:
        grouped: GroupedCalls[int, int] = GroupedCalls(call)
        first = asyncio.ensure_future(grouped.submit(0))
        await _until(call.started)
        waiting = asyncio.ensure_future(grouped.submit(2))
        await asyncio.sleep(0.01)
        submitters = {first, waiting, asyncio.current_task()}
        behind = [t for t in asyncio.all_tasks() if t not in submitters]
        assert behind  # the task that makes the calls
        for task in behind:
            task.cancel()
        outcomes = await asyncio.wait_for(asyncio.gather(first, waiting, return_exceptions=True), 5)
        assert [type(o) for o in outcomes] == [asyncio.CancelledError] * 2
        call.release.set()

    asyncio.run(main())
    assert call.groups == [[0]]


def test_calls_never_overlap_even_after_the_loop_gave_one_up() -> None:
    """A cancelled drain cannot stop its thread: the next call waits for that thread, so
    `call` (nvCOMP and one staging buffer, in the device reader) never runs twice at once."""
    call = GatedCall()
    running = []
    overlapped = threading.Event()
    lock = threading.Lock()

    def tracked(jobs: Sequence[int]) -> list[int | Exception]:
        with lock:
            running.append(1)
            if len(running) > 1:
                overlapped.set()
        try:
            return call(jobs)
        finally:
            with lock:
                running.pop()

    async def main() -> int:
        grouped: GroupedCalls[int, int] = GroupedCalls(tracked)
        first = asyncio.ensure_future(grouped.submit(0))
        await _until(call.started)
        for task in asyncio.all_tasks() - {first, asyncio.current_task()}:
            task.cancel()  # the drain gives the running call up; its thread runs on
        await asyncio.gather(first, return_exceptions=True)
        second = asyncio.ensure_future(grouped.submit(2))
        await asyncio.sleep(0.05)
        assert not second.done() and call.groups == [[0]]  # waits for the first call
        call.release.set()
        return await asyncio.wait_for(second, 5)

    assert asyncio.run(main()) == 20
    assert call.groups == [[0], [2]] and not overlapped.is_set()


def test_a_call_that_breaks_its_contract_fails_its_waiters_loudly() -> None:
    """One outcome per job is the contract; a call that breaks it is a bug, and the
    waiters get that error, not a cancellation."""

    def short(jobs: Sequence[int]) -> list[int | Exception]:
        return [1]

    async def main() -> list[BaseException | int]:
        grouped: GroupedCalls[int, int] = GroupedCalls(short)
        return await asyncio.gather(grouped.submit(0), grouped.submit(1), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, RuntimeError) for o in outcomes), outcomes
    assert "gave 1 outcomes for 2 jobs" in str(outcomes[0])


@pytest.mark.parametrize("jobs", [1, 5])
def test_every_job_gets_its_own_outcome_in_order(jobs: int) -> None:
    seen: list[list[int]] = []

    def call(batch: Sequence[int]) -> list[int | Exception]:
        seen.append(list(batch))
        return [j + 100 for j in batch]

    async def main() -> list[int]:
        grouped: GroupedCalls[int, int] = GroupedCalls(call)
        return await asyncio.gather(*(grouped.submit(j) for j in range(jobs)))

    assert asyncio.run(main()) == [j + 100 for j in range(jobs)]
    assert sorted(j for group in seen for j in group) == list(range(jobs))
