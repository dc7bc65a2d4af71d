"""Consumer fetches with the raw client, shared by the remote-read tests."""

from __future__ import annotations

from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches


def fetch(client: RawClient, topic, partitions: dict[int, int], max_bytes: int = 1 << 20,
          partition_max: int = 1 << 20, version: int = 12):
    """A consumer's Fetch; ``topic`` is a name, or a topic id from version 13 on."""
    replica = {"replica_state": {"replica_id": -1, "replica_epoch": -1}} if version >= 15 else {"replica_id": -1}
    resp = client.request(ApiKey.FETCH, version, {
        **replica, "max_wait": 100, "min_bytes": 1, "max_bytes": max_bytes,
        "topics": [{"topic_id" if version >= 13 else "topic": topic, "partitions": [
            {"partition": p, "fetch_offset": off, "partition_max_bytes": partition_max}
            for p, off in partitions.items()]}]})
    return {p.partition_index: p for p in resp.responses[0].partitions}


def batches(records: bytes | None) -> list:
    return [h for _, h in iter_batches(records)] if records else []
