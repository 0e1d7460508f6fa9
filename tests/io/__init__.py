"""Stores, metadata, reads, decoding, the cache: real zarr stores, a real S3 API on
loopback, injected faults."""
