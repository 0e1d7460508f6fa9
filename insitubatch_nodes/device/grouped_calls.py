"""Run jobs that queue up while a call is under way together, in the next call.

nvCOMP's batched decode is cheap per call only when a call carries many chunks: on an
H100, 32 zstd chunks per call decoded at 8.5 GB/s and 244 per call at 47 GB/s. One block
is 32 chunks at the default settings, but blocks read ahead finish their reads while the
previous decode runs, so decoding everything that is waiting in one call gets the larger
batches without larger blocks (which would change the shuffle) and without waiting for
anything that is not already there. Calls run one at a time, in the event loop's default
executor (the decode pool); the order of the jobs within a call is their arrival order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")

# One outcome per job, in the jobs' order: its result, or the error that job alone raised.
GroupCall = Callable[[Sequence[Job]], Sequence[Result | Exception]]


class GroupedCalls(Generic[Job, Result]):
    """`await submit(job)` gives that job's outcome from `call` (run in the loop's default
    executor), which received it together with every job that was waiting when the call
    began. Used from one event loop; a cancelled `submit` drops its job if its call has
    not begun. Should `call` itself raise, every job of that call gets the error. Calls
    never overlap, even after a cancellation (a thread cannot be stopped: the next call
    waits for it), so `call` need not be thread-safe."""

    def __init__(self, call: GroupCall[Job, Result]) -> None:
        self._call = call
        self._waiting: list[tuple[Job, asyncio.Future[Result]]] = []
        self._draining: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[Sequence[Result | Exception]] | None = None

    async def submit(self, job: Job) -> Result:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((job, outcome))
        if self._draining is None or self._draining.done():
            self._draining = loop.create_task(self._drain())
        return await outcome

    async def _drain(self) -> None:
        group: list[tuple[Job, asyncio.Future[Result]]] = []
        try:
            while self._waiting:
                group = [(job, out) for job, out in self._waiting if not out.done()]
                self._waiting.clear()
                if group:
                    outcomes = await self._run([job for job, _ in group])
                    for (_, out), outcome in zip(group, outcomes, strict=True):
                        if out.done():
                            continue
                        if isinstance(outcome, Exception):
                            out.set_exception(outcome)
                        else:
                            out.set_result(outcome)
                group = []
        except asyncio.CancelledError:  # the loop is shutting down: nobody waits any more
            for _, out in group + self._waiting:
                out.cancel()
            self._waiting.clear()
            raise

    async def _run(self, jobs: list[Job]) -> Sequence[Result | Exception]:
        if self._in_flight is not None:  # a call whose waiter was cancelled may still run
            await asyncio.wait([self._in_flight])
        loop = asyncio.get_running_loop()
        self._in_flight = loop.run_in_executor(None, self._call, jobs)
        try:
            outcomes = await asyncio.shield(self._in_flight)
        except Exception as err:  # not CancelledError: that ends the drain
            return [err] * len(jobs)
        if len(outcomes) != len(jobs):
            broken = RuntimeError(
                f"a grouped call gave {len(outcomes)} outcomes for {len(jobs)} jobs"
            )
            return [broken] * len(jobs)
        return outcomes
