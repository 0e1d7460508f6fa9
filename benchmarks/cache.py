"""The chunk cache: epochs 1 and 2 from a 30 ms store with the cache on, against the same
store on local disk without one (issue 18).

    python -m benchmarks.cache                       # 1 and 24 steps per chunk, 480 steps
    python -m benchmarks.cache --time-steps 3840 --repeats 5 --json cache.json
    python -m benchmarks.cache --no-peer             # without insitubatch 0.2.0

Per steps-per-chunk and per repeat, interleaved (so that drift in a shared machine's speed
hits every scenario alike), each a fresh loader over the ERA5-shaped zstd store:

- local: the store on local disk, no cache: epochs 1 and 2 (the target's denominator);
- remote: the store behind `open_latency_store` (30 ms per get), no cache: epoch 1;
- cached: the 30 ms store, a fresh cache folder big enough for the split: epoch 1 (cold:
  every chunk read from the store and written to the cache) and epoch 2 (warm);
- half: the 30 ms store, a fresh folder with half the split's stored bytes: epoch 2's
  hit ratio (admit-until-full keeps the first half; C/S = 0.5 is the most any policy
  gets);
- peer: `insitubatch` 0.2.0 (`peer.py`: its own Python >= 3.12 venv, a subprocess) on the
  same 30 ms store with its cache on as its README does it (`cache_dir=` a fresh folder,
  `persist=True`: every decoded chunk kept as a file there), its block as wide as ours and
  64 reads in flight: epochs 1 (cold) and 2 (warm) of one dataset. Left out with
  `--no-peer` or where no Python >= 3.12 is found.

Reported (medians over repeats): samples/s per epoch; warm / local epoch-2 rate (target
>= 0.9); cold-epoch cost, cached epoch 1 time / remote epoch 1 time - 1 (target <= 10%);
the same two as CPU seconds (all threads) per epoch, which a busy shared machine blurs
less than wall time; the half-budget hit ratio (target >= 0.45); and against the peer,
our warm epoch's rate over its warm epoch's (target >= 1.0), our cold over its cold, and
the same two in CPU seconds. Batches are checked equal across our scenarios; the peer
shuffles otherwise, so each of its epochs is checked to yield every sample once with the
values its first epoch had, and its warm epoch to be served from its cache.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import zarr

from benchmarks import peer
from benchmarks.latency_store import open_latency_store
from benchmarks.stores import ensure_store
from insitubatch_nodes import CacheSpec, build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES

SCENARIOS = ("local", "remote", "cached", "half", "peer")


def _epoch(loader: Any) -> tuple[float, float, int, dict[str, Any], int]:
    """Seconds for one epoch, the process's CPU seconds in it (every thread), its samples,
    `loader.stats()`, and a checksum of its indices."""
    samples = checksum = 0
    start, cpu = time.perf_counter(), time.process_time()
    for batch in loader:
        index = batch["sample_index"]
        samples += len(index)
        checksum = hash((checksum, index.numpy().tobytes()))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return seconds, cpu, samples, loader.stats(), checksum


def run(
    scenario: str, path: Path, folder: Path, split_bytes: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One scenario's epochs 1 and 2 (see the module)."""
    if scenario == "peer":
        return run_peer(path, folder.with_name("peer-cache-folder"), args)
    source: Any = str(path)
    cache = None
    if scenario != "local":
        source = open_latency_store(str(path), args.latency_s)
    if scenario in ("cached", "half"):
        shutil.rmtree(folder, ignore_errors=True)
        budget = split_bytes * 4 if scenario == "cached" else split_bytes // 2
        cache = CacheSpec(folder, budget)
    loader = build_loader(
        source, split="all", batch_size=args.batch_size, device="cpu", seed=1, cache=cache
    )
    epochs = 1 if scenario == "remote" else 2
    row: dict[str, Any] = {"scenario": scenario}
    for epoch in range(1, epochs + 1):
        seconds, cpu, samples, stats, checksum = _epoch(loader)
        row[f"epoch{epoch}_samples_per_s"] = samples / seconds
        row[f"epoch{epoch}_s"] = seconds
        row[f"epoch{epoch}_cpu_s"] = cpu
        row[f"epoch{epoch}_checksum"] = checksum
        row[f"epoch{epoch}_bytes_fetched"] = stats["bytes_fetched"]
        if "cache_hit_ratio" in stats:
            row[f"epoch{epoch}_hit_ratio"] = stats["cache_hit_ratio"]
            row[f"epoch{epoch}_cache_written"] = stats["cache_bytes_written"]
    loader.close()
    return row


