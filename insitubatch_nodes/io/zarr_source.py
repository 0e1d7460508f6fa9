"""ZarrSource: an opened store, its selected variables, and the split manifest that fits it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.io.stores import describe, open_store
from insitubatch_nodes.io.zarr_layout import open_root_group, select_variables
from insitubatch_nodes.items import SAMPLE_INDEX_KEY

ManifestLike = SplitManifest | Mapping[str, Any] | str | Path


def load_manifest(manifest: ManifestLike) -> SplitManifest:
    """A manifest object, its JSON dict, or the path of a JSON file."""
    if isinstance(manifest, SplitManifest):
        return manifest
    if isinstance(manifest, str | Path):
        return SplitManifest.loads(Path(manifest).read_text())
    return SplitManifest.from_json(manifest)


@dataclass(frozen=True)
class ZarrSource:
    store: Store
    where: str
    layouts: Mapping[str, VariableLayout]
    geometry: SampleGeometry
    manifest: SplitManifest

    @classmethod
    def open(
        cls,
        source: str | Path | Store,
        variables: Sequence[str] | None = None,
        *,
        manifest: ManifestLike | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> ZarrSource:
        """Open `source`, pick the variables, and check (or make) the split manifest.

        Without a manifest the default one is cut: contiguous train/val/test at 0.8/0.1/0.1
        (on a store too short for three splits, asking for an empty one is the error).
        """
        where = describe(source)
        store = open_store(source, storage_options)
        group = open_root_group(store, where)
        layouts = select_variables(group, variables, where)
        if SAMPLE_INDEX_KEY in layouts:
            raise ValueError(
                f"a variable is named {SAMPLE_INDEX_KEY!r}, which batches use for the sample "
                f"indices; select the other variables explicitly"
            )
        if manifest is None:
            geometry = SampleGeometry.from_layouts(layouts)
            split_manifest = make_manifest(geometry, allow_empty=True)
        else:
            split_manifest = load_manifest(manifest)
            geometry = split_manifest.geometry_for(layouts)
        return cls(store, where, layouts, geometry, split_manifest)

    def split_units(self, split: str) -> np.ndarray:
        return self.manifest.units(split)
