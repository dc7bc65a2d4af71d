"""Stores that lack parts of S3, on real servers: S3Proxy refuses obstore's multi-object delete; a store
without multipart uploads (the fault proxy answers 501 to them in front of SeaweedFS or S3Proxy); a store
whose deletes fail outright. Each lack is found on first use and said once in one INFO line; copies and
reads go on (docs/tiered-storage.md, "Stores and what they lack")."""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import replace

import pytest

from tests.harness import logcapture
from tests.harness.s3_fault_proxy import Fault, S3FaultProxy, delete_faults
from tierlog.tiered.metadata import IndexType
from tierlog.tiered.rsm import (
    RemoteStorageError,
    RetriableRemoteStorageError,
    create_remote_storage_manager,
    storecompat,
)

QUICK = {"retry.max.retries": "1", "retry.backoff.ms": "10", "retry.backoff.max.ms": "20"}


@pytest.fixture
def proxy(real_s3):
    """A fault proxy in front of the module's server: a store endpoint of its own (abilities are found per
    endpoint), so each test finds them afresh."""
    p = S3FaultProxy(real_s3.port)
    yield p
    p.close()


def _manager(server, proxy, **extra):
    configs = {**server.objectstore_configs(f"s3://tiered/{uuid.uuid4().hex}"), "aws_endpoint": proxy.endpoint,
               **QUICK, **extra}
    return create_remote_storage_manager("objectstore", configs)


def _infos(caplog) -> list[str]:
    return [r.getMessage() for r in logcapture.records(caplog, "tierlog.tiered.rsm") if r.levelno == logging.INFO]


def test_deletes_work_where_multi_object_delete_is_refused(real_s3, proxy, segment, caplog):
    caplog.set_level(logging.INFO, "tierlog.tiered.rsm")
    rsm = _manager(real_s3, proxy)
    mds = [segment.metadata() for _ in range(3)]
    for md in mds:
        rsm.copy_log_segment_data(md, segment.data)
    for md in mds:
        rsm.delete_log_segment_data(md)
    assert rsm.list_objects() == []
    switched = [m for m in _infos(caplog) if "refuses multi-object deletes" in m]
    if real_s3.kind == "s3proxy":  # the store: 501 for the checksum header obstore sends
        assert len(switched) == 1 and "501 NotImplemented" in switched[0], _infos(caplog)
        assert not rsm.abilities.bulk_delete
    else:
        assert switched == [] and rsm.abilities.bulk_delete


def test_a_store_without_multi_object_delete_at_all(real_s3, proxy, segment, caplog):
    caplog.set_level(logging.INFO, "tierlog.tiered.rsm")
    refusal = proxy.add(Fault("status", "POST", lambda target: "?delete" in target, status=501))
    rsm = _manager(real_s3, proxy)
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    rsm.delete_log_segment_data(md)
    assert rsm.list_objects() == [] and refusal.hits >= 1
    again = _manager(real_s3, proxy)  # a second manager of the process on that store knows already
    again.copy_log_segment_data(md, segment.data)
    hits = refusal.hits
    again.delete_log_segment_data(md)
    assert again.list_objects() == [] and refusal.hits == hits
    assert len([m for m in _infos(caplog) if "refuses multi-object deletes" in m]) == 1


@pytest.mark.parametrize("compressed", [False, True])
def test_a_store_without_multipart_uploads(real_s3, proxy, segment, tmp_path, caplog, compressed):
    caplog.set_level(logging.INFO, "tierlog.tiered.rsm")
    refusal = proxy.add(Fault("status", "POST", lambda target: "?uploads" in target, status=501))
    big = tmp_path / "big.log"
    body = os.urandom(1 << 20) * 6 + b"tail"  # above the 5 MiB part size: multipart unless refused
    big.write_bytes(body)
    extra = {"upload.part.size": str(5 << 20)}
    if compressed:
        extra.update({"compression.enable": "true", "compression.chunk.size": str(1 << 20)})
    rsm = _manager(real_s3, proxy, **extra)
    md = segment.metadata(segment_size_in_bytes=len(body))
    data = replace(segment.data, log_segment=big)
    # A compressed stream is refused before obstore reads from it, so that attempt too goes on whole.
    rsm.copy_log_segment_data(md, data)
    assert refusal.hits >= 1 and not rsm.abilities.multipart
    assert rsm.fetch_log_segment(md, (5 << 20) - 3, (5 << 20) + 2) == body[(5 << 20) - 3:(5 << 20) + 3]
    assert rsm.fetch_log_segment(md, len(body) - 4) == b"tail"
    assert rsm.fetch_index(md, IndexType.OFFSET) == segment.files[IndexType.OFFSET]
    hits = refusal.hits
    rsm.copy_log_segment_data(segment.metadata(segment_size_in_bytes=len(body)), data)
    assert refusal.hits == hits  # found once
    assert len([m for m in _infos(caplog) if "refuses multipart uploads" in m]) == 1


def test_failing_deletes_do_not_stop_copies(real_s3, proxy, segment):
    """Deletes fail outright (500 to every kind): a copy still goes through (its clean-up of an earlier
    attempt's manifest finds none), the delete fails retriably, and succeeds once the store deletes again."""
    rsm = _manager(real_s3, proxy)
    faults = [proxy.add(f) for f in delete_faults(status=500)]
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    assert rsm.fetch_log_segment(md, 0) == segment.files["log"]
    with pytest.raises(RetriableRemoteStorageError) as info:
        rsm.delete_log_segment_data(md)
    assert "500" in str(info.value) and "X-Amz-Signature" not in str(info.value)
    assert any(f.hits for f in faults)
    # An earlier attempt's manifest that cannot be deleted does stop a copy over it: reads would mix attempts.
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(md, segment.data)
    proxy.clear()
    rsm.delete_log_segment_data(md)
    assert rsm.list_objects() == []


def test_refusals_are_told_apart_from_errors():
    line = "Server returned non-2xx status code: {}: <?xml version='1.0'?><Error><Code>{}</Code></Error>"
    assert storecompat.refused(line.format("501 Not Implemented", "NotImplemented"))
    assert storecompat.refused(line.format("400 Bad Request", "MissingContentMD5"))
    assert storecompat.refused(line.format("405 Method Not Allowed", "MethodNotAllowed"))
    assert not storecompat.refused(line.format("403 Forbidden", "AccessDenied"))
    assert not storecompat.refused(line.format("503 Service Unavailable", "SlowDown"))
    assert not storecompat.refused(line.format("400 Bad Request", "InvalidBucketName"))
    assert not storecompat.refused("Connection refused")
    listed = [("a", 4096), ("a/b", 4096), ("a/b/x.log", 5), ("a/c.log", 7), ("ab", 3)]
    assert storecompat.without_placeholders(listed) == [("a/b/x.log", 5), ("a/c.log", 7), ("ab", 3)]
