"""Lightning runs in processes of their own, started by tests/end_to_end/test_lightning.py
as a user starts a training script:
`python tests/helpers/lightning_run.py MODE --store URL --workdir DIR`. Each rank writes
what it trained and validated on to `DIR/NAME-rank{r}.json`.

`ddp`: two processes (gloo, CPU); Lightning's launcher starts rank 1 by running this
script again.
1. `straight`: the loaders are built before the Trainer, so before any process group
   exists, and passed to `Trainer.fit`; checkpoints every 3 steps and at epoch ends.
2. `mid`, `end`: a fresh model and Trainer resume from the checkpoint of step 3 (mid
   epoch) and from the one of the first epoch's end, the loaders built in a
   `LightningDataModule`.

`killed`: one process trains with a checkpoint every 3 steps and is killed (SIGKILL,
nothing cleaned up) as step `--kill-at` + 1 begins, so the checkpoint of step `--kill-at`
is the last one written (`killed`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

import lightning as L

from tests.helpers.lightning_model import Recorder, ZarrData, make_trainer, train_loader, val_loader


class KillAt(L.Callback):
    """Kills the process as step `step` + 1 begins (its batch fetched, nothing trained).

    Args:
        step: the last step that runs to its end.
        workdir: where the trained batches are written first.
    """

    def __init__(self, step: int, workdir: Path) -> None:
        self.step = step
        self.workdir = workdir

    def on_train_batch_start(self, trainer: L.Trainer, model: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            _dump(self.workdir, "killed", trainer.global_rank, model)
            os.kill(os.getpid(), signal.SIGKILL)


def _dump(workdir: Path, name: str, rank: int, model: Recorder) -> None:
    record = {"trained": model.trained, "validated": model.validated}
    (workdir / f"{name}-rank{rank}.json").write_text(json.dumps(record))


def ddp(args: argparse.Namespace) -> None:
    checkpoints = args.workdir / "checkpoints"
    on_two = {"devices": 2, "strategy": "ddp"}
    train, val = train_loader(args.store), val_loader(args.store)  # no process group yet
    model = Recorder(args.features)
    trainer = make_trainer(checkpoints, max_epochs=args.epochs, **on_two)
    trainer.fit(model, train_dataloaders=train, val_dataloaders=val)
    _dump(args.workdir, "straight", trainer.global_rank, model)
    resumes = {"mid": "steps/step=3.ckpt", "end": f"epochs/step={len(train)}.ckpt"}
    for name, checkpoint in resumes.items():
        model = Recorder(args.features)
        trainer = make_trainer(None, max_epochs=args.epochs, **on_two)
        trainer.fit(model, datamodule=ZarrData(args.store), ckpt_path=checkpoints / checkpoint)
        _dump(args.workdir, name, trainer.global_rank, model)


def killed(args: argparse.Namespace) -> None:
    model = Recorder(args.features)
    killer = KillAt(args.kill_at, args.workdir)
    trainer = make_trainer(
        args.workdir / "checkpoints", max_epochs=args.epochs, devices=1, callbacks_extra=killer
    )
    trainer.fit(model, train_dataloaders=train_loader(args.store))
    raise SystemExit(f"the run ended before step {args.kill_at + 1}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["ddp", "killed"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--features", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--kill-at", type=int, default=4)
    args = parser.parse_args()
    {"ddp": ddp, "killed": killed}[args.mode](args)


if __name__ == "__main__":
    main()
