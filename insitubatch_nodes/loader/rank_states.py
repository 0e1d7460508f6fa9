"""One loader state holding every rank's, for frameworks that write rank 0's checkpoint only.

Each rank resumes from its own state: its share of the split, its cursor in it. Lightning
(`ModelCheckpoint`, `Trainer.save_checkpoint`) and accelerate (`save_state` with the loader
registered for checkpointing) ask every rank for `state_dict()` at the same point of the
run, but write rank 0's answer only, and on resume hand that one file's state to every
rank. So a `Loader(all_ranks_state=True)` gathers every rank's state into one
(`gather_rank_states`, a collective call over torch.distributed), and on load each rank
takes its own entry back (`own_rank_state`). The entries are the loader states a single
rank saves, so everything they are checked for still is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

RANK_STATES_KEY = "rank_states"


def _process_group() -> tuple[int, int] | None:
    """This process's (rank, world size) in torch.distributed's default group, or None
    when there is none."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return None


def gather_rank_states(state: dict[str, Any]) -> dict[str, Any]:
    """Every rank's `state`, in rank order, in one plain dict; every rank gets the same.
    A collective call: every rank of the process group must make it at the same point
    (as the frameworks' checkpointing does). Without a process group, the one state.

    Args:
        state: this rank's loader state (plain data).
    """
    group = _process_group()
    if group is None:
        return {RANK_STATES_KEY: [state]}
    gathered: list[Any] = [None] * group[1]
    torch.distributed.all_gather_object(gathered, state)
    return {RANK_STATES_KEY: gathered}


def is_rank_states(state: Any) -> bool:
    """Whether `state` is what `gather_rank_states` makes (not a single rank's state).

    Args:
        state: a loaded state.
    """
    return isinstance(state, Mapping) and RANK_STATES_KEY in state


def rank_state_entries(states: Mapping[str, Any]) -> list[Any]:
    """The ranks' states of a gathered state, in rank order.

    Args:
        states: what `gather_rank_states` returned, as loaded from a checkpoint.

    Raises:
        TypeError: the entries are not a list.
    """
    entries = states[RANK_STATES_KEY]
    if not isinstance(entries, list):
        raise TypeError(
            f"the loader state's {RANK_STATES_KEY!r} must be a list of the ranks' states, got "
            f"{type(entries).__name__}; pass the dict loader.state_dict() returned, as it "
            f"was saved"
        )
    return entries


def process_rank() -> tuple[int, int]:
    """This process's (rank, world size) in torch.distributed's default group, or (0, 1)
    without one."""
    return _process_group() or (0, 1)


def own_rank_state(
    states: Mapping[str, Any], rank: int | None = None, world_size: int | None = None
) -> Any:
    """This process's entry of a gathered state, picked by its rank (the rank it was
    gathered under); refused, saying what to do, when the world size differs and the
    caller cannot resume on another number of ranks (a `Loader` over the pool shuffle
    can: `loader.elastic_resume`).

    Args:
        states: what `gather_rank_states` returned, as loaded from a checkpoint.
        rank: this process's rank (default: torch.distributed's, else 0).
        world_size: the number of ranks (default: torch.distributed's, else 1).

    Raises:
        TypeError: the entries are not a list.
        ValueError: the state holds another number of ranks than `world_size`.
    """
    entries = rank_state_entries(states)
    if rank is None or world_size is None:
        rank, world_size = process_rank()
    if len(entries) != world_size:
        raise ValueError(
            f"this loader state holds the states of {len(entries)} rank(s), and this process "
            f"is rank {rank} of {world_size}: resume with as many ranks as saved it (the "
            f"states are gathered and picked by torch.distributed's rank)"
        )
    return entries[rank]
