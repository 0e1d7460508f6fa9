"""Read a block's chunks into device memory, decoding them there.

For every array the GPU can decode (`gpu_codecs`; sharded arrays by their inner chunks),
a block's stored chunk bytes are fetched as the CPU reader fetches them (`stored_chunks`:
plain file reads, gets, shard ranges; the same retries and length checks). The thread that
fetched a chunk copies it once, into page-locked memory of its own (torch's caching host
allocator), so the decode call, which runs one at a time, has no host copy left to make:
it copies each chunk to the device and decodes them all in one batched nvCOMP call
(`device_decoder`). The host holds compressed bytes only, never decoded data. Arrays the
GPU cannot decode are read by the CPU `ChunkReader` and copied to the device, and the log
says so once per array.

Decode runs in the decode pool, one call at a time per reader (nvCOMP's codec objects are
shared), on the decoder's own CUDA stream, which is synchronised before the blocks are
handed on: a block's tensors are complete when its future is, and the page-locked bytes
are free again. Blocks whose bytes arrive while a call runs are decoded together in the
next call (`grouped_calls`): nvCOMP is several times faster per chunk with more chunks
per call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan
from insitubatch_nodes.device.device_decoder import BlockBytes, DeviceDecoder, FetchedChunk
from insitubatch_nodes.device.gpu_codecs import DeviceCodec, device_codec, load_nvcomp
from insitubatch_nodes.device.grouped_calls import GroupedCalls
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.block_slots import BlockMemory
from insitubatch_nodes.io.reads.chunk_reader import ChunkReader
from insitubatch_nodes.io.reads.shard_reader import Loaded
from insitubatch_nodes.io.reads.stored_array import StoredArray, stored_array
from insitubatch_nodes.io.reads.stored_chunks import ChunkFetcher

log = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()  # (store, variable) fallbacks already logged


class DeviceBlockReader:
    """A `BlockReader` whose blocks are tensors on `device`, decoded there (see the module).

    Args:
        context: what every reader of the fetch node shares (`block_reader.ReadContext`).
        device: the device the blocks are decoded on and live on.
    """

    def __init__(self, context: ReadContext, device: torch.device) -> None:
        """Every read goes through the context's retry policy and counters; the arrays
        the device cannot decode are read by a `ChunkReader` over the same context (the
        same opened arrays and shard indexes); its host buffers are its own, freed once
        copied to the device."""
        self._context = context
        self._layouts = dict(context.layouts)
        self._device = device
        self._where = context.where
        self._stats = context.stats
        self._codecs: dict[str, DeviceCodec] | None = None
        self._stored: dict[str, StoredArray] = {}
        self._fetcher: ChunkFetcher | None = None  # made in the loop, shared with the fallback
        self._cpu_reader: ChunkReader | None = None
        self._opening: asyncio.Lock | None = None
        self._grouped: GroupedCalls[BlockBytes, dict[str, torch.Tensor]] = GroupedCalls(
            self.decode_blocks
        )
        self._decoder: DeviceDecoder | None = None  # made with the codecs, once opened

    async def _ready(self) -> dict[str, DeviceCodec]:
        if self._opening is None:
            self._opening = asyncio.Lock()
            self._fetcher = ChunkFetcher(self._context)
        async with self._opening:
            if self._codecs is None:
                names = list(self._layouts)
                arrays = await self._context.opened_arrays.open(names)
                nvcomp_ok = self._device.type == "cuda" and load_nvcomp() is not None
                codecs: dict[str, DeviceCodec] = {}
                fallback = {}
                for name, array in zip(names, arrays, strict=True):
                    stored = stored_array(name, array)
                    decoder = stored.decoder if isinstance(stored, StoredArray) else stored
                    chosen = device_codec(decoder, nvcomp_available=nvcomp_ok)
                    if isinstance(chosen, DeviceCodec):
                        assert isinstance(stored, StoredArray)
                        codecs[name] = chosen
                        self._stored[name] = stored
                    else:
                        if (self._where, name) not in _told:
                            _told.add((self._where, name))
                            log.warning("variable %r is decoded on the CPU: %s", name, chosen)
                        fallback[name] = self._layouts[name]
                if fallback:
                    self._cpu_reader = ChunkReader(self._context, fallback, self._fetcher)
                self._decoder = DeviceDecoder(
                    codecs, self._stored, self._layouts, self._device, self._where, self._stats
                )
                self._codecs = codecs
        return self._codecs

    async def read_block(
        self, plan: ReadPlan, memory: BlockMemory | None
    ) -> dict[str, torch.Tensor]:
        """See `BlockReader.read_block`: the block's tensors, in device memory of its own.

        Args:
            plan: what to read, and where each chunk's rows go.
            memory: must be None: blocks live on the device, not in host memory.
        """
        if memory is not None:
            raise ValueError(
                "a DeviceBlockReader's blocks live on its device: it takes no host memory"
            )
        return await self._grouped.submit(await self.read_bytes(plan))

    async def read_bytes(self, plan: ReadPlan) -> BlockBytes:
        """A block's stored bytes, ready for `decode_blocks`."""
        codecs = await self._ready()
        on_device = {name: reads for name, reads in plan.reads.items() if name in codecs}
        on_host = {name: reads for name, reads in plan.reads.items() if name not in codecs}
        if not on_host:
            payloads = await self._fetch(on_device, plan.assignment.epoch)
            self._stats.add(blocks_fetched=1)  # else the CPU reader counts it
            return BlockBytes(plan.buffer_rows, payloads, {})
        assert self._cpu_reader is not None
        payloads, host_arrays = await asyncio.gather(
            self._fetch(on_device, plan.assignment.epoch),
            self._cpu_reader.read_block(dataclasses.replace(plan, reads=on_host), None),
        )
        return BlockBytes(plan.buffer_rows, payloads, host_arrays)

    async def _fetch(
        self, reads: Mapping[str, tuple[ChunkRead, ...]], epoch: int
    ) -> list[FetchedChunk]:
        """The stored bytes of `reads` (of a block of `epoch`), fetched as the CPU reader
        fetches them."""
        payloads: list[FetchedChunk] = []
        pinned = self._device.type == "cuda"  # the decoder copies from them on its stream

        def collect(array: StoredArray, items: Loaded) -> None:
            # copied now (the fetch may reuse the memory after this call), by the fetching
            # thread, straight into the memory the device copies from
            for read, data in items:
                held = None
                if data is not None:
                    source = np.frombuffer(data, dtype=np.uint8)
                    held = torch.empty(source.size, dtype=torch.uint8, pin_memory=pinned)
                    held.numpy()[:] = source
                payloads.append(FetchedChunk(array.name, read, held))

        assert self._fetcher is not None
        await self._fetcher.fetch({self._stored[n]: r for n, r in reads.items()}, collect, epoch)
        return payloads

    def decode_blocks(
        self, blocks: Sequence[BlockBytes]
    ) -> list[dict[str, torch.Tensor] | Exception]:
        """Decode blocks in one call (`DeviceDecoder.decode_blocks`): each block's arrays,
        or the error of that block alone. Not thread-safe: `read_block` makes one call at a
        time.

        Args:
            blocks: blocks from `read_bytes`, in order.
        """
        assert self._decoder is not None  # read_bytes opened the arrays
        return self._decoder.decode_blocks(blocks)
