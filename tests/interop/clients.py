"""One synchronous adapter per Kafka client, so every interop scenario is written once.

Adapters: kafka-python, aiokafka (driven on its own event-loop thread), confluent-kafka
(librdkafka), kcat (the CLI, run as subprocesses) and tierlog's own client (its synchronous
facade). Each exposes the same small surface:
admin calls returning Kafka error codes (0 = success) instead of client-specific exceptions,
``produce`` returning the delivered (partition, offset) of every record, ``consume`` /
``open_consumer`` for assigned partitions, and ``open_group_member`` for a consumer in a group.
What a client cannot do raises :class:`NotApplicable`; the tests turn that into a skip whose
reason starts with ``n/a:``, which the compatibility matrix prints as "n/a".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import queue
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.harness import waiting

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms
HEARTBEAT_MS = 300
KAFKA_PYTHON_GROUP_POLL_MS = 1000


class NotApplicable(Exception):
    """The client has no way to do this (its API or CLI lacks it)."""


@dataclass(frozen=True)
class Rec:
    """A record to produce."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Msg:
    """A consumed record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = -1


@dataclass
class Meta:
    brokers: set[tuple[int, str, int]]
    topics: dict[str, int] = field(default_factory=dict)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05,
               check: Callable[[], None] | None = None) -> None:
    """``waiting.wait_until`` with the interop tests' argument order, and ``check()`` (a client thread still
    alive, say) called after each false answer."""

    def checked():
        if predicate():
            return True
        if check is not None:
            check()
        return False

    waiting.wait_until(checked, timeout, what=what, interval=interval)


# ---------------------------------------------------------------------------------------- sessions


class Session:
    """A consumer of assigned partitions: ``poll(timeout)`` returns whatever arrived."""

    def poll(self, timeout: float) -> list[Msg]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def drain(session: Session, count: int, timeout: float) -> list[Msg]:
    """Poll until ``count`` records arrived or ``timeout`` passed."""
    out: list[Msg] = []

    def drained():
        if len(out) < count:
            out.extend(session.poll(0.5))
        return len(out) >= count

    with contextlib.suppress(waiting.TimedOut):  # the caller judges what arrived
        waiting.wait_until(drained, timeout, interval=0, what=f"{count} records")
    return out


class GroupMember:
    """A consumer in a group, owned by its own thread (the clients are not thread-safe).

    ``ops_factory()`` runs on that thread and returns an object with ``poll(timeout)``,
    ``assignment()``, ``commit(offsets)`` and ``close()``. The test thread reads ``records`` and
    ``assigned`` and sends ``commit``/``close`` as commands that the owner thread executes.
    """

    def __init__(self, ops_factory: Callable[[], object], name: str):
        self.name = name
        self.records: list[Msg] = []
        self.assigned: frozenset[tuple[str, int]] = frozenset()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._commands: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, args=(ops_factory,), name=name, daemon=True)
        self._thread.start()

    def _run(self, ops_factory) -> None:
        ops = None
        try:
            ops = ops_factory()
            while True:
                try:
                    command, arg, fut = self._commands.get_nowait()
                except queue.Empty:
                    command = None
                if command == "close":
                    ops.close()
                    fut.set_result(None)
                    return
                if command == "commit":
                    try:
                        fut.set_result(ops.commit(arg))
                    except BaseException as e:  # noqa: BLE001 - handed to the waiting test thread
                        fut.set_exception(e)
                msgs = ops.poll(0.1)
                assigned = frozenset(ops.assignment())
                with self._lock:
                    self.records.extend(msgs)
                    self.assigned = assigned
        except BaseException as e:  # noqa: BLE001 - surfaced by check()
            self.error = e
            while not self._commands.empty():
                _, _, fut = self._commands.get_nowait()
                fut.set_exception(e)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"group member {self.name} failed: {self.error!r}") from self.error

    def snapshot(self) -> list[Msg]:
        with self._lock:
            return list(self.records)

    def _call(self, command: str, arg=None, timeout: float = 30):
        self.check()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put((command, arg, fut))
        return fut.result(timeout)

    def positions(self) -> dict[tuple[str, int], int]:
        """Next offset per assigned partition after the records this member has returned."""
        out: dict[tuple[str, int], int] = {}
        for m in self.snapshot():
            if (m.topic, m.partition) in self.assigned:
                out[(m.topic, m.partition)] = max(out.get((m.topic, m.partition), 0), m.offset + 1)
        return out

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Synchronous commit of ``offsets`` (default: the positions of what it consumed)."""
        offsets = self.positions() if offsets is None else offsets
        if offsets:
            self._call("commit", offsets)

    def close(self) -> None:
        if self._thread.is_alive():
            self._call("close", timeout=60)
        self._thread.join(10)


# ---------------------------------------------------------------------------------------- base


