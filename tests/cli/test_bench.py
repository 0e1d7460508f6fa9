"""`insitubatch bench` run as users run it (the CLI's `main`, and once the installed
script), for a second or two, on stores written by zarr-python: a local synthetic ERA5
look-alike and a store in the S3 server. Its figures are checked against what the stores
hold and against each other (samples are whole batches, bytes are chunks read times a
chunk's size)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from insitubatch_nodes.cli.main import main
from insitubatch_nodes.cli.synthetic import write_era5_like
from tests.helpers.s3_server import ACCESS_KEY, S3Server

GRID = (16, 32)
STEPS = 96
STEPS_PER_CHUNK = 2
BATCH = 8  # divides the 96 samples of an epoch: every batch is whole
VARIABLES = 4  # write_era5_like's
CHUNK_BYTES = STEPS_PER_CHUNK * GRID[0] * GRID[1] * 4
SECRET = "bench-Secret-7Hq2z"  # a value no output could contain by chance


@pytest.fixture(scope="module")
def era5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_era5_like(
        tmp_path_factory.mktemp("bench") / "era5.zarr",
        time_steps=STEPS,
        steps_per_chunk=STEPS_PER_CHUNK,
        grid=GRID,
    )


def bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", *args])
    out, err = capsys.readouterr()
    return code, out, err


def bench_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = bench(capsys, *args, "--json", "--no-progress")
    assert code == 0, err
    return json.loads(out)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = bench(capsys, *args, "--no-progress")
    assert code == 2 and out == ""
    assert err.startswith("insitubatch bench: ") and err.count("\n") == 1, err
    return err


def check_consistent(result: dict[str, Any], chunks_per_epoch: int, chunk_bytes: int) -> None:
    """The figures against each other and against the store's layout."""
    epochs = result["epochs"]
    assert epochs >= 1 and result["seconds"] > 0
    assert result["samples"] == result["batches"] * BATCH  # whole batches only
    assert (epochs - 1) * STEPS < result["samples"] <= epochs * STEPS
    # each epoch reads every chunk once; the last may be cut short by the time limit
    assert (epochs - 1) * chunks_per_epoch < result["chunks_read"] <= epochs * chunks_per_epoch
    assert result["bytes_decoded"] == result["chunks_read"] * chunk_bytes
    assert result["samples_per_s"] == pytest.approx(result["samples"] / result["seconds"])
    assert result["decoded_mb_per_s"] == pytest.approx(
        result["bytes_decoded"] / result["seconds"] / 1e6
    )
    times = [point["t_s"] for point in result["series"]]
    # the run's length ends at its last batch (the last point), not after the graph's
    # shutdown, which would slow every rate by a time that is not reading
    assert times and times == sorted(times) and times[-1] == result["seconds"]
    assert result["limiting_stage"] in (
        "consumer",
        "decode",
        "gather",
        "cpu",
        "bandwidth",
        "store latency",
    )


