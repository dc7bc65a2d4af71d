"""Kafka Connect 4.1's distributed worker with exactly.once.source.support=enabled against tierlog and Apache
Kafka 4.1 (and a three-broker tierlog cluster, every topic on three replicas with two in sync): a
FileStreamSource connector with exactly.once.support=required copies the lines of a file to a
topic in transactions; a read_committed consumer must see every line once, in order. The broker is
SIGKILLed while a task's transaction is open (GateInterceptor.java holds the producer's network thread
once a chosen line is acknowledged) and restarted on its log dir (on the cluster: the transaction's
coordinator, or the leader of the topic's partition); the rest of the file is appended and each line must
still appear exactly once."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.apps.support import (
    TARGETS,
    TIERLOG_TARGETS,
    Target,
    end_offsets,
    held_partitions,
    open_transactions,
    read_to_end,
    wait_until,
)
from tests.harness.apache_kafka import kafka_peer_module
from tests.harness.apps import JavaApp, java_argv
from tests.harness.rawclient import raw_client, unique
from tests.harness.transactions import READ_COMMITTED, READ_UNCOMMITTED
from tests.server.groupslib import committed_offsets
from tierlog.protocol import ApiKey


class Worker:
    """One ConnectDistributed JVM with its REST API on a free 127.0.0.1 port."""

    def __init__(self, classpath: str, target: Target, work: Path, gate: dict | None = None, group: str | None = None,
                 settings: dict | None = None):
        """``group``: the Connect cluster to join (its internal topics are named after it), else a new one;
        ``settings``: more worker settings."""
        work.mkdir(parents=True, exist_ok=True)
        self.port = kafka_peer_module.free_port()
        self.group = group or unique("connect")
        extra, settings = settings or {}, {
            "bootstrap.servers": target.bootstrap, "group.id": self.group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group}-configs", "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status", **target.connect,
            "offset.storage.partitions": "1", "status.storage.partitions": "1",
            "listeners": f"http://127.0.0.1:{self.port}", "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port), "exactly.once.source.support": "enabled",
            "offset.flush.interval.ms": "1000", "plugin.discovery": "only_scan",
        }
        if gate is not None:
            settings["producer.interceptor.classes"] = "GateInterceptor"
        settings.update(extra)
        config = work / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        argv = java_argv(classpath, "org.apache.kafka.connect.cli.ConnectDistributed", str(config),
                         properties=gate)
        self.app = JavaApp(argv, work / "connect.log")
        wait_until(lambda: self._get("/") is not None or self.app.proc.poll() is not None, 180, "Connect's REST API")
        assert self.app.proc.poll() is None, self.app.tail()

    def _request(self, method: str, path: str, body: dict | None = None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read()
            return json.loads(data) if data else {}

    def _get(self, path: str):
        try:
            return self._request("GET", path)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def create_source(self, name: str, file: Path, topic: str) -> None:
        self.create(name, {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                           "tasks.max": "1", "file": str(file), "topic": topic, "exactly.once.support": "required"})

    def create(self, name: str, config: dict, tasks: int = 1) -> None:
        """PUT a connector's config, then wait until ``tasks`` of its tasks run."""

        def created():
            try:
                return self._request("PUT", f"/connectors/{name}/config", config)
            except urllib.error.HTTPError as e:  # 409 while the worker's group is still rebalancing
                if e.code not in (409, 500):
                    raise AssertionError(f"{e.code}: {e.read()!r}") from e
                return None
        wait_until(created, 180, f"connector {name} created", interval=1)
        self.wait_task_running(name, tasks)

    def task_state(self, name: str) -> str | None:
        return next(iter(self.task_states(name)), None)

    def task_states(self, name: str) -> list[str]:
        status = self._get(f"/connectors/{name}/status")
        return [t["state"] for t in (status or {}).get("tasks") or []]

    def wait_task_running(self, name: str, tasks: int = 1) -> None:
        wait_until(lambda: self.task_states(name) == ["RUNNING"] * tasks or self.app.proc.poll() is not None, 180,
                   f"{name}'s {tasks} task(s) running")
        assert self.app.proc.poll() is None, self.app.tail()