class Client:
    name = "?"
    lacks: dict[str, str] = {}  # feature -> why the client cannot exercise it

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    @staticmethod
    def version() -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass

    # admin
    def create_topics(self, topics: dict[str, tuple[int, dict[str, str]]]) -> dict[str, int]:
        raise NotApplicable(f"{self.name} has no CreateTopics")

    def create_partitions(self, topic: str, total: int) -> int:
        raise NotApplicable(f"{self.name} has no CreatePartitions")

    def delete_topics(self, names: list[str]) -> dict[str, int]:
        raise NotApplicable(f"{self.name} has no DeleteTopics")

    def describe_configs(self, kind: str, name: str) -> dict[str, str | None]:
        raise NotApplicable(f"{self.name} has no DescribeConfigs")

    def alter_configs(self, kind: str, name: str, changes: dict[str, str]) -> int:
        raise NotApplicable(f"{self.name} has no AlterConfigs")

    def delete_records(self, topic: str, partition: int, before: int) -> tuple[int, int]:
        raise NotApplicable(f"{self.name} has no DeleteRecords")

    def metadata(self) -> Meta:
        raise NotImplementedError

    def committed(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        raise NotImplementedError

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        raise NotImplementedError

    # data
    def produce(self, topic: str, recs: list[Rec], compression: str = "none", idempotent: bool = True,
                small_batches: bool = False, pace_s: float = 0.0) -> list[tuple[int, int]] | None:
        raise NotImplementedError

    def open_consumer(self, topic: str, partition: int, start) -> Session:
        """``start``: "earliest", "latest", ("timestamp", ms) or an offset."""
        raise NotImplementedError

    def consume(self, topic: str, partition: int, start, count: int, timeout: float = 20) -> list[Msg]:
        session = self.open_consumer(topic, partition, start)
        try:
            return drain(session, count, timeout)
        finally:
            session.close()

    def open_group_member(self, group: str, topics: list[str]) -> GroupMember:
        raise NotImplementedError

    def group_consume(self, group: str, topic: str, count: int, timeout: float = 30) -> list[Msg]:
        """Join ``group``, take exactly ``count`` records of one-partition ``topic`` in order,
        commit the offset after the last one, leave the group; returns those records."""
        member = self.open_group_member(group, [topic])
        try:
            wait_until(lambda: len(member.snapshot()) >= count, timeout, f"{count} records in group {group}",
                       check=member.check)
            taken = member.snapshot()[:count]
            if taken:
                member.commit({(topic, taken[-1].partition): taken[-1].offset + 1})
            return taken
        finally:
            member.close()


# ---------------------------------------------------------------------------------------- kafka-python


class KafkaPythonClient(Client):
    name = "kafka-python"

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self._admin = None
        self._probe = None

    @staticmethod
    def version() -> str:
        import kafka
        return kafka.__version__

    def close(self) -> None:
        for c in (self._admin, self._probe):
            if c is not None:
                c.close()
        self._admin = self._probe = None

    def admin(self):
        if self._admin is None:
            from kafka.admin import KafkaAdminClient
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15000,
                                           client_id="interop-admin")
        return self._admin

    def probe(self):
        if self._probe is None:
            from kafka import KafkaConsumer
            self._probe = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                        request_timeout_ms=15000, client_id="interop-probe")
        return self._probe

    @staticmethod
    def _code(exc: Exception) -> int:
        errno = getattr(exc, "errno", None)
        if isinstance(errno, int):
            return errno
        raise exc

    def create_topics(self, topics):
        spec = {name: {"num_partitions": n, "replication_factor": -1, "configs": cfg}
                for name, (n, cfg) in topics.items()}
        result = self.admin().create_topics(spec, raise_errors=False)
        return {t["name"]: t["error_code"] for t in result["topics"]}

    def create_partitions(self, topic, total):
        resp = self.admin().create_partitions({topic: total}, raise_errors=False)
        return next(r.error_code for r in resp.results if r.name == topic)

    def delete_topics(self, names):
        result = self.admin().delete_topics(names, raise_errors=False)
        return {t["name"]: t["error_code"] for t in result["topics"]}

    def describe_configs(self, kind, name):
        from kafka.admin import ConfigResource, ConfigResourceType
        rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
        result = self.admin().describe_configs([ConfigResource(rtype, name)], config_filter="all")
        entries = result[rtype.name.lower()][name]
        return {k: v["value"] for k, v in entries.items()}

    def alter_configs(self, kind, name, changes):
        import kafka.errors as errors
        from kafka.admin import ConfigResource, ConfigResourceType
        rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
        try:
            result = self.admin().alter_configs([ConfigResource(rtype, name, configs=dict(changes))],
                                                raise_on_unknown=False)
        except errors.KafkaError as e:
            return self._code(e)
        outcome = result[rtype.name.lower()][name]
        if outcome == "OK":
            return 0
        # "[Error 40] InvalidConfigError: ..." -> 40
        m = re.search(r"\[Error (-?\d+)\]", outcome)
        if not m:
            raise AssertionError(f"cannot read the error of {outcome!r}")
        return int(m.group(1))

    def delete_records(self, topic, partition, before):
        import kafka.errors as errors
        from kafka import TopicPartition
        tp = TopicPartition(topic, partition)
        try:
            result = self.admin().delete_records({tp: before})
        except errors.KafkaError as e:
            return self._code(e), -1
        return 0, result[tp]["low_watermark"]

    def metadata(self):
        admin = self.admin()
        cluster = admin.describe_cluster()
        brokers = {(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]}
        topics = {t["name"]: len(t["partitions"]) for t in admin.describe_topics() if t["error_code"] == 0}
        return Meta(brokers, topics)

    def committed(self, group, topic, partitions):
        from kafka import TopicPartition
        result = self.admin().list_group_offsets({group: [TopicPartition(topic, p) for p in partitions]})
        return {tp.partition: (o.offset if o is not None else -1) for tp, o in result[group].items()}

    def watermarks(self, topic, partition):
        from kafka import TopicPartition
        tp = TopicPartition(topic, partition)
        probe = self.probe()
        return probe.beginning_offsets([tp])[tp], probe.end_offsets([tp])[tp]

    def produce(self, topic, recs, compression="none", idempotent=True, small_batches=False, pace_s=0.0):
        from kafka import KafkaProducer
        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap, compression_type=None if compression == "none" else compression,
            enable_idempotence=idempotent, acks="all" if idempotent else 1,
            linger_ms=0 if small_batches else 5, batch_size=256 if small_batches else 16384,
            retry_backoff_ms=50, reconnect_backoff_ms=50, reconnect_backoff_max_ms=500,
            request_timeout_ms=10000, client_id="interop-producer")
        try:
            futures = []
            for r in recs:
                futures.append(producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                             timestamp_ms=r.timestamp, partition=r.partition))
                if pace_s:
                    time.sleep(pace_s)
            producer.flush(60)
            return [(md.partition, md.offset) for md in (f.get(timeout=60) for f in futures)]
        finally:
            producer.close(10)

    def open_consumer(self, topic, partition, start):
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 request_timeout_ms=15000, fetch_max_wait_ms=200, client_id="interop-consumer")
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start == "earliest":
            consumer.seek_to_beginning(tp)
        elif start == "latest":
            consumer.seek_to_end(tp)
            consumer.position(tp)
        elif isinstance(start, tuple):
            found = consumer.offsets_for_times({tp: start[1]})[tp]
            assert found is not None, f"no offset for timestamp {start[1]}"
            consumer.seek(tp, found.offset)
        else:
            consumer.seek(tp, start)

        class _S(Session):
            def poll(self, timeout):
                batches = consumer.poll(timeout_ms=int(timeout * 1000))
                return [_kp_msg(m) for ms in batches.values() for m in ms]

            def close(self):
                consumer.close()

        return _S()

    def open_group_member(self, group, topics):
        bootstrap = self.bootstrap

        class _Ops:
            def __init__(self):
                from kafka import KafkaConsumer
                self.c = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                       enable_auto_commit=False, auto_offset_reset="earliest",
                                       session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                       request_timeout_ms=15000, fetch_max_wait_ms=200,
                                       retry_backoff_ms=50, client_id="interop-member")

            def poll(self, timeout):
                # kafka-python 3.0.12 drops a join that completes after poll() gave up waiting for it:
                # the heartbeat stays disabled and the member is evicted at its session timeout. A
                # poll longer than a join keeps the whole join inside one call (records still
                # return at once).
                batches = self.c.poll(timeout_ms=max(int(timeout * 1000), KAFKA_PYTHON_GROUP_POLL_MS))
                return [_kp_msg(m) for ms in batches.values() for m in ms]

            def assignment(self):
                return {(tp.topic, tp.partition) for tp in self.c.assignment()}

            def commit(self, offsets):
                from kafka import OffsetAndMetadata, TopicPartition
                self.c.commit({TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()})

            def close(self):
                self.c.close(autocommit=False)

        return GroupMember(_Ops, f"kafka-python:{group}")


