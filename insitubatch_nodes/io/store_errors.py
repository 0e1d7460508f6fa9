"""Turn what an object store says when it cannot be used into what the user should do.

obstore's errors carry a multi-line debug dump; the first line says what happened, and the
kind of failure (no credentials, refused, unreachable, misspelled option) says what to fix.
"""

from __future__ import annotations

from typing import Any

import obstore
import obstore.exceptions

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


def first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def bad_option(source: str, err: obstore.exceptions.UnknownConfigurationKeyError) -> ValueError:
    return ValueError(
        f"storage_options for {source!r}: {first_line(err)} Check the spelling against "
        f"obstore's options for that store"
    )


def explain_open_failure(err: BaseException, where: str) -> Exception | None:
    """A clearer error for failing to read `where`'s metadata, or `None` to keep `err`."""
    if isinstance(
        err, obstore.exceptions.UnauthenticatedError | obstore.exceptions.PermissionDeniedError
    ):
        return PermissionError(f"{where} refused access: {first_line(err)}; {CREDENTIAL_HINT}")
    if not isinstance(err, obstore.exceptions.GenericError):
        return None
    text = str(err).lower()
    if any(sign in text for sign in _NO_CREDENTIALS):
        return PermissionError(f"no credentials for {where}: {CREDENTIAL_HINT}")
    return ConnectionError(
        f"could not read {where}: {first_line(err)}; check the URL, and the endpoint and "
        f"region in storage_options"
    )


def explain_missing_bucket(store: Any, where: str) -> FileNotFoundError | None:
    """When `where` has no Zarr group: the clearer error if its bucket does not exist (a
    missing object reads the same as a missing bucket to zarr, but not to a list request),
    else `None`. `store` is an obstore store; one list request of one page is made."""
    try:
        next(iter(obstore.list(store, chunk_size=1)), None)
    except Exception as err:
        if any(sign in str(err).lower() for sign in _NO_BUCKET):
            return FileNotFoundError(
                f"{where}: its bucket does not exist; check the bucket name, and the "
                f"endpoint and region in storage_options"
            )
    return None
