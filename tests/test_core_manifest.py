"""Split manifests: chunk-aligned, disjoint, JSON round trip, refused on a changed store."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import geometries

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest

fractions_strategy = st.lists(st.integers(1, 10), min_size=1, max_size=4).map(
    lambda weights: {f"s{i}": w / sum(weights) for i, w in enumerate(weights)}
)


@given(geometries(max_samples=400), fractions_strategy, st.booleans(), st.integers(0, 5))
def test_splits_partition_the_units(
    geometry: SampleGeometry, fractions: dict[str, float], shuffle: bool, seed: int
) -> None:
    try:
        manifest = make_manifest(geometry, fractions, shuffle=shuffle, seed=seed)
    except ValueError as err:
        assert "would be empty" in str(err)
        assert min(fractions.values()) * geometry.num_units <= 1 + 1e-9
        return
    units = [manifest.units(name) for name in fractions]
    everything = np.concatenate(units)
    assert np.array_equal(np.sort(everything), np.arange(geometry.num_units))
    for name, split_units in zip(fractions, units, strict=True):
        share = split_units.size / geometry.num_units
        assert abs(share - fractions[name]) <= 1 / geometry.num_units + 1e-9
        if not shuffle:
            assert len(manifest.splits[name]) == 1  # one contiguous stretch
    again = SplitManifest.loads(manifest.dumps())
    assert again == manifest
    assert np.array_equal(again.units("all"), np.arange(geometry.num_units))


def test_contiguous_default_orders_splits_along_time() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((100, 3), (5, 3), "float32")})
    manifest = make_manifest(geometry)
    assert manifest.splits == {"train": [[0, 16]], "val": [[16, 18]], "test": [[18, 20]]}


@pytest.mark.parametrize(
    ("fractions", "message"),
    [
        ({"train": 0.5, "val": 0.4}, "must sum to 1"),
        ({"train": 1.2, "val": -0.2}, "must be > 0"),
        ({}, "fractions is empty"),
        ({"train": 0.999, "val": 0.001}, "split 'val' would be empty"),
        ({"all": 1.0}, "reserved"),
    ],
)
def test_bad_fractions_are_named(fractions: dict[str, float], message: str) -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((100,), (5,), "float32")})
    with pytest.raises(ValueError, match=message):
        make_manifest(geometry, fractions)


def test_manifest_refuses_a_changed_layout() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((100, 3), (5, 3), "float32")})
    manifest = make_manifest(geometry)
    grown = {"a": VariableLayout((120, 3), (5, 3), "float32")}
    with pytest.raises(ValueError, match=r"does not match this store.*'a' is now shape=\(120, 3\)"):
        manifest.geometry_for(grown)
    extra = {"a": geometry.variables["a"], "b": VariableLayout((100,), (3,), "float32")}
    with pytest.raises(ValueError, match="does not divide the manifest's unit length 5"):
        manifest.geometry_for(extra)
    ok = {"a": geometry.variables["a"], "b": VariableLayout((100,), (5,), "int8")}
    assert manifest.geometry_for(ok).unit_length == 5


def test_unknown_and_empty_splits_are_named() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((100,), (5,), "float32")})
    manifest = make_manifest(geometry, {"train": 1.0})
    with pytest.raises(ValueError, match=r"unknown split 'val'.*\['train', 'all'\]"):
        manifest.units("val")
    emptied = SplitManifest.from_json({**manifest.to_json(), "splits": {"train": []}})
    with pytest.raises(ValueError, match="split 'train' is empty"):
        emptied.units("train")
