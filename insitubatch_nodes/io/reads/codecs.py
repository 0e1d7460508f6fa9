"""The codecs the library decodes itself, keyed by the names zarr registers them under.

One table that the CPU and GPU readers, the shard reader, `insitubatch inspect` and the
checks on an array's layout all ask. An array names its codecs in its metadata (a Zarr v3
codec's `name`, a v2 compressor's numcodecs `id`); those names, never Python class names,
are the keys: a class may be renamed or wrapped between zarr releases, while the name is
what the store holds.

Each compressor here says how numcodecs' decoder is made from the array's configuration,
how a stored stream is checked against the chunk's size before or while it is decoded
(`stream_checks`, `zstd_frames`), whether its stream carries a checksum, whether and how
the GPU decodes it, and which of its settings inspect prints. Three more names are the
parts of a layout the library reads itself: the `bytes` serializer, the `crc32c`
checksum and `sharding_indexed` shards. Any other codec makes its array zarr's to decode
(`ZarrDecodes`, whose reason inspect prints): slower per chunk, never wrong.

Everything here is looked up once per array, when its decoder is made; the decode of a
chunk calls the stream check it was given, with no look-up.

To add a compressor: an entry in `COMPRESSORS` (with a stream check, a new one in
`stream_checks` if no existing kind fits), and it joins the round trips of
`tests/io/test_codec_table.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from insitubatch_nodes.io.reads import zstd_frames
from insitubatch_nodes.io.reads.stream_checks import (
    GZIP_WBITS,
    ZLIB_WBITS,
    BoundedInflate,
    DeclaredSize,
    StreamCheck,
    blosc_declared,
    lz4_declared,
)

SERIALIZER = "bytes"  # v3: values to bytes, in an endianness
CHECKSUM = "crc32c"  # v3: a crc32c of the rest, last in a chain
SHARDING = "sharding_indexed"  # v3: inner chunks in one stored object, with an index

# blosc's shuffles: v3 metadata names them, numcodecs (and v2 metadata) numbers them.
_BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_BLOSC_SHUFFLE_NAMES = {number: name for name, number in _BLOSC_SHUFFLES.items()} | {
    -1: "autoshuffle"
}


@dataclass(frozen=True)
class NvcompDecode:
    """How the GPU decodes a compressor's streams: with nvCOMP, which checks nothing.

    Args:
        algorithm: nvCOMP's name for the compressor.
        takes: whether a stored stream (a crc32c codec's checksum stripped) may be given
            to nvCOMP as it is, for a chunk of the given decoded bytes; `False` for any
            other stream, valid or not: the host decodes it, checking it.
    """

    algorithm: str
    takes: Callable[[Any, int], bool]


@dataclass(frozen=True)
class Compressor:
    """One compressor the library decodes itself.

    Args:
        name: its registered name (v3 metadata `name`; numcodecs `codec_id`).
        stream: how its stored stream is decoded into a destination of known size, checked.
        from_v3: numcodecs' decoder from a v3 codec's `configuration`, or None where zarr
            registers no v3 codec of this name (the compressor is read in Zarr v2 only).
        checksummed: whether streams a numcodecs decoder so configured reads carry a
            checksum of their content (verified on the CPU as it decodes).
        settings: the configuration keys inspect prints, in order.
        nvcomp: how the GPU decodes it, or None: the CPU decodes it.
    """

    name: str
    stream: StreamCheck
    from_v3: Callable[[Mapping[str, Any]], Codec] | None
    checksummed: Callable[[Codec], bool]
    settings: tuple[str, ...]
    nvcomp: NvcompDecode | None = None


def _zstd_from_v3(config: Mapping[str, Any]) -> Codec:
    return numcodecs.Zstd(level=config.get("level", 0), checksum=bool(config.get("checksum")))


def _blosc_from_v3(config: Mapping[str, Any]) -> Codec:
    return numcodecs.Blosc(
        cname=str(config["cname"]),
        clevel=config["clevel"],
        shuffle=_BLOSC_SHUFFLES[str(config["shuffle"])],
        blocksize=config.get("blocksize", 0),
    )


def _gzip_from_v3(config: Mapping[str, Any]) -> Codec:
    return numcodecs.GZip(level=config["level"])


def _always(codec: Codec) -> bool:
    return True


def _never(codec: Codec) -> bool:
    return False


def _zstd_checksummed(codec: Codec) -> bool:
    return bool(getattr(codec, "checksum", False))


COMPRESSORS: Mapping[str, Compressor] = {
    entry.name: entry
    for entry in (
        # nvCOMP also has "Gzip", but the one run that tried it on zarr's gzip chunks aborted
        # the process on an H100 (nvCOMP 6.0.0.12; cause not established, not retried): CPU
        # decode for those until someone checks it. nvCOMP cannot read blosc's container
        # (blosc-lz4 included: the lz4 inside is split and shuffled by blosc's framing).
        Compressor(
            "zstd",
            DeclaredSize(zstd_frames.declared_size),
            _zstd_from_v3,
            _zstd_checksummed,
            ("level",),
            NvcompDecode("Zstd", zstd_frames.is_one_declared_frame),
        ),
        Compressor(
            "blosc",
            DeclaredSize(blosc_declared),
            _blosc_from_v3,
            _never,
            ("cname", "clevel", "shuffle"),
        ),
        Compressor("lz4", DeclaredSize(lz4_declared), None, _never, ("acceleration",)),
        Compressor("gzip", BoundedInflate(GZIP_WBITS), _gzip_from_v3, _always, ("level",)),
        Compressor("zlib", BoundedInflate(ZLIB_WBITS), None, _always, ("level",)),
    )
}

# Compressors zarr decodes for the library, whose settings inspect still prints.
_ZARR_DECODED_SETTINGS = {"bz2": ("level",), "lzma": ("preset",)}


@dataclass(frozen=True)
class ArrayCompressor:
    """An array's compressor as the library decodes it: the table's entry, and numcodecs'
    decoder configured as the array's metadata says. Made once per array.

    Args:
        kind: the table's entry.
        codec: numcodecs' decoder.
    """

    kind: Compressor
    codec: Codec

    def decode(self, data: Any, out: np.ndarray) -> None:
        """Fill all of `out` from the stored stream `data`, or raise `ChunkBytesError`.

        Args:
            data: the stored stream, a checksum codec's checksum checked and stripped.
            out: the destination (C-contiguous), as many bytes as the chunk decodes to.
        """
        self.kind.stream.decode(self.codec, data, out)

    @property
    def checksummed(self) -> bool:
        """Whether its streams carry a checksum of their content."""
        return self.kind.checksummed(self.codec)


@dataclass(frozen=True)
class ZarrDecodes:
    """Why zarr, not the library, decodes an array's chunks (zarr's read path costs more
    Python per chunk, but reads every layout zarr writes).

    Args:
        reason: what in the array's layout or codecs the library does not decode itself.
    """

    reason: str


def not_decoded(name: str) -> ZarrDecodes:
    """The reason for a codec the table does not know.

    Args:
        name: the codec's registered name.
    """
    return ZarrDecodes(f"codec {name!r} is not one the library decodes itself")


def v2_compressor(codec: Codec) -> ArrayCompressor | ZarrDecodes:
    """A Zarr v2 array's compressor (its metadata's numcodecs codec, used as it is).

    Args:
        codec: the array's `compressor`.
    """
    kind = COMPRESSORS.get(str(codec.codec_id))
    return not_decoded(str(codec.codec_id)) if kind is None else ArrayCompressor(kind, codec)


def v3_compressor(codec: Mapping[str, Any]) -> ArrayCompressor | ZarrDecodes:
    """A Zarr v3 bytes-to-bytes codec as a compressor the library decodes, or why not.

    Args:
        codec: the codec as the array's metadata holds it (`name`, `configuration`).
    """
    name = str(codec["name"])
    kind = COMPRESSORS.get(name)
    if kind is None or kind.from_v3 is None:
        return not_decoded(name)
    return ArrayCompressor(kind, kind.from_v3(codec.get("configuration") or {}))


def codec_text(name: str, config: Mapping[str, Any]) -> str:
    """A codec in short with the settings that decide how well it compresses and how fast
    it decodes, e.g. "zstd(level=1)", "blosc(cname=lz4,clevel=5,shuffle=shuffle)".

    Args:
        name: the codec's registered name.
        config: its configuration (v3) or numcodecs config (v2).
    """
    kind = COMPRESSORS.get(name)
    keys = kind.settings if kind is not None else _ZARR_DECODED_SETTINGS.get(name, ())
    values = []
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if name == "blosc" and key == "shuffle" and isinstance(value, int):
            value = _BLOSC_SHUFFLE_NAMES.get(value, value)  # v2 numcodecs numbers its shuffles
        values.append(f"{key}={value}")
    return f"{name}({','.join(values)})" if values else name
