"""The units a stride is dealt in: units that each hold the same number of anchors.

A stride of k steps keeps the steps 0, k, 2k, ... (counted from the store's first) as
anchors. Against units of u steps (the store's unit, or a visit's with revisits), the
anchors a unit holds are equal everywhere only when the two fit:

- k divides u: every unit holds u / k anchors;
- u divides k, or more generally k > u: a run of u < k steps holds at most one multiple
  of k, so every unit holding an anchor holds exactly one; the others hold none and are
  left out of the epoch, as units without anchors always are;
- k < u and k does not divide u (a stride of 3 on chunks of 4): units would hold
  floor(u / k) or ceil(u / k) anchors, so nearly every unit would be short, and short
  units are dealt in a fixed order (`core.short_unit_deal`), never shuffled. The units are then
  lcm(k, u) steps long: a whole number of both, so each holds lcm / k anchors and the
  grid stays aligned with the chunks wherever u's was (every chunk read once an epoch).

Longer units cost memory: each holds lcm / u of the old units' bytes, so the pool holds
fewer of them and a block budget may no longer fit one. The other fitting choice is left
to the user, since it trades memory for reads and only they know which is scarce:
`revisits` that cut the units into visits of at most k steps
(`StrideUnits.revisits_alternative`), each then holding one anchor or none, a chunk read
once per anchor it holds. The text and a budget refusal name it.

The choice is a pure function of k and u (the store's chunking, the split manifest's grid
and `revisits`), never of the host, so every machine and any number of ranks read one
grid; the loader records the units in its state, so a state of another grid is refused.
Split boundaries do not move: they are the manifest's, in steps, and a longer unit that
straddles one is read by both splits, each using its own anchors (`AnchorSet.for_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FITS = "fits"
AT_MOST_ONE = "at most one"
LEAST_COMMON_MULTIPLE = "least common multiple"


@dataclass(frozen=True)
class StrideUnits:
    """The units chosen for a stride, and why.

    Args:
        stride: steps between anchors (1 without a stride or frequency).
        grid_steps: steps per unit of the loader's grid without the stride (the store's
            unit, or a visit's with revisits).
        unit_steps: steps per unit the loader deals (`grid_steps`, or the least common
            multiple of it and the stride).
        rule: which case chose them: `FITS`, `AT_MOST_ONE` or `LEAST_COMMON_MULTIPLE`.
        revisits: the visits per unit the grid was cut into (`build_loader(revisits=...)`),
            to name the revisits that would deal the stride in smaller units instead.
    """

    stride: int
    grid_steps: int
    unit_steps: int
    rule: str
    revisits: int = 1

    @property
    def anchors_per_unit(self) -> int:
        """The anchors a unit holds away from the split's edges and the store's end."""
        return max(1, self.unit_steps // self.stride)

    def revisits_alternative(self) -> tuple[int, int] | None:
        """With units of the least common multiple, the `revisits` (of the store's unit)
        that would instead cut the grid's units into the longest visits of at most a
        stride, each holding one anchor or none, and those visits' steps; else None."""
        if self.rule != LEAST_COMMON_MULTIPLE:
            return None
        visit = max(d for d in range(1, self.stride + 1) if self.grid_steps % d == 0)
        return self.revisits * (self.grid_steps // visit), visit

    def memory_hint(self) -> str:
        """What the longer units cost and the choice that costs less memory, for a budget
        refusal; empty unless the units are the least common multiple."""
        other = self.revisits_alternative()
        if other is None:
            return ""
        revisits, visit = other
        return (
            f"a stride of {self.stride} steps is dealt in units of {self.unit_steps} steps, "
            f"{self.unit_steps // self.grid_steps}x the memory of a unit of {self.grid_steps}; "
            f"revisits={revisits} deals it in units of {visit} step"
            f"{'' if visit == 1 else 's'}, one anchor or none each, for less memory and "
            f"more reads"
        )

    def text(self) -> str:
        """What was chosen and why, for the log and `insitubatch inspect`."""
        k, u, unit = self.stride, self.grid_steps, self.unit_steps
        other = self.revisits_alternative()
        if other is not None:
            revisits, visit = other
            return (
                f"units of {unit} steps: a stride of {k} steps does not divide units of {u} "
                f"steps, so units are their least common multiple, each holding "
                f"{self.anchors_per_unit} anchors ({unit // u}x the memory of a unit of {u}; "
                f"revisits={revisits} would deal it in units of {visit} step"
                f"{'' if visit == 1 else 's'}, one anchor or none each, for more reads)"
            )
        if self.rule == AT_MOST_ONE:
            return (
                f"units of {unit} steps: a stride of {k} steps is longer than a unit, so "
                f"each unit holds one anchor or none (units with none are left out of the epoch)"
            )
        if k == 1:
            return f"units of {unit} steps"
        return (
            f"units of {unit} steps, each holding {self.anchors_per_unit} anchors of a stride "
            f"of {k}"
        )


def stride_units(grid_steps: int, stride: int, revisits: int = 1) -> StrideUnits:
    """The units a loader with `stride` deals, on a grid of `grid_steps` (see the module).

    Args:
        grid_steps: steps per unit without the stride (an int >= 1).
        stride: steps between anchors (an int >= 1; 1 for every step).
        revisits: the visits per unit that made `grid_steps` (1 for the store's units);
            it changes no choice, only the alternative named.
    """
    if grid_steps < 1 or stride < 1:
        raise ValueError(
            f"units of {grid_steps} steps and a stride of {stride} steps: both must be >= 1"
        )
    if grid_steps % stride == 0:
        return StrideUnits(stride, grid_steps, grid_steps, FITS, revisits)
    if stride > grid_steps:
        return StrideUnits(stride, grid_steps, grid_steps, AT_MOST_ONE, revisits)
    lcm = math.lcm(stride, grid_steps)
    return StrideUnits(stride, grid_steps, lcm, LEAST_COMMON_MULTIPLE, revisits)
