"""The board the decode threads look at between two chunks (`io.reads.help_board`): a
job posted is helped with until it is withdrawn, the fetch's decoding helps once per
chunk, and the time spent helping is not counted as decoding."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.chunk_reader import ChunkReader
from insitubatch_nodes.io.reads.help_board import HelpBoard


class _Counted:
    """A job that counts the threads' calls and burns `cpu_s` of CPU the first time."""

    def __init__(self, cpu_s: float = 0.0) -> None:
        self.calls = 0
        self._cpu_s = cpu_s

    def help(self) -> None:
        self.calls += 1
        if self.calls == 1:
            started = time.thread_time()
            while time.thread_time() - started < self._cpu_s:
                pass


def test_a_posted_job_is_helped_with_until_it_is_withdrawn() -> None:
    board = HelpBoard()
    first, second = _Counted(), _Counted()
    assert board.lend_a_hand() == 0  # nothing posted
    board.post(first)
    board.post(second)
    board.lend_a_hand()
    board.lend_a_hand()
    assert (first.calls, second.calls) == (2, 0)  # the oldest first
    board.withdraw(first)
    board.withdraw(first)  # twice is harmless
    board.lend_a_hand()
    assert (first.calls, second.calls) == (2, 1)
    board.withdraw(second)
    assert board.lend_a_hand() == 0 and second.calls == 1


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_decoding_helps_between_chunks_and_counts_only_its_own_cpu(
    tmp_path: Path, zarr_format: int
) -> None:
    shape, chunks = (12, 30, 40), (1, 30, 40)
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    zarr.open_group(str(tmp_path), mode="w", zarr_format=zarr_format).create_array(
        "t", shape=shape, chunks=chunks, dtype="float32"
    )[...] = values
    layout = VariableLayout(shape, chunks, "float32")
    geometry = SampleGeometry.from_layouts({"t": layout})
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    plan = plan_block(geometry, assignment.units, assignment=assignment, block_index=0)
    store = zarr.storage.LocalStore(str(tmp_path), read_only=True)
    context = ReadContext.create(store, {"t": layout}, decode_threads=1)
    assert context.decode_pool is not None
    job = _Counted(cpu_s=0.2)
    context.decode_pool.board.post(job)
    block = asyncio.run(ChunkReader(context).read_block(plan, None))

    assert job.calls == shape[0]  # once per chunk
    rows = plan.rows["t"][:, 0]
    np.testing.assert_array_equal(block["t"][rows], values[plan.sample_index])
    assert context.stats.chunks_read == shape[0]
    assert context.stats.decode_cpu_ns < 0.1e9, "the 0.2 s spent helping counted as decoding"
