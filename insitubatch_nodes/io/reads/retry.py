"""Retrying chunk reads that fail for reasons that go away: bounded, backed off, deterministic.

Object stores fail now and then (HTTP 5xx, timeouts, dropped connections) and a training
run reads millions of chunks, so one flaky request must not end a multi-day run. A retry
only repeats a read of the same chunk into the same place, so it can never change which
samples come out or in what order; the backoff jitter is a hash of (seed, key, attempt)
rather than a random draw, so even the timing of retries is reproducible.

Everything else (missing permissions, a path that is not there, corrupt bytes) fails at
once: retrying would only delay the error. A read that keeps failing gives up after
`attempts` tries, so the time to the error is bounded by the sum of the backoff delays
plus `attempts` times `attempt_timeout_s`.
"""

from __future__ import annotations

import asyncio
import errno
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import obstore.exceptions

if TYPE_CHECKING:
    from insitubatch_nodes.io.reads.read_slots import ReadSlots

T = TypeVar("T")

# obstore raises GenericError for what its client could not classify: HTTP 5xx after its
# own retries, dropped connections, IO errors. The other obstore errors (not found,
# permission denied, bad path or configuration) are answers, not accidents.
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectionError,
    obstore.exceptions.GenericError,
)
# errno values that network and FUSE file systems (NFS, Lustre, gcsfuse) return for
# conditions that clear up on their own.
_TRANSIENT_ERRNOS = frozenset(
    {errno.EAGAIN, errno.EINTR, errno.EIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ESTALE}
)


# What object stores answer for a byte range past an object's end: an answer, not an
# accident (obstore surfaces it as a GenericError, which is otherwise retried).
_RANGE_REFUSED = "416 Range Not Satisfiable"


def range_refused(err: BaseException) -> bool:
    """Whether `err` (or the error a `ReadGaveUp` wraps) is a store refusing a byte range
    that lies past the object's end.

    Args:
        err: a read's error.
    """
    cause = err.__cause__ if isinstance(err, ReadGaveUp) else err
    return cause is not None and _RANGE_REFUSED in str(cause)


class ReadGaveUp(Exception):
    """A read failed for good; `attempts` says how often it was tried, `__cause__` why."""

    def __init__(self, attempts: int) -> None:
        super().__init__(f"after {attempts} attempt{'s' if attempts != 1 else ''}")
        self.attempts = attempts


@dataclass(frozen=True)
class RetryPolicy:
    """How reads of one chunk are retried.

    `attempts` counts the first try (1 disables retries). Before retry `n` (1-based) the
    reader waits between half and all of `min(max_delay_s, base_delay_s * 2 ** (n - 1))`.
    `attempt_timeout_s` turns a request that hangs into a retryable timeout (object-store
    reads only: a local file read cannot be interrupted). `transient` adds exception types
    of your own store to the ones retried by default.
    """

    attempts: int = 5
    base_delay_s: float = 0.1
    max_delay_s: float = 2.0
    attempt_timeout_s: float = 120.0
    seed: int = 0
    transient: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("RetryPolicy delays must be >= 0")
        if self.attempt_timeout_s <= 0:
            raise ValueError(
                f"RetryPolicy.attempt_timeout_s must be > 0, got {self.attempt_timeout_s}"
            )

    def is_transient(self, err: BaseException) -> bool:
        if range_refused(err):
            return False
        if isinstance(err, _TRANSIENT_TYPES + self.transient):
            return True
        return isinstance(err, OSError) and err.errno in _TRANSIENT_ERRNOS

    def delay_s(self, key: str, retry: int) -> float:
        """Seconds to wait before retry `retry` (1-based) of `key`."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        fraction = zlib.crc32(f"{self.seed}:{key}:{retry}".encode()) / 0xFFFFFFFF
        return ceiling * (0.5 + 0.5 * fraction)

    def worst_case_s(self) -> float:
        """An upper bound on the time one read can take before it gives up."""
        waits = sum(min(self.max_delay_s, self.base_delay_s * 2**i) for i in range(self.attempts))
        return waits + self.attempts * self.attempt_timeout_s

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        key: str,
        on_retry: Callable[[], None],
        limit: ReadSlots | None = None,
        *,
        failed: Exception | None = None,
    ) -> T:
        """Await `attempt()` until it succeeds; raise `ReadGaveUp` from the last error.

        Each attempt holds a slot of `limit` (if given) while it runs, not while it waits
        to retry; the timeout starts once the slot is held, so a queue of reads is not a
        timeout.

        Args:
            attempt: one try of the read.
            key: the object read, which seeds the retry delays.
            on_retry: called before each retry (the retry counter).
            limit: the read slots each try holds, or None.
            failed: the error of a first try the caller made itself (on the fast path,
                without this wrapper, under `limit.run(attempt, attempt_timeout_s)`):
                it counts as the first attempt, so the read goes on from the second.
        """
        first = 1
        if failed is not None:
            if self.attempts == 1 or not self.is_transient(failed):
                raise ReadGaveUp(1) from failed
            on_retry()
            await asyncio.sleep(self.delay_s(key, 1))
            first = 2
        for tried in range(first, self.attempts + 1):
            try:
                if limit is not None:
                    return await limit.run(attempt, self.attempt_timeout_s)
                async with asyncio.timeout(self.attempt_timeout_s):
                    return await attempt()
            except Exception as err:  # CancelledError is a BaseException: never retried
                if tried == self.attempts or not self.is_transient(err):
                    raise ReadGaveUp(tried) from err
            on_retry()
            await asyncio.sleep(self.delay_s(key, tried))
        raise AssertionError("unreachable")

    def call_sync(self, attempt: Callable[[], T], key: str, on_retry: Callable[[], None]) -> T:
        """`call` for blocking reads in a worker thread."""
        for tried in range(1, self.attempts + 1):
            try:
                return attempt()
            except Exception as err:
                if tried == self.attempts or not self.is_transient(err):
                    raise ReadGaveUp(tried) from err
            on_retry()
            time.sleep(self.delay_s(key, tried))
        raise AssertionError("unreachable")
