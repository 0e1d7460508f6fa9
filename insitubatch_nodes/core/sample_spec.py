"""What one sample is: an anchor time step plus, per variable group, the steps it carries.

Forecast models do not eat single time steps: they take a short history (an input window
t-(k-1)s .. t) and predict one or more leads (t+l). A `SampleSpec` names groups of
variables and the offsets (relative to the anchor t) each group carries; the read plan
turns those offsets into chunk reads shared by every anchor of a block, and the gather
turns them into `(batch, steps, *sample_shape)` arrays. A spec-less loader is the special
case of one group per variable at offset 0, without the steps axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from insitubatch_nodes.core.settings import as_int, as_int_tuple

KEY_SEPARATOR = "/"


@dataclass(frozen=True)
class VariableGroup:
    """Variables that share the same time offsets relative to the anchor.

    Args:
        variables: the variables' names.
        offsets: the time steps each sample carries, relative to its anchor (ints; numpy
            integers are taken as Python ints, so a spec stays plain data in states).
    """

    variables: tuple[str, ...]
    offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        if isinstance(self.variables, str):
            raise TypeError(
                f"variables must be a sequence of names, got the string {self.variables!r}"
            )
        object.__setattr__(self, "variables", tuple(self.variables))
        object.__setattr__(self, "offsets", as_int_tuple("time offsets", self.offsets))
        if not self.variables:
            raise ValueError("a variable group needs at least one variable")
        if len(set(self.variables)) != len(self.variables):
            raise ValueError(f"a variable group lists a variable twice: {self.variables}")
        if not self.offsets:
            raise ValueError("a variable group needs at least one time offset")
        if len(set(self.offsets)) != len(self.offsets):
            raise ValueError(f"time offsets must be distinct, got {self.offsets}")

    @property
    def steps(self) -> int:
        return len(self.offsets)

    def to_json(self) -> dict[str, Any]:
        return {"variables": list(self.variables), "offsets": list(self.offsets)}


def window(variables: Sequence[str], steps: int, stride: int = 1) -> VariableGroup:
    """Input window ending at the anchor: offsets -(steps-1)*stride, ..., -stride, 0.

    Args:
        variables: the variables the window carries.
        steps: how many time steps (an int >= 1).
        stride: the steps between two of them (an int >= 1).
    """
    steps = as_int("window steps", steps, minimum=1)
    stride = as_int("window stride", stride, minimum=1)
    offsets = tuple(-(steps - 1 - i) * stride for i in range(steps))
    return VariableGroup(tuple(variables), offsets)


def leads(variables: Sequence[str], lead_steps: Iterable[int]) -> VariableGroup:
    """Targets after the anchor: offsets t+l for each lead l (in time steps, l >= 1).

    Args:
        variables: the variables the targets carry.
        lead_steps: the leads, in time steps after the anchor (ints >= 1).
    """
    chosen = as_int_tuple("leads", lead_steps)
    bad = [lead for lead in chosen if lead < 1]
    if bad:
        raise ValueError(f"leads are steps after the anchor and must be >= 1, got {bad}")
    return VariableGroup(tuple(variables), chosen)


@dataclass(frozen=True)
class SampleSpec:
    """Named variable groups; batches carry one `group/variable` array per pair."""

    groups: Mapping[str, VariableGroup]

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("a sample spec needs at least one group, e.g. {'inputs': window(...)}")
        for name in self.groups:
            if not name or KEY_SEPARATOR in name:
                raise ValueError(f"group names must be non-empty and free of '/', got {name!r}")

    @property
    def span(self) -> tuple[int, int]:
        """The lowest and highest offset, the anchor itself (0) included."""
        offsets = [0, *(o for group in self.groups.values() for o in group.offsets)]
        return min(offsets), max(offsets)

    def variables(self) -> list[str]:
        """Every variable the spec reads, in first-mentioned order."""
        seen: dict[str, None] = {}
        for group in self.groups.values():
            seen.update(dict.fromkeys(group.variables))
        return list(seen)

    def variable_offsets(self) -> dict[str, tuple[int, ...]]:
        """Per variable, the sorted offsets any group needs: what the read plan fetches."""
        found: dict[str, set[int]] = {}
        for group in self.groups.values():
            for variable in group.variables:
                found.setdefault(variable, set()).update(group.offsets)
        return {v: tuple(sorted(offsets)) for v, offsets in found.items()}

    def fields(self) -> list[tuple[str, str, str, tuple[int, ...]]]:
        """`(batch key, group, variable, offsets)` for every array a batch carries."""
        return [
            (batch_key(group_name, variable), group_name, variable, group.offsets)
            for group_name, group in self.groups.items()
            for variable in group.variables
        ]

    def scaled(self, steps: int) -> SampleSpec:
        """The spec with every offset multiplied by `steps`: windows and leads counted in
        units of a stride (`window(steps=2)` at a stride of 6 is t-6, t).

        Args:
            steps: stored steps per unit of the spec's offsets, an int >= 1.
        """
        steps = as_int("stride", steps, minimum=1)
        return SampleSpec(
            {
                name: VariableGroup(group.variables, tuple(o * steps for o in group.offsets))
                for name, group in self.groups.items()
            }
        )

    def to_json(self) -> dict[str, Any]:
        return {name: group.to_json() for name, group in self.groups.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SampleSpec:
        return cls(
            {
                name: VariableGroup(tuple(g["variables"]), tuple(g["offsets"]))
                for name, g in data.items()
            }
        )


def batch_key(group: str, variable: str) -> str:
    return f"{group}{KEY_SEPARATOR}{variable}"
