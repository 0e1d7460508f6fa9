"""Staging, copies and GPU decode (the CUDA parts skip without CUDA)."""
