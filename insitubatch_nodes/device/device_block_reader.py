"""Read a block's chunks into device memory, decoding them there.

For every array the GPU can decode (`gpu_codecs`), a block's compressed chunk bytes are
read (plain file reads for local stores, `store.get` otherwise), packed into one
page-locked buffer, copied to the device in one transfer and decoded there by one batched
nvCOMP call, whole chunks straight into the block buffer; uncompressed chunks are viewed
in place. The host holds compressed bytes only, never decoded data. Arrays the GPU cannot
decode are read by the CPU `ChunkReader` and copied to the device, and the log says so
once per array.

Decode runs in the decode pool, one block at a time per reader (nvCOMP's codec object and
the staging buffer are shared), on the reader's own CUDA stream, which is synchronised
before the block is handed on: the block's tensors are complete when its future is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import zarr.api.asynchronous
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan, chunk_regions
from insitubatch_nodes.device.batch_layout import ALIGNMENT
from insitubatch_nodes.device.gpu_codecs import DeviceCodec, device_codec, load_nvcomp
from insitubatch_nodes.io.chunk_codec import ChunkDecoder, fast_decoder
from insitubatch_nodes.io.chunk_reader import ChunkReader, ChunkReadError, FetchStats
from insitubatch_nodes.io.shard_reader import ShardIndexes
from insitubatch_nodes.io.stores import local_root
from insitubatch_nodes.io.zarr_compat import chunk_key

log = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()  # (store, variable) fallbacks already logged


@dataclass(frozen=True)
class _Payload:
    name: str
    read: ChunkRead
    data: bytes | None  # None: never written, the fill value


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
    """Same contract as `ChunkReader.read_block`, but the arrays are tensors on `device`."""

    def __init__(
        self,
        store: Store,
        layouts: Mapping[str, VariableLayout],
        *,
        device: torch.device,
        max_inflight: int,
        decode_threads: int,
        where: str,
        stats: FetchStats,
        shard_indexes: ShardIndexes | None = None,
        zarr_pipeline: str | None = None,
    ) -> None:
        """`shard_indexes` and `zarr_pipeline` go to the CPU reader of the fallback arrays."""
        self._store = store
        self._shard_indexes = shard_indexes
        self._zarr_pipeline = zarr_pipeline
        self._layouts = dict(layouts)
        self._device = device
        self._max_inflight = max_inflight
        self._decode_threads = decode_threads
        self._where = where
        self._stats = stats
        self._local_root = local_root(store)
        self._codecs: dict[str, DeviceCodec] | None = None
        self._metadata: dict[str, tuple[Any, str]] = {}
        self._cpu_reader: ChunkReader | None = None
        self._inflight: asyncio.Semaphore | None = None
        self._opening: asyncio.Lock | None = None
        self._decode_lock = threading.Lock()
        self._staging: torch.Tensor | None = None
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._nvcomp_codecs: dict[str, Any] = {}

    @property
    def device_arrays(self) -> list[str]:
        """The arrays decoded on the device (known after the first block)."""
        return sorted(self._codecs or {})

    async def _ready(self) -> dict[str, DeviceCodec]:
        if self._opening is None:
            self._opening = asyncio.Lock()
            self._inflight = asyncio.Semaphore(self._max_inflight)
        async with self._opening:
            if self._codecs is None:
                group = await zarr.api.asynchronous.open_group(store=self._store, mode="r")
                nvcomp_ok = self._device.type == "cuda" and load_nvcomp() is not None
                codecs: dict[str, DeviceCodec] = {}
                fallback = {}
                for name, layout in self._layouts.items():
                    array = await group.getitem(name)
                    chosen = device_codec(fast_decoder(array), nvcomp_available=nvcomp_ok)  # type: ignore[arg-type]
                    if isinstance(chosen, DeviceCodec):
                        codecs[name] = chosen
                        self._metadata[name] = (array.metadata, array.store_path.path)
                    else:
                        if (self._where, name) not in _told:
                            _told.add((self._where, name))
                            log.warning("variable %r is decoded on the CPU: %s", name, chosen)
                        fallback[name] = layout
                if fallback:
                    self._cpu_reader = ChunkReader(
                        self._store,
                        fallback,
                        max_inflight=self._max_inflight,
                        decode_threads=self._decode_threads,
                        where=self._where,
                        stats=self._stats,
                        shard_indexes=self._shard_indexes,
                        zarr_pipeline=self._zarr_pipeline,
                    )
                self._codecs = codecs
        return self._codecs

    def _error(self, name: str, coords: tuple[int, ...], err: BaseException) -> ChunkReadError:
        return ChunkReadError(
            f"reading chunk {coords} of variable {name!r} from {self._where} failed: "
            f"{type(err).__name__}: {err}"
        )

    async def read_block(self, plan: ReadPlan) -> dict[str, torch.Tensor]:
        codecs = await self._ready()
        loop = asyncio.get_running_loop()
        on_device = {name: reads for name, reads in plan.reads.items() if name in codecs}
        on_host = {name: reads for name, reads in plan.reads.items() if name not in codecs}
        host_arrays: dict[str, np.ndarray] = {}
        if on_host:
            assert self._cpu_reader is not None
            host_arrays = await self._cpu_reader.read_block(
                dataclasses.replace(plan, reads=on_host)
            )
        payloads = await self._fetch(on_device)
        return await loop.run_in_executor(
            None, self._decode_block, plan.num_samples, payloads, host_arrays
        )

    async def _fetch(self, reads: Mapping[str, tuple[ChunkRead, ...]]) -> list[_Payload]:
        loop = asyncio.get_running_loop()
        if self._local_root is not None:
            root = self._local_root

            def read_files(name: str, batch: tuple[ChunkRead, ...]) -> list[_Payload]:
                metadata, prefix = self._metadata[name]
                out = []
                for read in batch:
                    try:
                        data: bytes | None = (
                            root / chunk_key(metadata, prefix, read.coords)
                        ).read_bytes()
                    except FileNotFoundError:
                        data = None
                    except OSError as err:
                        raise self._error(name, read.coords, err) from err
                    out.append(_Payload(name, read, data))
                self._stats.add("local_file_reads", len(batch))
                return out

            per_hop = max(1, sum(len(r) for r in reads.values()) // (2 * self._decode_threads))
            parts = await asyncio.gather(
                *(
                    loop.run_in_executor(None, read_files, name, batch[i : i + per_hop])
                    for name, batch in reads.items()
                    for i in range(0, len(batch), per_hop)
                )
            )
            return [payload for part in parts for payload in part]

        async def get(name: str, read: ChunkRead) -> _Payload:
            metadata, prefix = self._metadata[name]
            assert self._inflight is not None
            try:
                async with self._inflight:
                    found = await self._store.get(
                        chunk_key(metadata, prefix, read.coords),
                        prototype=default_buffer_prototype(),
                    )
            except Exception as err:
                raise self._error(name, read.coords, err) from err
            return _Payload(name, read, None if found is None else found.to_bytes())

        return list(await asyncio.gather(*(get(n, r) for n, batch in reads.items() for r in batch)))

    def _staging_buffer(self, nbytes: int) -> torch.Tensor:
        if self._staging is None or self._staging.numel() < nbytes:
            self._staging = None
            self._staging = torch.empty(
                max(nbytes, 1), dtype=torch.uint8, pin_memory=self._stream is not None
            )
        return self._staging[:nbytes]

    def _decode_block(
        self,
        num_samples: int,
        payloads: list[_Payload],
        host_arrays: Mapping[str, np.ndarray],
    ) -> dict[str, torch.Tensor]:
        on_stream = (
            torch.cuda.stream(self._stream)
            if self._stream is not None
            else contextlib.nullcontext()
        )
        with self._decode_lock, on_stream:
            out = {
                name: torch.empty(
                    (num_samples, *layout.sample_shape),
                    dtype=torch_dtype(np.dtype(layout.dtype)),
                    device=self._device,
                )
                for name, layout in self._layouts.items()
            }
            for name, array in host_arrays.items():
                out[name].copy_(torch.from_numpy(array))
            present = [p for p in payloads if p.data is not None]
            offsets = []
            total = 0
            for payload in present:
                offsets.append(total)
                total += -(-len(payload.data or b"") // ALIGNMENT) * ALIGNMENT
            host = self._staging_buffer(total)
            staged = host.numpy()
            for payload, offset in zip(present, offsets, strict=True):
                data = np.frombuffer(payload.data or b"", dtype=np.uint8)
                staged[offset : offset + data.size] = data
            device_bytes = host.to(self._device, non_blocking=True)
            chunks = [
                device_bytes[offset : offset + len(payload.data or b"")]
                for payload, offset in zip(present, offsets, strict=True)
            ]
            self._decode_chunks(present, chunks, out)
            for payload in payloads:
                if payload.data is None:
                    target, _ = chunk_regions(self._layouts[payload.name], payload.read)
                    out[payload.name][target] = self._codec(payload.name).decoder.fill_value
            if self._stream is not None:
                self._stream.synchronize()  # the block is complete when its future is
        self._stats.chunks_read += len(payloads)
        self._stats.bytes_decoded += sum(out[name].nbytes for name in {p.name for p in payloads})
        return out

    def _codec(self, name: str) -> DeviceCodec:
        assert self._codecs is not None
        return self._codecs[name]

    def _decode_chunks(
        self,
        payloads: list[_Payload],
        chunks: list[torch.Tensor],
        out: dict[str, torch.Tensor],
    ) -> None:
        """Whole chunks decode straight into the block buffer; edge chunks (padded in
        storage) into a scratch buffer first, then their valid part is copied over."""
        by_algorithm: dict[str | None, list[int]] = {}
        for i, payload in enumerate(payloads):
            by_algorithm.setdefault(self._codec(payload.name).algorithm, []).append(i)
        for algorithm, indices in by_algorithm.items():
            places = []
            for i in indices:
                payload = payloads[i]
                decoder = self._codec(payload.name).decoder
                target, valid = chunk_regions(self._layouts[payload.name], payload.read)
                region = out[payload.name][target]
                whole = tuple(region.shape) == decoder.chunk_shape and region.is_contiguous()
                chunk_nbytes = int(np.prod(decoder.chunk_shape)) * decoder.dtype.itemsize
                scratch = (
                    region.view(-1).view(torch.uint8)
                    if whole
                    else torch.empty(chunk_nbytes, dtype=torch.uint8, device=self._device)
                )
                places.append(_Place(payload, decoder, region, valid, whole, scratch))
            if algorithm is None:
                for i, place in zip(indices, places, strict=True):
                    stored, expected = chunks[i].numel(), place.scratch.numel()
                    if stored != expected:
                        raise self._error(
                            place.payload.name,
                            place.payload.read.coords,
                            ValueError(f"{stored} bytes stored, {expected} expected uncompressed"),
                        )
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
