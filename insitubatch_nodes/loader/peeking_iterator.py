"""The iterator a `Loader` draws through: it counts the batches it yields, can look one
batch ahead without losing the state from before that batch, and times how long the
consumer waited for each.

The `Loader` keeps this iterator instead of torchdata's: torchdata 0.11's iterator
remembers the state it peeked at when a restored state turns out to be an epoch's end,
and keeps returning it after the next epoch starts (meta-pytorch/data#1552), so a
checkpoint taken later in that run would resume at the wrong place. Here a peeked state
is forgotten once its batch is handed out or the iterator is reset. Its state has
torchdata's layout (`root`, `num_yielded`). The epoch's timing is what `Loader.stats()`
reports as the consumer's wait.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypeVar

from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY

T = TypeVar("T")


class _EpochClock:
    """Time since an epoch's first batch was asked for, the part spent waiting for
    batches, and the batches and samples handed out (two clock reads per batch)."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.waited_s = 0.0
        self.batches = 0
        self.samples = 0

    def waiting(self) -> float:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        return now

    def got(self, started: float, item: Any) -> None:
        self.waited_s += time.perf_counter() - started
        self.batches += 1
        index = item.get(SAMPLE_INDEX_KEY) if isinstance(item, Mapping) else None
        self.samples += 0 if index is None else len(index)

    def counters(self) -> dict[str, Any]:
        wall = 0.0 if self.first is None else time.perf_counter() - self.first
        return {
            "wall_s": wall,
            "waited_s": self.waited_s,
            "batches": self.batches,
            "samples": self.samples,
        }


class PeekingIterator(BaseNode[T]):
    """Counts what it yields and can look one item ahead without losing the state from
    before that item (the Loader peeks to tell an exhausted restored state).

    Args:
        root: the graph's last node.
    """

    ROOT_KEY = "root"
    NUM_YIELDED_KEY = "num_yielded"

    def __init__(self, root: BaseNode[T]) -> None:
        super().__init__()
        self.root = root
        self._num_yielded = 0
        self._peeked: tuple[T, dict[str, Any]] | None = None
        self._clock = _EpochClock()

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._peeked = None
        self._clock = _EpochClock()
        if initial_state is None:
            self.root.reset(None)
            self._num_yielded = 0
        else:
            self.root.reset(initial_state[self.ROOT_KEY])
            self._num_yielded = initial_state[self.NUM_YIELDED_KEY]

    def has_next(self) -> bool:
        if self._peeked is None:
            state = self.get_state()
            try:
                self._peeked = (next(self.root), state)
            except StopIteration:
                return False
        return True

    def next(self) -> T:
        if self._peeked is not None:
            item, _ = self._peeked
            self._peeked = None
        else:
            started = self._clock.waiting()
            item = next(self.root)
            self._clock.got(started, item)
        self._num_yielded += 1
        return item

    def stage_counters(self) -> dict[str, Any]:
        """This epoch's batches so far and how long the consumer waited for them (what
        `Loader.stats()` reports)."""
        return self._clock.counters()

    def get_state(self) -> dict[str, Any]:
        if self._peeked is not None:
            return self._peeked[1]
        return {self.ROOT_KEY: self.root.state_dict(), self.NUM_YIELDED_KEY: self._num_yielded}
