"""Reading history from the remote tier through a live ``tierlog broker`` process: real clients
(confluent-kafka, kafka-python, tierlog's own), real sockets, real files.

One broker per module serves most tests (each test uses its own topics). It keeps remote metadata in
process (``remote.log.metadata.manager.class.name=memory``) and stores segments with the filesystem
backend behind the fault-injecting wrapper, whose control file starts empty: tests break and heal the
store while the broker runs. The restart test runs its own broker with the topic-based metadata
manager (``__remote_log_metadata``), the one whose metadata survives a restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.tiered.fetchlib import batches, fetch
from tests.tiered.holds import held_rlmm_settings
from tierlog.protocol import ApiKey
from tierlog.tiered.rsm.faults import write_control

FAULTS = "tierlog.tiered.rsm.faults:FaultInjectingRemoteStorageManager"
# Small segments and local retention: the local tail is at most 15000 bytes plus the oldest local segment.
SEGMENT_BYTES, LOCAL_RETENTION_BYTES = 10000, 15000
SMALL = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
         "local.retention.bytes": str(LOCAL_RETENTION_BYTES), "file.delete.delay.ms": "0"}
TAIL_BYTES = LOCAL_RETENTION_BYTES + SEGMENT_BYTES + 4096  # a segment may overshoot by one batch


def settings(root: Path, rlmm: str, **extra) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.metadata.manager.class.name": rlmm,
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "5",
        "remote.log.storage.manager.class.name": FAULTS,
        "rsm.config.fault.delegate": "filesystem",
        "rsm.config.fault.control.file": str(root / "faults.json"),
        "rsm.config.dir": str(root / "remote"),
        "remote.log.manager.task.interval.ms": "100",
        "log.retention.check.interval.ms": "100",
        "metrics.port": "0",
        "num.partitions": "1",
        **extra,
    }


def start(root: Path, rlmm: str = "memory", **extra) -> BrokerProcess:
    b = BrokerProcess(root / "logs", settings(root, rlmm, **extra)).start()
    b.remote_dir = root / "remote"
    b.control = root / "faults.json"
    return b


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-fetch")
    b = start(root)
    yield b
    b.kill()


@pytest.fixture
def healthy_store(tiered):
    """Whatever a test breaks in the store is healed afterwards."""
    write_control(tiered.control)
    yield tiered
    write_control(tiered.control)


# ------------------------------------------------------------------------------------------- helpers


def metrics_url(b: BrokerProcess) -> str:
    for line in b.output:
        if "Metrics on " in line:
            return line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
    raise AssertionError("no metrics line")


def status(b: BrokerProcess, topic: str) -> list[dict]:
    return json.load(urllib.request.urlopen(metrics_url(b) + f"/v1/tier/status?topic={topic}"))["partitions"]


def metric(b: BrokerProcess, name: str, topic: str) -> float:
    text = urllib.request.urlopen(metrics_url(b) + "/metrics").read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and f'topic="{topic}"' in line)


def wait_tiered(b: BrokerProcess, topic: str, partitions: int = 1, timeout: float = 60) -> list[dict]:
    """Until every partition has copied all rolled segments and local retention trimmed the rest."""

    def tiered():
        parts = status(b, topic)
        if len(parts) == partitions and all(p["ready"] and p["copy_lag_segments"] == 0 and p["remote_segments"] > 0
                                            and p["local_bytes"] <= TAIL_BYTES and p["local_log_start_offset"] > 0
                                            for p in parts):
            return sorted(parts, key=lambda p: p["partition"])
        return not_yet(parts)

    return wait_until(tiered, timeout, interval=0.1, what=f"{topic} to be tiered (its status)")


def create(b: BrokerProcess, topic: str, partitions: int = 1, **configs) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={**SMALL, **configs})])
    finally:
        admin.close()


def produce(b: BrokerProcess, topic: str, count: int, codec: str | None = None, partition: int | None = None,
            timestamps: list[int] | None = None, start: int = 0) -> list[tuple]:
    """Produce ``count`` records with a header each; returns (partition, offset, key, value, headers)."""
    p = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=5, batch_size=4096, compression_type=codec)
    pending = []
    for i in range(start, start + count):
        key, value, headers = b"k%06d" % i, os.urandom(60) + b"v%06d" % i, [("n", b"%d" % i)]
        ts = timestamps[i - start] if timestamps else None
        pending.append((key, value, headers, p.send(topic, value, key, headers=headers, partition=partition,
                                                    timestamp_ms=ts)))
    p.flush(30)
    sent = []
    for key, value, headers, fut in pending:
        md = fut.get(30)
        sent.append((md.partition, md.offset, key, value, headers))
    p.close()
    return sorted(sent)


def consume_confluent(b: BrokerProcess, topic: str, partitions: int, expected: int, offset: int = 0,
                      **config) -> list[tuple]:
    c = CKConsumer({"bootstrap.servers": b.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", **config})
    c.assign([CKTopicPartition(topic, p, offset) for p in range(partitions)])
    out = []

    def consumed():
        if len(out) < expected:
            for m in c.consume(500, timeout=1):
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
        return len(out) >= expected

    try:
        with contextlib.suppress(TimedOut):  # the caller compares what arrived
            wait_until(consumed, 60, interval=0, what=f"{expected} records")
    finally:
        c.close()
    return sorted(out)


def consume_kafka_python(b: BrokerProcess, topic: str, partitions: int, expected: int) -> list[tuple]:
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([KTopicPartition(topic, p) for p in range(partitions)])
    c.seek_to_beginning()
    out = []

    def consumed():
        if len(out) < expected:
            for records in c.poll(1000).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records)
        return len(out) >= expected

    try:
        with contextlib.suppress(TimedOut):  # the caller compares what arrived
            wait_until(consumed, 60, interval=0, what=f"{expected} records")
    finally:
        c.close()
    return sorted(out)


def consume_tierlog(b: BrokerProcess, topic: str, partitions: int, expected: int) -> list[tuple]:
    from tierlog.client.sync import Consumer
    from tierlog.client.types import TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    out = []

    def consumed():
        if len(out) < expected:
            for records in c.poll(1000).values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records)
        return len(out) >= expected

    try:
        with contextlib.suppress(TimedOut):  # the caller compares what arrived
            wait_until(consumed, 60, interval=0, what=f"{expected} records")
    finally:
        c.close()
    return sorted(out)


def list_offsets(b: BrokerProcess, topic: str, timestamp: int, version: int = 9, timeout_ms: int | None = None):
    client = RawClient(b.bootstrap, timeout=60)
    try:
        values = {"replica_id": -1, "isolation_level": 0,
                  "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}]}
        if version >= 10:
            values["timeout"] = timeout_ms if timeout_ms is not None else 30000
        return client.request(ApiKey.LIST_OFFSETS, version, values).topics[0].partitions[0]
    finally:
        client.close()


def local_segments(directory: Path) -> list[tuple[int, int]]:
    """(base offset, bytes) of the partition's .log files, oldest first."""
    while True:
        try:
            return sorted((int(f.name[:20]), f.stat().st_size) for f in directory.glob("*.log"))
        except FileNotFoundError:
            continue  # a segment was renamed for deletion while listed