def run_peer(path: Path, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The peer's epochs 1 and 2 with its cache in a fresh `folder` (see the module)."""
    shutil.rmtree(folder, ignore_errors=True)
    group = zarr.open_group(str(path), mode="r")
    first = group[ERA5_VARIABLES[0]]
    unit_bytes = sum(
        group[name].dtype.itemsize * math.prod(group[name].chunks) for name in ERA5_VARIABLES
    )
    settings = peer.matching(peer.PeerSettings(), first.chunks[0], unit_bytes)
    _, report = peer.run_peer(
        args.interpreter,
        str(path),
        ERA5_VARIABLES,
        args.latency_s,
        args.batch_size,
        first.shape[0],
        3600.0,
        settings,
        epochs=2,
        cache_dir=folder,
    )
    if not report["epochs_agree"]:
        raise RuntimeError(f"{peer.NAME}'s epochs yielded other samples or values: {report}")
    row: dict[str, Any] = {"scenario": "peer"}
    for epoch, done in enumerate(report["epochs"], start=1):
        if done["samples"] != first.shape[0]:
            raise RuntimeError(f"{peer.NAME} yielded {done['samples']} samples in an epoch")
        row[f"epoch{epoch}_samples_per_s"] = done["samples"] / done["seconds"]
        row[f"epoch{epoch}_s"] = done["seconds"]
        row[f"epoch{epoch}_cpu_s"] = done["cpu_s"]
        row[f"epoch{epoch}_reads"] = done["reads"]
        row[f"epoch{epoch}_hit_ratio"] = done["cache_hits"] / max(
            1, done["cache_hits"] + done["cache_misses"]
        )
    shutil.rmtree(folder, ignore_errors=True)
    return row


def stored_bytes(path: Path) -> int:
    """Bytes of the store's chunk files (what a cache of the whole split holds, about)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per scenario and the ratios the issue's targets name."""

    def median(scenario: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["scenario"] == scenario)

    local2 = median("local", "epoch2_samples_per_s")
    versus_peer: dict[str, Any] = {}
    if any(r["scenario"] == "peer" for r in rows):
        versus_peer = {
            "peer_epoch1_samples_per_s": median("peer", "epoch1_samples_per_s"),
            "peer_epoch2_samples_per_s": median("peer", "epoch2_samples_per_s"),
            "warm_over_peer_warm": median("cached", "epoch2_samples_per_s")
            / median("peer", "epoch2_samples_per_s"),
            "cold_over_peer_cold": median("cached", "epoch1_samples_per_s")
            / median("peer", "epoch1_samples_per_s"),
            "warm_cpu_over_peer_warm": median("cached", "epoch2_cpu_s")
            / median("peer", "epoch2_cpu_s"),
            "cold_cpu_over_peer_cold": median("cached", "epoch1_cpu_s")
            / median("peer", "epoch1_cpu_s"),
            "peer_warm_hit_ratio": median("peer", "epoch2_hit_ratio"),
        }
    return {
        **versus_peer,
        "local_epoch1_samples_per_s": median("local", "epoch1_samples_per_s"),
        "local_epoch2_samples_per_s": local2,
        "remote_epoch1_samples_per_s": median("remote", "epoch1_samples_per_s"),
        "cached_epoch1_samples_per_s": median("cached", "epoch1_samples_per_s"),
        "cached_epoch2_samples_per_s": median("cached", "epoch2_samples_per_s"),
        "warm_over_local": median("cached", "epoch2_samples_per_s") / local2,
        "warm_over_remote": median("cached", "epoch2_samples_per_s")
        / median("remote", "epoch1_samples_per_s"),
        "cold_cost": median("cached", "epoch1_s") / median("remote", "epoch1_s") - 1,
        "warm_cpu_over_local": median("cached", "epoch2_cpu_s") / median("local", "epoch2_cpu_s"),
        "cold_cpu_cost": median("cached", "epoch1_cpu_s") / median("remote", "epoch1_cpu_s") - 1,
        "warm_hit_ratio": median("cached", "epoch2_hit_ratio"),
        "half_budget_hit_ratio": median("half", "epoch2_hit_ratio"),
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"ERA5-shaped zstd, {report['time_steps']} steps, batch {report['batch_size']}, "
        f"{report['latency_s'] * 1e3:.0f} ms store, medians of {report['repeats']} "
        "interleaved repeats",
        "",
        "| steps/chunk | local e1 | local e2 | 30 ms no cache e1 | cached e1 (cold) "
        "| cached e2 (warm) | warm / local | cold cost | warm CPU / local | cold CPU cost "
        "| warm hits | hits, half budget |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for spc, s in report["results"].items():
        lines.append(
            f"| {spc} | {s['local_epoch1_samples_per_s']:.0f} | "
            f"{s['local_epoch2_samples_per_s']:.0f} | {s['remote_epoch1_samples_per_s']:.0f} | "
            f"{s['cached_epoch1_samples_per_s']:.0f} | {s['cached_epoch2_samples_per_s']:.0f} | "
            f"{s['warm_over_local']:.2f}x | {s['cold_cost']:+.0%} | "
            f"{s['warm_cpu_over_local']:.2f}x | {s['cold_cpu_cost']:+.0%} | "
            f"{s['warm_hit_ratio']:.2f} | "
            f"{s['half_budget_hit_ratio']:.2f} |"
        )
    compared = {spc: s for spc, s in report["results"].items() if "peer_epoch1_samples_per_s" in s}
    if compared:
        lines += [
            "",
            f"against {peer.NAME} with its cache (cache_dir, persist=True), same store and latency",
            "",
            "| steps/chunk | ours cold | ours warm | its cold | its warm | warm / its warm "
            "| cold / its cold | warm CPU / its | cold CPU / its | its warm hits |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for spc, s in compared.items():
            lines.append(
                f"| {spc} | {s['cached_epoch1_samples_per_s']:.0f} | "
                f"{s['cached_epoch2_samples_per_s']:.0f} | {s['peer_epoch1_samples_per_s']:.0f} | "
                f"{s['peer_epoch2_samples_per_s']:.0f} | {s['warm_over_peer_warm']:.2f}x | "
                f"{s['cold_over_peer_cold']:.2f}x | {s['warm_cpu_over_peer_warm']:.2f}x | "
                f"{s['cold_cpu_over_peer_cold']:.2f}x | {s['peer_warm_hit_ratio']:.2f} |"
            )
    lines.append("")
    lines.append("rates in samples/s; CPU ratios: ours over its, CPU seconds per epoch")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-steps", type=int, default=480)
    parser.add_argument("--steps-per-chunk", type=int, nargs="+", default=[1, 24])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--latency-s", type=float, default=0.030)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--store", type=Path, default=Path("/tmp/insitubatch-cache-bench"))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--no-peer", action="store_true", help=f"leave {peer.NAME} out")
    parser.add_argument("--python312", default=None, help="interpreter for the peer's venv")
    parser.add_argument(
        "--venvs", type=Path, default=Path.home() / ".cache/insitubatch-ab", help="its venv"
    )
    args = parser.parse_args()
    scenarios = SCENARIOS
    args.interpreter = None
    if not args.no_peer:
        python = peer.find_python(args.python312)
        args.interpreter = peer.ensure_venv(args.venvs, python) if python else None
    if args.interpreter is None:
        scenarios = tuple(s for s in SCENARIOS if s != "peer")
        print(f"({peer.NAME} left out)", flush=True)
    paths = {
        spc: ensure_store(args.store, args.time_steps, spc, "zstd") for spc in args.steps_per_chunk
    }
    sizes = {spc: stored_bytes(path) for spc, path in paths.items()}
    rows: dict[int, list[dict[str, Any]]] = {spc: [] for spc in paths}
    for repeat in range(args.repeats):
        for spc, path in paths.items():
            for scenario in scenarios:
                row = run(scenario, path, args.store / "cache-folder", sizes[spc], args)
                row.update(steps_per_chunk=spc, repeat=repeat)
                rows[spc].append(row)
                print(json.dumps(row), flush=True)
    for spc, found in rows.items():  # every one of our scenarios drew the same batches
        ours = {r["epoch1_checksum"] for r in found if r["scenario"] != "peer"}
        assert len(ours) == 1, f"batches differ at {spc}"
    report = {
        "time_steps": args.time_steps,
        "batch_size": args.batch_size,
        "latency_s": args.latency_s,
        "repeats": args.repeats,
        "results": {spc: summarise(found) for spc, found in rows.items()},
    }
    if args.json is not None:
        args.json.write_text(json.dumps({"report": report, "rows": rows}, indent=2))
    print(render(report))


if __name__ == "__main__":
    main()
