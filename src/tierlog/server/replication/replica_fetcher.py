"""Followers copying their leaders' logs (Kafka's ``ReplicaFetcherManager`` and ``ReplicaFetcherThread``).

A broker follows every partition it hosts but does not lead. The partitions led by one broker are spread
over ``num.replica.fetchers`` fetchers (by a hash of topic and partition, as Kafka spreads them), each an
asyncio task with its own connection to that leader's inter-broker listener, as client ``broker-<id>-fetcher-<n>``.

Each partition a fetcher takes goes through two phases, as in Kafka:

1. **Truncating** (KIP-101, KIP-279): the follower asks the leader, with OffsetsForLeaderEpoch, where its
   latest leader epoch ends in the leader's log and truncates its own log to the point where the two
   agree; when the leader does not know that epoch, the follower steps back to the epoch the leader knows
   and asks again. So a replica that was leader, or followed one, in a term the new leader does not share
   never keeps records the new leader lacks.
2. **Fetching**: Fetch with the follower's id (``replica_id``), from its log end offset, with the leader
   epoch it knows (a leader with another epoch fences it); the leader long-polls for
   ``replica.fetch.wait.max.ms``. Batches are appended as they are (offsets, epochs, producer ids and
   sequences kept, so producer state and the leader-epoch cache are rebuilt on the follower) and the
   follower's high watermark follows the leader's. Offset out of range: a follower ahead of the leader
   truncates to the leader's log end, one behind the leader's log start starts again empty at it (Kafka's
   handleOffsetOutOfRange); a partition whose data moved to tiered storage starts at the leader's local log
   start, its log start at the leader's.

Errors back the partition off for ``replica.fetch.backoff.ms`` (a leader that is not leader any more, an
unknown epoch: the next metadata push sorts it out); a connection that fails is opened again after the
same back-off. A failing local disk takes the partition out of the fetcher (the log dir failure path
reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.client.connection import BrokerConnection
from tierlog.cluster.image import BrokerImage
from tierlog.config import BrokerConfig
from tierlog.errors import (
    FencedLeaderEpochError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
    describe_error,
)
from tierlog.hashing import java_string_hash
from tierlog.logs import RepeatLimiter
from tierlog.protocol import ApiKey
from tierlog.server.partition import Partition
from tierlog.storage import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from tierlog.tasks import stop_tasks

if TYPE_CHECKING:
    from tierlog.server.quotas.replication_quota import ReplicationQuotaManager
    from tierlog.tiered.remote_log_manager import RemoteLogManager

log = logging.getLogger(__name__)

UNDEFINED = -1
#: Errors that mean the leader or its epoch moved: wait for the metadata push that says where.
_MOVED = frozenset(e.code for e in (NotLeaderOrFollowerError, FencedLeaderEpochError, UnknownLeaderEpochError,
                                    UnknownTopicOrPartitionError))
#: KIP-279: rounds of OffsetsForLeaderEpoch before a partition truncates to what it knows to agree on.
MAX_TRUNCATION_ROUNDS = 8


@dataclass(eq=False)
class PartitionFetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0
    rounds: int = 0  # OffsetsForLeaderEpoch rounds of this truncation

    @property
    def key(self) -> tuple[str, int]:
        return self.partition.topic, self.partition.index

    def ready(self, now: float) -> bool:
        return self.delayed_until <= now


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's getFetcherId: the fetcher of a partition among ``num.replica.fetchers``."""
    return abs(31 * java_string_hash(topic) + partition) % num_fetchers


def _no_append_listener(_partition: Partition) -> None:
    pass


