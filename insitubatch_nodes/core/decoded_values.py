"""Decoded values on the host: a field's stored values turned into what `xr.open_zarr`
shows, by a `core.cf_decoding.CFDecoding`, bit-equal to xarray's own arithmetic.

Apart from the decoding's rules (`core.cf_decoding`) because this is the hot kernel: its
cost is the passes numpy makes over the output, so it works slab by slab with bounded
scratch, and narrow integers cast to a narrower float are looked up in a table instead.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from insitubatch_nodes.core.cf_decoding import CFDecoding, Number

# values decoded at a time: the scratch (a boolean per value where some are masked, a
# float64 slab of 512 KiB before a cast) stays this small whatever the batch, and a
# float64 slab stays in the core's L2 cache from the widening to the cast. Whole batches
# cost the same where no cast follows; slabs of 16 Ki values or fewer cost more, in
# Python per slab (benchmarks/README.md, "CF decoding")
SLAB_VALUES = 1 << 16
# stored integers this narrow are cast through a table of every stored value's decoding
TABLE_BITS = 16
TABLES_KEPT = 8  # tables (at most 256 KiB each: float32 of 16 bits) kept, the last used


def decode_values(
    stored: np.ndarray,
    decoding: CFDecoding,
    cast: str | None = None,
    *,
    slab_values: int = SLAB_VALUES,
) -> np.ndarray:
    """`stored` decoded as xarray decodes it, as a new array: widened to the decoded dtype,
    multiplied, added to, masked where the stored values equal a masked one, then cast to
    `cast`. Values are computed as xarray computes them (in the decoded dtype, multiply
    then add), so they are bit-equal to its own. The work goes slab by slab, so that its
    scratch stays small and a cast reads its float64 values while they are in cache, and
    a slab that holds no masked value skips the masked write (one `any` over the
    comparison on the narrow stored values tells: most fields hold none). A cast
    of integers of up to 16 bits looks each value up instead, in a table of every stored
    value decoded and cast the same way (one pass where the arithmetic takes five).
    `stored`, whose buffer may be reused, is never written.

    Args:
        stored: a field's stored values, of `decoding.stored_dtype`.
        decoding: how its variable is decoded.
        cast: a numpy float dtype's name to cast the decoded values to, or None.
        slab_values: how many values are computed (or looked up) at a time (> 0): with
            scratch of that many values (a boolean per value where some are masked, and
            the decoded dtype's where a cast follows), beside the output.
    """
    values = stored
    if decoding.unsigned_as is not None:  # the same bits, read with the other sign
        values = values.view(decoding.unsigned_as)
    if cast is not None and _cast_by_table(values.dtype, decoding, cast):
        return _looked_up(values, _decoded_table(decoding, cast), slab_values)
    return _computed(values, decoding, cast, slab_values)


def _cast_by_table(reads: np.dtype[Any], decoding: CFDecoding, cast: str) -> bool:
    """Whether a table is the cheaper way: narrow integers, cast to a narrower float than
    the decoded one (to float64 the table's lookups cost what the arithmetic does)."""
    narrow = reads.kind in "iu" and 8 * reads.itemsize <= TABLE_BITS
    return narrow and np.dtype(cast).itemsize < np.dtype(decoding.decoded_dtype).itemsize


@functools.lru_cache(maxsize=TABLES_KEPT)
def _decoded_table(decoding: CFDecoding, cast: str) -> np.ndarray:
    """Every stored value of the (narrow, integer) stored type decoded and cast, indexed
    by the value's bits read as unsigned."""
    reads = np.dtype(decoding.unsigned_as or decoding.stored_dtype)
    every = np.arange(1 << (8 * reads.itemsize), dtype=f"u{reads.itemsize}").view(reads)
    table = _computed(every, decoding, cast, SLAB_VALUES)
    table.flags.writeable = False  # shared by every batch
    return table


def _looked_up(values: np.ndarray, table: np.ndarray, slab_values: int) -> np.ndarray:
    """`table`'s entries at `values`' bits, in slabs (numpy's take wants its indices as
    intp: a slab of them stays in cache)."""
    bits = values.reshape(-1).view(f"u{values.dtype.itemsize}")
    output = np.empty(values.shape, dtype=table.dtype)
    flat_output = output.reshape(-1)
    indices = np.empty(min(slab_values, bits.size), dtype=np.intp)
    for start in range(0, bits.size, slab_values):
        part = bits[start : start + slab_values]
        taken = indices[: part.size]
        np.copyto(taken, part)
        np.take(table, taken, out=flat_output[start : start + slab_values], mode="wrap")
    return output


def _computed(
    values: np.ndarray, decoding: CFDecoding, cast: str | None, slab_values: int
) -> np.ndarray:
    """`values` (as `unsigned_as` reads them) decoded by arithmetic, slab by slab (see
    `decode_values`): in the output itself when it has the decoded dtype, else in a
    scratch slab of that dtype, cast into the output while it is in cache."""
    computed = np.dtype(decoding.decoded_dtype)
    output = np.empty(values.shape, dtype=computed if cast is None else np.dtype(cast))
    flat_values, flat_output = values.reshape(-1), output.reshape(-1)
    slab_size = min(slab_values, flat_values.size)
    in_place = output.dtype == computed
    slab = None if in_place else np.empty(slab_size, dtype=computed)
    hits = np.empty(slab_size, dtype=bool) if decoding.masked else None
    for start in range(0, flat_values.size, slab_values):
        part = flat_values[start : start + slab_values]
        target = flat_output[start : start + slab_values]
        work = target if slab is None else slab[: part.size]
        _decode_into(work, part, decoding, None if hits is None else hits[: part.size])
        if slab is not None:
            np.copyto(target, work, casting="unsafe")  # .astype
    return output


def _decode_into(
    output: np.ndarray, values: np.ndarray, decoding: CFDecoding, hits: np.ndarray | None
) -> None:
    """`values` (stored, as `unsigned_as` reads them) decoded into `output`, an array of
    the decoded dtype and their shape, in place: one pass each for the widening, the
    multiply and the add, and, where some value is masked, the comparison on the narrow
    stored values (into `hits`, a boolean scratch of their shape) and, only when it found
    one, NaN written with one `copyto`."""
    # widened, then multiplied in place: numpy's multiply that widens as it goes
    # (`dtype=`) is slower than the two passes (benchmarks/README.md, "CF decoding")
    np.copyto(output, values, casting="unsafe")
    if decoding.scale_factor is not None:
        np.multiply(output, decoding.scale_factor, out=output)
    if decoding.add_offset is not None:
        np.add(output, decoding.add_offset, out=output)
    if hits is not None and _marked(values, decoding.masked, hits):
        np.copyto(output, np.nan, where=hits)


def _marked(values: np.ndarray, masked: tuple[Number, ...], hits: np.ndarray) -> bool:
    """Marks in `hits` the values equal to a masked one; whether any is."""
    np.equal(values, masked[0], out=hits)
    for other in masked[1:]:
        np.logical_or(hits, values == other, out=hits)
    return bool(hits.any())
