"""KIP-1191's dead-letter queue of share groups (Kafka 4.4's ``ShareGroupDLQStateManager``): the records a share
group gives up on are written to the group's DLQ topic, then archived.

A share-partition with a DLQ topic (the group's ``errors.deadletterqueue.topic.name``) puts a record the consumer
rejected, or one released or timed out past ``group.share.delivery.count.limit``, in state ARCHIVING and hands its
range here (:class:`~tierlog.coordinator.share.share_partition.DlqBatch`). One background task writes the ranges
queued, each as one uncompressed batch for partition ``source partition % DLQ partitions`` of the DLQ topic, and
then archives the records, whether the write succeeded or not (Kafka logs the failure and archives regardless).
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
(``ProduceRequestHandler.recordProduceMetric``, one per range coalesced into a request), the total and failed
counts are per range written, not per Produce request sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.config.group_configs import DLQ_COPY_RECORD_ENABLE, DLQ_TOPIC_NAME
from tierlog.coordinator.share.share_partition import DlqBatch, SharePartition
from tierlog.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    LeaderNotAvailableError,
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


#: how long a write waits for an auto-created DLQ topic to appear in this broker's metadata
AUTO_CREATE_WAIT_S = 30.0
#: the configs Kafka 4.4 creates a DLQ topic with
AUTO_CREATE_CONFIGS = {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"}


class DlqTopicError(Exception):
    """The group's DLQ topic cannot take records (Kafka's ConfigException messages)."""


@dataclass(frozen=True, slots=True)
class _Job:
    sp: SharePartition
    topic_id: uuid.UUID
    batch: DlqBatch


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
        if not pending:
            return
        if self._queue is None:
            self._queue = asyncio.Queue()
        for batch in pending:
            self._queue.put_nowait(_Job(sp, topic_id, batch))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="share-group-dlq")

    async def close(self) -> None:
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
        ``max.message.bytes`` wait for the next request to that leader."""
        outgoing: dict[int | None, list[tuple[_Job, str, int, list[Record]]]] = {}
        for job in jobs:
            self._count(1, job.sp.group_id)  # Kafka's recordDLQProduce: one per range handed to the DLQ manager
            try:
                topic, partition, records = await self._prepare(job)
                leader = self._leader(topic, partition)
            except Exception as e:  # never leave records in ARCHIVING because of a failure here
                self._done(job, 0, e)
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
                failures = await self._send(leader, batches)
                for tp, entries in sending.items():
                    for job, _records in entries:
                        self._done(job, job.batch.last_offset - job.batch.first_offset + 1, failures.get(tp))
                pending = deferred

    def _done(self, job: _Job, records: int, failure: BaseException | None) -> None:
        """The range's DLQ write ended: counted, its records archived whether it was written or not (Kafka logs
        the failure and archives regardless)."""
        if failure is None:
            self._count(0, job.sp.group_id, records)
        else:
            self._count(2, job.sp.group_id)
            if isinstance(failure, (DlqTopicError, KafkaError)):
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
        except Exception as e:
            return dict.fromkeys(records, e)
        for t in answer.responses:
            for r in t.partition_responses:
                if r.error_code:
                    failures[(t.name, r.index)] = error_for_code(int(r.error_code))(
                        r.error_message or f"Produce to {t.name}-{r.index}")
        return failures

    async def _prepare(self, job: _Job) -> tuple[str, int, list[Record]]:
        """The range's DLQ records, and the DLQ partition they go to."""
        sp, b = job.sp, job.batch
        await self._auto_create(sp.group_id)
        dlq, partitions = self._dlq_topic(sp.group_id)
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
