"""KIP-1191's dead-letter queue of share groups (Kafka 4.4's ``ShareGroupDLQStateManager``): the records a share
group gives up on are written to the group's DLQ topic, then archived.

A share-partition with a DLQ topic (the group's ``errors.deadletterqueue.topic.name``) puts a record the consumer
rejected, or one released or timed out past ``group.share.delivery.count.limit``, in state ARCHIVING and hands its
range here (:class:`~tierlog.coordinator.share.share_partition.DlqBatch`). One background task writes the ranges
queued, each as one uncompressed batch for partition ``source partition % DLQ partitions`` of the DLQ topic, and
then archives the records, whether the write succeeded or not (Kafka logs the failure and archives regardless).
A write that fails for a reason that may pass is tried again, as Kafka 4.4's ``ProduceRequestHandler`` does: up to
``MAX_REQUEST_ATTEMPTS`` (5) Produce attempts, after a back-off of 1 s doubling per failure (2, 4, 8, 16 s, at most
30 s, 20 % jitter). Retried: the DLQ partition without a leader or its leader gone (Kafka sends CreateTopics then and
retries on TOPIC_ALREADY_EXISTS with the same back-off), a connection that failed or timed out, and the partition
answering NOT_LEADER_OR_FOLLOWER; any other error, or the last attempt failing, archives the records without them.
As Kafka's ``ShareGroupDLQStateManager`` coalesces them, the ranges queued together go to each DLQ partition
leader in one request: one Produce (acks=all) over the inter-broker channel per broker, the records of every range
bound for one partition in one batch (a range that would take it past the topic's ``max.message.bytes`` waits for
the next request), or one append per partition through the replica manager when this broker leads it.

A DLQ record, as Kafka 4.4 writes it: the current time as its timestamp; the original key and value when the
group's ``errors.deadletterqueue.copy.record.enable`` is true (a record no longer in the log: headers only), none
otherwise; the original headers are not copied; the headers ``__dlq.errors.topic``, ``__dlq.errors.partition``,
``__dlq.errors.offset``, ``__dlq.errors.group``, ``__dlq.errors.delivery.count`` and ``__dlq.errors.message``
("Offset rejected by client." or "Offset delivery count exceeded the threshold."), UTF-8 text.

The DLQ topic is checked at each write, with Kafka's messages: its name may not start with ``__`` and must start
with the broker's ``errors.deadletterqueue.topic.name.prefix`` (when set), and it must exist with the topic config
``errors.deadletterqueue.group.enable=true``. A missing topic is refused unless the broker's
``errors.deadletterqueue.auto.create.topics.enable`` (default false, dynamic) is true; then it is created as Kafka
4.4 creates it: the default partitions and replication factor, ``errors.deadletterqueue.group.enable=true`` and
``message.timestamp.type=CreateTime``, and the write waits (bounded) until it exists.

Kafka's ShareGroupMetrics meters ``DeadLetterQueueRecordCount``, ``DeadLetterQueueTotalProduceRequestsPerSec`` and
``DeadLetterQueueFailedProduceRequestsPerSec`` (tag ``group``) are counters here (docs/metrics.md). As Kafka 4.4's
(``ProduceRequestHandler.recordProduceMetric``, one per range each time it is coalesced into a request), the total
counts a range at each attempt, not per Produce request sent; the failed count is one per range whose Produce
failed for good (its attempts exhausted, or an error not retried). A range refused before any Produce (the DLQ
topic misconfigured) counts in neither, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.config.group_configs import DLQ_COPY_RECORD_ENABLE, DLQ_TOPIC_NAME
from tierlog.coordinator.share.share_partition import DlqBatch, SharePartition
from tierlog.errors import (
    BrokerNotAvailableError,
    CoordinatorNotAvailableError,
    KafkaError,
    LeaderNotAvailableError,
    NetworkException,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    error_for_code,
)
from tierlog.protocol import ApiKey
from tierlog.records.batch import iter_batches
from tierlog.records.record import Record, build_batch, decode_batch
from tierlog.server.fetch_types import FetchIsolation, FetchParams, PartitionFetch

log = logging.getLogger(__name__)

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."
#: the bytes read from the source partition at a time when copying records
COPY_READ_BYTES = 1024 * 1024
#: Kafka 4.4's ShareGroupMetrics meters (kafka.server:type=ShareGroupMetrics,name=...,group=G) as counters
RECORD_COUNT = "kafka_server_sharegroupmetrics_deadletterqueuerecordcount_total"
PRODUCE_REQUESTS = "kafka_server_sharegroupmetrics_deadletterqueuetotalproducerequests_total"
FAILED_PRODUCE_REQUESTS = "kafka_server_sharegroupmetrics_deadletterqueuefailedproducerequests_total"


#: Kafka 4.4's ShareGroupDLQStateManager: the Produce attempts of a range, and the back-off between them
#: (REQUEST_BACKOFF_MS doubling per failed attempt up to REQUEST_BACKOFF_MAX_MS, CommonClientConfigs' 20 % jitter)
MAX_REQUEST_ATTEMPTS = 5
REQUEST_BACKOFF_MS = 1_000
REQUEST_BACKOFF_MAX_MS = 30_000
RETRY_BACKOFF_JITTER = 0.2
#: a whole request failing so is retried (Kafka: a disconnect, NETWORK_EXCEPTION, or REQUEST_TIMED_OUT)
RETRIABLE_REQUEST_ERRORS = (NetworkException, RequestTimedOutError, BrokerNotAvailableError, OSError,
                            asyncio.TimeoutError)


def retry_backoff_s(attempts: int) -> float:
    """The wait after ``attempts`` failed attempts (Kafka's ``ExponentialBackoffManager.backOff``)."""
    ms = min(REQUEST_BACKOFF_MAX_MS, REQUEST_BACKOFF_MS * 2 ** attempts)
    return ms * random.uniform(1 - RETRY_BACKOFF_JITTER, 1 + RETRY_BACKOFF_JITTER) / 1000


class _Retry(Exception):
    """A failure that may pass: the range's write is tried again after a back-off."""


#: how long a write waits for an auto-created DLQ topic to appear in this broker's metadata
AUTO_CREATE_WAIT_S = 30.0
#: the configs Kafka 4.4 creates a DLQ topic with
AUTO_CREATE_CONFIGS = {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}


def _retry(cause: BaseException) -> _Retry:
    retry = _Retry(str(cause))
    retry.__cause__ = cause
    return retry


class DlqTopicError(Exception):
    """The group's DLQ topic cannot take records (Kafka's ConfigException messages)."""


@dataclass(slots=True)
class _Job:
    sp: SharePartition
    topic_id: uuid.UUID
    batch: DlqBatch
    #: failed Produce attempts so far (Kafka's produceRequestBackoff)
    attempts: int = 0
    #: the DLQ records, built once: a retry sends the same ones (Kafka memoizes a round's source records)
    records: list[Record] | None = None


class ShareGroupDlqWriter:
    """Writes DLQ batches in the background, one at a time; ``on_done(sp, topic_id)`` after each is archived (the
    share API persists the state and wakes waiting fetches)."""

    def __init__(self, replica_manager, controller, group_config: Callable[[str, str], str],
                 on_done: Callable[[SharePartition, uuid.UUID], None], metrics=None):
        self.rm = replica_manager
        self.controller = controller
        self.group_config = group_config
        self.on_done = on_done
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task | None = None
        self._retries: set[asyncio.TimerHandle] = set()
        self._metrics = None
        if metrics is not None:
            self._metrics = (
                metrics.counter(RECORD_COUNT, "Records written to share groups' dead-letter queues (Kafka's "
                                "ShareGroupMetrics DeadLetterQueueRecordCount).", ("group",)),
                metrics.counter(PRODUCE_REQUESTS, "Writes to share groups' dead-letter queues, one per archived "
                                "range (Kafka's DeadLetterQueueTotalProduceRequestsPerSec).", ("group",)),
                metrics.counter(FAILED_PRODUCE_REQUESTS, "Writes to share groups' dead-letter queues that failed "
                                "(Kafka's DeadLetterQueueFailedProduceRequestsPerSec).", ("group",)))

    def submit(self, sp: SharePartition, topic_id: uuid.UUID) -> None:
        """Queue the share-partition's ARCHIVING ranges not yet handed over."""
        pending = sp.take_dlq_pending()
        for batch in pending:
            self._enqueue(_Job(sp, topic_id, batch))

    def _enqueue(self, job: _Job) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
        self._queue.put_nowait(job)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="share-group-dlq")

    def _retry_later(self, job: _Job, failure: BaseException) -> bool:
        """Count a failed attempt; queue the range again after Kafka's back-off unless its attempts are spent."""
        job.attempts += 1
        if job.attempts >= MAX_REQUEST_ATTEMPTS:
            return False
        delay = retry_backoff_s(job.attempts)
        log.info("DLQ write of offsets %d-%d of %s-%d (share group %s) failed, attempt %d of %d, retrying in "
                 "%.1f s: %s", job.batch.first_offset, job.batch.last_offset, job.sp.topic, job.sp.partition,
                 job.sp.group_id, job.attempts, MAX_REQUEST_ATTEMPTS, delay, failure)

        def again() -> None:
            self._retries.discard(handle)
            self._enqueue(job)
        handle = asyncio.get_running_loop().call_later(delay, again)
        self._retries.add(handle)
        return True

    async def close(self) -> None:
        for handle in self._retries:
            handle.cancel()
        self._retries.clear()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        assert self._queue is not None
        while not self._queue.empty():
            jobs = []
            while not self._queue.empty():
                jobs.append(self._queue.get_nowait())
            await self._round(jobs)

    async def _round(self, jobs: list[_Job]) -> None:
        """Write every queued range: their records built, then one request per DLQ partition leader carrying
        every range bound for it (Kafka's ``coalesceProduceRequests``); ranges past a partition's
        ``max.message.bytes`` wait for the next request to that leader. A range whose write may succeed later is
        queued again after a back-off."""
        outgoing: dict[int | None, list[tuple[_Job, str, int, list[Record]]]] = {}
        for job in jobs:
            try:
                topic, partition, records = await self._prepare(job)
                leader = self._leader(topic, partition)
            except (LeaderNotAvailableError, BrokerNotAvailableError) as e:
                # Kafka: no leader known for the DLQ partition, so CreateTopics, answered TOPIC_ALREADY_EXISTS and
                # retried with the same back-off and attempts as a Produce
                if not self._retry_later(job, e):
                    self._done(job, 0, e, produced=False)
                continue
            except Exception as e:  # never leave records in ARCHIVING because of a failure here
                self._done(job, 0, e, produced=False)
                continue
            outgoing.setdefault(leader, []).append((job, topic, partition, records))
        for leader, pending in outgoing.items():
            while pending:
                # one batch per partition (a Produce carries one batch a partition), the ranges' records merged
                sending: dict[tuple[str, int], list[tuple[_Job, list[Record]]]] = {}
                batches: dict[tuple[str, int], bytes] = {}
                deferred = []
                for job, topic, partition, records in pending:
                    tp = (topic, partition)
                    merged = build_batch([r for _j, rs in sending.get(tp, []) for r in rs] + records)
                    if tp in sending and len(merged) > self._max_message_bytes(topic):
                        deferred.append((job, topic, partition, records))
                        continue
                    sending.setdefault(tp, []).append((job, records))
                    batches[tp] = merged
                    self._count(1, job.sp.group_id)  # Kafka's recordProduceMetric: each time it joins a request
                failures = await self._send(leader, batches)
                for tp, entries in sending.items():
                    failure = failures.get(tp)
                    for job, _records in entries:
                        if isinstance(failure, _Retry):
                            if self._retry_later(job, failure.__cause__ or failure):
                                continue
                            failure = failure.__cause__ or failure
                        self._done(job, job.batch.last_offset - job.batch.first_offset + 1, failure)
                pending = deferred

    def _done(self, job: _Job, records: int, failure: BaseException | None, produced: bool = True) -> None:
        """The range's DLQ write ended: counted, its records archived whether it was written or not (Kafka logs
        the failure and archives regardless). ``produced``: whether it got as far as a Produce (Kafka counts a
        failed one only then)."""
        if failure is None:
            self._count(0, job.sp.group_id, records)
        else:
            if produced:
                self._count(2, job.sp.group_id)
            if job.attempts >= MAX_REQUEST_ATTEMPTS:
                log.warning("Exhausted max retries to write offsets %d-%d of %s-%d to the DLQ of share group %s "
                            "(%d attempts), archiving them regardless: %s", job.batch.first_offset,
                            job.batch.last_offset, job.sp.topic, job.sp.partition, job.sp.group_id, job.attempts,
                            failure)
            elif isinstance(failure, (DlqTopicError, KafkaError, OSError)):
                log.warning("Failed to write offsets %d-%d of %s-%d to the DLQ of share group %s, archiving "
                            "them regardless: %s", job.batch.first_offset, job.batch.last_offset, job.sp.topic,
                            job.sp.partition, job.sp.group_id, failure)
            else:
                log.error("DLQ write of share group %s failed", job.sp.group_id, exc_info=failure)
        job.sp.finish_archiving(job.batch.first_offset, job.batch.last_offset)
        self.on_done(job.sp, job.topic_id)

    def _dlq_topic(self, group_id: str) -> tuple[str, int]:
        """The group's DLQ topic and its partition count, checked as Kafka's ``validateDlqTopic``."""
        name = self.group_config(group_id, DLQ_TOPIC_NAME)
        if not name:
            raise DlqTopicError(f"Configured DLQ topic name in share group: {group_id} is empty.")
        if name.startswith("__"):
            raise DlqTopicError(f"Configured DLQ topic name in share group: {group_id} cannot start with __, "
                                f"topic: {name}.")
        prefix = self.controller.effective_config["errors.deadletterqueue.topic.name.prefix"] or ""
        if prefix and not name.startswith(prefix):
            raise DlqTopicError(f"Configured DLQ topic name does not comply with the DLQ topic prefix in share "
                                f"group: {group_id}, topic: {name}, prefix: {prefix}.")
        topic = self.controller.image.topics.get(name)
        if topic is None:
            raise DlqTopicError(f"DLQ topic does not exist and auto create is disabled on cluster for share "
                                f"group: {group_id}, topic: {name}.")
        if not self.controller.topic_config(name)["errors.deadletterqueue.group.enable"]:
            raise DlqTopicError(f"DLQ is not enabled on configured DLQ topic for share group: {group_id}, "
                                f"topic: {name}.")
        return name, len(topic.partitions)

    async def _auto_create(self, group_id: str) -> None:
        """Create the group's DLQ topic when it is missing and the broker allows it; then wait until it exists
        (the checks of ``_dlq_topic`` come after, with the topic in place)."""
        name = self.group_config(group_id, DLQ_TOPIC_NAME)
        config = self.controller.effective_config
        if (not name or name.startswith("__") or name in self.controller.image.topics
                or not config["errors.deadletterqueue.auto.create.topics.enable"]):
            return
        prefix = config["errors.deadletterqueue.topic.name.prefix"] or ""
        if prefix and not name.startswith(prefix):
            return  # refused by _dlq_topic with Kafka's message
        log.info("Creating DLQ topic %s of share group %s (errors.deadletterqueue.auto.create.topics.enable)",
                 name, group_id)
        try:
            self.controller.create_internal_topic(name, -1, -1, AUTO_CREATE_CONFIGS)
        except CoordinatorNotAvailableError:
            pass  # a cluster: asked of the controller, in the background
        except TopicAlreadyExistsError:
            return
        deadline = time.monotonic() + AUTO_CREATE_WAIT_S
        while name not in self.controller.image.topics and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _leader(self, topic: str, partition: int) -> int | None:
        """The DLQ partition's leader: None for this broker (or a single node)."""
        image = self.controller.image.topics[topic].partitions.get(partition)
        channel = getattr(self.controller, "channel", None)
        if image is None or image.leader == self.rm.node_id or channel is None:
            return None
        if image.leader < 0:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader")
        return image.leader

    def _max_message_bytes(self, topic: str) -> int:
        try:
            return int(self.controller.topic_config(topic)["max.message.bytes"])
        except (KeyError, TypeError, ValueError):
            return 1048588

    async def _send(self, leader: int | None, records: dict[tuple[str, int], bytes]) -> dict[tuple[str, int],
                                                                                              BaseException]:
        """Every partition's batches to ``leader``: appended here when this broker leads them, else one Produce
        (acks=all) over the inter-broker channel, as Kafka's DLQ manager sends one request per node. The failures
        per partition."""
        failures: dict[tuple[str, int], BaseException] = {}
        if leader is None:
            for (topic, partition), data in records.items():
                try:
                    self.rm.append_records(topic, partition, data)
                except NotLeaderOrFollowerError as e:  # leadership moved since the metadata was read
                    failures[(topic, partition)] = _retry(e)
                except Exception as e:
                    failures[(topic, partition)] = e
            return failures
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), data in records.items():
            by_topic.setdefault(topic, []).append({"index": partition, "records": data})
        try:
            answer = await self.controller.channel.request(leader, ApiKey.PRODUCE, {
                "transactional_id": None, "acks": -1, "timeout_ms": 30000,
                "topic_data": [{"name": t, "partition_data": parts} for t, parts in by_topic.items()]},
                max_version=12)
        except RETRIABLE_REQUEST_ERRORS as e:
            return dict.fromkeys(records, _retry(e))
        except Exception as e:
            return dict.fromkeys(records, e)
        for t in answer.responses:
            for r in t.partition_responses:
                if r.error_code:
                    error = error_for_code(int(r.error_code))(r.error_message or f"Produce to {t.name}-{r.index}")
                    # Kafka retries a partition's NOT_LEADER_OR_FOLLOWER only; any other error is final
                    failures[(t.name, r.index)] = _retry(error) if isinstance(error, NotLeaderOrFollowerError) \
                        else error
        return failures

    async def _prepare(self, job: _Job) -> tuple[str, int, list[Record]]:
        """The range's DLQ records, and the DLQ partition they go to."""
        sp, b = job.sp, job.batch
        await self._auto_create(sp.group_id)
        dlq, partitions = self._dlq_topic(sp.group_id)  # checked again at each attempt: the configs are dynamic
        if job.records is not None:
            return dlq, sp.partition % partitions, job.records
        copy = self.group_config(sp.group_id, DLQ_COPY_RECORD_ENABLE).strip().lower() == "true"
        originals = await self._originals(sp, b.first_offset, b.last_offset) if copy else {}
        now = int(time.time() * 1000)
        message = (CLIENT_REJECT if b.rejected else DELIVERY_COUNT_EXCEEDED).encode()
        fixed = [(HEADER_TOPIC, sp.topic.encode()), (HEADER_PARTITION, str(sp.partition).encode())]
        records = []
        for off in range(b.first_offset, b.last_offset + 1):
            original = originals.get(off)
            headers = [*fixed, (HEADER_OFFSET, str(off).encode()), (HEADER_GROUP, sp.group_id.encode()),
                       (HEADER_DELIVERY_COUNT, str(b.delivery_count).encode()), (HEADER_MESSAGE, message)]
            records.append(Record(timestamp=now, key=original.key if original else None,
                                  value=original.value if original else None, headers=headers))
        job.records = records
        return dlq, sp.partition % partitions, records

    def _count(self, which: int, group_id: str, n: int = 1) -> None:
        if self._metrics is not None:
            self._metrics[which].labels(group_id).inc(n)

    async def _originals(self, sp: SharePartition, first: int, last: int) -> dict[int, Record]:
        """The records ``first``..``last`` of the source partition, as far as the log still holds them."""
        found: dict[int, Record] = {}
        offset = first
        while offset <= last:
            read = await self.rm.fetch_messages(
                FetchParams(-1, 0, 0, COPY_READ_BYTES, FetchIsolation.HIGH_WATERMARK),
                [PartitionFetch(sp.topic, sp.partition, offset, COPY_READ_BYTES)])
            r = read[0]
            data = r.records.read() if hasattr(r.records, "read") else bytes(r.records or b"")
            if r.error_code or not data:
                break
            next_offset = offset
            for pos, h in iter_batches(memoryview(data)):
                next_offset = h.last_offset + 1
                if h.is_control:
                    continue
                for rec in decode_batch(data, pos)[1]:
                    if first <= rec.offset <= last:
                        found[rec.offset] = rec
            if next_offset <= offset:
                break
            offset = next_offset
        return found
