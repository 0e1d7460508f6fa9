"""What a loader state was taken on, so that a state is never resumed on other data.

A state is a cursor (epoch, position, samples drawn): it means something only on the
arrays and the split it was counted on. Loaded into a loader over another store, another
selection of variables, another split or a store edited since, it would resume "exactly"
into other batches without a word. The fingerprint records, as plain data: each array's
shape, chunking, dtype, codecs (by name), fill value and the positions kept along a picked
axis (levels, in the order a batch holds them), the split's name and units (a count and a
digest), the Icechunk snapshot when there is one, and how each array's values are decoded
(`core.cf_decoding`: masks, packing, the dtype batches are cast to), since the same bytes
decoded otherwise are other batches. It holds no URL and no storage options (those may
carry secrets, and a store copied to another bucket is still the same data).
Static fields (`core.static_fields`) are recorded the same way under `STATICS_KEY`, when
there are any: a state saved with other statics (or none) is other batches.
Where stacking or levels order a batch's channels, the loader adds their order
(`CHANNELS_KEY`): the same arrays stacked in another variable order are other batches;
where it computes forcings, their names (`FORCINGS_KEY`).
`fingerprint_differences` says in words how two fingerprints differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from insitubatch_nodes.core.cf_decoding import DTYPE_KEY, describe_record
from insitubatch_nodes.core.geometry import VariableLayout

LISTED_POSITIONS = 64  # a picked axis's positions listed in a fingerprint, at most
AREA_KEY = "area"  # the box area= keeps (`core.area.AreaSelection.record`), when given

DIGEST_LENGTH = 16
DECODING_KEY = "decoding"
STATICS_KEY = "statics"  # static field -> its array entry, where the loader has any
CHANNELS_KEY = "channels"  # batch key -> its channel names, where stacking or levels order them
FORCINGS_KEY = "forcings"  # the forcings' names, in order, where a loader computes some
JOIN_KEY = "join"  # on several stores: the policy and each store's arrays and origin


def digest(text: str | bytes) -> str:
    """A short hex digest: enough to tell two descriptions apart, short enough for a state.

    Args:
        text: what to digest.
    """
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:DIGEST_LENGTH]


def source_fingerprint(
    layouts: Mapping[str, VariableLayout],
    codecs: Mapping[str, str],
    fill_values: Mapping[str, str],
    split: str,
    split_units: np.ndarray,
    snapshot_id: str | None,
    anchors: np.ndarray | None = None,
    decodings: Mapping[str, Mapping[str, Any]] | None = None,
    statics: Mapping[str, VariableLayout] | None = None,
    phase: int = 0,
) -> dict[str, Any]:
    """The fingerprint of a loader over `layouts` and split `split`, as plain data.

    Args:
        layouts: the selected arrays' shapes, chunks and dtypes, by name.
        codecs: each selected array's codec chain by name (e.g. "bytes+zstd").
        fill_values: what each selected array's never-written chunks read as, as text.
        split: the split's name.
        split_units: the split's unit indices.
        snapshot_id: the Icechunk snapshot the store reads, or None for other stores.
        anchors: the anchors the loader draws from (`AnchorSet.anchors`), or None to
            record units only: units do not show a date boundary moved inside a unit, a
            stride, a frequency or a gap rule.
        decodings: each array's decoding record (`CFDecoding.record`, with the dtype
            batches are cast to), or None to record none; static fields' too.
        statics: the static fields' layouts, by name (recorded under `STATICS_KEY` when
            there are any; their codecs and fill values are in `codecs`, `fill_values`).
        phase: where the unit grid's first full unit starts (`SampleGeometry.phase`),
            recorded in the split's entry only when it is not 0 (the units of one store,
            and of a join whose chunks start on the joined axis' first step, keep the
            fingerprint they always had).
    """
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    split: dict[str, Any] = {
        "name": split,
        "units": int(units.size),
        "digest": digest(units.astype("<i8").tobytes()),
    }
    if phase:
        split["phase"] = int(phase)
    if anchors is not None:
        steps = np.sort(np.asarray(anchors, dtype=np.int64))
        split["anchors"] = int(steps.size)
        split["anchors_digest"] = digest(steps.astype("<i8").tobytes())

    def entry(name: str, layout: VariableLayout) -> dict[str, Any]:
        return {
            "shape": list(layout.shape),
            "chunks": list(layout.chunks),
            "dtype": layout.dtype,
            "codecs": codecs.get(name, ""),
            "fill_value": fill_values.get(name, ""),
            "pick": _picks_entry(layout),
            **_decoding_entry(None if decodings is None else decodings[name], layout.dtype),
        }

    found = {
        "arrays": {name: entry(name, layout) for name, layout in sorted(layouts.items())},
        "split": split,
        "snapshot_id": snapshot_id,
    }
    if statics:
        found[STATICS_KEY] = {name: entry(name, layout) for name, layout in sorted(statics.items())}
    return found


def _picks_entry(layout: VariableLayout) -> list[Any] | None:
    """The positions a batch holds of each picked axis: `[axis, positions]` for one pick
    (as states before areas recorded levels), a list of them for several. An axis of more
    than `LISTED_POSITIONS` (an area's rows or columns on a fine grid) is recorded as
    `[axis, count, digest]`, so that a state stays small."""
    entries = []
    for pick in layout.picks:
        positions = list(pick.batch_indices)
        if len(positions) > LISTED_POSITIONS:
            packed = np.asarray(positions, dtype="<i8").tobytes()
            entries.append([pick.axis, len(positions), digest(packed)])
        else:
            entries.append([pick.axis, positions])
    if not entries:
        return None
    return entries[0] if len(entries) == 1 else entries


def _decoding_entry(record: Mapping[str, Any] | None, stored_dtype: str) -> dict[str, Any]:
    """The fingerprint's decoding entry of an array: none when batches hold its stored
    values (the fingerprint releases before decoding wrote, so their states still fit)."""
    native = str(np.dtype(stored_dtype).newbyteorder("="))
    if record is None or dict(record) == {DTYPE_KEY: native}:
        return {}
    return {DECODING_KEY: dict(record)}


def _box(record: Any) -> str:
    """An area's record as its box, or "none" (the whole grid)."""
    if not isinstance(record, Mapping):
        return "none (the whole grid)"
    return str(tuple(record.get("box", ())))


def _shown(value: Any) -> str:
    return str(tuple(value)) if isinstance(value, list) else str(value)


# (key, how a difference reads, how a value is shown) for each array's entries
_ARRAY_FIELDS = (
    ("shape", "shape was", _shown),
    ("chunks", "chunks were", _shown),
    ("dtype", "dtype was", str),
    ("codecs", "codecs were", repr),
    ("fill_value", "fill value was", str),
    ("pick", "kept positions (levels, an area) were", str),
)


def _array_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], kind: str = "arrays"
) -> list[str]:
    if sorted(saved) != sorted(current):
        return [
            f"the state was saved on {kind} {sorted(saved)}, this loader reads {sorted(current)}"
        ]
    found = []
    for name in sorted(current):
        before, now = saved[name], current[name]
        for key, noun, shown in _ARRAY_FIELDS:
            # A field the state does not record (saved before it was added) is not checked.
            if key in before and before[key] != now.get(key):
                found.append(
                    f"array {name!r} {noun} {shown(before.get(key))} when the state was "
                    f"saved, now {shown(now.get(key))}"
                )
        found += _decoding_differences(name, before, now)
    return found