def _kp_msg(m) -> Msg:
    return Msg(m.topic, m.partition, m.offset, m.key, m.value, tuple((k, v) for k, v in (m.headers or ())),
               m.timestamp)


# ---------------------------------------------------------------------------------------- aiokafka


class _LoopThread:
    """An asyncio loop on a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aiokafka-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class AiokafkaClient(Client):
    name = "aiokafka"

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self.lt = _LoopThread()
        self._admin = None
        self._probe = None

    @staticmethod
    def version() -> str:
        import aiokafka
        return aiokafka.__version__

    def close(self) -> None:
        if self.lt is None:
            return

        async def _close():
            if self._admin is not None:
                await self._admin.close()
            if self._probe is not None:
                await self._probe.stop()
        try:
            self.lt.run(_close(), 20)
        finally:
            self._admin = self._probe = None
            self.lt.stop()
            self.lt = None

    def admin(self):
        if self._admin is None:
            from aiokafka.admin import AIOKafkaAdminClient

            async def _make():
                a = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=15000)
                await a.start()
                return a
            self._admin = self.lt.run(_make())
        return self._admin

    def probe(self):
        if self._probe is None:
            from aiokafka import AIOKafkaConsumer

            async def _make():
                c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
                await c.start()
                return c
            self._probe = self.lt.run(_make())
        return self._probe

    def create_topics(self, topics):
        from aiokafka.admin import NewTopic
        resp = self.lt.run(self.admin().create_topics(
            [NewTopic(name, n, 1, topic_configs=cfg) for name, (n, cfg) in topics.items()]))
        return {name: code for name, code, *_ in resp.topic_errors}

    def create_partitions(self, topic, total):
        from aiokafka.admin import NewPartitions
        from aiokafka.errors import KafkaError
        try:
            self.lt.run(self.admin().create_partitions({topic: NewPartitions(total)}))
        except KafkaError as e:
            return e.errno
        return 0

    def delete_topics(self, names):
        resp = self.lt.run(self.admin().delete_topics(names))
        return {name: code for name, code, *_ in resp.topic_error_codes}

    def describe_configs(self, kind, name):
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
        rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
        responses = self.lt.run(self.admin().describe_configs([ConfigResource(rtype, name)]))
        out = {}
        for resp in responses:
            for code, _msg, _rtype, rname, entries in resp.resources:
                assert code == 0, f"DescribeConfigs of {rname} failed with error {code}"
                for entry in entries:
                    out[entry[0]] = entry[1]
        return out

    def alter_configs(self, kind, name, changes):
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
        rtype = ConfigResourceType.TOPIC if kind == "topic" else ConfigResourceType.BROKER
        responses = self.lt.run(self.admin().alter_configs([ConfigResource(rtype, name, configs=dict(changes))]))
        codes = [code for resp in responses for code, *_ in resp.resources]
        return next((c for c in codes if c), 0)

    def delete_records(self, topic, partition, before):
        from aiokafka.admin import RecordsToDelete
        from aiokafka.errors import KafkaError
        from aiokafka.structs import TopicPartition
        tp = TopicPartition(topic, partition)
        try:
            result = self.lt.run(self.admin().delete_records({tp: RecordsToDelete(before)}))
        except KafkaError as e:
            return e.errno, -1
        return 0, result[tp]

    def metadata(self):
        admin = self.admin()
        cluster = self.lt.run(admin.describe_cluster())
        brokers = {(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]}
        topics = {t["topic"]: len(t["partitions"]) for t in self.lt.run(admin.describe_topics())
                  if t["error_code"] == 0}
        return Meta(brokers, topics)

    def committed(self, group, topic, partitions):
        from aiokafka.structs import TopicPartition
        result = self.lt.run(self.admin().list_consumer_group_offsets(
            group, partitions=[TopicPartition(topic, p) for p in partitions]))
        return {tp.partition: o.offset for tp, o in result.items()}

    def watermarks(self, topic, partition):
        from aiokafka.structs import TopicPartition
        tp = TopicPartition(topic, partition)
        probe = self.probe()
        low = self.lt.run(probe.beginning_offsets([tp]))[tp]
        high = self.lt.run(probe.end_offsets([tp]))[tp]
        return low, high

    def produce(self, topic, recs, compression="none", idempotent=True, small_batches=False, pace_s=0.0):
        from aiokafka import AIOKafkaProducer

        async def _produce():
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, compression_type=None if compression == "none" else compression,
                enable_idempotence=idempotent, acks="all" if idempotent else 1,
                linger_ms=0 if small_batches else 5, max_batch_size=256 if small_batches else 16384,
                retry_backoff_ms=50, request_timeout_ms=10000)
            await producer.start()
            try:
                futures = []
                for r in recs:
                    futures.append(await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                                       timestamp_ms=r.timestamp, partition=r.partition))
                    if pace_s:
                        await asyncio.sleep(pace_s)
                mds = await asyncio.gather(*futures)
                return [(md.partition, md.offset) for md in mds]
            finally:
                await producer.stop()

        return self.lt.run(_produce(), 120)

    def open_consumer(self, topic, partition, start):
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition
        lt = self.lt
        tp = TopicPartition(topic, partition)

        async def _make():
            c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=200)
            await c.start()
            c.assign([tp])
            if start == "earliest":
                await c.seek_to_beginning(tp)
            elif start == "latest":
                await c.seek_to_end(tp)
                await c.position(tp)
            elif isinstance(start, tuple):
                found = (await c.offsets_for_times({tp: start[1]}))[tp]
                assert found is not None, f"no offset for timestamp {start[1]}"
                c.seek(tp, found.offset)
            else:
                c.seek(tp, start)
            return c

        consumer = lt.run(_make())

        class _S(Session):
            def poll(self, timeout):
                batches = lt.run(consumer.getmany(timeout_ms=int(timeout * 1000)))
                return [_aio_msg(m) for ms in batches.values() for m in ms]

            def close(self):
                lt.run(consumer.stop())

        return _S()

    def open_group_member(self, group, topics):
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import OffsetAndMetadata, TopicPartition
        lt = self.lt
        bootstrap = self.bootstrap

        class _Ops:
            def __init__(self):
                async def _make():
                    c = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                         enable_auto_commit=False, auto_offset_reset="earliest",
                                         session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                                         fetch_max_wait_ms=200, retry_backoff_ms=50)
                    await c.start()
                    return c
                self.c = lt.run(_make())

            def poll(self, timeout):
                batches = lt.run(self.c.getmany(timeout_ms=int(timeout * 1000)))
                return [_aio_msg(m) for ms in batches.values() for m in ms]

            def assignment(self):
                async def _a():
                    return {(tp.topic, tp.partition) for tp in self.c.assignment()}
                return lt.run(_a())

            def commit(self, offsets):
                lt.run(self.c.commit({TopicPartition(t, p): OffsetAndMetadata(o, "") for (t, p), o in offsets.items()}))

            def close(self):
                lt.run(self.c.stop())

        return GroupMember(_Ops, f"aiokafka:{group}")


def _aio_msg(m) -> Msg:
    return Msg(m.topic, m.partition, m.offset, m.key, m.value, tuple((k, v) for k, v in (m.headers or ())),
               m.timestamp)


# ---------------------------------------------------------------------------------------- confluent-kafka


class ConfluentClient(Client):
    name = "confluent-kafka"

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self._admin = None
        self._probe = None

    @staticmethod
    def version() -> str:
        import confluent_kafka
        return f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
        self._admin = self._probe = None

    def admin(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def probe(self):
        if self._probe is None:
            from confluent_kafka import Consumer
            self._probe = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("interop-probe"),
                                    "enable.auto.commit": False})
        return self._probe

    @staticmethod
    def _code(exc: BaseException) -> int:
        from confluent_kafka import KafkaException
        if isinstance(exc, KafkaException):
            return exc.args[0].code()
        raise exc

    def _results(self, futures: dict) -> dict:
        out = {}
        for key, fut in futures.items():
            try:
                fut.result(30)
                out[key] = 0
            except Exception as e:  # noqa: BLE001 - converted to a Kafka error code
                out[key] = self._code(e)
        return out

    def create_topics(self, topics):
        from confluent_kafka.admin import NewTopic
        return self._results(self.admin().create_topics(
            [NewTopic(name, n, config=cfg) for name, (n, cfg) in topics.items()], operation_timeout=15))

    def create_partitions(self, topic, total):
        from confluent_kafka.admin import NewPartitions
        return self._results(self.admin().create_partitions([NewPartitions(topic, total)]))[topic]

    def delete_topics(self, names):
        return self._results(self.admin().delete_topics(names, operation_timeout=15))

    def describe_configs(self, kind, name):
        from confluent_kafka.admin import ConfigResource, ResourceType
        rtype = ResourceType.TOPIC if kind == "topic" else ResourceType.BROKER
        (fut,) = self.admin().describe_configs([ConfigResource(rtype, name)]).values()
        return {k: e.value for k, e in fut.result(30).items()}

    def alter_configs(self, kind, name, changes):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
        rtype = ResourceType.TOPIC if kind == "topic" else ResourceType.BROKER
        resource = ConfigResource(rtype, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()])
        (code,) = self._results(self.admin().incremental_alter_configs([resource])).values()
        return code

    def delete_records(self, topic, partition, before):
        from confluent_kafka import TopicPartition
        (fut,) = self.admin().delete_records([TopicPartition(topic, partition, before)]).values()
        try:
            result = fut.result(30)
        except Exception as e:  # noqa: BLE001 - converted to a Kafka error code
            return self._code(e), -1
        return 0, result.low_watermark

    def metadata(self):
        md = self.admin().list_topics(timeout=15)
        brokers = {(b.id, b.host, b.port) for b in md.brokers.values()}
        topics = {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}
        return Meta(brokers, topics)

    def committed(self, group, topic, partitions):
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        futures = self.admin().list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])])
        result = futures[group].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions}

    def watermarks(self, topic, partition):
        from confluent_kafka import TopicPartition
        return self.probe().get_watermark_offsets(TopicPartition(topic, partition), timeout=15, cached=False)

    def produce(self, topic, recs, compression="none", idempotent=True, small_batches=False, pace_s=0.0):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": self.bootstrap, "compression.type": compression,
                "enable.idempotence": idempotent, "acks": "all" if idempotent else 1,
                "linger.ms": 0 if small_batches else 5, "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "message.timeout.ms": 60000}
        if small_batches:
            conf["batch.num.messages"] = 5
        producer = Producer(conf)
        results: dict[int, tuple[int, int] | Exception] = {}

        def report(i):
            def cb(err, msg):
                results[i] = Exception(str(err)) if err is not None else (msg.partition(), msg.offset())
            return cb

        for i, r in enumerate(recs):
            kwargs = {"value": r.value, "key": r.key, "headers": list(r.headers) or None, "on_delivery": report(i)}
            if r.timestamp is not None:
                kwargs["timestamp"] = r.timestamp
            if r.partition is not None:
                kwargs["partition"] = r.partition
            producer.produce(topic, **kwargs)
            producer.poll(0)
            if pace_s:
                time.sleep(pace_s)
        left = producer.flush(60)
        assert left == 0, f"{left} records not delivered"
        failed = {i: r for i, r in results.items() if isinstance(r, Exception)}
        assert not failed, f"delivery failed: {failed}"
        return [results[i] for i in range(len(recs))]

    def _consumer(self, **extra):
        from confluent_kafka import Consumer
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique("interop-assign"),
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "fetch.wait.max.ms": 200, **extra})

    def open_consumer(self, topic, partition, start):
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition
        consumer = self._consumer()
        if start == "earliest":
            offset = OFFSET_BEGINNING
        elif start == "latest":
            offset = OFFSET_END
        elif isinstance(start, tuple):
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, start[1])], timeout=15)
            assert found.error is None and found.offset >= 0, f"no offset for timestamp {start[1]}: {found}"
            offset = found.offset
        else:
            offset = start
        consumer.assign([TopicPartition(topic, partition, offset)])

        class _S(Session):
            def poll(self, timeout):
                return [_ck_msg(m) for m in consumer.consume(500, timeout) if not _ck_error(m)]

            def close(self):
                consumer.close()

        return _S()

    def open_group_member(self, group, topics):
        from confluent_kafka import Consumer, TopicPartition
        bootstrap = self.bootstrap

        class _Ops:
            def __init__(self):
                self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                   "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                                   "fetch.wait.max.ms": 200, "partition.assignment.strategy": "range"})
                self.c.subscribe(topics)

            def poll(self, timeout):
                return [_ck_msg(m) for m in self.c.consume(500, timeout) if not _ck_error(m)]

            def assignment(self):
                return {(tp.topic, tp.partition) for tp in self.c.assignment()}

            def commit(self, offsets):
                self.c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)

            def close(self):
                self.c.close()

        return GroupMember(_Ops, f"confluent-kafka:{group}")


def _ck_error(m) -> bool:
    err = m.error()
    if err is None:
        return False
    from confluent_kafka import KafkaError
    if err.code() == KafkaError._PARTITION_EOF:
        return True
    raise AssertionError(f"consumer error: {err}")


def _ck_msg(m) -> Msg:
    return Msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])


# ---------------------------------------------------------------------------------------- kcat


class _Lines:
    """Collects a subprocess stream's lines on a daemon thread."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.queue: queue.Queue = queue.Queue()
        self.done = threading.Event()
        threading.Thread(target=self._run, args=(stream,), daemon=True).start()

    def _run(self, stream) -> None:
        for line in stream:
            self.lines.append(line)
            self.queue.put(line)
        self.done.set()