def test_a_local_store(era5: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(era5), "--seconds", "1", "--batch-size", str(BATCH), "--device", "cpu"]
    result = bench_json(capsys, *args)
    assert result["store"] == str(era5) and result["split"] == "all"
    assert result["device"] == "cpu" and result["seconds"] >= 1
    check_consistent(result, STEPS // STEPS_PER_CHUNK * VARIABLES, CHUNK_BYTES)
    # local files are read directly, not through gets: no fetched bytes, no latencies
    assert result["bytes_fetched"] == 0 and result["latency_p50_s"] is None
    assert result["epochs"] > 1  # 96 samples go by many times a second
    code, out, err = bench(capsys, *args, "--no-progress")
    assert code == 0 and err == ""
    lines = {line.split("  ")[1]: line for line in out.splitlines() if line.startswith("  ")}
    assert f"insitubatch bench  {era5}" in out
    samples = int(lines["samples/s"].split("(")[1].split()[0])
    batches = int(lines["samples/s"].split(" in ")[1].split()[0])
    assert samples == batches * BATCH
    chunks = int(lines["reads"].split()[1])
    decoded = int(lines["MB/s decoded"].split("(")[1].split()[0])
    assert decoded == chunks * CHUNK_BYTES
    assert "no object-store gets" in lines["MB/s fetched"]
    assert "p50 -, p95 -" in lines["read latency"]
    assert lines["limiting stage"].split()[2].rstrip(":") in ("decode", "gather", "consumer")


def _s3_store(server: S3Server) -> tuple[str, int]:
    """A store of uncompressed chunks (every object the same size) in a fresh bucket."""
    url = f"s3://{server.new_bucket()}/data/era5.zarr"
    group = zarr.open_group(server.writable_store(url), mode="w")
    array = group.create_array(
        "t2m",
        shape=(STEPS, 4, 8),
        chunks=(4, 4, 8),
        dtype="float32",
        compressors=None,
        dimension_names=("time", "lat", "lon"),
    )
    array[...] = np.random.default_rng(2).standard_normal((STEPS, 4, 8), dtype=np.float32)
    return url, 4 * 4 * 8 * 4


def test_a_store_in_s3(
    s3_server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, chunk_bytes = _s3_store(s3_server)
    (tmp_path / "options.json").write_text(json.dumps(s3_server.json_options()))
    args = [url, "--seconds", "1.5", "--batch-size", str(BATCH), "--device", "cpu"]
    result = bench_json(capsys, *args, "--storage-options", str(tmp_path / "options.json"))
    assert result["store"] == url
    check_consistent(result, STEPS // 4, chunk_bytes)
    sizes = s3_server.object_sizes(url, "t2m/c/")
    assert set(sizes) == {chunk_bytes}  # the chunks as stored
    # every chunk read is one get of its object, once an epoch; the last epoch, cut short,
    # may have fetched chunks it had not decoded yet (reads ahead)
    fetched, left = divmod(result["bytes_fetched"], chunk_bytes)
    assert left == 0
    assert result["chunks_read"] <= fetched <= result["epochs"] * (STEPS // 4)
    assert 0 < result["latency_p50_s"] <= result["latency_p95_s"]
    assert result["reads_in_flight_max"] >= 1 and result["reads_in_flight_mean"] > 0


def test_secrets_stay_out_of_every_output(
    s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _s3_store(s3_server)
    options = json.dumps(s3_server.json_options(secret_access_key=SECRET))
    code, out, err = bench(capsys, url, "--storage-options", options, "--seconds", "0.5")
    assert code == 0, err  # moto takes any secret key: a run with the secret in its options
    assert SECRET not in out + err and f"insitubatch bench  {url}" in out
    in_url = url.replace("s3://", f"s3://{ACCESS_KEY}:{SECRET}@")
    good = json.dumps(s3_server.json_options())
    code, out, err = bench(capsys, in_url, "--storage-options", good, "--seconds", "0.5")
    assert code == 0, err
    assert SECRET not in out + err and "s3://***@" in out
    line = refused(capsys, url, "--storage-options", good, "--variables", "z500")
    assert "unknown variable(s) ['z500']" in line and url in line


def test_anonymous_requests_are_unsigned(
    s3_server: S3Server, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = _s3_store(s3_server)
    bare = s3_server.json_options()
    del bare["access_key_id"], bare["secret_access_key"]
    line = refused(capsys, url, "--storage-options", json.dumps(bare), "--anonymous")
    assert "refused access" in line and "skip_signature" in line  # a private bucket


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("matplotlib") is None,
    reason="matplotlib is in the bench extra",
)
def test_a_png_of_the_run(era5: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "run.png"
    code, out, err = bench(
        capsys, str(era5), "--seconds", "1", "--png", str(png), "--no-progress", "--device", "cpu"
    )
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert f"throughput and reads in flight over time: {png}" in out


def test_a_png_without_matplotlib_is_refused_before_the_run(
    era5: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    line = refused(capsys, str(era5), "--seconds", "30", "--png", str(tmp_path / "run.png"))
    assert "--png needs matplotlib, which is not installed: pip install matplotlib" in line
    assert not (tmp_path / "run.png").exists()


def test_bad_input_is_one_line(
    era5: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "seconds must be a number above 0, got 0.0" in refused(
        capsys, str(era5), "--seconds", "0"
    )
    assert "no Zarr store at" in refused(capsys, str(tmp_path / "nowhere.zarr"))
    line = refused(capsys, str(era5), "--storage-options", "{region: 1}")
    assert "--storage-options is not valid JSON" in line
    assert "batch_size must be" in refused(capsys, str(era5), "--batch-size", "0")
    assert "unknown split 'trian'" in refused(capsys, str(era5), "--split", "trian")


def test_the_installed_command_shows_progress_on_stderr(era5: Path) -> None:
    script = Path(sys.executable).parent / "insitubatch"
    assert script.exists(), "pip install -e . installs the insitubatch command"
    done = subprocess.run(
        [str(script), "bench", str(era5), "--seconds", "1", "--device", "cpu"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"insitubatch bench  {era5}\n")
    assert "samples/s" in done.stdout and "limiting stage" in done.stdout
    assert "bench " in done.stderr and "/1.0 s" in done.stderr and "samples/s" in done.stderr