def assert_only_the_tail_is_local(b: BrokerProcess, topic: str, parts: list[dict]) -> None:
    """Local retention has trimmed everything it may (what stays after the oldest local segment is under
    local.retention.bytes) and the remote tier holds the rest from offset 0. Retention runs after the
    upload that allows it, so this waits for it; the number of files left depends on how well the
    batches compressed, so it is not counted."""
    for p in parts:
        directory = b.log_dir / f"{topic}-{p['partition']}"

        def trimmed(directory=directory):
            local = local_segments(directory)
            return local if sum(size for _, size in local) - local[0][1] < LOCAL_RETENTION_BYTES else not_yet(local)

        local = wait_until(trimmed, 30, interval=0.1, what=f"local retention of {directory.name} (its segments)")
        total = sum(size for _, size in local)
        assert total - local[0][1] < LOCAL_RETENTION_BYTES, local
        assert total <= TAIL_BYTES, local
        now = {q["partition"]: q for q in status(b, topic)}[p["partition"]]
        assert local[0][0] == now["local_log_start_offset"] > 0
        remote = sorted(int(f.name[:20]) for f in b.remote_dir.rglob(f"{topic}-*/{p['partition']}/*.log"))
        assert remote[0] == 0 and len(remote) == now["remote_segments"] >= 2
        assert now["highest_offset_in_remote_storage"] >= now["local_log_start_offset"] - 1


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_consumers_read_the_whole_history_byte_for_byte(tiered, codec):
    topic = f"history-{codec or 'none'}"
    create(tiered, topic, 2)
    sent = produce(tiered, topic, 1500, codec)
    parts = wait_tiered(tiered, topic, 2)
    assert all(p["log_start_offset"] == 0 for p in parts)
    assert_only_the_tail_is_local(tiered, topic, parts)
    assert consume_confluent(tiered, topic, 2, len(sent)) == sent
    assert consume_kafka_python(tiered, topic, 2, len(sent)) == sent
    assert consume_tierlog(tiered, topic, 2, len(sent)) == sent


