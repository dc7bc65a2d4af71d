"""The topic-based remote log metadata manager: remote segment events in ``__remote_log_metadata``.

Kafka's ``TopicBasedRemoteLogMetadataManager``, with Kafka's record format and metadata-partition
mapping, talking to the broker through tierlog's own client over the broker's listener:

- ``configure`` only reads settings (no network); ``on_broker_ready`` (KIP-1197) starts the
  initialization in the background: describe or create the topic, then start the producer, the
  consumer and the consumer task. Attempts repeat every
  ``remote.log.metadata.initialization.retry.interval.ms`` until
  ``remote.log.metadata.initialization.retry.max.timeout.ms``, both counted from broker ready; a topic
  with another partition count, or a timeout, is fatal: the handler installed with
  ``set_fatal_error_handler`` is called (the broker stops and exits non-zero, as Kafka does since
  KAFKA-19425) instead of running without tiering;
- an event is written to the metadata partition of its user partition and the write returns only
  once this broker's own consumer has applied it (read your writes), within
  ``remote.log.metadata.consume.wait.ms``;
- lookups read the cache; a partition still loading raises REPLICA_NOT_AVAILABLE (9).

Partitions announced before initialization are remembered and followed once it completes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from tierlog.client.admin import Admin, NewTopic
from tierlog.client.consumer import Consumer
from tierlog.client.errors import BrokersUnavailableError, KafkaConnectionError, KafkaTimeoutError
from tierlog.client.producer import Producer
from tierlog.client.types import TopicPartition
from tierlog.config import plugin_setting
from tierlog.config.definitions import RLMM_PREFIX
from tierlog.errors import (
    InvalidConfigError,
    InvalidReplicationFactorError,
    KafkaError,
    ReplicaNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    describe_error,
)
from tierlog.logs import RepeatLimiter
from tierlog.tasks import stop_tasks
from tierlog.tiered.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from tierlog.tiered.rlmm.api import RemoteLogMetadataManager, check_add, check_update
from tierlog.tiered.rlmm.cache import RemotePartitionMetadataStore
from tierlog.tiered.rlmm.consumer_task import METADATA_TOPIC, ConsumerTask
from tierlog.tiered.rlmm.serde import serialize

log = logging.getLogger(__name__)

COMMON = "remote.log.metadata.common.client."
PRODUCER = "remote.log.metadata.producer."
CONSUMER = "remote.log.metadata.consumer."
ADMIN = "remote.log.metadata.admin."
#: How long closing waits for metadata events still unanswered. Without a bound, a broker whose metadata
#: partitions sit in an offline log dir (KAFKA_STORAGE_ERROR, retriable) waited for the producer's whole
#: delivery timeout at shutdown. An event dropped here leaves its segment COPY_SEGMENT_STARTED (or not
#: recorded at all): the next start cleans it up and copies the segment again; local data stays until then.
CLIENT_CLOSE_TIMEOUT_MS = 5_000


class RemoteLogMetadataManagerNotReadyError(KafkaError):
    """A write before the manager finished initializing, or for a partition it does not follow (Kafka's
    IllegalStateException / KafkaException in the same places); retriable: the copy task tries again."""

    retriable = True


class RemoteLogMetadataManagerFailedError(KafkaError):
    """The manager can no longer work: initialization failed for good or it was closed; not retriable."""


class _PermanentInitError(Exception):
    """Initialization can never succeed (no retry)."""


def _int(configs: Mapping[str, str], key: str, default: int, minimum: int | None = None) -> int:
    value = configs.get(key)
    if value is None or str(value).strip() == "":
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"Invalid value {value!r} for configuration {key}: Not a number") from None
    if minimum is not None and number < minimum:
        raise InvalidConfigError(f"Invalid value {number} for configuration {key}: Value must be at least {minimum}")
    return number


def init_failure(e: BaseException | None) -> str:
    """Why an initialization attempt failed, as an operator reads it: a broker's error by name and code
    (``INVALID_REPLICATION_FACTOR (38): ...``), with the setting to change where one is to blame."""
    if e is None:
        return "none"
    if isinstance(e, InvalidReplicationFactorError):
        return (f"cannot create {METADATA_TOPIC}: {describe_error(e)}; set "
                f"{RLMM_PREFIX}remote.log.metadata.topic.replication.factor to at most the brokers alive, or "
                f"start more brokers")
    if isinstance(e, (KafkaConnectionError, BrokersUnavailableError, OSError, asyncio.TimeoutError)):
        # The broker's own listener did not answer.
        return (f"{describe_error(e) if isinstance(e, KafkaError) else type(e).__name__}"
                f"{'' if isinstance(e, KafkaError) else f': {e}' if str(e) else ''}; check that the "
                f"listener named by remote.log.metadata.manager.listener.name is reachable from this host")
    if isinstance(e, KafkaError):
        return describe_error(e)
    return f"{type(e).__name__}: {e}"


def _prefixed(configs: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in configs.items() if k.startswith(prefix)}


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    def __init__(self) -> None:
        self.configs: dict[str, str] = {}
        self.broker_id = -1
        self.log_dir: str | None = None
        # Set by configure, from the config table's rlmm.config.* entries.
        self.num_partitions = self.replication_factor = self.retention_ms = self.min_isr = 0
        self.consume_wait_s = self.init_timeout_s = 0.0
        self.init_interval_s = 0.1
        self.snapshot_interval_s = 60.0
        self.store = RemotePartitionMetadataStore()
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.consumer_task: ConsumerTask | None = None
        self.initialized = False
        self.init_failure: str | None = None  # why initialization failed for good
        self.closing = False
        self._configured = False
        self._init_task: asyncio.Task | None = None
        self._pending: dict[TopicIdPartition, None] = {}  # followed before initialization, in order
        self._fatal_handler: Callable[[str], None] | None = None
        self.ready_at: float | None = None  # monotonic time of on_broker_ready

    # --------------------------------------------------------------------------------- configuration

    def configure(self, configs: Mapping[str, str]) -> None:
        """Read the settings (Kafka's keys, ``rlmm.config.`` stripped); never touches the network."""
        if self._configured:
            return  # Kafka ignores a second configure
        c = {str(k): str(v) for k, v in configs.items()}
        if not c.get("log.dir"):
            raise InvalidConfigError("log.dir is required by the topic-based remote log metadata manager")
        if not c.get(COMMON + "bootstrap.servers"):
            raise InvalidConfigError(f"{COMMON}bootstrap.servers is required (the broker sets it to its listener)")
        def setting(name: str):  # defaults and checks from the config table (rlmm.config.*)
            return plugin_setting(c, RLMM_PREFIX, name)
        self.num_partitions = setting("remote.log.metadata.topic.num.partitions")
        self.replication_factor = setting("remote.log.metadata.topic.replication.factor")
        self.retention_ms = setting("remote.log.metadata.topic.retention.ms")
        # KIP-1235's default of 2, never above the replication factor: a single broker could not write.
        self.min_isr = min(setting("remote.log.metadata.topic.min.isr"), self.replication_factor)
        self.consume_wait_s = setting("remote.log.metadata.consume.wait.ms") / 1000
        self.init_timeout_s = setting("remote.log.metadata.initialization.retry.max.timeout.ms") / 1000
        self.init_interval_s = setting("remote.log.metadata.initialization.retry.interval.ms") / 1000
        self.snapshot_interval_s = setting("remote.log.metadata.snapshot.interval.ms") / 1000
        self.configs = c
        self.log_dir = c["log.dir"]
        self.broker_id = _int(c, "broker.id", -1)
        self._configured = True

    def set_fatal_error_handler(self, handler: Callable[[str], None]) -> None:
        """Install ``handler(reason)``, called once (on the event loop) when initialization fails for
        good: the metadata topic has another partition count, a client setting is invalid, or
        ``remote.log.metadata.initialization.retry.max.timeout.ms`` passed since ``on_broker_ready``.
        The broker installs its ``fail``: it logs the reason and exits non-zero (Kafka's ``Exit.exit(1)``,
        KAFKA-19425). Without a handler the failure is only logged, and writes raise
        RemoteLogMetadataManagerFailedError with the reason."""
        self._fatal_handler = handler

    def _client_config(self, role_prefix: str, client_id: str) -> dict[str, str]:
        cfg = {**_prefixed(self.configs, COMMON), **_prefixed(self.configs, role_prefix)}
        cfg.setdefault("client.id", client_id)
        return cfg

    def _client_id(self, role: str) -> str:
        return f"__remote_log_metadata_client_{self.broker_id}_{role}"

    # ------------------------------------------------------------------------------ initialization

    async def on_broker_ready(self) -> None:
        """KIP-1197: start initializing now that the broker serves requests; returns at once."""
        if not self._configured:
            raise RuntimeError("on_broker_ready before configure")
        if self._init_task is not None or self.closing:
            return
        self.ready_at = time.monotonic()
        log.info("Broker is ready for requests, now initializing topic-based RLMM resources")
        self._init_task = asyncio.get_running_loop().create_task(self._initialize(), name="rlmm-initialize")

    async def _initialize(self) -> None:
        try:
            reason = await self._initialize_until_deadline()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug here must still stop the broker, not leave it untiered
            log.exception("Unexpected error initializing the topic-based remote log metadata manager")
            reason = f"unexpected error: {type(e).__name__}: {e}"
        if reason is not None and not self.closing:
            self._fatal(reason)

    async def _initialize_until_deadline(self) -> str | None:
        """Try until initialized (None) or the budget is spent; returns why it failed for good. A failing
        attempt is said once, with its reason and the setting to change; the retries every
        ``remote.log.metadata.initialization.retry.interval.ms`` are counted, not logged each."""
        deadline = self.ready_at + self.init_timeout_s
        last_error: Exception | None = None
        retries = RepeatLimiter(log)
        try:
            while not self.closing:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return (f"the topic-based remote log metadata manager could not initialize within "
                            f"{self.init_timeout_s * 1000:.0f} ms of broker ready "
                            f"({RLMM_PREFIX}remote.log.metadata.initialization.retry.max.timeout.ms); last error: "
                            f"{init_failure(last_error)}")
                try:
                    await asyncio.wait_for(self._attempt(remaining), remaining)
                    return None
                except (_PermanentInitError, InvalidConfigError) as e:
                    return str(e)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - retried until the deadline
                    # A timeout when the budget ran out during the attempt is the deadline, not a new
                    # reason: the earlier error stays the one said and the one the broker stops with.
                    cut_short = (last_error is not None and isinstance(e, (KafkaTimeoutError, asyncio.TimeoutError))
                                 and deadline - time.monotonic() < self.init_interval_s)
                    if not cut_short:
                        last_error = e
                        retries.warning(
                            type(e), "Cannot initialize the topic-based remote log metadata manager yet: %s; "
                            "retrying every %.0f ms for up to %.0f ms after broker ready (%s), then the broker "
                            "stops", init_failure(e), self.init_interval_s * 1000, self.init_timeout_s * 1000,
                            f"{RLMM_PREFIX}remote.log.metadata.initialization.retry.max.timeout.ms")
                    await self._close_clients()
                await asyncio.sleep(min(self.init_interval_s, max(0.0, deadline - time.monotonic())))
            return None
        finally:
            retries.flush()  # the count of repeats not reported yet

    async def _attempt(self, budget_s: float) -> None:
        """One attempt: the topic, then the clients and the consumer task."""
        timeout_ms = max(1, int(budget_s * 1000))
        async with Admin(self._client_config(ADMIN, self._client_id("admin"))) as admin:
            await self._ensure_topic(admin, timeout_ms)
        self.producer = Producer({**self._client_config(PRODUCER, self._client_id("producer")),
                                  "acks": "all", "enable.idempotence": "true", "linger.ms": "0"})
        # No group: partitions are assigned by hand and read from the beginning (or a snapshot).
        self.consumer = Consumer({**self._client_config(CONSUMER, self._client_id("consumer")),
                                  "enable.auto.commit": "false", "auto.offset.reset": "earliest",
                                  "exclude.internal.topics": "false"})
        await self.producer.start()
        await self.consumer.start()
        if self.closing:
            return
        self.consumer_task = self._new_consumer_task()
        self.consumer_task.start()
        self.initialized = True
        if self._pending:
            self.consumer_task.add_assignments(list(self._pending))
            self._pending.clear()
        log.info("Initialized topic-based RLMM resources in %.0f ms after broker ready",
                 (time.monotonic() - self.ready_at) * 1000)

    def _new_consumer_task(self) -> ConsumerTask:
        """The reader of ``__remote_log_metadata`` (a subclass may wrap its consumer, e.g. to hold the
        catch-up in a test)."""
        return ConsumerTask(self.consumer, self.store, self.num_partitions, self.log_dir, self.snapshot_interval_s)

    async def _ensure_topic(self, admin: Admin, timeout_ms: int) -> None:
        try:
            described = await admin.describe_topics([METADATA_TOPIC], timeout_ms=timeout_ms)
        except UnknownTopicOrPartitionError:
            configs = {"cleanup.policy": "delete", "remote.storage.enable": "false",
                       "retention.ms": str(self.retention_ms), "min.insync.replicas": str(self.min_isr)}
            try:
                await admin.create_topics([NewTopic(METADATA_TOPIC, self.num_partitions, self.replication_factor,
                                                    configs)], timeout_ms=timeout_ms)
                log.info("Created topic %s with %d partitions", METADATA_TOPIC, self.num_partitions)
            except TopicAlreadyExistsError:
                pass  # another broker won the race
            described = await admin.describe_topics([METADATA_TOPIC], timeout_ms=timeout_ms)
        count = len(described[METADATA_TOPIC].partitions)
        if count != self.num_partitions:
            raise _PermanentInitError(
                f"{METADATA_TOPIC} has {count} partitions but remote.log.metadata.topic.num.partitions is "
                f"{self.num_partitions}; the partition count of the metadata topic can never change")

    async def _close_clients(self) -> None:
        for client in (self.producer, self.consumer):
            if client is not None:
                try:
                    await client.close(CLIENT_CLOSE_TIMEOUT_MS)
                except Exception as e:  # noqa: BLE001 - closing anyway
                    log.debug("Closing a metadata client: %r", e)
        self.producer = self.consumer = None

    def _fatal(self, reason: str) -> None:
        self.init_failure = reason
        if self._fatal_handler is None:  # else the handler says it (the broker logs why it stops)
            log.error("Stopping the server as it failed to initialize topic-based RLMM resources: %s", reason)
        else:
            try:
                self._fatal_handler(reason)
            except Exception:  # noqa: BLE001 - the reason is logged above either way
                log.exception("The fatal error handler failed")

    # -------------------------------------------------------------------------------------- writes

    def _check_writable(self, tp: TopicIdPartition) -> ConsumerTask:
        if self.init_failure is not None:
            raise RemoteLogMetadataManagerFailedError(
                f"the topic-based remote log metadata manager failed to initialize: {self.init_failure}")
        if self.closing:
            raise RemoteLogMetadataManagerFailedError("the topic-based remote log metadata manager is closed")
        task = self.consumer_task
        if not self.initialized or task is None:
            raise RemoteLogMetadataManagerNotReadyError(
                f"the topic-based remote log metadata manager is still initializing "
                f"({'started' if self.ready_at is not None else 'waiting for broker ready'})")
        task.check_running()
        if not task.is_followed(tp):
            raise RemoteLogMetadataManagerNotReadyError(f"{tp} is not followed by this broker's metadata manager")
        return task

    async def _store(self, tp: TopicIdPartition, event) -> None:
        task = self._check_writable(tp)
        mp = task.metadata_partition(tp)
        meta = await (await self.producer.send(METADATA_TOPIC, serialize(event), partition=mp))
        await task.wait_until_consumed(mp, meta.offset, self.consume_wait_s)

    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        check_add(md)
        await self._store(md.topic_id_partition, md)

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        check_update(update)
        await self._store(update.topic_id_partition, update)

    async def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        await self._store(md.topic_id_partition, md)

    # ------------------------------------------------------------------------------------- lookups

    def _loading(self, tp: TopicIdPartition) -> None:
        """A partition followed but whose metadata is not loaded yet (the manager still initializing, or
        its assignment not yet picked up) answers REPLICA_NOT_AVAILABLE, as one still catching up does."""
        if not self.initialized and tp in self._pending or (
                self.consumer_task is not None and self.consumer_task.is_pending(tp)):
            raise ReplicaNotAvailableError(f"Remote log metadata of {tp} is still loading")

    def remote_log_segment_metadata(self, tp, leader_epoch, offset):
        self._loading(tp)
        return self.store.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp, leader_epoch):
        self._loading(tp)
        return self.store.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(self, tp, leader_epoch=None):
        self._loading(tp)
        return self.store.list_remote_log_segments(tp, leader_epoch)

    async def catch_up(self, tp: TopicIdPartition) -> None:
        """Read ``tp``'s metadata partition up to its current end. Readiness only says the partition was
        read up to where it ended when it was assigned; a broker that followed the partition and now leads
        it may not have read the previous leader's last events yet, and would upload those segments again.
        Bounded by ``remote.log.metadata.consume.wait.ms``, as a write's read-back is."""
        task = self._check_writable(tp)
        mp = task.metadata_partition(tp)
        where = TopicPartition(METADATA_TOPIC, mp)
        end = (await self.consumer.end_offsets([where], timeout_ms=self.consume_wait_s * 1000))[where]
        if end > 0:
            await task.wait_until_consumed(mp, end - 1, self.consume_wait_s)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        """Loaded, and the reader still running: after a non-retriable consumer error nothing is ready, so
        the remote log manager's tasks stop instead of acting on metadata that no longer moves."""
        task = self.consumer_task
        return (self.initialized and not self.closing and task is not None and task.failure is None
                and self.store.is_initialized(tp))

    def not_ready_reason(self) -> str | None:
        if self.init_failure is not None:
            return f"the topic-based remote log metadata manager failed to initialize: {self.init_failure}"
        if self.closing:
            return "the topic-based remote log metadata manager is closed"
        if not self.initialized or self.consumer_task is None:
            return (f"the topic-based remote log metadata manager is still initializing "
                    f"({'started' if self.ready_at is not None else 'waiting for broker ready'})")
        if self.consumer_task.failure is not None:
            return f"the {METADATA_TOPIC} reader stopped on a non-retriable error; restart the broker"
        return None

    # ------------------------------------------------------------------------------- partitions

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        tps = [*leaders, *followers]
        if not self.initialized:
            for tp in tps:
                self._pending[tp] = None
            return
        self.consumer_task.add_assignments(tps)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        tps = list(partitions)
        for tp in tps:
            self._pending.pop(tp, None)
        if self.initialized:
            self.consumer_task.remove_assignments(tps)

    # ------------------------------------------------------------------------------------ closing

    async def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        await stop_tasks(self._init_task)
        if self.consumer_task is not None:
            await self.consumer_task.close()
        await self._close_clients()
        self.store.close()
