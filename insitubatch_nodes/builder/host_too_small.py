"""The refusal of a budget left to the host that the settings do not fit in: what they
need, what this rank has, and what to do (`builder.loader_choices` raises it, and
`insitubatch inspect` reports it with the budget that fits).
"""

from __future__ import annotations

from insitubatch_nodes.io.host.host_resources import HostResources


class HostTooSmallError(ValueError):
    """The settings need more memory than this rank's part of the host's available
    memory: raised by `choose_loader_settings` when the budget was left to the host.

    Args:
        message: what was needed, what the host has, and what to do.
        least_budget: the least budget the settings fit in, in bytes, or None when none
            does.
    """

    def __init__(self, message: str, least_budget: int | None) -> None:
        super().__init__(message)
        self.least_budget = least_budget


def host_too_small(
    host: HostResources,
    least: int | None,
    block_chunks: int | None,
    refused: ValueError,
    shuffle_window: int | None = None,
) -> HostTooSmallError:
    """The refusal: what the settings need, what this rank has, the plan's numbers at the
    default budget, and what to do. Taking the least budget anyway means naming the
    block too when it was a default, and the pool's window (`shuffle_window`, given when
    the pool's was a default): a budget below 1 GiB given alone would shrink them.

    Args:
        host: the host the budget was left to.
        least: the least budget the settings fit in, or None when none does.
        block_chunks: the default block to name beside the least budget, or None when
            the user gave it.
        refused: the memory plan's refusal at the host's budget.
        shuffle_window: the default window to name beside the least budget, or None.
    """
    shared = (
        f" shared by {host.local_ranks} local ranks ({host.local_ranks_from})"
        if host.local_ranks > 1
        else ""
    )
    need = "more than any budget" if least is None else f"memory_budget >= {least} bytes"
    anyway = ""
    if least is not None:
        block = "" if block_chunks is None else f", block_chunks={block_chunks}"
        window = "" if shuffle_window is None else f", shuffle_window={shuffle_window}"
        anyway = f", or pass memory_budget={least}{block}{window} to take it anyway"
    return HostTooSmallError(
        f"these settings need {need}, and this host has {host.rank_memory_bytes} bytes "
        f"available for this rank ({host.memory_bytes} bytes, {host.memory_from}{shared}); "
        f"at the default budget, {refused}. Free memory or run fewer ranks on this host, "
        f"lower batch_size, block_chunks or max_inflight{anyway}",
        least,
    )
