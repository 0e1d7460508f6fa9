"""Resume on another number of ranks: from every old rank's loader state, this rank's
share of the rest of the epoch (elastic resume; the math is `core.elastic`).

Under torch.distributed every rank's state is gathered into one object
(`loader.rank_states.gather_rank_states`, or `Loader(all_ranks_state=True)`), saved once, and
loaded by every new rank; a `Loader` whose world size differs from the number of states
hands them here. Each old state says, in its `PoolShuffleNode` part, the pool's cursor
(next unit, resident units with what they gave) and, in the `ChunkPermuteNode` part
inside it, the epoch, the rank and how that rank's units were dealt. From all of them
every new rank computes the same re-deal and takes its own share; nothing but those
cursors is read from the states, and the graph is started afresh on the share. The states
are checked first: their digests, that they are one run's (seed, split, partition count,
data), one epoch, and every rank once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from insitubatch_nodes.core.elastic import (
    RankCut,
    RestShare,
    full_permutation,
    redeal,
    rest_target,
    share_samples,
    share_units,
)
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.chunk_permute_state import saved_deal
from insitubatch_nodes.nodes.links import EpochKeeper
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    NODE_KEY,
    check_fingerprint,
    check_state_digest,
)


def find_node_state(state: Any, node: str) -> Mapping[str, Any] | None:
    """The first part of a nested state saved by a node whose states are saved under the
    name `node` (depth first), or None.

    Args:
        state: a loader state or a part of one.
        node: the name the node's class declares (`STATE_NAME`, `nodes.state_names`).
    """
    stack = [state]
    while stack:
        part = stack.pop()
        if isinstance(part, Mapping):
            if part.get(NODE_KEY) == node:
                return part
            stack.extend(reversed(list(part.values())))
        elif isinstance(part, list):
            stack.extend(reversed(part))
    return None


def _refuse(why: str) -> ValueError:
    return ValueError(
        f"cannot resume these {why}: gather every rank's loader.state_dict() at the same "
        f"step into one object (rank_states.gather_rank_states, or "
        f"Loader(all_ranks_state=True)) and load that"
    )


def _old_rank(
    node: EpochKeeper, entry: Any, index: int, world_size: int
) -> tuple[int, RankCut, Mapping[str, Any], int]:
    """One old rank's epoch, cut, pool settings and deal version, from its loader state,
    checked."""
    if not isinstance(entry, Mapping):
        raise _refuse(f"rank states: entry {index} is a {type(entry).__name__}, not a dict")
    check_state_digest(entry)
    pool = find_node_state(entry, PoolShuffleNode.STATE_NAME)
    if pool is None:
        raise ValueError(
            "resuming on another number of ranks needs the pool shuffle's cursors, and "
            "these states were saved by a loader with the block shuffle: resume them on "
            "as many ranks as saved them, or train with shuffle='pool'"
        )
    permute = find_node_state(pool.get("source"), ChunkPermuteNode.STATE_NAME)
    config = None if permute is None else permute.get(CONFIG_KEY)
    if not isinstance(config, Mapping):
        raise _refuse(f"rank states: entry {index} has no ChunkPermuteNode settings")
    check_fingerprint(permute, node.fingerprint)
    units = int(node.split_units.size)
    expected = {"seed": node.seed, "units": units, "rank": index, "world_size": world_size}
    differs = {k: config.get(k) for k, v in expected.items() if config.get(k) != v}
    if differs or config.get("evaluation", False):
        raise _refuse(f"rank states: entry {index} was saved with {differs or 'evaluation'}")
    saved_partitions = config.get("partitions", config.get("world_size"))
    if saved_partitions != node.partitions:
        raise ValueError(
            f"these states were saved with canonical_partitions={saved_partitions} and this "
            f"loader has {node.partitions}: build it with canonical_partitions="
            f"{saved_partitions} (a run keeps its partition count on any number of ranks)"
        )
    epoch = permute.get("epoch")
    share = None
    if permute.get("rest") is not None:
        rest = permute["rest"]
        plain = {k: v for k, v in rest.items() if k not in ("least", "most")}
        share = RestShare.from_plain(plain)
    resident = pool.get("resident")
    if type(epoch) is not int or not isinstance(resident, list):
        raise _refuse(f"rank states: entry {index} is damaged")
    cut = RankCut(index, share, int(pool["next_unit"]), tuple((p, g) for p, g in resident))
    return epoch, cut, pool, saved_deal(config)


def resume_rest(node: EpochKeeper, entries: list[Any]) -> None:
    """Set `node` to begin this rank's share of the rest of the epoch the old ranks'
    states were cut in (or the next epoch, if nothing is left of it; or that epoch afresh,
    if no rank had yielded anything).

    Args:
        node: the graph's epoch keeper (its `ChunkPermuteNode`).
        entries: every old rank's loader state, in rank order.

    Raises:
        ValueError: the states are not one cut of one run of this loader's data and
            settings, or were saved with the block shuffle.
    """
    if node.evaluation:
        raise ValueError(
            "an evaluation loader reads its fixed share once per epoch: it has no epoch "
            "state worth carrying to another number of ranks; start it afresh"
        )
    rank, world_size = node.process_rank()
    olds = [_old_rank(node, entry, i, len(entries)) for i, entry in enumerate(entries)]
    epochs = {epoch for epoch, _, _, _ in olds}
    if len(epochs) != 1:
        raise _refuse(f"rank states: they are of different epochs {sorted(epochs)}")
    epoch = epochs.pop()
    deals = {deal for _, _, _, deal in olds}
    if len(deals) != 1:
        raise _refuse(f"rank states: they were dealt by different versions {sorted(deals)}")
    pools = [pool for _, _, pool, _ in olds]
    if all(pool.get("samples_yielded") == 0 for pool in pools):
        node.begin_epoch(epoch)  # nothing drawn yet: the epoch as a run at W' deals it
        return
    if all(pool.get("samples_yielded") == pool.get("samples_this_epoch") for pool in pools):
        node.begin_epoch(epoch + 1)  # the epoch was over
        return
    cuts = [cut for _, cut, _, _ in olds]
    shares = redeal(
        node.geometry,
        node.split_units,
        seed=node.seed,
        epoch=epoch,
        partitions=node.partitions,
        cuts=cuts,
        world_size=world_size,
        deal=deals.pop(),
    )
    permutation = full_permutation(node.geometry, node.split_units, node.seed, epoch)
    counts = [
        share_samples(node.geometry, *share_units(node.geometry, s, permutation, node.split_units))
        for s in shares
    ]
    settings = pools[0].get(CONFIG_KEY, {})
    target = rest_target(
        counts, int(settings.get("batch_size", 1)), bool(settings.get("drop_last", False))
    )
    if target == 0:
        node.begin_epoch(epoch + 1)  # nothing left, or not a full batch for every rank
        return
    node.begin_rest(epoch, shares[rank], min(counts), max(counts))
