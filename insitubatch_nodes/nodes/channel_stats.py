"""Per-channel statistics of a split, as a small JSON file kept beside the split manifest.

`cli.stats_pass.compute_stats` (or `insitubatch stats URL`) makes them; `NormaliseNode` uses
them. The file records the split's units and unit length, so it can be told apart from
statistics of another split.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STATS_FORMAT = 1


@dataclass(frozen=True)
class ChannelStats:
    """Mean and std per channel (`core.channels` names: `t2m`, `z[0]`, ...)."""

    split: str
    split_units: list[list[int]]
    unit_length: int
    spatial_dims: int
    channels: Mapping[str, list[str]]
    mean: Mapping[str, list[float]]
    std: Mapping[str, list[float]]
    count: Mapping[str, int]

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
        )

    @classmethod
    def load(cls, path: str | Path) -> ChannelStats:
        return cls.from_json(json.loads(Path(path).read_text()))


StatsLike = ChannelStats | str | Path


def load_stats(stats: StatsLike) -> ChannelStats:
    return stats if isinstance(stats, ChannelStats) else ChannelStats.load(stats)


def stats_path(manifest_path: str | Path) -> Path:
    """Where the statistics of a manifest's splits live: beside it, `NAME.stats.json`."""
    path = Path(manifest_path)
    return path.with_name(path.stem + ".stats.json")
