"""Run a test script in a process group of its own, so that a run that hangs (a rank
waiting on a collective the other never makes) is ended whole, ranks and launcher."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence

from tests.helpers.paths import child_env


def run_script(command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `command` with one thread per process for torch, return what it did; on timeout
    kill its whole process group and fail with its output.

    Args:
        command: the command line.
        timeout: seconds it may take.
    """
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(OMP_NUM_THREADS="1"),
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"{command[1:3]} ran past {timeout} s: {err[-3000:]}") from None
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)
