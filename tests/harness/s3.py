"""A moto S3 server for the object-store tests, and the settings that point a storage manager at it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from tests.harness.prerequisites import unavailable


@contextlib.contextmanager
def moto_server(bucket: str = "tiered") -> Iterator[str]:
    """A moto S3 server on a free port of 127.0.0.1 with ``bucket`` created; yields its endpoint URL.
    Without moto or boto3: skipped locally, a failure in CI."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError as e:
        unavailable("moto S3 server", f"{e} (pip install 'moto[server]' boto3)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()


def s3_configs(endpoint: str, url: str = "s3://tiered/cluster-a") -> dict[str, str]:
    """The objectstore storage manager's settings for ``url`` on the moto server at ``endpoint``."""
    return {"url": url, "aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
            "aws_region": "us-east-1", "aws_allow_http": "true", "aws_virtual_hosted_style_request": "false"}
