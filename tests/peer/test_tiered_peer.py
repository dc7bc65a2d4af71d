"""Tiered storage held against Apache Kafka with LocalTieredStorage: the same batches produced to both,
tiered with the same settings, give the same ListOffsets answers (earliest -2, earliest-local -4,
latest-tiered -5, latest -1, and timestamps in the remote and the local range), and consumers read the
same records from both.

Segment boundaries must not depend on when a retention check happens to run, so the scenario is: old
batches (an hour ago) and then recent ones, produced while local retention is the total retention
(segments roll by size only), then ``local.retention.ms`` of 30 minutes: the rolled segment, all old,
is tiered and deleted locally; the active one holds recent records and stays."""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tierlog.protocol import ApiKey
from tierlog.records import build_batch, iter_batches

NOW = T0 = 0  # set as the test starts (_timeline): stamps taken at import could be past local retention by then
OLD_BATCHES = 60
RECENT_BATCHES = 10
BATCHES = OLD_BATCHES + RECENT_BATCHES
RECORDS_PER_BATCH = 20
TOPIC = {"remote.storage.enable": "true", "segment.bytes": "1048576"}


@pytest.fixture(autouse=True)
def _timeline():
    global NOW, T0
    NOW = int(time.time() * 1000)
    T0 = NOW - 3_600_000


def stamp(i: int) -> int:
    """First timestamp of batch ``i``: old ones a second apart an hour ago, recent ones now."""
    return T0 + 1000 * i if i < OLD_BATCHES else NOW + 1000 * (i - OLD_BATCHES)


def batches() -> list[bytes]:
    """Identical bytes for both peers: batches of 20 records of ~1 KB."""
    return [build_batch([(b"k%d" % j, bytes([i % 256]) * 1000, [], stamp(i) + j) for j in range(RECORDS_PER_BATCH)])
            for i in range(BATCHES)]


def produce(raw: RawClient, topic: str) -> None:
    for batch in batches():
        r = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0


def list_offset(raw: RawClient, topic: str, timestamp: int) -> tuple:
    """One ListOffsets answer; a retriable REQUEST_TIMED_OUT (a remote timestamp lookup that did not
    finish in time, which Kafka answers under load) is asked again, as clients do."""
    answers = []

    def answered():
        r = raw.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]})
        p = r.topics[0].partitions[0]
        answers.append((int(p.error_code), p.offset, p.timestamp))
        return answers[-1][0] != 7

    with contextlib.suppress(TimedOut):  # the last answer is the caller's
        wait_until(answered, 60, interval=0, what="an answer other than REQUEST_TIMED_OUT")
    return answers[-1]


def alter_local_retention(raw: RawClient, topic: str, ms: int) -> None:
    r = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": topic, "configs": [
            {"name": "local.retention.ms", "config_operation": 0, "value": str(ms)}]}], "validate_only": False})
    assert r.responses[0].error_code == 0


def settled(raw: RawClient, topic: str, timeout: float = 120) -> dict:
    """Wait until the rolled segment is tiered and deleted locally (local log start = latest tiered + 1)."""
    total = BATCHES * RECORDS_PER_BATCH

    def done():
        answers = {ts: list_offset(raw, topic, ts) for ts in (-2, -4, -5, -1)}
        tiered, local = answers[-5][1], answers[-4][1]
        return answers if tiered > 0 and local == tiered + 1 and answers[-1][1] == total else not_yet(answers)

    return wait_until(done, timeout, interval=0.5, what=f"{topic} to settle (its offsets)")


def fetch_all(raw: RawClient, topic: str, start: int) -> list[tuple]:
    out, offset = [], start
    while offset < BATCHES * RECORDS_PER_BATCH:
        r = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}]})
        p = r.responses[0].partitions[0]
        assert p.error_code == 0, p.error_code
        for _, h in iter_batches(p.records):
            if h.last_offset >= offset:
                out.append((h.base_offset, h.last_offset, h.max_timestamp, h.size))
                offset = h.last_offset + 1
    return out


def test_list_offsets_and_reads_match_kafka_with_local_tiered_storage(kafka_peer_tiered, tierlog_tiered):
    results = {}
    for name, peer in (("kafka", kafka_peer_tiered), ("tierlog", tierlog_tiered)):
        topic = unique("tiered-offsets")
        create_topic(peer.bootstrap, topic, configs=TOPIC)
        raw = RawClient(peer.bootstrap)
        try:
            produce(raw, topic)
            alter_local_retention(raw, topic, 1_800_000)
            answers = settled(raw, topic)
            stamps = {}
            for i in (0, 1, 7, 25, 40, 51, 59, 60, 61, 69):
                stamps[f"batch {i} first"] = list_offset(raw, topic, stamp(i))
                stamps[f"batch {i} +5"] = list_offset(raw, topic, stamp(i) + 5)
            stamps["before all"] = list_offset(raw, topic, T0 - 10_000)
            stamps["after all"] = list_offset(raw, topic, NOW + 1000 * BATCHES)
            results[name] = {"special": answers, "timestamps": stamps, "records": fetch_all(raw, topic, 0)}
        finally:
            raw.close()
    kafka, tierlog = results["kafka"], results["tierlog"]
    assert tierlog["special"] == kafka["special"]
    assert tierlog["timestamps"] == kafka["timestamps"]
    assert tierlog["records"] == kafka["records"]
    # The comparison means something: a good part of the data was read from the remote tier, the rest locally.
    assert BATCHES * RECORDS_PER_BATCH // 3 < kafka["special"][-4][1] < BATCHES * RECORDS_PER_BATCH
