"""The workload: idempotent producers writing unique, numbered values, and a consumer group committing offsets;
everything they were told goes into one :class:`History`.

Each producer writes ``<name>.<incarnation>:<seq>`` to partition ``seq % partitions`` (so every producer writes
every partition, and its values in one partition have increasing numbers). An acknowledgement from the
delivery callback is an :class:`Ack` (partition, offset, value, when); a failed delivery is an error and its
value is indeterminate (it may or may not be in the log). A producer that reaches a fatal error (librdkafka's
idempotence state is then unusable) is replaced by a new incarnation with a new producer id, and the fatal
error is recorded.

Each group member commits, about every ``commit_interval`` seconds, the next offset after what it consumed in
the partitions it owns, synchronously; every partition the broker confirmed goes into the history.

A transactional producer (:class:`TransactionalWorker`) writes ``T/<name>.<incarnation>/<n>/<i>`` to two
partitions per transaction, aborting every fourth on purpose; each transaction's values and its outcome
(committed, aborted, or unknown when the client could not tell) go into ``History.txns``. The plain readers
read with read_committed (librdkafka's default), as does the final read.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ack:
    producer: str  # name.incarnation
    seq: int
    partition: int
    offset: int  # -1 when the acknowledgement carried none (librdkafka's implicit acknowledgements)
    value: bytes
    at: float  # seconds since the history began


@dataclass
class Commit:
    member: str
    offsets: dict[int, int]
    at: float


@dataclass
class Txn:
    """One transaction of a :class:`TransactionalWorker`: its values and what the client was told."""

    id: str
    values: list[tuple[int, bytes]]  # (partition, value)
    began: float
    #: when commit_transaction was first called (no read_committed reader may see a value before it)
    committing: float | None = None
    #: "pending", "committed", "aborted" or "unknown" (the client could not learn the outcome)
    outcome: str = "pending"
    ended: float | None = None
    error: str = ""


TXN_PREFIX = b"T/"


@dataclass
class History:
    """Everything the clients saw and the nemesis did, with times in seconds since the start."""

    t0: float = field(default_factory=time.monotonic)
    acks: list[Ack] = field(default_factory=list)
    attempted: int = 0
    delivery_errors: Counter = field(default_factory=Counter)
    fatal_errors: list[tuple[float, str, str]] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    commit_errors: Counter = field(default_factory=Counter)
    events: list[tuple[float, str]] = field(default_factory=list)
    #: what each plain consumer (``ReaderWorker``) read, (partition, offset, value), in the order it read them
    reads: dict[str, list[tuple[int, int, bytes]]] = field(default_factory=dict)
    #: when a reader first read each transactional value
    txn_first_read: dict[bytes, tuple[float, str]] = field(default_factory=dict)
    txns: list[Txn] = field(default_factory=list)
    echo: object = None  # a print-like callable for events, or None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def ack(self, a: Ack) -> None:
        with self._lock:
            self.acks.append(a)

    def event(self, text: str) -> None:
        at = self.now()
        with self._lock:
            self.events.append((at, text))
        if self.echo is not None:
            self.echo(f"[{at:8.1f}s] {text}")

    def attempt(self) -> None:
        with self._lock:
            self.attempted += 1

    def delivery_error(self, name: str) -> None:
        with self._lock:
            self.delivery_errors[name] += 1

    def commit_error(self, name: str) -> None:
        with self._lock:
            self.commit_errors[name] += 1

    def commit(self, c: Commit) -> None:
        with self._lock:
            self.commits.append(c)

    def read(self, reader: str, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.reads.setdefault(reader, []).append((partition, offset, value))
            if value.startswith(TXN_PREFIX) and value not in self.txn_first_read:
                self.txn_first_read[value] = (self.now(), reader)

    def txn(self, t: Txn) -> None:
        with self._lock:
            self.txns.append(t)

    def acked_count(self) -> int:
        return len(self.acks)

    def acked_partitions_since(self, since: float) -> Counter:
        """Acknowledgements per partition of records acknowledged after ``since`` (the list is in time order
        but for callbacks racing each other by a few ms: the walk back stops a second before ``since``)."""
        recent: Counter = Counter()
        with self._lock:
            for a in reversed(self.acks):
                if a.at > since:
                    recent[a.partition] += 1
                elif a.at < since - 1:
                    break
        return recent


def parse_value(value: bytes) -> tuple[str, int] | None:
    """(producer, seq) of a workload value, None for anything else."""
    try:
        name, seq = value.decode().rsplit(":", 1)
        return name, int(seq)
    except (UnicodeDecodeError, ValueError):
        return None


def file_logger(name: str, path: str):
    """A logger writing librdkafka's debug lines to ``path`` only."""
    import logging
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return logger


