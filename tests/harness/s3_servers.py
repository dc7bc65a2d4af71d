"""Real S3 API servers for the tests: SeaweedFS and S3Proxy (scripts/s3_servers.py installs and runs them).

``s3_server(kind, work, buckets)`` is a context manager yielding a started server on 127.0.0.1 with the
buckets created (its ``endpoint``, ``access_key``, ``secret_key``, ``objectstore_configs(url)`` and
``boto3_client()``), stopped by its PID on exit. A server that is not installed skips the test locally
and fails it in CI (tests/harness/prerequisites.py), where .ci/run runs ``scripts/s3_servers.py install``.
The plugin's module fixtures ``seaweedfs_s3`` and ``s3proxy_s3`` (bucket ``tiered``) share one server per
test module; ``real_s3_configs(server, url)`` are a storage manager's settings for it.

``KINDS`` names the servers; ``kill_running()`` (the plugin, at the end of the session) stops what a
teardown did not reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.harness.prerequisites import load_script, unavailable

servers_module = load_script("s3_servers.py", "tierlog_s3_servers")
S3Server = servers_module.S3Server
S3ServerError = servers_module.S3ServerError
KINDS: tuple[str, ...] = servers_module.KINDS
NAMES = {"seaweedfs": "SeaweedFS S3 server", "s3proxy": "S3Proxy S3 server"}

#: Servers started and not yet stopped.
running: set = set()


@contextlib.contextmanager
def s3_server(kind: str, work: Path, buckets: tuple[str, ...] = ("tiered",), **credentials: str
              ) -> Iterator[S3Server]:
    """A started ``kind`` server (one of ``KINDS``) with ``buckets``; skipped locally, failed in CI, when
    it is not installed. ``credentials`` (``access_key``, ``secret_key``) replace the default identity."""
    reason = servers_module.missing(kind)
    if reason:
        unavailable(NAMES[kind], reason)
    server = servers_module.start(kind, Path(work), list(buckets), **credentials)
    running.add(server)
    try:
        yield server
    finally:
        server.stop()
        running.discard(server)


def real_s3_configs(server: S3Server, url: str) -> dict[str, str]:
    """The objectstore storage manager's settings for ``url`` (``s3://bucket/prefix``) on ``server``."""
    return server.objectstore_configs(url)


def kill_running() -> None:
    for server in list(running):
        server.stop(timeout=5)
        running.discard(server)
