"""Small helpers shared by the peer tests: unique names, topic creation that waits for leaders."""

from __future__ import annotations

import time
import uuid

from tests.server.rawclient import RawClient
from tierlog.protocol import ApiKey


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None,
                 timeout: float = 15) -> None:
    """CreateTopics, then wait until every partition has a leader (Kafka answers before that)."""
    raw = RawClient(bootstrap)
    try:
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": False})
        assert resp.topics[0].error_code == 0, resp.topics[0]
        wait_for_leaders(raw, name, partitions, timeout)
    finally:
        raw.close()


def wait_for_leaders(raw: RawClient, name: str, partitions: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
        t = md.topics[0]
        if t.error_code == 0 and len(t.partitions) == partitions and all(
                p.error_code == 0 and p.leader_id >= 0 for p in t.partitions):
            # Kafka's metadata cache can show the leader a moment before its replica manager leads.
            lo = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": i, "timestamp": -1} for i in range(partitions)]}]})
            if all(p.error_code == 0 for p in lo.topics[0].partitions):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {name} has no leaders after {timeout}s: {t}")
        time.sleep(0.05)