class ProducerWorker(threading.Thread):
    """One idempotent producer (acks=all) writing numbered values round-robin over the partitions."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History,
                 stop: threading.Event, interval: float, message_timeout_ms: int = 120000,
                 debug_log: str | None = None):
        """``message_timeout_ms``: long, as Java's delivery.timeout.ms (2 min). When queued messages time out,
        librdkafka bumps the producer epoch and sends the rest of its queue again from sequence 0, those whose
        earlier request timed out too (possibly written): such a re-send is a duplicate the broker cannot see.
        Faults here last well under this, so a duplicate is the broker's doing (the report names the producer
        epochs of every copy). ``debug_log``: a file for librdkafka's idempotence log (``debug=eos,msg``: producer
        ids, epoch bumps and why, sequence resets, and each batch sent with its answer and the action taken),
        to explain what a report shows. A gap is one thing that bumps the epoch: a later batch answered
        OUT_OF_ORDER_SEQUENCE_NUMBER after an earlier one was refused, and every unacknowledged batch is sent
        again from sequence 0, one that had been written too (the reason a retry already in the log must be
        answered as a duplicate, never as "not written")."""
        super().__init__(daemon=True, name=f"producer-{name}")
        self.base, self.bootstrap, self.topic, self.partitions = name, bootstrap, topic, partitions
        self.history, self.stop, self.interval = history, stop, interval
        self.message_timeout_ms = message_timeout_ms
        self.debug_log = debug_log
        self.incarnation = 0
        self.unflushed = 0
        #: librdkafka settings over the ones below (``request.timeout.ms`` shorter than a fault, say)
        self.overrides: dict[str, object] = {}
        self._fatal = threading.Event()

    def _producer(self):
        from confluent_kafka import Producer
        extra = {"debug": "eos,msg", "logger": file_logger(f"jepsen.librdkafka.{self.base}", self.debug_log)} \
            if self.debug_log else {}
        return Producer({**extra,
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": self.message_timeout_ms, "request.timeout.ms": 30000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 2000,
            "queue.buffering.max.messages": 20000, "socket.connection.setup.timeout.ms": 5000,
            "client.id": f"jepsen-{self.base}", **self.overrides})

    def run(self) -> None:
        from confluent_kafka import KafkaException
        producer = self._producer()
        name, seq = f"{self.base}.0", 0
        while not self.stop.is_set():
            if self._fatal.is_set():
                # librdkafka's idempotent state is gone for good: a new producer, a new producer id.
                producer.purge()
                producer.flush(5)
                self.incarnation += 1
                self._fatal.clear()
                producer = self._producer()
                name, seq = f"{self.base}.{self.incarnation}", 0
                self.history.event(f"producer {self.base}: new incarnation {name} after a fatal error")
            value = f"{name}:{seq}".encode()
            try:
                producer.produce(self.topic, value, partition=seq % self.partitions,
                                 on_delivery=self._on_delivery(name, seq))
            except BufferError:
                producer.poll(0.1)
                continue
            except KafkaException as e:
                self.history.delivery_error(f"produce() {e.args[0].name()}")
                if e.args[0].fatal():
                    self._fatal.set()
                producer.poll(0.1)
                continue
            self.history.attempt()
            seq += 1
            producer.poll(0)
            self.stop.wait(self.interval)  # the pace of the workload, not a synchronisation
        self.unflushed = producer.flush(self.message_timeout_ms / 1000 + 30)
        producer.poll(0)

    def _on_delivery(self, name: str, seq: int):
        def done(err, msg) -> None:
            h = self.history
            if err is not None:
                h.delivery_error(err.name())
                if err.fatal():
                    h.fatal_errors.append((h.now(), name, f"{err.name()}: {err.str()}"))
                    self._fatal.set()
                return
            offset = msg.offset()
            h.ack(Ack(name, seq, msg.partition(), -1 if offset is None or offset < 0 else offset, msg.value(),
                      h.now()))
        return done


class GroupMember(threading.Thread):
    """A consumer of the group that commits what it consumed, synchronously, every ``commit_interval`` s."""

    def __init__(self, name: str, bootstrap: str, topic: str, group: str, history: History,
                 stop: threading.Event, commit_interval: float = 0.5):
        super().__init__(daemon=True, name=f"member-{name}")
        self.member, self.bootstrap, self.topic, self.group = name, bootstrap, topic, group
        self.history, self.stop, self.commit_interval = history, stop, commit_interval
        self.positions: dict[int, int] = {}
        self.consumed = 0
        self.closed_cleanly = False

    def run(self) -> None:
        from confluent_kafka import Consumer
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000,
            "client.id": f"jepsen-{self.member}"})

        def revoked(_consumer, partitions) -> None:
            for tp in partitions:
                self.positions.pop(tp.partition, None)
        consumer.subscribe([self.topic], on_revoke=revoked, on_lost=revoked)
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self.positions[msg.partition()] = msg.offset() + 1
                    self.consumed += 1
                if time.monotonic() - last_commit >= self.commit_interval:
                    self._commit(consumer)
                    last_commit = time.monotonic()
            self._commit(consumer)
        finally:
            consumer.close()
            self.closed_cleanly = True

    def _commit(self, consumer) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        if not self.positions:
            return
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(self.positions.items())]
        try:
            answer = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self.history.commit_error(e.args[0].name())
            return
        confirmed = {tp.partition: tp.offset for tp in answer or [] if tp.error is None and tp.offset >= 0}
        for tp in answer or []:
            if tp.error is not None:
                self.history.commit_error(tp.error.name())
        if confirmed:
            self.history.commit(Commit(self.member, confirmed, self.history.now()))


class ReaderWorker(threading.Thread):
    """A plain consumer (no group) reading every partition from the beginning throughout the run; what it read
    goes into ``History.reads`` under its name, so the checker can hold the consumers' views against each other
    and against the final read."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History,
                 stop: threading.Event):
        super().__init__(daemon=True, name=f"reader-{name}")
        self.reader, self.bootstrap, self.topic, self.partitions = name, bootstrap, topic, partitions
        self.history, self.stop = history, stop

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": f"reader-{self.reader}", "enable.auto.commit": False,
            "socket.connection.setup.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000,
            "client.id": f"jepsen-{self.reader}"})
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        try:
            while not self.stop.is_set():
                for m in consumer.consume(500, 0.2):
                    if m.error() is None:
                        self.history.read(self.reader, m.partition(), m.offset(), m.value())
        finally:
            consumer.close()