class ReplicaFetcherManager:
    def __init__(self, node_id: int, listener: str, brokers: Callable[[], Mapping[int, BrokerImage]],
                 config: Callable[[], BrokerConfig], *, ssl_context=None, sasl=None,
                 quota: ReplicationQuotaManager | None = None,
                 remote_log_manager: RemoteLogManager | None = None) -> None:
        """``brokers`` gives the live brokers and their endpoints, ``listener`` the inter-broker listener's
        name, ``ssl_context`` its client context when it speaks TLS and ``sasl`` the inter-broker credentials
        when it is SASL_PLAINTEXT or SASL_SSL; ``quota`` is follower.replication.throttled.*'s;
        ``remote_log_manager`` builds a follower's state from the remote tier (KIP-405), None when remote
        storage is off here."""
        self.node_id = node_id
        self.listener = listener
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.brokers = brokers
        self.config = config
        # Told of every append (the replica manager wakes what waits on the log): the replica manager's own,
        # given when it starts replication (it holds this manager, so it cannot be built before it).
        self.on_appended: Callable[[Partition], None] = _no_append_listener
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.quota = quota
        self.remote_log_manager = remote_log_manager
        self._stopped = False

    def start(self, on_appended: Callable[[Partition], None]) -> None:
        """Before the first partition is followed: ``on_appended`` is told of every append."""
        self.on_appended = on_appended

    def add(self, partition: Partition) -> None:
        """Follow ``partition``'s leader from its current leader epoch: truncate first, then fetch."""
        if self._stopped:
            return
        self.remove([partition])
        key = (partition.leader_id, fetcher_id(partition.topic, partition.index, self.config()["num.replica.fetchers"]))
        fetcher = self.fetchers.get(key)
        if fetcher is None or fetcher.done:
            fetcher = self.fetchers[key] = ReplicaFetcher(self, *key)
            fetcher.start()
        fetcher.add(partition)

    def remove(self, partitions) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(partitions)

    async def shutdown(self) -> None:
        self._stopped = True
        fetchers = list(self.fetchers.values())
        self.fetchers.clear()
        for fetcher in fetchers:
            await fetcher.stop()


