"""A Lightning model and data module that record which samples each step trained and each
validation saw, shared by the single-process tests and the 2-process DDP script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

import insitubatch_nodes as ib

TRAIN_BATCH = 6
VAL_BATCH = 6
SEED = 3


def train_loader(url: str) -> ib.Loader[Any]:
    """The training loader, as a user writes it for Lightning."""
    return ib.build_loader(
        url, split="all", batch_size=TRAIN_BATCH, seed=SEED, all_ranks_state=True
    )


def val_loader(url: str) -> ib.Loader[Any]:
    """The validation loader: evaluation mode."""
    return ib.build_loader(url, split="all", batch_size=VAL_BATCH, evaluation=True)


class Recorder(L.LightningModule):
    """A linear model over `t2m` that records every batch's `sample_index`: per training
    step (epoch, batch index, indices) and per validation batch (validation run, indices).

    Args:
        features: values per sample of `t2m`.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(features, 1)
        self.trained: list[tuple[int, int, list[int]]] = []
        self.validated: list[tuple[int, list[int]]] = []
        self.validations = 0

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        indices = [int(i) for i in batch["sample_index"]]
        self.trained.append((self.current_epoch, batch_idx, indices))
        return self.linear(batch["t2m"].flatten(1)).pow(2).mean()

    def on_validation_epoch_start(self) -> None:
        self.validations += 1

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.validated.append((self.validations, [int(i) for i in batch["sample_index"]]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class ZarrData(L.LightningDataModule):
    """The loaders built inside the data module's hooks (after Lightning set up its ranks).

    Args:
        url: the store.
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def train_dataloader(self) -> ib.Loader[Any]:
        return train_loader(self.url)

    def val_dataloader(self) -> ib.Loader[Any]:
        return val_loader(self.url)


def make_trainer(
    checkpoints: Path | None,
    *,
    max_epochs: int,
    every_n_steps: int = 3,
    at_validation_end: bool = False,
    callbacks_extra: L.Callback | None = None,
    **kwargs: Any,
) -> L.Trainer:
    """A quiet CPU trainer; with `checkpoints`, one that keeps a checkpoint every
    `every_n_steps` steps (`steps/step=N.ckpt`) and one at each epoch's end
    (`epochs/step=N.ckpt`), or instead, `at_validation_end`, one after each validation
    (`validation/step=N.ckpt`: `ModelCheckpoint`'s default when there is validation), as
    `ModelCheckpoint` writes them.

    Args:
        checkpoints: where to write checkpoints, or None for none.
        max_epochs: epochs to train.
        every_n_steps: steps between checkpoints.
        at_validation_end: keep a checkpoint after each validation, not at epoch ends.
        callbacks_extra: one more callback.
        kwargs: more `Trainer` settings.
    """
    callbacks: list[L.Callback] = []
    if checkpoints is not None:
        ends = (
            ModelCheckpoint(dirpath=checkpoints / "validation", filename="{step}", save_top_k=-1)
            if at_validation_end
            else ModelCheckpoint(
                dirpath=checkpoints / "epochs",
                filename="{step}",
                save_on_train_epoch_end=True,
                save_top_k=-1,
            )
        )
        callbacks = [
            ModelCheckpoint(
                dirpath=checkpoints / "steps",
                filename="{step}",
                every_n_train_steps=every_n_steps,
                save_top_k=-1,
            ),
            ends,
        ]
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "max_epochs": max_epochs,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": checkpoints is not None,
        "callbacks": callbacks + ([callbacks_extra] if callbacks_extra else []),
        "num_sanity_val_steps": 0,
    }
    return L.Trainer(**{**settings, **kwargs})
