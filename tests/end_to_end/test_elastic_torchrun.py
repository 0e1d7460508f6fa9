"""Elastic resume across processes: the recipe `recipes/elastic_resume.py` under torchrun
(gloo on CPU) trains on 2 ranks and saves one gathered checkpoint, which 1 and 3 ranks
resume, and a chain 2 -> 3 -> 1; each run to the epoch's end checks that every sample of
the epoch was seen (the recipe asserts it and prints the counts checked here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import RECIPES
from tests.helpers.script_runs import run_script

RECIPE = RECIPES / "elastic_resume.py"
SAMPLES = 203


def torchrun(workdir: Path, ranks: int, *args: str) -> str:
    command = [
        str(Path(sys.executable).parent / "torchrun"),
        *("--standalone", "--nproc_per_node", str(ranks)),
        str(RECIPE),
        *("--workdir", str(workdir)),
        *args,
    ]
    run = run_script(command, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    workdir = tmp_path_factory.mktemp("elastic")
    saved = workdir / "two.pt"
    torchrun(workdir, 2, "--steps", "3", "--save", str(saved))
    return workdir, saved


def rest_counts(out: str, ranks: int) -> None:
    per_rank = re.search(r"samples per rank after the resume: \[([\d, ]+)\]", out)
    assert per_rank is not None, out
    counts = [int(c) for c in per_rank.group(1).split(",")]
    assert len(counts) == ranks and len(set(counts)) == 1
    assert f"distinct samples: {SAMPLES} of {SAMPLES}, missing: []" in out
    assert "union check: every sample of the epoch seen" in out


@pytest.mark.parametrize("ranks", [1, 3])
def test_two_ranks_resume_on_another_number(two_ranks: tuple[Path, Path], ranks: int) -> None:
    workdir, saved = two_ranks
    out = torchrun(workdir, ranks, "--resume", str(saved))
    assert "before: 48," in out  # 3 steps of 8 on 2 ranks
    rest_counts(out, ranks)


def test_a_chain_two_three_one(two_ranks: tuple[Path, Path]) -> None:
    workdir, saved = two_ranks
    three = workdir / "three.pt"
    torchrun(workdir, 3, "--resume", str(saved), "--steps", "2", "--save", str(three))
    out = torchrun(workdir, 1, "--resume", str(three))
    assert "before: 96," in out  # 48, then 2 steps of 8 on 3 ranks
    rest_counts(out, 1)
