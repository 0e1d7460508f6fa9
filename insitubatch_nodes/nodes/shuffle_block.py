"""ShuffleBlockNode: draws batches from a bounded window of resident blocks.

It reproduces `core.draw_order.rank_epoch_order` incrementally: each block's samples leave
in that block's seeded permutation (in order, for an evaluation share), a batch may
straddle blocks, and a rank that must pad keeps drawing from its last block. Only blocks
with samples still to draw are kept, plus the newest one (padding may need it), so
residency is bounded by the batch size and the block size, never by the epoch.

State is a cursor: the source state from just before the oldest resident block, how far
into that block drawing has gone, and how many samples this epoch has yielded. Resume
re-fetches that block; no array data is ever checkpointed.

The node also knows how many batches an epoch holds before anything is read
(`batches_per_epoch`, what `len(loader)` returns): its batch settings and the share its
epoch keeper (the `ChunkPermuteNode` upstream) deals this rank. The keeper is a link
(`nodes.links`): given to the constructor, or linked by the `Loader` the node is iterated
through; the node never looks for it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.draw_order import (
    BLOCK_ORDER,
    BLOCK_ORDER_VERSION,
    block_order,
    padding_positions,
)
from insitubatch_nodes.core.rank_shares import EVALUATION_DROP_LAST
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock
from insitubatch_nodes.nodes.links import EpochKeeper, checked_link
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    ORDER_KEY,
    ORDER_VERSION_KEY,
    SHUFFLE_SOURCE_KEY,
    SHUFFLE_TARGET_KEY,
    check_cursor,
    cursor_out_of_range,
    named_state,
    restore_shuffle_state,
)
from insitubatch_nodes.nodes.state_views import snapshot, state_reader


@dataclass
class _Resident:
    block: FetchedBlock
    draw: np.ndarray
    drawn: int
    source_state_before: dict[str, Any]

    @property
    def remaining(self) -> int:
        return self.draw.size - self.drawn


def count_batches(
    node: object, keeper: EpochKeeper | None, batch_size: int, drop_last: bool
) -> int:
    """Batches a shuffle node yields per epoch on this rank (the last one may be short),
    from the share its epoch keeper deals, without reading anything.

    Args:
        node: the shuffle node (named in the error).
        keeper: the epoch keeper linked to it, or None.
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded.

    Raises:
        TypeError: no epoch keeper is linked to the node.
    """
    if keeper is None:
        name = type(node).__name__
        raise TypeError(
            f"the {name} cannot count its batches: it has no epoch keeper (the "
            f"ChunkPermuteNode upstream, nodes.links.EpochKeeper); pass it as "
            f"{name}(..., epoch_keeper=...), or iterate the graph through an "
            f"insitubatch_nodes.Loader, which links the one upstream"
        )
    if drop_last and keeper.evaluation:
        raise ValueError(EVALUATION_DROP_LAST)
    samples = keeper.samples_per_epoch(batch_size, drop_last)
    return -(-samples // batch_size)


class ShuffleBlockNode(BaseNode[BatchDraw]):
    """Batches of `batch_size` samples drawn from the resident blocks (see the module).

    Args:
        source: the fetched blocks (`AsyncFetchNode`).
        batch_size: samples per batch (an int >= 1).
        drop_last: yield only full batches, the same number on every rank (True or False).
        epoch_keeper: the node that deals this rank's share upstream (the
            `ChunkPermuteNode`), which `batches_per_epoch` counts from; None: the `Loader`
            the node is iterated through links the one upstream.
    """

    STATE_NAME = state_names.SHUFFLE_BLOCK
    SOURCE_KEY = SHUFFLE_SOURCE_KEY
    DRAWN_KEY = "drawn_in_oldest_block"
    YIELDED_KEY = "samples_yielded"
    TARGET_KEY = SHUFFLE_TARGET_KEY

    def __init__(
        self,
        source: BaseNode[FetchedBlock],
        *,
        batch_size: int,
        drop_last: bool = False,
        epoch_keeper: EpochKeeper | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.batch_size = as_int("batch_size", batch_size, minimum=1)
        self.drop_last = as_bool("drop_last", drop_last)
        self._epoch_keeper = checked_link(self, "epoch_keeper", epoch_keeper, EpochKeeper)
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
            self._restore(initial_state)
        self._oldest_state = self.source.state_dict()

    def _restore(self, initial_state: dict[str, Any]) -> None:
        """Take up a saved cursor, each part checked against what it can be: the epoch's
        target is checked against the epoch once its first block is here (`_pull`), and
        the samples drawn against the size of the block they were drawn from. The source
        is restored first, so that a state from other data or settings upstream is refused
        for that, the more basic difference."""
        keys = (self.SOURCE_KEY, self.DRAWN_KEY, self.YIELDED_KEY, self.TARGET_KEY)
        state, target = restore_shuffle_state(
            self, initial_state, keys, BLOCK_ORDER, BLOCK_ORDER_VERSION, self._config()
        )
        # Saved before the epoch's first block was pulled (no target yet): nothing drawn.
        self._yielded = check_cursor(self, state, self.YIELDED_KEY, 0, target or 0)
        self._restore_drawn = check_cursor(
            self, state, self.DRAWN_KEY, 0, None if target is not None else 0
        )
        self._target = target

    def _pull(self) -> bool:
        """Fetch the next block into the window; False once the epoch has no more blocks."""
        before = self._read_source_state()
        try:
            block = next(self.source)
        except StopIteration:
            self._source_done = True
            return False
        a = block.plan.assignment
        if a.evaluation and self.drop_last:
            raise ValueError(EVALUATION_DROP_LAST)
        if a.starts is not None:
            raise ValueError(
                "this epoch's rest was re-dealt from a checkpoint of another number of ranks, "
                "whose units were partly drawn by the pool shuffle; the block shuffle cannot "
                "draw part of a unit: build the loader with shuffle='pool', as the run that "
                "saved the checkpoint was"
            )
        epoch_target = a.samples_per_rank(self.batch_size, self.drop_last)
        if self._target is not None and self._target != epoch_target:
            allowed = f"{epoch_target} .. {epoch_target} (the samples this rank's epoch yields)"
            raise cursor_out_of_range(self, self.TARGET_KEY, self._target, allowed)
        if self._target is None:
            self._target = epoch_target
            if self._target == 0:
                raise ValueError(
                    f"batch_size={self.batch_size} with drop_last=True leaves no full batch: "
                    f"the smallest rank has {a.min_rank_samples} samples; lower batch_size or "
                    f"set drop_last=False"
                )
        draw = block_order(a, block.plan.block_index, block.plan.num_samples)
        drawn = 0
        if self._restore_drawn is not None:
            drawn, self._restore_drawn = self._restore_drawn, None
            if drawn > draw.size:
                allowed = f"0 .. {draw.size} (the samples of the block it counts)"
                raise cursor_out_of_range(self, self.DRAWN_KEY, drawn, allowed)
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
        return {
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            ORDER_KEY: BLOCK_ORDER,
            ORDER_VERSION_KEY: BLOCK_ORDER_VERSION,
        }

    @property
    def epoch_keeper(self) -> EpochKeeper | None:
        """The node this one counts its batches from (`nodes.links.NeedsEpochKeeper`)."""
        return self._epoch_keeper

    def link_epoch_keeper(self, keeper: EpochKeeper) -> None:
        """Count batches from `keeper`: what a `Loader` calls, once, when it is built over
        a graph whose shuffle node was given none.

        Args:
            keeper: the epoch keeper upstream.
        """
        self._epoch_keeper = checked_link(self, "epoch_keeper", keeper, EpochKeeper)

    def batches_per_epoch(self) -> int:
        """Batches this node yields per epoch on this rank (the last one may be short),
        computed from the share its epoch keeper deals, without reading anything: the same
        number an epoch yields, in training and in evaluation.

        Raises:
            TypeError: no epoch keeper is linked (see `epoch_keeper`).
        """
        return count_batches(self, self._epoch_keeper, self.batch_size, self.drop_last)

    def get_state(self) -> dict[str, Any]:
        return snapshot(self.state_view())

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        drawn = self._window[0].drawn if self._window else (self._restore_drawn or 0)
        return named_state(
            self,
            {
                self.SOURCE_KEY: self._oldest_state,
                self.DRAWN_KEY: drawn,
                self.YIELDED_KEY: self._yielded,
                self.TARGET_KEY: self._target,
                CONFIG_KEY: self._config(),
            },
        )
