"""Faults of a real store (S3Proxy behind the fault proxy) under a tiering broker, the short version of
scripts/s3_store_faults.py (tests/harness/s3_store_faults.py): 503 SlowDown, connections cut mid-upload and
mid-read, deletes failing while copies go on, the store down for a while. Nothing acknowledged is lost, the
remote segments have no gap or overlap, copies catch up, remote readers see KAFKA_STORAGE_ERROR (retriable)
and then the data."""

from __future__ import annotations

import pytest

from tests.harness.s3_store_faults import SHORT, StoreFaultRun, format_table
from tierlog.errors import KafkaStorageError

#: What a broker catching up on a few megabytes may hold; one holding its backlog would pass it soon.
RSS_BOUND_MIB = 400


@pytest.fixture(scope="module")
def run(s3proxy_s3, tmp_path_factory):
    with StoreFaultRun(s3proxy_s3, tmp_path_factory.mktemp("store-faults")) as r:
        yield r


@pytest.mark.parametrize("fault", SHORT)
def test_a_store_fault_loses_nothing(run, fault):
    r = run.case(fault)
    table = format_table([r])
    assert r.ok, table
    assert r.acknowledged == 1200 and r.read_back == 1200, table
    assert r.remote_segments >= 10, table
    if fault == "store down":
        assert r.storage_errors_seen and KafkaStorageError.retriable, table
    else:
        assert r.fault_hits, table
    assert r.peak_rss_mib < RSS_BOUND_MIB, table
