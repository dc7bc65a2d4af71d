"""The objectstore backend counts the requests it sends as the S3 server counts what it serves: by
operation and bytes, for one-request and multipart uploads (file and stream), whole and ranged reads,
listings and deletes (the figures behind /metrics, tier status and bench/cost.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import replace

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.harness import ROOT
from tests.harness.s3 import s3_configs
from tests.harness.s3_requests import counting_moto_server, operation
from tests.harness.tiered import metrics_url, sample_value, scrape, tier_status, wait_for
from tierlog.tiered.metadata import IndexType
from tierlog.tiered.rsm import create_remote_storage_manager

PART = 5 << 20
TIERED = {"remote.log.storage.system.enable": "true", "remote.log.metadata.manager.class.name": "memory",
          "remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "100",
          "metrics.port": "0"}
SMALL = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


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


def test_broker_reports_the_requests_its_store_served(counted, start_broker):
    """/metrics, /v1/tier/status and ``tierlog tier status`` give the counts the server served, after uploads and
    a read of the whole topic from the remote tier."""
    endpoint, served = counted
    store = {f"rsm.config.{k}": v for k, v in s3_configs(endpoint, "s3://tiered/broker").items()}
    served.reset()
    b = start_broker({**TIERED, "remote.log.storage.manager.class.name": "objectstore", **store})
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    admin.create_topics([NewTopic("costed", 1, 1, topic_configs=SMALL)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5)
    for i in range(300):
        p.send("costed", (b"%08d" % i) * 125)
    p.flush()
    p.close()
    url = metrics_url(b)
    wait_for(lambda: all(p["ready"] and p["copy_lag_segments"] == 0 and p["remote_segments"] > 0
                         and p["local_log_start_offset"] > 0 for p in tier_status(b, "costed")["partitions"]),
             what="copied and past local retention")
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    c.assign([TopicPartition("costed", 0)])
    got = sum(1 for _, m in zip(range(300), c, strict=False) if m)
    c.close()
    assert got == 300

    def agreed():  # the broker is idle once read: what it counted and what was served settle equal
        before = served.snapshot()
        status = tier_status(b)["store_requests"]
        samples = scrape(url)
        return (status, samples) if _nonzero(status) == before == served.snapshot() else None
    status, samples = wait_for(agreed, what="the broker's counts equal the server's")
    assert status["GET_RANGE"]["requests"] > 0 and status["PUT"]["requests"] > 0
    for op, c in status.items():
        assert sample_value(samples, "kafka_server_remotestoragemetrics_requests_total", operation=op) == c["requests"]
        assert sample_value(samples, "kafka_server_remotestoragemetrics_bytes_total", operation=op) == c["bytes"]
    out = subprocess.run([sys.executable, "-m", "tierlog", "tier", "status", "--url", url], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=60)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("remote store requests since start: ")]
    assert line and f"GET_RANGE {status['GET_RANGE']['requests']} (" in line[0], out.stdout


class _SeenLock:
    """A lock that says when a second thread has to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self):
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


def test_two_readers_of_a_cold_segment_read_its_manifest_once(make_rsm, segment):
    """A read and the read-ahead reaching a new segment together: one GET of its manifest, not one each."""
    rsm = make_rsm("filesystem")
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    rsm._forget(md)
    locks: list[_SeenLock] = []

    class Loading(dict):
        def setdefault(self, key, default=None):
            if key not in self:
                locks.append(_SeenLock())
                self[key] = locks[-1]
            return self[key]
    rsm._loading = Loading()
    gets: list[str] = []
    plain_get = rsm._get

    def get(key: str) -> bytes:
        gets.append(key)
        if len(gets) == 1:  # the first reader holds its GET until the second waits for it (10 s: it never does)
            second.start()
            locks[0].contended.wait(10)
        return plain_get(key)
    rsm._get = get
    out: list[bytes] = []
    second = threading.Thread(target=lambda: out.append(rsm.fetch_log_segment(md, 0, 9)))
    assert rsm.fetch_log_segment(md, 0, 9) == segment.files["log"][:10]
    second.join()
    assert out == [segment.files["log"][:10]]
    assert gets == [rsm.segment_keys(md).manifest]