class ReplicaFetcher:
    """The partitions this broker follows from one leader (one of its ``num.replica.fetchers``)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, index: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.index = index
        self.client_id = f"broker-{manager.node_id}-fetcher-{index}"
        self.states: dict[tuple[str, int], PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._conn: BrokerConnection | None = None
        self._warnings = RepeatLimiter(log)

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader_id}, fetcher {self.index})"

    @property
    def done(self) -> bool:
        return self._task is None or self._task.done()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.leader_id}-{self.index}")

    async def stop(self) -> None:
        await stop_tasks(self._task)
        self._close()

    def add(self, partition: Partition) -> None:
        self.states[(partition.topic, partition.index)] = PartitionFetchState(partition, partition.leader_epoch)
        self._wake.set()

    def remove(self, partitions) -> None:
        for p in partitions:  # also the same partition of a topic deleted and created again
            self.states.pop((p.topic, p.index), None)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            self._wake.clear()  # before looking: an add made from here on wakes the wait below
            cfg = self.manager.config()
            backoff = cfg["replica.fetch.backoff.ms"] / 1000
            now = time.monotonic()
            ready = [st for st in self.states.values() if st.ready(now)]
            if not ready:
                delays = [st.delayed_until - now for st in self.states.values()]
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(delays) if delays else None)
                continue
            try:
                conn = await self._connection(cfg)
                truncating = [st for st in ready if st.truncating]
                if truncating:
                    await self._truncate(conn, truncating)
                fetching = [st for st in ready if not st.truncating and self.states.get(st.key) is st]
                if fetching:
                    await self._fetch(conn, fetching, cfg)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the leader is unreachable or went away: back off and retry
                why = describe_error(e) if isinstance(e, KafkaError) else e
                self._warnings.warning(("fetch", type(e).__name__), "%s: fetching from broker %d failed: %s",
                                       self.client_id, self.leader_id, why)
                self._close()
                until = time.monotonic() + backoff
                for st in ready:
                    st.delayed_until = until

    async def _connection(self, cfg: BrokerConfig) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        broker = self.manager.brokers().get(self.leader_id)
        if broker is None:
            raise NotLeaderOrFollowerError(f"broker {self.leader_id} is not alive")
        host, port = broker.endpoint(self.manager.listener)
        timeout_ms = max(cfg["replica.socket.timeout.ms"], cfg["replica.fetch.wait.max.ms"] + 1000)
        conn = await BrokerConnection.open(host, port, node_id=self.leader_id, client_id=self.client_id,
                                           request_timeout_ms=timeout_ms, setup_timeout_ms=min(timeout_ms, 10000),
                                           ssl_context=self.manager.ssl_context, sasl=self.manager.sasl)
        rcvbuf = cfg["replica.socket.receive.buffer.bytes"]
        sock = conn.socket
        if rcvbuf > 0 and sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self._conn = conn
        return conn

    def _delay(self, st: PartitionFetchState) -> None:
        st.delayed_until = time.monotonic() + self.manager.config()["replica.fetch.backoff.ms"] / 1000

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, conn: BrokerConnection, states: list[PartitionFetchState]) -> None:
        """One round of OffsetsForLeaderEpoch for the partitions still truncating (KIP-101, KIP-279)."""
        asking = []
        for st in states:
            lg = st.partition.log
            epoch = lg.leader_epoch_cache.latest_epoch()
            if epoch < 0 or st.rounds >= MAX_TRUNCATION_ROUNDS:
                # No epochs to compare (an empty log, or data written without epochs): what the follower
                # knows to be committed is its high watermark.
                self._truncate_to(st, lg.high_watermark, "no leader epoch to compare")
                continue
            asking.append((st, epoch))
        if not asking:
            return
        topics: dict[str, list] = {}
        for st, epoch in asking:
            topics.setdefault(st.partition.topic, []).append({
                "partition": st.partition.index, "current_leader_epoch": st.leader_epoch, "leader_epoch": epoch})
        response = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.manager.node_id,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()]}, min_version=3)
        answers = {(t.topic, int(p.partition)): p for t in response.topics for p in t.partitions}
        for st, asked in asking:
            if self.states.get(st.key) is not st:
                continue  # removed or re-added while the request was out
            p = answers.get(st.key)
            if p is None:
                self._delay(st)
                continue
            code = p.error_code.value
            if code:
                self._partition_error(st, code, "OffsetsForLeaderEpoch")
                continue
            self._apply_epoch_answer(st, asked, int(p.leader_epoch), int(p.end_offset))

    def _apply_epoch_answer(self, st: PartitionFetchState, asked: int, leader_epoch: int, end_offset: int) -> None:
        lg = st.partition.log
        leo = lg.log_end_offset
        st.rounds += 1
        if end_offset < 0:
            self._truncate_to(st, lg.high_watermark, f"the leader does not know epoch {asked}")
            return
        mine_epoch, mine_end = lg.leader_epoch_cache.end_offset_for(leader_epoch, leo)
        if mine_epoch < 0:
            self._truncate_to(st, min(end_offset, leo), f"no epoch at or below the leader's {leader_epoch} here")
        elif mine_epoch != leader_epoch:
            # The leader's epoch is unknown here: cut back to the end of our latest epoch below it, then ask
            # again about that one (KIP-279).
            target = min(mine_end, leo)
            if target < leo:
                self._cut(st, target, f"epoch {leader_epoch} of the leader is unknown here")
            st.truncating = True
        else:
            self._truncate_to(st, min(end_offset, mine_end, leo), f"epoch {leader_epoch} ends at {end_offset} "
                                                                  "at the leader")

    def _truncate_to(self, st: PartitionFetchState, offset: int, why: str) -> None:
        """Truncate to ``offset`` and start fetching from the log end."""
        self._cut(st, offset, why)
        st.truncating = False
        st.rounds = 0

    def _cut(self, st: PartitionFetchState, offset: int, why: str) -> None:
        lg = st.partition.log
        if offset >= lg.log_end_offset:
            return
        log.info("Truncating %s from log end %d to %d (%s; leader %d, epoch %d)", st.partition, lg.log_end_offset,
                 offset, why, self.leader_id, st.leader_epoch)
        try:
            if offset < lg.local_log_start_offset:  # nothing local is kept (Kafka's truncateFullyAndStartAt)
                lg.truncate_fully_and_start_at(offset)
            else:
                lg.truncate_to(offset)
        except KafkaStorageError as e:
            self._local_failure(st, e)

    def _local_failure(self, st: PartitionFetchState, error: Exception) -> None:
        """This broker's disk failed under the partition: it leaves the fetcher (the log dir failure path
        takes it offline and tells the controller)."""
        log.error("%s: cannot write %s: %s", self.client_id, st.partition, error)
        self.states.pop(st.key, None)

    # ------------------------------------------------------------------ fetching

    async def _fetch(self, conn: BrokerConnection, states: list[PartitionFetchState], cfg: BrokerConfig) -> None:
        quota = self.manager.quota
        if quota is not None:  # throttled replicas over the follower's rate wait (a reassignment's copy)
            now = time.monotonic()
            for st in states:
                st.delayed_until = max(st.delayed_until, now + quota.hold_back_s(st.partition))
            states = [st for st in states if st.ready(now)]
            if not states:
                return
        topics: dict[str, list] = {}
        sent = {}
        for st in states:
            lg = st.partition.log
            sent[st.key] = (st, lg.log_end_offset)
            topics.setdefault(st.partition.topic, []).append({
                "partition": st.partition.index, "current_leader_epoch": st.leader_epoch,
                "fetch_offset": lg.log_end_offset, "last_fetched_epoch": -1, "log_start_offset": lg.log_start_offset,
                "partition_max_bytes": cfg["replica.fetch.max.bytes"]})
        response = await conn.request(ApiKey.FETCH, {
            "replica_id": self.manager.node_id, "max_wait_ms": cfg["replica.fetch.wait.max.ms"],
            "min_bytes": cfg["replica.fetch.min.bytes"], "max_bytes": cfg["replica.fetch.response.max.bytes"],
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}, max_version=12)
        if response.error_code.value:
            raise KafkaError(f"Fetch refused by broker {self.leader_id}: {response.error_code.name}")
        for t in response.responses:
            for p in t.partitions:
                key = (t.topic, int(p.partition_index))
                st, offset = sent.get(key, (None, None))
                if st is None or self.states.get(key) is not st or st.partition.log.log_end_offset != offset:
                    continue  # removed, re-added or truncated meanwhile
                code = p.error_code.value
                if code:
                    if code == OffsetOutOfRangeError.code:
                        await self._out_of_range(conn, st)
                    elif code == OffsetMovedToTieredStorageError.code:
                        await self._moved_to_tiered_storage(conn, st)
                    else:
                        self._partition_error(st, code, "Fetch")
                    continue
                self._append(st, p)

    def _append(self, st: PartitionFetchState, p) -> None:
        partition = st.partition
        lg = partition.log
        records = p.records
        before = lg.high_watermark
        try:
            if records:
                lg.append_as_follower(records)
            hw = int(p.high_watermark)
            if hw >= 0:
                lg.update_high_watermark(min(hw, lg.log_end_offset))
            leader_start = int(p.log_start_offset)
            if 0 <= leader_start > lg.log_start_offset and leader_start <= lg.high_watermark:
                if partition.remote_storage_enabled:  # remote retention moved it at the leader
                    lg.increment_log_start_offset_from_remote(leader_start)
                else:  # records deleted at the leader (retention, DeleteRecords)
                    lg.maybe_increment_log_start_offset(leader_start)
        except KafkaStorageError as e:
            self._local_failure(st, e)
            return
        except KafkaError as e:  # a corrupt or out-of-order answer: fetched again after a back-off
            self._warnings.warning(("append", st.key), "%s: cannot append the batches of %s fetched from broker "
                                   "%d: %s", self.client_id, partition, self.leader_id, describe_error(e))
            self._delay(st)
            return
        if records and self.manager.quota is not None:
            self.manager.quota.record(partition, len(records))
        if records or lg.high_watermark != before:  # consumers reading this follower (KIP-392) wait on both
            self.manager.on_appended(partition)

    def _partition_error(self, st: PartitionFetchState, code: int, what: str) -> None:
        if code not in _MOVED:
            self._warnings.warning(("error", st.key, code), "%s: %s of %s from broker %d: %s", self.client_id,
                                   what, st.partition, self.leader_id, describe_error(code))
        if code == UnknownLeaderEpochError.code:
            # The leader has not applied the metadata push naming its new term yet; it will within moments,
            # and a failover should not wait a whole back-off for it.
            st.delayed_until = time.monotonic() + min(self.manager.config()["replica.fetch.backoff.ms"], 100) / 1000
            return
        self._delay(st)

    async def _leader_offset(self, conn: BrokerConnection, st: PartitionFetchState, timestamp: int) -> int:
        return (await self._leader_offset_and_epoch(conn, st, timestamp))[0]

    async def _leader_offset_and_epoch(self, conn: BrokerConnection, st: PartitionFetchState,
                                       timestamp: int) -> tuple[int, int]:
        response = await conn.request(ApiKey.LIST_OFFSETS, {
            "replica_id": self.manager.node_id, "isolation_level": 0,
            "topics": [{"name": st.partition.topic, "partitions": [{
                "partition_index": st.partition.index, "current_leader_epoch": st.leader_epoch,
                "timestamp": timestamp}]}]}, min_version=1)
        p = response.topics[0].partitions[0]
        if p.error_code.value:
            raise KafkaError(f"ListOffsets of {st.partition} at broker {self.leader_id}: {p.error_code.name}")
        return int(p.offset), int(getattr(p, "leader_epoch", -1))

    async def _out_of_range(self, conn: BrokerConnection, st: PartitionFetchState) -> None:
        """Kafka's handleOffsetOutOfRange: ahead of the leader's log end, truncate to it; behind its log
        start, start again empty there."""
        lg = st.partition.log
        leader_end = await self._leader_offset(conn, st, LATEST_TIMESTAMP)
        if self.states.get(st.key) is not st:
            return
        if self._starts_from_last_tiered(st, leader_end) and await self._start_after_last_tiered(conn, st):
            return
        if leader_end < lg.log_end_offset:
            self._cut(st, leader_end, f"the leader's log ends at {leader_end}")
            return
        leader_start = await self._leader_offset(conn, st, EARLIEST_TIMESTAMP)
        if self.states.get(st.key) is not st:
            return
        if leader_start > lg.log_end_offset:
            log.info("%s: the log of %s ends at %d, before the leader's log start %d: starting again there",
                     self.client_id, st.partition, lg.log_end_offset, leader_start)
            try:
                lg.truncate_fully_and_start_at(leader_start)
            except KafkaStorageError as e:
                self._local_failure(st, e)

    async def _moved_to_tiered_storage(self, conn: BrokerConnection, st: PartitionFetchState) -> None:
        """The offset is only in the remote tier (KIP-405's follower path): the follower builds its leader
        epochs and producer state from the remote segment just below the leader's local log start and
        fetches from that segment's end (:meth:`_start_from_remote`). Without a remote log manager here
        (remote storage off on this broker) it starts empty at the leader's local log start. With KIP-1023 on,
        an empty follower starts after the leader's last tiered offset instead."""
        if self._starts_from_last_tiered(st):
            leader_end = await self._leader_offset(conn, st, LATEST_TIMESTAMP)
            if (self.states.get(st.key) is st and self._starts_from_last_tiered(st, leader_end)
                    and await self._start_after_last_tiered(conn, st)):
                return
        local_start, local_epoch = await self._leader_offset_and_epoch(conn, st, EARLIEST_LOCAL_TIMESTAMP)
        if self._tiered(st):
            await self._start_from_remote(conn, st, local_start - 1, local_epoch)
            return
        leader_start = await self._leader_offset(conn, st, EARLIEST_TIMESTAMP)
        if self.states.get(st.key) is not st:
            return
        lg = st.partition.log
        log.info("%s: %s continues at the leader's local log start %d (log start %d); what lies below is in "
                 "the remote tier", self.client_id, st.partition, local_start, leader_start)
        try:
            lg.truncate_fully_and_start_at(local_start)
            lg.log_start_offset = min(leader_start, local_start)
        except KafkaStorageError as e:
            self._local_failure(st, e)


    def _tiered(self, st: PartitionFetchState) -> bool:
        return self.manager.remote_log_manager is not None and st.partition.remote_storage_enabled

    async def _start_from_remote(self, conn: BrokerConnection, st: PartitionFetchState, offset: int,
                                 epoch: int, exact: bool = False) -> bool:
        """Build the follower's state from the remote segment holding ``offset`` (Kafka's
        buildRemoteLogAuxState) and fetch from its end; False when it must be tried again later (the
        partition is then backed off). ``epoch`` is the leader's epoch at ``offset + 1`` (``exact``: at
        ``offset``); when ``offset`` lies in the epoch before it, the segment is looked up in that one."""
        target = epoch
        if epoch > 0 and not exact:
            response = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
                "replica_id": self.manager.node_id, "topics": [{"topic": st.partition.topic, "partitions": [{
                    "partition": st.partition.index, "current_leader_epoch": st.leader_epoch,
                    "leader_epoch": epoch - 1}]}]}, min_version=3)
            p = response.topics[0].partitions[0]
            if p.error_code.value:
                raise KafkaError(f"OffsetsForLeaderEpoch of {st.partition} at broker {self.leader_id}: "
                                 f"{p.error_code.name}")
            if int(p.end_offset) > offset:
                target = int(p.leader_epoch)
        leader_start = await self._leader_offset(conn, st, EARLIEST_TIMESTAMP)
        if self.states.get(st.key) is not st:
            return False
        try:
            await self.manager.remote_log_manager.build_follower_state(st.partition, target, offset, leader_start)
        except KafkaStorageError as e:
            if st.partition.log.offline is not None:
                self._local_failure(st, e)
                return False
            # The segment's metadata is not here yet (still loading, or the event not consumed): next round,
            # logged at INFO as Kafka logs its RemoteStorageNotReadyException.
            self._warnings.log(("remote", st.key), logging.INFO, "%s: cannot build %s from the remote tier yet: %s",
                               self.client_id, st.partition, e)
            self._delay(st)
            return False
        st.truncating = False
        st.rounds = 0
        return True

    def _starts_from_last_tiered(self, st: PartitionFetchState, leader_end: int | None = None) -> bool:
        """KIP-1023 (``follower.fetch.last.tiered.offset.enable``): a follower of a tiered, not compacted
        partition whose log ends at 0 starts after the leader's last tiered offset instead of at the leader's
        local log start. As in Kafka 4.3 it is decided only where the fetch at 0 was refused (offset moved to
        tiered storage, or out of range), so a leader still holding its whole log locally is copied whole,
        and only when the leader's log (``leader_end``, once asked) is not empty either."""
        lg = st.partition.log
        return (self._tiered(st) and lg.log_end_offset == 0 and leader_end != 0
                and "compact" not in lg.config.cleanup_policy
                and self.manager.config()["follower.fetch.last.tiered.offset.enable"])

    async def _start_after_last_tiered(self, conn: BrokerConnection, st: PartitionFetchState) -> bool:
        """Build the follower from the remote segment ending at the leader's last tiered offset (ListOffsets
        -5, whose epoch is that offset's) and fetch from the next one. True when that is done, or must be
        tried again later (the partition is then backed off); False when the leader knows of no tiered
        offset (nothing uploaded yet), so the usual path applies."""
        tiered, tiered_epoch = await self._leader_offset_and_epoch(conn, st, LATEST_TIERED_TIMESTAMP)
        if self.states.get(st.key) is not st:
            return True  # removed or re-added meanwhile: nothing more to do here
        if tiered < 0:
            return False
        await self._start_from_remote(conn, st, tiered, tiered_epoch, exact=True)
        return True


__all__ = ["PartitionFetchState", "ReplicaFetcher", "ReplicaFetcherManager", "fetcher_id"]