class KcatClient(Client):
    """kcat covers produce (-P -z), consume (-C -o), metadata (-L), offsets (-Q) and groups (-G).

    It has no admin commands; committed offsets of its groups are read with kafka-python (kcat
    cannot show them).
    """

    name = "kcat"
    lacks = {feature: "kcat has no admin commands" for feature in
             ("create_topics", "create_partitions", "configs", "delete_records", "delete_topic")}

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self.kcat = shutil.which("kcat")
        self._helper: KafkaPythonClient | None = None

    @staticmethod
    def version() -> str:
        out = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"Version (\S+) .*librdkafka (\S+)", out)
        return f"{m.group(1)} (librdkafka {m.group(2)})" if m else out.strip()

    def close(self) -> None:
        if self._helper is not None:
            self._helper.close()

    def _base(self, *args: str) -> list[str]:
        return [self.kcat, "-b", self.bootstrap, "-m", "15", *args]

    def _run(self, args: list[str], input: str | None = None, timeout: float = 60) -> str:
        proc = subprocess.run(args, input=input, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-3000:]}"
        return proc.stdout

    def metadata(self):
        md = json.loads(self._run(self._base("-L", "-J")))
        brokers = set()
        for b in md["brokers"]:
            host, port = b["name"].rsplit(":", 1)
            brokers.add((b["id"], host, int(port)))
        topics = {t["topic"]: len(t["partitions"]) for t in md["topics"] if not t.get("error")}
        return Meta(brokers, topics)

    def committed(self, group, topic, partitions):
        if self._helper is None:
            self._helper = KafkaPythonClient(self.bootstrap)
        return self._helper.committed(group, topic, partitions)

    def watermarks(self, topic, partition):
        out = self._run(self._base("-Q", "-t", f"{topic}:{partition}:-2"))
        low = int(re.search(r"offset (-?\d+)", out).group(1))
        out = self._run(self._base("-Q", "-t", f"{topic}:{partition}:-1"))
        high = int(re.search(r"offset (-?\d+)", out).group(1))
        return low, high

    def produce(self, topic, recs, compression="none", idempotent=True, small_batches=False, pace_s=0.0):
        headers = {r.headers for r in recs}
        if len(headers) > 1:
            raise NotApplicable("kcat sets the same headers on every record of a run")
        if any(r.timestamp is not None for r in recs):
            raise NotApplicable("kcat cannot set record timestamps")
        partitions = {r.partition for r in recs}
        if len(partitions) > 1:
            raise NotApplicable("kcat produces to one partition (or the partitioner) per run")
        # -E: keep going through transient errors (a dropped connection) like any producer; failed
        # deliveries are still reported ("Delivery failed") and checked below.
        args = self._base("-P", "-E", "-t", topic, "-z", compression, "-K", "\t",
                          "-X", f"enable.idempotence={idempotent}",
                          "-X", "acks=all" if idempotent else "acks=1", "-X", "retry.backoff.ms=50",
                          "-X", "reconnect.backoff.ms=50", "-X", "reconnect.backoff.max.ms=500",
                          "-X", "linger.ms=0" if small_batches else "linger.ms=5")
        if small_batches:
            args += ["-X", "batch.num.messages=5"]
        (part,) = partitions
        if part is not None:
            args += ["-p", str(part)]
        for k, v in next(iter(headers)):
            args += ["-H", f"{k}={v.decode()}"]
        lines = []
        for r in recs:
            value = r.value.decode()
            assert "\n" not in value and "\t" not in value, "kcat input is line based"
            lines.append(f"{value}\n" if r.key is None else f"{r.key.decode()}\t{value}\n")
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        err = _Lines(proc.stderr)
        try:
            for line in lines:
                proc.stdin.write(line)
                if pace_s:
                    proc.stdin.flush()
                    time.sleep(pace_s)
            proc.stdin.close()
            rc = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
        err.done.wait(5)
        failures = [line for line in err.lines if "Delivery failed" in line or "Fatal" in line]
        assert rc == 0 and not failures, f"kcat produce failed ({rc}): {''.join(err.lines)[-3000:]}"
        return None  # kcat does not report offsets; the tests read them back

    def consume(self, topic, partition, start, count, timeout=20):
        args = self._base("-C", "-t", topic, "-p", str(partition), "-o", _kcat_offset(start), "-J", "-e",
                          "-c", str(count), "-q")
        return [_kcat_msg(line) for line in self._run(args, timeout=timeout).splitlines() if line.strip()]

    def open_consumer(self, topic, partition, start):
        args = self._base("-C", "-t", topic, "-p", str(partition), "-o", _kcat_offset(start), "-J", "-u", "-q",
                          "-X", "fetch.wait.max.ms=200")
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out = _Lines(proc.stdout)

        class _S(Session):
            def poll(self, timeout):
                msgs = []
                try:
                    msgs.append(_kcat_msg(out.queue.get(timeout=timeout)))
                    while True:
                        msgs.append(_kcat_msg(out.queue.get_nowait()))
                except queue.Empty:
                    pass
                return msgs

            def close(self):
                _terminate(proc)

        return _S()

    def open_group_member(self, group, topics):
        # (kcat sets -X keys on the topic configuration first, so the global auto.commit.interval.ms
        # cannot be changed from its 5 s default: KcatMember.commit waits for the auto commit.)
        return KcatMember(self._base("-G", group, "-J", "-u", "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
                                     "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}", "-X", "fetch.wait.max.ms=200",
                                     "-X", "auto.offset.reset=earliest", "-X", "partition.assignment.strategy=range",
                                     *topics), group, self.committed)

    def group_consume(self, group, topic, count, timeout=30):
        # kcat -G -c N consumes N records and closes the consumer, which commits their offsets.
        args = self._base("-G", group, "-J", "-c", str(count), "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
                          "-X", f"heartbeat.interval.ms={HEARTBEAT_MS}", "-X", "auto.offset.reset=earliest",
                          "-X", "partition.assignment.strategy=range", topic)
        return [_kcat_msg(line) for line in self._run(args, timeout=timeout).splitlines() if line.strip()]


