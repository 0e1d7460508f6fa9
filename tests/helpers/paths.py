"""Where the repository's parts lie, and the environment a test's child process needs to
import `tests.helpers` as the test itself does."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"
README = REPO / "README.md"
RECIPES = REPO / "recipes"


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository first on `PYTHONPATH`, plus `extra`.

    Args:
        extra: more variables to set.
    """
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, **extra}
