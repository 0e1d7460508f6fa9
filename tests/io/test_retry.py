"""The retry policy alone: which errors are retried, how long it waits, when it gives up."""

from __future__ import annotations

import asyncio
import errno

import obstore.exceptions
import pytest

from insitubatch_nodes import RetryPolicy
from insitubatch_nodes.io.reads.retry import ReadGaveUp


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (obstore.exceptions.GenericError("503 Service Unavailable"), True),
        (TimeoutError(), True),
        (ConnectionResetError(errno.ECONNRESET, "reset"), True),
        (OSError(errno.EIO, "Input/output error"), True),
        (obstore.exceptions.PermissionDeniedError("403"), False),
        (obstore.exceptions.NotFoundError("404"), False),
        (PermissionError(errno.EACCES, "denied"), False),
        (ValueError("corrupt"), False),
    ],
)
def test_which_errors_are_retried(error: Exception, transient: bool) -> None:
    assert RetryPolicy().is_transient(error) is transient


def test_extra_transient_types() -> None:
    class Flaky(Exception):
        pass

    assert not RetryPolicy().is_transient(Flaky())
    assert RetryPolicy(transient=(Flaky,)).is_transient(Flaky())


def test_backoff_is_bounded_exponential_and_reproducible() -> None:
    policy = RetryPolicy(base_delay_s=0.1, max_delay_s=1.0, seed=3)
    for retry in range(1, 8):
        ceiling = min(1.0, 0.1 * 2 ** (retry - 1))
        delay = policy.delay_s("t2m/c/0/0", retry)
        assert ceiling / 2 <= delay <= ceiling
        assert delay == RetryPolicy(base_delay_s=0.1, max_delay_s=1.0, seed=3).delay_s(
            "t2m/c/0/0", retry
        )
    delays = {policy.delay_s(f"t2m/c/{i}/0", 3) for i in range(20)}
    assert len(delays) > 10  # jittered across keys, so retries do not arrive in lockstep


def test_gives_up_after_the_attempts_with_the_last_error() -> None:
    calls = []

    async def always_resets() -> None:
        calls.append(1)
        raise ConnectionResetError(errno.ECONNRESET, "reset")

    retries = []
    policy = RetryPolicy(attempts=3, base_delay_s=0.0)
    with pytest.raises(ReadGaveUp, match="after 3 attempts") as raised:
        asyncio.run(policy.call(always_resets, "k", lambda: retries.append(1)))
    assert isinstance(raised.value.__cause__, ConnectionResetError)
    assert len(calls) == 3 and len(retries) == 2

    def eio() -> None:
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(ReadGaveUp, match="after 3 attempts"):
        policy.call_sync(eio, "k", lambda: None)


def test_a_first_try_the_caller_made_counts_as_the_first_attempt() -> None:
    """The fetch path tries each get once itself and hands a failure to the policy: the
    read then gets the same attempts, retry count and errors as under the policy alone."""
    calls: list[int] = []
    retries: list[int] = []

    async def always_resets() -> None:
        calls.append(1)
        raise ConnectionResetError(errno.ECONNRESET, "reset")

    policy = RetryPolicy(attempts=3, base_delay_s=0.0)
    first = ConnectionResetError(errno.ECONNRESET, "reset")
    with pytest.raises(ReadGaveUp, match="after 3 attempts"):
        asyncio.run(policy.call(always_resets, "k", lambda: retries.append(1), failed=first))
    assert len(calls) == 2 and len(retries) == 2  # the caller's try, then two more

    refused = obstore.exceptions.PermissionDeniedError("403")
    with pytest.raises(ReadGaveUp, match=r"after 1 attempt$") as raised:
        asyncio.run(policy.call(always_resets, "k", lambda: None, failed=refused))
    assert raised.value.__cause__ is refused and len(calls) == 2  # not tried again
    with pytest.raises(ReadGaveUp, match=r"after 1 attempt$"):
        once = RetryPolicy(attempts=1)
        asyncio.run(once.call(always_resets, "k", lambda: None, failed=first))
    assert len(calls) == 2


def test_a_permanent_error_is_not_retried() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise obstore.exceptions.PermissionDeniedError("403")

    with pytest.raises(ReadGaveUp, match=r"after 1 attempt$"):
        RetryPolicy(attempts=5).call_sync(refused, "k", lambda: None)
    assert len(calls) == 1


def test_a_hanging_attempt_times_out_and_is_retried() -> None:
    attempts = []

    async def hangs_once() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.sleep(3600)
        return "data"

    policy = RetryPolicy(attempts=2, base_delay_s=0.0, attempt_timeout_s=0.05)
    assert asyncio.run(policy.call(hangs_once, "k", lambda: None)) == "data"
    assert policy.worst_case_s() == pytest.approx(2 * 0.05)


@pytest.mark.parametrize(
    "bad",
    [{"attempts": 0}, {"base_delay_s": -1.0}, {"attempt_timeout_s": 0.0}],
)
def test_bad_policies_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**bad)  # type: ignore[arg-type]
