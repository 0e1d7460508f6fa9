"""Read a block of a join: each store's variables through a reader of its own store.

A join's variables live in several stores, each with its own chunking, codecs,
credentials and way in (local files, an object store, shards). The plan of a block
already names each variable's chunks in its own store's steps (`core.read_plan`), so a
join's block is each store's part of the plan read by a `ChunkReader` over that store
(`ReadContext.joined`), all at once into the one block's memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from insitubatch_nodes.core.read_plan import ReadPlan
from insitubatch_nodes.io.reads.block_reader import BlockReader, ReadContext
from insitubatch_nodes.io.reads.block_slots import BlockMemory
from insitubatch_nodes.io.reads.chunk_reader import ChunkReader
from insitubatch_nodes.io.reads.stored_chunks import first_failure


class JoinedReader:
    """A `BlockReader` over a join's stores (see the module).

    Args:
        context: the join's context (`ReadContext.joined`).
    """

    def __init__(self, context: ReadContext) -> None:
        self._context = context
        self._readers = [
            (set(part.layouts), ChunkReader(part, count_blocks=False)) for part in context.stores
        ]

    async def read_block(self, plan: ReadPlan, memory: BlockMemory | None) -> dict[str, Any]:
        """See `BlockReader.read_block`.

        Args:
            plan: what to read, and where each chunk's rows go.
            memory: memory to decode into (leased slots), or None for buffers of each
                store's reader's own.
        """
        tasks = []
        try:
            async with asyncio.TaskGroup() as group:
                for names, reader in self._readers:
                    reads = {n: r for n, r in plan.reads.items() if n in names}
                    if reads:
                        part = replace(plan, reads=reads)
                        tasks.append(group.create_task(reader.read_block(part, memory)))
        except BaseExceptionGroup as failures:
            raise first_failure(failures) from None  # the error itself, not a wrapper
        self._context.stats.add(blocks_fetched=1)
        block: dict[str, Any] = {}
        for task in tasks:
            block.update(task.result())
        return {name: block[name] for name in plan.reads}


def cpu_reader(context: ReadContext) -> BlockReader:
    """The reader that decodes `context`'s blocks on the CPU: one store's `ChunkReader`,
    or a join's `JoinedReader`.

    Args:
        context: what every reader of the fetch node shares.
    """
    return JoinedReader(context) if context.stores else ChunkReader(context)
