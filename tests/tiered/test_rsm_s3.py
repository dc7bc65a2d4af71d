"""The objectstore backend against real S3 servers (SeaweedFS and S3Proxy): what plain S3 clients see,
big multipart segments, a missing bucket, and failures of the endpoint within bounded time."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace

import pytest

from tests.harness.s3 import s3_configs
from tierlog.tiered.metadata import IndexType
from tierlog.tiered.rsm import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RetriableRemoteStorageError,
    create_remote_storage_manager,
)

# Short timeouts and one quick retry so a dead endpoint fails fast.
FAST_FAIL = {"connect.timeout.ms": "500", "request.timeout.ms": "700", "retry.max.retries": "1",
             "retry.timeout.ms": "1000", "retry.backoff.ms": "20", "retry.backoff.max.ms": "50"}


def test_plain_s3_clients_can_range_read_the_log_object(segment, real_s3):
    boto = real_s3.boto3_client()
    rsm = create_remote_storage_manager("objectstore", real_s3.objectstore_configs("s3://tiered/plain-reader"))
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    key = "plain-reader/" + rsm.segment_keys(md).log
    got = boto.get_object(Bucket="tiered", Key=key, Range="bytes=100-199")["Body"].read()
    assert got == segment.files["log"][100:200]
    listed = boto.list_objects_v2(Bucket="tiered", Prefix="plain-reader/")["Contents"]
    # A store backed by a file system lists its folders too (``a/b/``): the manager leaves them out.
    objects = sorted(o["Key"] for o in listed if not o["Key"].endswith("/"))
    assert objects == sorted("plain-reader/" + k for k, _ in rsm.list_objects()) and len(objects) == 3
    rsm.delete_log_segment_data(md)
    left = boto.list_objects_v2(Bucket="tiered", Prefix="plain-reader/").get("Contents", [])
    assert [o["Key"] for o in left if not o["Key"].endswith("/")] == []  # folders may stay behind


@pytest.mark.parametrize("compressed", [False, True])
def test_multipart_upload_of_a_big_segment(make_rsm, segment, tmp_path, compressed, real_s3):
    big = tmp_path / "big.log"
    body = os.urandom(1 << 20) * 11 + b"tail"  # 11 MiB: three 5 MiB parts
    big.write_bytes(body)
    extra = {"upload.part.size": str(5 << 20)}
    if compressed:
        # 2 MiB chunks hold the repeated 1 MiB block twice: about half the size, still multipart.
        extra.update({"compression.enable": "true", "compression.chunk.size": str(2 << 20)})
    rsm = make_rsm(real_s3.kind, extra)
    md = segment.metadata(segment_size_in_bytes=len(body))
    rsm.copy_log_segment_data(md, replace(segment.data, log_segment=big))
    sizes = dict(rsm.list_objects())
    stored = sizes[rsm.segment_keys(md).log]
    assert (5 << 20) < stored < len(body) * 0.6 if compressed else stored == len(body)
    assert rsm.fetch_log_segment(md, (5 << 20) - 3, (5 << 20) + 2) == body[(5 << 20) - 3:(5 << 20) + 3]
    assert rsm.fetch_log_segment(md, len(body) - 4) == b"tail"
    assert rsm.fetch_index(md, IndexType.OFFSET) == segment.files[IndexType.OFFSET]


def test_missing_bucket_is_a_storage_error(segment, real_s3):
    bucket = f"no-such-bucket-{real_s3.kind}"
    rsm = create_remote_storage_manager("objectstore", {**real_s3.objectstore_configs(f"s3://{bucket}/x"),
                                                        **FAST_FAIL})
    md = segment.metadata()
    if real_s3.kind == "seaweedfs":
        # SeaweedFS creates a bucket on the first write into it (an admin identity may): the copy lands there.
        rsm.copy_log_segment_data(md, segment.data)
        assert rsm.fetch_log_segment(md, 0, 99) == segment.files["log"][:100]
        assert bucket in [b["Name"] for b in real_s3.boto3_client().list_buckets()["Buckets"]]
        return
    with pytest.raises(RemoteStorageError) as info:
        rsm.copy_log_segment_data(md, segment.data)
    assert not isinstance(info.value, RemoteResourceNotFoundError)


def _refusing_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: connections are refused


@pytest.fixture
def silent_endpoint():
    """Accepts connections (the kernel does) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_unreachable_endpoint_fails_retriably_within_bounded_time(kind, segment, request):
    endpoint = _refusing_endpoint() if kind == "refused" else request.getfixturevalue("silent_endpoint")
    rsm = create_remote_storage_manager("objectstore", {**s3_configs(endpoint), **FAST_FAIL})
    md = segment.metadata()
    calls = [lambda: rsm.copy_log_segment_data(md, segment.data), lambda: rsm.fetch_log_segment(md, 0, 10),
             lambda: rsm.fetch_index(md, IndexType.OFFSET), lambda: rsm.delete_log_segment_data(md),
             lambda: rsm.list_objects()]
    if kind == "silent":
        calls = calls[:2]  # each waits for its timeouts; an upload and a read are enough
    for call in calls:
        began = time.monotonic()
        with pytest.raises(RetriableRemoteStorageError) as info:
            call()
        assert time.monotonic() - began < 8, info.value
        assert "\n" not in str(info.value)  # obstore's debug dump is cut to its first line
