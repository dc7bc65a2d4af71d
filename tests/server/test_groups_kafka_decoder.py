"""Kafka's own ``DumpLogSegments --offsets-decoder`` reads the ``__consumer_offsets`` tierlog writes.

A tierlog broker hosts a consumer group (kafka-python: join, sync, commits, leave), a simple
consumer's commit, a static member and a deleted group; after a clean stop, Kafka decodes every
record of the partitions that were written, and each decoded key and value must be what tierlog's
decoder reads from the same bytes. Needs Java and Kafka's jars (the harness's ``kafka_tool``; skipped
without them locally, failing in CI like the other peer tests).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.harness.waiting import wait_until
from tests.server.groupslib import KafkaPythonMember, committed_offsets, produce
from tierlog.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_value,
)
from tierlog.records import iter_records

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

_RECORD = re.compile(r"^\| offset: (\d+) .* key: (\{.*\}) payload: (.*)$")


def _tierlog_records(log_file: Path) -> dict[int, tuple]:
    return {r.offset: (decode_key(r.key), decode_value(decode_key(r.key), r.value))
            for r in iter_records(log_file.read_bytes())}


def _expected_key(key) -> dict:
    if isinstance(key, OffsetCommitKey):
        return {"type": "1", "data": {"group": key.group, "topic": key.topic, "partition": key.partition}}
    assert isinstance(key, GroupMetadataKey)
    return {"type": "2", "data": {"group": key.group}}


def _check_value(key, value, payload: str) -> None:
    if value is None:
        assert payload == "<DELETE>"
        return
    decoded = json.loads(payload)
    assert decoded["version"] == "3"
    data = decoded["data"]
    if isinstance(key, OffsetCommitKey):
        assert data == {"offset": value.offset, "leaderEpoch": value.leader_epoch, "metadata": value.metadata,
                        "commitTimestamp": value.commit_timestamp}
        return
    assert (data["protocolType"], data["generation"], data["protocol"], data["leader"],
            data["currentStateTimestamp"]) == (value.protocol_type, value.generation, value.protocol, value.leader,
                                               value.current_state_timestamp)
    assert len(data["members"]) == len(value.members)
    for got, m in zip(data["members"], value.members):
        assert (got["memberId"], got["groupInstanceId"], got["clientId"], got["clientHost"],
                got["rebalanceTimeout"], got["sessionTimeout"]) == (
            m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout, m.session_timeout)
        # Kafka decodes subscription and assignment as consumer protocol messages. kafka-python's
        # first join may go out before its topic metadata (a known client quirk), so an early
        # generation can carry an empty assignment; the final one must hold both partitions.
        assert got["subscription"]["topics"] == ["dec"]
        assert got["assignment"]["assignedPartitions"] in ([], [{"topic": "dec", "partitions": [0, 1]}])
        ASSIGNMENTS.append(got["assignment"]["assignedPartitions"])


ASSIGNMENTS: list = []


def test_kafka_decodes_tierlog_consumer_offsets(start_broker, kafka_tool):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

    broker = start_broker()
    produce(broker.bootstrap, "dec", 2, 3, create=True)
    member = KafkaPythonMember(broker.bootstrap, "dec-group", "dec", group_instance_id="static-1")
    member.start()
    wait_until(lambda: len(member.snapshot()[0]) == 6, 30, what="six records")
    time.sleep(0.2)
    member.stop()
    simple = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="dec-simple", enable_auto_commit=False)
    simple.commit({TopicPartition("dec", 1): OffsetAndMetadata(2, "note \u00e9", -1)})
    simple.close()
    assert committed_offsets(broker.bootstrap, "dec-simple") == {("dec", 1): 2}
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin.delete_groups(["dec-simple"]) == {"dec-simple": "OK"}
    finally:
        admin.close()
    broker.stop()

    files = sorted(f for f in broker.log_dir.glob("__consumer_offsets-*/*.log") if f.stat().st_size)
    assert files
    out = kafka_tool("DumpLogSegments", "--offsets-decoder", "--files", ",".join(map(str, files))).stdout
    decoded: dict[str, list[tuple[int, str, str]]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("Dumping "):
            current = Path(line[len("Dumping "):].strip())
            decoded[str(current)] = []
        elif (m := _RECORD.match(line)) is not None:
            decoded[str(current)].append((int(m.group(1)), m.group(2), m.group(3)))
    seen = set()
    for f in files:
        ours = _tierlog_records(f)
        theirs = decoded[str(f)]
        assert [o for o, _, _ in theirs] == sorted(ours)
        for offset, key_json, payload in theirs:
            key, value = ours[offset]
            assert json.loads(key_json) == _expected_key(key)
            _check_value(key, value, payload)
            seen.add((type(key).__name__, value is None))
    assert ASSIGNMENTS and ASSIGNMENTS[-1] == [{"topic": "dec", "partitions": [0, 1]}]
    # Group metadata, offset commits, and tombstones of both kinds were all cross-checked.
    assert seen == {("GroupMetadataKey", False), ("GroupMetadataKey", True),
                    ("OffsetCommitKey", False), ("OffsetCommitKey", True)}