def test_one_fetch_reads_several_remote_partitions_and_local_ones_within_limits(tiered):
    topic = "multi"
    create(tiered, topic, 3)
    for p in range(3):
        produce(tiered, topic, 600, partition=p)
    parts = wait_tiered(tiered, topic, 3)
    local_start = {p["partition"]: p["local_log_start_offset"] for p in parts}
    client = RawClient(tiered.bootstrap)
    try:
        # Partitions 0 and 1 from offset 0 (remote), partition 2 from its local start: all return data.
        got = fetch(client, topic, {0: 0, 1: 0, 2: local_start[2]})
        assert [got[p].error_code for p in range(3)] == [0, 0, 0]
        assert batches(got[0].records)[0].base_offset == 0 and batches(got[1].records)[0].base_offset == 0
        assert batches(got[2].records)[0].base_offset == local_start[2]
        assert all(got[p].high_watermark == 600 and got[p].log_start_offset == 0 for p in range(3))
        # Byte limits: per partition and for the whole response, whole batches only.
        size = max(h.size for h in batches(got[0].records)[:3])  # the producer's batches are alike
        got = fetch(client, topic, {0: 0, 1: 0}, max_bytes=int(size * 2.5), partition_max=int(size * 1.5))
        sizes = [len(got[p].records or b"") for p in (0, 1)]
        assert 0 < sizes[0] <= size * 1.5 and 0 < sizes[1] <= size * 1.5 and sum(sizes) <= size * 2.5
        assert all(sum(h.size for h in batches(got[p].records)) == sizes[p] for p in (0, 1))
        # a limit that holds partition 0's first batch and neither its second nor partition 1's first (the
        # producer's batches differ in size under load, so the limit is taken from the batches themselves)
        p0 = batches(fetch(client, topic, {0: 0})[0].records)
        p1 = batches(fetch(client, topic, {1: 0})[1].records)
        limit = p0[0].size + min(p0[1].size, p1[0].size) - 1
        got = fetch(client, topic, {0: 0, 1: 0}, max_bytes=limit, partition_max=limit)
        assert len(batches(got[0].records)) == 1 and not got[1].records  # what is left fits no batch
        # Min-one-message applies to the response, not to each partition: one batch in all.
        got = fetch(client, topic, {0: 0, 1: 0}, max_bytes=1)
        assert len(batches(got[0].records)) == 1 and not got[1].records
        got = fetch(client, topic, {0: 0, 2: local_start[2]}, max_bytes=1)
        assert len(batches(got[0].records)) + len(batches(got[2].records)) == 1
        # Fetch v14+ (KIP-405): a consumer is never answered OFFSET_MOVED_TO_TIERED_STORAGE.
        for version in (14, 15, 17):
            got = fetch(client, _topic_ids(tiered, topic)[0], {0: 0}, version=version)
            assert got[0].error_code == 0 and batches(got[0].records)[0].base_offset == 0
        # An offset in the middle of a remote batch starts at that batch.
        first = batches(fetch(client, topic, {0: 0})[0].records)
        middle = next(h for h in first if h.last_offset > h.base_offset)
        again = batches(fetch(client, topic, {0: middle.base_offset + 1})[0].records)
        assert again[0].base_offset == middle.base_offset
        # Following next offsets crosses remote segments and the remote/local edge.
        offset, answers = 0, 0
        while offset < 600:
            bs = batches(fetch(client, topic, {0: offset}, partition_max=7000)[0].records)
            assert bs and bs[0].base_offset <= offset
            offset = bs[-1].next_offset
            answers += 1
        assert answers > 5
    finally:
        client.close()
    # A broker that is not a replica of the partition is answered NOT_LEADER_OR_FOLLOWER, as Kafka's leader
    # answers it (it cannot record that follower's position), whether Fetch v14 carries the replica id in the
    # request or v15+ in its ReplicaState. A real follower behind the local log start is answered
    # OFFSET_MOVED_TO_TIERED_STORAGE (109): tests/cluster/test_tiered_replication.py.
    client = RawClient(tiered.bootstrap)
    try:
        topic_id = _topic_ids(tiered, topic)[0]
        follower = {14: {"replica_id": 7}, 15: {"replica_state": {"replica_id": 7, "replica_epoch": 1}}}
        for version, replica in follower.items():
            resp = client.request(ApiKey.FETCH, version, {
                **replica, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
            assert resp.responses[0].partitions[0].error_code == 6, version
    finally:
        client.close()


def _topic_ids(b: BrokerProcess, topic: str):
    client = RawClient(b.bootstrap)
    try:
        md = client.request(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                   "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
        return [t.topic_id for t in md.topics]
    finally:
        client.close()


def test_list_offsets_with_remote_data(tiered, healthy_store):
    topic = "offsets"
    create(tiered, topic)
    base = int(time.time() * 1000) - 3_600_000
    stamps = [base + 1000 * i for i in range(800)]
    produce(tiered, topic, 800, timestamps=stamps)
    part = wait_tiered(tiered, topic)[0]
    local_start = part["local_log_start_offset"]
    assert list_offsets(tiered, topic, -2).offset == 0
    assert list_offsets(tiered, topic, -4, 8).offset == local_start > 0
    assert list_offsets(tiered, topic, -5).offset == part["highest_offset_in_remote_storage"] >= local_start - 1
    assert list_offsets(tiered, topic, -1).offset == 800
    for i in (0, 1, 137, local_start - 1, local_start, 799):
        r = list_offsets(tiered, topic, stamps[i])
        assert (r.error_code, r.offset, r.timestamp) == (0, i, stamps[i])
    r = list_offsets(tiered, topic, stamps[10] - 500)  # between two records
    assert (r.offset, r.timestamp) == (10, stamps[10])
    assert list_offsets(tiered, topic, stamps[-1] + 1).offset == -1
    r = list_offsets(tiered, topic, stamps[300], version=10, timeout_ms=5000)
    assert (r.error_code, r.offset) == (0, 300)
    # A store that hangs (until the test lets it go): the request's own TimeoutMs (v10) bounds the
    # remote search, so an answer comes at all.
    write_control(tiered.control, fetch="hold", index="hold")
    r = list_offsets(tiered, topic, stamps[200], version=10, timeout_ms=300)
    assert r.error_code == 7  # REQUEST_TIMED_OUT
    assert list_offsets(tiered, topic, -2, version=10, timeout_ms=300).offset == 0  # no remote work
    write_control(tiered.control)


def test_a_slow_remote_read_answers_empty_within_remote_fetch_max_wait(tiered, healthy_store):
    topic = "slow"
    create(tiered, topic)
    sent = produce(tiered, topic, 500)
    wait_tiered(tiered, topic)
    # The store hangs (every read waits until the test lets it go): the fetch is answered anyway, empty
    # and without error, once remote.fetch.max.wait.ms (500) has passed.
    write_control(tiered.control, fetch="hold", index="hold")
    client = RawClient(tiered.bootstrap)
    try:
        began = time.monotonic()
        part = fetch(client, topic, {0: 0})[0]
        took = time.monotonic() - began
        assert part.error_code == 0 and not part.records and took >= 0.4
        write_control(tiered.control)
        # The read goes on in the background; a consumer asking again gets the records once it is done.
        def fetched():
            part = fetch(client, topic, {0: 0})[0]
            assert part.records or part.error_code == 0
            return part if part.records else None

        part = wait_until(fetched, 60, interval=0, what="the records read in the background")
        assert part.error_code == 0 and batches(part.records)[0].base_offset == 0
    finally:
        client.close()
    assert consume_confluent(tiered, topic, 1, len(sent)) == sent


def _set_cluster_default(client: RawClient, name: str, value: str | None) -> None:
    """IncrementalAlterConfigs on the cluster-wide broker default: SET a value, or DELETE it (None)."""
    op = {"name": name, "config_operation": 0 if value is not None else 1, "value": value}
    r = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": 4, "resource_name": "", "configs": [op]}], "validate_only": False})
    assert [(x.error_code, x.error_message) for x in r.responses] == [(0, None)]


def test_the_remote_fetch_quota_answers_empty_without_error_until_it_is_raised(tmp_path):
    """KIP-956: over remote.log.manager.fetch.max.bytes.per.second, a consumer's read of remote data gets
    no records and no error (it waits like any empty fetch) while local data is still served; the quota
    is dynamic. Its own broker: the quota is broker-wide and other tests' reads would count."""
    b = start(tmp_path)
    try:
        topic = "quota"
        create(b, topic)
        sent = produce(b, topic, 500)
        part = wait_tiered(b, topic)[0]
        client = RawClient(b.bootstrap)
        try:
            _set_cluster_default(client, "remote.log.manager.fetch.max.bytes.per.second", "1000")
            first = fetch(client, topic, {0: 0}, partition_max=4096)[0]
            assert first.error_code == 0 and batches(first.records)  # nothing read yet: within the quota
            after = batches(first.records)[-1].last_offset + 1
            assert after < part["local_log_start_offset"]
            throttled = fetch(client, topic, {0: after}, partition_max=4096)[0]
            assert (throttled.error_code, throttled.records or b"") == (0, b"")
            assert throttled.high_watermark == len(sent) and throttled.log_start_offset == 0
            assert metric(b, "tierlog_remote_fetch_throttled_total", topic) >= 1
            # The last record, in the active segment: always local (retention may still remove one segment
            # after wait_tiered, so the local start it saw may be remote by now).
            local = fetch(client, topic, {0: part["log_end_offset"] - 1})[0]
            assert local.error_code == 0 and batches(local.records)  # the local tier is not throttled
            _set_cluster_default(client, "remote.log.manager.fetch.max.bytes.per.second", None)
            again = fetch(client, topic, {0: after}, partition_max=4096)[0]
            assert again.error_code == 0 and batches(again.records)[0].base_offset <= after
        finally:
            client.close()
        assert consume_confluent(b, topic, 1, len(sent)) == sent
    finally:
        b.kill()


def test_offsets_below_the_log_start_are_out_of_range_and_auto_offset_reset_applies(tiered):
    topic = "trimmed"
    create(tiered, topic)
    sent = produce(tiered, topic, 600)
    wait_tiered(tiered, topic)
    admin = KafkaAdminClient(bootstrap_servers=tiered.bootstrap)
    admin.delete_records({KTopicPartition(topic, 0): 200})
    admin.close()
    client = RawClient(tiered.bootstrap)
    try:
        assert fetch(client, topic, {0: 100})[0].error_code == 1  # OFFSET_OUT_OF_RANGE
        bs = batches(fetch(client, topic, {0: 200})[0].records)
        assert bs[0].base_offset <= 200 <= bs[0].last_offset
    finally:
        client.close()
    assert list_offsets(tiered, topic, -2).offset == 200
    # earliest: the new log start, in the remote tier.
    assert consume_confluent(tiered, topic, 1, 400, offset=100) == sent[200:]
    # error (librdkafka) / none (Java): the application is told.
    c = CKConsumer({"bootstrap.servers": tiered.bootstrap, "group.id": "reset-error", "auto.offset.reset": "error"})
    c.assign([CKTopicPartition(topic, 0, 100)])
    try:
        errors = wait_until(lambda: [m.error() for m in c.consume(10, timeout=1) if m.error() is not None], 15,
                            interval=0, what="an error of the consumer")
        assert errors and errors[0].code() == CKError._AUTO_OFFSET_RESET
    finally:
        c.close()
    # latest: the log end; only records produced afterwards arrive.
    k = KafkaConsumer(bootstrap_servers=tiered.bootstrap, enable_auto_commit=False, auto_offset_reset="latest")
    tp = KTopicPartition(topic, 0)
    k.assign([tp])
    k.seek(tp, 100)
    try:
        got = []

        def polled_until(done):
            if done():
                return True
            got.extend(r for rs in k.poll(500).values() for r in rs)
            return False

        wait_until(lambda: polled_until(lambda: k.position(tp) == 600) or not_yet(got), 20, interval=0,
                   what="the consumer's position 600 (records polled)")
        assert got == [] and k.position(tp) == 600
        later = produce(tiered, topic, 3, start=600)
        wait_until(lambda: polled_until(lambda: len(got) >= 3) or not_yet(got), 20, interval=0,
                   what="3 records (records polled)")
        assert [(r.offset, r.value) for r in got] == [(o, v) for _, o, _, v, _ in later]
    finally:
        k.close()


def test_a_missing_remote_object_is_a_retriable_error_and_consumers_recover(tiered):
    topic = "missing"
    create(tiered, topic)
    sent = produce(tiered, topic, 500)
    wait_tiered(tiered, topic)
    victim = sorted(tiered.remote_dir.rglob(f"{topic}-*/0/*.log"))[0]
    segment_id = victim.stem.split("-", 1)[1]
    hidden = victim.with_suffix(".hidden")
    victim.rename(hidden)
    ck = CKConsumer({"bootstrap.servers": tiered.bootstrap, "group.id": "missing", "enable.auto.commit": False})
    ck.assign([CKTopicPartition(topic, 0, 0)])
    kp = KafkaConsumer(bootstrap_servers=tiered.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    kp.assign([KTopicPartition(topic, 0)])
    kp.seek(KTopicPartition(topic, 0), 0)
    try:
        client = RawClient(tiered.bootstrap)
        try:
            part = fetch(client, topic, {0: 0})[0]
        finally:
            client.close()
        assert part.error_code == 56  # KAFKA_STORAGE_ERROR: every client retries it quietly
        assert any("from segment" in line and "failed" in line and segment_id in line for line in tiered.output), \
            "the broker log names the segment"
        # While the object is missing both consumers keep retrying: no error reaches the application.
        ck_got, kp_got = [], []
        # not wait_until: not a wait but 3 s of watching that nothing arrives
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for m in ck.consume(100, timeout=0.3):
                assert m.error() is None, m.error()
                ck_got.append(m)
            kp_got += [r for rs in kp.poll(300).values() for r in rs]  # raises on an error it does not retry
        assert ck_got == [] and kp_got == []
        hidden.rename(victim)

        def both_read():
            if len(ck_got) >= 500 and len(kp_got) >= 500:
                return True
            for m in ck.consume(500, timeout=0.3):
                assert m.error() is None, m.error()
                ck_got.append(m)
            kp_got.extend(r for rs in kp.poll(300).values() for r in rs)
            return False

        wait_until(lambda: both_read() or not_yet((len(ck_got), len(kp_got))), 60, interval=0,
                   what="500 records through each consumer (records read by confluent-kafka, kafka-python)")
        want = [(o, k, v) for _, o, k, v, _ in sent]
        assert [(m.offset(), m.key(), m.value()) for m in ck_got] == want
        assert [(r.offset, r.key, r.value) for r in kp_got] == want
    finally:
        if hidden.exists():
            hidden.rename(victim)
        ck.close()
        kp.close()


def test_a_failing_store_never_loses_data_or_stops_the_broker(tiered, healthy_store):
    topic, cold = "flaky", "flaky-cold"
    create(tiered, topic, 2)
    create(tiered, cold, 2)
    sent = produce(tiered, topic, 1200)
    produce(tiered, cold, 1000)
    wait_tiered(tiered, topic, 2)
    cold_parts = wait_tiered(tiered, cold, 2)
    errors_before = metric(tiered, "kafka_server_brokertopicmetrics_remotefetcherrors_total", topic)
    # Half of all segment and index reads fail (and copies meanwhile fail too).
    write_control(tiered.control, fetch_error_rate=0.5, index_error_rate=0.5, copy="error", seed=1)
    more = produce(tiered, topic, 300, start=1200)
    assert consume_confluent(tiered, topic, 2, len(sent) + len(more)) == sorted(sent + more)
    assert consume_kafka_python(tiered, topic, 2, len(sent) + len(more)) == sorted(sent + more)
    assert metric(tiered, "kafka_server_brokertopicmetrics_remotefetcherrors_total", topic) > errors_before
    # Every read failing: the broker keeps serving (local data, other requests) and answers 56 for data
    # not already in memory (the topic read above is still in the read-ahead windows, so another one).
    # Partition 1 is read at its last record, in the active segment: local retention may still have removed
    # a segment after wait_tiered (it allows one segment of slack), so its local start of then may be remote.
    write_control(tiered.control, fetch="error", index="error")
    client = RawClient(tiered.bootstrap)
    try:
        part = fetch(client, cold, {0: 0, 1: cold_parts[1]["log_end_offset"] - 1})
        assert part[0].error_code == 56 and part[1].error_code == 0 and part[1].records
    finally:
        client.close()
    assert tiered.proc.poll() is None
    write_control(tiered.control)
    wait_tiered(tiered, topic, 2)
    assert consume_confluent(tiered, topic, 2, len(sent) + len(more)) == sorted(sent + more)


def test_history_survives_a_restart_and_loading_metadata_blocks_only_remote_reads(tmp_path):
    """The topic-based metadata manager, restarted with its catch-up held until the test releases it
    (tests/tiered/holds.py): meanwhile remote reads and timestamp lookups answer the retriable
    REPLICA_NOT_AVAILABLE; local reads, also in the same request, and the special ListOffsets values are
    served at once."""
    b = start(tmp_path, "topic")
    try:
        create(b, "restart", 2)
        stamps = [int(time.time() * 1000) - 100_000 + i for i in range(400)]
        sent = sorted(produce(b, "restart", 400, partition=0, timestamps=stamps)
                      + produce(b, "restart", 400, partition=1, start=400))
        parts = wait_tiered(b, "restart", 2)
        before = parts[0]
        assert b.stop() == 0
        # The local start as the stop left it: wait_tiered allows local retention a segment of slack, so it may
        # have moved since wait_tiered saw it. The oldest local segment's name is its base offset.
        local_start = min(int(f.stem) for f in (tmp_path / "logs" / "restart-0").glob("*.log"))
        assert 0 < local_start < 400
        shutil.rmtree(tmp_path / "logs" / "__remote_log_metadata-snapshots", ignore_errors=True)  # full replay
        hold = tmp_path / "hold-metadata"
        hold.touch()
        b = start(tmp_path, "topic", listeners=f"PLAINTEXT://127.0.0.1:{b.port}", **held_rlmm_settings(hold))
        client = RawClient(b.bootstrap)
        try:
            # One fetch: partition 0 from the remote tier (not ready), partition 1 at its last record (in the
            # active segment, local whatever retention did since), answered while the catch-up is held.
            got = fetch(client, "restart", {0: 0, 1: parts[1]["log_end_offset"] - 1})
            assert got[0].error_code == 9 and not got[0].records
            assert got[1].error_code == 0 and got[1].records
            assert fetch(client, "restart", {0: before["log_end_offset"] - 1})[0].records  # a local offset of it
        finally:
            client.close()
        assert list_offsets(b, "restart", stamps[5]).error_code == 9
        # The special values never need remote metadata.
        r = list_offsets(b, "restart", -2)
        assert (r.error_code, r.offset) == (0, 0)
        assert list_offsets(b, "restart", -4, 8).offset == local_start
        assert list_offsets(b, "restart", -5).error_code == 0
        assert list_offsets(b, "restart", -1).offset == 400
        # Any timestamp needs the remote segments' metadata first (an older remote record may carry a
        # later timestamp, and remote offsets come first), even when the answer turns out to be local.
        assert list_offsets(b, "restart", stamps[399]).error_code == 9
        assert not any(p["ready"] for p in status(b, "restart"))
        got = {}
        threads = [threading.Thread(target=lambda: got.update(ck=consume_confluent(b, "restart", 2, 800))),
                   threading.Thread(target=lambda: got.update(kp=consume_kafka_python(b, "restart", 2, 800)))]
        for t in threads:
            t.start()
        hold.unlink()  # the catch-up runs; the consumers, retrying meanwhile, read everything
        for t in threads:
            t.join(90)
        assert got["ck"] == sent and got["kp"] == sent
        r = list_offsets(b, "restart", stamps[5])
        assert (r.error_code, r.offset) == (0, 5)
        after = status(b, "restart")[0]
        # Nothing uploaded twice: at most a segment rolled after the restart is added.
        starts = sorted(int(f.name[:20]) for f in (tmp_path / "remote").rglob("restart-*/0/*.log"))
        assert len(starts) == len(set(starts)) == after["remote_segments"]
        assert before["remote_segments"] <= after["remote_segments"] <= before["remote_segments"] + 1
    finally:
        b.kill()
