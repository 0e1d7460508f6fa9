"""Channel stacking and per-channel normalisation against numpy, on a real zarr store."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from insitubatch_nodes import (
    SAMPLE_INDEX_KEY,
    ChannelStats,
    SampleSpec,
    ZarrSource,
    batch_channels,
    build_loader,
    compute_stats,
    leads,
    make_manifest,
    stats_path,
    window,
)
from insitubatch_nodes.cli.main import main
from tests.helpers.resume_check import check_every_cut
from tests.helpers.stores import write_store

VARIABLES = {
    "z": ((120, 3, 4, 5), (4, 3, 2, 5), "float32"),  # (time, level, lat, lon)
    "t2m": ((120, 4, 5), (6, 4, 5), "float32"),
    "msl": ((120, 4, 5), (3, 2, 5), "float32"),
}
SPEC = SampleSpec({"inputs": window(["t2m", "z"], steps=2), "targets": leads(["msl"], [1])})

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, dict[str, np.ndarray]]:
    url, truth = write_store(tmp_path / "levels.zarr", VARIABLES, zarr_format=2)
    return url, truth


def _train_steps(url: str) -> np.ndarray:
    source = ZarrSource.open(url)
    return source.geometry.unit_samples(source.split_units("train"))


def _numpy_stats(truth: dict[str, np.ndarray], steps: np.ndarray) -> dict[str, Any]:
    out = {}
    for name, values in truth.items():
        x = values[steps].astype(np.float64)
        axes = (0, x.ndim - 2, x.ndim - 1)
        out[name] = (x.mean(axis=axes).reshape(-1), x.std(axis=axes).reshape(-1))
    return out


def test_stats_match_numpy_and_land_beside_the_manifest(
    store: tuple[str, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    url, truth = store
    manifest_file = tmp_path / "splits.json"
    manifest_file.write_text(ZarrSource.open(url).manifest.dumps())
    assert main(["stats", url, "--manifest", str(manifest_file)]) == 0
    saved = ChannelStats.load(stats_path(manifest_file))
    assert stats_path(manifest_file) == tmp_path / "splits.stats.json"
    expected = _numpy_stats(truth, _train_steps(url))
    api = compute_stats(url, manifest=manifest_file)
    for stats in (saved, api):
        assert stats.channels == {"msl": ["msl"], "t2m": ["t2m"], "z": ["z[0]", "z[1]", "z[2]"]}
        for name, (mean, std) in expected.items():
            np.testing.assert_allclose(stats.mean[name], mean, rtol=1e-9)
            np.testing.assert_allclose(stats.std[name], std, rtol=1e-9)
    assert saved.count["z"] == _train_steps(url).size * 4 * 5


def test_streaming_moments_survive_a_large_offset(tmp_path: Path) -> None:
    from insitubatch_nodes.core.moments import RunningMoments

    rng = np.random.default_rng(0)
    values = 101_325.0 + rng.standard_normal((50, 2, 30)) * [[1000.0], [0.01]]
    running = RunningMoments(2)
    for piece in np.array_split(values, 7):
        running.add(piece)
    np.testing.assert_allclose(running.mean, values.mean(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(running.std, values.std(axis=(0, 2)), rtol=1e-6)


def test_stacked_windows_hold_the_channels_in_the_recorded_order(
    store: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, truth = store
    layouts = ZarrSource.open(url).layouts
    order = batch_channels(layouts, SPEC, stacked=True)
    assert order == {"inputs": ["t2m", "z[0]", "z[1]", "z[2]"], "targets": ["msl"]}
    loader = cpu_loader(url, split="train", spec=SPEC, stack=True, batch_size=5)
    batches = list(loader)
    assert batches
    for batch in batches:
        anchors = batch[SAMPLE_INDEX_KEY].numpy()
        steps = anchors[:, None] + np.array([-1, 0])[None, :]
        expected = np.concatenate(
            [truth["t2m"][steps][:, :, None], truth["z"][steps]], axis=2
        )  # (B, 2, 4, lat, lon)
        assert np.array_equal(batch["inputs"].numpy(), expected)
        assert np.array_equal(batch["targets"].numpy(), truth["msl"][anchors + 1][:, None, None])


def test_normalised_batches_equal_numpy_normalisation(
    store: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, truth = store
    stats = compute_stats(url)
    expected_stats = _numpy_stats(truth, _train_steps(url))
    loader = cpu_loader(
        url, split="val", spec=SPEC, stack=True, normalise=stats, batch_size=4, device="cpu"
    )
    mean_in = np.concatenate([expected_stats["t2m"][0], expected_stats["z"][0]])
    std_in = np.concatenate([expected_stats["t2m"][1], expected_stats["z"][1]])
    seen = 0
    for batch in loader:
        anchors = batch[SAMPLE_INDEX_KEY].numpy()
        steps = anchors[:, None] + np.array([-1, 0])[None, :]
        raw = np.concatenate([truth["t2m"][steps][:, :, None], truth["z"][steps]], axis=2)
        expected = (raw - mean_in[:, None, None]) / std_in[:, None, None]
        assert batch["inputs"].dtype.is_floating_point
        np.testing.assert_allclose(batch["inputs"].numpy(), expected, rtol=1e-5, atol=1e-5)
        msl_mean, msl_std = expected_stats["msl"]
        np.testing.assert_allclose(
            batch["targets"].numpy()[:, 0, 0],
            (truth["msl"][anchors + 1] - msl_mean[0]) / msl_std[0],
            rtol=1e-5,
            atol=1e-5,
        )
        seen += anchors.size
    assert seen > 0


def test_specless_stack_and_normalise(store: tuple[str, dict[str, np.ndarray]]) -> None:
    url, truth = store
    loader = cpu_loader(
        url, ["t2m", "msl"], split="train", stack=True, normalise=compute_stats(url, ["t2m", "msl"])
    )
    batch = next(iter(loader))
    index = batch[SAMPLE_INDEX_KEY].numpy()
    assert batch["fields"].shape == (32, 2, 4, 5)
    expected = _numpy_stats({k: truth[k] for k in ("t2m", "msl")}, _train_steps(url))
    for c, name in enumerate(["t2m", "msl"]):
        mean, std = expected[name]
        np.testing.assert_allclose(
            batch["fields"][:, c].numpy(), (truth[name][index] - mean) / std, rtol=1e-5, atol=1e-5
        )


def test_stats_for_other_channels_are_refused(store: tuple[str, dict[str, np.ndarray]]) -> None:
    url, _ = store
    with pytest.raises(ValueError, match=r"no channel\(s\) \['z\[0\]'"):
        cpu_loader(url, split="train", spec=SPEC, normalise=compute_stats(url, ["t2m", "msl"]))


def test_stacked_normalised_graph_resumes_at_every_cut(
    store: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, _ = store
    manifest = make_manifest(ZarrSource.open(url).geometry)
    stats = compute_stats(url, manifest=manifest)
    check_every_cut(
        lambda: (
            cpu_loader(
                url,
                split="train",
                spec=SPEC,
                stack=True,
                normalise=stats,
                manifest=manifest,
                batch_size=7,
                block_chunks=2,
            ).root
        )
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_normalisation_runs_on_the_gpu_and_matches_the_cpu(
    store: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, _ = store
    stats = compute_stats(url)
    settings = {"split": "train", "spec": SPEC, "stack": True, "normalise": stats}
    on_gpu = next(iter(build_loader(url, device="cuda", **settings)))  # type: ignore[arg-type]
    on_cpu = next(iter(build_loader(url, device="cpu", **settings)))  # type: ignore[arg-type]
    assert on_gpu["inputs"].is_cuda and on_gpu[SAMPLE_INDEX_KEY].device.type == "cpu"
    torch.testing.assert_close(on_gpu["inputs"].cpu(), on_cpu["inputs"], rtol=1e-6, atol=1e-6)


def test_stats_of_large_fields_fit_a_small_memory_budget(memory_url: Any) -> None:
    url, truth = memory_url({"big": ((24, 100, 100), (1, 100, 100), "float32")})
    stats = compute_stats(url, split="all", memory_budget=4_000_000)
    np.testing.assert_allclose(stats.mean["big"], [truth["big"].astype(np.float64).mean()])
    np.testing.assert_allclose(stats.std["big"], [truth["big"].astype(np.float64).std()])
