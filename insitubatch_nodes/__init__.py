"""insitubatch-nodes: train in place on Zarr archives with a torchdata.nodes graph."""

from insitubatch_nodes.builder.build_loader import build_loader
from insitubatch_nodes.cli.stats_pass import compute_stats
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.area import Area, AreaSelection
from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.channels import batch_channels
from insitubatch_nodes.core.date_manifest import make_date_manifest
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.sample_spec import SampleSpec, VariableGroup, leads, window
from insitubatch_nodes.io.cache.chunk_cache import CacheSpec
from insitubatch_nodes.io.host.fork_guard import ForkedProcessError
from insitubatch_nodes.io.joined_source import open_source
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.chunk_errors import ChunkReadError, CorruptChunkError
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.stores.icechunk_store import open_icechunk
from insitubatch_nodes.io.stores.open_store import forget_memory_store, memory_store, open_store
from insitubatch_nodes.io.zarr_source import ZarrSource
from insitubatch_nodes.loader.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.cf_decode import CFDecodeNode
from insitubatch_nodes.nodes.channel_stats import ChannelStats, stats_path
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.gather import GatherNode
from insitubatch_nodes.nodes.items import Batch
from insitubatch_nodes.nodes.normalise import NormaliseNode
from insitubatch_nodes.nodes.pin_to_device import PinToDeviceNode
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from insitubatch_nodes.nodes.read_planner import ReadPlanNode
from insitubatch_nodes.nodes.shuffle_block import ShuffleBlockNode
from insitubatch_nodes.nodes.stack_channels import StackChannelsNode
from insitubatch_nodes.nodes.static_fields import StaticFieldsNode

__all__ = [
    "PATCH_ORIGIN_KEY",
    "SAMPLE_INDEX_KEY",
    "AnchorSet",
    "Area",
    "AreaSelection",
    "AsyncFetchNode",
    "Batch",
    "CFDecodeNode",
    "CacheSpec",
    "ChannelStats",
    "ChunkPermuteNode",
    "ChunkReadError",
    "CorruptChunkError",
    "ForkedProcessError",
    "GatherNode",
    "Loader",
    "NormaliseNode",
    "PatchSpec",
    "PinToDeviceNode",
    "PoolShuffleNode",
    "ReadContext",
    "ReadPlanNode",
    "RetryPolicy",
    "SampleGeometry",
    "SampleSpec",
    "ShuffleBlockNode",
    "SplitManifest",
    "StackChannelsNode",
    "StaticFieldsNode",
    "VariableGroup",
    "VariableLayout",
    "ZarrSource",
    "batch_channels",
    "build_loader",
    "compute_stats",
    "forget_memory_store",
    "leads",
    "make_date_manifest",
    "make_manifest",
    "memory_store",
    "open_icechunk",
    "open_source",
    "open_store",
    "stats_path",
    "window",
]
