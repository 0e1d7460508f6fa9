"""A Hugging Face accelerate training loop over the loader, as the docs write it: the
loader registered for checkpointing, `save_state` every few steps, `load_state` to resume,
and no `skip_first_batches`. tests/end_to_end/test_accelerate.py runs `train` in its own
process, and this script under `torchrun --nproc_per_node 2` (gloo, CPU):

    torchrun --standalone --nproc_per_node 2 tests/helpers/accelerate_run.py --store URL \\
        --workdir DIR

which trains two epochs straight (`straight`), saving at step 3 (mid epoch) and at the first
epoch's end, then resumes from each with a fresh model and loader (`mid`, `end`). Each rank
writes the sample indices it trained on to `DIR/NAME-rank{r}.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

import insitubatch_nodes as ib

BATCH = 8
SEED = 5


class Progress:
    """The steps taken, saved with the rest (accelerate saves what has `state_dict`)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def train(
    url: str,
    epochs: int,
    *,
    saves: dict[int, Path] | None = None,
    resume: Path | None = None,
) -> list[list[int]]:
    """Train for `epochs` epochs' worth of steps with a fresh accelerator, model and loader,
    as a new run of a script does, saving the state at the steps `saves` names into their
    directories, or first resuming from `resume`; the sample indices of every batch
    trained on, in order.

    Args:
        url: the store.
        epochs: how many epochs of steps the whole run takes.
        saves: step -> directory for `save_state`.
        resume: a directory `save_state` wrote, to resume from.
    """
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(12, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    # Built after the Accelerator, so rank and world size are its process group's.
    loader = ib.build_loader(url, split="all", batch_size=BATCH, seed=SEED, all_ranks_state=True)
    progress = Progress()
    accelerator.register_for_checkpointing(loader, progress)
    if resume is not None:
        accelerator.load_state(str(resume))
    trained: list[list[int]] = []
    total = epochs * len(loader)
    while progress.step < total:
        for batch in loader:
            loss = model(batch["t2m"].flatten(1)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            trained.append(batch["sample_index"].tolist())
            progress.step += 1
            if saves and progress.step in saves:
                accelerator.save_state(str(saves[progress.step]))
            if progress.step >= total:
                break
    return trained


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)  # starts the process group (gloo)
    rank = accelerator.process_index
    per_epoch = len(ib.build_loader(args.store, split="all", batch_size=BATCH))
    saves = {3: args.workdir / "mid", per_epoch: args.workdir / "end"}
    runs: dict[str, Any] = {"straight": train(args.store, 2, saves=saves)}
    for name, step in (("mid", 3), ("end", per_epoch)):
        runs[name] = train(args.store, 2, resume=saves[step])
    for name, trained in runs.items():
        out = args.workdir / f"{name}-rank{rank}.json"
        out.write_text(json.dumps(trained))
    # Left to interpreter exit, gloo's threads can abort the process ("terminate called
    # without an active exception", exit -6): end the group while every rank is here.
    accelerator.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
