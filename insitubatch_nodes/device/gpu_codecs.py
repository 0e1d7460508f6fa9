"""Which arrays the GPU can decode, and with what: decided once per array, from its codec.

The codec table (`io/reads/codecs`) says which compressors nvCOMP decodes (zstd today:
what zarr's `zstd` codec and numcodecs' `Zstd` write) and which streams it may be given;
uncompressed chunks need no decoding at all. nvCOMP neither validates its input nor
checks content checksums, so each stream is checked on the host first (`DeviceCodec.takes`;
anything it does not take is decoded on the host, which checks it all), and arrays whose
frames carry checksums are decoded on the CPU, where libzstd verifies them. Every other
compressor, and every layout the library does not read itself (filters, F order, nested
sharding, codecs the table does not know), falls back to the CPU decoder, with the reason
in one log line. Sharded arrays are judged by their inner chunks' codecs.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from insitubatch_nodes.io.reads.chunk_codec import ChunkDecoder
from insitubatch_nodes.io.reads.codecs import ZarrDecodes

NVCOMP_MODULE = "nvidia.nvcomp"


def _whole_chunk(stream: Any, expected: int) -> bool:
    """An uncompressed chunk goes to the device as it is when it is exactly the chunk."""
    return len(stream) == expected


@dataclass(frozen=True)
class DeviceCodec:
    """How the device decodes one array's chunks.

    Args:
        algorithm: nvCOMP's algorithm, or `None` for uncompressed chunks (copied).
        decoder: the array's chunk decoder (the host decodes with it what the device
            does not take).
        takes: whether a stored stream (a crc32c codec's checksum stripped) may go to the
            device as it is, for a chunk of the given decoded bytes (`NvcompDecode.takes`).
    """

    algorithm: str | None
    decoder: ChunkDecoder
    takes: Callable[[Any, int], bool] = _whole_chunk


@functools.cache
def load_nvcomp() -> ModuleType | None:
    """nvCOMP's Python module (the `gpu` extra), or `None` when it cannot be loaded."""
    try:
        return importlib.import_module(NVCOMP_MODULE)
    except (ImportError, OSError):
        return None


def device_codec(
    decoder: ChunkDecoder | ZarrDecodes | None, *, nvcomp_available: bool
) -> DeviceCodec | str:
    """How the GPU decodes an array's chunks, or why it cannot (then: decode on the CPU).

    Args:
        decoder: the array's chunk decoder (its inner chunks' when sharded), or why zarr
            decodes it (`None`: the library does not read it, for no reason given).
        nvcomp_available: whether nvCOMP can be used on the device.
    """
    if not isinstance(decoder, ChunkDecoder):
        why = "" if decoder is None else f": {decoder.reason}"
        return (
            "its layout (filters, F order, nested sharding or its codec) is not one the GPU "
            f"decodes{why}"
        )
    if decoder.dtype.byteorder == ">":
        return "its values are big-endian"
    compressor = decoder.compressor
    if compressor is None:
        return DeviceCodec(None, decoder)
    name = compressor.kind.name
    nvcomp = compressor.kind.nvcomp
    if nvcomp is None:
        return f"nvCOMP cannot decode {name!r} chunks"
    if compressor.checksummed:
        return f"its {name!r} frames carry content checksums, which nvCOMP does not verify"
    if not nvcomp_available:
        return (
            f"its {name!r} chunks need nvCOMP, which is not installed "
            f"(pip install 'insitubatch-nodes[gpu]')"
        )
    return DeviceCodec(nvcomp.algorithm, decoder, nvcomp.takes)
