"""ChunkPermuteNode: this rank's units of the split, in the order of the current epoch."""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import (
    EpochAssignment,
    assign_epoch,
    check_rank,
    rank_sample_counts,
    samples_per_rank,
)
from insitubatch_nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import CONFIG_KEY, check_saved_config


class ChunkPermuteNode(BaseNode[UnitTicket]):
    """Yields one `UnitTicket` per unit; the order is a pure function of (seed, epoch, rank).

    `geometry` says how many samples each unit holds: a `SampleGeometry` (every time step)
    or a `core.anchors.AnchorSet` (the anchors of a windowed sample spec, with
    `split_units=anchors.units`).

    `reset(None)` after iteration began moves to the next epoch, so a `Loader` sees a fresh
    order every `iter()`. State is (epoch, position) plus the settings it is only valid for.
    """

    EPOCH_KEY = "epoch"
    POSITION_KEY = "position"

    def __init__(
        self,
        geometry: UnitSamples,
        split_units: np.ndarray,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        initial_epoch: int = 0,
    ) -> None:
        super().__init__()
        check_rank(rank, world_size)
        self.geometry = geometry
        self.split_units = np.sort(np.asarray(split_units, dtype=np.int64))
        if self.split_units.size == 0:
            raise ValueError("the split has no units: nothing to load")
        empty = self.split_units[geometry.unit_sizes(self.split_units) == 0]
        if empty.size:
            raise ValueError(
                f"units {empty[:5].tolist()} hold no sample (no anchor whose window stays in "
                f"the split): pass AnchorSet.units as split_units"
            )
        self.num_samples = int(geometry.unit_sizes(self.split_units).sum())
        counts = rank_sample_counts(geometry, self.split_units, world_size)
        self.min_rank_samples = int(counts.min())
        self.max_rank_samples = int(counts.max())
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self._epoch = initial_epoch
        self._position = 0
        self._started = False
        self._assignment: EpochAssignment | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            check_saved_config(type(self).__name__, initial_state, self._config())
            self._epoch = int(initial_state[self.EPOCH_KEY])
            self._position = int(initial_state[self.POSITION_KEY])
            self._started = True  # a restored run is under way, even at position 0
        else:
            if self._started:
                self._epoch += 1
            self._position = 0
            self._started = False
        self._assignment = assign_epoch(
            self.geometry,
            self.split_units,
            seed=self.seed,
            epoch=self._epoch,
            rank=self.rank,
            world_size=self.world_size,
        )
        if not 0 <= self._position <= self._assignment.units.size:
            raise ValueError(
                f"state position {self._position} is outside this rank's epoch of "
                f"{self._assignment.units.size} units: the state is from another split or "
                f"world size"
            )

    @property
    def assignment(self) -> EpochAssignment:
        """This epoch's assignment (resets the node first if it never was)."""
        if self._assignment is None:
            self.reset(None)
        assert self._assignment is not None
        return self._assignment

    def samples_per_rank(self, batch_size: int, drop_last: bool) -> int:
        """Samples each rank yields per epoch (the same for every rank and every epoch)."""
        return samples_per_rank(self.min_rank_samples, self.max_rank_samples, batch_size, drop_last)

    def next(self) -> UnitTicket:
        assignment = self.assignment
        if self._position >= assignment.units.size:
            raise StopIteration
        self._started = True
        ticket = UnitTicket(assignment, self._position, int(assignment.units[self._position]))
        self._position += 1
        return ticket

    def _config(self) -> dict[str, int]:
        return {
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "units": int(self.split_units.size),
            "samples": self.num_samples,
        }

    def get_state(self) -> dict[str, Any]:
        return {
            self.EPOCH_KEY: self._epoch,
            self.POSITION_KEY: self._position,
            CONFIG_KEY: self._config(),
        }
