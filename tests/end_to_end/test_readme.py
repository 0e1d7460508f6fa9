"""The README's runnable examples run as written (all but the quickstart, which needs a
bucket and a model): a README that lies is a bug."""

from __future__ import annotations

import re

from insitubatch_nodes import forget_memory_store
from tests.helpers.paths import README


def test_readme_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    runnable = [b for b in blocks if "s3://" not in b]
    assert len(runnable) >= 3
    namespace: dict[str, object] = {}
    try:
        for block in runnable:
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        forget_memory_store("readme")
