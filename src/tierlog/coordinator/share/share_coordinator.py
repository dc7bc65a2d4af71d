"""The share coordinator's side of KIP-932's state RPCs (Kafka 4.4's ``ShareCoordinatorShard``): the checks and
answers of InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary for one share-partition, over :class:`~.state_store.ShareStateStore`.

Kafka's order of checks, per share-partition: a null topic id, a negative partition, a negative leader epoch
(Read, Write) or state epoch (Write, Initialize) are INVALID_REQUEST with Kafka's messages; Read and Write of a
share-partition never initialized are INVALID_REQUEST ("... on uninitialized share partition not allowed.");
a leader epoch below the recorded one is FENCED_LEADER_EPOCH (Read, Write), a state epoch below it
FENCED_STATE_EPOCH (Write, Initialize); a topic or partition missing from the metadata UNKNOWN_TOPIC_OR_PARTITION.
A state partition not led here is NOT_COORDINATOR (the caller finds the leader again).

A write merges its state batches into the recorded ones offset by offset (Kafka's ``PersisterStateBatchCombiner``:
the newer batch wins), moves the start offset only forward and keeps the recorded leader and state epochs, as
Kafka 4.4's; a read with a newer leader epoch records it (``readStateAndMaybeUpdateLeaderEpoch``), an
initialization a new state epoch and start offset (AlterShareGroupOffsets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tierlog.coordinator.share.records import ShareSnapshot, StateBatch
from tierlog.coordinator.share.state_store import ShareStateStore, StateKey, apply_update
from tierlog.errors import KafkaError

NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
FENCED_LEADER_EPOCH = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE_EPOCH = "The coordinator rejected the request because the state epoch did not match."
UNKNOWN_TOPIC_OR_PARTITION = "This server does not host this topic-partition."

Result = dict  # a PartitionResult's fields (partition, error_code, error_message, and the answer's data)


def _invalid(topic_id: uuid.UUID | None, partition: int, leader_epoch: int | None = None,
             state_epoch: int | None = None) -> Result | None:
    """INVALID_REQUEST for the first bad argument, in the order Kafka's share coordinator checks them."""
    for bad, message in ((topic_id is None, NULL_TOPIC_ID), (partition < 0, NEGATIVE_PARTITION_ID),
                         (leader_epoch is not None and leader_epoch < 0, NEGATIVE_LEADER_EPOCH),
                         (state_epoch is not None and state_epoch < 0, NEGATIVE_STATE_EPOCH)):
        if bad:
            return _error(partition, ErrorCode.invalid_request, message)
    return None


def _error(partition: int, code: int, message: str | None) -> Result:
    return {"partition": partition, "error_code": code, "error_message": message}