def append(file: Path, lines: list[str]) -> None:
    with open(file, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def lines(start: int, stop: int) -> list[str]:
    return [f"line-{i:05d}" for i in range(start, stop)]


def committed_values(bootstrap: str, topic: str, isolation: str = READ_COMMITTED) -> list[str]:
    (only,) = read_to_end(bootstrap, topic, isolation).values()
    return [v.decode() for _, v in only]


def wait_for_lines(bootstrap: str, topic: str, expected: list[str], timeout: float = 240) -> None:
    """Wait until the committed topic holds as many records as ``expected``; they must be ``expected``."""
    got = wait_until(lambda: (v := committed_values(bootstrap, topic)) and len(v) >= len(expected) and v,
                     timeout, f"{len(expected)} committed records in {topic}", interval=1)
    assert got == expected


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_file_source_exactly_once(crashable, app_classpath, tmp_path):
    bootstrap = crashable.bootstrap
    worker = Worker(app_classpath, crashable, tmp_path)
    file, topic = tmp_path / "source.txt", unique("file-src")
    append(file, lines(0, 200))
    worker.create_source("file-source", file, topic)
    wait_for_lines(bootstrap, topic, lines(0, 200))
    append(file, lines(200, 300))
    wait_for_lines(bootstrap, topic, lines(0, 300))
    # Transactions they were: each commit's marker takes an offset of its own.
    assert end_offsets(bootstrap, topic)[0] > 300
    worker.app.stop()


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_file_source_across_broker_kill(crashable, app_classpath, tmp_path):
    bootstrap = crashable.bootstrap
    file, topic = tmp_path / "source.txt", unique("file-src")
    gate = tmp_path / "gate"
    gate.mkdir()
    worker = Worker(app_classpath, crashable, tmp_path,
                    gate={"gate.dir": gate, "gate.topic": topic, "gate.value": "line-00150"})
    append(file, lines(0, 100))
    worker.create_source("file-source", file, topic)
    wait_for_lines(bootstrap, topic, lines(0, 100))
    append(file, lines(100, 200))
    wait_until(lambda: (gate / "held").exists(), 180, "line-00150 acknowledged and held")
    assert [state for _, state in open_transactions(bootstrap, worker.group)] == ["Ongoing"]
    assert held_partitions(bootstrap, topic) == [0]
    crashable.sigkill_restart(coordinator_of=worker.group, leader_of=topic)
    (gate / "release").write_text("")
    append(file, lines(200, 300))
    # A task whose transaction could not complete fails; an operator restarts it (the REST API), and it
    # resumes from the offsets committed with the last transaction.
    restarted = []

    def running_and_done():
        if worker.task_state("file-source") == "FAILED":
            restarted.append(worker._request("POST", "/connectors/file-source/tasks/0/restart"))
        return len(committed_values(bootstrap, topic)) >= 300
    wait_until(running_and_done, 300, "300 committed records", interval=1)
    assert committed_values(bootstrap, topic) == lines(0, 300), f"task restarts: {len(restarted)}"
    uncommitted = committed_values(bootstrap, topic, READ_UNCOMMITTED)
    assert set(uncommitted) == set(lines(0, 300))
    print(f"task restarts: {len(restarted)}; read_uncommitted saw {len(uncommitted) - 300} aborted records")
    worker.app.stop()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        assert committed_values(bootstrap, topic) == lines(0, 300)


@pytest.mark.parametrize("target", TARGETS)
def test_file_source_worker_and_broker_killed(crashable, app_classpath, tmp_path):
    """The worker and the broker both SIGKILLed with the task's transaction open; the broker restarted, then a
    new worker of the same Connect cluster: the new task fences its predecessor's transactional id (the open
    transaction aborted: read_uncommitted still shows its lines), resumes from the offsets committed with the
    last transaction, and every line is committed once."""
    bootstrap = crashable.bootstrap
    file, topic = tmp_path / "source.txt", unique("file-src")
    gate = tmp_path / "gate"
    gate.mkdir()
    held = {"gate.dir": gate, "gate.topic": topic, "gate.value": "line-00150"}
    # A new worker reads the offsets topic read_committed before its task can fence the old one, so it waits
    # for the held transaction to time out: 15 s rather than Connect's 60 s.
    short = {"producer.transaction.timeout.ms": "15000"}
    worker = Worker(app_classpath, crashable, tmp_path / "first", gate=held, settings=short)
    append(file, lines(0, 100))
    worker.create_source("file-source", file, topic)
    wait_for_lines(bootstrap, topic, lines(0, 100))
    append(file, lines(100, 200))
    wait_until(lambda: (gate / "held").exists(), 180, "line-00150 acknowledged and held")
    assert [state for _, state in open_transactions(bootstrap, worker.group)] == ["Ongoing"]
    worker.app.kill()
    crashable.sigkill_restart(coordinator_of=worker.group, leader_of=topic)
    (gate / "release").write_text("")
    second = Worker(app_classpath, crashable, tmp_path / "second", gate=held, group=worker.group, settings=short)
    second.wait_task_running("file-source")
    append(file, lines(200, 300))
    wait_for_lines(bootstrap, topic, lines(0, 300))
    assert committed_values(bootstrap, topic, READ_UNCOMMITTED).count("line-00150") == 2
    second.app.stop()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        assert committed_values(bootstrap, topic) == lines(0, 300)


def _sink_group(bootstrap: str, group: str) -> tuple[str | None, list[int]]:
    """The group's type from ListGroups and, for a consumer group, its members' types from ConsumerGroupDescribe
    (0 classic, 1 consumer), sorted."""
    with raw_client(bootstrap) as c:
        listed = c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}).groups
        kind = next((g.group_type for g in listed if g.group_id == group), None)
        if kind != "consumer":
            return kind, []
        [described] = c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                    "include_authorized_operations": False}).groups
        return kind, sorted(m.member_type for m in described.members)


