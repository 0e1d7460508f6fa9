"""Exact resume under PyTorch Lightning 2.x, one process and two (DDP, gloo on CPU).

What the loader does for Lightning, and what these tests hold it to:
- Lightning's data fetcher pulls one batch ahead of the training step when an iterable has
  no length; `len(loader)` makes it fetch none, so the state Lightning saves with a
  checkpoint is the state after the step's own batch.
- A checkpoint saved at an epoch's end is resumed without the loader's state: Lightning
  moves on to the next epoch and tells the loader so through `sampler.set_epoch`.
- Lightning writes rank 0's checkpoint only: `all_ranks_state=True` puts every rank's state
  in it.
- A loader built before `Trainer.fit` (before Lightning starts its process group) takes
  the process group's rank and world size when Lightning first uses it.

Every checkpoint a run wrote is resumed by a fresh Trainer, model and loader, and what it
trains on is compared batch by batch (sample indices, epoch, batch index) with the rest of
the uninterrupted run; one run is killed with SIGKILL.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

import insitubatch_nodes as ib
from tests.helpers.lightning_model import (
    SEED,
    TRAIN_BATCH,
    VAL_BATCH,
    Recorder,
    ZarrData,
    make_trainer,
    train_loader,
    val_loader,
)
from tests.helpers.paths import HELPERS
from tests.helpers.script_runs import run_script
from tests.helpers.stores import write_store

SAMPLES = 84  # 21 units of 4: 14 batches of 6 on one rank; 44 and 40 samples on two
FEATURES = 12
EPOCHS = 2


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = tmp_path_factory.mktemp("lightning") / "store.zarr"
    return write_store(where, {"t2m": ((SAMPLES, 3, 4), (4, 3, 2), "float32")})[0]


def bare_loop(url: str, epochs: int, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """The training batches' sample indices a plain `for` loop gets, epoch after epoch."""
    loader = ib.build_loader(
        url, split="all", batch_size=TRAIN_BATCH, seed=SEED, rank=rank, world_size=world_size
    )
    return [batch["sample_index"].tolist() for _ in range(epochs) for batch in loader]


def _step_of(checkpoint: Path) -> int:
    return int(checkpoint.stem.removeprefix("step="))


@pytest.mark.parametrize("how", ["straight", "datamodule"])
def test_every_checkpoint_resumes_with_the_batches_the_run_trained_on_next(
    store: str, tmp_path: Path, how: str
) -> None:
    whole = Recorder(FEATURES)
    trainer = make_trainer(
        tmp_path,
        max_epochs=EPOCHS,
        every_n_steps=4,
        at_validation_end=how == "straight",
        val_check_interval=0.5,
    )
    if how == "datamodule":
        trainer.fit(whole, datamodule=ZarrData(store))
    else:
        trainer.fit(whole, train_loader(store), val_loader(store))
    assert [indices for _, _, indices in whole.trained] == bare_loop(store, EPOCHS)
    assert len(whole.trained) == EPOCHS * len(train_loader(store)) == EPOCHS * 14

    checkpoints = sorted(tmp_path.glob("*/*.ckpt"))
    steps = {(c.parent.name, _step_of(c)) for c in checkpoints}
    # inside epochs and at an epoch's last batch (28); and after validations inside epochs
    # and at their ends (straight) or at epoch ends, resumed without the loader's state
    # (datamodule)
    assert {("steps", 4), ("steps", 8), ("steps", 12), ("steps", 16), ("steps", 28)} <= steps
    if how == "straight":
        assert {("validation", 7), ("validation", 14), ("validation", 21)} <= steps
    else:
        assert {("epochs", 14), ("epochs", 28)} <= steps
    for checkpoint in checkpoints:
        model = Recorder(FEATURES)
        resumed = make_trainer(None, max_epochs=EPOCHS, val_check_interval=0.5)
        if how == "datamodule":
            resumed.fit(model, datamodule=ZarrData(store), ckpt_path=checkpoint)
        else:
            resumed.fit(model, train_loader(store), val_loader(store), ckpt_path=checkpoint)
        step = _step_of(checkpoint)
        assert model.trained == whole.trained[step:], f"resumed from {checkpoint}"
        for run in {run for run, _ in model.validated}:  # each validation: the split, once
            seen = [i for r, indices in model.validated if r == run for i in indices]
            assert seen == list(range(SAMPLES)), f"validation {run} after {checkpoint}"


def test_a_killed_run_resumes_from_its_last_checkpoint(store: str, tmp_path: Path) -> None:
    kill_at = 9  # a checkpoint every 3 steps: the killed run's last is step 9 of 14
    run = run_script(
        [
            *(sys.executable, str(HELPERS / "lightning_run.py"), "killed", "--store", store),
            *("--workdir", str(tmp_path), "--features", str(FEATURES)),
            *("--kill-at", str(kill_at)),
        ],
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr[-3000:]
    before = json.loads((tmp_path / "killed-rank0.json").read_text())["trained"]
    assert len(before) == kill_at
    model = Recorder(FEATURES)
    make_trainer(None, max_epochs=EPOCHS).fit(
        model, train_loader(store), ckpt_path=tmp_path / "checkpoints" / "steps" / "step=9.ckpt"
    )
    trained = [indices for _, _, indices in before + model.trained]
    assert trained == bare_loop(store, EPOCHS)


def test_two_ranks_under_ddp_take_their_shares_and_resume_exactly(
    store: str, tmp_path: Path
) -> None:
    run = run_script(
        [
            *(sys.executable, str(HELPERS / "lightning_run.py"), "ddp", "--store", store),
            *("--workdir", str(tmp_path), "--features", str(FEATURES)),
            *("--epochs", str(EPOCHS)),
        ],
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    runs = {
        (name, rank): json.loads((tmp_path / f"{name}-rank{rank}.json").read_text())
        for name in ("straight", "mid", "end")
        for rank in (0, 1)
    }
    per_epoch = 8  # 44 samples a rank (one pads 4), batches of 6
    for rank in (0, 1):
        # the rank and world size Lightning set up, though the loader was built before
        expected = bare_loop(store, EPOCHS, rank=rank, world_size=2)
        straight = runs["straight", rank]["trained"]
        assert [indices for _, _, indices in straight] == expected
        assert len(straight) == EPOCHS * per_epoch
        # resumed from step 3 (mid epoch 0) and from epoch 0's end, on both ranks
        assert runs["mid", rank]["trained"] == straight[3:]
        assert runs["end", rank]["trained"] == straight[per_epoch:]
    first = {i for _, _, indices in runs["straight", 0]["trained"][:per_epoch] for i in indices}
    second = {i for _, _, indices in runs["straight", 1]["trained"][:per_epoch] for i in indices}
    assert first | second == set(range(SAMPLES)) and len(first & second) == 0

    # validation: each run sees the split once across the ranks, in order, unpadded, so
    # the ranks' batch counts differ (40 and 44 samples in batches of 6: 7 and 8 batches)
    for name in ("straight", "mid", "end"):
        validated = [runs[name, rank]["validated"] for rank in (0, 1)]
        for run_index in {r for r, _ in validated[0]}:
            batches = [[ix for r, ix in v if r == run_index] for v in validated]
            assert [len(b) for b in batches] == [7, 8]
            assert all(len(b) == VAL_BATCH for per_rank in batches for b in per_rank[:-1])
            seen = [i for per_rank in batches for b in per_rank for i in b]
            assert seen == list(range(SAMPLES)), f"{name}: validation {run_index}"
