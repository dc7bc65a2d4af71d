"""The objectstore backend counts the requests it sends as the S3 server counts what it serves: by
operation and bytes, for one-request and multipart uploads (file and stream), whole and ranged reads,
listings and deletes (the figures behind /metrics, tier status and bench/cost.py)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from tests.harness.s3 import s3_configs
from tests.harness.s3_requests import counting_moto_server, operation
from tierlog.tiered.metadata import IndexType
from tierlog.tiered.rsm import create_remote_storage_manager

PART = 5 << 20


@pytest.fixture(scope="module")
def counted():
    with counting_moto_server() as (endpoint, served):
        yield endpoint, served


def _nonzero(counts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {op: c for op, c in counts.items() if c["requests"]}


@pytest.mark.parametrize("compressed", [False, True])
def test_counts_match_what_the_server_served(counted, segment, tmp_path, compressed):
    endpoint, served = counted
    extra = {"upload.part.size": str(PART)}
    if compressed:  # the log goes up as a stream of compressed chunks: multipart whatever its size
        extra.update({"compression.enable": "true", "compression.chunk.size": str(1 << 20)})
    rsm = create_remote_storage_manager("objectstore", {**s3_configs(endpoint, f"s3://tiered/c{int(compressed)}"),
                                                         "broker.id": "1", **extra})
    served.reset()
    big = tmp_path / "big.log"
    body = os.urandom(1 << 20) * 11 + b"tail"  # 11 MiB: three parts (random chunks barely compress)
    big.write_bytes(body)
    md_big = segment.metadata(segment_size_in_bytes=len(body))
    rsm.copy_log_segment_data(md_big, replace(segment.data, log_segment=big))
    md_small = segment.metadata()  # about 20 KB: one PUT uncompressed
    rsm.copy_log_segment_data(md_small, segment.data)
    assert rsm.fetch_log_segment(md_big, PART - 3, PART + 2) == body[PART - 3:PART + 3]
    assert rsm.fetch_index(md_small, IndexType.OFFSET) == segment.files[IndexType.OFFSET]
    rsm.fetch_log_segment(md_small, 0)
    assert len(rsm.list_objects()) == 6
    rsm.delete_log_segment_data(md_big)
    rsm._forget(md_small)  # a cold manifest: one more whole-object GET
    rsm.fetch_index(md_small, IndexType.TIMESTAMP)

    mine, theirs = _nonzero(rsm.store_requests()), served.snapshot()
    assert mine == theirs
    # 11 MiB of random bytes in 5 MiB parts; compressed, the small segment's stream is a part of its own
    assert mine["UPLOAD_PART"]["requests"] == 3 + int(compressed)
    assert mine["GET"]["requests"] >= 3 and mine["GET_RANGE"]["requests"] >= 3
    # each copy first deletes an earlier attempt's manifest, then the big segment goes: three bulk deletes
    assert mine["LIST"]["requests"] == 1 and mine["DELETE"]["requests"] == 3
    rsm.close()


def test_server_side_classification():
    assert operation("PUT", "/b/k", "partNumber=2&uploadId=x", {}) == "UPLOAD_PART"
    assert operation("POST", "/b/k", "uploads=", {}) == "CREATE_MULTIPART"
    assert operation("POST", "/b/k", "uploadId=x", {}) == "COMPLETE_MULTIPART"
    assert operation("POST", "/b", "delete=", {}) == "DELETE"
    assert operation("GET", "/b", "list-type=2&prefix=a/", {}) == "LIST"
    assert operation("GET", "/b/k", "", {"range": "bytes=0-9"}) == "GET_RANGE"
