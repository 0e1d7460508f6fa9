"""The rest of an epoch cut under W ranks, dealt again to W' ranks (elastic resume), as
pure functions (version `RESIZE_VERSION`).

At a cut every rank's pool shuffle (`core.pool_order`) has a cursor: units of its order
not entered yet, and resident units with how many samples each gave. A unit gives its
samples in its own seeded permutation (`unit_draw`, keyed on the unit, not the rank), so
what remains of a unit is always the tail of that permutation after `given` samples:
(unit, given) says it, whichever rank held it. The rest of the epoch is the set of such
pairs over all ranks.

Normal form (`EpochRest`). The rest is written as a `tail` position of the epoch's
permutation of full units, every position from which on is untouched, and the explicit
`pieces` (unit, given) for everything else: partly drawn units, untouched units below the
tail, short units. Ranks step together, so the pieces are about the resident units and a
few units around the slowest rank's cursor: their number depends on the ranks and the pool
size at the cut, never on how many resizes came before (each resize computes the normal
form afresh from the units left), so a state never grows over repeated resizes.

Deal (`deal_rest`). New rank r' takes the tail positions tail + r' + k W' (every W'-th, as
a fresh epoch deals), then the pieces go one by one, the one with the most samples left
first, to the rank holding the fewest samples so far (ties: the lower rank). No unit is
split between ranks (it is read once), so ranks differ by at most one unit's samples.
Each new rank reads its pieces first (the units resident at the cut), then its tail.

Padding rule. Every new rank yields the same count for the rest of the epoch: the largest
new share (without `drop_last`), padding by cycling the draw of its last unit from that
unit's first sample (a rank left with no unit pads from the epoch's first unit,
`share_units`); with
`drop_last`, the largest multiple of the batch size the smallest share fills. The next
epoch is dealt over the new world size as a run started there would deal it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import assign_epoch, chunk_permutation, samples_per_rank
from insitubatch_nodes.core.short_unit_deal import DEAL_VERSION

RESIZE_VERSION = 1


def full_permutation(
    geometry: UnitSamples, split_units: np.ndarray, seed: int, epoch: int
) -> np.ndarray:
    """The epoch's permutation of the split's full units (those holding `unit_length`
    samples): the order a fresh epoch deals them in, and the one a tail counts in.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        seed: the loader's seed.
        epoch: the epoch.
    """
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    full = units[geometry.unit_sizes(units) == geometry.unit_length]
    return chunk_permutation(full, seed, epoch)


def rank_rest(
    units: np.ndarray,
    starts: np.ndarray,
    sizes: np.ndarray,
    next_unit: int,
    resident: Iterable[tuple[int, int]],
) -> list[tuple[int, int]]:
    """The (unit, given) pairs a rank has left at a cut: its resident units with what
    they gave, and the units of its order not entered yet with what they gave before they
    were dealt to it; drained units are left out.

    Args:
        units: the rank's units in order.
        starts: samples each had given when dealt to the rank (zeros for a fresh share).
        sizes: samples each holds.
        next_unit: the position of the next unit to enter the rank's pool.
        resident: the pool's [position, given] pairs.
    """
    rest = [(int(units[p]), int(g)) for p, g in resident if p < next_unit and g < int(sizes[p])]
    rest += [
        (int(u), int(s))
        for u, s, n in zip(
            units[next_unit:].tolist(),
            starts[next_unit:].tolist(),
            sizes[next_unit:].tolist(),
            strict=True,
        )
        if s < n
    ]
    return rest


@dataclass(frozen=True)
class EpochRest:
    """What remains of an epoch, in normal form (see the module).

    Args:
        tail: every position of the full-unit permutation from this one on is untouched.
        pieces: (unit, given) pairs for the rest, sorted by unit.
    """

    tail: int
    pieces: tuple[tuple[int, int], ...]


def epoch_rest(permutation: np.ndarray, rest: Iterable[tuple[int, int]]) -> EpochRest:
    """The normal form of the (unit, given) pairs left over all ranks.

    Args:
        permutation: the epoch's full-unit permutation (`full_permutation`).
        rest: every rank's `rank_rest`, together.

    Raises:
        ValueError: a unit is left on two ranks (the states are not of one cut).
    """
    pairs = sorted(rest)
    units = [u for u, _ in pairs]
    if len(set(units)) != len(units):
        twice = sorted({u for u in units if units.count(u) > 1})[:5]
        raise ValueError(
            f"units {twice} are left on more than one rank: the rank states are not of "
            f"one checkpoint; gather every rank's state at the same step"
        )
    untouched_units = np.array([u for u, g in pairs if g == 0], dtype=np.int64)
    untouched = np.isin(permutation, untouched_units)
    touched = np.flatnonzero(~untouched)
    tail = int(touched[-1]) + 1 if touched.size else 0
    in_tail = set(permutation[tail:].tolist())
    return EpochRest(tail, tuple(p for p in pairs if p[0] not in in_tail))


@dataclass(frozen=True)
class RestShare:
    """A new rank's part of an epoch's rest: plain data, what its state records.

    Args:
        tail: the rest's tail position in the full-unit permutation.
        stride: the new world size (the rank takes every stride-th tail position).
        offset: the new rank (its first tail position is tail + offset).
        pieces: (unit, given) pairs the rank reads first, in this order.
    """

    tail: int
    stride: int
    offset: int
    pieces: tuple[tuple[int, int], ...]

    def units_and_starts(self, permutation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rank's units in order, and what each had given when dealt.

        Args:
            permutation: the epoch's full-unit permutation.
        """
        tail = permutation[self.tail + self.offset :: self.stride]
        units = np.array([u for u, _ in self.pieces] + tail.tolist(), dtype=np.int64)
        starts = np.array([g for _, g in self.pieces] + [0] * tail.size, dtype=np.int64)
        return units, starts

    def to_plain(self) -> dict[str, object]:
        """The share as plain ints and lists (for a state)."""
        return {
            "version": RESIZE_VERSION,
            "tail": self.tail,
            "stride": self.stride,
            "offset": self.offset,
            "pieces": [[u, g] for u, g in self.pieces],
        }

    @classmethod
    def from_plain(cls, plain: object) -> RestShare:
        """A share from `to_plain`'s form, checked.

        Args:
            plain: what `to_plain` returned, through a checkpoint.

        Raises:
            ValueError: it is not that form, or of another version.
        """
        ok = (
            isinstance(plain, dict)
            and plain.get("version") == RESIZE_VERSION
            and all(type(plain.get(k)) is int and plain[k] >= 0 for k in ("tail", "offset"))
            and type(plain.get("stride")) is int
            and plain["stride"] > plain["offset"]
            and isinstance(plain.get("pieces"), list)
            and all(
                isinstance(p, list) and len(p) == 2 and all(type(v) is int and v >= 0 for v in p)
                for p in plain["pieces"]
            )
        )
        if not ok:
            raise ValueError(
                f"the resized share in this state is damaged or of another version (this "
                f"library writes version {RESIZE_VERSION}): pass the dict "
                f"loader.state_dict() returned, as it was saved"
            )
        assert isinstance(plain, dict)
        pieces = tuple((int(u), int(g)) for u, g in plain["pieces"])
        return cls(plain["tail"], plain["stride"], plain["offset"], pieces)