@pytest.mark.parametrize("target", [t for t in TIERLOG_TARGETS if t != "cluster"])  # the coordinator's matter
def test_sink_group_upgraded_online_to_the_consumer_protocol(crashable, app_classpath, tmp_path):
    """KIP-848's online upgrade with Connect running: two workers run a FileStreamSink connector's two tasks in
    one classic consumer group (``connect-<connector>``); the workers are restarted one at a time with
    ``consumer.group.protocol=consumer``, so the connector always has a worker. After the first restart the group
    is a consumer group holding one classic member and one consumer member; after the second, two consumer
    members. Every record produced before, between and after reaches the sink file (Connect's sinks deliver at
    least once) and the group's committed offsets reach the end of both partitions."""
    bootstrap = crashable.bootstrap
    topic, connector = unique("sink-src"), "file-sink"
    group, sink = f"connect-{connector}", tmp_path / "sink.txt"
    crashable.create_topic(topic, 2)
    # A departed worker's tasks go to the others at once, not after Connect's default 5-minute grace.
    quick = {"scheduled.rebalance.max.delay.ms": "0"}
    consumer = {**quick, "consumer.group.protocol": "consumer"}
    first = Worker(app_classpath, crashable, tmp_path / "w1", settings=quick)
    second = Worker(app_classpath, crashable, tmp_path / "w2", group=first.group, settings=quick)
    first.create(connector, {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
                             "tasks.max": "2", "topics": topic, "file": str(sink)}, tasks=2)
    produced: list[str] = []

    def produce_and_sink(start: int, stop: int) -> None:
        batch = lines(start, stop)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i, line in enumerate(batch):
            producer.produce(topic, line.encode(), partition=i % 2)
        assert producer.flush(60) == 0
        produced.extend(batch)
        wait_until(lambda: set(produced) <= set(sink.read_text().split()) if sink.exists() else False, 180,
                   f"{len(produced)} records in the sink file", interval=0.5)

    produce_and_sink(0, 200)
    assert _sink_group(bootstrap, group) == ("classic", [])
    first.app.stop()
    first = Worker(app_classpath, crashable, tmp_path / "w1-consumer", group=second.group, settings=consumer)
    first.wait_task_running(connector, 2)
    wait_until(lambda: _sink_group(bootstrap, group) == ("consumer", [0, 1]), 120,
               "a consumer group of one classic and one consumer member")
    produce_and_sink(200, 400)
    second.app.stop()
    second = Worker(app_classpath, crashable, tmp_path / "w2-consumer", group=first.group, settings=consumer)
    second.wait_task_running(connector, 2)
    wait_until(lambda: _sink_group(bootstrap, group) == ("consumer", [1, 1]), 120, "two consumer members")
    produce_and_sink(400, 600)
    ends = end_offsets(bootstrap, topic)
    wait_until(lambda: committed_offsets(bootstrap, group) == {(topic, p): end for p, end in ends.items()}, 60,
               "the sink's offsets committed to the end")
    written = sink.read_text().split()
    print(f"{len(written)} lines written for {len(produced)} records (at least once)")
    for worker in (first, second):
        worker.app.stop()
