"""Exact resume under Hugging Face accelerate: the loader registered for checkpointing,
`save_state` / `load_state`, in one process and in two (torchrun, gloo on CPU); and
`skip_first_batches`, which would skip the resumed batches a second time, refused.

Every state saved is resumed by a fresh model and loader, and what it trains on is
compared batch by batch with the rest of the uninterrupted run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from accelerate import Accelerator

import insitubatch_nodes as ib
from tests.helpers.accelerate_run import BATCH, SEED, train
from tests.helpers.paths import HELPERS
from tests.helpers.script_runs import run_script
from tests.helpers.stores import write_store

EPOCHS = 2


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    where = tmp_path_factory.mktemp("accelerate") / "store.zarr"
    return write_store(where, {"t2m": ((88, 3, 4), (4, 3, 2), "float32")})[0]


def bare_loop(url: str, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    loader = ib.build_loader(
        url, split="all", batch_size=BATCH, seed=SEED, rank=rank, world_size=world_size
    )
    return [batch["sample_index"].tolist() for _ in range(EPOCHS) for batch in loader]


def test_every_saved_state_resumes_with_the_batches_the_run_trained_on_next(
    store: str, tmp_path: Path
) -> None:
    per_epoch = 11  # 88 samples in batches of 8
    # inside the first epoch, at its end, one step into the next, inside it, at the end
    steps = [3, 8, per_epoch, per_epoch + 1, 17, 2 * per_epoch]
    saves = {step: tmp_path / f"step-{step}" for step in steps}
    whole = train(store, EPOCHS, saves=saves)
    assert whole == bare_loop(store)
    assert len(whole) == EPOCHS * per_epoch
    for step, saved in saves.items():
        resumed = train(store, EPOCHS, resume=saved)
        assert resumed == whole[step:], f"resumed from the state saved at step {step}"


def test_skip_first_batches_is_refused(store: str) -> None:
    loader = ib.build_loader(store, split="all", batch_size=BATCH)
    with pytest.raises(AttributeError) as raised:
        Accelerator(cpu=True).skip_first_batches(loader, 3)
    assert str(raised.value) == (
        "insitubatch_nodes.Loader has no dataset: it reads, shards and shuffles by itself and "
        "resumes from load_state_dict(). Do not call accelerate's skip_first_batches on it: "
        "after a load the loader already starts at the batch after the saved one, and "
        "skipping would skip those batches twice"
    )


def test_two_ranks_under_torchrun_resume_exactly(store: str, tmp_path: Path) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    run = run_script(
        [
            *(str(torchrun), "--standalone", "--nproc_per_node", "2"),
            str(HELPERS / "accelerate_run.py"),
            *("--store", store, "--workdir", str(tmp_path)),
        ],
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    per_epoch = 6  # 44 samples a rank, batches of 8
    shares = []
    for rank in (0, 1):
        runs = {
            name: json.loads((tmp_path / f"{name}-rank{rank}.json").read_text())
            for name in ("straight", "mid", "end")
        }
        assert runs["straight"] == bare_loop(store, rank=rank, world_size=2)
        assert runs["mid"] == runs["straight"][3:]
        assert runs["end"] == runs["straight"][per_epoch:]
        shares.append({i for batch in runs["straight"][:per_epoch] for i in batch})
    assert shares[0] | shares[1] == set(range(88)) and not shares[0] & shares[1]
