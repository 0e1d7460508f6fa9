"""The training loop both recipes share: N steps, checkpoints holding model, optimiser AND
loader state, exact resume, and one line per step with a hash of the batch it trained on.

The per-step line is the resume check: a run killed after step k and restarted with
`--resume` prints, for steps k+1 .. N, the same batch hashes (and losses) as a run that
was never interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from insitubatch_nodes import SAMPLE_INDEX_KEY, AsyncFetchNode, Loader
from insitubatch_nodes.loader import graph_nodes

LossFn = Callable[[torch.nn.Module, Mapping[str, torch.Tensor]], torch.Tensor]


def add_run_arguments(parser: argparse.ArgumentParser, steps: int) -> None:
    parser.add_argument("--steps", type=int, default=steps, help="optimiser steps in all")
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--block-chunks", type=int, default=4)
    parser.add_argument(
        "--step-delay", type=float, default=0.0, help="sleep after each step (to kill mid-run)"
    )


@dataclass(frozen=True)
class Distributed:
    rank: int
    world_size: int


def start_distributed() -> Distributed:
    """gloo on CPU under torchrun (WORLD_SIZE > 1), else a single process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("gloo")
    if dist.is_initialized():
        return Distributed(dist.get_rank(), dist.get_world_size())
    return Distributed(0, 1)


def stop_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


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


def train(
    *,
    loader: Loader[dict[str, torch.Tensor]],
    model: torch.nn.Module,
    optimiser: torch.optim.Optimizer,
    loss_fn: LossFn,
    args: argparse.Namespace,
    workdir: Path,
    where: Distributed,
) -> dict[str, Any]:
    tag = f"[rank {where.rank}]"
    checkpoint = workdir / f"checkpoint-rank{where.rank}.pt"
    step = 0
    if args.resume:
        if not checkpoint.exists():
            raise SystemExit(f"{tag} --resume: no checkpoint at {checkpoint}")
        saved = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(saved["model"])
        optimiser.load_state_dict(saved["optimiser"])
        loader.load_state_dict(saved["loader"])
        step = int(saved["step"])
        print(f"{tag} resumed from {checkpoint.name} at step {step}", flush=True)
    samples = 0
    anchors: list[int] = []
    started = time.perf_counter()
    while step < args.steps:
        before = step
        for batch in loader:
            model.train()
            loss = loss_fn(model, batch)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            step += 1
            index = batch[SAMPLE_INDEX_KEY].tolist()
            samples += len(index)
            anchors.extend(index)
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
    return {"steps": step, "samples": samples, "anchors": anchors}
