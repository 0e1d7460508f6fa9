"""One store of a join: where it is, and which of the loader's arrays it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store

from insitubatch_nodes.core.step_runs import Runs


@dataclass(frozen=True)
class StorePart:
    """One store of a join (`io.joined_source`), read in place with its own options.

    Args:
        store: the opened store.
        where: the store as messages name it (credentials redacted).
        fields: the selected time-varying variables it holds.
        statics: the selected static fields it holds.
        origin: its stored step of the joined axis' first step; None without a time axis.
        steps: its steps along time; None without a time axis.
        snapshot_id: the Icechunk snapshot it reads, or None for other stores.
        secrets: values known to be secret in its URL and options (never shown).
        runs: where its map from the joined axis jumps over steps an inner join left
            out (`core.step_runs`); empty for one run.
    """

    store: Store = field(repr=False)
    where: str
    fields: tuple[str, ...]
    statics: tuple[str, ...]
    origin: int | None
    steps: int | None
    snapshot_id: str | None = None
    secrets: tuple[str, ...] = field(default=(), repr=False)
    runs: Runs = ()

    def record(self) -> dict[str, Any]:
        """What a loader's fingerprint keeps of this store (`core.fingerprint.join_record`)."""
        return {
            "arrays": sorted((*self.fields, *self.statics)),
            "origin": self.origin,
            "steps": self.steps,
            "snapshot_id": self.snapshot_id,
            **({"runs": [list(run) for run in self.runs]} if self.runs else {}),
        }
