"""Differential: each kind of poison batch (tests/harness/poison.py) produced to Apache Kafka 4.4 and to
tierlog over the raw protocol; the answers (error code, whether record errors and an error message come
with it, the record indices) and the log end offset after it must be the same, but for the deliberate
differences in ``poison.KAFKA_DIFFERS`` (docs/compatibility.md), which pin Kafka's answer."""

from __future__ import annotations

import time

import pytest

from tests.harness import poison
from tests.harness.rawclient import RawClient, create_topic, unique
from tierlog.protocol import ApiKey


def _observe(bootstrap: str, kind: str) -> dict:
    topic = unique("poison")
    create_topic(bootstrap, topic, configs=poison.TOPIC_CONFIGS.get(kind))
    raw = RawClient(bootstrap, timeout=60)
    try:
        now = int(time.time() * 1000)
        resp = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": poison.POISON[kind](now)}]}]})
        p = resp.responses[0].partition_responses[0]
        lo = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        return {"error_code": int(p.error_code), "record_errors": [e.batch_index for e in p.record_errors],
                "has_error_message": bool(p.error_message), "log_start_offset": p.log_start_offset,
                "log_end_offset": lo.topics[0].partitions[0].offset}
    finally:
        raw.close()


@pytest.mark.parametrize("kind", sorted(poison.POISON))
def test_poison_answers_match_kafka(kafka_peer, tierlog_peer, kind):
    kafka = _observe(kafka_peer.bootstrap, kind)
    tierlog = _observe(tierlog_peer.bootstrap, kind)
    assert tierlog["error_code"] == poison.EXPECTED[kind]
    assert tierlog["log_end_offset"] == 0
    if kind in poison.KAFKA_DIFFERS:
        assert kafka["error_code"] == poison.KAFKA_DIFFERS[kind], kafka
        return
    assert kafka == tierlog
