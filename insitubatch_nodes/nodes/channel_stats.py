"""Per-channel statistics of a split, as a small JSON file kept beside the split manifest.

`cli.stats_pass.compute_stats` (or `insitubatch stats URL`) makes them; `NormaliseNode` uses
them. The file records the split's units and unit length, so it can be told apart from
statistics of another split, and how each variable's values were decoded
(`core.cf_decoding`), so that statistics of stored values are never used to normalise
decoded ones (`decoding_differences`). The mean and std skip NaN (masked values); the
NaNs are counted per channel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from insitubatch_nodes.core.cf_decoding import (
    DTYPE_KEY,
    MASKED_KEY,
    OFFSET_KEY,
    SCALE_KEY,
    UNSIGNED_KEY,
    describe_record,
)

STATS_FORMAT = 1


@dataclass(frozen=True)
class ChannelStats:
    """Mean and std per channel (`core.channels` names: `t2m`, `z[0]`, ...).

    Args:
        split: the split they were computed over.
        split_units: its units as [start, stop) runs.
        unit_length: steps per unit.
        spatial_dims: the trailing grid axes.
        channels: variable -> its channel names.
        mean: variable -> each channel's mean, NaN skipped.
        std: variable -> each channel's standard deviation (ddof=0), NaN skipped.
        count: variable -> values seen per channel, NaN included.
        nan_count: variable -> NaNs per channel (none recorded: files made before NaN were
            counted).
        decoding: variable -> how its values were decoded (`CFDecoding.record`); None for
            a file made before decoding was recorded.
    """

    split: str
    split_units: list[list[int]]
    unit_length: int
    spatial_dims: int
    channels: Mapping[str, list[str]]
    mean: Mapping[str, list[float]]
    std: Mapping[str, list[float]]
    count: Mapping[str, int]
    nan_count: Mapping[str, list[int]] = field(default_factory=dict)
    decoding: Mapping[str, Mapping[str, Any]] | None = None

    def vectors(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std (float32) for channels `names`, in that order."""
        lookup = {
            name: (m, s)
            for variable, names_of in self.channels.items()
            for name, m, s in zip(names_of, self.mean[variable], self.std[variable], strict=True)
        }
        missing = [n for n in names if n not in lookup]
        if missing:
            raise ValueError(
                f"the statistics have no channel(s) {missing[:5]}; they cover "
                f"{sorted(self.channels)}: recompute them with `insitubatch stats` for these "
                f"variables"
            )
        mean = np.array([lookup[n][0] for n in names], dtype=np.float32)
        std = np.array([lookup[n][1] for n in names], dtype=np.float32)
        return mean, std

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATS_FORMAT,
            "split": self.split,
            "split_units": self.split_units,
            "unit_length": self.unit_length,
            "spatial_dims": self.spatial_dims,
            "variables": {
                v: {
                    "channels": list(self.channels[v]),
                    "mean": list(self.mean[v]),
                    "std": list(self.std[v]),
                    "count": self.count[v],
                    **({"nan_count": list(self.nan_count[v])} if v in self.nan_count else {}),
                    **({} if self.decoding is None else {"decoding": dict(self.decoding[v])}),
                }
                for v in self.channels
            },
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        staging = path.with_name(path.name + ".partial")
        staging.write_text(json.dumps(self.to_json(), indent=1))
        staging.replace(path)
        return path

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelStats:
        if data.get("format") != STATS_FORMAT:
            raise ValueError(
                f"statistics format {data.get('format')!r} is not supported (expected "
                f"{STATS_FORMAT}); recompute them with `insitubatch stats`"
            )
        variables = data["variables"]
        return cls(
            split=str(data["split"]),
            split_units=[[int(a), int(b)] for a, b in data["split_units"]],
            unit_length=int(data["unit_length"]),
            spatial_dims=int(data["spatial_dims"]),
            channels={v: list(d["channels"]) for v, d in variables.items()},
            mean={v: [float(x) for x in d["mean"]] for v, d in variables.items()},
            std={v: [float(x) for x in d["std"]] for v, d in variables.items()},
            count={v: int(d["count"]) for v, d in variables.items()},
            nan_count={
                v: [int(x) for x in d["nan_count"]]
                for v, d in variables.items()
                if "nan_count" in d
            },
            decoding=(
                {v: dict(d["decoding"]) for v, d in variables.items()}
                if all("decoding" in d for d in variables.values())
                else None
            ),
        )

    def decoding_differences(self, decodings: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """How the values these statistics were computed on were decoded otherwise than
        a loader's (one sentence per variable); empty when they fit.

        Args:
            decodings: the loader's decoding record per variable
                (`ZarrSource.decoding_records`); variables the statistics lack are not
                judged here (`vectors` names them).
        """
        found = []
        for variable, current in sorted(decodings.items()):
            if variable not in self.channels:
                continue
            current = {k: v for k, v in current.items() if k in _VALUE_KEYS}
            if self.decoding is None:
                if set(current) != {DTYPE_KEY}:
                    found.append(
                        f"{variable!r}: the statistics were computed on stored values (made "
                        f"before the loader decoded CF attributes), batches are now "
                        f"{describe_record(current)}"
                    )
                continue
            saved = {k: v for k, v in self.decoding[variable].items() if k in _VALUE_KEYS}
            if saved != current:
                found.append(
                    f"{variable!r}: the statistics were computed on "
                    f"{describe_record(saved)}, batches are {describe_record(current)}"
                )
        return found

    @classmethod
    def load(cls, path: str | Path) -> ChannelStats:
        return cls.from_json(json.loads(Path(path).read_text()))


StatsLike = ChannelStats | str | Path

# what decides the values statistics are computed on (the dtype batches are cast to
# does not: they are computed in float64)
_VALUE_KEYS = frozenset({DTYPE_KEY, UNSIGNED_KEY, MASKED_KEY, SCALE_KEY, OFFSET_KEY})


def load_stats(stats: StatsLike) -> ChannelStats:
    return stats if isinstance(stats, ChannelStats) else ChannelStats.load(stats)


def stats_path(manifest_path: str | Path) -> Path:
    """Where the statistics of a manifest's splits live: beside it, `NAME.stats.json`."""
    path = Path(manifest_path)
    return path.with_name(path.stem + ".stats.json")
