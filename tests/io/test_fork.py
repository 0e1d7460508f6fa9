"""A forking DataLoader around the graph fails at once with what to do, instead of hanging.

Every DataLoader here has a timeout: were the guard missing, the worker would hang in
obstore (developmentseed/obstore#441) and the test would fail after it, not hang CI.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import torch.utils.data

from insitubatch_nodes import ForkedProcessError, build_loader

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork is the Linux default")
WORKER_TIMEOUT_S = 60


class Wrapped(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """What users write to put an iterable into a DataLoader."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        yield from self.make()


def _through_a_forked_worker(dataset: Any) -> list[Any]:
    """`list(DataLoader(dataset, num_workers=1))` over a forked worker. The DataLoader's
    iterator is shut down here, before whatever the worker raised leaves: the traceback
    holds the iterator, and dropped later, in another test's garbage collection, its
    shutdown waits 5 s for a worker that is already gone."""
    batches = iter(
        torch.utils.data.DataLoader(
            dataset,
            batch_size=None,
            num_workers=1,
            multiprocessing_context="fork",
            timeout=WORKER_TIMEOUT_S,
        )
    )
    try:
        return list(batches)
    except BaseException as err:
        traceback.clear_frames(err.__traceback__)
        raise
    finally:
        del batches


@pytest.mark.parametrize("used_before_fork", [False, True])
def test_a_loader_built_in_the_parent_fails_in_a_forked_worker(
    memory_url: Any, used_before_fork: bool
) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4)
    if used_before_fork:
        assert sum(1 for _ in loader) == 22
    with pytest.raises(ForkedProcessError, match=r"num_workers=0") as raised:
        _through_a_forked_worker(Wrapped(lambda: loader))
    assert "obstore#441" in str(raised.value)
    assert sum(1 for _ in loader) == 22  # still fine in the parent


def test_a_loader_built_inside_a_forked_worker_fails_too(memory_url: Any) -> None:
    """The parent opened a store (so obstore's runtime exists); the child must not."""
    url, _ = memory_url()
    build_loader(url, split="all", batch_size=4)
    with pytest.raises(ForkedProcessError, match=r"is a fork of process \d+, which already"):
        _through_a_forked_worker(Wrapped(lambda: build_loader(url, split="all", batch_size=4)))


def test_num_workers_zero_is_the_supported_wrapping(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4)
    batches = list(torch.utils.data.DataLoader(Wrapped(lambda: loader), batch_size=None))
    assert sum(len(b["sample_index"]) for b in batches) == 88
