"""A real S3-compatible server on loopback (moto's server mode), and how to reach it.

The loader reaches it exactly as it reaches AWS: an `s3://bucket/path` URL plus client
options in `storage_options` (endpoint, credentials, `allow_http`), through obstore's S3
store. Buckets are created with boto3, which moto depends on.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import obstore.store
import zarr

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
# obstore retries failed requests itself (by default for up to 3 minutes); the tests keep
# that short so that a server going away surfaces within seconds.
QUICK_OBSTORE_RETRIES = {
    "max_retries": 1,
    "retry_timeout": timedelta(seconds=2),
    "backoff": {
        "init_backoff": timedelta(milliseconds=10),
        "max_backoff": timedelta(milliseconds=50),
        "base": 2.0,
    },
}
_buckets = itertools.count()


@dataclass
class S3Server:
    server: Any
    endpoint: str

    @classmethod
    def start(cls) -> S3Server:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        return cls(server, f"http://{host}:{port}")

    def stop(self) -> None:
        self.server.stop()

    def client(self) -> Any:
        """A boto3 S3 client of this server, for what the tests do beside the loader
        (buckets, policies, listings)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def new_bucket(self) -> str:
        name = f"bucket-{next(_buckets)}"
        self.client().create_bucket(Bucket=name)
        return name

    def object_sizes(self, url: str, prefix: str) -> list[int]:
        """The stored sizes of the objects under `prefix` of the store at `url`.

        Args:
            url: the store, `s3://bucket/path`.
            prefix: a key prefix within the store (`t2m/c/`: an array's chunks).
        """
        bucket, _, path = url.removeprefix("s3://").partition("/")
        listed = self.client().list_objects_v2(Bucket=bucket, Prefix=f"{path}/{prefix}")
        return [item["Size"] for item in listed["Contents"]]

    def options(self, **extra: Any) -> dict[str, Any]:
        """The storage_options a user would pass for this server."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "virtual_hosted_style_request": False,
            "client_options": {"allow_http": True},
            "retry_config": QUICK_OBSTORE_RETRIES,
            **extra,
        }

    def json_options(self, **extra: Any) -> dict[str, Any]:
        """`options` as a JSON file or argument can hold them: without the quick retry
        settings, whose durations JSON has no type for."""
        options = self.options(**extra)
        options.pop("retry_config")
        return options

    def writable_store(self, url: str) -> zarr.storage.ObjectStore:
        return zarr.storage.ObjectStore(
            obstore.store.from_url(url, **self.options()), read_only=False
        )
