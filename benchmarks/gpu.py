"""Device benchmark: does the loader keep a GPU busy?

    python -m benchmarks.gpu        # needs CUDA; nvCOMP (the `gpu` extra) for GPU zstd
    python -m benchmarks.gpu --time-steps 480 --epochs 2   # a quicker look

Three measurements, each against a baseline from the same run:

1. Host-to-device copies: GB/s from pageable and from pinned memory at the batch's size,
   the pinned peak (a 512 MiB copy), and the node's staging ring (`BatchCopier`: packing
   the batch into the ring slot and the copy, back to back, as the node does them).
2. Training: a small convolutional model's step (the variables as channels, MSE to the
   input) fed by `build_loader(..., device="cuda")` with CPU decode and with GPU decode.
   The data-stall fraction is `1 - compute-only time / fed time` for the same number of
   steps: the share of the fed run the GPU spent waiting for data, epoch starts included.
   Each decode mode runs in a fresh process, for its own peak host RSS and device memory.
   The loader's default prefetch (2 batches, gathered and copied by its producer thread)
   is compared with none (`device_prefetch=0`: gather and copy on the training thread).
   GPU decode also runs with 8 blocks read ahead (default 2): blocks whose bytes arrive
   while a decode runs are decoded together, so more read-ahead means more chunks per
   nvCOMP call ("blocks/call" in the table). Both decodes also run with
   `read_across_epochs` ("across"): without it every epoch's first batch waits for a whole
   block, which counts as stall here.
3. Decode alone: every stored chunk of the store, bytes already in memory, decoded by
   numcodecs on all cores, and by nvCOMP in batches on the GPU (bytes already there).

Store: ERA5-shaped, 4 float32 variables `(T, 121, 240)`, zstd level 1, Zarr v3, 24 time
steps per chunk, on local disk. Prints a markdown report and writes `gpu.json` to --out.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from insitubatch_nodes.cli.synthetic import ERA5_GRID, ERA5_VARIABLES, write_era5_like

GB = 1e9


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _timed_copies(source: torch.Tensor, repeats: int) -> float:
    """GB/s of `repeats` host-to-device copies of `source`, back to back."""
    target = torch.empty(source.shape, dtype=source.dtype, device="cuda")
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    return repeats * source.numel() * source.element_size() / (time.perf_counter() - start) / GB


def h2d(batch_size: int) -> dict[str, float]:
    from insitubatch_nodes.device.batch_copy import BatchCopier
    from insitubatch_nodes.device.staging_ring import StagingRing, page_locked

    sample = {
        name: np.random.default_rng(0).random(ERA5_GRID, np.float32) for name in ERA5_VARIABLES
    }
    batch = {name: np.stack([array] * batch_size) for name, array in sample.items()}
    nbytes = sum(a.nbytes for a in batch.values())
    flat = torch.from_numpy(np.concatenate([a.reshape(-1) for a in batch.values()]))
    repeats = 50
    result = {
        "batch_MB": nbytes / 1e6,
        "pageable_GBps": _timed_copies(flat, repeats),
        "pinned_GBps": _timed_copies(flat.pin_memory(), repeats),
        "pinned_peak_GBps": _timed_copies(
            torch.empty(512 << 20, dtype=torch.uint8).pin_memory(), 10
        ),
    }
    copier = BatchCopier(torch.device("cuda"), slots=3)
    for _ in range(3):
        copier.deliver(copier.submit(batch))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        copier.deliver(copier.submit(batch))
    torch.cuda.synchronize()
    result["ring_GBps"] = repeats * nbytes / (time.perf_counter() - start) / GB
    spec = {name: (array.shape, array.dtype) for name, array in batch.items()}
    staging = StagingRing(3, page_locked)  # the pinned gather's ring
    for _ in range(3):  # its slots allocated (cudaHostAlloc) before the clock, as in a run
        staged = staging.stage(spec)
        copier.deliver(copier.submit(staged.arrays, staged))
    packed_before = copier.packed
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):  # as the node runs it: the gather fills the slot in place
        staged = staging.stage(spec)
        copier.deliver(copier.submit(staged.arrays, staged))
    torch.cuda.synchronize()
    result["ring_staged_GBps"] = repeats * nbytes / (time.perf_counter() - start) / GB
    result["ring_staged_counts"] = {  # what the ring did: a copy per batch and nothing else?
        "packed": copier.packed - packed_before,
        "slot_allocations": staging.stats.allocations,
        "copy_waits": staging.stats.waits,
        "held": staging.stats.held,
    }
    result["ring_staged_over_peak"] = result["ring_staged_GBps"] / result["pinned_peak_GBps"]
    result["ring_over_peak"] = result["ring_GBps"] / result["pinned_peak_GBps"]
    result["pageable_over_peak"] = result["pageable_GBps"] / result["pinned_peak_GBps"]
    result["pinned_over_peak"] = result["pinned_GBps"] / result["pinned_peak_GBps"]
    return result


class SmallConvNet(torch.nn.Module):
    """A few 3x3 convolutions over the variables as channels: a small weather model's step."""

    def __init__(self, channels: int, width: int, depth: int) -> None:
        super().__init__()
        layers: list[torch.nn.Module] = [torch.nn.Conv2d(channels, width, 3, padding=1)]
        for _ in range(depth - 2):
            layers += [torch.nn.GELU(), torch.nn.Conv2d(width, width, 3, padding=1)]
        layers += [torch.nn.GELU(), torch.nn.Conv2d(width, channels, 3, padding=1)]
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def training_step(width: int, depth: int, device: str) -> Callable[[dict[str, Any]], None]:
    """One optimiser step of `SmallConvNet` on a batch's variables as channels (MSE to the
    input): the work every benchmark that feeds a model times.

    Args:
        width: the convolutions' channels.
        depth: the number of convolutions.
        device: where the model runs ("cuda", or "cpu" for a dry run).
    """
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = SmallConvNet(len(ERA5_VARIABLES), width, depth).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch: dict[str, Any]) -> None:
        x = torch.stack([batch[name] for name in ERA5_VARIABLES], dim=1)
        loss = torch.nn.functional.mse_loss(model(x), x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def _train_run(args: dict[str, Any], queue: Any) -> None:
    from insitubatch_nodes import AsyncFetchNode, build_loader
    from insitubatch_nodes.nodes.graph import graph_nodes

    step = training_step(args["width"], args["depth"], "cuda")
    rss_before = _rss_mb()
    loader = build_loader(
        args["path"],
        split="all",
        batch_size=args["batch_size"],
        device="cuda",
        decode=args["decode"],
        seed=1,
        decode_threads=args["decode_threads"],
        device_prefetch=args["device_prefetch"],
        prefetch_blocks=args["read_ahead"],
        read_across_epochs=args["across"],
        shuffle=args["shuffle"],
    )
    (fetch,) = [n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode)]
    steps_per_epoch = len(list(range(0, args["samples"], args["batch_size"])))
    kept: list[dict[str, torch.Tensor]] = []  # one batch of each size an epoch has
    for batch in loader:  # warm-up epoch: cudnn autotune, allocator, page cache, threads
        step(batch)
        if not kept or len(batch["sample_index"]) != len(kept[-1]["sample_index"]):
            kept.append({k: v.clone() for k, v in batch.items()})
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    steps = steps_per_epoch * args["epochs"]
    # the compute-only run steps through an epoch's batch sizes as the fed run does: full
    # batches, then the short last one. (Until 2026-11-24 it timed the short one alone, so
    # the fed run's full batches counted as a 38% data stall.)
    sizes = [kept[0]] * (steps_per_epoch - len(kept) + 1) + kept[1:]
    assert len(sizes) == steps_per_epoch

    start = time.perf_counter()
    for _ in range(args["epochs"]):
        for fixed in sizes:
            step(fixed)
    torch.cuda.synchronize()
    compute_s = time.perf_counter() - start

    start = time.perf_counter()
    for _ in range(args["epochs"]):
        for _batch in loader:
            pass
    torch.cuda.synchronize()
    loader_s = time.perf_counter() - start

    fed_steps = 0
    waiting_s = 0.0  # host time inside next(): the loader's own work on this thread
    start = time.perf_counter()
    for _ in range(args["epochs"]):
        iterator = iter(loader)
        while True:
            asked = time.perf_counter()
            batch = next(iterator, None)
            waiting_s += time.perf_counter() - asked
            if batch is None:
                break
            step(batch)
            fed_steps += 1
    torch.cuda.synchronize()
    fed_s = time.perf_counter() - start
    assert fed_steps == steps, (fed_steps, steps)
    verdict = loader.stats()  # the last fed epoch's own reading of what limited it
    calls = fetch.stats.device_decode_calls
    decode_s = fetch.stats.device_decode_ns / 1e9
    queue.put(
        {
            "decode": args["decode"],
            "device_prefetch": "default"
            if args["device_prefetch"] is None
            else args["device_prefetch"],
            "read_ahead": args["read_ahead"],
            "across": args["across"],
            "shuffle": args["shuffle"],
            "blocks_per_decode_call": fetch.stats.blocks_fetched / calls if calls else None,
            "chunks_per_decode_call": fetch.stats.chunks_read / calls if calls else None,
            # the loader's own GPU decode rate (staging, copy, decode, wait), over every
            # epoch the node ran, to hold against nvCOMP's rate at that call size
            "in_loader_decode_GBps": fetch.stats.bytes_decoded / decode_s / GB
            if decode_s
            else None,
            "steps": steps,
            "compute_ms_per_step": 1e3 * compute_s / steps,
            "fed_ms_per_step": 1e3 * fed_s / steps,
            "batches_per_s": steps / fed_s,
            "loader_only_ms_per_batch": 1e3 * loader_s / steps,
            "host_in_next_ms_per_step": 1e3 * waiting_s / steps,
            "width": args["width"],
            "threads": args["decode_threads"] or "default",
            "data_stall": max(0.0, 1 - compute_s / fed_s),
            "peak_rss_growth_MB": _peak_rss_mb() - rss_before,
            "peak_device_MB": torch.cuda.max_memory_allocated() / 2**20,
            "params_M": sum(
                p.numel()
                for p in SmallConvNet(
                    len(ERA5_VARIABLES), args["width"], args["depth"]
                ).parameters()
            )
            / 1e6,
            "steps_per_chunk": args["steps_per_chunk"],
            "limiting_stage": verdict.get("limiting_stage"),
            "loader_stall_own_view": verdict.get("data_stall_fraction"),
        }
    )


