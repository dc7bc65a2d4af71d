"""A share-partition leader's reads and writes of its delivery state (Kafka 4.4's ``DefaultStatePersister`` and
``PersisterStateManager``).

The state of share-partition ``group:topicId:partition`` lives in one ``__share_group_state`` partition (the
key's hash, FindCoordinator key type 2). When this broker leads that partition (always on a single node) the
state is read and written on its own log (:class:`~tierlog.coordinator.share.ShareStateStore`), as before; else
the leader of that partition, found in this broker's metadata image, is asked over the inter-broker channel with
the share coordinator's RPCs: ReadShareGroupState when the share-partition is loaded (InitializeShareGroupState
first when the coordinator answers that it was never initialized, as Kafka's group coordinator does for a new
share-partition), WriteShareGroupState v1 after each change of its delivery state, DeleteShareGroupState
(DeleteShareGroupOffsets) and ReadShareGroupStateSummary (DescribeShareGroupOffsets).

Retriable answers (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, a failed connection)
are retried with the leader looked up again, backing off from ``BACKOFF_S`` up to ``MAX_BACKOFF_S``, for at most
``RETRY_S`` for a queued write, ``READ_RETRY_S`` for a read (the ShareFetch waiting for it then answers
COORDINATOR_NOT_AVAILABLE for the partition, which the consumer retries). Writes to another broker are queued per
share-partition (only the newest state of each is sent) and sent in the background in order;
:meth:`SharePersister.flush` waits for them, so ShareAcknowledge answers once the state is written, as Kafka's
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from tierlog.coordinator.share.records import SHARE_STATE_TOPIC, ShareSnapshot, StateBatch
from tierlog.coordinator.share.share_coordinator import READ_UNINITIALIZED, WRITE_UNINITIALIZED
from tierlog.coordinator.share.state_store import ShareStateStore, StateKey
from tierlog.errors import CoordinatorNotAvailableError, KafkaError, error_for_code
from tierlog.protocol import ApiKey

log = logging.getLogger(__name__)

BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
#: how long a queued write is retried; a read (a ShareFetch waits for it) gives up sooner, its client retries
RETRY_S = 15.0
READ_RETRY_S = 3.0
#: how long a stopping broker waits for the writes queued for other brokers
CLOSE_WAIT_S = 5.0
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
              ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out}


class _Retry(Exception):
    """A retriable failure of one attempt."""


class SharePersister:
    def __init__(self, store: ShareStateStore, controller, node_id: int):
        self.store = store
        self.controller = controller
        self.node_id = node_id
        self._pending: dict[StateKey, ShareSnapshot] = {}  # newest state not yet sent, per share-partition
        self._writers: dict[StateKey, asyncio.Task] = {}
        self._failed: dict[StateKey, KafkaError] = {}

    # ------------------------------------------------------------------ where the state lives

    def _coordinator(self, key: StateKey) -> int | None:
        """The broker leading the key's state partition: None when it is this one (or a single node)."""
        channel = getattr(self.controller, "channel", None)
        if not self.controller.clustered or channel is None:
            return None
        self.store.ensure_created()  # a cluster asks its controller (in the background); retried below
        topic = self.controller.image.topics.get(SHARE_STATE_TOPIC)
        if topic is None:
            raise _Retry(f"{SHARE_STATE_TOPIC} does not exist yet")
        state = topic.partitions.get(self.store.partition_of(key))
        if state is None or state.leader < 0:
            raise _Retry(f"{SHARE_STATE_TOPIC}-{self.store.partition_of(key)} has no leader")
        return None if state.leader == self.node_id else state.leader

    async def _call(self, key: StateKey, what: str, local, remote, retry_s: float = READ_RETRY_S):
        """``local()`` when the state partition is led here, else ``await remote(leader)``; retried while the
        failure is retriable, for at most ``retry_s``."""
        deadline = time.monotonic() + retry_s
        backoff = BACKOFF_S
        while True:
            try:
                leader = self._coordinator(key)
                if leader is None:
                    return local()
                return await remote(leader)
            except (TimeoutError, _Retry, OSError) as e:
                failure: Exception = e
            except KafkaError as e:
                if not e.retriable and e.code not in _RETRIABLE:
                    raise
                failure = e
            if time.monotonic() + backoff > deadline:
                raise CoordinatorNotAvailableError(f"Unable to {what} for {_name(key)}: {failure}")
            log.debug("Retrying to %s for %s: %s", what, _name(key), failure)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _request(self, leader: int, api: ApiKey, key: StateKey, partition: dict, max_version: int = 0):
        answer = await self.controller.channel.request(leader, api, {
            "group_id": key[0], "topics": [{"topic_id": key[1], "partitions": [{"partition": key[2], **partition}]}]},
            max_version=max_version)
        result = answer.results[0].partitions[0]
        if result.error_code:
            code = int(result.error_code)
            if code in _RETRIABLE:
                raise _Retry(f"{ErrorCode(code).name}: {result.error_message}")
            raise error_for_code(code)(result.error_message)
        return result

    # ------------------------------------------------------------------ the share-partition leader's calls

    async def read(self, key: StateKey, leader_epoch: int) -> ShareSnapshot | None:
        """The share-partition's state, None when it has none (then it is initialized, empty)."""
        async def remote(leader: int) -> ShareSnapshot | None:
            try:
                r = await self._request(leader, ApiKey.READ_SHARE_GROUP_STATE, key,
                                        {"leader_epoch": max(leader_epoch, 0)})
            except KafkaError as e:
                if e.code != ErrorCode.invalid_request or e.message != READ_UNINITIALIZED:
                    raise
                await self._request(leader, ApiKey.INITIALIZE_SHARE_GROUP_STATE, key,
                                    {"state_epoch": 0, "start_offset": -1})
                return None
            return ShareSnapshot(0, r.state_epoch, leader_epoch, r.start_offset, -1, -1, [
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                for b in r.state_batches])

        return await self._call(key, "read share group state", lambda: self.store.read(key), remote)

    def write(self, key: StateKey, snapshot: ShareSnapshot) -> None:
        """Write the state: at once on this broker's log, else queued for the state partition's leader (raises a
        KafkaError only for a write here; a queued one failing for good is logged and raised by :meth:`flush`)."""
        try:
            leader = self._coordinator(key)
        except (_Retry, KafkaError):
            leader = -1  # not known yet (the state topic being created, no leader): the background writer retries
        if leader is None and key not in self._writers:
            self.store.write(key, snapshot)
            return
        self._pending[key] = snapshot
        task = self._writers.get(key)
        if task is None or task.done():
            self._writers[key] = asyncio.get_running_loop().create_task(self._drain(key),
                                                                       name=f"share-state-write {_name(key)}")

    async def _drain(self, key: StateKey) -> None:
        try:
            while key in self._pending:
                snapshot = self._pending.pop(key)
                try:
                    await self._call(key, "write share group state", lambda s=snapshot: self.store.write(key, s),
                                     lambda leader, s=snapshot: self._write_remote(leader, key, s), RETRY_S)
                    self._failed.pop(key, None)
                except KafkaError as e:
                    log.warning("Cannot write the share state of %s: %s", _name(key), e)
                    self._failed[key] = e
        finally:
            if self._writers.get(key) is asyncio.current_task():
                del self._writers[key]

    async def _write_remote(self, leader: int, key: StateKey, s: ShareSnapshot) -> None:
        partition = {"state_epoch": s.state_epoch, "leader_epoch": max(s.leader_epoch, 0),
                     "start_offset": s.start_offset, "delivery_complete_count": s.delivery_complete_count,
                     "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                        "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                       for b in s.state_batches]}
        try:
            await self._request(leader, ApiKey.WRITE_SHARE_GROUP_STATE, key, partition, max_version=1)
        except KafkaError as e:
            if e.code != ErrorCode.invalid_request or e.message != WRITE_UNINITIALIZED:
                raise
            # its state was deleted meanwhile (or never initialized): initialize, then write again
            await self._request(leader, ApiKey.INITIALIZE_SHARE_GROUP_STATE, key,
                                {"state_epoch": s.state_epoch, "start_offset": s.start_offset})
            await self._request(leader, ApiKey.WRITE_SHARE_GROUP_STATE, key, partition, max_version=1)

    async def initialize(self, key: StateKey, snapshot: ShareSnapshot) -> None:
        """Start the share-partition's state over (AlterShareGroupOffsets: a new state epoch and start offset);
        a write cannot, as it never moves the start offset back."""
        self._pending.pop(key, None)
        await self.flush(key)

        async def remote(leader: int) -> None:
            await self._request(leader, ApiKey.INITIALIZE_SHARE_GROUP_STATE, key,
                                {"state_epoch": snapshot.state_epoch, "start_offset": snapshot.start_offset})

        await self._call(key, "initialize share group state", lambda: self.store.write(key, snapshot), remote)

    async def flush(self, key: StateKey) -> None:
        """Wait until the queued writes of the share-partition are sent; raises the last one's failure."""
        task = self._writers.get(key)
        if task is not None:
            await asyncio.shield(task)
        failed = self._failed.pop(key, None)
        if failed is not None:
            raise failed

    async def delete(self, key: StateKey) -> None:
        self._pending.pop(key, None)

        async def remote(leader: int) -> None:
            await self._request(leader, ApiKey.DELETE_SHARE_GROUP_STATE, key, {})

        await self._call(key, "delete share group state", lambda: self.store.delete(key), remote)

    async def summary(self, key: StateKey) -> ShareSnapshot | None:
        """The share-partition's start offset and epochs (no batches); None when it has no state."""
        async def remote(leader: int) -> ShareSnapshot | None:
            r = await self._request(leader, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, key, {"leader_epoch": 0},
                                    max_version=1)
            if r.start_offset < 0:
                return None
            return ShareSnapshot(0, r.state_epoch, r.leader_epoch, r.start_offset, -1, -1, [],
                                 getattr(r, "delivery_complete_count", -1))

        pending = self._pending.get(key)
        if pending is not None:
            return pending
        return await self._call(key, "read share group state summary", lambda: self.store.read(key), remote)

    async def close(self) -> None:
        """Give the writes queued for other brokers ``CLOSE_WAIT_S`` to finish, then stop them (their state is
        written again by the share-partition's next leader's changes; what was acknowledged meanwhile is lost only
        if they fail)."""
        tasks = [t for t in self._writers.values() if not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_WAIT_S)
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _name(key: StateKey) -> str:
    return f"{key[0]}:{uuid.UUID(str(key[1]))}:{key[2]}"
