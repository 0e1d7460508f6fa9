"""Decode blocks' stored chunk bytes into tensors on a device.

The device reader (`device_block_reader`) fetches a block's stored bytes into page-locked
host memory; this decoder turns them into the block's tensors. It is its own module because
it is the half of the device path that owns device state: the CUDA stream every decode
runs on, nvCOMP's codec objects, and the scratch arena partly kept chunks decode into; and
because its input, a `BlockBytes`, is all it needs, it can decode any number of blocks in
one call (`grouped_calls`), which is where nvCOMP is fast.

nvCOMP decodes only well-formed input, reports no sizes and checks no checksums, so every
chunk is checked on the host first: its crc32c, then what the codec table says the device
may take (`DeviceCodec.takes`: the exact length uncompressed, one zstd frame declaring the
chunk's size); anything else is decoded on the host, by the CPU's own checked decode
(`ChunkDecoder.decode_into`), and copied over. Whole chunks
decode straight into the block buffer; chunks only part of which is kept decode into a
scratch arena of bounded size, round by round, and their part is copied over.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, Keep, chunk_regions
from insitubatch_nodes.device.batch_layout import ALIGNMENT
from insitubatch_nodes.device.gpu_codecs import DeviceCodec, load_nvcomp
from insitubatch_nodes.device.nvcomp_scratch import use_torch_scratch
from insitubatch_nodes.io.reads.chunk_codec import ChunkDecoder
from insitubatch_nodes.io.reads.chunk_errors import (
    ChunkBytesError,
    ChunkReadError,
    chunk_read_error,
)
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.stored_array import StoredArray
from insitubatch_nodes.io.reads.verified_decode import strip_crc32c
from insitubatch_nodes.io.stores.redact import scrubbed

DEVICE_SCRATCH_BYTES = 64 << 20  # device scratch for partly kept chunks, per round
# Where each chunk's scratch starts in a round's arena: a multiple of this, so a chunk of
# any dtype can be viewed there whatever the byte sizes of the chunks before it.
SCRATCH_ALIGN = 256


@dataclass(frozen=True)
class FetchedChunk:
    """One chunk of a block as fetched: which array, which read, and its stored bytes."""

    name: str
    read: ChunkRead
    held: torch.Tensor | None  # the stored bytes (uint8, page-locked on CUDA); None: never
    # written, the fill value

    @property
    def data(self) -> memoryview:
        """The stored bytes, as the host checks and decodes them."""
        assert self.held is not None
        return memoryview(self.held.numpy())


@dataclass(frozen=True)
class BlockBytes:
    """A block read but not yet decoded: its chunks' stored bytes, and the arrays the CPU
    decoded for it (those the GPU cannot decode)."""

    buffer_rows: Mapping[str, int]  # each array's rows: samples, and any window's halo
    payloads: list[FetchedChunk]
    host_arrays: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class _Part:
    """A chunk only part of which is kept (an edge chunk, some rows, picked positions):
    decoded into scratch first, then `chunk[keep]` is copied to `region`."""

    index: int  # among the decode call's chunks
    decoder: ChunkDecoder
    region: torch.Tensor
    keep: Keep


def _scratch_nbytes(part: _Part) -> int:
    """Bytes of a round's arena that `part`'s chunk takes: its own, to the next alignment."""
    return -(-part.decoder.chunk_nbytes // SCRATCH_ALIGN) * SCRATCH_ALIGN


def _rounds(parts: list[_Part]) -> list[list[_Part]]:
    """`parts` in rounds of at most `DEVICE_SCRATCH_BYTES` of chunks (one chunk at least)."""
    rounds: list[list[_Part]] = []
    held = 0
    for part in parts:
        nbytes = _scratch_nbytes(part)
        if not rounds or held + nbytes > DEVICE_SCRATCH_BYTES:
            rounds.append([])
            held = 0
        rounds[-1].append(part)
        held += nbytes
    return rounds


def torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


class DeviceDecoder:
    """Decodes `BlockBytes` into each block's tensors on `device` (see the module).

    Args:
        codecs: how each array the device decodes is decoded there, by name.
        stored: each of those arrays as stored (its chunk keys, for errors), by name.
        layouts: every selected array's layout, by name (the CPU-decoded ones too).
        device: the device the blocks are decoded on and live on.
        where: the store as shown in messages (credentials redacted).
        stats: the counters the decode updates.
    """

    def __init__(
        self,
        codecs: Mapping[str, DeviceCodec],
        stored: Mapping[str, StoredArray],
        layouts: Mapping[str, VariableLayout],
        device: torch.device,
        where: str,
        stats: FetchStats,
    ) -> None:
        """One CUDA stream per decoder (none on the CPU), synchronised at the end of every
        call; nvCOMP's codec objects are made on first use, one per algorithm."""
        self._codecs = dict(codecs)
        self._stored = dict(stored)
        self._layouts = dict(layouts)
        self._device = device
        self._where = where
        self._stats = stats
        self._arena: torch.Tensor | None = None  # device scratch for partly kept chunks
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._nvcomp_codecs: dict[str, Any] = {}

    def _error(self, payload: FetchedChunk, err: BaseException) -> ChunkReadError:
        key = self._stored[payload.name].key(payload.read.coords)
        return chunk_read_error(payload.name, payload.read.coords, key, self._where, err)

    def decode_blocks(
        self, blocks: Sequence[BlockBytes]
    ) -> list[dict[str, torch.Tensor] | Exception]:
        """Decode blocks in one call; each block's arrays, or the error of that block alone
        (when the call fails, every block is decoded again on its own to find out whose
        fault it was). Not thread-safe: the reader makes one call at a time.

        Args:
            blocks: blocks read by the reader (`DeviceBlockReader.read_bytes`), in order.
        """
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
        started = time.perf_counter_ns()
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
                    self._stream.synchronize()  # are; after a failure, the bytes are free
                elapsed = time.perf_counter_ns() - started
                self._stats.add(device_decode_calls=1, device_decode_ns=elapsed)
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
            if payload.held is None:
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
        device_bytes = torch.empty(max(total, 1), dtype=torch.uint8, device=self._device)
        chunks = []
        for (payload, _, stream), offset in zip(on_device, offsets, strict=True):
            assert payload.held is not None  # a stream starts where its stored bytes do
            chunk = device_bytes[offset : offset + len(stream)]
            chunk.copy_(payload.held[: len(stream)], non_blocking=True)
            chunks.append(chunk)
        present = [(payload, out) for payload, out, _ in on_device]
        self._decode_chunks(present, chunks)
        for payload, out in targets:
            if payload.held is None:
                target, _ = chunk_regions(self._layouts[payload.name], payload.read)
                out[payload.name][target] = self._codec(payload.name).decoder.fill_value
        return outs

    def _device_stream(self, payload: FetchedChunk) -> memoryview | None:
        """The chunk's stream, checked on the host, if the device may decode it; `None`
        if the host must. nvCOMP decodes only well-formed input, reports no sizes and checks
        no checksums, so it gets a stream only when the host has checked its crc32c and the
        codec table's check for the device takes it (`DeviceCodec.takes`). Anything else,
        valid (several frames, no declared size, a checksum in the frame, skippable frames)
        or not, is decoded on the host, whose decode checks it all: an invalid chunk is a
        `CorruptChunkError` either way."""
        codec = self._codec(payload.name)
        decoder = codec.decoder
        try:
            stream = strip_crc32c(payload.data) if decoder.checksum else memoryview(payload.data)
        except ChunkBytesError as err:
            raise self._error(payload, err) from scrubbed(err)
        return stream if codec.takes(stream, decoder.chunk_nbytes) else None

    def _decode_on_host(self, payload: FetchedChunk, out: dict[str, torch.Tensor]) -> None:
        """Decode one chunk on the host (verified there) and copy its part to the device."""
        decoder = self._codec(payload.name).decoder
        target, keep = chunk_regions(self._layouts[payload.name], payload.read)
        region = out[payload.name][target]
        part = np.empty(tuple(region.shape), dtype=decoder.dtype)
        try:
            decoder.decode_into(payload.data, part, keep)
        except ChunkBytesError as err:
            raise self._error(payload, err) from scrubbed(err)
        region.copy_(torch.from_numpy(part))
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
        return self._codecs[name]

    def _decode_chunks(
        self,
        payloads: list[tuple[FetchedChunk, dict[str, torch.Tensor]]],
        chunks: list[torch.Tensor],
    ) -> None:
        """Whole chunks decode straight into the block buffer; chunks only part of which
        is kept decode into a scratch arena of at most `DEVICE_SCRATCH_BYTES` (or one
        chunk) per round, their part copied over after each round: device memory beyond
        the block stays bounded however many such chunks a call holds."""
        by_algorithm: dict[str | None, list[int]] = {}
        for i, (payload, _) in enumerate(payloads):
            by_algorithm.setdefault(self._codec(payload.name).algorithm, []).append(i)
        for algorithm, indices in by_algorithm.items():
            whole: list[tuple[int, torch.Tensor]] = []
            parts: list[_Part] = []
            for i in indices:
                payload, out = payloads[i]
                decoder = self._codec(payload.name).decoder
                target, keep = chunk_regions(self._layouts[payload.name], payload.read)
                region = out[payload.name][target]
                if tuple(region.shape) == decoder.chunk_shape and region.is_contiguous():
                    whole.append((i, region.view(-1).view(torch.uint8)))
                else:
                    parts.append(_Part(i, decoder, region, keep))
            self._decode_into(algorithm, [chunks[i] for i, _ in whole], [t for _, t in whole])
            for round_parts in _rounds(parts):
                sizes = [_scratch_nbytes(p) for p in round_parts]
                arena = self._scratch_arena(sum(sizes))
                targets = [
                    slot[: p.decoder.chunk_nbytes]
                    for p, slot in zip(round_parts, arena.split(sizes), strict=True)
                ]
                self._decode_into(algorithm, [chunks[p.index] for p in round_parts], targets)
                for part, target in zip(round_parts, targets, strict=True):
                    chunk = target.view(torch_dtype(part.decoder.dtype))
                    chunk = chunk.view(part.decoder.chunk_shape)
                    part.region.copy_(chunk[self._torch_index(part.keep)])

    def _decode_into(
        self, algorithm: str | None, chunks: list[torch.Tensor], into: list[torch.Tensor]
    ) -> None:
        """Decode (or, uncompressed, copy: sizes checked by `_device_stream`) on the stream."""
        if not chunks:
            return
        if algorithm is None:
            for chunk, target in zip(chunks, into, strict=True):
                target.copy_(chunk)
        else:
            self._nvcomp_decode(algorithm, chunks, into)

    def _scratch_arena(self, nbytes: int) -> torch.Tensor:
        """Device bytes for one round of partly kept chunks, reused: the rounds run in
        order on the reader's stream, so a round's copies are done before the next decode
        writes the arena."""
        if self._arena is None or self._arena.numel() < nbytes:
            self._arena = None
            self._arena = torch.empty(nbytes, dtype=torch.uint8, device=self._device)
        return self._arena[:nbytes]

    def _torch_index(self, keep: Keep) -> tuple[slice | torch.Tensor, ...]:
        return tuple(
            k if isinstance(k, slice) else torch.as_tensor(k, device=self._device) for k in keep
        )

    def _nvcomp_decode(
        self, algorithm: str, chunks: list[torch.Tensor], into: list[torch.Tensor]
    ) -> None:
        """One batched decode on the reader's stream, into buffers we own (the caller
        synchronises the stream before any of them is read or freed)."""
        nvcomp = load_nvcomp()
        assert nvcomp is not None and self._stream is not None
        codec = self._nvcomp_codecs.get(algorithm)
        if codec is None:
            use_torch_scratch(nvcomp)  # before the codec, which may take scratch as it starts
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