class ShareCoordinator:
    """``partitions_of(topic_id)``: the partition count of a topic in the metadata, None when unknown."""

    def __init__(self, store: ShareStateStore, partitions_of: Callable[[uuid.UUID], int | None]):
        self.store = store
        self.partitions_of = partitions_of

    def _not_coordinator(self, key: StateKey, what: str) -> Result | None:
        partition = self.store.partition_of(key)
        if self.store.leads(partition):
            return None
        self.store.unload(partition)  # its state may change under another leader; read it again if it comes back
        return _error(key[2], ErrorCode.not_coordinator,
                      f"Unable to {what}: this broker does not lead __share_group_state-{partition}.")

    def _unknown(self, topic_id: uuid.UUID, partition: int) -> bool:
        count = self.partitions_of(topic_id)
        return count is None or count <= partition

    def _current(self, key: StateKey, what: str) -> ShareSnapshot | None | Result:
        if (refused := self._not_coordinator(key, what)) is not None:
            return refused
        try:
            return self.store.read(key)
        except KafkaError as e:
            return _error(key[2], ErrorCode.coordinator_not_available, f"Unable to {what}: {e.message}")

    def read(self, group_id: str, topic_id: uuid.UUID | None, partition: int, leader_epoch: int) -> Result:
        if (invalid := _invalid(topic_id, partition, leader_epoch=leader_epoch)) is not None:
            return invalid
        key = (group_id, topic_id, partition)
        state = self._current(key, "read share group state")
        if isinstance(state, dict):
            return state
        if state is None:
            return _error(partition, ErrorCode.invalid_request, READ_UNINITIALIZED)
        if state.leader_epoch > leader_epoch:
            return _error(partition, ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
        if self._unknown(topic_id, partition):
            return _error(partition, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
        if state.leader_epoch != leader_epoch:  # the new leader's epoch is recorded: older leaders are fenced
            updated = _copy(state)
            updated.leader_epoch = leader_epoch
            updated.write_timestamp = _now()
            if (failed := self._write(key, updated, "read share group state"))["error_code"]:
                return failed
        return {**_error(partition, ErrorCode.none, None), "state_epoch": state.state_epoch,
                "start_offset": state.start_offset, "state_batches": [
                    {"first_offset": b.first_offset, "last_offset": b.last_offset,
                     "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                    for b in state.state_batches]}

    def write(self, group_id: str, topic_id: uuid.UUID | None, partition: int, state_epoch: int, leader_epoch: int,
              start_offset: int, batches: list[StateBatch], delivery_complete_count: int = -1) -> Result:
        if (invalid := _invalid(topic_id, partition, leader_epoch=leader_epoch, state_epoch=state_epoch)) is not None:
            return invalid
        key = (group_id, topic_id, partition)
        state = self._current(key, "write share group state")
        if isinstance(state, dict):
            return state
        if state is None:
            return _error(partition, ErrorCode.invalid_request, WRITE_UNINITIALIZED)
        if state.leader_epoch > leader_epoch:
            return _error(partition, ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
        if state.state_epoch > state_epoch:
            return _error(partition, ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        if self._unknown(topic_id, partition):
            return _error(partition, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
        # Kafka 4.4's merge: the start offset never moves back, the recorded epochs stay (a read records a new
        # leader epoch, an initialization a new state epoch), the delivered count follows the start offset's
        start = max(start_offset, state.start_offset)
        if start_offset == state.start_offset:
            complete = max(delivery_complete_count, state.delivery_complete_count)
        else:
            complete = state.delivery_complete_count if start_offset < state.start_offset else delivery_complete_count
        updated = _copy(state)
        apply_update(updated, ShareSnapshot(state.snapshot_epoch, -1, -1, start, -1, -1, list(batches)))
        updated.delivery_complete_count = complete
        updated.write_timestamp = _now()
        return self._write(key, updated, "write share group state")

    def initialize(self, group_id: str, topic_id: uuid.UUID | None, partition: int, state_epoch: int,
                   start_offset: int) -> Result:
        if (invalid := _invalid(topic_id, partition, state_epoch=state_epoch)) is not None:
            return invalid
        key = (group_id, topic_id, partition)
        state = self._current(key, "initialize share group state")
        if isinstance(state, dict):
            return state
        if state is not None and state.state_epoch > state_epoch:
            return _error(partition, ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        if self._unknown(topic_id, partition):
            return _error(partition, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
        now = _now()
        # Kafka's ShareGroupOffset.fromRequest: leader epoch 0, nothing delivered yet (-1 while no start offset)
        return self._write(key, ShareSnapshot(state.snapshot_epoch + 1 if state is not None else 0, state_epoch,
                                              0, start_offset, now, now, [], -1 if start_offset == -1 else 0),
                           "initialize share group state")

    def delete(self, group_id: str, topic_id: uuid.UUID | None, partition: int) -> Result:
        if (invalid := _invalid(topic_id, partition)) is not None:
            return invalid
        key = (group_id, topic_id, partition)
        if (refused := self._not_coordinator(key, "delete share group state")) is not None:
            return refused
        if self._unknown(topic_id, partition):
            return _error(partition, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
        try:
            self.store.delete(key)
        except KafkaError as e:
            return _error(partition, e.code, f"Unable to delete share group state: {e.message}")
        return _error(partition, ErrorCode.none, None)

    def summary(self, group_id: str, topic_id: uuid.UUID | None, partition: int) -> Result:
        if (invalid := _invalid(topic_id, partition)) is not None:
            return invalid
        key = (group_id, topic_id, partition)
        state = self._current(key, "read share group state summary")
        if isinstance(state, dict):
            return state
        if self._unknown(topic_id, partition):
            return _error(partition, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_OR_PARTITION)
        if state is None:  # never initialized: Kafka answers the defaults
            return {**_error(partition, ErrorCode.none, None), "state_epoch": 0, "leader_epoch": 0,
                    "start_offset": -1, "delivery_complete_count": -1}
        return {**_error(partition, ErrorCode.none, None), "state_epoch": state.state_epoch,
                "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
                "delivery_complete_count": state.delivery_complete_count}

    def _write(self, key: StateKey, snapshot: ShareSnapshot, what: str) -> Result:
        """Append the new state; a failed append is answered as Kafka's runtime maps it (a partition no longer led
        here NOT_COORDINATOR, anything else COORDINATOR_NOT_AVAILABLE, both retried by the share-partition leader)."""
        try:
            self.store.write(key, snapshot)
        except KafkaError as e:
            code = ErrorCode.not_coordinator if e.code in (ErrorCode.not_coordinator, ErrorCode.not_leader_or_follower,
                                                           ErrorCode.unknown_topic_or_partition) \
                else ErrorCode.coordinator_not_available
            return _error(key[2], code, f"Unable to {what}: {e.message}")
        return _error(key[2], ErrorCode.none, None)


def _copy(s: ShareSnapshot) -> ShareSnapshot:
    return ShareSnapshot(s.snapshot_epoch, s.state_epoch, s.leader_epoch, s.start_offset, s.create_timestamp,
                         s.write_timestamp, list(s.state_batches), s.delivery_complete_count)


def _now() -> int:
    return int(time.time() * 1000)
