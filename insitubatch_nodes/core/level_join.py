"""Level coordinates of a join aligned as `xr.merge` aligns them.

Two stores (or two Datasets) may both hold a `level` dimension with different values:
one selected to [500, 850], another to [850, 1000]; a pressure-level store of 13 levels
beside one of 37. `xr.merge` aligns every variable along `level` on one index:
`join="exact"` refuses indexes that differ (values or order), `join="inner"` keeps the
values every one holds, in the first one's order (pandas' `Index.intersection`). A loader
that gave each variable its own levels instead would hand the model batches that no
merged Dataset shows, so the join takes xr.merge's rule, and refuses an inner join that
leaves no level (a batch of nothing along it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def join_levels(
    dim: str, held: Sequence[tuple[str, list[Any]]], join: str, kind: str, remedy: str
) -> list[Any] | None:
    """The values every variable along `dim` is read at, or None where all holders agree
    (each keeps its own); an error where `xr.merge(join=join)` refuses, or keeps nothing.

    Args:
        dim: the level dimension's name, the same in every holder.
        held: per holder (a store or a Dataset) that has `dim`: how messages name it, and
            its values along `dim`, in order.
        join: `"exact"` or `"inner"`.
        kind: what the holders are, for messages (`"stores"`, `"Datasets"`).
        remedy: how to select the same values on each, for messages.
    """
    (first_label, first), others = held[0], held[1:]
    differing = [(label, values) for label, values in others if values != first]
    if not differing:
        return None
    if join == "exact":
        label, values = differing[0]
        shared = min(len(first), len(values))
        at = next((k for k in range(shared) if first[k] != values[k]), shared)
        texts = [repr(v[at]) if at < len(v) else "nothing (it ends)" for v in (first, values)]
        raise ValueError(
            f"the {dim!r} coordinates of the joined {kind} differ: {first_label} holds "
            f"{first} and {label} holds {values}, first at position {at} ({texts[0]} and "
            f"{texts[1]}); join='exact' takes {kind} whose coordinates are equal, as "
            f"xr.merge(join='exact') does: {remedy}, or pass join='inner' (the values all "
            f"of them hold)"
        )
    kept = [v for v in first if all(v in values for _, values in others)]
    if not kept:
        listed = "; ".join(f"{label}: {values}" for label, values in held)
        raise ValueError(
            f"the joined {kind} hold no {dim!r} value in common ({listed}): "
            f"xr.merge(join='inner') would leave their variables without a {dim!r} value, "
            f"no batch to train on; {remedy}"
        )
    return kept
