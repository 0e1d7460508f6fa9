"""The chunk permutation's saved state: what `ChunkPermuteNode` saves, and the checks a
saved one passes before the node takes it up.

The node deals a rank its units; this module holds the format of where it stands. It
exists apart so that the format lives in one place: the keys, the settings a state is
only valid for (its config), the mix-ups refused with a message that says what to do
rather than a bare settings difference (a training state in an evaluation loader or the
reverse, another rank's state, a state saved before states recorded the partition count
under a count that deals otherwise), the version of the deal the state was made under,
and the rest of an epoch re-dealt from another number of ranks (`loader.elastic_resume`),
which the state carries while that epoch lasts. The state is a few plain ints: the epoch
and the position in the rank's units, beside them the config, the fingerprint of the data
and the rest's share. The position is checked by the node, against the units of the
epoch it deals once the rest is known.

The deal version (`core.short_unit_deal.DEAL_VERSION`) is recorded only where it matters: where
the split's short units go to other ranks than version 1 sent them. A state without it
was dealt as version 1 deals, so a node takes it up under version 1 and keeps dealing so
for the rest of the run; where the versions deal alike that changes nothing, and such
states (all of those saved before versions were recorded, most of those saved since)
keep the bytes they always had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from insitubatch_nodes.core.elastic import RestShare
from insitubatch_nodes.core.short_unit_deal import check_deal
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    FINGERPRINT_KEY,
    NamedNode,
    check_cursor,
    check_fingerprint,
    check_node_state,
    check_saved_config,
    named_state,
)

EPOCH_KEY = "epoch"
POSITION_KEY = "position"
EVALUATION_KEY = "evaluation"
UNIT_GRID_KEY = "unit_grid"
PARTITIONS_KEY = "partitions"
DEAL_KEY = "deal_version"
REST_KEY = "rest"
FIRST_DEAL = 1
"""The deal a training state without `DEAL_KEY` was made under."""


def permute_config(
    *,
    seed: int,
    rank: int,
    world_size: int,
    units: int,
    samples: int,
    unit_grid: Mapping[str, int] | None,
    evaluation: bool,
    partitions: int,
    deal: int | None,
) -> dict[str, Any]:
    """The settings a chunk permutation's state is only valid for, as the state records
    them. A training config holds the partition count, and the deal version where it
    deals otherwise than version 1; an evaluation config says it is one (training states
    keep the layout they always had).

    Args:
        seed: the seed of every random order.
        rank: the node's rank.
        world_size: how many ranks share the split.
        units: the split's unit count.
        samples: the split's sample count.
        unit_grid: the unit grid the units are on, as plain ints, or None (not recorded).
        evaluation: whether the node deals a fixed evaluation order.
        partitions: the canonical partition count (recorded in training only).
        deal: the deal version, or None where the node deals as version 1 does (not
            recorded; training only).
    """
    config: dict[str, Any] = {
        "seed": seed,
        "rank": rank,
        "world_size": world_size,
        "units": units,
        "samples": samples,
    }
    if unit_grid is not None:
        config[UNIT_GRID_KEY] = dict(unit_grid)
    if evaluation:
        config[EVALUATION_KEY] = True
    else:
        config[PARTITIONS_KEY] = partitions
        if deal is not None:
            config[DEAL_KEY] = deal
    return config


def saved_deal(config: Mapping[str, Any]) -> int:
    """The deal version a training state's config says it was made under
    (`FIRST_DEAL` where it says none), refused if this library does not deal it.

    Args:
        config: the state's config.

    Raises:
        ValueError: a version this library does not deal.
    """
    deal = config.get(DEAL_KEY, FIRST_DEAL)
    if type(deal) is not int:
        raise ValueError(
            f"the ChunkPermuteNode state's {DEAL_KEY!r} must be an int, got {deal!r}: the "
            f"state is damaged; pass the dict loader.state_dict() returned, as it was saved"
        )
    check_deal(deal)
    return deal


@dataclass(frozen=True)
class SavedRest:
    """An epoch's rest as re-dealt to this rank: the epoch, the share, and the smallest
    and largest new rank's share in samples (what padding and `drop_last` go by).

    Args:
        epoch: the epoch of the cut.
        share: this rank's share of its rest (`core.elastic.redeal`).
        least: the smallest new rank's share of the rest, in samples.
        most: the largest new rank's share of the rest, in samples.
    """

    epoch: int
    share: RestShare
    least: int
    most: int

    def to_state(self) -> dict[str, Any]:
        """The rest as plain ints and lists, as the state records it."""
        return {"least": self.least, "most": self.most, **self.share.to_plain()}

    @classmethod
    def from_state(cls, saved: Any, epoch: int) -> SavedRest | None:
        """The rest a state records for its `epoch`, checked (None: the state has none).

        Args:
            saved: the state's entry under `REST_KEY`, or None.
            epoch: the state's epoch.

        Raises:
            ValueError: the entry is damaged.
        """
        if saved is None:
            return None
        bounds_ok = (
            isinstance(saved, Mapping)
            and all(type(saved.get(k)) is int and saved[k] >= 0 for k in ("least", "most"))
            and saved["least"] <= saved["most"]
        )
        if not bounds_ok:
            raise ValueError(
                "the ChunkPermuteNode state's 'rest' is damaged (least and most must be "
                "ints, 0 <= least <= most): pass the dict loader.state_dict() returned, as "
                "it was saved"
            )
        plain = {k: v for k, v in saved.items() if k not in ("least", "most")}
        return cls(epoch, RestShare.from_plain(plain), saved["least"], saved["most"])


def saved_state(
    node: NamedNode,
    *,
    epoch: int,
    position: int,
    config: Mapping[str, Any],
    fingerprint: Mapping[str, Any] | None,
    rest: SavedRest | None,
) -> dict[str, Any]:
    """The node's state (`get_state`).

    Args:
        node: the chunk permute node whose state this is.
        epoch: the epoch it is in.
        position: the position of its next unit in the epoch's units.
        config: its settings (`permute_config`).
        fingerprint: what the graph reads, put in the state as it is (not copied: the
            node copies its state where it hands it out); None records nothing.
        rest: the re-dealt rest of `epoch`, or None (a whole epoch).
    """
    entries: dict[str, Any] = {EPOCH_KEY: epoch, POSITION_KEY: position, CONFIG_KEY: config}
    if fingerprint is not None:
        entries[FINGERPRINT_KEY] = fingerprint
    if rest is not None:
        entries[REST_KEY] = rest.to_state()
    return named_state(node, entries)


def restore_state(
    node: NamedNode,
    initial_state: Any,
    config: Mapping[str, Any],
    fingerprint: Mapping[str, Any] | None,
) -> tuple[Mapping[str, Any], int, SavedRest | None, int | None]:
    """Take up a saved state up to its position: the keys, the data it was counted on,
    the mix-ups named with what to do, the config, the epoch, the deal and the rest.
    Returns the checked state, its epoch, its rest (None: a whole epoch) and, in training,
    the deal version it was made under (which the node deals by from then on); the node
    checks the position against that epoch's units.

    Args:
        node: the chunk permute node the state is loaded into.
        initial_state: the node's part of a loaded state.
        config: the node's settings (`permute_config`).
        fingerprint: what the graph reads, or None (checks nothing).

    Raises:
        TypeError, ValueError: the state is damaged, or saved by another loader or rank.
    """
    state = check_node_state(node, initial_state, (EPOCH_KEY, POSITION_KEY))
    check_fingerprint(state, fingerprint)
    deal = None
    if PARTITIONS_KEY in config:  # training: the node takes up the state's deal
        saved = state.get(CONFIG_KEY)
        recorded = saved if isinstance(saved, Mapping) else {}
        if not recorded.get(EVALUATION_KEY, False):
            deal = saved_deal(recorded)
        config = {k: v for k, v in config.items() if k != DEAL_KEY}
    _check_saved_mode_and_rank(state, config)
    _check_saved_partitions(state, config)
    check_saved_config(node, state, config)
    epoch = check_cursor(node, state, EPOCH_KEY, 0)
    return state, epoch, SavedRest.from_state(state.get(REST_KEY), epoch), deal


def _check_saved_mode_and_rank(state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refuse, with what to do, the two mix-ups a general settings check would name
    unhelpfully: a training state in an evaluation loader (or the reverse), and another
    rank's state (which is what a framework that writes rank 0's checkpoint only hands
    every rank)."""
    saved = state.get(CONFIG_KEY)
    if not isinstance(saved, Mapping):
        return  # check_saved_config names it
    evaluation = bool(current.get(EVALUATION_KEY, False))
    if bool(saved.get(EVALUATION_KEY, False)) != evaluation:
        kinds = ("a training", "an evaluation")
        raise ValueError(
            f"this state was saved by {kinds[not evaluation]} loader and this is "
            f"{kinds[evaluation]} loader (build_loader's evaluation=); resume it "
            f"in a loader built as the one that saved it"
        )
    rank, world_size = current["rank"], current["world_size"]
    others = [k for k, v in current.items() if k != "rank" and k in saved and saved[k] != v]
    if not others and saved.get("rank", rank) != rank:
        raise ValueError(
            f"this state is rank {saved['rank']}'s (of {world_size}), and this "
            f"process is rank {rank}: each rank resumes from its own state. Load "
            f"each rank's own state, or build the loader with all_ranks_state=True so "
            f"that one state_dict() holds every rank's (Lightning and accelerate write "
            f"rank 0's checkpoint only)"
        )


def _check_saved_partitions(state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """A training state saved before states recorded C was dealt round-robin
    (C == world size): it resumes when this graph's C deals the same way (the world size
    divides C, or C is the split's unit count), and is refused, saying what to pass,
    otherwise."""
    saved = state.get(CONFIG_KEY)
    if PARTITIONS_KEY not in current or not isinstance(saved, Mapping) or PARTITIONS_KEY in saved:
        return  # an evaluation config records no partition count
    partitions, world_size = current[PARTITIONS_KEY], current["world_size"]
    if partitions % world_size == 0 or partitions == current["units"]:
        return
    raise ValueError(
        f"this state was saved before loader states recorded canonical_partitions, "
        f"with its units dealt round-robin over {world_size} ranks, and this graph "
        f"deals them over canonical_partitions={partitions}: build the loader "
        f"with canonical_partitions={world_size} to resume it"
    )
