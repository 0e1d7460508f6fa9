"""What both recipes share: their common arguments, the data (an archive, or a synthetic
look-alike written once), the manifest and statistics pass, the model, and the training
loop: N steps, checkpoints holding model, optimiser AND loader state, exact resume, and
one line per step with a hash of the batch it trained on. A recipe keeps only what is its
own: the archive it mimics, the sample spec and the loader options.

The per-step line is the resume check: a run killed after step k and restarted with
`--resume` prints, for steps k+1 .. N, the same batch hashes (and losses) as a run that
was never interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import insitubatch_nodes as ib
from insitubatch_nodes import SAMPLE_INDEX_KEY, AsyncFetchNode, Loader
from insitubatch_nodes.cli.split_command import split_text
from insitubatch_nodes.core.manifest import DEFAULT_FRACTIONS
from insitubatch_nodes.core.settings import int_from_environment
from insitubatch_nodes.nodes.graph import graph_nodes

Options = dict[str, object] | None  # storage_options of the store, None for local files


def recipe_parser(
    name: str,
    description: str,
    *,
    time_steps: int,
    step: str,
    grid: Sequence[int],
    hidden: int,
) -> argparse.ArgumentParser:
    """The arguments every recipe takes (data, work directory, unit, model width, run);
    the recipe adds its own. Work goes to ~/.cache/insitubatch-nodes/recipes/`name`."""
    workdir = Path.home() / ".cache" / "insitubatch-nodes" / "recipes" / name
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=None, help="a real archive instead of the look-alike")
    parser.add_argument("--workdir", type=Path, default=workdir)
    parser.add_argument(
        "--time-steps", type=int, default=time_steps, help=f"look-alike length ({step})"
    )
    parser.add_argument("--grid", type=int, nargs=2, default=list(grid), help="look-alike grid")
    parser.add_argument("--unit-steps", type=int, default=4, help="steps per shuffled unit")
    parser.add_argument("--hidden", type=int, default=hidden, help="width of the conv net")
    parser.add_argument("--steps", type=int, default=20, help="optimiser steps in all")
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--block-chunks", type=int, default=4)
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where the model trains and batches arrive (auto: a GPU when there is one; "
        "under torchrun each rank takes the GPU of its LOCAL_RANK)",
    )
    parser.add_argument(
        "--decode",
        choices=["cpu", "gpu"],
        default="cpu",
        help="gpu: decode chunks on the GPU (the `gpu` extra; needs --device cuda)",
    )
    parser.add_argument(
        "--step-delay", type=float, default=0.0, help="sleep after each step (to kill mid-run)"
    )
    return parser


@dataclass(frozen=True)
class Distributed:
    rank: int
    world_size: int
    device: torch.device


def _device(choice: str) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device here; pass --device cpu")
    local_rank = int_from_environment(os.environ, "LOCAL_RANK", 0)
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def distributed(args: argparse.Namespace) -> Iterator[Distributed]:
    """The device of this process (--device), and under torchrun (WORLD_SIZE > 1) the
    process group: nccl on GPUs, gloo on CPUs; else a single process. The group is torn
    down however the block ends, so a rank that raises does not leave the others waiting
    on a group nobody will destroy."""
    device = _device(args.device)
    world_size = int_from_environment(os.environ, "WORLD_SIZE", 1)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        if dist.is_initialized():
            yield Distributed(dist.get_rank(), dist.get_world_size(), device)
        else:
            yield Distributed(0, 1, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP wrapper: for work one rank does alone (evaluation), where
    the wrapper's collective calls would wait for ranks that are not there."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


def batch_hash(batch: Mapping[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(batch):
        digest.update(name.encode())
        digest.update(batch[name].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _save(path: Path, state: dict[str, Any]) -> None:
    staging = path.with_name(path.name + ".partial")
    torch.save(state, staging)
    os.replace(staging, path)  # a kill mid-write leaves the previous checkpoint intact


@dataclass(frozen=True)
class Data:
    """A recipe's store, ready to load: where it is, how to reach it, its manifest and
    the per-channel stats of its train split."""

    url: str | list[str]  # a list: stores read as one (a join)
    options: Options
    manifest: Path
    stats: Path
    device: torch.device
    levels: list[int] | None = None  # pressure levels kept, by value (all: None)

    def loader(
        self, args: argparse.Namespace, split: str, spec: ib.SampleSpec, **more: Any
    ) -> Loader[dict[str, torch.Tensor]]:
        """The recipes' loader over `split`: channels stacked and normalised, --seed,
        --block-chunks and --decode, batches on this rank's device; `more` is passed on."""
        return ib.build_loader(
            self.url,
            split=split,
            spec=spec,
            stack=True,
            normalise=self.stats,
            manifest=self.manifest,
            block_chunks=args.block_chunks,
            seed=args.seed,
            device=self.device,
            decode=args.decode,
            storage_options=self.options,
            levels=self.levels,
            **more,
        )


