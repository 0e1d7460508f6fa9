"""The store options every `insitubatch` command that reads a store takes.

`inspect`, `bench`, `split`, `cache` and `stats` reach the same stores the same way: obstore
client options given as JSON text or a JSON file (`--storage-options`), and `--anonymous`
for public buckets. They live here, declared once and read once, so that the commands
cannot drift apart in what they accept or in how they refuse a typo; `cli.parser` and
`cli.main` only wire them in. Each takes one URL or several, joined as one source:
`--storage-options` once for every store or once per store in the URLs' order, and
`--join`, as `build_loader(source=[...], storage_options=..., join=...)` takes them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# Schemes whose requests are signed, so that `--anonymous` (obstore's `skip_signature`)
# means something; a local path or plain HTTP has nothing to skip.
_SIGNED_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure")


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def add_store_options(command: argparse.ArgumentParser) -> None:
    """Declare `--storage-options`, `--anonymous` and `--join` on a command's parser (every
    command that reads stores takes one URL or several, joined as one source).

    Args:
        command: the parser of a command that reads a store.
    """
    command.add_argument(
        "--storage-options",
        action="append",
        default=None,
        help="obstore client options (credentials, endpoint, region): JSON text or the path "
        "of a JSON file; for several stores, once for every store or once per store in the "
        "URLs' order",
    )
    command.add_argument(
        "--anonymous", action="store_true", help="unsigned requests (public s3/gs/az buckets)"
    )
    command.add_argument(
        "--join",
        choices=("exact", "inner"),
        default="exact",
        help="how several stores are aligned on time: exact (the default) refuses differing "
        "dates, inner keeps the dates every store holds",
    )


def storage_options_from(text: str | None, anonymous: bool, url: str) -> dict[str, Any] | None:
    """The `storage_options` a command was given: JSON text (an object, so starting with
    "{") or the path of a file holding it, plus `skip_signature` for `--anonymous` on a store
    whose requests are signed.

    Args:
        text: the `--storage-options` value, or None.
        anonymous: whether `--anonymous` was given.
        url: the store's URL, whose scheme says whether requests are signed.
    """
    options: dict[str, Any] | None = None
    if text is not None:
        source = "--storage-options"
        if not text.lstrip().startswith(("{", "[")):  # JSON text, else a file
            path = Path(text).expanduser()
            if not path.is_file():
                raise ValueError(
                    "--storage-options is neither JSON text (starting with '{') nor the path "
                    'of a JSON file; give e.g. \'{"region": "us-west-2"}\' or a file holding it'
                )
            source = f"--storage-options file {str(path)!r}"
            text = path.read_text(encoding="utf-8")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as err:  # its message quotes no text, only where
            raise ValueError(
                f"{source} is not valid JSON ({err.msg} at line {err.lineno}, column "
                f'{err.colno}); give an object such as \'{{"region": "us-west-2"}}\''
            ) from None
        if not isinstance(parsed, dict):
            raise ValueError(
                f"{source} must be a JSON object of obstore client options, got "
                f"{_JSON_KINDS.get(type(parsed), 'something else')}"
            )
        options = parsed
    if anonymous and urlsplit(url).scheme.lower() in _SIGNED_SCHEMES:
        options = {**(options or {}), "skip_signature": True}
    return options


def joined_storage_options(
    texts: list[str] | None, anonymous: bool, urls: list[str]
) -> dict[str, Any] | list[dict[str, Any] | None] | None:
    """The `storage_options` of a command given one URL or several: for one, its options
    (`storage_options_from`); for several, one dict (or None) per store, in order, each
    with `skip_signature` under `--anonymous` where that store's requests are signed.

    Args:
        texts: the `--storage-options` values (given once for every store, or once per
            store), or None.
        anonymous: whether `--anonymous` was given.
        urls: the stores' URLs, as given.
    """
    texts = texts or []
    if len(texts) not in (0, 1, len(urls)):
        raise ValueError(
            f"--storage-options is given {len(texts)} times for {len(urls)} stores: give it "
            f"once for every store, or once per store in the order of the URLs"
        )
    per_store = texts if len(texts) == len(urls) else [texts[0] if texts else None] * len(urls)
    options = [
        storage_options_from(text, anonymous, url)
        for text, url in zip(per_store, urls, strict=True)
    ]
    return options[0] if len(urls) == 1 else options
