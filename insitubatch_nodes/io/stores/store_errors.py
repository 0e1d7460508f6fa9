"""Turn what an object store says when it cannot be used into what the user should do.

obstore's errors carry a multi-line debug dump; the first line says what happened, and the
kind of failure (no credentials, refused, unreachable, misspelled option) says what to fix.
Every message built here goes through `redact`: obstore's text echoes the request URL
(userinfo and signed query string included) and servers echo parts of the request.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import obstore
import obstore.exceptions

from insitubatch_nodes.io.stores.redact import redact

CREDENTIAL_HINT = (
    "pass credentials in storage_options (S3: access_key_id and secret_access_key; GCS: "
    "service_account_key; Azure: account_key or sas_key) or in the provider's environment "
    "variables, or skip_signature=True for public data"
)
# With no keys given, clients fall back to the cloud's instance metadata service; failing
# there (or failing to load a credential) means no credentials were found.
_NO_CREDENTIALS = (
    "credential",
    "169.254.169.254",
    "/latest/api/token",
    "/latest/meta-data",
    "metadata.google.internal",
)


# What S3 (and S3-compatible servers), GCS and Azure answer for a bucket or container that
# is not there.
_NO_BUCKET = ("nosuchbucket", "bucket does not exist", "containernotfound")


def first_line(err: BaseException, secrets: Iterable[str] = ()) -> str:
    """The first line of `err`'s text, redacted: what a message quotes of a dependency's
    error (the rest is a debug dump).

    Args:
        err: the error to quote.
        secrets: values known to be secret (`redact.secrets_in`), removed besides the
            patterns `redact` always applies.
    """
    text = redact(str(err), secrets).strip()
    return text.splitlines()[0] if text else type(err).__name__


def bad_option(
    where: str,
    err: obstore.exceptions.UnknownConfigurationKeyError,
    secrets: Iterable[str] = (),
) -> ValueError:
    """The error for a storage option obstore does not know (obstore names the key).

    Args:
        where: the store's URL, as `io.stores.open_store.describe` gives it.
        err: obstore's error.
        secrets: values known to be secret (`redact.secrets_in`).
    """
    return ValueError(
        redact(
            f"storage_options for {where!r}: {first_line(err, secrets)} Check the spelling "
            f"against obstore's options for that store",
            secrets,
        )
    )


def explain_open_failure(
    err: BaseException, where: str, secrets: Iterable[str] = ()
) -> Exception | None:
    """A clearer error for failing to read `where`'s metadata, or `None` to keep `err`.

    Args:
        err: what obstore raised.
        where: the store's description (`io.stores.open_store.describe`).
        secrets: values known to be secret (`redact.secrets_in`), kept out of the message.
    """
    if isinstance(
        err, obstore.exceptions.UnauthenticatedError | obstore.exceptions.PermissionDeniedError
    ):
        return PermissionError(
            redact(
                f"{where} refused access: {first_line(err, secrets)}; {CREDENTIAL_HINT}", secrets
            )
        )
    if not isinstance(err, obstore.exceptions.GenericError):
        return None
    # Without query strings: a presigned URL's `X-Amz-Credential=` is not a missing one.
    text = re.sub(r"(://[^\s?]*)\?\S*", r"\1", str(err)).lower()
    if any(sign in text for sign in _NO_CREDENTIALS):
        return PermissionError(redact(f"no credentials for {where}: {CREDENTIAL_HINT}", secrets))
    return ConnectionError(
        redact(
            f"could not read {where}: {first_line(err, secrets)}; check the URL, and the "
            f"endpoint and region in storage_options",
            secrets,
        )
    )


def explain_list_failure(
    err: BaseException, where: str, http: bool, secrets: Iterable[str] = ()
) -> Exception | None:
    """A clearer error for failing to list the arrays of `where`'s root group, or `None` to
    keep `err`.

    Zarr lists a group's members unless its metadata is consolidated, and a plain HTTP
    server does not answer listings (WebDAV's PROPFIND): such a store can only be read
    with consolidated metadata.

    Args:
        err: what obstore raised.
        where: the store's description (`io.stores.open_store.describe`).
        http: whether the store is obstore's `HTTPStore`.
        secrets: values known to be secret (`redact.secrets_in`), kept out of the message.
    """
    refused = any(f" {status} " in str(err) for status in (405, 501))
    if http and isinstance(err, obstore.exceptions.GenericError) and refused:
        return ValueError(
            redact(
                f"could not list the arrays in {where}: {first_line(err, secrets)}; an HTTP "
                f"server that does not answer listings serves only a store with consolidated "
                f"metadata: run zarr.consolidate_metadata on the store, or open it through "
                f"its s3://, gs:// or az:// URL",
                secrets,
            )
        )
    return explain_open_failure(err, where, secrets)


def explain_missing_bucket(
    store: Any, where: str, secrets: Iterable[str] = ()
) -> FileNotFoundError | None:
    """When `where` has no Zarr group: the clearer error if its bucket does not exist (a
    missing object reads the same as a missing bucket to zarr, but not to a list request),
    else `None`. One list request of one page is made.

    Args:
        store: an obstore store.
        where: the store's description (`io.stores.open_store.describe`).
        secrets: values known to be secret (`redact.secrets_in`), kept out of the message.
    """
    try:
        next(iter(obstore.list(store, chunk_size=1)), None)
    except Exception as err:
        if any(sign in str(err).lower() for sign in _NO_BUCKET):
            return FileNotFoundError(
                redact(
                    f"{where}: its bucket does not exist; check the bucket name, and the "
                    f"endpoint and region in storage_options",
                    secrets,
                )
            )
    return None
