"""Every way of giving a split manifest works the same, and every wrong one is refused clearly.

A manifest reaches the loader as the object, its JSON dict, its JSON text, or a file path
(str or pathlib.Path); all must give the same batches, and a missing file, a file that is
not JSON, a manifest that fails the checks or a value of another type must name what was
wrong before anything is read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from insitubatch_nodes import SplitManifest, ZarrSource, build_loader, make_manifest
from insitubatch_nodes.io.source_manifest import load_manifest


def _val_indices(url: str, manifest: Any) -> list[list[int]]:
    return [b["sample_index"].tolist() for b in build_loader(url, split="val", manifest=manifest)]


def _half_and_half(url: str) -> SplitManifest:
    return make_manifest(ZarrSource.open(url).geometry, {"train": 0.5, "val": 0.5}, shuffle=True)


def test_every_form_gives_the_same_batches(memory_url: Any, tmp_path: Path) -> None:
    url, _ = memory_url()
    manifest = _half_and_half(url)
    path = tmp_path / "splits.json"
    path.write_text(manifest.dumps())
    expected = _val_indices(url, manifest)
    assert sum(len(b) for b in expected) > 0
    forms = {
        "dict": manifest.to_json(),
        "json text": manifest.dumps(),
        "json text after blanks": "\n  \t" + manifest.dumps(),
        "Path": path,
        "str path": str(path),
    }
    for form, given in forms.items():
        assert load_manifest(given) == manifest, form
        assert _val_indices(url, given) == expected, form
    assert load_manifest(manifest) is manifest


def test_a_missing_file_is_named(memory_url: Any, tmp_path: Path) -> None:
    url, _ = memory_url()
    missing = tmp_path / "nope" / "splits.json"
    for given in (missing, str(missing)):
        with pytest.raises(
            FileNotFoundError, match=f"manifest file '{re.escape(str(missing))}' does not exist"
        ):
            build_loader(url, manifest=given)


def test_a_file_that_is_not_json_names_the_file_line_and_column(
    memory_url: Any, tmp_path: Path
) -> None:
    url, _ = memory_url()
    path = tmp_path / "splits.json"
    lines = _half_and_half(url).dumps().splitlines()
    lines[2] = lines[2].rstrip(",")  # a comma lost in a hand edit, ending line 3
    path.write_text("\n".join(lines))
    with pytest.raises(ValueError) as raised:
        build_loader(url, manifest=path)
    message = str(raised.value)
    assert message.startswith(f"manifest file '{path}' is not valid JSON: Expecting ',' delimiter")
    assert "at line 4, column 2;" in message and "SplitManifest.dumps()" in message


def test_text_that_is_not_json_is_named(memory_url: Any) -> None:
    url, _ = memory_url()
    broken = _half_and_half(url).dumps()[:-3]
    with pytest.raises(ValueError, match=r"^manifest text is not valid JSON: .* at line \d+"):
        build_loader(url, manifest=broken)


def test_a_file_that_fails_the_checks_names_the_file(memory_url: Any, tmp_path: Path) -> None:
    url, _ = memory_url()
    data = _half_and_half(url).to_json()
    data["splits"]["val"].append(data["splits"]["train"][0])
    path = tmp_path / "splits.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ValueError, match=rf"^manifest file '{re.escape(str(path))}': manifest splits .* overlap"
    ):
        build_loader(url, manifest=path)


def test_a_bad_dict_or_text_is_refused_before_any_read(memory_url: Any) -> None:
    url, _ = memory_url()
    data = _half_and_half(url).to_json()
    n = ZarrSource.open(url).geometry.num_units
    data["splits"] = {"train": [[0, n + 1]]}
    pattern = rf"split 'train' range \[0, {n + 1}\) ends past the last unit: .* has {n} units"
    with pytest.raises(ValueError, match=pattern):
        build_loader(url, manifest=data)
    with pytest.raises(ValueError, match=pattern):
        build_loader(url, manifest=json.dumps(data))


@pytest.mark.parametrize("given", [3, 2.5, [{"format": 1}], b"{}", None])
def test_other_types_are_refused(given: Any) -> None:
    with pytest.raises(TypeError, match=r"manifest must be a SplitManifest, its JSON dict, its"):
        load_manifest(given)


def test_a_list_given_to_the_loader_is_a_type_error(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(TypeError, match=r"\(str or pathlib.Path\) of its JSON file; got list"):
        build_loader(url, manifest=_half_and_half(url).to_json()["splits"]["val"])


def test_a_directory_or_an_empty_string_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=f"manifest path '{re.escape(str(tmp_path))}' is a directory"
    ):
        load_manifest(tmp_path)
    with pytest.raises(ValueError, match="manifest is an empty string"):
        load_manifest("  ")


def test_a_file_that_is_not_text_is_named(tmp_path: Path) -> None:
    path = tmp_path / "splits.json"
    path.write_bytes(np.arange(64, dtype=np.uint8).tobytes()[::-1] + b"\xff\xfe")
    with pytest.raises(
        ValueError, match=f"manifest file '{re.escape(str(path))}' is not UTF-8 text"
    ):
        load_manifest(path)


def test_a_manifest_made_from_numpy_values_is_written_plain(memory_url: Any) -> None:
    url, _ = memory_url()
    geometry = ZarrSource.open(url).geometry
    manifest = make_manifest(
        geometry, {"train": np.float64(0.5), "val": np.float64(0.5)}, seed=np.int64(7)
    )
    text = manifest.dumps()
    assert load_manifest(text) == manifest
    assert type(manifest.rule["seed"]) is int and type(manifest.rule["fractions"]["val"]) is float
