"""How many batches are copied to the device ahead of the step, and how many staging
slots that takes: one rule that the gather (which fills the slots), the device copy
(which empties them) and the memory plan (which counts them) all read, so that none of
them has to ask another node for it."""

from __future__ import annotations

import torch

CUDA_PREFETCH = 2  # the copy of batch k+1 overlaps the step on k, with one to spare


def default_prefetch(device: torch.device) -> int:
    """Batches copied ahead: `CUDA_PREFETCH` on CUDA; none elsewhere, where nothing is
    copied.

    Args:
        device: where batches go.
    """
    return CUDA_PREFETCH if device.type == "cuda" else 0


def staging_slots(prefetch: int) -> int:
    """One slot per batch that may be in flight: the prefetched ones and the newest.

    Args:
        prefetch: batches copied ahead of the one handed out.
    """
    return prefetch + 1
