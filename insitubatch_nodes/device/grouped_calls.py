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
    not begun. Should `call` itself raise, every job of that call gets the error."""

    def __init__(self, call: GroupCall[Job, Result]) -> None:
        self._call = call
        self._waiting: list[tuple[Job, asyncio.Future[Result]]] = []
        self._draining: asyncio.Task[None] | None = None

    async def submit(self, job: Job) -> Result:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((job, outcome))
        if self._draining is None or self._draining.done():
            self._draining = loop.create_task(self._drain())
        return await outcome

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        group: list[tuple[Job, asyncio.Future[Result]]] = []
        try:
            while self._waiting:
                group = [(job, out) for job, out in self._waiting if not out.done()]
                self._waiting.clear()
                if group:
                    outcomes = await self._run(loop, [job for job, _ in group])
                    for (_, out), outcome in zip(group, outcomes, strict=True):
                        if out.done():
                            continue
                        if isinstance(outcome, Exception):
                            out.set_exception(outcome)
                        else:
                            out.set_result(outcome)
                group = []
        except BaseException:  # the loop is shutting down: nobody waits for these any more
            for _, out in group + self._waiting:
                out.cancel()
            self._waiting.clear()
            raise

    async def _run(
        self, loop: asyncio.AbstractEventLoop, jobs: list[Job]
    ) -> Sequence[Result | Exception]:
        try:
            return await loop.run_in_executor(None, self._call, jobs)
        except Exception as err:
            return [err] * len(jobs)
