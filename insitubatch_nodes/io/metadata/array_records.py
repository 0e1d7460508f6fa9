"""What a loader records of a store's selected arrays, read once when the source opens:
each one's codecs and fill value as text (a state's fingerprint holds them, so a store
rewritten with other codecs or fill values is another store), how its values are decoded
to those `xr.open_zarr` shows, and the warnings a decoding calls for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from insitubatch_nodes.core.cf_decoding import CFDecoding
from insitubatch_nodes.io.metadata.array_metadata import codec_summary, fill_value_text
from insitubatch_nodes.io.metadata.cf_attributes import read_cf_decoding, zero_fill_warning


def describe_arrays(
    arrays: Mapping[str, Any],
    kept: Sequence[str],
    decode_cf: bool,
    use_zarr_fill_value_as_mask: bool | None,
) -> tuple[dict[str, str], dict[str, str], dict[str, CFDecoding], tuple[str, ...]]:
    """What a loader records of the arrays `kept` of one store: each one's codecs, fill
    value as text, and decoding, and the warnings the decodings call for.

    Args:
        arrays: the store's arrays by name.
        kept: the selected arrays (fields and static fields).
        decode_cf: whether values are decoded as `xr.open_zarr` decodes them.
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it; None picks by format.
    """
    codecs = {name: codec_summary(arrays[name]) for name in kept}
    fills = {name: fill_value_text(arrays[name]) for name in kept}
    decodings = {
        name: read_cf_decoding(
            name,
            arrays[name],
            decode_cf=decode_cf,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )
        for name in kept
    }
    warnings = (
        zero_fill_warning(name, arrays[name], decodings[name], use_zarr_fill_value_as_mask)
        for name in kept
    )
    return codecs, fills, decodings, tuple(w for w in warnings if w is not None)
