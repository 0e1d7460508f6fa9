"""insitubatch-nodes: train in place on Zarr archives with a torchdata.nodes graph."""

from insitubatch_nodes.builder import build_loader
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.sample_spec import SampleSpec, VariableGroup, leads, window
from insitubatch_nodes.io.chunk_reader import ChunkReadError
from insitubatch_nodes.io.stores import forget_memory_store, memory_store, open_store
from insitubatch_nodes.io.zarr_source import ZarrSource
from insitubatch_nodes.items import SAMPLE_INDEX_KEY
from insitubatch_nodes.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.gather import GatherNode
from insitubatch_nodes.nodes.pin_to_device import PinToDeviceNode
from insitubatch_nodes.nodes.read_plan import ReadPlanNode
from insitubatch_nodes.nodes.shuffle_block import ShuffleBlockNode

__all__ = [
    "SAMPLE_INDEX_KEY",
    "AnchorSet",
    "AsyncFetchNode",
    "ChunkPermuteNode",
    "ChunkReadError",
    "GatherNode",
    "Loader",
    "PinToDeviceNode",
    "ReadPlanNode",
    "SampleGeometry",
    "SampleSpec",
    "ShuffleBlockNode",
    "SplitManifest",
    "VariableGroup",
    "VariableLayout",
    "ZarrSource",
    "build_loader",
    "forget_memory_store",
    "leads",
    "make_manifest",
    "memory_store",
    "open_store",
    "window",
]
