"""Kafka Streams 4.1 with processing.guarantee=exactly_once_v2 (tests/apps/java/WordCount.java) against
tierlog (one broker, and a cluster of three) and Apache Kafka 4.1: a text corpus in, the counts out, read back
read_committed. The record cache is off, so a word seen n times must have exactly the committed values 1..n,
in order: a lost, repeated or double-counted update shows. The fault tests hold a Streams transaction open
(WordCount's gate: the count of the word "gate" sent, the stream thread waiting for a file), SIGKILL the
broker, restart it on its log dir, and either let the same Streams instance go on or SIGKILL it too and start
another on the same state dir. On the three-broker tierlog cluster (every topic, Streams' changelogs and the
transaction state included, on three replicas with two in sync) the broker SIGKILLed is the transaction's
coordinator, or the output partition's leader."""

from __future__ import annotations

import random
import re
import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.apps.support import (
    TARGETS,
    TIERLOG_TARGETS,
    Target,
    held_partitions,
    open_transactions,
    read_to_end,
    wait_until,
)
from tests.harness.apps import JavaApp, java_argv
from tests.harness.rawclient import unique
from tests.harness.transactions import READ_COMMITTED, READ_UNCOMMITTED

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey"]
PARTITIONS = 2
def corpus(seed: int, lines: int, gate: bool = False) -> list[str]:
    """``lines`` lines of one to eight words, the same for a seed; with ``gate``, the word "gate" once, late."""
    rnd = random.Random(seed)
    text = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 8))) for _ in range(lines)]
    if gate:
        text[-lines // 4] += " Gate,"
    return text


def count(lines: list[str]) -> Counter:
    return Counter(w for line in lines for w in re.split(r"\W+", line.lower()) if w)


def produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, line in enumerate(lines):
        p.produce(topic, line.encode(), key=f"line-{i}".encode())
    assert p.flush(60) == 0


class Feeder:
    """Lines of a corpus produced one by one on a thread until ``stop()``, which returns those sent (all
    acknowledged: idempotent, acks=all, retried across a broker's restart)."""

    def __init__(self, bootstrap: str, topic: str, lines: list[str]):
        self.lines, self.sent, self.errors = lines, 0, []
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 300000})
        self.topic, self.done = topic, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set() and self.sent < len(self.lines):
            self.producer.produce(self.topic, self.lines[self.sent].encode(), key=f"fed-{self.sent}".encode(),
                                  on_delivery=lambda err, _: err and self.errors.append(err))
            self.sent += 1
            self.producer.poll(0)
            self.done.wait(0.01)  # a steady trickle: Streams keeps committing while the brokers are killed

    def stop(self) -> list[str]:
        self.done.set()
        self.thread.join(30)
        assert self.producer.flush(300) == 0 and not self.errors, self.errors[:5]
        return self.lines[:self.sent]


def sequences(records: dict[int, list[tuple]]) -> dict[str, list[int]]:
    """Each word's values in the order of its partition (a word always lands on one partition)."""
    seen: dict[str, list[int]] = {}
    for part in records.values():
        for key, value in part:
            seen.setdefault(key.decode(), []).append(int(value))
    return seen


class WordCount:
    """One WordCount JVM; ``gate``: the folder of its gate files."""

    def __init__(self, classpath: str, target: Target, app_id: str, source: str, sink: str, work: Path):
        self.gate = work / "gate"
        self.gate.mkdir(parents=True, exist_ok=True)
        # A static member (KIP-345), so an instance started again after a crash takes its predecessor's place
        # at once rather than after the predecessor's session times out.
        argv = java_argv(classpath, "WordCount", target.bootstrap, app_id, source, sink, str(work / "state"), "gate",
                         str(self.gate), f"main.consumer.group.instance.id={app_id}-instance",
                         *(f"{k}={v}" for k, v in target.streams.items()))
        self.app = JavaApp(argv, work / "wordcount.log")
        self.app.wait_for_line("STATE RUNNING")


def app_topics(target: Target):
    app_id, source, sink = unique("wc"), unique("wc-in"), unique("wc-out")
    for t in (source, sink):
        target.create_topic(t, PARTITIONS)
    return app_id, source, sink


def check_counts(bootstrap: str, app_id: str, sink: str, expected: Counter, timeout: float = 240) -> dict:
    """Wait until the committed counts reach ``expected`` and no transaction of the application is open; then
    every word's committed values must be exactly 1..n. The read_uncommitted sequences returned."""
    wait_until(lambda: {w: s[-1] for w, s in sequences(read_to_end(bootstrap, sink, READ_COMMITTED)).items()}
               == dict(expected), timeout, f"the committed counts of {sink}", interval=2)
    wait_until(lambda: not open_transactions(bootstrap, app_id), 120, f"no open transaction of {app_id}")
    got = sequences(read_to_end(bootstrap, sink, READ_COMMITTED))
    assert got == {w: list(range(1, n + 1)) for w, n in expected.items()}
    uncommitted = sequences(read_to_end(bootstrap, sink, READ_UNCOMMITTED))
    for w, values in got.items():  # what read_committed returns is among what read_uncommitted does
        it = iter(uncommitted[w])
        assert all(v in it for v in values), w
    return uncommitted


