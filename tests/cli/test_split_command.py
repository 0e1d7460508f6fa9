"""`insitubatch split URL --train 1979:2015 ...`: the manifest `build_loader(splits=...)`
would cut, written to a file, with what each split holds; bad input is one line on
stderr and exit status 2."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import insitubatch_nodes as ib
from insitubatch_nodes.cli.main import main
from insitubatch_nodes.core.date_ranges import range_from_text
from tests.helpers.stores import write_store
from tests.helpers.time_stores import hourly, write_xarray

TIMES = hourly("2014-12-31T00", 100, hours=6)  # .. 2015-01-24T18


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return write_xarray(tmp_path_factory.mktemp("split") / "era.zarr", TIMES, zarr_format=3)


def test_split_writes_the_manifest_build_loader_would_cut(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "splits.json"
    code = main(
        [
            "split",
            store,
            "--train",
            "2014:2015-01-10",
            "--val",
            "2015-01-11:2015-01-15T11",
            "--split",
            "test=2015-01-15T12..2016",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.splitlines() == [
        "time coordinate 'time': 2014-12-31T00:00 .. 2015-01-24T18:00, 100 steps; units of 4 "
        "step(s)",
        "  split  dates asked                  first step        last step         steps  units",
        "  train  2014 .. 2015-01-10           2014-12-31T00:00  2015-01-10T18:00     44     11",
        "  val    2015-01-11 .. 2015-01-15T11  2015-01-11T00:00  2015-01-15T06:00     18      5",
        "  test   2015-01-15T12 .. 2016        2015-01-15T12:00  2015-01-24T18:00     38     10",
        "units on a boundary, read by both splits, each using only its own steps: unit 15 "
        "(val | test)",
        f"-> {out}",
    ]
    written = ib.SplitManifest.loads(out.read_text())
    same = ib.ZarrSource.open(
        store,
        splits={
            "train": ("2014", "2015-01-10"),
            "val": ("2015-01-11", "2015-01-15T11"),
            "test": ("2015-01-15T12", "2016"),
        },
    ).manifest
    assert written == same
    assert json.loads(out.read_text())["dates"]["val"] == ["2015-01-11T00:00", "2015-01-15T06:00"]
    loader = ib.build_loader(store, ["t2m"], "val", manifest=out, batch_size=6, device="cpu")
    assert sorted(i for b in loader for i in b["sample_index"].tolist()) == list(range(44, 62))


def test_split_takes_a_unit_length(store: str, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert main(["split", store, "--train", "2015", "--unit-steps", "8", "--out", str(out)]) == 0
    assert ib.SplitManifest.loads(out.read_text()).unit_length == 8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--train", "2014:2015-01-10", "--val", "2015-01-10:2016"], "overlap"),
        (["--train", "1979-13"], "'1979-13', which is not an ISO 8601 date"),
        (["--train", "2020:2021"], r"split 'train' \(2020 .. 2021\) holds no step"),
        (["--split", "val2016"], "write NAME=FIRST:LAST"),
        ([], "give at least one split"),
        (["--train", "2015", "--unit-steps", "3"], "not a multiple of every variable"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["split", store, *argv, "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("insitubatch split: ") and err.count("\n") == 1
    assert re.search(message, err), err
    assert not (tmp_path / "s.json").exists()


def test_a_store_without_time_coordinate_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = write_store(tmp_path / "plain.zarr")
    assert main(["split", url, "--train", "2015", "--out", str(tmp_path / "s.json")]) == 2
    assert "has no time coordinate for ['t2m', 'u10']" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("1979:2015", ("1979", "2015")),
        ("2016", ("2016", "2016")),
        ("1979-01-01:2015-12-31T23", ("1979-01-01", "2015-12-31T23")),
        ("2015-12-31T23:00", ("2015-12-31T23:00", "2015-12-31T23:00")),
        ("2015-12-31T23:00:2016-01-01T05:30", ("2015-12-31T23:00", "2016-01-01T05:30")),
        ("1979..2015", ("1979", "2015")),
    ],
)
def test_command_line_ranges(text: str, pair: tuple[str, str]) -> None:
    assert range_from_text(text, "--train") == pair


def test_a_range_with_two_colons_before_years_is_refused() -> None:
    with pytest.raises(ValueError, match="write one range as FIRST:LAST"):
        range_from_text("1979:2000:2015", "--train")
    assert np.datetime64(range_from_text("2015-06:2015", "--x")[0]) == np.datetime64("2015-06")
