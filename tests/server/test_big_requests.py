"""One big request must not stall the other clients (issue 16): a 16 MB OffsetFetch of 4 million partitions
(four topics of a million: Kafka 4.4 refuses a bigger array), a Metadata request naming a million topics, a
ListOffsets request of a million partitions and a 16 MB Fetch
of some 400,000 partitions (by name and by topic id), each sent on one connection while another connection
sends ApiVersions requests one after another. Every probe sent while the broker holds the big request is
answered within 100 ms, and the big request gets its correct answer.

The window starts when the big frame is fully written (not after a sleep) and ends when its answer is
read. The machine is shared, so the bound is checked on each probe's round trip less the time the
broker's loop thread waited for a CPU and the longest wait of another broker thread (one holding the
GIL holds the loop up as long), and less the largest gap a canary thread of the test process saw in
its sleeps, when that gap says the test process was itself starved (tests/server/bigreqlib.py; such a
probe was once left out instead, which let a 15 s stall of the loop pass); the figures are printed either
way. A run over the bound is repeated, up to twice, and the first run within it is judged: a stall of the
loop comes back every time.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable

import pytest
from kio.index import load_request_schema, load_response_schema

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.waiting import not_yet, wait_until
from tests.server.bigreqlib import Run, broker_rss_peak_mb, judged_run, while_probing
from tierlog.protocol import ApiKey, build, encode_request, parse_response
from tierlog.records import build_batch, iter_records

pytestmark = pytest.mark.slow

MAX_PROBE_RTT = 0.100


def _uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstr(s: str) -> bytes:
    b = s.encode()
    return _uv(len(b) + 1) + b


def _wait_for_coordinator(raw: RawClient, group: str) -> None:
    def found():
        resp = raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        return resp.error_code == 0 or not_yet(resp)

    wait_until(found, 30, interval=0.1, what=f"the coordinator of {group}")


def assert_no_stall(run, broker, frame: bytes) -> None:
    """Enough probes were answered while the broker held the big request, each within the bound
    (judged on a repeat when the first run went over it)."""
    run = judged_run(run, broker.bootstrap, frame, broker.proc.pid, MAX_PROBE_RTT)
    assert len(run.in_window) >= 10, run.summary()
    assert run.max_rtt()[1] <= MAX_PROBE_RTT, run.summary()


def test_offset_fetch_of_four_million_partitions_does_not_stall_other_clients(broker):
    n = 1_000_000  # per topic: Kafka 4.4 refuses an array of more than a million elements, so does tierlog
    topic, group = unique("big"), unique("group")
    others = [unique("none") for _ in range(3)]  # topics without offsets (nor partitions): answered -1
    create_topic(broker.bootstrap, topic, 2)
    raw = RawClient(broker.bootstrap)
    try:
        _wait_for_coordinator(raw, group)
        committed = raw.request(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 3, "committed_metadata": "m"},
                {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": 3,
                 "committed_metadata": ""}]}]})
        assert [p.error_code for p in committed.topics[0].partitions] == [0, 0]
    finally:
        raw.close()
    request = build(load_request_schema(ApiKey.OFFSET_FETCH, 8), {"groups": [
        {"group_id": group, "topics": [{"name": name, "partition_indexes": range(n)} for name in [topic, *others]]}],
        "require_stable": False})
    frame = encode_request(request, 99, "big")
    del request
    assert len(frame) > 16_000_000

    run = while_probing(broker.bootstrap, frame, broker.proc.pid)
    print(f"\nOffsetFetch of {4 * n} partitions ({len(frame)} bytes): {run.summary()}; "
          f"broker peak RSS {broker_rss_peak_mb(broker.proc.pid):.0f} MB")

    # The exact answer, byte for byte: header v1, throttle, one group, four topics of n partitions.
    def partition(p: int) -> bytes:
        if p == 0:
            return struct.pack(">iqi", 0, 42, 3) + _cstr("m") + b"\0\0\0"
        if p == 1:
            return struct.pack(">iqi", 1, 7, 3) + _cstr("") + b"\0\0\0"
        return struct.pack(">iqi", p, -1, -1) + b"\x01\0\0\0"

    def none(p: int) -> bytes:
        return struct.pack(">iqi", p, -1, -1) + b"\x01\0\0\0"

    topics = [_cstr(topic) + _uv(n + 1) + b"".join(map(partition, range(n))) + b"\0"]
    topics += [_cstr(name) + _uv(n + 1) + b"".join(map(none, range(n))) + b"\0" for name in others]
    expected = b"".join([struct.pack(">i", 99), b"\0", struct.pack(">i", 0), _uv(2), _cstr(group), _uv(5),
                         *topics, b"\0\0", b"\0", b"\0"])
    assert run.answer == expected
    assert_no_stall(run, broker, frame)


def test_metadata_naming_a_million_topics_does_not_stall_other_clients(broker):
    n = 1_000_000
    names = [f"absent-{i:07d}" for i in range(n)]
    request = build(load_request_schema(ApiKey.METADATA, 12), {
        "topics": [{"name": name} for name in names], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    frame = encode_request(request, 5, "big")
    del request

    run = while_probing(broker.bootstrap, frame, broker.proc.pid)
    print(f"\nMetadata naming {n} topics ({len(frame)} bytes): {run.summary()}; "
          f"broker peak RSS {broker_rss_peak_mb(broker.proc.pid):.0f} MB")

    corr, response = parse_response(run.answer, load_response_schema(ApiKey.METADATA, 12))
    assert corr == 5
    assert [t.name for t in response.topics] == names
    assert {int(t.error_code) for t in response.topics} == {3}  # UNKNOWN_TOPIC_OR_PARTITION
    assert_no_stall(run, broker, frame)


def test_list_offsets_of_a_million_partitions_does_not_stall_other_clients(broker):
    n = 1_000_000
    topic = unique("big")
    create_topic(broker.bootstrap, topic, 2)
    request = build(load_request_schema(ApiKey.LIST_OFFSETS, 9), {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in range(n)]}]})
    frame = encode_request(request, 7, "big")
    del request
    assert len(frame) > 16_000_000

    run = while_probing(broker.bootstrap, frame, broker.proc.pid)
    print(f"\nListOffsets of {n} partitions ({len(frame)} bytes): {run.summary()}; "
          f"broker peak RSS {broker_rss_peak_mb(broker.proc.pid):.0f} MB")

    corr, response = parse_response(run.answer, load_response_schema(ApiKey.LIST_OFFSETS, 9))
    assert corr == 7
    assert [t.name for t in response.topics] == [topic]
    parts = response.topics[0].partitions
    assert [p.partition_index for p in parts] == list(range(n))
    assert [(int(p.error_code), p.offset) for p in parts[:2]] == [(0, 0), (0, 0)]
    assert {(int(p.error_code), p.offset, p.timestamp, p.leader_epoch) for p in parts[2:]} == {(3, -1, -1, -1)}
    assert_no_stall(run, broker, frame)


@pytest.mark.parametrize("version", [12, 16])
def test_fetch_of_400_000_partitions_does_not_stall_other_clients(broker, version):
    """A real topic's partitions 0 (with data) and 1 (empty), then 250,000 partitions it does not have, then
    160,000 topics the broker does not know (by name up to v12, by topic id from v13), one partition each."""
    n, absent = 250_000, 160_000
    by_id = version >= 13
    topic = unique("big")
    create_topic(broker.bootstrap, topic, 2)
    raw = RawClient(broker.bootstrap)
    try:
        produced = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [{
            "name": topic, "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v%d" % i) for i in
                                                                                   range(3)])}]}]})
        assert produced.responses[0].partition_responses[0].error_code == 0
        topic_id = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]}).topics[0].topic_id
    finally:
        raw.close()
    key = "topic_id" if by_id else "topic"
    others = [uuid.uuid4() for _ in range(absent)] if by_id else [f"absent-{i:07d}" for i in range(absent)]
    request = build(load_request_schema(ApiKey.FETCH, version), {
        "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{key: topic_id if by_id else topic, "partitions": [
            {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(n)]},
            *({key: other, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
              for other in others)]})
    frame = encode_request(request, 11, "big")
    del request
    assert len(frame) > 16_000_000

    run = while_probing(broker.bootstrap, frame, broker.proc.pid)
    print(f"\nFetch v{version} of {n + absent} partitions ({len(frame)} bytes): {run.summary()}; "
          f"broker peak RSS {broker_rss_peak_mb(broker.proc.pid):.0f} MB")

    corr, response = parse_response(run.answer, load_response_schema(ApiKey.FETCH, version))
    assert corr == 11 and response.error_code == 0
    assert [getattr(t, key) for t in response.responses] == [topic_id if by_id else topic, *others]
    parts = response.responses[0].partitions
    assert [p.partition_index for p in parts] == list(range(n))
    first, empty = parts[0], parts[1]
    assert (first.error_code, first.high_watermark, first.log_start_offset) == (0, 3, 0)
    assert [r.value for r in iter_records(first.records)] == [b"v0", b"v1", b"v2"]
    assert (empty.error_code, empty.high_watermark, empty.records or b"") == (0, 0, b"")
    assert {(int(p.error_code), p.high_watermark, p.records or b"") for p in parts[2:]} == {(3, -1, b"")}
    unknown = 100 if by_id else 3  # UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION
    assert {(len(t.partitions), t.partitions[0].partition_index, int(t.partitions[0].error_code))
            for t in response.responses[1:]} == {(1, 0, unknown)}
    assert_no_stall(run, broker, frame)


def test_produce_to_500_000_partitions_does_not_stall_other_clients(broker):
    """500,000 partitions a real topic does not have, each with a batch: every one answered
    UNKNOWN_TOPIC_OR_PARTITION as it is walked (1.2-2.4 s of the loop at once before). Nothing is appended, so
    a repeat (judged_run) gets the same answer."""
    n = 500_000
    topic = unique("big")
    create_topic(broker.bootstrap, topic, 2)
    batch = build_batch([(b"k", b"v")])
    request = build(load_request_schema(ApiKey.PRODUCE, 9), {
        "transactional_id": None, "acks": 1, "timeout": 30000, "topic_data": [{"name": topic, "partition_data": [
            {"index": p, "records": batch} for p in range(2, n + 2)]}]})
    frame = encode_request(request, 13, "big")
    del request
    assert len(frame) > 16_000_000

    run = while_probing(broker.bootstrap, frame, broker.proc.pid)
    print(f"\nProduce to {n} partitions ({len(frame)} bytes): {run.summary()}; "
          f"broker peak RSS {broker_rss_peak_mb(broker.proc.pid):.0f} MB")

    corr, response = parse_response(run.answer, load_response_schema(ApiKey.PRODUCE, 9))
    assert corr == 13
    assert [t.name for t in response.responses] == [topic]
    parts = response.responses[0].partition_responses
    assert [p.index for p in parts] == list(range(2, n + 2))
    assert {(int(p.error_code), p.base_offset) for p in parts} == {(3, -1)}
    assert_no_stall(run, broker, frame)


def test_create_and_delete_topics_of_3000_partitions_do_not_stall_other_clients(broker):
    """A CreateTopics of 3,000 partitions, then a DeleteTopics of them: answered at once, and the 3,000 logs
    each makes or removes (14-24 s of the loop at once before, for the creation: every log wrote and synced
    its partition.metadata and leader-epoch checkpoint) are opened, or closed and renamed, a slice at a time.
    The creation's window runs from the request to the moment every partition answers a ListOffsets
    (NOT_LEADER_OR_FOLLOWER, retriable, until its log is open); the deletion's until no partition folder is
    left. A run over the bound is repeated with another topic."""
    n = 3000
    raw = RawClient(broker.bootstrap)
    folders = broker.log_dir

    def open_codes(topic: str, partitions: range) -> set[int]:
        resp = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                           for p in partitions]}]})
        codes = {int(p.error_code) for p in resp.topics[0].partitions}
        assert codes <= {0, 6}, codes  # open, or NOT_LEADER_OR_FOLLOWER until it is
        return codes

    def create(topic: str) -> Run:
        frame = encode_request(build(load_request_schema(ApiKey.CREATE_TOPICS, 7), {"topics": [{
            "name": topic, "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout_ms": 60000, "validate_only": False}), 21, "big")
        # they open in order: the last one open, all are (every one is checked after the window)
        run = while_probing(broker.bootstrap, frame, broker.proc.pid,
                            settled=lambda: open_codes(topic, range(n - 1, n)) == {0})
        print(f"\nCreateTopics of {n} partitions: {run.summary()}")
        corr, response = parse_response(run.answer, load_response_schema(ApiKey.CREATE_TOPICS, 7))
        assert corr == 21
        assert [(t.name, int(t.error_code), t.num_partitions) for t in response.topics] == [(topic, 0, n)]
        assert open_codes(topic, range(n)) == {0}
        return run

    def delete(topic: str) -> Run:
        frame = encode_request(build(load_request_schema(ApiKey.DELETE_TOPICS, 6), {
            "topics": [{"name": topic, "topic_id": b"\0" * 16}], "timeout_ms": 60000}), 22, "big")
        run = while_probing(broker.bootstrap, frame, broker.proc.pid,
                            settled=lambda: not any(folders.glob(f"{topic}-*")))
        print(f"\nDeleteTopics of {n} partitions: {run.summary()}")
        corr, response = parse_response(run.answer, load_response_schema(ApiKey.DELETE_TOPICS, 6))
        assert corr == 22
        assert [(r.name, int(r.error_code)) for r in response.responses] == [(topic, 0)]
        return run

    def judged(step: Callable[[str], Run]) -> Run:
        topic = unique("many")
        run = step(topic) if step is create else step(create(topic) and topic)
        if run.max_rtt()[1] > MAX_PROBE_RTT:
            print("over the bound once, repeating")
            topic = unique("many")
            run = step(topic) if step is create else step(create(topic) and topic)
        return run

    try:
        for step in (create, delete):
            run = judged(step)
            assert len(run.in_window) >= 10, run.summary()
            assert run.max_rtt()[1] <= MAX_PROBE_RTT, run.summary()
    finally:
        raw.close()
