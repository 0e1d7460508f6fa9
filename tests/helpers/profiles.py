"""How much of its generated cases the suite runs: all of them under the "ci" profile,
a quarter under "dev", the default, so that `make test` on a laptop stays a few minutes.

Generated cases are a property test's examples and the cuts of an every-cut resume check
(`tests.helpers.resume_check`). CI runs the "ci" profile (`.ci/run`), so every case still
runs there; `HYPOTHESIS_PROFILE=ci make test` runs them here. A test that sets its own
`max_examples` takes `examples(n)`, n being its count under "ci", when it takes more than
a few seconds; the cheap ones keep their count under both profiles.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

CI = "ci"
DEV = "dev"
# every case under "ci"; one in this many under "dev"
STRIDE = {CI: 1, DEV: 4}
# hypothesis's own default, which the suite ran with before there were profiles
CI_EXAMPLES = 100
# fewer examples than this find too little to be worth running
LEAST_EXAMPLES = 5


def profile() -> str:
    """The profile `HYPOTHESIS_PROFILE` names ("dev" when unset); any other name is
    refused, so a typo never runs the suite under a profile nobody meant."""
    name = os.environ.get("HYPOTHESIS_PROFILE", DEV)
    if name not in STRIDE:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: use one of {sorted(STRIDE)}")
    return name


def examples(full: int) -> int:
    """Examples for a property test that draws `full` under "ci": a quarter of them under
    "dev", but at least `LEAST_EXAMPLES` (and never more than `full`).

    Args:
        full: the test's examples under "ci".
    """
    stride = STRIDE[profile()]
    return full if stride == 1 else min(full, max(LEAST_EXAMPLES, full // stride))


def spread(cases: int) -> list[int]:
    """Which of `cases` generated cases (0 .. cases - 1) to run: all under "ci"; under
    "dev" every fourth one, the first two and the last two always among them (a resume
    check's edges: no item taken, one, all but the last, all).

    Args:
        cases: how many cases there are.
    """
    stride = STRIDE[profile()]
    edges = {0, 1, cases - 2, cases - 1}
    return sorted({*range(0, cases, stride), *(i for i in edges if 0 <= i < cases)})


def load_profile() -> None:
    """Register both profiles with hypothesis and load the one `HYPOTHESIS_PROFILE` names
    (`tests/conftest.py` calls this before any test module is collected)."""
    # both on hypothesis's default profile; "ci" replaces hypothesis's own "ci" (which
    # differs from the default in more than the count, and loads itself where CI is set)
    # No deadline: a property test checks what a function returns, never how fast (speed
    # is the benchmarks' job), and on a loaded machine or beside a second worker the
    # default 200 ms per example failed examples that pass alone.
    default = settings(settings.get_profile("default"), deadline=None)
    settings.register_profile(CI, default, max_examples=CI_EXAMPLES)
    settings.register_profile(DEV, default, max_examples=examples(CI_EXAMPLES))
    settings.load_profile(profile())


def loader_property(full: int) -> settings:
    """Settings for a property test that builds a loader per example from a function-scoped
    store fixture: `examples(full)` examples, and neither the fixture's reuse across
    examples (each example writes its own store under it) nor a slow example (a loader per
    example takes tenths of a second) counts as a failed health check.

    Args:
        full: the test's examples under "ci".
    """
    return settings(
        max_examples=examples(full),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
