"""Credentials in URLs and storage_options never reach an error, a log line, a repr or a
loader's state: the redaction rules one by one, then loaders over a real S3 API (moto's
server on loopback) given secrets in every place a user puts them."""

from __future__ import annotations

import json
import logging
import os
import socket
import traceback
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore.exceptions
import obstore.store
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes import ChunkReadError, RetryPolicy, ZarrSource, build_loader, open_icechunk
from insitubatch_nodes.io.stores.open_store import describe, open_store
from insitubatch_nodes.io.stores.redact import (
    REDACTED,
    is_secret_name,
    raise_scrubbed,
    redact,
    scrubbed,
    secrets_in,
)
from insitubatch_nodes.io.stores.store_errors import CREDENTIAL_HINT, first_line
from tests.helpers.profiles import examples
from tests.helpers.s3_server import QUICK_OBSTORE_RETRIES, S3Server
from tests.helpers.stores import write_store

# --- The rules, on text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://AKIAKEY:wJalrSECRET@bucket/x.zarr", "s3://***@bucket/x.zarr"),
        ("s3a://AKIAKEY:wJalrSECRET@bucket/x.zarr", "s3a://***@bucket/x.zarr"),
        ("gs://user:pw%2Fwith%40escapes@bucket/x.zarr", "gs://***@bucket/x.zarr"),
        ("https://user:pass@host.example.com/x.zarr", "https://***@host.example.com/x.zarr"),
        ("https://ghp_tokenAsUser@host/x.zarr", "https://***@host/x.zarr"),
        ("http://u:p@w@127.0.0.1:9000/b/x.zarr", "http://***@127.0.0.1:9000/b/x.zarr"),
        # a secret key pasted with its raw `/`; a port before a path with an `@` is no password
        ("s3://AKIAKEY:wJalr/K7MDENG+bPxRfi@bucket/x.zarr", "s3://***@bucket/x.zarr"),
        ("http://host:9000/b/era5@v2.zarr", "http://host:9000/b/era5@v2.zarr"),
        ("https://host/b/era5@v2.zarr", "https://host/b/era5@v2.zarr"),
        ("http://[::1]:9000/b/era5@v2.zarr", "http://[::1]:9000/b/era5@v2.zarr"),
        # Azure's `container@account` names a container: kept; with a password it is not.
        (
            "abfs://container@account.dfs.core.windows.net/x.zarr",
            "abfs://container@account.dfs.core.windows.net/x.zarr",
        ),
        (
            "abfss://container:pw@account.dfs.core.windows.net/x.zarr",
            "abfss://***@account.dfs.core.windows.net/x.zarr",
        ),
        (
            "https://b.s3.amazonaws.com/x.zarr?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=AKIAEXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
            "&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            "&X-Amz-Security-Token=FwoGZXIvYXdzEJr&X-Amz-Signature=0a1b2c3d4e",
            "https://b.s3.amazonaws.com/x.zarr?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=***&X-Amz-Date=20240101T000000Z&X-Amz-Expires=3600"
            "&X-Amz-SignedHeaders=host&X-Amz-Security-Token=***&X-Amz-Signature=***",
        ),
        (
            "https://acct.blob.core.windows.net/c/x.zarr?sv=2024-01-01&ss=b&srt=co&sp=rl"
            "&se=2030-01-01T00:00:00Z&spr=https&sig=abc%2Bdef%3D",
            "https://acct.blob.core.windows.net/c/x.zarr?sv=2024-01-01&ss=b&srt=co&sp=rl"
            "&se=2030-01-01T00:00:00Z&spr=https&sig=***",
        ),
        (
            "https://storage.googleapis.com/b/x.zarr?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            "&X-Goog-Credential=sa%40p.iam&X-Goog-Signature=77aa&alt=media",
            "https://storage.googleapis.com/b/x.zarr?X-Goog-Algorithm=GOOG4-RSA-SHA256"
            "&X-Goog-Credential=***&X-Goog-Signature=***&alt=media",
        ),
        (
            "https://b.s3.amazonaws.com/x?AWSAccessKeyId=AKIA1&Expires=1700000000&Signature=zz",
            "https://b.s3.amazonaws.com/x?AWSAccessKeyId=***&Expires=1700000000&Signature=***",
        ),
        ("https://h/x.zarr?token=abc;key=AIzaSy&v=1", "https://h/x.zarr?token=***;key=***&v=1"),
        ("https://u:p@h/x.zarr?password=hunter22#frag", "https://***@h/x.zarr?password=***#frag"),
        # Inside messages: quotes, brackets and the sentence's punctuation stay.
        (
            "no Zarr store at 'https://u:p@h/x?sig=abc': it failed",
            "no Zarr store at 'https://***@h/x?sig=***': it failed",
        ),
        ('HTTPStore("https://u:p@h/x?sig=abc")', 'HTTPStore("https://***@h/x?sig=***")'),
        (
            "could not read http://h/x?sig=abc: refused",
            "could not read http://h/x?sig=***: refused",
        ),
        ("(see https://h/x?sig=abc).", "(see https://h/x?sig=***)."),
        ("uri: Some(\n  http://u:p@h/x?sig=abc,\n)", "uri: Some(\n  http://***@h/x?sig=***,\n)"),
        # What servers and clients echo: headers, bodies, debug dumps, key files.
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIA/2024/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=abcdef",
            "Authorization: ***, SignedHeaders=host;x-amz-date, Signature=***",
        ),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: ***"),
        ("x-amz-security-token:FwoGZXIvYXdz\nhost:h", "x-amz-security-token:***\nhost:h"),
        ("sent header Bearer eyJhbGciOi.x-y_z", "sent header Bearer ***"),
        (
            'secret_access_key: Some("abc"), region: Some("us")',
            'secret_access_key: Some("***"), region: Some("us")',
        ),
        (
            '{"private_key_id": "0a1b", "client_email": "sa@p.iam"}',
            '{"private_key_id": "***", "client_email": "sa@p.iam"}',
        ),
        (
            "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIA1</AWSAccessKeyId>"
            "<SignatureProvided>ab12</SignatureProvided><StringToSign>s</StringToSign></Error>",
            "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>***</AWSAccessKeyId>"
            "<SignatureProvided>***</SignatureProvided><StringToSign>s</StringToSign></Error>",
        ),
        (
            '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n'
            '-----END PRIVATE KEY-----\\n"}',
            '{"private_key": "***"}',
        ),
        (
            "key file:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEvQ\n-----END RSA PRIVATE KEY-----\nok",
            "key file:\n***\nok",
        ),
        ("cut short: -----BEGIN PRIVATE KEY-----\nMIIEvQ", "cut short: ***"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # redacting twice changes nothing


@pytest.mark.parametrize(
    "text",
    [
        CREDENTIAL_HINT,
        "s3://bucket/path/era5.zarr",
        "https://host.example.com:8443/path/era5.zarr?versionId=3&alt=media",
        "/data/pytest-of-me/test_secret0/era5.zarr",
        "storage_options for 's3://bucket/era5.zarr': Configuration key: 'acess_key_id' is not "
        "valid for store 'S3'. Check the spelling against obstore's options for that store",
        "could not read s3://b/era5.zarr: Generic S3 error: Error performing GET "
        "http://127.0.0.1:9/b/era5.zarr/zarr.json in 1ms, after 1 retries, max_retries: 1, "
        "retry_timeout: 2s - HTTP error: error sending request; check the URL",
        "reading chunk (2, 0) of variable 'u10' (key 'u10/c/2/0') from s3://b/x.zarr failed",
        "Generic GCS error: GCP credential error: Unable to decode service account file: "
        "missing field `private_key_id` at line 1 column 29",
        "error getting token: timed out",
        "Error: the token expired. Renew it.",
        "skip_signature=True for public data",
        "icechunk:/data/repo@tag=v1",
    ],
)
def test_what_is_not_a_secret_is_left_as_it_was(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "name",
    [
        # obstore's S3, GCS and Azure options, with their aliases and environment names
        "access_key_id",
        "aws_access_key_id",
        "secret_access_key",
        "AWS_SECRET_ACCESS_KEY",
        "session_token",
        "aws_session_token",
        "aws_token",
        "token",
        "service_account_key",
        "google_service_account_key",
        "bearer_token",
        "account_key",
        "access_key",
        "master_key",
        "azure_storage_account_key",
        "client_secret",
        "azure_client_secret",
        "sas_key",
        "sas_token",
        "azure_storage_sas_token",
        "azure_storage_token",
        "fabric_session_token",
        "encryption_key",
        # headers, query parameters, fields of key files and of error bodies
        "Authorization",
        "Proxy-Authorization",
        "x-api-key",
        "Cookie",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "X-Goog-Signature",
        "sig",
        "Signature",
        "AWSAccessKeyId",
        "SignatureProvided",
        "private_key",
        "password",
        "api_key",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "bucket",
        "aws_bucket",
        "region",
        "endpoint",
        "aws_endpoint",
        "metadata_endpoint",
        "sts_endpoint",
        "skip_signature",
        "aws_skip_signature",
        "unsigned_payload",
        "virtual_hosted_style_request",
        "account_name",
        "azure_storage_account_name",
        "container_name",
        "client_id",
        "tenant_id",
        "msi_resource_id",
        "use_azure_cli",
        "service_account",
        "google_service_account",
        "application_credentials",
        "google_application_credentials",
        "web_identity_token_file",
        "federated_token_file",
        "container_credentials_relative_uri",
        "fabric_token_service_url",
        "credential_type",
        "role_arn",
        "role_session_name",
        "proxy_url",
        "user_agent",
        "X-Amz-Date",
        "X-Amz-SignedHeaders",
        "X-Amz-Algorithm",
        "X-Amz-Expires",
        "sv",
        "se",
        "sp",
        "GoogleAccessId",
        "client_email",
    ],
)
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


_SCHEMES = ["s3", "s3a", "gs", "az", "abfs", "azure", "http", "https"]
_SECRET_QUERY = [
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-Goog-Signature",
    "sig",
    "Signature",
    "token",
    "access_token",
    "AWSAccessKeyId",
    "key",
    "client_secret",
]
_PLAIN_QUERY = ["X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "sv", "se", "sp", "alt", "v"]
_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_~"


def _url_text(min_size: int = 1) -> st.SearchStrategy[str]:
    """Text as it sits in a URL: unreserved characters and percent-escapes."""
    pieces = st.one_of(st.sampled_from(list(_UNRESERVED)), st.sampled_from(["%2F", "%2B", "%3D"]))
    return st.lists(pieces, min_size=min_size, max_size=24).map("".join)


@st.composite
def _urls(draw: st.DrawFn) -> tuple[str, str, list[str]]:
    """A URL with credentials, its redacted form, and the secrets in it."""
    scheme = draw(st.sampled_from(_SCHEMES))
    host = draw(st.sampled_from(["bucket-1", "host.example.com", "127.0.0.1:9000"]))
    path = "".join("/" + s for s in draw(st.lists(_url_text(), min_size=0, max_size=3)))
    secrets: list[str] = []
    userinfo = ""
    if draw(st.booleans()):
        user = "U" + draw(_url_text(3))
        password = "P" + draw(_url_text(3))
        secrets.append(password)  # the user name goes from the URL, not from elsewhere
        userinfo = f"{user}:{password}@"
    query, redacted_query = [], []
    for name, value in draw(
        st.lists(st.tuples(st.sampled_from(_SECRET_QUERY + _PLAIN_QUERY), _url_text()))
    ):
        if name in _SECRET_QUERY:
            value = "S" + value + "Z" * 2  # long enough to be told from ordinary text
            secrets.append(value)
        query.append(f"{name}={value}")
        redacted_query.append(f"{name}={REDACTED if name in _SECRET_QUERY else value}")
    tail = "?" + "&".join(query) if query else ""
    redacted_tail = "?" + "&".join(redacted_query) if query else ""
    url = f"{scheme}://{userinfo}{host}{path}{tail}"
    expected = f"{scheme}://{REDACTED + '@' if userinfo else ''}{host}{path}{redacted_tail}"
    return url, expected, secrets


@settings(max_examples=examples(300), deadline=None)
@given(
    _urls(),
    st.sampled_from(["", "no Zarr store at '", 'HTTPStore("', "(", "from "]),
    st.sampled_from(["", "'", '")', ")", ": failed", ", retrying", ".", "\n  next line"]),
)
def test_urls_keep_all_but_their_secrets(
    case: tuple[str, str, list[str]], before: str, after: str
) -> None:
    url, expected, secrets = case
    text = before + url + after
    assert redact(text) == before + expected + after
    assert redact(redact(text)) == redact(text)
    # and what the URL is known to hold goes wherever it turns up, however it is written
    known = secrets_in(url=url)
    echoed = f"echo {' '.join(secrets)} | {url}"
    clean = redact(echoed, known)
    assert not [s for s in secrets if s in clean]


def test_secret_option_values_are_found_at_any_depth() -> None:
    key_file = json.dumps(
        {
            "type": "service_account",
            "private_key_id": "kid-0a1b2c",
            "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----\n",
            "client_email": "sa@project.iam.gserviceaccount.com",
        }
    )
    found = secrets_in(
        {
            "access_key_id": "AKIAEXAMPLE",
            "secret_access_key": "wJalrXUtnFEMI",
            "region": "us-east-1",
            "skip_signature": "true",
            "service_account_key": key_file,
            "sas_key": "sv=2024-01-01&sig=c2lnbmF0dXJl",
            "endpoint": "http://minio:miniopass@127.0.0.1:9000",
            "client_options": {
                "allow_http": True,
                "proxy_url": "http://proxyuser:proxypass@proxy:3128",
                "default_headers": {"Authorization": "Bearer eyJhbGci", "x-trace": "t-123"},
            },
        },
        url="s3://userinfo:pw-in-url@bucket/x.zarr?X-Amz-Signature=a0b1c2",
    )
    for secret in [
        "AKIAEXAMPLE",
        "wJalrXUtnFEMI",
        key_file,
        "kid-0a1b2c",
        "sv=2024-01-01&sig=c2lnbmF0dXJl",
        "c2lnbmF0dXJl",
        "miniopass",
        "proxypass",
        "Bearer eyJhbGci",
        "eyJhbGci",
        "pw-in-url",
        "a0b1c2",
    ]:
        assert secret in found
    for plain in ["us-east-1", "true", "t-123", "bucket", "sa@project.iam.gserviceaccount.com"]:
        assert plain not in found
    assert {len(s) >= 4 for s in found} == {True}
    text = f"config {key_file!r} and {json.dumps(key_file)} and wJalrXUtnFEMI%2F"
    assert redact(text, found) == f'config {REDACTED!r} and "{REDACTED}" and {REDACTED}%2F'


def test_known_values_are_replaced_as_whole_words() -> None:
    found = secrets_in(url="https://me:reader@host/x.zarr")
    assert found == {"me:reader", "reader"}
    text = "ChunkReader got 'reader' from https://me:reader@host/x.zarr (reader)"
    assert redact(text, found) == "ChunkReader got '***' from https://***@host/x.zarr (***)"


def test_a_clean_error_is_kept_and_a_dirty_one_replaced_by_a_redacted_stand_in() -> None:
    clean = obstore.exceptions.GenericError("Generic S3 error: 503 Service Unavailable")
    assert scrubbed(clean) is clean
    try:
        raise obstore.exceptions.GenericError("GET https://u:p@h/x?sig=abc failed\ndump: sig=abc")
    except obstore.exceptions.GenericError as err:
        dirty = err
    stand_in = scrubbed(dirty)
    assert type(stand_in) is obstore.exceptions.GenericError
    assert str(stand_in) == "GET https://***@h/x?sig=*** failed\ndump: sig=***"
    assert stand_in.__traceback__ is dirty.__traceback__
    # zarr's errors format their arguments into a template: the text is kept as it is
    group_error = zarr.errors.GroupNotFoundError("HTTPStore('https://u:p@h/x')", "")
    assert "https://***@h/x" in str(scrubbed(group_error))
    assert type(scrubbed(group_error)) is zarr.errors.GroupNotFoundError


def test_a_stand_in_for_an_error_that_cannot_be_rebuilt_is_a_runtime_error() -> None:
    class Odd(Exception):
        def __init__(self, url: str, code: int) -> None:
            super().__init__(url, code)
            self.code = code

        def __str__(self) -> str:
            return f"{self.args[0]} failed with {self.code}"

    stand_in = scrubbed(Odd("https://u:p@h/x", 3))
    assert type(stand_in) is RuntimeError
    assert str(stand_in) == "Odd: https://***@h/x failed with 3"


def test_causes_printed_under_an_error_are_redacted_too() -> None:
    password, signature = "pw-" + "cause", "cause-" + "sig"  # not in the printed source

    def fail() -> None:
        try:
            raise OSError(f"GET https://u:{password}@h/x?sig={signature}")
        except OSError as inner:
            raise ValueError("could not open the store") from inner

    with pytest.raises(ValueError) as raised:
        try:
            fail()
        except ValueError as err:
            raise_scrubbed(err)
    printed = "".join(traceback.format_exception(raised.value))
    assert "could not open the store" in printed and "https://***@h/x?sig=***" in printed
    assert password not in printed and signature not in printed
    with pytest.raises(KeyError) as raised_clean:
        try:
            raise KeyError("t2m")
        except KeyError as err:
            original = err
            raise_scrubbed(err)
    assert raised_clean.value is original  # nothing to hide: the error itself, unchanged


def test_first_line_is_redacted() -> None:
    err = obstore.exceptions.GenericError("GET http://u:p@h/x?sig=abc: refused\n\nuri: Some(...)")
    assert first_line(err) == "GET http://***@h/x?sig=***: refused"
    assert first_line(obstore.exceptions.GenericError("value wJalrXUt"), {"wJalrXUt"}) == (
        "value ***"
    )


def test_describe_and_the_repr_of_stores_we_build() -> None:
    url = "https://reader:pw-0a1b2c@host.example.com/x.zarr?X-Amz-Signature=0a1b2c3d&alt=media"
    assert describe(url) == "https://***@host.example.com/x.zarr?X-Amz-Signature=***&alt=media"
    store = open_store(url)
    assert "pw-0a1b2c" in str(store.store)  # obstore's own repr: the whole URL
    for text in (repr(store), str(store), describe(store)):
        assert "pw-0a1b2c" not in text and "0a1b2c3d" not in text
        assert "host.example.com/x.zarr" in text
    # a store the user built is described (in messages) without its secrets too
    own = zarr.storage.ObjectStore(obstore.store.HTTPStore.from_url(url))
    assert "0a1b2c3d" not in describe(own) and "host.example.com" in describe(own)


# --- Loaders over a real S3 API ----------------------------------------------------------

_TEST_SERVER_LOGGERS = ("werkzeug", "moto", "botocore", "boto3", "urllib3", "s3transfer")


@dataclass
class Secrets:
    """Fresh secret values for one test: none of them can be in a text by chance."""

    values: dict[str, str]

    @classmethod
    def make(cls, *labels: str) -> Secrets:
        return cls({label: f"{label}-{uuid.uuid4().hex[:12]}" for label in labels})

    def __getitem__(self, label: str) -> str:
        return self.values[label]

    def found_in(self, text: str) -> list[str]:
        return [label for label, value in self.values.items() if value in text]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _host(server: S3Server) -> str:
    return server.endpoint.removeprefix("http://")


def _printed(err: BaseException) -> str:
    """All that Python prints for `err` (its chain included), and its repr."""
    return "".join(traceback.format_exception(err)) + repr(err)


def _our_log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record but the test server's own (moto logs the requests it gets)."""
    formatter = logging.Formatter()
    return "\n".join(
        formatter.format(record)
        for record in caplog.records
        if not record.name.startswith(_TEST_SERVER_LOGGERS)
    )


def _s3_group(server: S3Server, *, consolidated: bool = False) -> tuple[str, str]:
    """A Zarr group in a fresh bucket: (its bucket, its s3:// URL)."""
    bucket = server.new_bucket()
    url = f"s3://{bucket}/era5.zarr"
    store = server.writable_store(url)
    write_store(store)
    if consolidated:  # a plain HTTP server cannot list: zarr reads the consolidated metadata
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(store)
    return bucket, url


def _signed_url(server: S3Server, bucket: str, path: str, s: Secrets) -> str:
    """An HTTP URL to a path on the server, with a password and a signed query string."""
    return (
        f"http://reader:{s['password']}@{_host(server)}/{bucket}/{path}"
        f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={s['credential']}"
        f"&X-Amz-Security-Token={s['session']}&X-Amz-Signature={s['signature']}"
    )


_HTTP_OPTIONS = {"client_options": {"allow_http": True}, "retry_config": QUICK_OBSTORE_RETRIES}
_URL_SECRETS = ("password", "credential", "session", "signature")
_OPTION_SECRETS = ("access", "secret", "token")


def _secret_options(server: S3Server, s: Secrets, **extra: Any) -> dict[str, Any]:
    return server.options(
        access_key_id=s["access"], secret_access_key=s["secret"], session_token=s["token"], **extra
    )


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials come from storage_options only, as in tests/end_to_end/test_bad_input.py."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


def _missing_bucket(server: S3Server, s: Secrets) -> None:
    build_loader("s3://no-such-bucket/era5.zarr", storage_options=_secret_options(server, s))


def _missing_group(server: S3Server, s: Secrets) -> None:
    url = f"s3://{server.new_bucket()}/nothing-here.zarr"
    build_loader(url, storage_options=_secret_options(server, s))


def _unknown_variable(server: S3Server, s: Secrets) -> None:
    _, url = _s3_group(server)
    build_loader(url, ["t2m", "z500"], storage_options=_secret_options(server, s))


def _unreachable_endpoint_with_a_password(server: S3Server, s: Secrets) -> None:
    endpoint = f"http://minio:{s['password']}@127.0.0.1:{_free_port()}"
    options = _secret_options(server, s, endpoint=endpoint)
    build_loader(f"s3://{server.new_bucket()}/era5.zarr", storage_options=options)


def _misspelled_option_next_to_secrets(server: S3Server, s: Secrets) -> None:
    options = _secret_options(server, s, acess_key_id=s["password"])
    build_loader(f"s3://{server.new_bucket()}/era5.zarr", storage_options=options)


def _proxy_and_header_secrets(server: S3Server, s: Secrets) -> None:
    client = {
        "allow_http": True,
        "proxy_url": f"http://proxy:{s['password']}@127.0.0.1:{_free_port()}",
        "default_headers": {"Authorization": f"Bearer {s['signature']}"},
    }
    options = _secret_options(server, s, client_options=client)
    build_loader(f"s3://{server.new_bucket()}/era5.zarr", storage_options=options)


def _credentials_in_an_s3_url(server: S3Server, s: Secrets) -> None:
    url = f"s3://{s['credential']}:{s['password']}@no-such-bucket/era5.zarr"
    build_loader(url, storage_options=_secret_options(server, s))


def _wrong_credentials(server: S3Server, s: Secrets) -> None:
    from moto.core.authorization import enable_iam_authentication

    _, url = _s3_group(server)
    with enable_iam_authentication():  # moto now checks keys: ours are unknown to it
        build_loader(url, storage_options=_secret_options(server, s))


def _signed_url_without_a_group(server: S3Server, s: Secrets) -> None:
    url = _signed_url(server, server.new_bucket(), "nothing-here.zarr", s)
    build_loader(url, storage_options=_HTTP_OPTIONS)


def _signed_url_of_a_store_that_cannot_be_listed(server: S3Server, s: Secrets) -> None:
    bucket, _ = _s3_group(server)  # no consolidated metadata: zarr must list the group
    build_loader(_signed_url(server, bucket, "era5.zarr", s), storage_options=_HTTP_OPTIONS)


def _signed_url_unknown_variable(server: S3Server, s: Secrets) -> None:
    bucket, _ = _s3_group(server, consolidated=True)
    url = _signed_url(server, bucket, "era5.zarr", s)
    build_loader(url, ["z500"], storage_options=_HTTP_OPTIONS)


def _signed_url_unreachable(server: S3Server, s: Secrets) -> None:
    url = (
        f"http://reader:{s['password']}@127.0.0.1:{_free_port()}/b/era5.zarr"
        f"?sig={s['signature']}&token={s['session']}&X-Amz-Credential={s['credential']}"
    )
    build_loader(url, storage_options=_HTTP_OPTIONS)


def _own_store_with_a_signed_url(server: S3Server, s: Secrets) -> None:
    bucket, _ = _s3_group(server, consolidated=True)
    url = _signed_url(server, bucket, "era5.zarr", s)
    client = obstore.store.HTTPStore.from_url(url, client_options={"allow_http": True})
    build_loader(zarr.storage.ObjectStore(client, read_only=True), ["z500"])


def _a_config_value_obstore_echoes(server: S3Server, s: Secrets) -> None:
    number = int(uuid.uuid4().int % 10**15) + 10**15
    s.values["number"] = str(number)
    key_file = json.dumps({"type": "service_account", "private_key": number})
    build_loader("gs://bucket/era5.zarr", storage_options={"service_account_key": key_file})


def _azure_sas_next_to_a_misspelled_option(server: S3Server, s: Secrets) -> None:
    options = {"sas_key": f"sv=2024-01-01&sig={s['signature']}", "acount_key": s["secret"]}
    build_loader("abfs://era5@account.dfs.core.windows.net/x.zarr", storage_options=options)


def _icechunk_repository_with_a_password(server: S3Server, s: Secrets) -> None:
    open_icechunk(f"https://reader:{s['password']}@host/repo?sig={s['signature']}", tag="v1")


@pytest.mark.parametrize(
    ("case", "error", "says"),
    [
        (_missing_bucket, FileNotFoundError, "s3://no-such-bucket/era5.zarr: its bucket"),
        (_missing_group, ValueError, "/nothing-here.zarr is not a Zarr group"),
        (_unknown_variable, ValueError, "unknown variable(s) ['z500'] in s3://"),
        (_unreachable_endpoint_with_a_password, ConnectionError, "GET http://***@127.0.0.1:"),
        (_misspelled_option_next_to_secrets, ValueError, "'acess_key_id' is not valid"),
        (_proxy_and_header_secrets, ConnectionError, "could not read s3://"),
        (_credentials_in_an_s3_url, FileNotFoundError, "s3://***@no-such-bucket/era5.zarr"),
        (_wrong_credentials, PermissionError, "refused access"),
        (_signed_url_without_a_group, ValueError, "X-Amz-Signature=*** is not a Zarr group"),
        (_signed_url_of_a_store_that_cannot_be_listed, ValueError, "consolidated metadata"),
        (_signed_url_unknown_variable, ValueError, "unknown variable(s) ['z500'] in http://***@"),
        (_signed_url_unreachable, ConnectionError, "?sig=***&token=***&X-Amz-Credential=***"),
        (_own_store_with_a_signed_url, ValueError, "X-Amz-Credential=***"),
        (_a_config_value_obstore_echoes, obstore.exceptions.GenericError, "integer `***`"),
        (_azure_sas_next_to_a_misspelled_option, ValueError, "'abfs://era5@account.dfs"),
        (_icechunk_repository_with_a_password, ValueError, "https://***@host/repo?sig=***"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_no_error_shows_a_secret(
    case: Callable[[S3Server, Secrets], None],
    error: type[BaseException],
    says: str,
    s3_server: S3Server,
    caplog: pytest.LogCaptureFixture,
    no_aws_environment: None,
) -> None:
    s = Secrets.make(*_URL_SECRETS, *_OPTION_SECRETS)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(error) as raised:
        case(s3_server, s)
    assert says in str(raised.value)
    assert s.found_in(_printed(raised.value)) == [], _printed(raised.value)
    assert s.found_in(_our_log_text(caplog)) == []


def _loader_state_and_reprs(loader: Any, source: ZarrSource) -> str:
    batches = iter(loader)
    next(batches)
    return "\n".join(
        [json.dumps(loader.state_dict(), default=repr), repr(source), source.where, repr(loader)]
    )


def test_a_loader_with_secret_options_keeps_them_out_of_its_state_and_reprs(
    s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    s = Secrets.make(*_OPTION_SECRETS, "password", "credential")
    caplog.set_level(logging.DEBUG)
    _, url = _s3_group(s3_server)
    url = url.replace("s3://", f"s3://{s['credential']}:{s['password']}@")  # obstore ignores it
    options = _secret_options(s3_server, s)
    source = ZarrSource.open(url, storage_options=options)
    assert source.where.startswith("s3://***@bucket-")
    loader = build_loader(url, split="all", batch_size=4, storage_options=options, device="cpu")
    assert s.found_in(_loader_state_and_reprs(loader, source)) == []
    assert s.found_in(_our_log_text(caplog)) == []


def test_a_loader_over_a_signed_url_reads_and_keeps_the_signature_to_itself(
    s3_server: S3Server, caplog: pytest.LogCaptureFixture
) -> None:
    s = Secrets.make(*_URL_SECRETS)
    caplog.set_level(logging.DEBUG)
    bucket, _ = _s3_group(s3_server, consolidated=True)
    url = _signed_url(s3_server, bucket, "era5.zarr", s)
    source = ZarrSource.open(url, storage_options=_HTTP_OPTIONS)
    assert source.where == (
        f"http://***@{_host(s3_server)}/{bucket}/era5.zarr?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential=***&X-Amz-Security-Token=***&X-Amz-Signature=***"
    )
    loader = build_loader(url, split="all", batch_size=8, storage_options=_HTTP_OPTIONS)
    assert sum(len(b["sample_index"]) for b in loader) == 88
    assert s.found_in(_loader_state_and_reprs(loader, source)) == []
    assert s.found_in(_our_log_text(caplog)) == []


def test_a_read_failing_mid_epoch_names_the_store_without_its_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = Secrets.make(*_URL_SECRETS)
    caplog.set_level(logging.DEBUG)
    server = S3Server.start()
    stopped = False
    try:
        bucket, _ = _s3_group(server, consolidated=True)
        loader = build_loader(
            _signed_url(server, bucket, "era5.zarr", s),
            split="all",
            batch_size=2,
            block_chunks=1,
            max_inflight=1,
            prefetch_blocks=1,
            storage_options=_HTTP_OPTIONS,
            retry=RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.05),
            device="cpu",
            shuffle="block",  # reads run along the epoch (a pool reads P units first)
        )
        batches = iter(loader)
        next(batches)
        server.stop()
        stopped = True
        with pytest.raises(ChunkReadError) as raised:
            for _ in batches:
                pass
    finally:
        if not stopped:
            server.stop()
    assert "X-Amz-Signature=***" in raised.value.where
    assert "X-Amz-Signature=***" in str(raised.value)
    assert s.found_in(_printed(raised.value) + raised.value.where) == []
    assert s.found_in(_our_log_text(caplog)) == []


def test_opening_the_arrays_when_the_server_is_gone_names_no_secret() -> None:
    s = Secrets.make("password")
    server = S3Server.start()
    try:
        _, url = _s3_group(server)
        endpoint = server.endpoint.replace("http://", f"http://minio:{s['password']}@")
        loader = build_loader(
            url,
            split="all",
            batch_size=2,
            storage_options=server.options(endpoint=endpoint),
            retry=RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.05),
            device="cpu",
        )
    finally:
        server.stop()
    with pytest.raises(OSError) as raised:
        list(loader)
    assert "opening the arrays of s3://" in str(raised.value)
    assert s.found_in(_printed(raised.value)) == []


def test_reading_a_coordinate_when_the_server_is_gone_names_no_secret() -> None:
    """The time and level coordinates are read after the arrays are listed (date splits,
    frequency=, levels=): a failed read is ours, named, and holds no secret of the
    endpoint obstore's own text would echo."""
    import numpy as np

    from insitubatch_nodes.io.metadata.levels import level_picks
    from insitubatch_nodes.io.metadata.time_axis import read_time_axis
    from insitubatch_nodes.io.metadata.zarr_layout import arrays_of, layout_of, open_root_group

    s = Secrets.make("password")
    server = S3Server.start()
    try:
        url = f"s3://{server.new_bucket()}/timed.zarr"
        group = zarr.open_group(server.writable_store(url), mode="w")
        z = group.create_array(
            "z",
            shape=(8, 2, 3),
            chunks=(4, 2, 3),
            dtype="f4",
            dimension_names=("time", "level", "x"),
        )
        z[...] = 1
        time = group.create_array("time", data=np.arange(8, dtype="i8"), dimension_names=("time",))
        time.attrs["units"] = "hours since 2000-01-01"
        group.create_array("level", data=np.array([500, 850]), dimension_names=("level",))
        endpoint = server.endpoint.replace("http://", f"http://minio:{s['password']}@")
        options = server.options(endpoint=endpoint)
        secrets = secrets_in(options, url)
        where = describe(url, secrets)
        arrays = arrays_of(open_root_group(open_store(url, options), where, secrets), where)
        assert read_time_axis(arrays, ["z"], 8, where, secrets).dates.size == 8  # reachable
    finally:
        server.stop()
    layouts = {"z": layout_of(arrays["z"])}
    reads = {
        "time": lambda: read_time_axis(arrays, ["z"], 8, where, secrets),
        "level": lambda: level_picks(arrays, layouts, [500], 1, where, secrets),
    }
    for name, read in reads.items():
        with pytest.raises(OSError) as raised:
            read()
        assert f"reading the coordinate {name!r} of s3://" in str(raised.value)
        assert s.found_in(_printed(raised.value)) == [], _printed(raised.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://host/bucket/era5.zarr?X-Amz-Signature=abc.def", "era5.stats.json"),
        ("s3://KEY:SECRET@bucket/data/era5.zarr/", "era5.stats.json"),
        ("/data/era5.zarr", "era5.stats.json"),
        ("memory://demo", "demo.stats.json"),
    ],
)
def test_the_stats_file_is_named_without_the_urls_secrets(url: str, expected: str) -> None:
    from insitubatch_nodes.cli.main import default_stats_file

    assert default_stats_file(url) == Path(expected)
