"""Tiered clusters driven alike by a differential: a tierlog cluster (ZooKeeper mode) and a Kafka KRaft cluster,
each seen as a :class:`Side` (brokers by id, killed and started by PID, a replica's folder, the remote tier's
segments), and the steps both sides take: create a topic on given replicas, write numbered records, ask
ListOffsets, read a replica's files, read everything back, compare relations.

A differential reduces each side's observations to relations (booleans and small counts) that hold on both
systems, since raw offsets legitimately differ (segment boundaries follow batch sizes), and compares those with
:func:`assert_same`; each relation must also hold on Kafka, so a shared mistake cannot pass.
"""

from __future__ import annotations

from pathlib import Path

from tests.harness import apache_kafka, rawclient, waiting
from tests.harness.rawclient import RawClient
from tests.harness.threads import in_parallel
from tests.harness.tierlog_cluster import replica_folder
from tests.harness.tierlog_cluster import wait_until as cluster_wait_until
from tests.interop.clients import CLIENTS
from tierlog.protocol import ApiKey
from tierlog.records import iter_batches
from tierlog.tiered.rsm.layout import SegmentManifest

VALUE_BYTES = 1000
SETTLE_S = 120
EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -2, -1, -4, -5, -6


class Side:
    """One cluster as a scenario drives it: brokers by id, killed and started again by PID, a replica's
    folder, the remote tier's segments of a topic."""

    name = ""
    restart_s = 180

    def address(self, broker_id: int) -> str:
        raise NotImplementedError

    def running_ids(self) -> list[int]:
        raise NotImplementedError

    def kill(self, broker_id: int) -> None:
        raise NotImplementedError

    def start(self, broker_id: int) -> None:
        raise NotImplementedError

    def replica_dir(self, broker_id: int, topic: str) -> Path:
        raise NotImplementedError

    def remote_segments(self, topic: str) -> list[tuple[int, int]]:
        """(base offset, last offset) of every segment in the remote tier, by base offset."""
        raise NotImplementedError

    def remote_bytes(self, topic: str) -> int:
        """What the remote tier holds of the topic's records (the segments' .log bytes)."""
        raise NotImplementedError

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in self.running_ids())

    def partition(self, topic: str, via: int | None = None):
        via = via or self.running_ids()[0]
        t = rawclient.metadata(self.address(via), [topic]).topics[0]
        assert t.error_code == 0, t
        return t.partitions[0]


class TierlogSide(Side):
    name = "tierlog"

    def __init__(self, cluster, root: Path):
        self.cluster, self.root = cluster, root

    def address(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].bootstrap

    def running_ids(self) -> list[int]:
        return self.cluster.running_ids()

    def kill(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].kill()

    def start(self, broker_id: int) -> None:
        self.cluster.start([broker_id], timeout=self.restart_s)

    def replica_dir(self, broker_id: int, topic: str) -> Path:
        return replica_folder(self.cluster, broker_id, topic)

    def _manifests(self, topic: str) -> list[tuple[Path, SegmentManifest]]:
        found = [(p, SegmentManifest.from_json(p.read_bytes())) for p in (self.root / "remote").rglob("*.manifest")]
        return [(p, m) for p, m in found if m.topic == topic]

    def remote_segments(self, topic: str) -> list[tuple[int, int]]:
        return sorted((m.start_offset, m.end_offset) for _, m in self._manifests(topic))

    def remote_bytes(self, topic: str) -> int:
        """The segment objects beside each manifest (its .log, named as the manifest)."""
        logs = [p.with_suffix(".log") for p, _ in self._manifests(topic)]
        return sum(p.stat().st_size for p in logs if p.exists())


class KafkaSide(Side):
    name = "kafka"

    def __init__(self, cluster: apache_kafka.KafkaKRaftCluster):
        self.cluster = cluster

    def address(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].bootstrap

    def running_ids(self) -> list[int]:
        return self.cluster.running_ids()

    def kill(self, broker_id: int) -> None:
        self.cluster.kill(broker_id)

    def start(self, broker_id: int) -> None:
        self.cluster.start([broker_id], timeout=self.restart_s)

    def replica_dir(self, broker_id: int, topic: str) -> Path:
        return self.cluster.brokers[broker_id].log_dir / f"{topic}-0"

    def _remote_logs(self, topic: str) -> list[Path]:
        """LocalTieredStorage keeps each segment's .log as it was uploaded, named by its base offset."""
        return list((self.cluster.remote_dir / "kafka-tiered-storage").glob(f"{topic}-0-*/*.log"))

    def remote_segments(self, topic: str) -> list[tuple[int, int]]:
        out = []
        for path in self._remote_logs(topic):
            last = None
            for _, h in iter_batches(path.read_bytes()):
                last = h.last_offset
            if last is not None:
                out.append((int(path.name.split("-", 1)[0]), last))
        return sorted(out)

    def remote_bytes(self, topic: str) -> int:
        return sum(p.stat().st_size for p in self._remote_logs(topic))


def wait_until(check, what: str, timeout: float = SETTLE_S):
    """The cluster harness's poll (errors of a broker starting or just killed count as not yet), what first."""
    return cluster_wait_until(check, timeout, what)


def to_controller(side: Side, api: int, version: int, values: dict):
    raw = RawClient(rawclient.controller_address(side.bootstrap), timeout=60)
    try:
        return raw.request(api, version, values)
    finally:
        raw.close()


