"""Chunk bytes fetched on one event loop, verified and decoded into block memory."""