def train_runs(steps_per_chunk: int, args: argparse.Namespace) -> list[tuple[Any, ...]]:
    """(width, decode, threads, prefetch, read-ahead, across, shuffle) for one store. The
    full set at 24 steps per chunk, at the defaults (the chunk-pool shuffle) and, for the
    widest model, with the block shuffle beside it; at 1 step per chunk the widest model
    with each decode, reading across epochs or not (the comparisons that store adds)."""
    default = args.decode_threads
    widest = max(args.widths)
    if steps_per_chunk == 1:
        return [
            (widest, d, default, None, 8 if d == "gpu" else 2, a, "pool")
            for a in (False, True)
            for d in ("cpu", "gpu")
        ]
    runs = [(w, d, default, None, 2, False, "pool") for w in args.widths for d in ("cpu", "gpu")]
    # the block shuffle, the order before the pool, on the same store
    runs += [(widest, d, default, None, 2, False, "block") for d in ("cpu", "gpu")]
    # no prefetch: the gather and the copy on the training thread, as before the producer
    runs += [(widest, "cpu", default, 0, 2, False, "pool")]
    # deeper read-ahead: more blocks decoded per nvCOMP call
    runs += [(widest, "gpu", default, None, 8, False, "pool")]
    # the next epoch's first blocks read while this one ends
    runs += [
        (widest, "cpu", default, None, 2, True, "pool"),
        (widest, "gpu", default, None, 8, True, "pool"),
    ]
    return runs