def create(side: Side, topic: str, replicas: list[int], configs: dict) -> None:
    """CreateTopics with one partition on ``replicas`` (the first leads), then leaders everywhere."""
    resp = to_controller(side, ApiKey.CREATE_TOPICS, 7, {"topics": [{
        "name": topic, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": replicas}],
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30000, "validate_only": False})
    assert resp.topics[0].error_code == 0, resp.topics[0]
    for i in side.running_ids():
        rawclient.wait_for_leaders_on(side.address(i), topic, 1, 60)


def value(i: int) -> bytes:
    return (b"%07d-" % i).ljust(VALUE_BYTES, b"v")


def write(side: Side, topic: str, first: int, count: int) -> None:
    """``count`` records of VALUE_BYTES with an idempotent acks=all producer; all must be acknowledged."""
    from confluent_kafka import Producer
    errors: list = []
    producer = Producer({"bootstrap.servers": side.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000, "log_level": 3})
    for i in range(first, first + count):
        while True:
            try:
                producer.produce(topic, value(i), partition=0,
                                 on_delivery=lambda err, _m: errors.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0, f"{side.name}: records not acknowledged"
    assert not errors, f"{side.name}: {errors[:3]}"


def list_offsets(side: Side, broker_id: int, topic: str, timestamps=(EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED),
                 version: int = 9) -> dict[int, tuple[int, int, int]]:
    """ListOffsets (v9: -2, -1, -4 and -5; v11 knows -6 too) asked of ``broker_id`` from a consumer:
    {timestamp: (error, offset, leader epoch)}."""
    raw = RawClient(side.address(broker_id))
    try:
        out = {}
        for ts in timestamps:
            r = raw.request(ApiKey.LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": ts}]}]})
            p = r.topics[0].partitions[0]
            out[ts] = (int(p.error_code), int(p.offset), int(p.leader_epoch))
        return out
    finally:
        raw.close()


def batch_epoch(side: Side, broker_id: int, topic: str, offset: int) -> int:
    """The partition leader epoch of the batch holding ``offset``, fetched from ``broker_id`` (from the
    remote tier when it is no longer local)."""
    raw = RawClient(side.address(broker_id), timeout=60)

    def holding():
        r = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                         "partition_max_bytes": 1 << 20}]}]})
        p = r.responses[0].partitions[0]
        assert p.error_code == 0, f"{side.name}: fetch at {offset}: error {p.error_code}"
        for _, h in iter_batches(p.records):
            if h.base_offset <= offset <= h.last_offset:
                return [h.partition_leader_epoch]  # (a list: epoch 0 is an answer too)
        return None

    try:
        return waiting.wait_until(holding, 60, interval=0, what=f"{side.name}: a batch holding {offset}")[0]
    finally:
        raw.close()


def local_bases(side: Side, broker_id: int, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in side.replica_dir(broker_id, topic).glob("*.log"))


def local_bytes(side: Side, broker_id: int, topic: str) -> int:
    """The bytes of the replica's segment files (.log)."""
    return sum(p.stat().st_size for p in side.replica_dir(broker_id, topic).glob("*.log"))


def local_end(side: Side, broker_id: int, topic: str) -> int | None:
    """The offset after the last batch in the replica's newest non-empty local segment (None without one)."""
    for base in reversed(local_bases(side, broker_id, topic)):
        last = None
        for _, h in iter_batches((side.replica_dir(broker_id, topic) / f"{base:020d}.log").read_bytes()):
            last = h.last_offset
        if last is not None:
            return last + 1
    return None


def epoch_lineage(side: Side, broker_id: int, topic: str) -> list[int]:
    """The epochs of the replica's leader-epoch-checkpoint (version, count, then ``epoch start`` lines)."""
    path = side.replica_dir(broker_id, topic) / "leader-epoch-checkpoint"
    lines = path.read_text().split("\n") if path.exists() else []
    return [int(line.split()[0]) for line in lines[2:] if line.strip()]


def read_all(side: Side, topic: str, count: int, bootstrap: str | None = None) -> list[bytes]:
    """``count`` records from the earliest offset (through ``bootstrap``, every running broker by default)."""
    c = CLIENTS["confluent-kafka"](bootstrap or side.bootstrap)
    try:
        return [m.value for m in c.consume(topic, 0, "earliest", count, timeout=120)]
    finally:
        c.close()


def on_both(act, pair: dict) -> dict:
    """``act(side)`` on both sides at once (one thread each); {name: result}; the first error raised."""
    return in_parallel(lambda name: act(pair[name]), pair)


def assert_same(got: dict) -> None:
    """Both sides' relations alike; a failure names each one that differs."""
    def flat(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}: ") if isinstance(v, dict) else {f"{prefix}{k}": v})
        return out
    t, k = flat(got["tierlog"]), flat(got["kafka"])
    differ = [f"{key}: tierlog {t.get(key)}, kafka {k.get(key)}" for key in sorted(set(t) | set(k))
              if t.get(key) != k.get(key)]
    assert not differ, "\n".join(differ)
    # Each relation is one Kafka keeps: the comparison checks what Kafka does, not a shared mistake.
    assert all(k.values()), [key for key, v in k.items() if not v]
    print(f"\n{len(t)} relations alike on both sides: " + "; ".join(t))
