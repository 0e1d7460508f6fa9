"""`insitubatch demo`: one epoch over a local ERA5-shaped store, a mid-epoch checkpoint,
and a resume in a brand-new graph that must reproduce the rest of the epoch exactly."""

from __future__ import annotations

import hashlib
import io
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from insitubatch_nodes.builder.build_loader import build_loader
from insitubatch_nodes.cli.synthetic import write_era5_like
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.quality import chunk_diversity, gap_score
from insitubatch_nodes.io.zarr_source import ZarrSource
from insitubatch_nodes.loader.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes


@dataclass(frozen=True)
class DemoConfig:
    cache: Path
    time_steps: int = 1460
    steps_per_chunk: int = 8
    batch_size: int = 32
    block_chunks: int = 8
    seed: int = 0
    progress: bool = True


def default_cache() -> Path:
    return Path.home() / ".cache" / "insitubatch-nodes"


def _digest(batch: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(batch):
        h.update(name.encode())
        h.update(batch[name].cpu().numpy().tobytes())
    return h.hexdigest()


def _fetch_node(loader: Loader[dict[str, torch.Tensor]]) -> AsyncFetchNode:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))


def ensure_store(config: DemoConfig) -> tuple[Path, bool]:
    path = config.cache / f"era5-like-{config.time_steps}x121x240-c{config.steps_per_chunk}.zarr"
    if (path / "zarr.json").exists():
        return path, False
    config.cache.mkdir(parents=True, exist_ok=True)
    write_era5_like(path, time_steps=config.time_steps, steps_per_chunk=config.steps_per_chunk)
    return path, True


# the loader's own mixing figures for the epoch (`Loader.stats`), against a uniform shuffle
MIXING_FIGURES = (
    "distinct_units_per_batch",
    "distinct_units_uniform",
    "time_distance_ratio",
    "gap_score",
)


def run_demo(config: DemoConfig) -> dict[str, float | int | bool | str]:
    started = time.perf_counter()
    path, written = ensure_store(config)
    write_s = time.perf_counter() - started
    print(f"store: {path} (" + (f"written in {write_s:.1f} s" if written else "cached") + ")")

    def make() -> Loader[dict[str, torch.Tensor]]:
        return build_loader(
            str(path),
            split="train",
            batch_size=config.batch_size,
            block_chunks=config.block_chunks,
            seed=config.seed,
        )

    loader = make()
    source = ZarrSource.open(str(path))
    total = -(-source.split_units("train").size * source.geometry.unit_length // config.batch_size)
    midpoint = total // 2
    digests: list[str] = []
    orders: list[np.ndarray] = []
    nbytes = 0
    checkpoint = b""
    t0 = time.perf_counter()
    first_batch_s = 0.0
    with tqdm(total=total, unit="batch", disable=not config.progress) as bar:
        for i, batch in enumerate(loader):
            if i == 0:
                first_batch_s = time.perf_counter() - t0
            digests.append(_digest(batch))
            orders.append(batch[SAMPLE_INDEX_KEY].numpy())
            nbytes += sum(t.numel() * t.element_size() for t in batch.values())
            if i + 1 == midpoint:
                buffer = io.BytesIO()
                torch.save(loader.state_dict(), buffer)
                checkpoint = buffer.getvalue()
            elapsed = time.perf_counter() - t0
            bar.set_postfix(MBps=f"{nbytes / 1e6 / max(elapsed, 1e-9):.0f}")
            bar.update()
    epoch_s = time.perf_counter() - t0
    stats = _fetch_node(loader).stats
    mixing = {key: loader.stats().get(key) for key in MIXING_FIGURES}

    resumed = make()
    resumed.load_state_dict(torch.load(io.BytesIO(checkpoint), weights_only=True))
    resumed_digests = [_digest(batch) for batch in resumed]
    matches = resumed_digests == digests[midpoint:]

    order = np.concatenate(orders)
    samples = int(order.size)
    summary: dict[str, float | int | bool | str] = {
        "batches": len(digests),
        "samples": samples,
        "epoch_s": round(epoch_s, 3),
        "batches_per_s": round(len(digests) / epoch_s, 1),
        "samples_per_s": round(samples / epoch_s, 1),
        "MB_per_s": round(nbytes / 1e6 / epoch_s, 1),
        "first_batch_s": round(first_batch_s, 3),
        "chunk_reads": stats.chunks_read,
        "chunk_reads_per_sample": round(stats.chunks_read / samples, 4),
        "checkpoint_bytes": len(checkpoint),
        "resumed_batches": len(resumed_digests),
        "resume_matches": matches,
        "shuffle_gap_score": round(gap_score(order), 3),
        "shuffle_gap_score_uniform": round(
            gap_score(np.random.default_rng(0).permutation(order)), 3
        ),
        **{key: round(value, 3) for key, value in mixing.items() if value is not None},
        "chunks_per_batch_score": round(
            chunk_diversity(orders, source.geometry.unit_length, source.geometry.num_units), 3
        ),
    }
    width = max(map(len, summary))
    print("\nsummary")
    for key, value in summary.items():
        print(f"  {key:<{width}}  {value}")
    print(
        f"\nresume from the mid-epoch checkpoint (batch {midpoint} of {len(digests)}): "
        + ("the brand-new graph yielded the same batches" if matches else "MISMATCH")
    )
    return summary
