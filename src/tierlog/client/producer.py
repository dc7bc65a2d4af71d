"""tierlog's asyncio producer, with the Java producer's semantics.

``await producer.send(topic, value, key=...)`` appends the record to its partition's batch and
returns a :class:`RecordFuture` at once; awaiting that gives the record's offset. ``send`` itself
waits only for metadata of a new topic and for ``buffer.memory`` room, at most ``max.block.ms``.

A sender task drains ready batches (full, ``linger.ms`` elapsed, or flushing) into one Produce
request per leader, at most ``max.in.flight.requests.per.connection`` in flight per broker.
Retriable failures (leader moved, broker gone, timeout) put batches back at the front of their
partition in sequence order and retry until ``delivery.timeout.ms`` after the batch was created,
waiting ``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms`` between attempts at the same
leader. A failure that says the leaders may have moved (a failed connection, a disconnect, a timeout,
NOT_LEADER_OR_FOLLOWER...) refreshes the metadata, and a batch whose partition has a new leader goes
there without waiting out its back-off (KIP-951), keeping its sequence numbers.
With ``enable.idempotence`` (the default) the producer gets a producer id with InitProducerId and
numbers batches per partition, so a retried batch the broker already wrote is not written twice.

With ``transactional.id`` the producer is transactional (:mod:`tierlog.client.transactions`):
``init_transactions()`` once, then ``begin_transaction()``, ``send``, optionally
``send_offsets_to_transaction``, and ``commit_transaction()`` or ``abort_transaction()``. With
transaction version 1 a partition is added to the transaction (AddPartitionsToTxn) before its first
batch of the transaction is sent: the sender holds its batches until the coordinator has answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from tierlog import errors
from tierlog.client.accumulator import ProducerBatch, RecordAccumulator, RecordFuture
from tierlog.client.connection import PRODUCE_LAST_VERSION_WITH_NAMES
from tierlog.client.errors import (
    IllegalStateError,
    KafkaTimeoutError,
    RecordTooLargeError,
    TransactionAbortedError,
)
from tierlog.client.network import (
    KafkaClient,
    deadline_after,
    exponential_backoff,
    metadata_is_stale,
    retry_until,
)
from tierlog.client.partitioner import DefaultPartitioner, partition_for_key
from tierlog.client.transactions import TransactionManager
from tierlog.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from tierlog.config.client import validate_client_config
from tierlog.protocol import ApiKey

log = logging.getLogger("tierlog.client.producer")

_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
# a failed batch with one of these makes a transactional producer unusable (Java's maybeTransitionToErrorState)
_FATAL_BATCH_ERRORS = (errors.ProducerFencedError, errors.TransactionalIdAuthorizationFailedError,
                       errors.ClusterAuthorizationFailedError, errors.UnsupportedVersionError)


def settings(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Merge a dict of dotted Kafka names with keyword arguments using underscores."""
    merged = dict(config or {})
    for k, v in kwargs.items():
        merged[k.replace("_", ".")] = v
    return merged


def _serializer(value: Any) -> Callable[[Any], bytes | None] | None:
    if value is None or callable(value):
        return value
    if value in ("string", "str", "org.apache.kafka.common.serialization.StringSerializer"):
        return lambda v: None if v is None else str(v).encode()
    raise errors.InvalidConfigError(f"a serializer must be a callable or 'string', not {value!r}")


