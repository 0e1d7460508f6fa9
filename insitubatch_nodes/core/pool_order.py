"""The chunk-pool shuffle: the order a rank's samples leave a pool of units, as a pure
function (version `POOL_ORDER_VERSION`).

The rule, in words. A rank's units come in its epoch order (`core.partition`). A pool
holds up to P of them. Before each batch b the pool is refilled in that order up to P
units, or while it ramps up, until it holds (b + 1) * ramp batches' samples, whichever
comes first (`enters_pool`); and past either while it holds fewer samples than the batch
still needs (short units, or units dealt part-drawn after a resize, cause that). Units
therefore enter at fixed points of the draw sequence (batch starts), never when a read
happens to finish. Batch b takes its real samples from the
pool as a uniform draw without replacement over every sample still in it: how many each
unit gives is one multivariate hypergeometric draw over what each unit has left, from a
generator keyed on (seed, epoch, rank, b), so no earlier draw needs replaying to make
batch b. Each unit gives its samples in its own seeded permutation, keyed on (seed,
epoch, unit): which samples a unit gives depends only on how many it gave before. A unit
that has given all its samples leaves the pool. The batch's samples, as drawn, are grouped
by unit in pool order (pool order is entry order), padding last; the batch yields its
real samples permuted by `batch_interleave`, keyed on (seed, epoch, rank, b) too, so that
consecutive samples come from different units (version 3), and its padding after them.

A rank that pads to the common per-rank count (`drop_last=False`) repeats, once its own
samples are out, the permutation of the last unit to enter, cycled from its start: no
extra reads, since that unit is the last one read. With `drop_last` the order is cut at
the common count.

P bounds the memory the shuffle holds (P units' rows, freed unit by unit as they drain)
and sets the quality: a batch of B draws over P units' samples touches about as many
distinct units as a uniform global shuffle would over P units. `pool_units` makes P from
the window's bytes, a pure function of the settings and the store.

The ramp (version 2). Filling to P before the first batch made every epoch's first batch
wait for P units to be read (1 GiB by default; on a store of fewer units than P, the whole
epoch was read before a batch was drawn, so reads and gathers never overlapped). With the
ramp an epoch's first batch waits for `ramp` batches' samples, and the pool grows by
`ramp` batches' samples per batch drawn: units enter at (ramp + 1) times the rate batches
draw samples, so as long as reads keep that pace the draws never wait for them, and the
pool holds P units after about P * unit_length / (2 * ramp * B) batches (the units of a
full pool are about half drawn). The price is mixing in those first batches, which draw
from fewer units. An order must not depend on IO, and the reading speed is not known, so
the growth is a fixed multiple of the draw rate rather than what reads would allow; and a
linear one, not geometric: a geometric ramp reaches P within a few batches, and then
waits for the rest of P's reads just as version 1 did. The default, 2 (`POOL_RAMP`): at
the default batch of 32 the first batch then needs 64 samples, which the first default
block holds anyway (`core.memory_bound.MIN_BLOCK_SAMPLES`), so it waits for no more reads
than a ramp of 1 and mixes the first batches better (0.48 against 0.34 of a uniform
shuffle's distinct units in an epoch's first 10 batches at 24 steps per chunk, against
0.92 with the pool filled first; `benchmarks/shuffle_quality.py`). A ramp of 0 fills to P
first: the order of version 1, whose states resume with it.

The ramp applies at every epoch, and to a re-dealt rest (`core.elastic`). The pool's
memory is kept between epochs, but not its units: an epoch draws each of its units once,
and the next epoch's are others, so each epoch starts from an empty pool, and without a
ramp its first batch would wait for P units again (only `read_across_epochs`' few blocks
read ahead would be there). Draws stay keyed per rank, not per canonical partition: a
rank's pool mixes the units of all its partitions, so no draw belongs to one partition,
and a resize re-deals the (unit, given) pieces left rather than replaying a partition's
draws (`core.elastic`).

The interleave (version 3). Grouped by unit, a batch is mixed only as a set: a contiguous
slice of it (a micro-batch of gradient accumulation, a DataParallel replica's share, a
pipeline stage's) holds a few units' samples, and neighbouring samples are often
neighbouring steps. A permutation of each batch mixes every slice as well as the whole:
on an ERA5-like store (24 steps per chunk, batches of 32, a 1 GiB window) the gap score
between consecutive samples goes from about 0.77 of a uniform shuffle's to 1.00
(`core.quality.gap_score`, `benchmarks/shuffle_quality.py`). It changes no draw (which
samples a batch holds, when units enter and leave), so cursors, memory and the elastic
re-deal are version 2's; and it needs no replaying, being keyed on the batch alone. The
gather carries it as the batch's row order (`BatchDraw.order`), so its work still scales
with blocks, not samples. `interleave=False` draws version 2's order, whose states
resume only with it (`pool_interleave=False`); with no ramp either, version 1's.

Versions: 1 fills the pool to P before the first batch; 2 ramps it up; 3 interleaves the
samples within each batch.

`pool_epoch_order` spells the whole epoch out at once; `PoolShuffleNode` reproduces it
incrementally through `pool_take`, and the tests hold one against the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.draw_order import padding_positions
from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.seeding import rng_for

POOL_ORDER = "pool"
POOL_ORDER_VERSION = 3
POOL_ORDER_VERSION_GROUPED = 2  # batches grouped by unit: `interleave=False`
POOL_RAMP = 2


def pool_units(window_bytes: int, unit_bytes: int, unit_length: int, batch_size: int) -> int:
    """P, the units the pool holds: as many as `window_bytes` holds, and at least enough
    for one batch (plus one unit, so that a batch never empties the pool by construction).
    A pure function of the settings and the store: the same on every host, so the order
    is too.

    Args:
        window_bytes: bytes the pool may hold (`shuffle_window`).
        unit_bytes: bytes of one unit's rows (halo chunks included).
        unit_length: samples in a full unit.
        batch_size: samples per batch.
    """
    if window_bytes < 1 or unit_bytes < 1 or unit_length < 1 or batch_size < 1:
        raise ValueError(
            f"pool_units needs positive sizes, got window_bytes={window_bytes}, "
            f"unit_bytes={unit_bytes}, unit_length={unit_length}, batch_size={batch_size}"
        )
    least = -(-batch_size // unit_length) + 1
    return max(least, window_bytes // unit_bytes)


def unit_draw(seed: int, epoch: int, unit: int, size: int) -> np.ndarray:
    """Local positions of a unit's samples in the order the unit gives them: keyed on the
    unit, not the rank, so a unit gives the same samples whichever rank holds it.

    Args:
        seed: the loader's seed.
        epoch: the epoch.
        unit: the unit's index in the store.
        size: the samples the unit holds.
    """
    if size <= 1:
        # The only permutation there is: with one step per chunk a unit is one sample, and
        # a generator per unit (a `SeedSequence` and a `PCG64`) cost the main thread more
        # than the rest of the unit's bookkeeping (issue 33). The same array either way.
        return np.arange(size, dtype=np.int64)
    return rng_for(seed, "unit-draw", epoch, unit).permutation(size)


def pool_take(
    seed: int, epoch: int, rank: int, batch: int, remaining: np.ndarray, want: int
) -> np.ndarray:
    """How many samples each pool unit gives to batch `batch`: `want` samples drawn
    uniformly without replacement from every sample left in the pool (a multivariate
    hypergeometric draw), so a unit with more left gives more.

    Args:
        seed: the loader's seed.
        epoch: the epoch.
        rank: this rank.
        batch: the batch's index in the rank's epoch.
        remaining: samples each pool unit has left, in pool order.
        want: samples to take, at most `remaining.sum()`.
    """
    remaining = np.asarray(remaining, dtype=np.int64)
    if want > int(remaining.sum()):
        raise ValueError(f"the pool holds {int(remaining.sum())} samples, fewer than {want}")
    if want == 0 or remaining.size == 0:
        return np.zeros(remaining.size, dtype=np.int64)
    generator = rng_for(seed, "pool-batch", epoch, rank, batch)
    return generator.multivariate_hypergeometric(remaining, want).astype(np.int64)


def batch_interleave(
    seed: int, epoch: int, rank: int, batch: int, size: int, real: int | None = None
) -> np.ndarray:
    """The order batch `batch` yields its samples in (version 3): its row i is row
    `order[i]` of the batch as drawn (each pool unit's samples in pool order, then the
    padding). The real samples are permuted among themselves and the padding stays last,
    so that a rank's own samples still all come before its padding (what a consumer that
    trims the padding relies on). Keyed on the batch alone, so no earlier draw needs
    replaying.

    Args:
        seed: the loader's seed.
        epoch: the epoch.
        rank: this rank.
        batch: the batch's index in the rank's run (the epoch's, or a re-dealt rest's).
        size: the samples the batch yields, padding included.
        real: the batch's real samples, the first `real` rows (None: all `size`).
    """
    real = size if real is None else real
    if not 0 <= real <= size:
        raise ValueError(f"a batch of {size} samples cannot hold {real} real ones")
    mixed = rng_for(seed, "pool-interleave", epoch, rank, batch).permutation(real)
    return np.concatenate([mixed, np.arange(real, size, dtype=mixed.dtype)])


def enters_pool(
    units: int, samples: int, needed: int, batch: int, *, pool_size: int, ramp: int, batch_size: int
) -> bool:
    """Whether the next unit of the rank's order enters the pool before batch `batch`
    (the refill rule of the module): while the pool holds fewer samples than the batch
    needs; else while it holds fewer than P units and, when it ramps, fewer than
    (batch + 1) * ramp batches' samples.

    Args:
        units: units in the pool now.
        samples: samples they have left.
        needed: real samples the batch draws.
        batch: the batch's index in the pool's run (the epoch's, or a re-dealt rest's).
        pool_size: P, the units the pool holds (`pool_units`).
        ramp: batches' samples the pool grows by per batch; 0 fills it to P at once.
        batch_size: samples per batch.
    """
    if samples < needed:
        return True
    if units >= pool_size:
        return False
    return ramp == 0 or samples < (batch + 1) * ramp * batch_size


@dataclass(frozen=True)
class PoolDrawCursor:
    """Where `pool_draw` stopped: the position of the next unit to enter, the resident
    units as [position, given] pairs in pool order, and the samples yielded (padding
    included): the pure order's account of a pool after some batches. The node keeps its
    own, as its state saves it (`nodes.pool_cursor.SavedPoolCursor`: a dict of resident
    units, the epoch's target, the state's format)."""

    next_unit: int
    resident: list[list[int]]
    yielded: int


def pool_draw(
    geometry: UnitSamples,
    *,
    seed: int,
    epoch: int,
    rank: int,
    units: np.ndarray,
    starts: np.ndarray,
    target: int,
    pool_size: int,
    batch_size: int,
    ramp: int = POOL_RAMP,
    interleave: bool = True,
    batches: int | None = None,
) -> tuple[np.ndarray, PoolDrawCursor]:
    """Global sample ids a rank yields from `units` under the pool shuffle, in order, and
    the pool's cursor after them: the rule of the module, for any list of units, each
    entering the pool having given `starts` of its draw already (a share re-dealt after a
    resume on another number of ranks, `core.elastic`; zeros for an epoch's fresh share).
    The last unit's draw, cycled from its start, pads the rank to `target`.

    Args:
        geometry: how many samples each unit holds.
        seed: the loader's seed.
        epoch: the epoch.
        rank: the rank whose pool batches are drawn (the draw's key).
        units: the units in the order they enter the pool.
        starts: samples of each unit's draw given before (0 <= start <= its size).
        target: samples to yield in all (the real ones first, then padding).
        pool_size: P, the units the pool holds (`pool_units`).
        batch_size: samples per batch.
        ramp: how fast the pool fills (`enters_pool`); 0: to P before the first batch.
        interleave: permute each batch's samples (`batch_interleave`, version 3); False
            keeps them grouped by unit (version 2).
        batches: stop after this many batches (None: at `target`).
    """
    samples = [geometry.unit_samples(units[i : i + 1]) for i in range(units.size)]
    draws = [unit_draw(seed, epoch, int(u), s.size) for u, s in zip(units, samples, strict=True)]
    pool: list[int] = []  # positions in the rank's unit order, entry order
    given: dict[int, int] = {}
    next_unit = 0
    left = int(sum(s.size for s in samples)) - int(np.sum(starts))
    pieces: list[np.ndarray] = []
    yielded = padded = 0
    batch = 0
    while yielded < target and (batches is None or batch < batches):
        want = min(batch_size, target - yielded)
        real = min(want, left)
        in_pool = sum(samples[p].size - given[p] for p in pool)
        while next_unit < units.size and enters_pool(
            len(pool),
            in_pool,
            real,
            batch,
            pool_size=pool_size,
            ramp=ramp,
            batch_size=batch_size,
        ):
            pool.append(next_unit)
            given[next_unit] = int(starts[next_unit])
            in_pool += samples[next_unit].size - given[next_unit]
            next_unit += 1
        remaining = np.array([samples[p].size - given[p] for p in pool], dtype=np.int64)
        counts = pool_take(seed, epoch, rank, batch, remaining, real)
        drawn: list[np.ndarray] = []
        for p, count in zip(pool, counts.tolist(), strict=True):
            if count:
                start = given[p]
                drawn.append(samples[p][draws[p][start : start + count]])
                given[p] = start + count
        pool = [p for p in pool if given[p] < samples[p].size]
        left -= real
        if want > real:
            last = units.size - 1
            pad = padding_positions(samples[last].size, padded + want - real, draws[last])
            drawn.append(samples[last][pad[padded:]])
            padded += want - real
        ids = np.concatenate(drawn)
        if interleave:
            ids = ids[batch_interleave(seed, epoch, rank, batch, want, real)]
        pieces.append(ids)
        yielded += want
        batch += 1
    order = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    cursor = PoolDrawCursor(next_unit, [[p, given[p]] for p in pool], yielded)
    return order, cursor


def pool_epoch_order(
    geometry: UnitSamples,
    assignment: EpochAssignment,
    *,
    pool_size: int,
    batch_size: int,
    drop_last: bool,
    ramp: int = POOL_RAMP,
    interleave: bool = True,
) -> np.ndarray:
    """Global sample ids one rank yields in one epoch under the pool shuffle, in order
    (batches are consecutive slices of `batch_size`): `pool_draw` over the rank's share,
    padded from its last unit.

    Args:
        geometry: how many samples each unit holds (a `SampleGeometry` or `AnchorSet`).
        assignment: the rank's units for the epoch (training: `assign_epoch`).
        pool_size: P, the units the pool holds (`pool_units`).
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded.
        ramp: how fast the pool fills (`enters_pool`); 0: to P before the first batch.
        interleave: permute each batch's samples (version 3); False: version 2's order.
    """
    a = assignment
    order, _ = pool_draw(
        geometry,
        seed=a.seed,
        epoch=a.epoch,
        rank=a.rank,
        units=a.units,
        starts=np.zeros(a.units.size, dtype=np.int64),
        target=a.samples_per_rank(batch_size, drop_last),
        pool_size=pool_size,
        batch_size=batch_size,
        ramp=ramp,
        interleave=interleave,
    )
    return order
