"""Refuse a state saved under a different configuration, instead of resuming wrongly.

Resume is exact only for the same seed, world size, block size and batch size; nodes keep
those few integers in their state and compare them on `reset(state)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONFIG_KEY = "config"


def check_saved_config(node: str, state: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    saved = state.get(CONFIG_KEY, {})
    changed = {k: (saved[k], v) for k, v in current.items() if k in saved and saved[k] != v}
    if changed:
        raise ValueError(
            f"{node} state was saved with "
            + ", ".join(f"{k}={old!r}" for k, (old, _) in changed.items())
            + " but this graph has "
            + ", ".join(f"{k}={new!r}" for k, (_, new) in changed.items())
            + "; rebuild the loader with the saved settings to resume"
        )
