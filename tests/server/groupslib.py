"""Consumer-group helpers of the server tests with real clients (kafka-python): produce to a topic,
read a group's committed offsets, a group member polled from its own thread; for KIP-848's tests, a Kafka 4.4
broker set up to compare with tierlog (``start_kafka44``) and the wait for a group coordinator (``warm_up``).

Session timeouts sit at the broker minimum (``SESSION_MS``, 6 s).
"""

from __future__ import annotations

import threading

SESSION_MS = 6000
#: KIP-848 members reconcile a heartbeat at a time: half a second instead of five keeps the modules short.
FAST_HEARTBEATS = {"group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500"}
#: A target assignment at every group epoch bump (Kafka's default interval, 1000 ms, batches them): each step of a
#: scenario shows in the answer that caused it, on both brokers.
ASSIGN_AT_ONCE = {"group.consumer.assignment.interval.ms": "0"}


def warm_up(bootstrap: str) -> None:
    """Until the group coordinator answers (Kafka creates and loads __consumer_offsets asynchronously)."""
    from tests.harness.rawclient import RawClient
    from tests.harness.waiting import not_yet, wait_until
    from tierlog.protocol import ApiKey

    c = RawClient(bootstrap)
    try:
        def ready():
            r = c.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "warm-up", "topics": None})
            return r.error_code == 0 or not_yet(r)
        c.request(ApiKey.FIND_COORDINATOR, 3, {"key": "warm-up", "key_type": 0})
        wait_until(ready, 60, what="the group coordinator")
    finally:
        c.close()


def start_kafka44(work_dir):
    """A started Kafka 4.4 broker with ``FAST_HEARTBEATS`` and ``ASSIGN_AT_ONCE`` (as the tierlog brokers these
    tests compare it with), its group coordinator answering."""
    from tests.harness.apache_kafka import SHARED_SETTINGS, kafka_peer_module, resolve_jars

    latest = kafka_peer_module.LATEST_KAFKA_VERSION
    resolve_jars(latest)
    overrides = {**SHARED_SETTINGS, **FAST_HEARTBEATS, **ASSIGN_AT_ONCE}
    server = kafka_peer_module.KafkaServer(work_dir, overrides=overrides, version=latest).start()
    try:
        warm_up(server.bootstrap)
    except BaseException:
        server.stop()
        raise
    return server


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0,
            create: bool = False) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    if create:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, partitions, 1)])
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for p in range(partitions):
        for i in range(start, start + per_partition):
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.list_group_offsets(group)[group]
        return {(tp.topic, tp.partition): om.offset for tp, om in result.items()}
    finally:
        admin.close()


class KafkaPythonMember(threading.Thread):
    """One kafka-python consumer in a group, polled from its own thread; commits after each batch."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config):
        super().__init__(daemon=True)
        self.args = (bootstrap, group, topic, config)
        self.records: list[tuple[int, int, bytes]] = []
        self.assignment: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def run(self) -> None:
        from kafka import KafkaConsumer

        bootstrap, group, topic, config = self.args
        try:
            c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                              enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                              **config)
            try:
                while not self.stop_event.is_set():
                    # 1 s, not less: kafka-python 3.0.12 never finishes a join that completes after
                    # poll() returned (docs/compatibility.md, client quirks), which shows under load.
                    batch = c.poll(timeout_ms=1000)
                    with self.lock:
                        for tp, msgs in batch.items():
                            self.records += [(tp.partition, m.offset, m.value) for m in msgs]
                        self.assignment = {tp.partition for tp in c.assignment()}
                    if batch:
                        c.commit()
            finally:
                c.close()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e

    def snapshot(self):
        with self.lock:
            return list(self.records), set(self.assignment)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(20)
        if self.error:
            raise self.error