def train(path: str, steps_per_chunk: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    results = []
    for width, decode, threads, prefetch, read_ahead, across, shuffle in train_runs(
        steps_per_chunk, args
    ):
        queue = context.Queue()
        process = context.Process(
            target=_train_run,
            args=(
                {
                    "path": path,
                    "samples": args.time_steps,
                    "steps_per_chunk": steps_per_chunk,
                    "decode": decode,
                    "batch_size": args.batch_size,
                    "epochs": args.epochs,
                    "width": width,
                    "decode_threads": threads,
                    "device_prefetch": prefetch,
                    "read_ahead": read_ahead,
                    "across": across,
                    "shuffle": shuffle,
                    "depth": args.depth,
                },
                queue,
            ),
        )
        process.start()
        results.append({"decode": decode, **_result_of(process, queue)})
        process.join()
        print(_train_row(results[-1]), flush=True)
        _save(args, results)
    return results


def _result_of(process: Any, queue: Any) -> dict[str, Any]:
    """The child's result, or an error row if it died without one (never wait forever)."""
    import queue as queues

    while True:
        try:
            return queue.get(timeout=5)
        except queues.Empty:
            if not process.is_alive():
                return {"error": f"the run died (exit code {process.exitcode})"}


def _chunk_bytes(path: Path) -> list[bytes]:
    return [
        file.read_bytes()
        for name in ERA5_VARIABLES
        for file in sorted((path / name / "c").rglob("*"))
        if file.is_file()
    ]


def decode_throughput(path: Path, raw_chunk_nbytes: int) -> dict[str, float]:
    import numcodecs

    chunks = _chunk_bytes(path)
    decoded = len(chunks) * raw_chunk_nbytes
    codec = numcodecs.Zstd()
    workers = os.cpu_count() or 1
    outs = [np.empty(raw_chunk_nbytes, dtype=np.uint8) for _ in range(workers)]

    def decode_share(worker: int) -> None:
        for data in chunks[worker::workers]:
            codec.decode(data, out=outs[worker])

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(decode_share, range(workers)))  # warm
        start = time.perf_counter()
        list(pool.map(decode_share, range(workers)))
        cpu_s = time.perf_counter() - start
    result = {"chunks": len(chunks), "cpu_threads": workers, "cpu_GBps": decoded / cpu_s / GB}

    from insitubatch_nodes.device.gpu_codecs import load_nvcomp

    nvcomp = load_nvcomp()
    if nvcomp is None:
        return result
    stream = torch.cuda.Stream()
    codec_gpu = nvcomp.Codec(
        algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, cuda_stream=stream.cuda_stream
    )
    on_device = [torch.frombuffer(bytearray(c), dtype=torch.uint8).cuda() for c in chunks]
    torch.cuda.synchronize()
    for per_call in sorted({4, 8, 16, 32, 64, 128, len(on_device)}):
        with torch.cuda.stream(stream):
            for _ in range(2):  # first round warms up
                start = time.perf_counter()
                for i in range(0, len(on_device), per_call):
                    batch = nvcomp.as_arrays(
                        on_device[i : i + per_call], cuda_stream=stream.cuda_stream
                    )
                    out = codec_gpu.decode(batch)
                    stream.synchronize()
                    del out
                gpu_s = time.perf_counter() - start
        result[f"gpu_GBps_{per_call}_per_call"] = decoded / gpu_s / GB
    result["gpu_GBps"] = max(v for k, v in result.items() if k.startswith("gpu_GBps_"))
    result["gpu_over_cpu"] = result["gpu_GBps"] / result["cpu_GBps"]
    return result


