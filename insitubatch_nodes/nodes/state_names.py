"""The names node states are saved under (`state_checks.NODE_KEY`), one per node class.

A saved state names the node that saved it, so that a state is loaded only into the same
kind of node, and so that elastic resume finds the parts it reads in a state it did not
make (`loader.elastic_resume`). The names are part of the state format: they are the
class names of the release that first saved them, and a class renamed or moved keeps its
name here, so that its saved states still load. Each node class declares its own as
`STATE_NAME`; code that looks for a node's state asks that constant, never a literal.
"""

from __future__ import annotations

CHUNK_PERMUTE = "ChunkPermuteNode"
READ_PLAN = "ReadPlanNode"
ASYNC_FETCH = "AsyncFetchNode"
SHUFFLE_BLOCK = "ShuffleBlockNode"
POOL_SHUFFLE = "PoolShuffleNode"
GATHER = "GatherNode"
STACK_CHANNELS = "StackChannelsNode"
PIN_TO_DEVICE = "PinToDeviceNode"
NORMALISE = "NormaliseNode"
FORCINGS = "ForcingsNode"
