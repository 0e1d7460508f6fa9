"""Read a block's chunks into device memory, decoding them there.

For every array the GPU can decode (`gpu_codecs`; sharded arrays by their inner chunks),
a block's stored chunk bytes are fetched as the CPU reader fetches them (`stored_chunks`:
plain file reads, gets, shard ranges; the same retries and length checks), packed into one
page-locked buffer, copied to the device in one transfer and decoded there by one batched
nvCOMP call, whole chunks straight into the block buffer; uncompressed chunks are copied
as they are. The host holds compressed bytes only, never decoded data. Arrays the GPU
cannot decode are read by the CPU `ChunkReader` and copied to the device, and the log
says so once per array.

Decode runs in the decode pool, one call at a time per reader (nvCOMP's codec object and
the staging buffer are shared), on the reader's own CUDA stream, which is synchronised
before the blocks are handed on: a block's tensors are complete when its future is.
Blocks whose bytes arrive while a call runs are decoded together in the next call
(`grouped_calls`): nvCOMP is several times faster per chunk with more chunks per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan, chunk_regions
from insitubatch_nodes.device.batch_layout import ALIGNMENT
from insitubatch_nodes.device.gpu_codecs import DeviceCodec, device_codec, load_nvcomp
from insitubatch_nodes.device.grouped_calls import GroupedCalls
from insitubatch_nodes.io.block_reader import ReadContext
from insitubatch_nodes.io.chunk_codec import ChunkDecoder
from insitubatch_nodes.io.chunk_errors import (
    ChunkBytesError,
    ChunkReadError,
    chunk_read_error,
    size_mismatch,
)
from insitubatch_nodes.io.chunk_reader import ChunkReader
from insitubatch_nodes.io.redact import scrubbed
from insitubatch_nodes.io.shard_reader import Loaded
from insitubatch_nodes.io.stored_chunks import ChunkFetcher, StoredArray, stored_array
from insitubatch_nodes.io.verified_decode import strip_crc32c
from insitubatch_nodes.io.zstd_frames import frame_at

log = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()  # (store, variable) fallbacks already logged


@dataclass(frozen=True)
class _Payload:
    name: str
    read: ChunkRead
    data: bytes | None  # None: never written, the fill value


@dataclass(frozen=True)
class BlockBytes:
    """A block read but not yet decoded: its chunks' stored bytes, and the arrays the CPU
    decoded for it (those the GPU cannot decode)."""

    buffer_rows: Mapping[str, int]  # each array's rows: samples, and any window's halo
    payloads: list[_Payload]
    host_arrays: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class _Place:
    """Where one chunk decodes to: its block region, or a scratch buffer for edge chunks."""

    payload: _Payload
    decoder: ChunkDecoder
    region: torch.Tensor
    valid: tuple[slice, ...]
    whole: bool
    scratch: torch.Tensor  # bytes; a view of `region` when `whole`


def torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class DeviceBlockReader:
    """A `BlockReader` whose blocks are tensors on `device`, decoded there (see the module).

    Args:
        context: what every reader of the fetch node shares (`block_reader.ReadContext`).
        device: the device the blocks are decoded on and live on.
    """

    def __init__(self, context: ReadContext, device: torch.device) -> None:
        """Every read goes through the context's retry policy and counters; the arrays
        the device cannot decode are read by a `ChunkReader` over the same context (the
        same opened arrays, shard indexes and block memory)."""
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
        self._staging: torch.Tensor | None = None
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._nvcomp_codecs: dict[str, Any] = {}

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
                    decoder = None if stored is None else stored.decoder
                    chosen = device_codec(decoder, nvcomp_available=nvcomp_ok)
                    if isinstance(chosen, DeviceCodec):
                        assert stored is not None
                        codecs[name] = chosen
                        self._stored[name] = stored
                    else:
                        if (self._where, name) not in _told:
                            _told.add((self._where, name))
                            log.warning("variable %r is decoded on the CPU: %s", name, chosen)
                        fallback[name] = self._layouts[name]
                if fallback:
                    self._cpu_reader = ChunkReader(self._context, fallback, self._fetcher)
                self._codecs = codecs
        return self._codecs

    def _error(self, payload: _Payload, err: BaseException) -> ChunkReadError:
        key = self._stored[payload.name].key(payload.read.coords)
        return chunk_read_error(payload.name, payload.read.coords, key, self._where, err)

    async def read_block(self, plan: ReadPlan) -> dict[str, torch.Tensor]:
        return await self._grouped.submit(await self.read_bytes(plan))

    async def read_bytes(self, plan: ReadPlan) -> BlockBytes:
        """A block's stored bytes, ready for `decode_blocks`."""
        codecs = await self._ready()
        on_device = {name: reads for name, reads in plan.reads.items() if name in codecs}
        on_host = {name: reads for name, reads in plan.reads.items() if name not in codecs}
        if not on_host:
            payloads = await self._fetch(on_device)
            self._stats.add(blocks_fetched=1)  # else the CPU reader counts it
            return BlockBytes(plan.buffer_rows, payloads, {})
        assert self._cpu_reader is not None
        payloads, host_arrays = await asyncio.gather(
            self._fetch(on_device),
            self._cpu_reader.read_block(dataclasses.replace(plan, reads=on_host)),
        )
        return BlockBytes(plan.buffer_rows, payloads, host_arrays)

    async def _fetch(self, reads: Mapping[str, tuple[ChunkRead, ...]]) -> list[_Payload]:
        """The stored bytes of `reads`, fetched as the CPU reader fetches them."""
        payloads: list[_Payload] = []

        def collect(array: StoredArray, items: Loaded) -> None:
            payloads.extend(  # copied: the fetch may reuse the memory after this call
                [
                    _Payload(array.name, read, None if data is None else bytes(data))
                    for read, data in items
                ]
            )

        assert self._fetcher is not None
        await self._fetcher.fetch({self._stored[n]: r for n, r in reads.items()}, collect)
        return payloads

    def _staging_buffer(self, nbytes: int) -> torch.Tensor:
        if self._staging is None or self._staging.numel() < nbytes:
            self._staging = None
            self._staging = torch.empty(
                max(nbytes, 1), dtype=torch.uint8, pin_memory=self._stream is not None
            )
        return self._staging[:nbytes]

    def decode_blocks(
        self, blocks: Sequence[BlockBytes]
    ) -> list[dict[str, torch.Tensor] | Exception]:
        """Decode blocks in one call; each block's arrays, or the error of that block alone
        (when the call fails, every block is decoded again on its own to find out whose
        fault it was). Not thread-safe: `read_block` makes one call at a time."""
        try:
            return list(self._decode_together(blocks))
        except Exception as err:
            if len(blocks) == 1:
                return [err]
        outcomes: list[dict[str, torch.Tensor] | Exception] = []
        for block in blocks:
            try:
                outcomes.extend(self._decode_together([block]))
            except Exception as err:
                outcomes.append(err)
        return outcomes

    def _decode_together(self, blocks: Sequence[BlockBytes]) -> list[dict[str, torch.Tensor]]:
        self._stats.add(device_decode_calls=1)
        on_stream = (
            torch.cuda.stream(self._stream)
            if self._stream is not None
            else contextlib.nullcontext()
        )
        with on_stream:
            try:
                outs = self._decode_on_stream(blocks)
            finally:
                if self._stream is not None:  # the blocks are complete when their futures
                    self._stream.synchronize()  # are; after a failure, the staging is free
        for block, out in zip(blocks, outs, strict=True):
            self._stats.add(chunks_read=len(block.payloads))
            names = {p.name for p in block.payloads}
            self._stats.add(bytes_decoded=sum(out[name].nbytes for name in names))
        return outs

    def _decode_on_stream(self, blocks: Sequence[BlockBytes]) -> list[dict[str, torch.Tensor]]:
        outs = [self._block_tensors(block) for block in blocks]
        targets = [
            (payload, out)
            for block, out in zip(blocks, outs, strict=True)
            for payload in block.payloads
        ]
        on_device = []
        for payload, out in targets:
            if payload.data is None:
                continue
            stream = self._device_stream(payload)
            if stream is None:
                self._decode_on_host(payload, out)
            else:
                on_device.append((payload, out, stream))
        offsets = []
        total = 0
        for _, _, stream in on_device:
            offsets.append(total)
            total += -(-len(stream) // ALIGNMENT) * ALIGNMENT
        host = self._staging_buffer(total)
        staged = host.numpy()
        for (_, _, stream), offset in zip(on_device, offsets, strict=True):
            staged[offset : offset + len(stream)] = np.frombuffer(stream, dtype=np.uint8)
        device_bytes = host.to(self._device, non_blocking=True)
        chunks = [
            device_bytes[offset : offset + len(stream)]
            for (_, _, stream), offset in zip(on_device, offsets, strict=True)
        ]
        present = [(payload, out) for payload, out, _ in on_device]
        self._decode_chunks(present, chunks)
        for payload, out in targets:
            if payload.data is None:
                target, _ = chunk_regions(self._layouts[payload.name], payload.read)
                out[payload.name][target] = self._codec(payload.name).decoder.fill_value
        return outs

    def _device_stream(self, payload: _Payload) -> memoryview | None:
        """The chunk's stream, checked on the host, if the device may decode it; `None`
        if the host must. nvCOMP decodes only well-formed input, reports no sizes and checks
        no checksums, so it gets a stream only when the host has checked its crc32c and
        its length (uncompressed) or that it is one well-formed zstd frame declaring the
        chunk's size with no content checksum. Anything else valid (several frames, no
        declared size, a checksum in the frame) is decoded by libzstd on the host, which
        checks it all; anything invalid is a `CorruptChunkError`."""
        decoder = self._codec(payload.name).decoder
        assert payload.data is not None
        try:
            stream = strip_crc32c(payload.data) if decoder.checksum else memoryview(payload.data)
            expected = decoder.chunk_nbytes
            if decoder.compressor is None:
                if len(stream) != expected:
                    raise size_mismatch(expected, len(stream), "is")
                return stream
            frame = frame_at(stream)
            one_frame = frame.end == len(stream)
            if one_frame and frame.content_size not in (None, expected):
                raise size_mismatch(expected, frame.content_size, "declares")
            if one_frame and frame.content_size == expected and not frame.has_checksum:
                return stream
        except ChunkBytesError as err:
            raise self._error(payload, err) from scrubbed(err)
        return None

    def _decode_on_host(self, payload: _Payload, out: dict[str, torch.Tensor]) -> None:
        """Decode one chunk on the host (verified there) and copy its rows to the device."""
        decoder = self._codec(payload.name).decoder
        target, valid = chunk_regions(self._layouts[payload.name], payload.read)
        chunk = np.empty(decoder.chunk_shape, dtype=decoder.dtype)
        try:
            decoder.decode_into(payload.data, chunk, tuple(slice(None) for _ in chunk.shape))
        except ChunkBytesError as err:
            raise self._error(payload, err) from scrubbed(err)
        out[payload.name][target].copy_(torch.from_numpy(chunk[valid]))
        self._stats.add(host_decoded_chunks=1)

    def _block_tensors(self, block: BlockBytes) -> dict[str, torch.Tensor]:
        """The block's arrays on the device, the CPU-decoded ones already copied in."""
        out = {
            name: torch.empty(
                (rows, *self._layouts[name].sample_shape),
                dtype=torch_dtype(np.dtype(self._layouts[name].dtype)),
                device=self._device,
            )
            for name, rows in block.buffer_rows.items()
        }
        for name, array in block.host_arrays.items():
            out[name].copy_(torch.from_numpy(array))
        return out

    def _codec(self, name: str) -> DeviceCodec:
        assert self._codecs is not None
        return self._codecs[name]

    def _decode_chunks(
        self,
        payloads: list[tuple[_Payload, dict[str, torch.Tensor]]],
        chunks: list[torch.Tensor],
    ) -> None:
        """Whole chunks decode straight into the block buffer; edge chunks (padded in
        storage) into a scratch buffer first, then their valid part is copied over."""
        by_algorithm: dict[str | None, list[int]] = {}
        for i, (payload, _) in enumerate(payloads):
            by_algorithm.setdefault(self._codec(payload.name).algorithm, []).append(i)
        for algorithm, indices in by_algorithm.items():
            places = []
            for i in indices:
                payload, out = payloads[i]
                decoder = self._codec(payload.name).decoder
                target, valid = chunk_regions(self._layouts[payload.name], payload.read)
                region = out[payload.name][target]
                whole = tuple(region.shape) == decoder.chunk_shape and region.is_contiguous()
                scratch = (
                    region.view(-1).view(torch.uint8)
                    if whole
                    else torch.empty(decoder.chunk_nbytes, dtype=torch.uint8, device=self._device)
                )
                places.append(_Place(payload, decoder, region, valid, whole, scratch))
            if algorithm is None:  # sizes checked by _verified_stream
                for i, place in zip(indices, places, strict=True):
                    place.scratch.copy_(chunks[i])
            else:
                targets = [place.scratch for place in places]
                self._nvcomp_decode(algorithm, [chunks[i] for i in indices], targets)
            for place in places:
                if not place.whole:
                    dtype = torch_dtype(place.decoder.dtype)
                    chunk = place.scratch.view(dtype).view(place.decoder.chunk_shape)
                    place.region.copy_(chunk[place.valid])

    def _nvcomp_decode(
        self, algorithm: str, chunks: list[torch.Tensor], into: list[torch.Tensor]
    ) -> None:
        """One batched decode on the reader's stream, into buffers we own (the caller
        synchronises the stream before any of them is read or freed)."""
        nvcomp = load_nvcomp()
        assert nvcomp is not None and self._stream is not None
        codec = self._nvcomp_codecs.get(algorithm)
        if codec is None:
            codec = nvcomp.Codec(
                algorithm=algorithm,
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                device_id=self._device.index or 0,
                cuda_stream=self._stream.cuda_stream,
            )
            self._nvcomp_codecs[algorithm] = codec
        stream = self._stream.cuda_stream
        sources = nvcomp.as_arrays(chunks, cuda_stream=stream)
        targets = nvcomp.as_arrays(into, cuda_stream=stream)
        codec.decode(sources, out=targets)
        self._stream.synchronize()  # nvCOMP's batch objects must outlive the decode