def deal_rest(
    geometry: UnitSamples, permutation: np.ndarray, rest: EpochRest, world_size: int
) -> list[RestShare]:
    """The rest of an epoch dealt to `world_size` new ranks (see the module).

    Args:
        geometry: how many samples each unit holds.
        permutation: the epoch's full-unit permutation.
        rest: the epoch's rest in normal form.
        world_size: W', the new number of ranks.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    loads = [
        len(range(rest.tail + r, permutation.size, world_size)) * geometry.unit_length
        for r in range(world_size)
    ]
    units = np.array([u for u, _ in rest.pieces], dtype=np.int64)
    left = geometry.unit_sizes(units) - np.array([g for _, g in rest.pieces], dtype=np.int64)
    heap = [(load, r) for r, load in enumerate(loads)]
    heapq.heapify(heap)
    dealt: list[list[tuple[int, int]]] = [[] for _ in range(world_size)]
    for i in sorted(range(units.size), key=lambda i: (-int(left[i]), int(units[i]))):
        load, r = heapq.heappop(heap)
        dealt[r].append(rest.pieces[i])
        heapq.heappush(heap, (load + int(left[i]), r))
    return [RestShare(rest.tail, world_size, r, tuple(sorted(dealt[r]))) for r in range(world_size)]


def share_samples(geometry: UnitSamples, units: np.ndarray, starts: np.ndarray) -> int:
    """Samples a share still has to give: each unit's size less what it gave before.

    Args:
        geometry: how many samples each unit holds.
        units: the share's units.
        starts: what each had given when dealt.
    """
    return int(geometry.unit_sizes(units).sum() - starts.sum()) if units.size else 0


def rest_target(counts: list[int], batch_size: int, drop_last: bool) -> int:
    """Samples every new rank yields for the rest of the epoch (the padding rule of the
    module): the largest share, or with `drop_last` the largest multiple of `batch_size`
    the smallest share fills.

    Args:
        counts: every new rank's share of the rest, in samples.
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded.
    """
    return samples_per_rank(min(counts), max(counts), batch_size, drop_last)


def share_units(
    geometry: UnitSamples,
    share: RestShare,
    permutation: np.ndarray,
    split_units: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """A new rank's units in order and what each had given when dealt. A rank left with
    no unit gets one to pad from, the epoch's first full unit (the split's first unit if it
    has none), as given up already: it yields no real sample, and it is the rank's last
    unit, which padding cycles (`core.pool_order`).

    Args:
        geometry: how many samples each unit holds.
        share: the rank's share of the rest.
        permutation: the epoch's full-unit permutation.
        split_units: the split's units.
    """
    units, starts = share.units_and_starts(permutation)
    if units.size:
        return units, starts
    pad = int(permutation[0]) if permutation.size else int(np.min(split_units))
    size = int(geometry.unit_sizes(np.array([pad], dtype=np.int64))[0])
    return np.array([pad], dtype=np.int64), np.array([size], dtype=np.int64)


@dataclass(frozen=True)
class RankCut:
    """One rank at a cut, as its state says: which rank of how many it was, its share of
    the rest if its epoch was itself re-dealt (None: the epoch's own deal), and its pool's
    cursor.

    Args:
        rank: the rank.
        share: its `RestShare`, or None.
        next_unit: the position of the next unit to enter its pool.
        resident: its pool's (position, given) pairs.
    """

    rank: int
    share: RestShare | None
    next_unit: int
    resident: tuple[tuple[int, int], ...]


def redeal(
    geometry: UnitSamples,
    split_units: np.ndarray,
    *,
    seed: int,
    epoch: int,
    partitions: int,
    cuts: list[RankCut],
    world_size: int,
    deal: int = DEAL_VERSION,
) -> list[RestShare]:
    """The rest of `epoch`, cut where `cuts` say (every old rank's, in rank order), dealt
    to `world_size` new ranks.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        seed: the loader's seed.
        epoch: the epoch of the cut.
        partitions: C, the run's canonical partition count (the old ranks' deal).
        cuts: every old rank's cut.
        world_size: W', the new number of ranks.
        deal: the version of the deal the old ranks' epoch was dealt by
            (`core.short_unit_deal.DEAL_VERSION`, or the older one their states say).
    """
    permutation = full_permutation(geometry, split_units, seed, epoch)
    rest: list[tuple[int, int]] = []
    for cut in cuts:
        if cut.share is None:
            a = assign_epoch(
                geometry,
                split_units,
                seed=seed,
                epoch=epoch,
                rank=cut.rank,
                world_size=len(cuts),
                partitions=partitions,
                deal=deal,
            )
            units, starts = a.units, np.zeros(a.units.size, dtype=np.int64)
        else:
            units, starts = share_units(geometry, cut.share, permutation, split_units)
        if cut.next_unit > units.size or any(p >= cut.next_unit for p, _ in cut.resident):
            raise ValueError(
                f"rank {cut.rank}'s pool cursor (next unit {cut.next_unit}, resident "
                f"{list(cut.resident)[:5]}) lies outside its {units.size} units: the rank "
                f"states are not of this run; pass the states loader.state_dict() returned"
            )
        sizes = geometry.unit_sizes(units)
        rest += rank_rest(units, starts, sizes, cut.next_unit, cut.resident)
    return deal_rest(geometry, permutation, epoch_rest(permutation, rest), world_size)
