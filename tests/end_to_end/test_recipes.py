"""Both recipes in smoke mode, as a user runs them: train, get killed, resume with
bit-identical batches; the ERA5 recipe also under torchrun with two ranks (gloo, CPU).
These run on the CPU (`--device cpu`) wherever they run; the CUDA test trains on the GPU."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.paths import RECIPES, child_env

SMOKE = {
    "era5": ["--grid", "16", "32", "--time-steps", "48", "--levels", "geopotential"],
    "hrrr": ["--grid", "100", "160", "--chunk", "50", "--patch", "32", "--time-steps", "16"],
}
ON_CPU = ("--device", "cpu")
STEP = re.compile(r"\[rank (\d+)\] step +(\d+) loss (\S+) batch (\w+) anchors \[([\d, ]*)\]")


def _env() -> dict[str, str]:
    return child_env(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _run(recipe: str, workdir: Path, *extra: str, device: tuple[str, ...] = ON_CPU) -> str:
    done = subprocess.run(
        [sys.executable, str(RECIPES / f"{recipe}.py"), "--workdir", str(workdir)]
        + SMOKE[recipe]
        + [*device, *extra],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _steps(output: str) -> dict[tuple[int, int], tuple[str, str, str]]:
    """(rank, step) -> (loss, batch hash, anchors)."""
    return {(int(m[1]), int(m[2])): (m[3], m[4], m[5]) for m in STEP.finditer(output)}


def _kill_after_checkpoint(
    recipe: str, workdir: Path, steps: int, kill_at: int, device: tuple[str, ...] = ON_CPU
) -> None:
    """Start a run that sleeps between steps and SIGKILL it right after a checkpoint."""
    process = subprocess.Popen(
        [sys.executable, str(RECIPES / f"{recipe}.py"), "--workdir", str(workdir)]
        + SMOKE[recipe]
        + [*device, "--steps", str(steps), "--checkpoint-every", "1", "--step-delay", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if line.startswith(f"[rank 0] checkpoint step {kill_at}"):
                process.send_signal(signal.SIGKILL)
                break
        else:
            pytest.fail("the run ended before the checkpoint it was to be killed after")
    finally:
        process.kill()
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("recipe", ["era5", "hrrr"])
def test_recipe_killed_and_resumed_yields_the_same_batches(recipe: str, tmp_path: Path) -> None:
    steps = 8
    straight = _run(recipe, tmp_path / "straight", "--steps", str(steps))
    uninterrupted = _steps(straight)
    assert sorted(uninterrupted) == [(0, s) for s in range(1, steps + 1)]
    if recipe == "era5":  # GraphCast's forcings of the inputs, before the static fields
        assert (
            "..., toa_incident_solar_radiation, year_progress_sin, year_progress_cos, "
            "day_progress_sin, day_progress_cos, land_sea_mask, geopotential_at_surface\n"
        ) in straight
    killed = tmp_path / "killed"
    _kill_after_checkpoint(recipe, killed, steps, kill_at=3)
    output = _run(recipe, killed, "--steps", str(steps), "--resume")
    start = int(re.search(r"resumed from checkpoint-rank0.pt at step (\d+)", output)[1])
    assert 3 <= start < steps  # killed mid-run, after step 3 was checkpointed
    resumed = _steps(output)
    assert sorted(resumed) == [(0, s) for s in range(start + 1, steps + 1)]
    for key, line in resumed.items():
        assert line == uninterrupted[key], f"step {key[1]}: batch or loss differs after resume"
    if recipe == "hrrr":
        assert "val tiles:" in output
        per_sample = float(re.search(r"\(([\d.]+) per sample", output)[1])
        assert per_sample < 2 * 4 * 3  # targets + inputs, <= 4 chunks each, 3 variables


def test_era5_under_torchrun_gives_each_rank_its_own_data_and_the_same_steps(
    tmp_path: Path,
) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", str(RECIPES / "era5.py")]
        + ["--workdir", str(tmp_path)]
        + SMOKE["era5"]
        + [*ON_CPU, "--steps", "3", "--batch-size", "4"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = _steps(done.stdout)
    assert sorted(steps) == [(r, s) for r in (0, 1) for s in (1, 2, 3)]
    anchors = {
        rank: {
            int(a) for (r, _), (_, _, seen) in steps.items() if r == rank for a in seen.split(", ")
        }
        for rank in (0, 1)
    }
    assert len(anchors[0]) == len(anchors[1]) == 12  # 3 steps of 4 samples, no repeats
    assert not anchors[0] & anchors[1]  # each rank its own data
    assert re.findall(r"\[rank (\d)\] done: step 3 of 3", done.stdout) in (["0", "1"], ["1", "0"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_recipe_on_the_gpu_sees_the_cpu_runs_samples_and_resumes_exactly(
    tmp_path: Path, decode: str
) -> None:
    """Same samples in the same order on either device; on the GPU, killed and resumed,
    the same batches and losses (batch values are compared on one device only: the
    normalisation's float32 arithmetic may differ in the last bit between devices)."""
    steps = 6
    on_gpu = ("--device", "cuda", "--decode", decode)
    on_cpu = _steps(_run("hrrr", tmp_path / "cpu", "--steps", str(steps)))
    straight = _steps(_run("hrrr", tmp_path / "gpu", "--steps", str(steps), device=on_gpu))
    assert {k: a for k, (_, _, a) in straight.items()} == {k: a for k, (_, _, a) in on_cpu.items()}
    killed = tmp_path / "killed"
    _kill_after_checkpoint("hrrr", killed, steps, kill_at=3, device=on_gpu)
    resumed = _steps(_run("hrrr", killed, "--steps", str(steps), "--resume", device=on_gpu))
    assert resumed and all(line == straight[key] for key, line in resumed.items())


def test_era5_splits_by_dates_and_keeps_levels_by_value(tmp_path: Path) -> None:
    """The look-alike's time coordinate spans 1979-2018: the recipe's default splits are
    ClimaX's years, printed with the dates each split holds, and training anchors are all
    train steps (48 steps: 1979-01-01 .. 2015-08-02 are steps 0..43). GraphCast's
    forcings, then the static fields, are the input's last channels (`loader.channels`)."""
    output = _run("era5", tmp_path, "--steps", "3", "--pressure-levels", "500", "850")
    assert "  train  1979 .. 2015  1979-01-01T00:00  2015-08-02T06:00     44     11" in output
    assert "  val    2016          2016-06-08T00:00  2016-06-08T00:00      1      1" in output
    assert "geopotential_500, geopotential_850" in output
    assert "channels (13): " in output  # 4 surface + 2 levels + 5 forcings + 2 statics
    assert (
        output.split("channels (13): ")[1]
        .splitlines()[0]
        .endswith("day_progress_cos, land_sea_mask, geopotential_at_surface")
    )
    anchors = [int(a) for _, _, seen in _steps(output).values() for a in seen.split(", ")]
    assert len(anchors) == 12 and all(1 <= a <= 42 for a in anchors)


def test_era5_on_a_join_trains_on_the_batches_of_one_store(tmp_path: Path) -> None:
    """`--join` writes the look-alike as a pressure-level and a surface store read as one:
    the same steps, losses and batches as the one store."""
    one = _steps(_run("era5", tmp_path / "one", "--steps", "3"))
    joined = _steps(_run("era5", tmp_path / "joined", "--steps", "3", "--join"))
    assert len(one) == 3 and joined == one
