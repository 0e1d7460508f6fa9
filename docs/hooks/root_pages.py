"""Serve DESIGN.md and CHANGELOG.md, kept at the repository's root, as pages of the site.

They stay where a maintainer looks for them (and where GitHub shows them); the site gets a
copy at build time. DESIGN.md links into docs/ as seen from the root, so those links are
made relative to the page the copy becomes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"DESIGN.md": "design/index.md", "CHANGELOG.md": "changelog.md"}


def on_files(files: Files, config: Any) -> Files:
    for source, uri in PAGES.items():
        files.append(File.generated(config, uri, content=(ROOT / source).read_text()))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "design/index.md":
        markdown = markdown.replace("](docs/design/", "](").replace("](docs/", "](../")
    elif page.file.src_uri == "changelog.md":
        markdown = markdown.replace("](docs/", "](")
    return markdown
