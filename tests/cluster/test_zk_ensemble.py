"""Three brokers on a three-server ZooKeeper ensemble: the ZooKeeper leader is killed (SIGKILL) and started
again while an idempotent producer writes with acks=all. The brokers keep acknowledging writes while the
other two servers elect a leader and after the third rejoins, and every acknowledged record is read back."""

from __future__ import annotations

import contextlib
import threading

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.harness.tierlog_cluster import create, start_cluster
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.harness.zookeeper import restart_zookeeper, start_ensemble, stop_zookeeper

PARTITIONS = 3


class _Load:
    """An idempotent acks=all producer writing numbered records until stopped; what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 60_000})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self._producer.produce("zk-load", b"%08d" % i, partition=i % PARTITIONS, on_delivery=self._delivered)
                i += 1
            except BufferError:
                pass
            self._producer.poll(0.001)
        self._producer.flush(60)

    def wait_more(self, count: int, what: str, timeout: float = 30) -> None:
        """Until ``count`` more records than now are acknowledged."""
        want = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= want or not_yet((len(self.acked), self.errors[:3])), timeout,
                   interval=0.02, what=f"{what}: {want} acknowledged (acknowledged, errors)")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def test_zookeeper_server_killed_and_restarted_under_load(tmp_path):
    ensemble = start_ensemble(tmp_path / "zk")
    cluster = None
    load = None
    try:
        cluster = start_cluster(tmp_path / "brokers", ensemble, brokers=3)
        create(cluster, "zk-load", partitions=PARTITIONS, configs={"min.insync.replicas": 2})
        load = _Load(cluster.bootstrap)
        load.wait_more(300, "before the kill")

        victim = ensemble.leader()
        assert victim is not None
        victim.kill()  # SIGKILL: the two left elect a leader among themselves
        ensemble.wait_quorum()
        load.wait_more(300, "with one ZooKeeper server down")

        restart_zookeeper(victim)
        ensemble.wait_quorum()
        assert ensemble.mode(victim) == "follower"
        load.wait_more(300, "after the server rejoined")
        load.stop()
        assert not load.errors, load.errors[:5]
        assert sorted(cluster.running_ids()) == [1, 2, 3]

        acked = set(load.acked)
        got: set[bytes] = set()
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "zk-ensemble", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition("zk-load", p, 0) for p in range(PARTITIONS)])

            def read():
                if acked <= got:
                    return True
                for m in c.consume(10_000, timeout=0.5):
                    if m.error() is None:
                        got.add(m.value())
                return False

            with contextlib.suppress(TimedOut):  # asserted below, with what was lost
                wait_until(read, 30, interval=0, what="every acknowledged record read")
        finally:
            c.close()
        assert acked <= got, f"{len(acked - got)} acknowledged records lost, e.g. {sorted(acked - got)[:5]}"
    finally:
        if load is not None:
            load.stop()
        if cluster is not None:
            cluster.stop()
        for server in ensemble.servers:
            stop_zookeeper(server)
