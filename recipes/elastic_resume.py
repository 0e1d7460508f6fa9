"""Elastic resume under torchrun: a run checkpointed on W processes resumes on W' and still
sees every sample of the epoch once.

    torchrun --nproc_per_node 2 recipes/elastic_resume.py --workdir /tmp/elastic \\
        --steps 3 --save /tmp/elastic/two.pt                      # 3 steps on 2 ranks, save
    torchrun --nproc_per_node 1 recipes/elastic_resume.py --workdir /tmp/elastic \\
        --resume /tmp/elastic/two.pt                              # the rest on 1 rank
    torchrun --nproc_per_node 3 recipes/elastic_resume.py --workdir /tmp/elastic \\
        --resume /tmp/elastic/two.pt                              # or on 3

A small model trains with DDP (gloo, CPU) on a synthetic Zarr store written once into the
workdir. The loader uses the pool shuffle and `all_ranks_state=True`, so that
`loader.state_dict()` gathers every rank's state into one object, which rank 0 saves (with
the model and the samples seen so far, kept only for the check below). On resume every
process loads that one object: a loader whose world size differs from the number of
states saved resumes this rank's share of the rest of the epoch. A run without `--save`
goes to the epoch's end, prints each rank's sample count, and checks that the samples
seen before the checkpoint(s) and after are the epoch's samples, each once, but for the
documented padding (ranks yield equal counts; a rank short of samples repeats some).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import zarr

import insitubatch_nodes as ib

SAMPLES, BATCH, SEED = 203, 8, 11


def write_store(folder: Path) -> str:
    """A small store (one variable, 4 time steps a chunk), written once by rank 0."""
    path = folder / "store.zarr"
    if dist.get_rank() == 0 and not path.exists():
        group = zarr.open_group(str(path), mode="w")
        values = np.arange(SAMPLES * 16, dtype=np.float32).reshape(SAMPLES, 4, 4)
        group.create_array("t2m", data=values, chunks=(4, 4, 4), dimension_names=("time", "y", "x"))
    dist.barrier()
    return f"file://{path}"


def run(args: argparse.Namespace) -> None:
    """Train (and save, or check the union) on this rank; see the module."""
    rank, world = dist.get_rank(), dist.get_world_size()
    args.workdir.mkdir(parents=True, exist_ok=True)
    url = write_store(args.workdir)
    loader = ib.build_loader(
        url,
        variables=["t2m"],
        split="all",
        batch_size=BATCH,
        shuffle="pool",
        seed=SEED,
        device="cpu",
        all_ranks_state=True,
    )
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimiser = torch.optim.SGD(model.parameters(), lr=1e-6)
    seen_before: list[int] = []
    if args.resume is not None:
        checkpoint: dict[str, Any] = torch.load(args.resume, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        loader.load_state_dict(checkpoint["loader"])  # every rank, the same object
        seen_before = checkpoint["seen"]
    seen: list[int] = []
    for step, batch in enumerate(loader):
        x = batch["t2m"].reshape(batch["t2m"].shape[0], -1)
        loss = model(x).pow(2).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        seen += batch["sample_index"].tolist()
        if args.save is not None and step + 1 == args.steps:
            break
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, seen)
    seen_now = seen_before + [i for part in everyone for i in part]
    if args.save is not None:
        state = loader.state_dict()  # a collective call: every rank's state, gathered
        if rank == 0:
            torch.save({"model": model.state_dict(), "loader": state, "seen": seen_now}, args.save)
            print(f"saved after {args.steps} steps on {world} rank(s): {args.save}")
    elif rank == 0:
        counts = Counter(seen_now)
        missing = sorted(set(range(SAMPLES)) - set(counts))
        repeated = sum(c - 1 for c in counts.values())
        print(f"samples per rank after the resume: {[len(part) for part in everyone]}")
        print(f"before: {len(seen_before)}, after: {len(seen_now) - len(seen_before)}")
        print(
            f"distinct samples: {len(counts)} of {SAMPLES}, missing: {missing}, "
            f"repeated (padding): {repeated}"
        )
        assert not missing and len({len(part) for part in everyone}) == 1
        print("union check: every sample of the epoch seen")
    loader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--steps", type=int, help="steps before saving (with --save)")
    parser.add_argument("--save", type=Path, help="save a checkpoint after --steps and stop")
    parser.add_argument("--resume", type=Path, help="the checkpoint to resume")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        run(args)  # the DDP model and the loader are gone when it returns
        dist.barrier()
    finally:
        # Left to interpreter exit, gloo's threads can abort the process ("terminate
        # called without an active exception"): end the group here, on every rank.
        dist.destroy_process_group()
    # Even so, one run in CI aborted a rank that way after its work was done: gloo's
    # worker threads can still hold work objects that reference Python tensors, and the
    # interpreter's finalization frees them without the GIL (pytorch/pytorch#190489).
    # Everything is written and checked by now, so leave without finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