class Producer:
    """``Producer(bootstrap_servers="host:9092", acks="all", linger_ms=5, ...)`` or
    ``Producer({"bootstrap.servers": ...})``; settings are checked here, before any I/O."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config = validate_client_config("producer", settings(config, kwargs))
        self.acks = _ACKS[str(self.config["acks"]).lower()]
        self.idempotent = bool(self.config["enable.idempotence"])
        self.transactional_id: str | None = self.config.get("transactional.id")
        self._txn: TransactionManager | None = None
        self.key_serializer = _serializer(self.config.get("key.serializer"))
        self.value_serializer = _serializer(self.config.get("value.serializer"))
        self.max_request_size = self.config["max.request.size"]
        self._client: KafkaClient | None = None
        self._accumulator: RecordAccumulator | None = None
        self._partitioner = DefaultPartitioner.from_config(self.config)
        self._sender: asyncio.Task | None = None
        self._in_flight: dict[int, int] = {}  # node id -> Produce requests awaiting an answer
        self._max_in_flight = self.config["max.in.flight.requests.per.connection"]
        self._request_tasks: set[asyncio.Task] = set()
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        # a sequenced batch failed for good (or the broker lost our sequence): its sequence is
        # unresolved, so the sender bumps the epoch once nothing is in flight (KIP-360, as Java)
        self._bump_epoch_needed = False
        # Partitions whose first batch of this epoch is in flight. Until the broker has acknowledged
        # one, it has no state for us and Kafka accepts any first sequence, so a later batch could be
        # written before a refused first one: nothing else of the partition goes out meanwhile.
        self._first_in_flight: set[TopicPartition] = set()
        self._confirmed: set[TopicPartition] = set()  # partitions with an acknowledged batch this epoch
        self._closed = False
        self._fatal: BaseException | None = None
        self._max_record_size = 0  # the smaller of max.request.size and buffer.memory (+ batch overhead)
        self._tps: dict[str, list[TopicPartition]] = {}  # TopicPartition objects made once per topic
        self._records_sent = 0
        self._metrics = {"record-retry-total": 0, "record-error-total": 0, "request-total": 0, "batch-total": 0}

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._client is not None:
            return
        self._client = KafkaClient(self.config, "producer")
        self._client.allow_auto_topic_creation = True
        self._client.start()
        self._accumulator = RecordAccumulator(self.config)
        self._max_record_size = min(self.max_request_size, self._accumulator.buffer_memory + 61)
        if self.transactional_id is not None:
            # the producer id comes from init_transactions(), as in Java
            self._txn = TransactionManager(self._client, self.config, self._accumulator.wakeup.set)
        elif self.idempotent and self.acks != 0:
            await self._init_producer_id()
        self._sender = asyncio.get_running_loop().create_task(self._sender_loop(), name="tierlog-producer-sender")

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            raise IllegalStateError("the producer is not started: call await producer.start()")
        return self._client

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """The producer id and epoch in use (-1, -1 before one was given)."""
        return self._producer_id, self._producer_epoch

    async def _init_producer_id(self) -> None:
        async def attempt() -> None:
            resp = await self.client.send_any(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": self.config["transaction.timeout.ms"],
                "producer_id": -1, "producer_epoch": -1})
            if resp.error_code.value:
                raise errors.error_for_code(resp.error_code.value)(f"InitProducerId failed: {resp.error_code.name}")
            self._producer_id, self._producer_epoch = int(resp.producer_id), int(resp.producer_epoch)

        await retry_until(attempt, deadline_after(self.config["max.block.ms"]), self.config, "InitProducerId",
                          self._client)

    async def flush(self, timeout_ms: float | None = None) -> None:
        """Send everything buffered now (ignoring linger.ms) and wait until every record is answered."""
        acc = self._accumulator
        if acc is None:
            return
        acc.flushing += 1
        acc.wakeup.set()
        try:
            futures = [b.future for dq in acc.batches.values() for b in dq]
            futures += [b.future for t in self._request_tasks for b in getattr(t, "batches", ())]
            if futures:
                await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True),
                                       None if timeout_ms is None else timeout_ms / 1000)
        finally:
            acc.flushing -= 1

    async def close(self, timeout_ms: float | None = None) -> None:
        """Send what is buffered (within ``timeout_ms``, default unbounded), then stop."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._accumulator is not None and self._sender is not None and not self._sender.done():
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await self.flush(timeout_ms)
        finally:
            if self._sender is not None:
                self._sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._sender
            for t in list(self._request_tasks):
                t.cancel()
            if self._txn is not None:
                self._txn.close()
            if self._accumulator is not None:
                exc = IllegalStateError("producer closed before the record was sent")
                for dq in self._accumulator.batches.values():
                    for b in dq:
                        b.fail(exc)
                self._accumulator.batches.clear()
            if self._client is not None:
                await self._client.close()

    # -- transactions -----------------------------------------------------------------------------

    def _transactions(self, method: str) -> TransactionManager:
        if self._closed:
            raise IllegalStateError("Cannot perform operation after producer has been closed")
        if self.transactional_id is None:
            raise IllegalStateError(f"Cannot use {method}() without setting transactional.id on the producer")
        if self._txn is None:
            raise IllegalStateError("the producer is not started: call await producer.start()")
        return self._txn

    def _deadline(self, timeout_ms: float | None) -> float:
        return deadline_after(self.config["max.block.ms"] if timeout_ms is None else timeout_ms)

    def _adopt_producer_id(self) -> None:
        """Take the transaction manager's producer id and epoch; sequences start from 0 again."""
        txn = self._txn
        if (txn.producer_id, txn.producer_epoch) != (self._producer_id, self._producer_epoch):
            self._producer_id, self._producer_epoch = txn.producer_id, txn.producer_epoch
            self._next_sequence.clear()
            self._confirmed.clear()
            self._first_in_flight.clear()

    async def init_transactions(self, timeout_ms: float | None = None) -> None:
        """Get the producer id and epoch of ``transactional.id`` from its transaction coordinator, which
        fences older producers with the same id and completes their open transaction. Call once, before
        any other transactional method; waits at most ``max.block.ms`` (or ``timeout_ms``) and may be
        called again after a KafkaTimeoutError."""
        txn = self._transactions("init_transactions")
        await txn.initialize(self._deadline(timeout_ms))
        self._adopt_producer_id()

    async def resume_transaction(self, producer_id: int, producer_epoch: int, timeout_ms: float | None = None) -> None:
        """Adopt the open transaction of ``transactional.id`` that another producer (``producer_id``,
        ``producer_epoch``) prepared: its records sent and answered, not yet ended. Call instead of
        init_transactions() (which would abort it), then commit_transaction() or abort_transaction().
        A transaction fenced or timed out since fails the commit with ProducerFencedError."""
        txn = self._transactions("resume_transaction")
        await txn.resume(producer_id, producer_epoch, self._deadline(timeout_ms))
        self._adopt_producer_id()

    def begin_transaction(self) -> None:
        """Start a transaction (locally: the coordinator learns of it with the first partition or
        offsets added). IllegalStateError when one is in progress or init_transactions() has not run."""
        self._transactions("begin_transaction").begin()

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
                                          group_metadata: ConsumerGroupMetadata | str,
                                          timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (the next offsets to consume) for the consumer's group as part of the
        transaction: visible in the group only if the transaction commits. ``group_metadata`` is
        ``consumer.group_metadata()`` (KIP-447: a member of an old generation is fenced); a bare group id
        works too, without that fencing."""
        txn = self._transactions("send_offsets_to_transaction")
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not isinstance(group, ConsumerGroupMetadata) or not group.group_id:
            raise errors.InvalidGroupIdError("send_offsets_to_transaction needs the consumer's group metadata")
        wanted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, value in offsets.items():
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            if om.offset < 0:
                raise ValueError(f"Invalid offset {om.offset} for partition {tp}")
            wanted[TopicPartition(*tp)] = om
        if not wanted:
            return
        await txn.send_offsets(wanted, group, self._deadline(timeout_ms))

    async def commit_transaction(self, timeout_ms: float | None = None) -> None:
        """Send every record of the transaction, wait for their answers, then commit (EndTxn). If a
        record failed the transaction can only be aborted: its error is raised (fatal errors such as
        ProducerFencedError mean the producer can only be closed). A KafkaTimeoutError (after
        ``max.block.ms`` or ``timeout_ms``) leaves the commit pending: call commit_transaction again."""
        txn = self._transactions("commit_transaction")
        txn.begin_commit()
        deadline = self._deadline(timeout_ms)
        await self._wait_for_batches(deadline, "commit_transaction")
        txn.raise_if_error()
        if await txn.end(True, deadline):
            self._adopt_producer_id()

    async def abort_transaction(self, timeout_ms: float | None = None) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError, those sent
        are answered first, then EndTxn(abort). Allowed after an abortable error; the producer is
        then ready for begin_transaction() again."""
        txn = self._transactions("abort_transaction")
        txn.begin_abort()
        deadline = self._deadline(timeout_ms)
        self._abort_undrained(TransactionAbortedError("Failing batch since transaction was aborted"))
        await txn.wait_add_partitions()
        tasks = [t for t in self._request_tasks if not t.done()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            if pending:
                raise KafkaTimeoutError("abort_transaction: produce requests still unanswered when the time ran out")
        if await txn.end(False, deadline):
            self._adopt_producer_id()

    async def _wait_for_batches(self, deadline: float, what: str) -> None:
        try:
            await self.flush(max(0.0, deadline - time.monotonic()) * 1000)
        except TimeoutError:
            raise KafkaTimeoutError(f"{what}: records still unanswered when the time ran out") from None

    def _abort_undrained(self, exc: BaseException) -> None:
        """Fail every batch not in flight (Java's abortUndrainedBatches)."""
        acc = self._accumulator
        for dq in acc.batches.values():
            while dq:
                b = dq.popleft()
                if b.base_sequence >= 0:
                    # sent before and being retried: whether the broker wrote it is unknown
                    self._txn.epoch_bump_required = True
                acc.release(b)
                self._metrics["record-error-total"] += b.count
                b.fail(exc)

    # -- sending ----------------------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None, *, partition: int | None = None,
                   timestamp_ms: int | None = None, headers: list[tuple[str, bytes | None]] | None = None
                   ) -> RecordFuture:
        """Queue one record; await the returned future for its :class:`RecordMetadata`.

        Waits only for the metadata of a new topic and for ``buffer.memory`` room (``max.block.ms``).
        When the record fills a batch, the batch is handed to the network at once and ``send`` lets
        the event loop run once, so sending overlaps with the application producing more."""
        if self._closed:
            raise IllegalStateError("Cannot perform operation after producer has been closed")
        if self._fatal is not None:
            raise self._fatal
        client = self._client
        if client is None:
            raise IllegalStateError("the producer is not started: call await producer.start()")
        txn = self._txn
        if txn is not None:
            txn.check_send()
        if self.key_serializer is not None:
            key = self.key_serializer(key)
        if self.value_serializer is not None:
            value = self.value_serializer(value)
        info = client.cluster.topics.get(topic)
        if info is None or not info.partitions:
            await client.wait_for_topic(topic, deadline_after(self.config["max.block.ms"]))
            info = client.cluster.topics[topic]
        elif topic not in client.topics_of_interest:
            client.add_topics([topic])
        key_size = -1 if key is None else len(key)
        value_size = -1 if value is None else len(value)
        size = 21 + (key_size if key_size > 0 else 0) + (value_size if value_size > 0 else 0)
        if headers:
            size += sum(len(k) + (len(v) if v else 0) + 2 for k, v in headers)
        acc = self._accumulator
        if size + 61 > self._max_record_size:
            if size + 61 > self.max_request_size:
                raise RecordTooLargeError(f"The message is {size + 61} bytes when serialized which is larger than "
                                          f"{self.max_request_size}, the value of max.request.size")
            raise RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than the "
                                      f"total memory buffer ({acc.buffer_memory}, buffer.memory)")
        if acc.used and acc.used + size > acc.buffer_memory and \
                not await acc.wait_for_room(size, deadline_after(self.config["max.block.ms"])):
            raise KafkaTimeoutError(f"Failed to allocate {size} bytes within the configured max blocking time "
                                    f"{self.config['max.block.ms']} ms (buffer.memory is full)")
        part = self._partitioner
        nparts = len(info.partitions)
        tps = self._tps.get(topic)
        if tps is None or len(tps) != nparts:
            tps = self._tps[topic] = [TopicPartition(topic, i) for i in range(nparts)]
        batches = acc.batches
        if partition is not None:
            if not 0 <= partition < nparts:
                part.partition(topic, key, nparts, explicit_partition=partition)  # raises the error
            p, sticky = partition, False
        elif key is not None and not part.ignore_keys:
            p, sticky = partition_for_key(key, nparts), False
        else:
            p = part.partition(topic, key, nparts, info.available_partitions)
            sticky = True
            dq = batches.get(tps[p])
            if (not dq or dq[-1].closed) and part.on_append(topic, p, 0):
                p = part.partition(topic, key, nparts, info.available_partitions)
        tp = tps[p]
        if txn is not None:
            txn.maybe_add_partition(tp)
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        # the accumulator's append, inlined: this runs for every record
        dq = batches.get(tp)
        batch = dq[-1] if dq else None
        ready = False
        if batch is None or batch.closed or (batch.count and batch.size + size > acc.batch_size):
            batch, ready = acc.open_batch(tp, dq, batch)
        index = batch.count
        n = batch.append(ts, key, value, headers)
        batch.appended_bytes += n
        acc.used += n
        if batch.size >= acc.batch_size:
            batch.close(acc.codec, acc.level)
            ready = True
        if sticky:
            part.on_append(topic, p, size, enable_switch=batch.closed)
        self._records_sent += 1
        future = RecordFuture(batch, index, ts, key_size, value_size)
        if ready:
            acc.wakeup.set()
            if not self._bump_epoch_needed and self._sender is not None:
                self._drain(time.monotonic())
                await asyncio.sleep(0)  # let the request go out while the caller produces the next records
        return future

    @property
    def metrics(self) -> dict[str, int]:
        """Counters as Kafka's producer metrics name them."""
        return {**self._metrics, "record-send-total": self._records_sent}

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any):
        return await (await self.send(topic, value, key, **kwargs))

    def partitions_for(self, topic: str) -> list[int]:
        info = self.client.cluster.topics.get(topic)
        return sorted(info.partitions) if info else []

    # -- the sender -------------------------------------------------------------------------------

    async def _sender_loop(self) -> None:
        acc = self._accumulator
        while True:
            acc.wakeup.clear()
            if self._bump_epoch_needed:
                self._expire(time.monotonic())
                if any(self._in_flight.values()):
                    # answers still due under the old epoch: wait for them before renumbering
                    await acc.wakeup.wait()
                    continue
                await self._bump_epoch()
            wait = self._drain(time.monotonic())
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(acc.wakeup.wait(), wait)

    def _drain(self, now: float) -> float | None:
        """Expire old batches and start one Produce request per leader with the ready batches (at
        most ``max.in.flight.requests.per.connection`` per broker). Returns how long the sender may
        sleep before something else becomes ready (None: until woken)."""
        acc = self._accumulator
        client = self._client
        self._expire(now)
        txn = self._txn
        if txn is not None and (txn.has_error or txn.is_aborting):
            self._abort_undrained(txn.last_error if txn.has_error else
                                  TransactionAbortedError("Failing batch since transaction was aborted"))
            return None
        by_node: dict[int, list[ProducerBatch]] = {}
        unknown_leader = False
        retry_backoff = self.config["retry.backoff.ms"] / 1000
        for tp, dq in acc.batches.items():
            if not dq:
                continue
            batch = dq[0]
            if batch.in_flight or not acc.ready(batch, now):
                continue
            if txn is not None and not txn.is_added(tp):
                txn.maybe_add_partition(tp)  # AddPartitionsToTxn first; the batch waits for its answer
                continue
            if tp in self._first_in_flight:
                continue
            leader = client.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                unknown_leader = True
                continue
            # a retry backs off at the same leader only: one the metadata moved it to is tried at once
            if batch.attempts and leader.node_id == batch.leader and now - batch.last_attempt < batch.backoff:
                continue
            if not client.is_usable(leader):
                continue  # in reconnect back-off: its failed dial already asked for new metadata
            by_node.setdefault(leader.node_id, []).append(batch)
        if unknown_leader:
            client.request_update()
        if txn is not None:
            txn.maybe_send_add_partitions()
        for node_id, batches in by_node.items():
            if self._in_flight.get(node_id, 0) >= self._max_in_flight:
                continue
            drained, total = [], 0
            for b in batches:
                if not b.closed:
                    b.close(acc.codec, acc.level)
                if drained and total + len(b.records) + 61 > self.max_request_size:
                    break
                drained.append(b)
                total += len(b.records) + 61
            for b in drained:
                acc.batches[b.tp].popleft()
                b.leader = node_id
                self._prepare(b)
            if txn is not None:
                txn.started = True  # with transaction version 2 the first Produce starts it
            self._in_flight[node_id] = self._in_flight.get(node_id, 0) + 1
            task = asyncio.get_running_loop().create_task(self._produce(client.node(node_id), drained))
            task.batches = drained
            self._request_tasks.add(task)
            task.add_done_callback(self._request_tasks.discard)
        wait = acc.next_expiry(time.monotonic())
        if wait is not None and wait <= 0:
            # something is ready but held back (in-flight limit, back-off, no leader): poll gently
            wait = min(retry_backoff, 0.05)
        return wait

    async def _bump_epoch(self) -> None:
        """Start a new epoch of the producer id (locally, as Java's idempotent producer does; a new
        producer id when the epoch is exhausted) and renumber every queued batch from sequence 0.
        Batches already reported failed keep their fate; nothing is in flight now."""
        if self._producer_epoch >= 0x7FFF:
            try:
                await self._init_producer_id()
            except errors.KafkaError as exc:
                log.warning("producer id reset failed (%r); retrying", exc)
                await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)
                return
        else:
            self._producer_epoch += 1
        log.info("producer %d: epoch bumped to %d after unresolved sequences", self._producer_id,
                 self._producer_epoch)
        self._next_sequence.clear()
        self._confirmed.clear()
        for dq in self._accumulator.batches.values():
            for b in dq:
                if b.base_sequence >= 0:
                    b.base_sequence = -1
                    b.frame = None
        self._bump_epoch_needed = False

    def _earlier_pending(self, b: ProducerBatch) -> bool:
        """Whether a batch with a lower sequence of the same partition is still unanswered."""
        def earlier(other: ProducerBatch) -> bool:
            return (other is not b and other.tp == b.tp and 0 <= other.base_sequence < b.base_sequence
                    and other.producer_epoch == b.producer_epoch and not other.future.done())
        if any(earlier(o) for o in self._accumulator.batches.get(b.tp, ())):
            return True
        return any(earlier(o) for t in self._request_tasks for o in getattr(t, "batches", ()))

    def _prepare(self, b: ProducerBatch) -> None:
        b.in_flight = True
        b.attempts += 1
        b.last_attempt = time.monotonic()
        if self.idempotent and self.acks != 0 and b.base_sequence < 0:
            seq = self._next_sequence.get(b.tp, 0)
            b.base_sequence = seq
            b.producer_id, b.producer_epoch = self._producer_id, self._producer_epoch
            self._next_sequence[b.tp] = (seq + b.count) & 0x7FFFFFFF
        if self.idempotent and b.tp not in self._confirmed:
            self._first_in_flight.add(b.tp)

    def _expire(self, now: float) -> None:
        limit = self.config["delivery.timeout.ms"] / 1000
        for dq in self._accumulator.batches.values():
            while dq and not dq[0].in_flight and now - dq[0].created >= limit:
                b = dq.popleft()
                self._fail(b, self._expired(b, f"{(now - b.created) * 1000:.0f} ms has passed since batch creation"))

    async def _produce(self, node, batches: list[ProducerBatch]) -> None:
        acc = self._accumulator
        transactional = self._txn is not None
        topics: dict[str, list[dict]] = {}
        for b in batches:
            topics.setdefault(b.tp.topic, []).append({"index": b.tp.partition,
                                                      "records": b.encode(acc.codec, transactional)})
        # Produce v13 names topics by the ids the metadata gave (KIP-516): a topic deleted and recreated
        # under the same name meanwhile answers UNKNOWN_TOPIC_ID, never appends to the new topic by mistake
        ids, names = self.client.cluster.topic_ids(topics)
        max_version = self._txn.produce_max_version if transactional else None
        if None in ids.values():
            max_version = min(max_version or PRODUCE_LAST_VERSION_WITH_NAMES, PRODUCE_LAST_VERSION_WITH_NAMES)
        request = {"transactional_id": self.transactional_id, "acks": self.acks,
                   "timeout_ms": self.config["request.timeout.ms"],
                   "topic_data": [{"name": t, "topic_id": ids[t], "partition_data": parts}
                                  for t, parts in topics.items()]}
        self._metrics["request-total"] += 1
        try:
            try:
                response = await self.client.send(node, ApiKey.PRODUCE, request, expect_response=self.acks != 0,
                                                  max_version=max_version)
            except errors.KafkaError as exc:
                for b in batches:
                    self._retry_or_fail(b, exc)
                return
            if response is None:  # acks=0
                for b in batches:
                    self._done(b, -1, -1)
                return
            by_tp = {(getattr(t, "name", None) or names.get(t.topic_id), p.index): p
                     for t in response.responses for p in t.partition_responses}
            for b in batches:
                p = by_tp.get((b.tp.topic, b.tp.partition))
                if p is None:
                    self._retry_or_fail(b, errors.UnknownServerError(f"no answer for {b.tp} in the Produce response"))
                    continue
                code = p.error_code.value
                if code == errors.NO_ERROR or code == errors.DuplicateSequenceNumberError.code:
                    append_time = p.log_append_time
                    if isinstance(append_time, datetime):
                        append_time = int(append_time.timestamp() * 1000)
                    self._done(b, int(p.base_offset) if code == errors.NO_ERROR else -1,
                               -1 if append_time is None else int(append_time))
                else:
                    cls = errors.error_for_code(code)
                    self._retry_or_fail(b, cls(f"{b.tp.topic}-{b.tp.partition}: {p.error_message or cls.name}"))
        finally:
            self._in_flight[node.node_id] -= 1
            acc.wakeup.set()

    def _done(self, b: ProducerBatch, base_offset: int, append_time: int) -> None:
        b.in_flight = False
        if self.idempotent and b.producer_epoch == self._producer_epoch:
            self._confirmed.add(b.tp)
        self._first_in_flight.discard(b.tp)
        self._accumulator.release(b)
        self._metrics["batch-total"] += 1
        b.complete(base_offset, append_time)

    def _retry_or_fail(self, b: ProducerBatch, exc: errors.KafkaError) -> None:
        b.in_flight = False
        self._first_in_flight.discard(b.tp)
        now = time.monotonic()
        retriable = exc.retriable
        if self.idempotent and b.base_sequence >= 0 and isinstance(
                exc, (errors.OutOfOrderSequenceNumberError, errors.UnknownProducerIdError)):
            # The broker did not write the batch. Behind an earlier batch still unanswered it is just
            # early: resend. Otherwise the broker's sequence and ours parted (an earlier batch failed
            # for good, or the producer state is gone): renumber under a new epoch, then resend. In a
            # transaction the batch fails instead: the transaction aborts and the abort bumps the epoch.
            if self._earlier_pending(b):
                retriable = True
            elif self._txn is None:
                retriable = True
                self._bump_epoch_needed = True
        if metadata_is_stale(exc) or not retriable:
            self.client.request_update()
        if (retriable and now - b.created < self.config["delivery.timeout.ms"] / 1000
                and b.attempts <= self.config["retries"]):
            self._metrics["record-retry-total"] += b.count
            log.debug("retrying %d record(s) for %s: %r", b.count, b.tp, exc)
            b.last_attempt = now
            b.backoff = exponential_backoff(self.config, b.attempts)
            self._accumulator.reenqueue(b)
            return
        self._fail(b, self._expired(b, f"delivery.timeout.ms passed; last error: {exc}") if retriable else exc)

    def _fail(self, b: ProducerBatch, exc: BaseException) -> None:
        """Report ``b`` failed. If it carried a sequence, the broker may or may not have written it,
        so later batches of its partition cannot follow that sequence: a new epoch is due."""
        self._accumulator.release(b)
        self._metrics["record-error-total"] += b.count
        if self._txn is not None:
            if isinstance(exc, _FATAL_BATCH_ERRORS):
                self._txn.fatal(exc)
            else:
                self._txn.abortable(exc, bump=b.base_sequence >= 0)
        elif self.idempotent and b.base_sequence >= 0:
            self._bump_epoch_needed = True
            self._accumulator.wakeup.set()
        b.fail(exc)

    def _expired(self, b: ProducerBatch, why: str) -> KafkaTimeoutError:
        """The error for records that ran out of delivery.timeout.ms: BrokersUnavailableError when
        no broker could be reached meanwhile (KIP-899's documented failure with strategy none)."""
        return self.client.timeout_error(f"Expiring {b.count} record(s) for {b.tp.topic}-{b.tp.partition}: {why}")
