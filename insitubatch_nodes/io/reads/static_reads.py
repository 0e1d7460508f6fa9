"""Static fields read whole, once, through the loader's own reader.

A static (a land-sea mask) is read by the same `ChunkReader` that reads the fields'
blocks, on an event loop of its own that lives for the read only: every chunk fetched with
the loader's retries and verified as every chunk is (its decoded size checked, a damaged
one a `CorruptChunkError` naming it), decoded by the same codec table, into one buffer
per array (`core.static_fields.whole_array_plan`). No second reader to keep in step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from zarr.abc.store import Store

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.static_fields import whole_array_plan
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.chunk_reader import ChunkReader
from insitubatch_nodes.io.reads.event_loop import EventLoopThread
from insitubatch_nodes.io.reads.retry import RetryPolicy


def read_whole_arrays(
    store: Store,
    layouts: Mapping[str, VariableLayout],
    *,
    where: str,
    retry: RetryPolicy | None = None,
    decode_threads: int = 1,
) -> dict[str, np.ndarray]:
    """Each of `layouts`' arrays, whole, as stored (see the module).

    Args:
        store: the zarr store.
        layouts: the arrays to read, by name.
        where: the store as shown in messages (credentials redacted).
        retry: how transient read errors are retried (default `RetryPolicy()`).
        decode_threads: threads that decode the chunks (an int >= 1).
    """
    if not layouts:
        return {}
    context = ReadContext.create(
        store,
        layouts,
        where=where,
        retry=retry,
        decode_threads=decode_threads,
        block_memory_bytes=0,  # the reader decodes into buffers of its own
    )
    loop = EventLoopThread("statics", decode_threads)
    try:
        read = loop.submit(ChunkReader(context).read_block(whole_array_plan(layouts), None))
        return read.result()
    finally:
        loop.close()
