"""Split manifests: chunk-aligned, disjoint, JSON round trip, refused on a changed store."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest, units_to_ranges
from tests.helpers.profiles import examples
from tests.helpers.strategies import geometries

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


# --- Validation: every way of building a manifest passes through the same checks.


@st.composite
def manifest_json(draw: st.DrawFn) -> dict[str, Any]:
    """A valid manifest's JSON form: random unit grid, units dealt to random splits (some
    left out), each split's runs cut into adjacent pieces and listed in random order."""
    unit_length = draw(st.integers(1, 12))
    num_samples = draw(st.integers(1, 300))
    num_units = -(-num_samples // unit_length)
    chunk = draw(st.sampled_from([d for d in range(1, unit_length + 1) if unit_length % d == 0]))
    names = draw(st.lists(st.sampled_from(["train", "val", "test", "x"]), unique=True))
    owner = draw(st.lists(st.integers(-1, len(names) - 1), min_size=num_units, max_size=num_units))
    splits: dict[str, list[list[int]]] = {}
    for k, name in enumerate(names):
        ranges = []
        for a, b in units_to_ranges(np.flatnonzero(np.asarray(owner) == k)):
            cuts = draw(st.sets(st.integers(a + 1, b - 1), max_size=2)) if b - a > 1 else set()
            ranges += [[lo, hi] for lo, hi in itertools.pairwise([a, *sorted(cuts), b])]
        splits[name] = draw(st.permutations(ranges))
    return {
        "format": 1,
        "num_samples": num_samples,
        "unit_length": unit_length,
        "layouts": {"v": {"shape": [num_samples, 2], "chunks": [chunk, 1], "dtype": "float32"}},
        "splits": splits,
        "rule": {"seed": draw(st.integers(0, 9))},
    }


@given(manifest_json())
def test_valid_manifests_round_trip_and_keep_their_units(data: dict[str, Any]) -> None:
    manifest = SplitManifest.from_json(data)
    again = SplitManifest.loads(manifest.dumps())
    assert again == manifest
    assert json.loads(manifest.dumps()) == data
    for name, ranges in data["splits"].items():
        expected = sorted(u for a, b in ranges for u in range(a, b))
        if not expected:
            continue
        assert manifest.units(name).tolist() == expected
        assert again.units(name).tolist() == expected
    assert again.units("all").tolist() == list(range(manifest.num_units))


@given(manifest_json())
def test_numpy_values_are_stored_as_plain_python(data: dict[str, Any]) -> None:
    """A manifest built from numpy values writes and compares exactly like a plain one."""
    plain = SplitManifest.from_json(data)
    layout = plain.layouts["v"]
    numpyish = SplitManifest(
        num_samples=np.int64(plain.num_samples),
        unit_length=np.int32(plain.unit_length),
        layouts={"v": VariableLayout(tuple(np.int64(layout.shape)), layout.chunks, "float32")},
        splits={n: np.asarray(r, dtype=np.int64).reshape(-1, 2) for n, r in plain.splits.items()},
        rule={"seed": np.int64(plain.rule["seed"]), "fraction": np.float64(0.5)},
    )
    assert _leaf_types(numpyish.to_json()) <= {int, float, str, bool}
    assert numpyish.to_json() == {**plain.to_json(), "rule": {**plain.rule, "fraction": 0.5}}


def _leaf_types(value: Any) -> set[type]:
    if isinstance(value, dict):
        assert all(type(k) is str for k in value)
        return set().union(set(), *(_leaf_types(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(set(), *(_leaf_types(v) for v in value))
    return {type(value)}


MUTATIONS = ["negative", "past_end", "empty", "reversed", "within", "between", "not_int"]


@st.composite
def broken_manifests(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid manifest's JSON with one range broken, and a pattern its error must match."""
    data = draw(manifest_json().filter(lambda d: any(d["splits"].values())))
    splits = data["splits"]
    name = draw(st.sampled_from(sorted(n for n, r in splits.items() if r)))
    ranges = splits[name]
    i = draw(st.integers(0, len(ranges) - 1))
    a, b = ranges[i]
    n = -(-data["num_samples"] // data["unit_length"])
    quoted = re.escape(repr(name))
    mutation = draw(st.sampled_from(MUTATIONS))
    if mutation == "negative":
        ranges[i] = [-draw(st.integers(1, 5)), b]
        return data, rf"split {quoted} range \[-\d+, {b}\) starts at a negative unit"
    if mutation == "past_end":
        ranges[i] = [a, n + draw(st.integers(1, 5))]
        return data, rf"split {quoted} range .* ends past the last unit: .* has {n} units"
    if mutation == "empty":
        ranges[i] = [a, a]
        return data, rf"split {quoted} range \[{a}, {a}\) is empty or reversed"
    if mutation == "reversed":
        ranges[i] = [b, a]
        return data, rf"split {quoted} range \[{b}, {a}\) is empty or reversed"
    if mutation == "within":
        unit = draw(st.integers(a, b - 1))
        ranges.append([unit, unit + 1])
        return data, rf"split {quoted} ranges .* overlap: units \[{unit}, {unit + 1}\) are listed"
    if mutation == "between":
        unit = draw(st.integers(a, b - 1))
        other = draw(st.sampled_from(sorted({"train", "val", "test", "x", "y"} - {name})))
        splits.setdefault(other, []).append([unit, unit + 1])
        names = sorted([name, other])
        return data, (
            rf"splits '({names[0]}|{names[1]})' and '({names[0]}|{names[1]})' overlap: units "
            rf"\[{unit}, {unit + 1}\) are in both"
        )
    bad = draw(st.sampled_from([float(b), str(b), True, None, [b]]))
    ranges[i] = [a, bad]
    return (
        data,
        rf"split {quoted} range {i} .*unit ids must be ints, got .*\({type(bad).__name__}\)",
    )


@settings(max_examples=examples(300))
@given(broken_manifests())
def test_broken_ranges_are_refused_by_name(case: tuple[dict[str, Any], str]) -> None:
    data, pattern = case
    with pytest.raises(ValueError, match=pattern) as raised:
        SplitManifest.from_json(data)
    assert "fix the manifest or recreate it with make_manifest()" in str(raised.value)
    with pytest.raises(ValueError, match=pattern):
        SplitManifest.loads(json.dumps(data))  # the same through JSON text


@given(
    manifest_json(),
    st.sampled_from(["num_samples", "unit_length"]),
    st.sampled_from([0, -3, 1.5, 12.0, "12", True, None, [12]]),
)
def test_bad_sizes_are_refused_by_name(data: dict[str, Any], key: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"field '{key}' must be a positive int, got .*\("):
        SplitManifest.from_json({**data, key: bad})


def test_the_split_name_all_is_reserved() -> None:
    data = make_manifest(_one_variable(), {"train": 1.0}).to_json()
    with pytest.raises(ValueError, match="split name 'all' is reserved: it always means every"):
        SplitManifest.from_json({**data, "splits": {"all": [[0, 3]]}})
    with pytest.raises(ValueError, match="split name 'all' is reserved"):
        SplitManifest(100, 5, {}, {"all": [[0, 20]]})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "manifest format 2 is not supported"),
        ({"format": True}, "manifest format True is not supported"),
        ({"format": None}, "manifest format None is not supported"),
        ({"splits": None}, r"field 'splits' must map split names .* got None \(NoneType\)"),
        ({"splits": [[0, 3]]}, r"field 'splits' must map split names"),
        ({"splits": {"train": [0, 3]}}, r"split 'train' range 0 must be a \[start, stop\) pair"),
        ({"splits": {"train": "0-3"}}, r"split 'train' must be a list of \[start, stop\)"),
        ({"splits": {"train": [[0, 1, 2]]}}, r"range 0 must be a \[start, stop\) pair"),
        ({"splits": {"": [[0, 1]]}}, r"split name '' \(str\) is not a non-empty str"),
        ({"layouts": []}, r"field 'layouts' must map variable names"),
        ({"layouts": {"a": [100]}}, r"'layouts' entry 'a' must be an object"),
        ({"layouts": {"a": {"shape": [100]}}}, r"'layouts' entry 'a' has no chunks, dtype"),
        (
            {"layouts": {"a": {"shape": [100.0], "chunks": [5], "dtype": "f4"}}},
            r"'layouts' entry 'a' has shape=\[100.0\] \(list\): it must be a list of ints",
        ),
        (
            {"layouts": {"a": {"shape": [100], "chunks": [5], "dtype": 4}}},
            r"'layouts' entry 'a' has dtype=4 \(int\)",
        ),
        (
            {"layouts": {"a": {"shape": [100], "chunks": [0], "dtype": "f4"}}},
            r"'layouts' entry 'a' is not valid: chunk lengths must be >= 1",
        ),
        (
            {"layouts": {"a": {"shape": [99], "chunks": [5], "dtype": "f4"}}},
            r"layout of 'a' has 99 samples along axis 0, but the manifest's num_samples is 100",
        ),
        (
            {"layouts": {"a": {"shape": [100], "chunks": [4], "dtype": "f4"}}},
            r"chunk length 4, which does not divide the manifest's unit_length 5",
        ),
        ({"rule": None}, r"field 'rule' must be an object, got None"),
        ({"rule": {"seed": {1, 2}}}, r"field 'rule'\['seed'\] holds \{1, 2\} \(set\)"),
        ({"spilts": {}}, r"unknown field\(s\) \['spilts'\]: a manifest has only"),
    ],
)
def test_malformed_fields_are_named(change: dict[str, Any], message: str) -> None:
    data = make_manifest(_one_variable(), {"train": 0.5, "val": 0.5}).to_json()
    with pytest.raises(ValueError, match=message) as raised:
        SplitManifest.from_json({**data, **change})
    assert "make_manifest()" in str(raised.value)


@pytest.mark.parametrize("key", ["format", "num_samples", "unit_length", "layouts", "splits"])
def test_missing_fields_are_named(key: str) -> None:
    data = make_manifest(_one_variable(), {"train": 1.0}).to_json()
    del data[key]
    with pytest.raises(ValueError, match=f"manifest has no '{key}' field"):
        SplitManifest.from_json(data)


def test_rule_is_optional_and_a_non_object_is_refused() -> None:
    data = make_manifest(_one_variable(), {"train": 1.0}).to_json()
    del data["rule"]
    assert SplitManifest.from_json(data).rule == {}
    with pytest.raises(ValueError, match=r"a manifest must be a JSON object .* got \[1\] \(list\)"):
        SplitManifest.from_json([1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"manifest text is not valid JSON: .* line 1, column"):
        SplitManifest.loads('{"format": 1,}')
    with pytest.raises(ValueError, match=r"the key 'train' appears twice in one object"):
        SplitManifest.loads('{"splits": {"train": [[0, 1]], "train": [[1, 2]]}}')


def test_the_constructor_checks_like_from_json() -> None:
    layout = {"a": VariableLayout((100,), (5,), "float32")}
    ok = SplitManifest(100, 5, layout, {"train": [(0, 16)], "val": ((16, 20),)})
    assert ok.splits == {"train": [[0, 16]], "val": [[16, 20]]}
    with pytest.raises(ValueError, match=r"splits 'train' and 'val' overlap: units \[15, 16\)"):
        SplitManifest(100, 5, layout, {"train": [[0, 16]], "val": [[15, 20]]})
    with pytest.raises(ValueError, match=r"layout of 'a' must be a VariableLayout, got \{"):
        SplitManifest(100, 5, {"a": {"shape": [100]}}, {})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"field 'unit_length' must be a positive int, got 5.0"):
        SplitManifest(100, 5.0, layout, {})  # type: ignore[arg-type]


def test_unsorted_ranges_give_sorted_units() -> None:
    manifest = SplitManifest(100, 5, {}, {"train": [[10, 12], [0, 2]]})
    assert manifest.units("train").tolist() == [0, 1, 10, 11]
    assert manifest.splits == {"train": [[10, 12], [0, 2]]}  # kept as written


def _one_variable() -> SampleGeometry:
    return SampleGeometry.from_layouts({"a": VariableLayout((100,), (5,), "float32")})