class KcatMember(GroupMember):
    """A ``kcat -G`` process: records from its JSON output, its assignment from its rebalance log.

    kcat commits on its own (auto commit every 5 s, and on close), so ``commit`` waits until the
    group's committed offsets reach what this member consumed instead of sending a commit.
    """

    _PART = re.compile(r"(\S+) \[(\d+)\]")

    def __init__(self, args: list[str], group: str, committed: Callable):  # noqa: D107 - no thread of its own
        self.name = f"kcat:{group}"
        self.group = group
        self._committed = committed
        self.error = None
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._out = _Lines(self.proc.stdout)
        self._err = _Lines(self.proc.stderr)

    @property
    def records(self) -> list[Msg]:
        return [_kcat_msg(line) for line in list(self._out.lines) if line.strip()]

    @property
    def assigned(self) -> frozenset[tuple[str, int]]:
        current: frozenset = frozenset()
        for line in list(self._err.lines):
            if "rebalanced" not in line:
                continue
            parts = frozenset((t, int(p)) for t, p in self._PART.findall(line.split(":", 2)[-1]))
            if "assigned:" in line:
                current = parts
            elif "revoked:" in line:
                current = frozenset()
        return current

    def snapshot(self) -> list[Msg]:
        return self.records

    def check(self) -> None:
        if self.proc.poll() is not None and self.proc.returncode not in (0, -signal.SIGTERM):
            raise AssertionError(f"kcat -G exited with {self.proc.returncode}: {''.join(self._err.lines)[-3000:]}")

    def commit(self, offsets=None) -> None:
        self.check()
        wanted = self.positions() if offsets is None else offsets

        def done() -> bool:
            for topic in {t for t, _ in wanted}:
                parts = sorted(p for t, p in wanted if t == topic)
                got = self._committed(self.group, topic, parts)
                if any(got.get(p, -1) < wanted[(topic, p)] for p in parts):
                    return False
            return True

        wait_until(done, 15, f"kcat's auto commit of {wanted}", interval=0.25, check=self.check)

    def close(self) -> None:
        _terminate(self.proc)
        self._out.done.wait(5)


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # kcat closes its consumer (commit, LeaveGroup) on SIGTERM
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kcat_offset(start) -> str:
    if start == "earliest":
        return "beginning"
    if start == "latest":
        return "end"
    if isinstance(start, tuple):
        return f"s@{start[1]}"
    return str(start)