def _decoding_differences(
    name: str, before: Mapping[str, Any], now: Mapping[str, Any]
) -> list[str]:
    """How array `name`'s decoding differs. An array whose batches are its stored values
    records none (so states of such arrays are those releases before decoding saved)."""
    saved, current = before.get(DECODING_KEY), now.get(DECODING_KEY)
    if saved == current:
        return []
    return [
        f"array {name!r} was {_decoding_text(saved)} when the state was saved, now "
        f"{_decoding_text(current)}; rebuild the loader with the decoding it was saved with "
        f"(decode_cf=, use_zarr_fill_value_as_mask=, dtype=), or start a new run"
    ]


def _decoding_text(record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "read as stored values (decode_cf=False, or a release before CF decoding)"
    return describe_record(record)


def _split_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    if saved.get("name") != current.get("name"):
        return [
            f"the state was saved on split {saved.get('name')!r}, this loader reads split "
            f"{current.get('name')!r}"
        ]
    name = current.get("name")
    if saved.get("phase", 0) != current.get("phase", 0):
        return [
            f"split {name!r} was cut into units from step {saved.get('phase', 0)} of the "
            f"joined axis when the state was saved, now from step {current.get('phase', 0)} "
            f"(the unit grid's phase, chosen so a store's chunks start on unit boundaries: "
            f"another release, or other stores); start a new run, or resume with the "
            f"release the state was saved with"
        ]
    if saved.get("units") != current.get("units"):
        return [f"split {name!r} had {saved.get('units')} units, now {current.get('units')}"]
    if saved.get("digest") != current.get("digest"):
        return [
            f"split {name!r} holds other units than when the state was saved (the same "
            f"count, {current.get('units')}: the manifest was cut differently)"
        ]
    before = (saved.get("anchors"), saved.get("anchors_digest"))
    now = (current.get("anchors"), current.get("anchors_digest"))
    if "anchors" in saved and "anchors" in current and before != now:  # older states: none
        return [
            f"split {name!r} had {saved.get('anchors')} anchors when the state was saved, "
            f"now {current['anchors']} (other dates, stride, frequency, max_gap or sample "
            f"spec)"
        ]
    return []


def join_record(join: str, stores: list[dict[str, Any]]) -> dict[str, Any]:
    """What a fingerprint records of a join (under `JOIN_KEY`): the policy, and per
    store in order its arrays, its origin on the joined axis, its steps and its Icechunk
    snapshot. Not its URL: as for one store, data moved elsewhere resumes.

    Args:
        join: the policy (`core.time_join.JOIN_POLICIES`).
        stores: per store, `{"arrays": [...], "origin": int | None, "steps": int | None,
            "snapshot_id": str | None}`, and `"runs"` where its map jumps over steps the
            join left out (`core.step_runs`).
    """
    return {"policy": join, "stores": stores}


def _stores_text(record: Any) -> str:
    if not isinstance(record, Mapping):
        return "one store"
    stores = record.get("stores", [])
    shown = "; ".join(
        f"{entry.get('arrays')} from step {entry.get('origin')}"
        + "".join(
            f", jumping at joined step {run[0]} to its step {run[1]}"
            for run in entry.get("runs", [])
        )
        for entry in stores
        if isinstance(entry, Mapping)
    )
    return f"a join={record.get('policy')!r} of {len(stores)} stores ({shown})"


def _well_formed(fingerprint: Any) -> bool:
    """True if `fingerprint` has the layout `source_fingerprint` gives (a state's may have
    been edited or damaged)."""
    if not isinstance(fingerprint, Mapping):
        return False
    arrays, split = fingerprint.get("arrays"), fingerprint.get("split")
    return (
        isinstance(arrays, Mapping)
        and all(isinstance(entry, Mapping) for entry in arrays.values())
        and isinstance(split, Mapping)
    )


def fingerprint_differences(saved: Any, current: Mapping[str, Any]) -> list[str]:
    """How the data a state was saved on (`saved`) differs from this loader's (`current`),
    one sentence per difference; empty when they match.

    Args:
        saved: the fingerprint recorded in the state (checked: a state may be damaged).
        current: the fingerprint of the loader the state is loaded into.
    """
    if not _well_formed(saved):
        return [
            "the state's record of the data it was saved on is damaged (not the fingerprint "
            "a loader writes)"
        ]
    found = _array_differences(saved["arrays"], current["arrays"])
    saved_statics, statics = saved.get(STATICS_KEY, {}), current.get(STATICS_KEY, {})
    if not isinstance(saved_statics, Mapping) or not all(
        isinstance(entry, Mapping) for entry in saved_statics.values()
    ):
        found.append("the state's record of its static fields is damaged")
    else:
        found += [
            f"{difference}; rebuild the loader with the static fields it was saved with, "
            f"or start a new run"
            for difference in _array_differences(saved_statics, statics, "static fields")
        ]
    before_channels, now_channels = saved.get(CHANNELS_KEY), current.get(CHANNELS_KEY)
    if before_channels is not None and now_channels is not None and before_channels != now_channels:
        found.append(
            f"batches held the channels {before_channels} when the state was saved, now "
            f"{now_channels} (another variable or level order); rebuild the loader with the "
            f"variables and levels in the order it was saved with"
        )
    before_forcings, now_forcings = saved.get(FORCINGS_KEY, []), current.get(FORCINGS_KEY, [])
    if before_forcings != now_forcings:
        found.append(
            f"batches held the forcings {before_forcings} when the state was saved, now "
            f"{now_forcings}; rebuild the loader with forcings={before_forcings or None}"
        )
    before_join, now_join = saved.get(JOIN_KEY), current.get(JOIN_KEY)
    if before_join != now_join:
        found.append(
            f"the state was saved on {_stores_text(before_join)}, this loader reads "
            f"{_stores_text(now_join)}; rebuild the loader on the stores, in the order and "
            f"with the join it was saved with"
        )
    before_area, now_area = saved.get(AREA_KEY), current.get(AREA_KEY)
    if before_area != now_area:
        found.append(
            f"the state was saved with area= {_box(before_area)}, this loader has area= "
            f"{_box(now_area)}; rebuild the loader with the area it was saved with"
        )
    found += _split_differences(saved["split"], current["split"])
    before, now = saved.get("snapshot_id"), current.get("snapshot_id")
    if before != now:
        if before is None:
            found.append(
                f"the state was saved on a store that is not an Icechunk snapshot, this "
                f"loader reads snapshot {now!r}"
            )
        elif now is None:
            found.append(
                f"the state was saved on Icechunk snapshot {before!r}, this loader reads a "
                f"store that is not one"
            )
        else:
            found.append(
                f"the Icechunk snapshot was {before!r} when the state was saved, now {now!r}"
            )
    return found