_REPORT: dict[str, Any] = {}


def _save(args: argparse.Namespace, rows: list[dict[str, Any]] | None = None) -> None:
    """Write what is measured so far, so a run cut short still leaves its rows."""
    if rows is not None:
        _REPORT["train"] = [*_REPORT.get("train_done", []), *rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(json.dumps(_REPORT, indent=2))


def _store(args: argparse.Namespace, steps_per_chunk: int) -> Path:
    path = args.store / f"era5-{args.time_steps}-{steps_per_chunk}.zarr"
    if not path.exists():
        write_era5_like(path, time_steps=args.time_steps, steps_per_chunk=steps_per_chunk)
    return path


def _chunk_files(path: Path) -> list[Path]:
    return [
        file
        for name in ERA5_VARIABLES
        for file in sorted((path / name / "c").rglob("*"))
        if file.is_file()
    ]


def _evict(files: list[Path]) -> None:
    """Drop these files' pages from the page cache, so the next read comes from the disk."""
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _kvikio_mode(kvikio: Any) -> str:
    import importlib

    defaults = importlib.import_module("kvikio.defaults")
    for read in (lambda: defaults.get("compat_mode"), lambda: defaults.compat_mode()):
        try:
            return str(read())
        except Exception:
            continue
    return "unknown"


def file_to_device(path: Path) -> dict[str, Any]:
    """The stored (compressed) bytes of every chunk file into device memory: a host read
    into pinned memory plus one copy each, against kvikio's reads (GPUDirect Storage where
    the machine has it, else kvikio's own host path), from the page cache and from disk."""
    files = _chunk_files(path)
    sizes = [f.stat().st_size for f in files]
    total = sum(sizes)
    result: dict[str, Any] = {"files": len(files), "MB": total / 1e6}
    pinned = torch.empty(max(sizes), dtype=torch.uint8).pin_memory()
    device = torch.empty(total, dtype=torch.uint8, device="cuda")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()

    def host_then_copy() -> float:
        start = time.perf_counter()
        view = pinned.numpy()
        for file, size, offset in zip(files, sizes, offsets, strict=True):
            with open(file, "rb", buffering=0) as f:
                f.readinto(memoryview(view)[:size])
            device[offset : offset + size].copy_(pinned[:size])  # synchronous: the slot is reused
        torch.cuda.synchronize()
        return total / (time.perf_counter() - start) / GB

    host_then_copy()
    result["host_pinned_copy_cached_GBps"] = host_then_copy()
    _evict(files)
    result["host_pinned_copy_disk_GBps"] = host_then_copy()
    try:
        import kvikio
    except ImportError as err:
        result["kvikio"] = f"not installed ({err})"
        return result
    result["kvikio"] = f"{kvikio.__version__}, compat_mode={_kvikio_mode(kvikio)}"

    def kvikio_reads() -> float:
        start = time.perf_counter()
        handles = [kvikio.CuFile(file, "r") for file in files]
        futures = [
            handle.pread(device[offset : offset + size])
            for handle, size, offset in zip(handles, sizes, offsets, strict=True)
        ]
        for future in futures:
            future.get()
        for handle in handles:
            handle.close()
        torch.cuda.synchronize()
        return total / (time.perf_counter() - start) / GB

    try:
        kvikio_reads()
        result["kvikio_cached_GBps"] = kvikio_reads()
        _evict(files)
        result["kvikio_disk_GBps"] = kvikio_reads()
    except Exception as err:  # a machine without GDS or cuFile: say so, keep the rest
        result["kvikio_error"] = repr(err)[:300]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-steps", type=int, default=1460)
    parser.add_argument(
        "--steps-per-chunk",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[24, 1],
        help="one store per entry, comma-separated",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--widths", type=lambda text: [int(w) for w in text.split(",")], default=[64, 128]
    )
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--decode-threads", type=int, default=None)
    parser.add_argument("--skip", default="", help="comma-separated: h2d, decode, files, train")
    parser.add_argument("--store", type=Path, default=Path("/tmp/insitubatch-gpu-bench"))
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu needs a CUDA device")
    report = _REPORT
    report.update(
        {
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "store": {
                "time_steps": args.time_steps,
                "steps_per_chunk": args.steps_per_chunk,
                "grid": ERA5_GRID,
                "variables": len(ERA5_VARIABLES),
            },
            "model": {"widths": args.widths, "depth": args.depth, "batch_size": args.batch_size},
        }
    )
    stores = {n: _store(args, n) for n in args.steps_per_chunk}
    first = args.steps_per_chunk[0]
    if "h2d" not in skip:
        report["h2d"] = h2d(args.batch_size)
        print(json.dumps({"h2d": report["h2d"]}), flush=True)
    raw_chunk = first * ERA5_GRID[0] * ERA5_GRID[1] * 4
    if "decode" not in skip:
        report["decode"] = decode_throughput(stores[first], raw_chunk)
        print(json.dumps({"decode": report["decode"]}), flush=True)
    if "files" not in skip:
        try:
            report["files"] = file_to_device(stores[first])
        except Exception as err:  # a measurement of an option: never the end of the run
            report["files"] = {"files": 0, "MB": 0.0, "error": repr(err)[:300]}
        print(json.dumps({"files": report["files"]}), flush=True)
    _save(args)
    if "train" not in skip:
        for steps_per_chunk, path in stores.items():
            rows = train(str(path), steps_per_chunk, args)
            report["train_done"] = [*report.get("train_done", []), *rows]
        report["train"] = report.pop("train_done", [])
    _save(args)
    print(render(report))


def render(report: dict[str, Any]) -> str:
    lines = [
        f"## {report['device']}, torch {report['torch']}",
        f"store: {report['store']}; model: {report['model']}",
    ]
    if "h2d" in report:
        h = report["h2d"]
        lines += [
            "",
            f"### Host to device, batch of {h['batch_MB']:.1f} MB",
            "| path | GB/s | of pinned peak |",
            "|---|---:|---:|",
            f"| pageable | {h['pageable_GBps']:.1f} | {h['pageable_over_peak']:.0%} |",
            f"| pinned | {h['pinned_GBps']:.1f} | {h['pinned_over_peak']:.0%} |",
            f"| staging ring (pack + copy) | {h['ring_GBps']:.1f} | {h['ring_over_peak']:.0%} |",
            f"| staging ring (staged in place + copy) | {h['ring_staged_GBps']:.1f} | "
            f"{h['ring_staged_over_peak']:.0%} |",
            f"| pinned peak (512 MiB) | {h['pinned_peak_GBps']:.1f} | 100% |",
        ]
    if "decode" in report:
        d = report["decode"]
        lines += [
            "",
            f"### Decode of all {d['chunks']} chunks, bytes in memory (GB/s decoded)",
            f"CPU numcodecs, {d['cpu_threads']} threads: {d['cpu_GBps']:.2f}",
        ]
        if "gpu_GBps" in d:
            for key, value in d.items():
                if key.startswith("gpu_GBps_"):
                    per_call = key.removeprefix("gpu_GBps_").removesuffix("_per_call")
                    lines.append(f"GPU nvCOMP, {per_call} chunks per call: {value:.2f}")
            lines.append(f"best GPU over CPU: {d['gpu_over_cpu']:.2f}x")
        else:
            lines.append("GPU nvCOMP: not installed")
    if "files" in report:
        f = report["files"]
        lines += ["", f"### Stored bytes to device memory: {f['files']} files, {f['MB']:.0f} MB"]
        lines += [
            f"{key}: {value:.2f}" if isinstance(value, float) else f"{key}: {value}"
            for key, value in f.items()
            if key not in ("files", "MB")
        ]
    lines += [
        "",
        "### Training step fed by the loader",
        "| steps/chunk | width | shuffle | decode | threads | prefetch | read-ahead | across "
        "| blocks/call | chunks/call | in-loader decode GB/s | steps | compute ms/step "
        "| loader-only ms/batch | fed ms/step | in next() ms/step | batches/s | data stall "
        "| loader's verdict | peak RSS growth MB | peak device MB |",
        "|---:|---:|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---|---:|---:|",
    ]
    lines += [_train_row(t) for t in report.get("train", [])]
    return "\n".join(lines)


def _train_row(t: dict[str, Any]) -> str:
    if "error" in t:
        return f"| | | {t.get('decode', '?')} | {t['error']} |"

    def number(key: str, form: str) -> str:
        value = t.get(key)
        return "" if value is None else format(value, form)

    return (
        f"| {t['steps_per_chunk']} | {t['width']} | {t.get('shuffle', 'block')} | "
        f"{t['decode']} | {t['threads']} | "
        f"{t['device_prefetch']} | {t['read_ahead']} | {'yes' if t['across'] else 'no'} | "
        f"{number('blocks_per_decode_call', '.2f')} | {number('chunks_per_decode_call', '.1f')} | "
        f"{number('in_loader_decode_GBps', '.2f')} | {t['steps']} | "
        f"{t['compute_ms_per_step']:.2f} | "
        f"{t['loader_only_ms_per_batch']:.2f} | {t['fed_ms_per_step']:.2f} | "
        f"{t['host_in_next_ms_per_step']:.2f} | {t['batches_per_s']:.1f} | {t['data_stall']:.1%} | "
        f"{t['limiting_stage']} | {t['peak_rss_growth_MB']:.0f} | {t['peak_device_MB']:.0f} |"
    )


if __name__ == "__main__":
    main()
