"""The demo (the README's main job) runs end to end on a tiny store and its resume holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from insitubatch_nodes.cli.main import main


def test_demo_writes_the_store_once_and_resume_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "demo",
        "--cache",
        str(tmp_path),
        "--time-steps",
        "90",
        "--steps-per-chunk",
        "4",
        "--batch-size",
        "8",
        "--block-chunks",
        "3",
        "--no-progress",
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "written in" in first and "resume_matches             True" in first
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "(cached)" in second
    assert (
        second.split("summary")[1].split("epoch_s")[0]
        == first.split("summary")[1].split("epoch_s")[0]
    )  # same batch and sample counts from the cached store
