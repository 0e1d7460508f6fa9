"""6-hourly training out of an hourly store, on real stores: `stride=6` and
`frequency="6h"` keep every 6th step as an anchor and count windows and leads in 6-hour
units; where the time coordinate has a gap, windows count steps unless `max_gap` drops
the anchors whose span crosses it. (A value of t2m is its step times 1000, plus noise.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitubatch_nodes as ib
from tests.helpers.batches import as_numpy, batch_key, recorded_unit_grid
from tests.helpers.stores import write_store
from tests.helpers.time_stores import hourly, write_native

HOURS = hourly("2015-01-01T00", 120)
SPEC = ib.SampleSpec({"x": ib.window(["t2m"], steps=2), "y": ib.leads(["t2m"], [1])})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_native(tmp_path_factory.mktemp("hourly") / "h.zarr", HOURS, steps_per_chunk=3)


@pytest.fixture(scope="module")
def gappy(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    """Hourly, with 2015-01-02T06 .. 2015-01-02T11 missing (steps 30..35 of the hours)."""
    dates = np.concatenate([HOURS[:30], HOURS[36:]])
    return write_native(
        tmp_path_factory.mktemp("gappy") / "g.zarr", dates, steps_per_chunk=3
    ), dates


def _epoch(url: str, **settings: Any) -> list[dict[str, Any]]:
    loader = ib.build_loader(
        url, spec=SPEC, split="all", batch_size=4, device="cpu", seed=2, **settings
    )
    return list(loader)


def _steps(batch: dict[str, Any], key: str) -> np.ndarray:
    return np.floor(as_numpy(batch[key])[..., 0, 0] / 1000).astype(int)


def test_a_stride_keeps_every_kth_step_and_counts_windows_in_strides(store: str) -> None:
    batches = _epoch(store, stride=6)
    anchors = np.concatenate([b["sample_index"].numpy() for b in batches])
    # t-6 >= 0 and t+6 < 120: anchors 6, 12, ..., 108
    assert sorted(anchors.tolist()) == list(range(6, 114, 6))
    for batch in batches:
        t = batch["sample_index"].numpy()
        assert np.array_equal(_steps(batch, "x/t2m"), np.stack([t - 6, t], axis=1))
        assert np.array_equal(_steps(batch, "y/t2m"), (t + 6)[:, None])


def test_frequency_6h_is_a_stride_of_6_on_an_hourly_store(store: str) -> None:
    by_stride = [batch_key(b) for b in _epoch(store, stride=6)]
    by_frequency = [batch_key(b) for b in _epoch(store, frequency="6h")]
    assert by_frequency == by_stride


def test_windows_span_a_gap_unless_max_gap_drops_them(gappy: tuple[str, np.ndarray]) -> None:
    url, dates = gappy
    loose = np.concatenate([b["sample_index"].numpy() for b in _epoch(url)])
    # steps 29 (05:00) and 30 (12:00) are neighbours: windows count steps, so t=30 uses t-1=29
    assert 30 in loose.tolist() and 29 in loose.tolist()
    strict = np.concatenate([b["sample_index"].numpy() for b in _epoch(url, max_gap="1h")])
    n = dates.size
    hour = np.timedelta64(1, "h")
    expected = [
        t
        for t in range(1, n - 1)
        if dates[t] - dates[t - 1] <= hour and dates[t + 1] - dates[t] <= hour
    ]
    assert sorted(strict.tolist()) == expected
    assert 29 not in strict.tolist() and 30 not in strict.tolist()


def test_frequency_with_a_gap_anchors_on_dates(gappy: tuple[str, np.ndarray]) -> None:
    url, dates = gappy
    batches = _epoch(url, frequency="6h", max_gap="1h")
    anchors = np.concatenate([b["sample_index"].numpy() for b in batches])
    hours = (dates[anchors] - dates[0]) // np.timedelta64(1, "h")
    assert (hours % 6 == 0).all()
    for batch in batches:  # every step a sample reads lies 6 h apart in time, gap or not
        steps = np.concatenate([_steps(batch, "x/t2m"), _steps(batch, "y/t2m")], axis=1)
        gaps = np.diff(dates[steps], axis=1)
        assert (gaps == np.timedelta64(6, "h")).all()


def test_date_splits_with_a_stride_keep_windows_inside_each_split(store: str) -> None:
    splits = {"train": ("2015-01-01", "2015-01-03T11"), "val": ("2015-01-03T12", "2015")}
    for split, (first, last) in splits.items():
        own = set(range(0, 60)) if split == "train" else set(range(60, 120))
        loader = ib.build_loader(
            store, spec=SPEC, split=split, splits=splits, stride=6, batch_size=4, device="cpu"
        )
        for batch in loader:
            for key in ("x/t2m", "y/t2m"):
                assert set(_steps(batch, key).reshape(-1).tolist()) <= own, (first, last)


def test_a_state_saved_at_one_stride_is_refused_at_another(store: str) -> None:
    loader = ib.build_loader(store, spec=SPEC, stride=6, batch_size=4, device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    other = ib.build_loader(store, spec=SPEC, stride=3, batch_size=4, device="cpu")
    with pytest.raises(ValueError, match=r"split 'train' had \d+ anchors when the state was"):
        other.load_state_dict(state)
        next(iter(other))


def test_bad_time_settings_are_refused_with_what_to_do(store: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give stride= or frequency=, not both"):
        ib.build_loader(store, stride=6, frequency="6h")
    with pytest.raises(ValueError, match=r"stride must be >= 1, got 0"):
        ib.build_loader(store, stride=0)
    with pytest.raises(ValueError, match=r"frequency 90min is not a whole number"):
        ib.build_loader(store, frequency="90min")
    with pytest.raises(ValueError, match=r"max_gap is '1 fortnight': write a whole number"):
        ib.build_loader(store, max_gap="1 fortnight")
    plain, _ = write_store(tmp_path / "plain.zarr")
    with pytest.raises(ValueError, match=r"has no time coordinate for \['t2m', 'u10'\]"):
        ib.build_loader(plain, frequency="6h")
    with pytest.raises(ValueError, match="has no anchor that the stride, frequency or max_gap"):
        ib.build_loader(store, split="val", spec=SPEC, stride=12 * 3)


@pytest.mark.parametrize(
    ("steps_per_chunk", "stride", "revisits", "unit_steps"),
    [
        (12, 4, 2, 12),  # visits of 6 steps would hold 2 and 1 anchors: units of lcm(6, 4)
        (12, 8, 3, 4),  # visits of 4 steps: a stride of 8 is a multiple of them
        (24, 16, 3, 8),  # visits of 8 steps: a stride of 16 is a multiple of them
        (12, 6, 2, 6),  # visits of 6 steps: aligned on either grid
    ],
)
def test_the_stride_is_fitted_to_the_grid_the_loader_reads(
    tmp_path: Path, steps_per_chunk: int, stride: int, revisits: int, unit_steps: int
) -> None:
    """With revisits the loader's units are the visits (`SampleGeometry.visits`), so the
    stride is fitted to them, not to the store's chunks (`core.stride_units`): the same
    rule as for units of that length. Every stride step is an anchor exactly once."""
    hours = hourly("2015-01-01T00", 240)
    url = write_native(tmp_path / "s.zarr", hours, steps_per_chunk=steps_per_chunk)
    settings: dict[str, Any] = {"split": "all", "batch_size": 4, "device": "cpu"}
    loader = ib.build_loader(url, stride=stride, revisits=revisits, **settings)
    anchors = np.concatenate([b["sample_index"].numpy() for b in loader])
    assert sorted(anchors.tolist()) == list(range(0, 240, stride))
    grid = recorded_unit_grid(loader.state_dict())
    assert grid == {"unit_steps": unit_steps, "revisits": revisits}