def _kcat_msg(line: str) -> Msg:
    d = json.loads(line)
    flat = d.get("headers") or []
    headers = tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2))
    key = d.get("key")
    value = d.get("payload")
    return Msg(d["topic"], d["partition"], d["offset"], key.encode() if key is not None else None,
               value.encode() if value is not None else None, headers, d.get("ts", -1))


# ---------------------------------------------------------------------------------------- tierlog


class TierlogClient(Client):
    """tierlog's own client, through its synchronous facade (each facade object runs the asyncio
    client on its own loop thread). Errors come back as its typed exceptions, whose ``code`` is the
    Kafka error code; per-item failures carry ``errors`` (item -> exception)."""

    name = "tierlog"

    def __init__(self, bootstrap: str):
        super().__init__(bootstrap)
        self._admin = None
        self._probe = None

    @staticmethod
    def version() -> str:
        from tierlog.client.connection import SOFTWARE_VERSION
        return SOFTWARE_VERSION

    def close(self) -> None:
        for c in (self._admin, self._probe):
            if c is not None:
                c.close()
        self._admin = self._probe = None

    def admin(self):
        if self._admin is None:
            from tierlog.client.sync import Admin
            self._admin = Admin({"bootstrap.servers": self.bootstrap, "client.id": "interop-admin"})
        return self._admin

    @staticmethod
    def _codes(names, call) -> dict:
        """{item: 0} when ``call()`` succeeds, else each failed item's error code."""
        from tierlog.errors import KafkaError
        try:
            call()
        except KafkaError as e:
            failed = getattr(e, "errors", None) or {}
            return {n: (failed[n].code if n in failed else 0) for n in names}
        return dict.fromkeys(names, 0)

    def create_topics(self, topics):
        from tierlog.client.admin import NewTopic
        new = [NewTopic(name, n, -1, cfg) for name, (n, cfg) in topics.items()]
        return self._codes(list(topics), lambda: self.admin().create_topics(new))

    def create_partitions(self, topic, total):
        return self._codes([topic], lambda: self.admin().create_partitions({topic: total}))[topic]

    def delete_topics(self, names):
        return self._codes(names, lambda: self.admin().delete_topics(names))

    def describe_configs(self, kind, name):
        (entries,) = self.admin().describe_configs([(kind, name)]).values()
        return {k: e.value for k, e in entries.items()}

    def alter_configs(self, kind, name, changes):
        from tierlog.client.admin import AlterConfigOp
        ops = [AlterConfigOp(k, "set", v) for k, v in changes.items()]
        return self._codes([(kind, name)], lambda: self.admin().incremental_alter_configs({(kind, name): ops}))[
            (kind, name)]

    def delete_records(self, topic, partition, before):
        from tierlog.client.types import TopicPartition
        from tierlog.errors import KafkaError
        tp = TopicPartition(topic, partition)
        try:
            return 0, self.admin().delete_records({tp: before})[tp]
        except KafkaError as e:
            return e.code, -1

    def metadata(self):
        admin = self.admin()
        cluster = admin.describe_cluster()
        brokers = {(b.node_id, b.host, b.port) for b in cluster.brokers}
        names = list(admin.list_topics())
        topics = {name: len(d.partitions) for name, d in admin.describe_topics(names).items()} if names else {}
        return Meta(brokers, topics)

    def committed(self, group, topic, partitions):
        from tierlog.client.types import TopicPartition
        result = self.admin().list_consumer_group_offsets(group, [TopicPartition(topic, p) for p in partitions])
        return {tp.partition: (om.offset if om is not None else -1) for tp, om in result.items()}

    def probe(self):
        if self._probe is None:
            from tierlog.client.sync import Consumer
            self._probe = Consumer({"bootstrap.servers": self.bootstrap, "client.id": "interop-probe"})
        return self._probe

    def watermarks(self, topic, partition):
        # a consumer, as the other adapters: it waits for a partition its broker has not loaded yet
        from tierlog.client.types import TopicPartition
        tp = TopicPartition(topic, partition)
        probe = self.probe()
        return probe.beginning_offsets([tp])[tp], probe.end_offsets([tp])[tp]

    def produce(self, topic, recs, compression="none", idempotent=True, small_batches=False, pace_s=0.0):
        from tierlog.client.sync import Producer
        conf = {"bootstrap.servers": self.bootstrap, "compression.type": compression,
                "enable.idempotence": idempotent, "acks": "all" if idempotent else "1",
                "linger.ms": 0 if small_batches else 5, "batch.size": 256 if small_batches else 16384,
                "retry.backoff.ms": 50, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                "request.timeout.ms": 10000, "client.id": "interop-producer"}
        with Producer(conf) as producer:
            futures = []
            for r in recs:
                futures.append(producer.send(topic, r.value, r.key, partition=r.partition,
                                             timestamp_ms=r.timestamp, headers=list(r.headers) or None))
                if pace_s:
                    time.sleep(pace_s)
            producer.flush()
            return [(md.partition, md.offset) for md in (f.get(60) for f in futures)]

    def open_consumer(self, topic, partition, start):
        from tierlog.client.sync import Consumer
        from tierlog.client.types import TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "fetch.max.wait.ms": 200,
                             "client.id": "interop-consumer"})
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start == "earliest":
            consumer.seek_to_beginning(tp)
        elif start == "latest":
            consumer.seek_to_end(tp)
            consumer.position(tp)
        elif isinstance(start, tuple):
            found = consumer.offsets_for_times({tp: start[1]})[tp]
            assert found is not None, f"no offset for timestamp {start[1]}"
            consumer.seek(tp, found.offset)
        else:
            consumer.seek(tp, start)

        class _S(Session):
            def poll(self, timeout):
                batches = consumer.poll(timeout_ms=int(timeout * 1000))
                return [_tl_msg(m) for ms in batches.values() for m in ms]

            def close(self):
                consumer.close()

        return _S()

    def open_group_member(self, group, topics):
        bootstrap = self.bootstrap

        class _Ops:
            def __init__(self):
                from tierlog.client.sync import Consumer
                self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                   "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
                                   "fetch.max.wait.ms": 200, "retry.backoff.ms": 50,
                                   "client.id": "interop-member"})
                self.c.subscribe(topics)

            def poll(self, timeout):
                batches = self.c.poll(timeout_ms=int(timeout * 1000))
                return [_tl_msg(m) for ms in batches.values() for m in ms]

            def assignment(self):
                return {(tp.topic, tp.partition) for tp in self.c.assignment()}

            def commit(self, offsets):
                from tierlog.client.types import TopicPartition
                self.c.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})

            def close(self):
                self.c.close()

        return GroupMember(_Ops, f"tierlog:{group}")


def _tl_msg(m) -> Msg:
    return Msg(m.topic, m.partition, m.offset, m.key, m.value, tuple((k, v) for k, v in (m.headers or ())),
               m.timestamp)


CLIENTS: dict[str, type[Client]] = {
    c.name: c for c in (KafkaPythonClient, AiokafkaClient, ConfluentClient, KcatClient, TierlogClient)
}
