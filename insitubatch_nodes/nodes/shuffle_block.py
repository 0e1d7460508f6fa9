"""ShuffleBlockNode: draws batches from a bounded window of resident blocks.

It reproduces `core.draw_order.rank_epoch_order` incrementally: each block's samples leave
in that block's seeded permutation, a batch may straddle blocks, and a rank that must pad
keeps drawing from its last block. Only blocks with samples still to draw are kept, plus
the newest one (padding may need it), so residency is bounded by the batch size and the
block size, never by the epoch.

State is a cursor: the source state from just before the oldest resident block, how far
into that block drawing has gone, and how many samples this epoch has yielded. Resume
re-fetches that block; no array data is ever checkpointed.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.draw_order import block_draw, padding_positions
from insitubatch_nodes.items import BatchDraw, FetchedBlock
from insitubatch_nodes.nodes.state_checks import CONFIG_KEY, check_saved_config


@dataclass
class _Resident:
    block: FetchedBlock
    draw: np.ndarray
    drawn: int
    source_state_before: dict[str, Any]

    @property
    def remaining(self) -> int:
        return self.draw.size - self.drawn


class ShuffleBlockNode(BaseNode[BatchDraw]):
    SOURCE_KEY = "source"
    DRAWN_KEY = "drawn_in_oldest_block"
    YIELDED_KEY = "samples_yielded"
    TARGET_KEY = "samples_this_epoch"

    def __init__(
        self, source: BaseNode[FetchedBlock], *, batch_size: int, drop_last: bool = False
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.source = source
        self.batch_size = batch_size
        self.drop_last = drop_last
        self._window: deque[_Resident] = deque()
        self._yielded = 0
        self._target: int | None = None
        self._source_done = False
        self._restore_drawn: int | None = None
        self._oldest_state: dict[str, Any] = {}

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._window.clear()
        self._source_done = False
        if initial_state is None:
            self.source.reset(None)
            self._yielded, self._target, self._restore_drawn = 0, None, None
        else:
            check_saved_config(type(self).__name__, initial_state, self._config())
            self.source.reset(initial_state[self.SOURCE_KEY])
            self._yielded = int(initial_state[self.YIELDED_KEY])
            target = initial_state[self.TARGET_KEY]
            self._target = None if target is None else int(target)
            self._restore_drawn = int(initial_state[self.DRAWN_KEY])
        self._oldest_state = self.source.state_dict()

    def _pull(self) -> bool:
        """Fetch the next block into the window; False once the epoch has no more blocks."""
        before = self.source.state_dict()
        try:
            block = next(self.source)
        except StopIteration:
            self._source_done = True
            return False
        a = block.plan.assignment
        if self._target is None:
            self._target = a.samples_per_rank(self.batch_size, self.drop_last)
            if self._target == 0:
                raise ValueError(
                    f"batch_size={self.batch_size} with drop_last=True leaves no full batch: "
                    f"the smallest rank has {a.min_rank_samples} samples; lower batch_size or "
                    f"set drop_last=False"
                )
        draw = block_draw(a.seed, a.epoch, a.rank, block.plan.block_index, block.plan.num_samples)
        drawn = 0
        if self._restore_drawn is not None:
            drawn, self._restore_drawn = self._restore_drawn, None
        self._window.append(_Resident(block, draw, drawn, before))
        return True

    def next(self) -> BatchDraw:
        if self._target is None and not self._pull():
            raise StopIteration
        assert self._target is not None
        want = min(self.batch_size, self._target - self._yielded)
        if want <= 0:
            raise StopIteration
        while sum(r.remaining for r in self._window) < want and self._pull():
            pass
        parts: list[tuple[FetchedBlock, np.ndarray]] = []
        need = want
        for resident in self._window:
            take = min(resident.remaining, need)
            if take:
                parts.append(
                    (resident.block, resident.draw[resident.drawn : resident.drawn + take])
                )
                resident.drawn += take
                need -= take
        if need:
            parts.append(self._pad(need, want - need))
        self._yielded += want
        while len(self._window) > 1 and self._window[0].remaining == 0:
            self._window.popleft()
        self._oldest_state = self._window[0].source_state_before
        return BatchDraw(tuple(parts))

    def _pad(self, count: int, real_in_batch: int) -> tuple[FetchedBlock, np.ndarray]:
        """Repeat draws from the epoch's last block (see `core.draw_order`)."""
        assert self._source_done and self._window
        last = self._window[-1]
        already = self._yielded + real_in_batch - last.block.plan.assignment.rank_samples
        positions = padding_positions(last.draw.size, already + count, last.draw)[already:]
        return last.block, positions

    def _config(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "drop_last": self.drop_last}

    def get_state(self) -> dict[str, Any]:
        drawn = self._window[0].drawn if self._window else (self._restore_drawn or 0)
        return {
            self.SOURCE_KEY: copy.deepcopy(self._oldest_state),
            self.DRAWN_KEY: drawn,
            self.YIELDED_KEY: self._yielded,
            self.TARGET_KEY: self._target,
            CONFIG_KEY: self._config(),
        }
