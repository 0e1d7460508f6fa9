"""The README's and the docs' examples run as written: a page that lies is a bug.

Every ```python block of README.md, DESIGN.md and docs/**/*.md runs, the blocks of one page
in order in one namespace (a page's later examples use what its first ones made). Left
out: blocks that need a bucket (they name "s3://", as the quickstart does) and blocks
whose first line is `# not run: <why>`, the marker for anything else a test cannot give
(a model, a GPU cluster). And every name the package exports has its reference page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import insitubatch_nodes
from insitubatch_nodes import forget_memory_store
from tests.helpers.paths import README, REPO

DOCS = REPO / "docs"
PAGES = [README, REPO / "DESIGN.md", *sorted(DOCS.rglob("*.md"))]
NOT_RUN = "# not run:"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def runs(block: str) -> bool:
    return "s3://" not in block and not block.startswith(NOT_RUN)


PAGES_WITH_EXAMPLES = [page for page in PAGES if any(map(runs, python_blocks(page)))]


def test_the_examples_are_found() -> None:
    """A pattern that found no block would pass every page: the hand-built graph and the
    guides' examples must be among what runs."""
    found = {page.relative_to(REPO).as_posix() for page in PAGES_WITH_EXAMPLES}
    assert {"docs/getting-started.md", "docs/guides/frameworks.md"} <= found
    assert sum(len([b for b in python_blocks(p) if runs(b)]) for p in PAGES) >= 15


@pytest.mark.parametrize(
    "page", PAGES_WITH_EXAMPLES, ids=[p.relative_to(REPO).as_posix() for p in PAGES_WITH_EXAMPLES]
)
def test_examples_run(page: Path) -> None:
    text = page.read_text()
    namespace: dict[str, object] = {}
    try:
        for block in filter(runs, python_blocks(page)):
            exec(compile(block, str(page), "exec"), namespace)
    finally:
        for name in set(re.findall(r'memory_store\("([^"]+)"\)', text)):
            forget_memory_store(name)


def test_every_exported_name_has_a_reference_entry() -> None:
    pages = "".join(page.read_text() for page in (DOCS / "reference").glob("*.md"))
    documented = re.findall(r"^::: insitubatch_nodes\.(\w+)$", pages, flags=re.M)
    assert sorted(documented) == sorted(insitubatch_nodes.__all__)
