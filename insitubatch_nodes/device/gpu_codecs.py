"""Which arrays the GPU can decode, and with what: decided once per array, from its codec.

nvCOMP decodes raw zstd frames (what zarr's `ZstdCodec` and numcodecs' `Zstd` write);
uncompressed chunks need no decoding at all. It neither validates its input nor checks
zstd's content checksums: the reader checks each frame's structure and declared size on
the host first (`verified_decode`), and arrays whose frames carry checksums are decoded on
the CPU, where libzstd verifies them. It cannot read blosc's
container (blosc-lz4 included: the lz4 inside is split and shuffled by blosc's own
framing), so such arrays, and every layout the library does not read itself (filters,
F order, nested sharding), fall back to the CPU decoder, with the reason in one log line.
Sharded arrays are judged by their inner chunks' codecs.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType

from insitubatch_nodes.io.reads.chunk_codec import ChunkDecoder

NVCOMP_MODULE = "nvidia.nvcomp"
# numcodecs codec_id -> nvCOMP algorithm. nvCOMP also has "Gzip", but the one run that
# tried it on zarr's gzip chunks aborted the process on an H100 (nvCOMP 6.0.0.12; cause not
# established, not retried): CPU decode for those until someone checks it.
_NVCOMP_ALGORITHMS = {"zstd": "Zstd"}


@dataclass(frozen=True)
class DeviceCodec:
    """`algorithm` is the nvCOMP algorithm's name, or `None` for uncompressed chunks."""

    algorithm: str | None
    decoder: ChunkDecoder


@functools.cache
def load_nvcomp() -> ModuleType | None:
    """nvCOMP's Python module (the `gpu` extra), or `None` when it cannot be loaded."""
    try:
        return importlib.import_module(NVCOMP_MODULE)
    except (ImportError, OSError):
        return None


def device_codec(decoder: ChunkDecoder | None, *, nvcomp_available: bool) -> DeviceCodec | str:
    """How the GPU decodes an array's chunks, or why it cannot (then: decode on the CPU)."""
    if decoder is None:
        return (
            "its layout (filters, F order, nested sharding or its codec) is not one the GPU decodes"
        )
    if decoder.dtype.byteorder == ">":
        return "its values are big-endian"
    if decoder.compressor is None:
        return DeviceCodec(None, decoder)
    codec_id = str(decoder.compressor.codec_id)
    algorithm = _NVCOMP_ALGORITHMS.get(codec_id)
    if algorithm is None:
        return f"nvCOMP cannot decode {codec_id!r} chunks"
    if getattr(decoder.compressor, "checksum", False):
        return f"its {codec_id!r} frames carry content checksums, which nvCOMP does not verify"
    if not nvcomp_available:
        return (
            f"its {codec_id!r} chunks need nvCOMP, which is not installed "
            f"(pip install 'insitubatch-nodes[gpu]')"
        )
    return DeviceCodec(algorithm, decoder)
