"""Settings a user passes (sizes, counts, seeds, switches) as plain Python ints and bools.

Settings end up in states (`loader.state_dict()`), in seeds of random streams and in
arithmetic on array shapes. A numpy scalar there would make a state that
`torch.load(weights_only=True)` refuses; a float or a string would fail far from where it
was passed (or, for `"false"` as a switch, be silently true). So every setting is checked
where the user hands it over, by the node that owns it (and by `build_loader` for what it
uses before that node exists): numpy integers and booleans become Python ones, anything
else of the wrong kind is refused with the value and what is accepted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def _accepted(minimum: int | None) -> str:
    return "an int" if minimum is None else f"an int >= {minimum}"


def as_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """`value` as a Python int, refused unless it is an int (Python or numpy) >= `minimum`.

    Args:
        name: the setting's name, for the error message (e.g. "batch_size").
        value: what the user passed.
        minimum: the smallest value allowed, or None for no bound.

    Raises:
        TypeError: `value` is not an integer (a float, a string, a bool, ...).
        ValueError: `value` is below `minimum`.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(
            f"{name} must be {_accepted(minimum)}, got {value!r} ({type(value).__name__}); "
            f"pass a whole number (a Python or numpy integer)"
        )
    number = int(value)
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def as_optional_int(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    """`as_int` for settings where None means "pick a default".

    Args:
        name: the setting's name, for the error message.
        value: what the user passed, or None.
        minimum: the smallest value allowed, or None for no bound.
    """
    return None if value is None else as_int(name, value, minimum=minimum)


def as_bool(name: str, value: Any) -> bool:
    """`value` as a Python bool, refused unless it is one (Python or numpy): a string such
    as "false" or a number would otherwise switch on whatever its truth value is.

    Args:
        name: the setting's name, for the error message (e.g. "drop_last").
        value: what the user passed.

    Raises:
        TypeError: `value` is not a bool.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def as_int_tuple(name: str, values: Any, *, minimum: int | None = None) -> tuple[int, ...]:
    """A sequence of ints (a patch size, lead steps, offsets) as a tuple of Python ints.

    Args:
        name: the setting's name, for the error message (e.g. "patch size").
        values: what the user passed: any iterable of integers, not a string.
        minimum: the smallest value each entry may take, or None for no bound.

    Raises:
        TypeError: `values` is not an iterable of integers.
        ValueError: an entry is below `minimum`.
    """
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be a sequence of ints, got {values!r} ({type(values).__name__})"
        )
    return tuple(as_int(f"each entry of {name}", v, minimum=minimum) for v in values)


def int_from_environment(environment: Mapping[str, str], variable: str, default: int) -> int:
    """The int in environment variable `variable` (as torchrun sets RANK, WORLD_SIZE and
    LOCAL_RANK), or `default` when it is unset.

    Args:
        environment: the environment to read (`os.environ`).
        variable: the variable's name.
        default: the value when the variable is not set.

    Raises:
        ValueError: the variable is set to something that is not an int.
    """
    text = environment.get(variable)
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(
            f"the environment variable {variable} is {text!r}, which is not an int; set it to "
            f"a whole number (torchrun sets it for each process) or unset it"
        ) from None