def hold_transaction(bootstrap: str, wc: WordCount, app_id: str, sink: str) -> None:
    """Wait until WordCount's gate holds: its transaction open, the count of "gate" past the last stable offset."""
    wait_until(lambda: (wc.gate / "held").exists() or wc.app.proc.poll() is not None, 180, "the gate held")
    assert (wc.gate / "held").exists(), wc.app.tail()

    # The producer sends what the thread handed it (after linger.ms) while the gate holds; under transaction
    # version 2 (Kafka 4.x) the coordinator hears of the transaction only from that Produce's partition leader.
    def open_and_lagging() -> bool:
        if [state for _, state in open_transactions(bootstrap, app_id)] != ["Ongoing"]:
            return False
        if "gate" not in sequences(read_to_end(bootstrap, sink, READ_UNCOMMITTED)):
            return False
        return bool(held_partitions(bootstrap, sink))
    wait_until(open_and_lagging, 60, "an open transaction, the count of gate in the log past the last stable offset")


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_wordcount_exactly_once(crashable, app_classpath, tmp_path):
    bootstrap = crashable.bootstrap
    app_id, source, sink = app_topics(crashable)
    text = corpus(1, 300)
    produce(bootstrap, source, text)
    wc = WordCount(app_classpath, crashable, app_id, source, sink, tmp_path)
    check_counts(bootstrap, app_id, sink, count(text))
    wc.app.stop()


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_wordcount_across_broker_kill(crashable, app_classpath, tmp_path):
    """The broker SIGKILLed with a Streams transaction open and restarted (on the cluster: the transaction's
    coordinator); the same Streams instance goes on."""
    bootstrap = crashable.bootstrap
    app_id, source, sink = app_topics(crashable)
    first, second = corpus(2, 200), corpus(3, 200, gate=True)
    produce(bootstrap, source, first)
    wc = WordCount(app_classpath, crashable, app_id, source, sink, tmp_path)
    check_counts(bootstrap, app_id, sink, count(first))
    produce(bootstrap, source, second)
    hold_transaction(bootstrap, wc, app_id, sink)
    crashable.sigkill_restart(coordinator_of=app_id, leader_of=sink)
    (wc.gate / "release").write_text("")
    check_counts(bootstrap, app_id, sink, count(first + second))
    assert wc.app.proc.poll() is None, wc.app.tail()
    wc.app.stop()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        check_counts(bootstrap, app_id, sink, count(first + second))


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_wordcount_and_broker_killed(crashable, app_classpath, tmp_path):
    """The broker (on the cluster: the leader of the output partition holding the open transaction's count) and
    the Streams JVM both SIGKILLed with a transaction open; the broker restarted, then a new
    Streams instance on the same state dir: the open transaction is aborted (read_uncommitted still shows its
    count of "gate"), the input after the committed offsets counted once."""
    bootstrap = crashable.bootstrap
    app_id, source, sink = app_topics(crashable)
    first, second = corpus(4, 200), corpus(5, 200, gate=True)
    produce(bootstrap, source, first)
    wc = WordCount(app_classpath, crashable, app_id, source, sink, tmp_path)
    check_counts(bootstrap, app_id, sink, count(first))
    produce(bootstrap, source, second)
    hold_transaction(bootstrap, wc, app_id, sink)
    wc.app.kill()
    crashable.sigkill_restart(coordinator_of=app_id, leader_of=sink)
    (wc.gate / "release").write_text("")
    again = WordCount(app_classpath, crashable, app_id, source, sink, tmp_path)
    uncommitted = check_counts(bootstrap, app_id, sink, count(first + second))
    assert uncommitted["gate"].count(1) == 2, uncommitted["gate"]  # the aborted count, and the committed one
    again.app.stop()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        check_counts(bootstrap, app_id, sink, count(first + second))


@pytest.mark.parametrize("target", TARGETS)
def test_wordcount_broker_kills_while_processing(crashable, app_classpath, tmp_path):
    """Input keeps arriving and Streams keeps committing (every 100 ms under exactly_once_v2) while the broker
    is SIGKILLed and restarted (on the cluster: the coordinator of Streams' transactional id, the leader of an
    output partition, then every other broker, one after the other), at whatever point of a transaction each
    kill lands; every count still exact."""
    bootstrap = crashable.bootstrap
    app_id, source, sink = app_topics(crashable)
    first = corpus(6, 100)
    produce(bootstrap, source, first)
    wc = WordCount(app_classpath, crashable, app_id, source, sink, tmp_path)
    check_counts(bootstrap, app_id, sink, count(first))
    feeder = Feeder(bootstrap, source, corpus(7, 100000))
    wait_until(lambda: feeder.sent >= 300, 60, "300 lines fed")
    crashable.sigkill_restart(coordinator_of=app_id, leader_of=sink, all_brokers=True)
    fed = feeder.sent
    wait_until(lambda: feeder.sent >= fed + 300, 120, "300 more lines fed")
    fed = feeder.stop()
    check_counts(bootstrap, app_id, sink, count(first + fed), timeout=300)
    assert wc.app.proc.poll() is None, wc.app.tail()
    wc.app.stop()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        check_counts(bootstrap, app_id, sink, count(first + fed))