def open_data(
    args: argparse.Namespace,
    where: Distributed,
    variables: list[str],
    *,
    look_alike: tuple[str, Callable[[Path], None]],
    archive_options: dict[str, object],
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    date_splits: Mapping[str, tuple[str, str]] | None = None,
    levels: list[int] | None = None,
    stats: Path | None = None,
    widen_unit: bool = False,
    joined: Sequence[str] = (),
) -> Data:
    """The archive at --url (read anonymously with `archive_options`), or else the
    look-alike store (`look_alike`: its file name in --workdir and the function that
    writes it there), with its manifest (units of --unit-steps) and the stats of its
    train split beside it (or the precomputed `stats`). Whatever is missing is made
    once, by rank 0; a barrier then keeps the other ranks from opening it before it
    exists.

    `date_splits` cuts the manifest by dates of the store's time coordinate (split name
    -> (first, last)) instead of `fractions`, and prints what each split holds; `levels`
    keeps those pressure levels (by value) in the statistics and the loaders.

    `widen_unit` takes the arrays' own unit instead where it is longer than --unit-steps
    (a time axis chunked by many steps); without it such a unit is refused.

    `joined` names the stores the look-alike's writer makes inside its folder, read as
    one source (`build_loader(source=[...])`); empty for one store."""
    url: str | list[str]
    if args.url is not None:
        url, options = args.url, archive_options
    else:
        name, write = look_alike
        store = args.workdir / name
        written = store / joined[-1] / ".zgroup" if joined else store / ".zgroup"
        if where.rank == 0 and not written.exists():
            args.workdir.mkdir(parents=True, exist_ok=True)
            write(store)
            print(f"wrote {store}", flush=True)
        url = [str(store / part) for part in joined] if joined else str(store)
        options = None
    manifest_path = args.workdir / "manifest.json"
    stats_file = stats or ib.stats_path(manifest_path)
    if where.rank == 0 and not manifest_path.exists():
        args.workdir.mkdir(parents=True, exist_ok=True)
        source = ib.open_source(url, variables, storage_options=options)
        unit = args.unit_steps
        if widen_unit:
            unit = max(unit, source.geometry.unit_length)
        geometry = ib.SampleGeometry.from_layouts(source.layouts, unit_length=unit)
        if date_splits is None:
            manifest = ib.make_manifest(geometry, fractions)
        else:
            manifest = ib.make_date_manifest(geometry, source.time_axis(), date_splits)
            print(split_text(manifest), flush=True)
        manifest_path.write_text(manifest.dumps())
    if where.rank == 0 and not stats_file.exists():
        computed = ib.compute_stats(
            url, variables, manifest=manifest_path, storage_options=options, levels=levels
        )
        computed.save(stats_file)
        print(
            f"stats of {sum(len(c) for c in computed.channels.values())} channels -> "
            f"{stats_file.name}",
            flush=True,
        )
    if dist.is_initialized():
        dist.barrier()
    return Data(url, options, manifest_path, stats_file, where.device, levels)


class ResidualConvNet(torch.nn.Module):
    """`steps` stacked input steps of `channels` in, the next state out: a small conv net
    as a residual on the last input (the recipes exercise the loader, not the model).
    With `predicted` channels fewer than `channels`, the inputs' last channels are inputs
    only (static fields, stacked after the variables) and the state is the first ones."""

    def __init__(
        self, steps: int, channels: int, hidden: int, predicted: int | None = None
    ) -> None:
        super().__init__()
        self.predicted = channels if predicted is None else predicted
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(steps * channels, hidden, 3, padding=1),
            torch.nn.GELU(),
            torch.nn.Conv2d(hidden, self.predicted, 3, padding=1),
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # (B, steps, C, H, W)
        return inputs[:, -1, : self.predicted] + self.net(inputs.flatten(1, 2))


def next_state_loss(model: torch.nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """MSE of the model's output against the first lead of the batch's targets."""
    return torch.nn.functional.mse_loss(model(batch["inputs"]), batch["targets"][:, 0])


def _load(path: Path, tag: str) -> dict[str, Any]:
    if not path.exists():
        raise SystemExit(f"{tag} --resume: no checkpoint at {path}")
    return torch.load(path, weights_only=True, map_location="cpu")


def train(
    loader: Loader[dict[str, torch.Tensor]],
    build_model: Callable[[], torch.nn.Module],
    args: argparse.Namespace,
    where: Distributed,
) -> torch.nn.Module:
    """Build the model under --seed (every rank, and every resumed run, starts from the
    same weights), wrap it for DDP across ranks, train it with Adam for --steps steps in
    all, and return it (wrapped)."""
    torch.manual_seed(args.seed)
    if where.device.type == "cuda":  # the same losses after a resume, not just batches
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    model = build_model().to(where.device)
    if where.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=None if where.device.type == "cpu" else [where.device]
        )
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    tag = f"[rank {where.rank}]"
    checkpoint = args.workdir / f"checkpoint-rank{where.rank}.pt"
    step = 0
    if args.resume:
        saved = _load(checkpoint, tag)
        model.load_state_dict(saved["model"])
        optimiser.load_state_dict(saved["optimiser"])
        loader.load_state_dict(saved["loader"])
        step = int(saved["step"])
        print(f"{tag} resumed from {checkpoint.name} at step {step}", flush=True)
    samples = 0
    started = time.perf_counter()
    while step < args.steps:
        before = step
        for batch in loader:
            model.train()
            loss = next_state_loss(model, batch)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            step += 1
            index = batch[SAMPLE_INDEX_KEY].tolist()
            samples += len(index)
            print(
                f"{tag} step {step:3d} loss {loss.item():.6f} batch {batch_hash(batch)} "
                f"anchors {index}",
                flush=True,
            )
            if step % args.checkpoint_every == 0 or step == args.steps:
                _save(
                    checkpoint,
                    {
                        "model": model.state_dict(),
                        "optimiser": optimiser.state_dict(),
                        "loader": loader.state_dict(),
                        "step": step,
                    },
                )
                print(f"{tag} checkpoint step {step}", flush=True)
            if step >= args.steps:
                break
            time.sleep(args.step_delay)
        if step == before:
            raise SystemExit(f"{tag} an epoch yielded no batch: lower --batch-size")
    elapsed = time.perf_counter() - started
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    reads = fetch.stats.chunks_read
    print(
        f"{tag} done: step {step} of {args.steps}, {samples} samples this run, "
        f"{elapsed:.1f} s, {reads} chunk reads ({reads / max(samples, 1):.2f} per sample, "
        f"read-ahead included)",
        flush=True,
    )
    return model
