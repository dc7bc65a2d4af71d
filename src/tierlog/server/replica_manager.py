"""The partitions this broker hosts, and every read and write of their data (Kafka's ``ReplicaManager``).

It keeps one :class:`~tierlog.server.partition.Partition` per local log, created and removed from the
controller's metadata deltas, and answers, for the request handlers and the group coordinator:

- appends (``append_records``), acks=all included;
- fetches (``fetch_messages``): reads of the local log and, below the local log start offset, of the
  remote tier (KIP-405; the remote fetch quota of KIP-956, ``remote.fetch.max.wait.ms`` and the response
  byte budget are applied here, :mod:`tierlog.server.remote.remote_fetch`), with long polling until
  ``min_bytes`` are available or ``max_wait_ms`` has passed;
- offsets (``fetch_offsets``): ListOffsets by timestamp over both tiers and the special timestamps;
  ``last_offset_for_leader_epoch`` and ``delete_records``;
- the broker side of a tiered storage disablement asked for by the controller (KIP-950).

Each partition's storage is read once per answer: a partition whose offset is below its local log start
goes to the remote tier without a local read, and a long-polling fetch re-reads only the partitions
whose logs changed while it waited. A fetch naming :data:`~tierlog.server.fetch_types.BIG_FETCH` partitions
or more (a 16 MB request names some 500,000) is read and waited on a slice at a time, yielding to the
event loop every few ms, with the same answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tierlog.cluster import (
    COORDINATOR_TOPICS,
    INTERNAL_TOPICS,
    Controller,
    DisableRemoteTopicRequest,
    DisableRemoteTopicResponse,
    MetadataDelta,
    MetadataImage,
    TopicImage,
)
from tierlog.config import BrokerConfig
from tierlog.config.definitions import RACK_AWARE_REPLICA_SELECTOR
from tierlog.coordinator import OFFSETS_TOPIC
from tierlog.errors import (
    NO_ERROR,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptMessageError,
    InvalidProducerIdMappingError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    MessageTooLargeError,
    NetworkException,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordListTooLargeError,
    RequestTimedOutError,
    StaleControllerEpochError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)
from tierlog.protocol import RequestTiming
from tierlog.protocol.offload import Pacer, free_later
from tierlog.records import transactional_producer
from tierlog.records.validation import record_errors_of
from tierlog.server.fetch_types import (
    BIG_FETCH,
    FetchIsolation,
    FetchParams,
    FetchPartitionData,
    OffsetLookup,
    OffsetLookupResult,
    PartitionFetch,
)
from tierlog.server.http.broker_metrics import BrokerTopicMetrics, IsrChangeMetrics
from tierlog.server.partition import FollowerState, Partition
from tierlog.server.remote.remote_fetch import RemoteRead, read_remote
from tierlog.storage import LATEST_TIMESTAMP, FetchDataInfo, LogManager
from tierlog.storage.producer_state import SENTINEL
from tierlog.tiered.remote_log_manager import RemoteLogManager

if TYPE_CHECKING:
    from tierlog.server.quotas.replication_quota import ReplicationQuotaManager
    from tierlog.server.replication.alter_partition import AlterPartitionManager
    from tierlog.server.replication.builder import Replication
    from tierlog.server.replication.replica_fetcher import ReplicaFetcherManager
    from tierlog.server.transactions.add_partitions_to_txn_manager import AddPartitionsToTxnManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)

# KIP-890 part 1 on the produce path (Kafka's handleProduceAppend): a coordinator that cannot answer yet becomes
# an error every producer retries without a metadata refresh.
_VERIFICATION_RETRIABLE = frozenset(e.code for e in (
    CoordinatorLoadInProgressError, CoordinatorNotAvailableError, NotCoordinatorError, ConcurrentTransactionsError,
    NetworkException))
_VERIFICATION_MESSAGES = {
    NotEnoughReplicasError.code: "Unable to verify the partition has been added to the transaction",
    InvalidTxnStateError.code: "Partition was not added to the transaction"}
# Errors Kafka answers with log_start_offset -1 (ReplicaManager.appendToLocalLog's first catch);
# every other append error carries the partition's log start offset.
NO_LOG_START_OFFSET_ERRORS = frozenset(e.code for e in (
    UnknownTopicOrPartitionError, NotLeaderOrFollowerError, MessageTooLargeError, InvalidTopicError,
    RecordListTooLargeError, CorruptMessageError, KafkaStorageError, InvalidRequiredAcksError,
    UnsupportedCompressionTypeError))
# Expected while metadata propagates: not worth a debug line each.
_PROPAGATING = frozenset((UnknownTopicOrPartitionError.code, NotLeaderOrFollowerError.code))

#: Partitions a big fetch reads, or registers for its wait, between two looks at the clock (:class:`Pacer`).
FETCH_SLICE = 256
#: A metadata delta creating more partitions hosted here than this opens their logs in the background, a slice
#: of BACKGROUND_SLICE_S at a time, so one CreateTopics of thousands of partitions does not hold the loop (some
#: 2 ms of file creation each). Meanwhile those partitions answer NOT_LEADER_OR_FOLLOWER, retriable, as a Kafka
#: broker does before it applies the delta. Deleted topics' logs are closed and renamed the same way.
INLINE_LOG_CHANGES = 100
BACKGROUND_SLICE_S = 0.01


class ReplicaManager:
    def __init__(self, node_id: int, log_manager: LogManager, controller: Controller,
                 remote_log_manager: RemoteLogManager | None, config: Callable[[], BrokerConfig],
                 topic_metrics: BrokerTopicMetrics | None = None, replication: Replication | None = None):
        """``config`` returns the broker's current configuration, dynamic changes included; ``topic_metrics``
        counts bytes and messages in; ``replication`` is a cluster member's (None on a single node)."""
        self.node_id = node_id
        self.log_manager = log_manager
        self.controller = controller
        self.remote_log_manager = remote_log_manager
        self._config = config
        self.topic_metrics = topic_metrics
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        # topic_name's map of names by id, and the metadata image it was made from
        self._names_by_id: dict[uuid.UUID, str] = {}
        self._names_image = None
        # Replication, in a cluster: the fetchers of the partitions followed here, and the channel of ISR
        # changes to the controller.
        self.fetchers: ReplicaFetcherManager | None = replication.fetchers if replication else None
        self.alter_partition: AlterPartitionManager | None = replication.alter_partition if replication else None
        # leader.replication.throttled.*
        self.leader_quota: ReplicationQuotaManager | None = replication.leader_quota if replication else None
        self._isr_expiration: asyncio.Task | None = None
        self.isr_metrics: IsrChangeMetrics | None = replication.isr_metrics if replication else None
        # Partitions of big deltas whose logs are still to open, in order (INLINE_LOG_CHANGES), and the task
        # opening them and deleting the logs of deleted topics.
        self._pending_creations: dict[tuple[str, int], uuid.UUID] = {}
        self._background_work: asyncio.Task | None = None
        # KIP-890: the questions to the transaction coordinators, and transaction.partition.verification.enable
        # (dynamic); given by attach_transaction_verification (the manager is built with this replica manager).
        self.add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
        self.transaction_verification_enabled: Callable[[], bool] = lambda: True

    def attach_transaction_verification(self, manager: AddPartitionsToTxnManager, enabled: Callable[[], bool]) -> None:
        """KIP-890 part 1's verification of transactional appends: ``manager`` asks the transaction coordinators,
        ``enabled`` is transaction.partition.verification.enable (dynamic). The one collaborator not given to the
        constructor: the manager (and the transaction coordinator it asks) are built with this replica manager, a
        construction cycle the composition root breaks with this call, once, before any request is served."""
        self.add_partitions_to_txn_manager = manager
        self.transaction_verification_enabled = enabled

    # ------------------------------------------------------------------ metadata

    def _hosts(self, topic: TopicImage, p: int) -> bool:
        """Whether a replica of ``topic``-``p`` lives on this broker (on a single node: every partition)."""
        return self.node_id in topic.partitions[p].replicas

    def load(self, image: MetadataImage) -> None:
        """Open a partition for every partition of the image hosted here; delete logs of topics it no longer
        has (or partitions no longer assigned to this broker)."""
        known = set()
        for topic in image.topics.values():
            for p in topic.partitions:
                if self._hosts(topic, p):
                    self._add(topic, p)
                    known.add((topic.name, p))
        for tp in list(self.log_manager.logs):
            if tp not in known:
                log.warning("Deleting log %s-%d: its partition is not in the cluster metadata (or no longer "
                            "assigned to this broker)", *tp)
                self.log_manager.delete_log(*tp)
        self._tier_partitions(self.partitions.values())

    def leads(self, partition: Partition) -> bool:
        return partition.leader_id == self.node_id

    def _tier_partitions(self, partitions: Iterable[Partition]) -> None:
        """Hand the partitions whose logs have remote storage in effect to the remote log manager: those this
        broker leads get copy and expiration tasks, those it follows a follower task."""
        rlm = self.remote_log_manager
        if rlm is None:
            return
        tiered = [p for p in partitions if p.remote_storage_enabled and p.log.offline is None]
        rlm.on_leadership_change([p for p in tiered if self.leads(p)])
        rlm.on_follow([p for p in tiered if not self.leads(p) and p.leader_id >= 0])

    def _add(self, topic: TopicImage, p: int, is_new: bool = False) -> None:
        """``is_new``: created since start-up (a metadata delta), so it cannot be in a log dir that failed."""
        lg = self.log_manager.get_or_create_log(topic.name, p, self.controller.log_config(topic.name),
                                                topic.topic_id, is_new=is_new)
        point = topic.restored.get(p)
        if point is not None and lg.offline is None:  # a topic rebuilt from the remote tier
            try:
                lg.start_at_restore_point(point.log_start_offset, point.log_end_offset, point.leader_epochs)
            except KafkaStorageError as e:
                log.error("Cannot position %s-%d at its restore point: %s", topic.name, p, e)
        meta = topic.partitions[p]
        partition = Partition(topic.name, p, topic.topic_id, lg, meta.leader_epoch, meta.leader,
                              tuple(meta.replicas), tuple(meta.isr), meta.partition_epoch)
        self.partitions[(topic.name, p)] = partition
        if self.leads(partition):
            self._make_leader(partition)
        else:
            self._make_follower(partition)

    def _make_leader(self, partition: Partition) -> None:
        """Begin a leadership term (Kafka's makeLeader): stop fetching, mark the new epoch's start in the
        leader-epoch cache (OffsetsForLeaderEpoch answers from it at once), count the followers as unknown
        and move the high watermark as far as the ISR allows (with the leader alone in the ISR: the log end,
        so records acknowledged before an unclean stop are readable again)."""
        if self.fetchers is not None:
            self.fetchers.remove([partition])
        lg = partition.log
        if lg.offline is None and partition.leader_epoch > lg.leader_epoch_cache.latest_epoch():
            # not synced on the loop: thousands of partitions change leaders at once when a broker fails
            lg.leader_epoch_cache.assign(partition.leader_epoch, lg.log_end_offset, sync=False)
        partition.become_leader(_now_ms())
        partition.maybe_increment_high_watermark()

    def _make_follower(self, partition: Partition) -> None:
        """Follow the partition's leader (Kafka's makeFollower): the fetcher first truncates the log where it
        diverges from the leader's (OffsetsForLeaderEpoch), then fetches. Without a leader, nothing is fetched."""
        partition.followers = {}
        partition.pending_isr = None
        if self.fetchers is None or partition.log.offline is not None:
            return
        if partition.leader_id >= 0:
            self.fetchers.add(partition)
            if self.remote_log_manager is not None and partition.remote_storage_enabled:
                self.remote_log_manager.on_follow([partition])
        else:
            self.fetchers.remove([partition])

    def _leadership_changed(self, topic: TopicImage) -> None:
        """A pushed image moved leaders, epochs, ISRs or replica sets of ``topic`` (a cluster): follow it."""
        rlm = self.remote_log_manager
        gained, lost, removed = [], [], []
        for p, meta in topic.partitions.items():
            partition = self.partitions.get((topic.name, p))
            if partition is None:
                if (topic.name, p) in self._pending_creations:
                    continue  # opened in the background, with the image of that moment
                if self._hosts(topic, p):
                    self._add(topic, p, is_new=True)
                    if self.leads(self.partitions[(topic.name, p)]):
                        gained.append(self.partitions[(topic.name, p)])
                continue
            if not self._hosts(topic, p):  # no longer assigned here
                self.partitions.pop((topic.name, p))
                if self.fetchers is not None:
                    self.fetchers.remove([partition])
                removed.append(partition)
                self.log_manager.delete_log(topic.name, p)
                self._wake((topic.name, p))
                continue
            if meta.leader_epoch < partition.leader_epoch:
                continue  # never back to an older leadership term
            new_term = meta.leader_epoch > partition.leader_epoch or meta.leader != partition.leader_id
            if not new_term and meta.partition_epoch < partition.partition_epoch:
                continue  # an ISR older than one the controller already answered this leader with
            if not new_term and partition.pending_isr is not None and meta.partition_epoch == partition.partition_epoch:
                # An ISR change is in flight and this push predates the controller's answer: keep the maximal
                # ISR (Kafka's PendingExpandIsr/PendingShrinkIsr end only with the answer or a newer partition
                # epoch). Dropping it let the high watermark pass a replica being added, which, once in the
                # ISR, could be elected without records acknowledged meanwhile (a loss seen in a fault run).
                continue
            was_leader = self.leads(partition)
            partition.leader_id, partition.leader_epoch = meta.leader, meta.leader_epoch
            partition.replicas, partition.isr = tuple(meta.replicas), tuple(meta.isr)
            partition.partition_epoch = meta.partition_epoch
            if self.leads(partition):
                if new_term:
                    self._make_leader(partition)
                    if not was_leader:
                        gained.append(partition)
                        log.info("Leading %s from leader epoch %d, ISR %s", partition, meta.leader_epoch,
                                 list(meta.isr))
                else:
                    partition.pending_isr = None
                    for r in partition.replicas:  # a replica added by a reassignment: not fetched yet
                        if r != self.node_id:
                            partition.followers.setdefault(r, FollowerState())
                    partition.maybe_increment_high_watermark()
            else:
                if was_leader:
                    lost.append(partition)
                    log.info("No longer leading %s (leader now %d, epoch %d)", partition, meta.leader,
                             meta.leader_epoch)
                if new_term or was_leader:
                    self._make_follower(partition)
            self._wake((topic.name, p))
        self._tier_partitions(gained)
        if rlm is not None and any(p.remote_storage_enabled for p in lost):
            # Copy and expiration stop; the replica follows the new leader's uploads (on_follow above).
            rlm.spawn(rlm.stop_tasks([p for p in lost if p.remote_storage_enabled], stop_following=False),
                      f"resign-{topic.name}")
        if rlm is not None and any(p.remote_storage_enabled for p in removed):
            rlm.spawn(rlm.stop_tasks([p for p in removed if p.remote_storage_enabled]), f"unassign-{topic.name}")

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        lm = self.log_manager
        rlm = self.remote_log_manager
        created = [(topic, p) for topic in delta.created for p in topic.partitions if self._hosts(topic, p)]
        created += [(topic, p) for topic, added in delta.partitions_added for p in added if self._hosts(topic, p)]
        if len(created) > INLINE_LOG_CHANGES or self._pending_creations:
            self._create_in_background(created)
        else:
            for topic, p in created:
                self._add(topic, p, is_new=True)
            for name in dict.fromkeys(topic.name for topic, _ in created):
                self._tier_partitions(self._topic_partitions(name))
        for topic in delta.partitions_changed:
            self._leadership_changed(topic)
        for topic in delta.deleted:
            gone = [self.partitions.pop((topic.name, p)) for p in topic.partitions
                    if (topic.name, p) in self.partitions]
            if self.fetchers is not None:
                self.fetchers.remove(gone)
            if rlm is not None and any(p.remote_storage_enabled for p in gone):
                # The leader deletes the remote data of a deleted topic (KIP-405), in the background.
                rlm.spawn(rlm.stop_partitions(gone, delete_remote=True), f"delete-remote-{topic.name}")
            big = len(gone) > INLINE_LOG_CHANGES
            for p in gone:
                if big:
                    lm.retire_log(topic.name, p.index)  # its files go a slice at a time
                else:
                    lm.delete_log(topic.name, p.index)
                self._wake((topic.name, p.index))
            if big:
                self._start_background_work()
            if self.topic_metrics is not None:
                self.topic_metrics.forget(topic.name)
        for topic in delta.configs_changed:
            config = self.controller.log_config(topic.name)
            partitions = self._topic_partitions(topic.name)
            was_tiered = any(p.remote_storage_enabled for p in partitions)
            lm.update_config(topic.name, config)
            if rlm is None:
                continue
            if config.remote_storage_enable:
                self._tier_partitions(partitions)  # newly tiered topics start copying from the log start
                for p in partitions:
                    rlm.on_config_change(p)
            elif was_tiered:
                # A delete disablement (KIP-950): remote reads are fenced at once, the log now starts at
                # its local start; the controller's DisableRemoteTopic then deletes the remote data.
                for p in partitions:
                    p.log.increment_log_start_offset_from_remote(p.log.local_log_start_offset)
                rlm.spawn(rlm.stop_tasks(partitions), f"stop-remote-{topic.name}")

    def _create_in_background(self, created: list[tuple[TopicImage, int]]) -> None:
        """Queue new partitions whose logs open on the loop a slice at a time (INLINE_LOG_CHANGES), after the
        ones queued before; without a running loop (a tool opening logs) they open now."""
        for topic, p in created:
            self._pending_creations[(topic.name, p)] = topic.topic_id
        self._start_background_work()

    def _start_background_work(self) -> None:
        """Delete retired logs and open queued ones on the loop, a slice of BACKGROUND_SLICE_S at a time;
        without a running loop (a tool opening logs), all of it now."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.log_manager.delete_retired()
            self._open_pending(deadline=None)
            return
        if self._background_work is None or self._background_work.done():
            self._background_work = loop.create_task(self._run_background_work(), name="replica-manager-logs")

    async def _run_background_work(self) -> None:
        while self.log_manager.delete_retired(time.monotonic() + BACKGROUND_SLICE_S):
            await asyncio.sleep(0)
        while self._pending_creations:
            self._open_pending(deadline=time.monotonic() + BACKGROUND_SLICE_S)
            await asyncio.sleep(0)

    def _open_pending(self, deadline: float | None) -> None:
        """Open queued partitions until ``deadline``, each with the image as it is now: a topic deleted (or
        re-created under a new id) meanwhile, or a partition moved away, is skipped; its tiering starts with it."""
        opened = []
        image = self.controller.image
        while self._pending_creations and (deadline is None or time.monotonic() < deadline):
            (name, p), topic_id = next(iter(self._pending_creations.items()))
            del self._pending_creations[(name, p)]
            topic = image.topics.get(name)
            if (topic is None or topic.topic_id != topic_id or p not in topic.partitions
                    or not self._hosts(topic, p) or (name, p) in self.partitions):
                continue
            self._add(topic, p, is_new=True)
            opened.append(self.partitions[(name, p)])
            self._wake((name, p))
        self._tier_partitions(opened)
        if not self._pending_creations:
            log.info("Opened the logs of the partitions created by a large metadata change")

    def handle_log_dir_failure(self, log_dir: str) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure on one node, called by the log dir failure channel after
        the log manager closed the dir's logs (each now refuses reads and writes with KAFKA_STORAGE_ERROR):
        fetches waiting on those partitions answer at once, followers stop fetching them, and tiered storage
        stops copying them. They answer KAFKA_STORAGE_ERROR; in a cluster the controller, told by the broker,
        moves their leaderships to other in-sync replicas and takes them out of their ISRs (on a single node no
        other replica could take them)."""
        offline = [p for p in self.partitions.values() if p.log.parent_dir == log_dir]
        if self.fetchers is not None:
            self.fetchers.remove(offline)
        for p in offline:
            self._wake((p.topic, p.index))
        rlm = self.remote_log_manager
        if rlm is not None:
            rlm.on_log_dir_failure([p for p in offline if p.remote_storage_enabled])

    def offline_replicas(self) -> list[tuple[str, int]]:
        """The partitions hosted here whose log dir failed (Kafka's HostedPartition.Offline)."""
        return [(p.topic, p.index) for p in self.partitions.values() if p.log.offline is not None]

    def _topic_partitions(self, topic: str) -> list[Partition]:
        return [p for (t, _), p in self.partitions.items() if t == topic]

    def shutdown(self) -> None:
        if self._isr_expiration is not None:
            self._isr_expiration.cancel()
        if self._background_work is not None:
            self._background_work.cancel()
        for waiters in self._waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    # ------------------------------------------------------------------ lookup

    def get_partition(self, topic: str, partition: int) -> Partition:
        """The partition, or the error a client gets for it (Kafka's getPartitionOrError)."""
        p = self.partitions.get((topic, partition))
        if p is None:
            t = self.controller.image.topics.get(topic)
            if t is not None and partition in t.partitions:
                raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{partition}")
        if p.log.offline is not None:  # Kafka's HostedPartition.Offline: its log dir failed
            raise p.log.offline_error()
        if p.leader_id != self.node_id:
            raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition} (leader: {p.leader_id})")
        return p

    def leader_with_epoch(self, topic: str, partition: int, current_leader_epoch: int) -> Partition:
        """The partition led here whose leader epoch is ``current_leader_epoch`` (-1: any), checked in Kafka's
        order (getLocalLog): a replica hosted here answers a stale or future epoch with FENCED_LEADER_EPOCH or
        UNKNOWN_LEADER_EPOCH before NOT_LEADER_OR_FOLLOWER, even where it follows."""
        hosted = self.partitions.get((topic, partition))
        if hosted is not None and hosted.log.offline is None:
            hosted.check_leader_epoch(current_leader_epoch)
        p = self.get_partition(topic, partition)
        p.check_leader_epoch(current_leader_epoch)
        return p

    def replica_with_epoch(self, topic: str, partition: int, current_leader_epoch: int) -> Partition:
        """A replica hosted here, led here or followed, whose leader epoch is ``current_leader_epoch`` (-1: any):
        what a ListOffsets from a debugging tool may read (Kafka's fetchOnlyFromLeader off)."""
        hosted = self.partitions.get((topic, partition))
        if hosted is None or hosted.log.offline is not None:
            return self.leader_with_epoch(topic, partition, current_leader_epoch)  # its error
        hosted.check_leader_epoch(current_leader_epoch)
        return hosted

    def log_start_offset_or_unknown(self, topic: str, partition: int) -> int:
        p = self.partitions.get((topic, partition))
        return p.log.log_start_offset if p is not None else -1

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """A topic's name by its id (Produce v13, Fetch v13+, the offset APIs v10 name topics by id on every
        request): a map kept per metadata image, rebuilt when the image changes, not a walk of the topics."""
        image = self.controller.image
        if image is not self._names_image:
            self._names_by_id = {t.topic_id: t.name for t in image.topics.values()}
            self._names_image = image
        return self._names_by_id.get(topic_id)

    def topic_names(self) -> dict[uuid.UUID, str]:
        """Every topic's name by its id, for a request naming many ids (:meth:`topic_name` walks the topics)."""
        return {t.topic_id: t.name for t in self.controller.image.topics.values()}

    # ------------------------------------------------------------------ produce

    async def handle_produce_append(self, entries: list[tuple[str, int, bytes]], acks: int, timeout_s: float,
                                    transactional_id: str | None = None, transaction_version_2: bool = False,
                                    abortable_supported: bool = False,
                                    timing: RequestTiming | None = None) -> list[dict]:
        """Kafka's ``handleProduceAppend`` and ``appendRecords``: append each (topic, partition, records) of a
        Produce request as leader and return its partition response (``index``, ``error_code``,
        ``base_offset``, ...), in the order of ``entries``; with acks=all once the in-sync replicas have it.

        A transactional request is verified first (KIP-890 part 1): the partitions whose transactional batch
        opens the producer's transaction here are asked of its coordinator, in one question, unless
        transaction.partition.verification.enable is off; under transaction version 2 (Produce v12,
        ``transaction_version_2``) the coordinator adds them, whatever the config says. Raises
        InvalidProducerIdMappingError when the transactional batches are of more than one producer (Kafka
        refuses the whole request). The acks=all wait is added to ``timing`` (the request's)."""
        errors: dict[tuple[str, int], int] = {}
        guards = None
        if (transactional_id is not None and self.add_partitions_to_txn_manager is not None
                and (transaction_version_2 or self.transaction_verification_enabled())):
            errors, guards = await self._verify_produce(entries, transactional_id, transaction_version_2,
                                                        abortable_supported)
        results = []
        waits = []  # acks=all: (result, (topic, partition, leader epoch, last offset, duplicate)) to wait for
        # A request may name 100,000s of partitions: the walk yields to the loop every few ms.
        pacer = Pacer()
        for walked, (topic, partition, records) in enumerate(entries, 1):
            if not walked & 255:
                await pacer()
            result = {"index": partition, "error_code": NO_ERROR, "base_offset": -1, "log_append_time_ms": -1,
                      "log_start_offset": -1}
            results.append(result)
            try:
                if acks not in (-1, 0, 1):
                    raise InvalidRequiredAcksError(f"invalid required acks {acks}")
                code = errors.get((topic, partition), NO_ERROR)
                if code != NO_ERROR:  # not verified: Kafka's UNKNOWN_LOG_APPEND_INFO, so no log start offset
                    result["error_code"] = code
                    if code in _VERIFICATION_MESSAGES:
                        result["error_message"] = _VERIFICATION_MESSAGES[code]
                    continue
                guard = None if guards is None else guards.get((topic, partition), SENTINEL)
                appended = self.append_records(topic, partition, records, acks, verification_guard=guard)
                last_offset, epoch = appended.pop("last_offset"), appended.pop("leader_epoch")
                duplicate = appended.pop("duplicate")
                result.update(appended)
                if acks == -1:
                    waits.append((result, (topic, partition, epoch, last_offset, duplicate)))
            except KafkaError as e:
                result["error_code"] = e.code
                record_errors = record_errors_of(e)
                if record_errors is not None:
                    # Kafka's RecordValidationException: a message and the index of each failing record in the
                    # batch; Kafka's other errors (a record that cannot be read) are bare.
                    result["error_message"] = e.message
                    result["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                               for i, m in record_errors]
                if e.code not in NO_LOG_START_OFFSET_ERRORS:
                    result["log_start_offset"] = self.log_start_offset_or_unknown(topic, partition)
                if e.code not in _PROPAGATING:
                    log.debug("Produce to %s-%d failed: %s", topic, partition, e)
        if waits:
            codes = await self.wait_for_acks([w for _, w in waits], timeout_s, timing)
            for (result, _), code in zip(waits, codes):
                if code:
                    result["error_code"] = code
        return results

    async def _verify_produce(self, entries: list[tuple[str, int, bytes]], transactional_id: str, add: bool,
                              abortable_supported: bool) -> tuple[dict, dict]:
        """KIP-890 part 1 before anything is appended (Kafka's ``maybeStartTransactionVerificationForPartitions``
        from ``handleProduceAppend``): the errors of the partitions that fail, as Produce answers them, and the
        guards to append with."""
        producers = set()
        sequences: dict[tuple[str, int], int] = {}
        for topic, partition, records in entries:
            producer = transactional_producer(records)
            if producer is not None:
                producer_id, epoch, sequence = producer
                producers.add((producer_id, epoch))
                sequences[topic, partition] = sequence
        if not producers:
            return {}, {}
        if len(producers) > 1:
            raise InvalidProducerIdMappingError("Transactional records contained more than one producer ID")
        (producer_id, epoch), = producers
        errors, guards = await self.add_partitions_to_txn_manager.verify_for_append(
            transactional_id, producer_id, epoch, sequences, abortable_supported=abortable_supported, add=add)
        return {tp: NotEnoughReplicasError.code if code in _VERIFICATION_RETRIABLE else code
                for tp, code in errors.items()}, guards

    async def verify_transactional_append(self, tp: tuple[str, int], transactional_id: str, producer_id: int,
                                          producer_epoch: int, abortable_supported: bool, add: bool) -> int:
        """KIP-890 for an append a coordinator makes in a producer's transaction (TxnOffsetCommit's offsets to
        the group's ``__consumer_offsets`` partition; Kafka's group coordinator calls
        ``maybeStartTransactionVerificationForPartition``): NO_ERROR when the append may go ahead now, else the
        error (the coordinator's answer, or INVALID_TXN_STATE when a marker closed the transaction meanwhile).
        Nothing is asked when verification is off (transaction.partition.verification.enable, outside
        transaction version 2's ``add``) or this broker has no manager. The caller appends without an await."""
        manager = self.add_partitions_to_txn_manager
        if manager is None or not (add or self.transaction_verification_enabled()):
            return NO_ERROR
        failed, guards = await manager.verify_for_append(transactional_id, producer_id, producer_epoch, {tp: -1},
                                                         abortable_supported, add)
        code = failed.get(tp, NO_ERROR)
        if code == NO_ERROR and not manager.guard_holds(tp, producer_id, producer_epoch, guards[tp]):
            code = InvalidTxnStateError.code
        return code

    def append_records(self, topic: str, partition: int, records: bytes, acks: int = 1,
                       internal_topics_allowed: bool = False, from_coordinator: bool = False,
                       verification_guard=None) -> dict:
        """Append a batch as leader; returns the fields of a produce partition response. Clients may not
        write the coordinators' topics (Kafka's appendToLocalLog); the coordinators pass
        ``internal_topics_allowed``. ``verification_guard``: KIP-890 part 1, see ``Log.append_as_leader``."""
        p = self.get_partition(topic, partition)  # an unknown partition first, as Kafka's produce handler
        if topic in COORDINATOR_TOPICS and not internal_topics_allowed:
            raise InvalidTopicError(f"Cannot append to internal topic {topic}")
        info = None
        if acks == -1 and p.effective_min_isr() > len(p.isr or (self.node_id,)):
            # Kafka refuses before it looks for a duplicate, telling a producer whose retry is already in the
            # log that it was not written; librdkafka then renumbers it under a bumped epoch as soon as a later
            # batch of its meets OUT_OF_ORDER_SEQUENCE_NUMBER, and writes it twice. A duplicate is answered.
            info = p.log.find_duplicate(records) if not from_coordinator else None
            if info is None:
                raise NotEnoughReplicasError(
                    f"the in-sync replicas of {p} ({len(p.isr)}) are fewer than the {p.effective_min_isr()} that "
                    f"min.insync.replicas requires")
        try:
            if info is None:
                info = p.log.append_as_leader(records, p.leader_epoch, from_coordinator=from_coordinator,
                                              verification_guard=verification_guard)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {p}: {e}") from e
        p.maybe_increment_high_watermark()
        if not info.duplicate:
            self._wake((topic, partition))
        if self.topic_metrics is not None:  # as Kafka's appendToLocalLog: every append, internal topics too
            # The offsets taken are the batches' record counts (validation holds them equal): no record is read.
            count = 0 if info.duplicate else info.last_offset - info.first_offset + 1
            self.topic_metrics.appended(topic, len(records), count)
        # last_offset, leader_epoch and duplicate are for an acks=all wait (wait_for_acks); the encoder ignores
        # them.
        return {"base_offset": info.first_offset, "log_append_time_ms": info.log_append_time,
                "log_start_offset": p.log.log_start_offset, "last_offset": info.last_offset,
                "leader_epoch": p.leader_epoch, "duplicate": info.duplicate}

    def maybe_start_transaction_verification(self, topic: str, partition: int, producer_id: int, sequence: int,
                                             epoch: int):
        """KIP-890 part 1 on a led partition (Kafka's ``maybeStartTransactionVerificationForPartition``): the
        ``SENTINEL`` guard when the producer's transaction is open here, else the guard to verify with; the
        partition's error (not led here, unknown) raised."""
        return self.get_partition(topic, partition).log.maybe_start_transaction_verification(
            producer_id, sequence, epoch)

    def append_txn_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int, commit: bool) -> tuple[int, int]:
        """WriteTxnMarkers for one partition (Kafka's appendRecords with origin COORDINATOR and acks=-1):
        append the COMMIT or ABORT marker as leader; returns (its offset, the leader epoch) to wait for with
        :meth:`wait_for_acks`. A partition with no replica here is UNKNOWN_TOPIC_OR_PARTITION (Kafka's
        handler asks for an online local log first, so an offline one too); one followed here
        NOT_LEADER_OR_FOLLOWER."""
        hosted = self.partitions.get((topic, partition))
        if hosted is None or hosted.log.offline is not None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{partition}")
        p = self.get_partition(topic, partition)
        if p.effective_min_isr() > len(p.isr or (self.node_id,)):
            raise NotEnoughReplicasError(
                f"the in-sync replicas of {p} ({len(p.isr)}) are fewer than the {p.effective_min_isr()} that "
                f"min.insync.replicas requires")
        try:
            info = p.log.append_txn_marker(producer_id, producer_epoch, coordinator_epoch, commit, p.leader_epoch)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {p}: {e}") from e
        p.maybe_increment_high_watermark()
        self._wake((topic, partition))
        if self.topic_metrics is not None:
            self.topic_metrics.appended(topic, info.valid_bytes, 1)
        return info.last_offset, p.leader_epoch

    async def wait_for_acks(self, waits: list[tuple], timeout_s: float,
                            timing: RequestTiming | None = None) -> list[int]:
        """acks=all (Kafka's DelayedProduce): for each (topic, partition, leader epoch at the append, last
        offset appended), wait until the high watermark has passed the offset, then answer NONE, or
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below ``min.insync.replicas`` meanwhile. A
        partition no longer led here, or whose log no longer holds the record in the epoch it was appended in
        (led elsewhere meanwhile and truncated), answers NOT_LEADER_OR_FOLLOWER; a new epoch of the same
        leader (ZooKeeper mode's controller removing a dead follower from the ISR) keeps the wait, as Kafka's
        DelayedProduce does. One still waiting after ``timeout_s`` answers REQUEST_TIMED_OUT. A fifth item True
        marks a duplicate batch (written by an earlier request): once the high watermark passed it, it is
        committed whatever the ISR is now (the high watermark only moves with ``min.insync.replicas`` replicas).
        Returns the error codes in the order of ``waits``; the time waited is added to ``timing`` (the request's)."""
        codes: list[int | None] = [None] * len(waits)
        deadline = time.monotonic() + max(timeout_s, 0)
        while True:
            pending = []
            for i, (topic, index, epoch, last_offset, *duplicate) in enumerate(waits):
                if codes[i] is None:
                    codes[i] = self._ack_state(topic, index, epoch, last_offset, bool(duplicate and duplicate[0]))
                    if codes[i] is None:
                        pending.append((topic, index))
            if not pending:
                return codes  # type: ignore[return-value]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return [RequestTimedOutError.code if c is None else c for c in codes]
            await self.wait_for_data(pending, remaining, timing)

    async def offsets_replicated(self, partition: int, timeout_s: float, timing: RequestTiming | None = None) -> int:
        """Wait until everything appended to ``__consumer_offsets``-``partition`` (an offset commit just made)
        reached the ISR; the error code of :meth:`wait_for_acks`."""
        p = self.partitions.get((OFFSETS_TOPIC, partition))
        if p is None:
            return NotLeaderOrFollowerError.code
        codes = await self.wait_for_acks([(OFFSETS_TOPIC, partition, p.leader_epoch, p.log.log_end_offset - 1)],
                                         timeout_s, timing)
        return codes[0]

    def _ack_state(self, topic: str, index: int, epoch: int, last_offset: int, duplicate: bool = False
                   ) -> int | None:
        p = self.partitions.get((topic, index))
        if p is None or not self.leads(p):
            return NotLeaderOrFollowerError.code
        if p.leader_epoch != epoch and p.log.leader_epoch_cache.epoch_for_offset(last_offset) != epoch:
            return NotLeaderOrFollowerError.code  # replaced by another leader's records
        if p.log.offline is not None:
            return KafkaStorageError.code
        if p.log.high_watermark <= last_offset:
            return None
        if duplicate:
            return 0
        return NotEnoughReplicasAfterAppendError.code if len(p.isr) < p.effective_min_isr() else 0

    # ------------------------------------------------------------------ replication, the leader's side

    def start_replication(self) -> None:
        """In a cluster: the fetchers and the ISR changes start, told of this manager's appends and ISR answers
        (they are built before it, so they get its callbacks here), and the ISRs of the partitions led here are
        checked every half ``replica.lag.time.max.ms``."""
        if self.fetchers is not None:
            self.fetchers.start(self.follower_appended)
        if self.alter_partition is not None:
            self.alter_partition.start(self.isr_updated, self.isr_update_failed)
        self._isr_expiration = asyncio.get_running_loop().create_task(self._expire_isr(), name="isr-expiration")

    async def _expire_isr(self) -> None:
        while True:
            await asyncio.sleep(max(self._config()["replica.lag.time.max.ms"] / 2000, 0.05))
            try:
                self.maybe_shrink_isr()
            except Exception:  # noqa: BLE001 - checked again at the next interval
                log.exception("ISR expiration failed")

    def maybe_shrink_isr(self, now_ms: int | None = None) -> None:
        """Ask the controller to drop followers that have not caught up for ``replica.lag.time.max.ms`` from
        the ISR of each partition led here (Kafka's maybeShrinkIsr)."""
        now = _now_ms() if now_ms is None else now_ms
        lag = self._config()["replica.lag.time.max.ms"]
        for p in list(self.partitions.values()):
            if not self.leads(p) or p.pending_isr is not None or p.log.offline is not None:
                continue
            out = p.out_of_sync_replicas(now, lag)
            if out:
                isr = tuple(r for r in p.isr if r not in out)
                log.info("Shrinking the ISR of %s from %s to %s: replica(s) %s did not catch up within %d ms "
                         "(leader log end %d, high watermark %d)", p, list(p.isr), list(isr), sorted(out), lag,
                         p.log.log_end_offset, p.log.high_watermark)
                self._propose_isr(p, isr)

    def _propose_isr(self, p: Partition, isr: tuple[int, ...]) -> None:
        if self.alter_partition is None:
            return
        p.pending_isr = isr
        self.alter_partition.submit(p, isr)

    def _update_followers(self, replica_id: int, fetches: list[PartitionFetch]) -> None:
        """A follower's fetch (Kafka's updateFollowerFetchState): its fetch offsets are its log ends; each
        may let it join the ISR and move the high watermark, which wakes acks=all waits and consumers."""
        now = _now_ms()
        live = self.controller.image.brokers
        for f in fetches:
            if f.topic is None:
                continue
            p = self.partitions.get((f.topic, f.partition))
            if p is None or not self.leads(p) or p.log.offline is not None:
                continue
            if 0 <= f.current_leader_epoch != p.leader_epoch:
                continue  # answered with its fencing error by the read
            if not p.update_follower(replica_id, f.fetch_offset, now):
                continue
            isr = p.replicas_to_add(replica_id)
            if isr is not None and replica_id in live:
                log.info("Expanding the ISR of %s from %s to %s: replica %d caught up at offset %d", p,
                         list(p.isr), list(isr), replica_id, f.fetch_offset)
                self._propose_isr(p, isr)
            if p.maybe_increment_high_watermark():
                self._wake((p.topic, p.index))

    def follower_appended(self, p: Partition) -> None:
        """A replica fetcher appended to ``p``: wake what waits on its log."""
        self._wake((p.topic, p.index))

    def isr_updated(self, p: Partition, leader_epoch: int, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller accepted an ISR change (AlterPartition's answer)."""
        if self.partitions.get((p.topic, p.index)) is not p or not self.leads(p) or p.leader_epoch != leader_epoch:
            return
        if partition_epoch < p.partition_epoch:
            return
        if self.isr_metrics is not None:
            self.isr_metrics.changed(len(p.isr), len(isr))
        p.isr, p.partition_epoch, p.pending_isr = tuple(isr), partition_epoch, None
        p.maybe_increment_high_watermark()
        self._wake((p.topic, p.index))

    def isr_update_failed(self, p: Partition, leader_epoch: int, error: str) -> None:
        """The controller refused an ISR change (a stale leader or partition epoch): the next metadata push
        brings the current state; until then no other change is proposed for a stale term."""
        if p.leader_epoch == leader_epoch:
            p.pending_isr = None
        log.info("ISR change of %s refused by the controller: %s", p, error)

    # ------------------------------------------------------------------ fetch

    async def fetch_messages(self, params: FetchParams, fetches: list[PartitionFetch],
                             timing: RequestTiming | None = None) -> list[FetchPartitionData]:
        """Kafka's fetchMessages: answer at once when ``min_bytes`` are there, any partition failed, a
        partition is read from the remote tier, or nothing was asked; else wait for appends to any of the
        partitions until ``max_wait_ms`` has passed (added to ``timing``, the request's). Results are in the order
        of ``fetches``."""
        deadline = time.monotonic() + max(params.max_wait_ms, 0) / 1000
        # A fetch naming no partition (a closing session) returns at once; min_bytes never above max_bytes.
        min_bytes = min(params.min_bytes, params.max_bytes) if fetches else 0
        results: list[FetchPartitionData | None] = [None] * len(fetches)
        seen: list[tuple | None] = [None] * len(fetches)  # each partition's log state at its last read
        if params.is_from_follower:
            self._update_followers(params.replica_id, fetches)
        if len(fetches) >= BIG_FETCH:
            await self._fetch_many(params, fetches, min_bytes, deadline, results, seen, timing)
            return results  # type: ignore[return-value]
        while True:
            done = _LocalRead()
            self._read_from_local_log(params, fetches, results, seen, done)
            if done.remote:
                await self._read_from_remote_log(params, done.remote, params.max_bytes - done.total, done.total == 0)
                break
            remaining = deadline - time.monotonic()
            if done.total >= min_bytes or done.errors or remaining <= 0:
                break
            await self.wait_for_data([(f.topic, f.partition) for f in fetches if f.topic is not None], remaining,
                                     timing)
        return results  # type: ignore[return-value]

    async def _fetch_many(self, params: FetchParams, fetches: list[PartitionFetch], min_bytes: int, deadline: float,
                          results: list, seen: list, timing: RequestTiming | None = None) -> None:
        """:meth:`fetch_messages` for a fetch naming many partitions: the same steps, each a slice of
        partitions at a time, yielding to the event loop every few ms in between. An append made while the
        fetch yields is not missed: before it waits, it compares every partition with its state at its read
        (:meth:`_wait_for_changes`)."""
        pacer = Pacer()
        while True:
            done = _LocalRead()
            for start in range(0, len(fetches), FETCH_SLICE):
                self._read_from_local_log(params, fetches[start:start + FETCH_SLICE], results, seen, done, start)
                await pacer()
            if done.remote:
                await self._read_from_remote_log(params, done.remote, params.max_bytes - done.total, done.total == 0)
                break
            if done.total >= min_bytes or done.errors or deadline <= time.monotonic():
                break
            await self._wait_for_changes(fetches, seen, deadline, pacer, timing)
        free_later(seen)  # a big list of tuples: freed in a worker thread, not on the loop

    def _read_from_local_log(self, params: FetchParams, fetches: list[PartitionFetch], results: list, seen: list,
                             done: _LocalRead, start: int = 0) -> None:
        """Read every partition whose log changed since its last read (all of them the first time), in
        request order within what is left of ``max_bytes``; partitions below their local log start are
        left for the remote tier instead. What is read adds to ``done``. ``fetches`` may be a slice of the
        request's (a big fetch reads them a slice at a time), the one from index ``start`` of ``results``
        and ``seen``."""
        total = done.total
        errors = done.errors
        min_one = done.min_one
        remote = done.remote
        for i, f in enumerate(fetches, start):
            prior = results[i]
            if f.topic is None:
                # an empty list of aborted transactions, not null: Kafka answers the partitions its handler
                # refuses (unknown topic or id, not authorized) with a fresh partition entry
                results[i] = FetchPartitionData(error_code=f.unknown_topic_error, aborted_transactions=[])
                errors = True
                continue
            partition = self.partitions.get((f.topic, f.partition))
            state = _log_state(partition)
            if prior is not None and not prior.error_code and not prior.size and state == seen[i]:
                continue  # read empty before and nothing changed since
            # A partition with data is read again after a wait: the file region it got may be of a segment
            # deleted meanwhile, and the read itself is cheap (the segment's read hint).
            seen[i] = state
            result = results[i] = FetchPartitionData()
            try:
                limit = max(0, min(f.max_bytes, params.max_bytes - total))
                read = self._read_partition(params, f, partition, limit, min_one, result)
            except KafkaError as e:
                # a partition the metadata lacks is one of those Kafka's handler refuses (above)
                results[i] = FetchPartitionData(error_code=e.code, aborted_transactions=[] if isinstance(
                    e, UnknownTopicOrPartitionError) else None)
                errors = True
                continue
            if read is not None:
                remote.append(read)
            elif result.size:
                total += result.size
                min_one = False
        done.total, done.errors, done.min_one = total, errors, min_one

    def _read_partition(self, params: FetchParams, f: PartitionFetch, partition: Partition | None, limit: int,
                        min_one: bool, result: FetchPartitionData) -> RemoteRead | None:
        """Read one partition into ``result``; a read due from the remote tier is returned instead. A consumer of
        Fetch v11+ may read a follower (KIP-392), up to the follower's high watermark; the leader may send it to
        another replica instead (``replica.selector.class``)."""
        if partition is None or partition.log.offline is not None or (
                partition.leader_id != self.node_id and (params.fetch_only_from_leader or partition.leader_id < 0)):
            self.get_partition(f.topic, f.partition)  # raises the right error
        if params.is_from_follower and (params.replica_id not in partition.replicas
                                        or params.replica_id == partition.leader_id):
            # Kafka's followerReplicaOrThrow: a broker that is no follower of the partition reads nothing
            raise NotLeaderOrFollowerError(f"Replica {params.replica_id} is not a follower of {partition}")
        partition.check_leader_epoch(f.current_leader_epoch)
        lg = partition.log
        if params.client_rack is not None and partition.leader_id == self.node_id:
            preferred = self._preferred_read_replica(partition, f.fetch_offset, params.client_rack)
            if preferred >= 0:  # no data: the consumer fetches from that replica next
                result.preferred_read_replica = preferred
                result.high_watermark, result.last_stable_offset = lg.high_watermark, lg.last_stable_offset
                result.log_start_offset = lg.log_start_offset
                return None
        remote = None
        quota = self.leader_quota if params.is_from_follower else None
        if (limit > 0 or min_one) and (quota is None or not quota.holds_back(params, partition)):
            try:
                info = lg.read(f.fetch_offset, limit, isolation=params.isolation.value, min_one_message=min_one)
                if info.size:
                    result.records = info.region
                    result.aborted_transactions = info.aborted_transactions
                    if quota is not None:
                        quota.record(partition, info.size)
            except OffsetMovedToTieredStorageError as e:
                # Followers get 109 and rebuild from the remote tier themselves; consumers are served from
                # it, never given 109 (the Java consumer treats it as fatal).
                if params.is_from_follower:
                    raise
                remote = self._remote_read(partition, f, result, e)
        # Offsets are reported only for a partition read without error (an error answer carries -1 for
        # all three, as Kafka's does).
        result.high_watermark = lg.high_watermark
        result.last_stable_offset = lg.last_stable_offset
        result.log_start_offset = lg.log_start_offset
        if params.isolation is FetchIsolation.TXN_COMMITTED and result.aborted_transactions is None:
            result.aborted_transactions = []
        return remote

    def _preferred_read_replica(self, partition: Partition, fetch_offset: int, client_rack: str) -> int:
        """Kafka's RackAwareReplicaSelector behind findPreferredReadReplica: with a client rack, the leader when it
        is in that rack, else the replica of that rack that holds ``fetch_offset`` and is most caught up; -1
        (read here) without a selector, a rack, or such a replica."""
        if self._config()["replica.selector.class"] != RACK_AWARE_REPLICA_SELECTOR or not client_rack:
            return -1
        brokers = self.controller.image.brokers
        me = brokers.get(self.node_id)
        if me is not None and me.rack == client_rack:
            return -1
        now = _now_ms()
        best = None
        for r, st in partition.followers.items():
            b = brokers.get(r)
            if (b is None or b.rack != client_rack or st.log_end_offset < fetch_offset
                    or partition.log.log_start_offset > fetch_offset):
                continue
            rank = (st.log_end_offset, -(now - st.last_caught_up_ms))
            if best is None or rank > best[0]:
                best = (rank, r)
        return best[1] if best is not None else -1

    def _remote_read(self, partition: Partition, f: PartitionFetch, result: FetchPartitionData,
                     moved: OffsetMovedToTieredStorageError) -> RemoteRead | None:
        rlm = self.remote_log_manager
        if rlm is None or not partition.remote_storage_enabled:
            raise OffsetOutOfRangeError(f"{moved} (remote storage is not in effect)") from None
        if rlm.reader.fetch_quota.throttle_time_ms() > 0:
            # Over the remote fetch quota (KIP-956): no data and no error, as Kafka answers; the request
            # waits for its other partitions as usual.
            rlm.metrics.fetch_throttled.inc(topic=partition.topic)
            return None
        return RemoteRead(partition, f.fetch_offset, f.max_bytes, result)

    async def _read_from_remote_log(self, params: FetchParams, remote: list[RemoteRead], budget: int,
                                    min_one: bool) -> None:
        rlm = self.remote_log_manager
        wait_s = self._config()["remote.fetch.max.wait.ms"] / 1000

        def read_local(partition: Partition, offset: int, limit: int, first: bool) -> FetchDataInfo:
            return partition.log.read(offset, limit, isolation=params.isolation.value, min_one_message=first)

        await read_remote(rlm.reader, remote, budget, min_one, params.isolation, wait_s, read_local)

    def _wake(self, tp: tuple[str, int]) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_data(self, tps: list[tuple[str, int]], timeout_s: float,
                            timing: RequestTiming | None = None) -> None:
        """Return when any of ``tps`` gets an append, or after ``timeout_s``; the time waited is added to
        ``timing`` (the request's, passed down by its handler: a request quota's time leaves waits out)."""
        if timeout_s <= 0:
            return
        began = time.monotonic()
        if not tps:  # nothing can wake us: wait out the time rather than let a caller spin
            await asyncio.sleep(timeout_s)
            if timing is not None:
                timing.add_wait(time.monotonic() - began)
            return
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            pass
        finally:
            if timing is not None:
                timing.add_wait(time.monotonic() - began)
            for tp in tps:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        self._waiters.pop(tp, None)

    async def _wait_for_changes(self, fetches: list[PartitionFetch], seen: list, deadline: float,
                                pacer: Pacer, timing: RequestTiming | None = None) -> None:
        """:meth:`wait_for_data` for a big fetch, which yielded to the loop while it read: each partition is
        registered and then compared with its state at its read, a slice at a time, so that an append made
        while the fetch yielded ends the wait at once, as one made while it waits does. Every partition was
        read without error (else the fetch would not wait), so each is named and has its state in ``seen``."""
        fut = asyncio.get_running_loop().create_future()
        watched = unwatched = 0  # fetches[unwatched:watched] are registered
        try:
            changed = False
            while watched < len(fetches) and not changed:
                end = min(watched + FETCH_SLICE, len(fetches))
                for i in range(watched, end):
                    f = fetches[i]
                    tp = (f.topic, f.partition)
                    self._waiters.setdefault(tp, set()).add(fut)
                    if _log_state(self.partitions.get(tp)) != seen[i]:
                        changed = True
                watched = end
                await pacer()
            remaining = deadline - time.monotonic()
            if not changed and remaining > 0:
                began = time.monotonic()
                try:
                    await asyncio.wait_for(asyncio.shield(fut), remaining)
                except TimeoutError:
                    pass
                finally:
                    if timing is not None:  # the request's, as wait_for_data's
                        timing.add_wait(time.monotonic() - began)
            while unwatched < watched:
                end = min(unwatched + FETCH_SLICE, watched)
                self._unwatch(fetches, unwatched, end, fut)
                unwatched = end
                await pacer()
        finally:
            self._unwatch(fetches, unwatched, watched, fut)  # what an exception (a cancellation) left: at once

    def _unwatch(self, fetches: list[PartitionFetch], start: int, stop: int, fut: asyncio.Future) -> None:
        for i in range(start, stop):
            f = fetches[i]
            tp = (f.topic, f.partition)
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[tp]

    # ------------------------------------------------------------------ offsets

    async def fetch_offsets(self, lookups: list[OffsetLookup], isolation: FetchIsolation,
                            timeout_s: float, only_from_leader: bool = True) -> list[OffsetLookupResult]:
        """ListOffsets (Kafka's fetchOffset): the offset for each timestamp, or the special values -1..-5.
        A real timestamp on a tiered log with data below its local start searches the remote segments
        first, concurrently; those that do not finish within ``timeout_s`` answer REQUEST_TIMED_OUT
        (Kafka's DelayedRemoteListOffsets). The special values never touch remote metadata, so they work
        while it loads. ``only_from_leader`` off (a debugging tool's request) lets a follower answer from its
        own log."""
        results: list[OffsetLookupResult] = []
        remote: list[tuple[OffsetLookupResult, Partition, int]] = []
        pacer = Pacer()  # a request may name a million partitions: yield to the event loop every few ms
        for i, lookup in enumerate(lookups):
            if not i & 255:
                await pacer()
            results.append(out := OffsetLookupResult())
            try:
                find = self.leader_with_epoch if only_from_leader else self.replica_with_epoch
                partition = find(lookup.topic, lookup.partition, lookup.current_leader_epoch)
                if self._needs_remote_search(partition, lookup.timestamp):
                    remote.append((out, partition, lookup.timestamp))
                else:
                    self._local_offset(partition, lookup.timestamp, isolation, out)
            except KafkaError as e:
                out.error_code = e.code
        if remote:
            await self._remote_offsets(remote, isolation, timeout_s)
        return results

    def _needs_remote_search(self, partition: Partition, timestamp: int) -> bool:
        lg = partition.log
        return (timestamp >= 0 and self.remote_log_manager is not None and partition.remote_storage_enabled
                and lg.log_start_offset < lg.local_log_start_offset)

    @staticmethod
    def _upper(partition: Partition, isolation: FetchIsolation) -> int:
        lg = partition.log
        if isolation is FetchIsolation.LOG_END:
            return lg.log_end_offset
        return lg.last_stable_offset if isolation is FetchIsolation.TXN_COMMITTED else lg.high_watermark

    def _local_offset(self, partition: Partition, timestamp: int, isolation: FetchIsolation,
                      out: OffsetLookupResult) -> None:
        lg = partition.log
        upper = self._upper(partition, isolation)
        if timestamp == LATEST_TIMESTAMP:
            out.offset, out.leader_epoch = upper, lg.leader_epoch_cache.latest_epoch()
            return
        found = lg.fetch_offset_by_timestamp(timestamp)
        if found is not None and not (timestamp >= 0 and found.offset >= upper):
            out.offset, out.timestamp, out.leader_epoch = found.offset, found.timestamp, found.leader_epoch

    async def _remote_offsets(self, remote: list, isolation: FetchIsolation, timeout_s: float) -> None:
        reader = self.remote_log_manager.reader
        tasks = [asyncio.ensure_future(reader.find_offset_by_timestamp(partition, ts)) for _, partition, ts in remote]
        done, _ = await asyncio.wait(tasks, timeout=timeout_s)
        for (out, partition, _), task in zip(remote, tasks):
            if task not in done:
                task.cancel()  # the segment search already running finishes in its thread, unused
                out.error_code = RequestTimedOutError.code
                continue
            try:
                found = task.result()
            except KafkaError as e:  # one partition's failure is that partition's error code
                out.error_code = e.code
                continue
            except Exception:  # noqa: BLE001 - likewise, logged
                log.exception("Remote timestamp lookup of %s failed", partition)
                out.error_code = UnknownServerError.code
                continue
            if found is not None and found.offset < self._upper(partition, isolation):
                out.offset, out.timestamp, out.leader_epoch = found.offset, found.timestamp, found.leader_epoch

    def last_offset_for_leader_epoch(self, topic: str, partition: int, leader_epoch: int,
                                     current_leader_epoch: int = -1) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (the largest epoch <= ``leader_epoch``, the end offset of that epoch)."""
        p = self.leader_with_epoch(topic, partition, current_leader_epoch)
        return p.log.leader_epoch_cache.end_offset_for(leader_epoch, p.log.log_end_offset)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high watermark); returns the
        new low watermark."""
        t = self.controller.image.topics.get(topic)
        if t is None or partition not in t.partitions:
            raise UnknownTopicOrPartitionError()
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
        p = self.get_partition(topic, partition)
        if "delete" not in self.controller.topic_config(topic)["cleanup.policy"]:
            raise PolicyViolationError(
                f"Records of partition {p} can not be deleted due to the configured policy")
        target = p.log.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"The offset {target} for partition {p} is not valid")
        try:
            p.log.maybe_increment_log_start_offset(target)
        except OSError as e:
            raise KafkaStorageError(f"cannot delete records of {p}: {e}") from e
        return p.log.log_start_offset

    # ------------------------------------------------------------------ tiered storage disablement

    async def disable_remote_topic(self, request: DisableRemoteTopicRequest) -> DisableRemoteTopicResponse:
        """DisableRemoteTopic from the controller (KIP-950): stop tiering the topic's partitions hosted
        here; with the delete policy, delete their remote data. Errors go back to the controller, which
        repeats the request."""
        rlm = self.remote_log_manager
        t = self.controller.image.topics.get(request.topic)
        if t is None or t.topic_id != request.topic_id:
            return DisableRemoteTopicResponse()  # deleted meanwhile: its remote data went with it
        epoch = t.tiering.epoch if t.tiering is not None else -1
        if request.tiering_epoch > epoch:  # this broker has not seen that metadata yet: asked again later
            return DisableRemoteTopicResponse(StaleControllerEpochError.code,
                                              f"tiering epoch {request.tiering_epoch} is newer than {epoch}")
        if request.tiering_epoch < epoch or rlm is None:
            return DisableRemoteTopicResponse()  # superseded by a later change of the topic's tiering
        partitions = [p for p in self.partitions.values()
                      if p.topic == request.topic and p.index in request.partitions]
        try:
            # Led now, not when the disablement began: a broker elected in place of a leader that died
            # mid-disablement deletes that partition's remote data when the controller asks again.
            await rlm.disable_remote_topic([p for p in partitions if self.leads(p)],
                                           [p for p in partitions if not self.leads(p)], request.policy)
        except Exception as e:  # noqa: BLE001 - reported to the controller, which retries
            log.warning("DisableRemoteTopic for %s (policy %s) failed: %s", request.topic, request.policy, e)
            return DisableRemoteTopicResponse(KafkaStorageError.code, str(e))
        return DisableRemoteTopicResponse()


class _LocalRead:
    """What a pass over a fetch's partitions has read so far (a big fetch's pass goes a slice at a time)."""

    __slots__ = ("errors", "min_one", "remote", "total")

    def __init__(self) -> None:
        self.total = 0  # bytes read locally
        self.errors = False  # any partition answered with an error
        self.min_one = True  # no partition has data yet: the next one read returns at least one batch
        self.remote: list[RemoteRead] = []  # reads due from the remote tier


def _log_state(partition: Partition | None) -> tuple | None:
    """What a read of ``partition`` depends on: its log's offsets (and the log itself)."""
    if partition is None:
        return None
    lg = partition.log
    return id(lg), lg.log_start_offset, lg.local_log_start_offset, lg.high_watermark, lg.last_stable_offset, \
        lg.log_end_offset


__all__ = ["Partition", "ReplicaManager"]
