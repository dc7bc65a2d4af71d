"""A partition this broker hosts (Kafka's ``kafka.cluster.Partition``): its log, leader epoch, replicas, ISR.

The replica set, the in-sync replicas (ISR) and the partition epoch come from the cluster metadata. While
this broker leads, the partition also keeps each follower's fetch state (Kafka's ``Replica``): the log
end offset its last fetch asked from and when it last caught up with the leader's log end. From these

- the high watermark is the lowest log end offset of the ISR (:meth:`Partition.maybe_increment_high_watermark`),
  with an ISR change in flight counted on the safe side (Kafka's maximal ISR), and it stands still while the
  ISR is below ``min.insync.replicas``;
- a follower that caught up joins the ISR (:meth:`Partition.replicas_to_add`) and one that has not caught up
  for ``replica.lag.time.max.ms`` leaves it (:meth:`Partition.out_of_sync_replicas`); the replica manager asks
  the controller for either change (AlterPartition) and the answer brings the new ISR and partition epoch.

On a single node the leader is the only replica: the ISR is the leader alone and the high watermark follows
the log end offset as soon as an append returns.

Tiered storage sees partitions through :class:`tierlog.tiered.partition.TopicPartitionLog`, which this
class satisfies.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from tierlog.errors import FencedLeaderEpochError, UnknownLeaderEpochError
from tierlog.storage import Log


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = -1  # unknown until its first fetch in this leadership term
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end: int = -1  # the leader's log end offset at that fetch


@dataclass(slots=True, eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader_epoch: int
    leader_id: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = field(default=())
    partition_epoch: int = 0
    # While leading: the followers' fetch state, the ISR asked of the controller and not answered yet, and
    # the log end offset at which this leadership term began (a follower joins the ISR only past it).
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None
    leader_epoch_start_offset: int = 0

    def __str__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def remote_storage_enabled(self) -> bool:
        return self.log.config.remote_storage_enable

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing: a client with a newer epoch than ours waits; an older one refreshes."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} of {self} is newer than ours ({self.leader_epoch})")
        raise FencedLeaderEpochError(
            f"leader epoch {current_leader_epoch} of {self} is older than the current {self.leader_epoch}")

    def effective_min_isr(self) -> int:
        """Kafka's effectiveMinIsr: ``min.insync.replicas`` capped at the replica count, so a topic with
        fewer replicas than the setting still accepts acks=all (checked against Kafka)."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    # ------------------------------------------------------------------ leading

    def become_leader(self, now_ms: int) -> None:
        """Start a leadership term: every follower's log end is unknown until it fetches; those in the ISR
        count as caught up now, so none leaves the ISR before it had ``replica.lag.time.max.ms`` to fetch."""
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                          for r in self.replicas if r != self.leader_id}
        self.pending_isr = None
        self.leader_epoch_start_offset = self.log.log_end_offset

    def maximal_isr(self) -> set[int]:
        """The ISR with a change in flight counted on the safe side: a replica being added already counts
        for the high watermark, one being removed still does (Kafka's maximal ISR)."""
        return set(self.isr) | set(self.pending_isr or ())

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end offset); False when it is not a replica
        of this partition. It is caught up when it asked for the leader's log end, or for the log end the
        leader had at its previous fetch (Kafka's updateFetchState)."""
        st = self.followers.get(replica_id)
        if st is None:
            if replica_id not in self.replicas or replica_id == self.leader_id:
                return False
            st = self.followers[replica_id] = FollowerState()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            st.last_caught_up_ms = max(st.last_caught_up_ms, now_ms)
        elif fetch_offset >= st.last_fetch_leader_log_end >= 0:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_log_end = leader_end
        st.last_fetch_ms = now_ms
        return True

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up to the lowest log end offset of the (maximal) ISR; True when it
        moved. It never moves down here: a new leader starts from its own high watermark and a
        follower whose log end is not known yet holds it where it is. Nor does it move while the ISR is
        smaller than ``min.insync.replicas`` (Kafka 3.7+, from KIP-966; checked against 3.9): what is
        appended then (acks=1) is committed only once the ISR is big enough again, and an acks=all write
        waiting meanwhile times out."""
        if len(self.isr or (self.leader_id,)) < self.effective_min_isr():
            return False
        low = self.log.log_end_offset
        # Every acks=all Produce comes here: the ISR as it is unless a change is in flight (no sets built).
        for r in (self.maximal_isr() if self.pending_isr else self.isr):
            if r == self.leader_id:
                continue
            st = self.followers.get(r)
            low = min(low, st.log_end_offset if st is not None else -1)
        if low > self.log.high_watermark:
            self.log.update_high_watermark(low)
            return True
        return False

    def replicas_to_add(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` added when it may join: a replica, not in the ISR, whose log end has
        reached both the high watermark and the start of this leadership term (Kafka's
        isFollowerInSync). None otherwise, or while another ISR change is in flight."""
        if self.pending_isr is not None or replica_id in self.isr:
            return None
        st = self.followers.get(replica_id)
        if st is None or st.log_end_offset < 0:
            return None
        if st.log_end_offset >= self.log.high_watermark and st.log_end_offset >= self.leader_epoch_start_offset:
            return tuple(r for r in self.replicas if r in self.isr or r == replica_id)
        return None

    def out_of_sync_replicas(self, now_ms: int, max_lag_ms: int) -> set[int]:
        """ISR followers that have not caught up with the leader's log end for more than ``max_lag_ms``
        (Kafka's getOutOfSyncReplicas)."""
        out = set()
        leader_end = self.log.log_end_offset
        for r in self.isr:
            if r == self.leader_id:
                continue
            st = self.followers.get(r)
            if st is None or (st.log_end_offset != leader_end and now_ms - st.last_caught_up_ms > max_lag_ms):
                out.add(r)
        return out