class TransactionalWorker(threading.Thread):
    """A transactional producer (acks=all): each transaction writes one value to each of two partitions, then
    commits, or aborts on purpose (the second of every four). What the client was told of each transaction goes into
    ``History.txns``. After a fatal error (a fenced or unusable producer) a new incarnation with the same
    transactional.id takes over; its init_transactions completes or aborts what the old one left open, so
    that transaction's outcome is unknown: all of it visible or none of it."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, history: History,
                 stop: threading.Event, interval: float, timeout: float = 60.0, debug_log: str | None = None):
        """``debug_log``: a file for librdkafka's transaction log (``debug=eos``: coordinator lookups, each
        transactional request and its answer, state changes)."""
        super().__init__(daemon=True, name=f"txn-producer-{name}")
        self.base, self.bootstrap, self.topic, self.partitions = name, bootstrap, topic, partitions
        self.history, self.stop, self.interval, self.timeout = history, stop, interval, timeout
        self.debug_log = debug_log
        self.incarnation = 0

    def _producer(self):
        from confluent_kafka import Producer
        extra = {"debug": "eos", "logger": file_logger(f"jepsen.librdkafka.{self.base}", self.debug_log)} \
            if self.debug_log else {}
        producer = Producer({**extra,
            "bootstrap.servers": self.bootstrap, "transactional.id": f"jepsen-{self.base}", "acks": "all",
            "linger.ms": 5, "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
            "socket.connection.setup.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000, "client.id": f"jepsen-{self.base}"})
        producer.init_transactions(self.timeout)
        return producer

    def run(self) -> None:
        from confluent_kafka import KafkaException
        producer, n = None, 0
        while not self.stop.is_set():
            if producer is None:
                try:
                    producer = self._producer()
                except KafkaException as e:
                    self.history.event(f"transactional producer {self.base}: init failed ({e.args[0].name()})")
                    self.stop.wait(1)  # the pace of retries, not a synchronisation
                    continue
            name = f"{self.base}.{self.incarnation}"
            parts = sorted({n % self.partitions, (n + 1) % self.partitions})
            txn = Txn(f"{name}/{n}", [(p, TXN_PREFIX + f"{name}/{n}/{i}".encode()) for i, p in enumerate(parts)],
                      self.history.now())
            self.history.txn(txn)
            n += 1
            if not self._one(producer, txn, abort=n % 4 == 2):  # the second of every four
                # fatal: a new producer fences this one and finishes what it left open
                self.history.fatal_errors.append((self.history.now(), name, txn.error))
                self.incarnation += 1
                producer = None
            self.stop.wait(self.interval)  # the pace of the workload, not a synchronisation

    def _one(self, producer, txn: Txn, abort: bool) -> bool:
        """Run one transaction; False when the producer is no longer usable."""
        from confluent_kafka import KafkaException
        h = self.history
        try:
            producer.begin_transaction()
            for p, v in txn.values:
                producer.produce(self.topic, v, partition=p)
            if abort:
                producer.abort_transaction(self.timeout)
                txn.outcome = "aborted"
            else:
                txn.committing = h.now()
                producer.commit_transaction(self.timeout)
                txn.outcome = "committed"
            txn.ended = h.now()
            return True
        except KafkaException as e:
            err = e.args[0]
            txn.error = f"{err.name()}: {err.str()}"
            txn.ended = h.now()
            if err.fatal():
                txn.outcome = "unknown"
                return False
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(self.timeout)
                    txn.outcome = "aborted"
                    return True
                except KafkaException as e2:
                    txn.error += f"; abort: {e2.args[0].name()}"
            # retriable, or the abort failed too: the client cannot tell what happened
            txn.outcome = "unknown"
            return False
