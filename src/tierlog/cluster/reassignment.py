"""Partition reassignment in a ZooKeeper-mode cluster (KIP-455; Kafka's ``KafkaController.onPartitionReassignment``).

A reassignment moves a partition from its original replicas (ORS) to target replicas (TRS), on the active
controller's thread:

1. **Start** (AlterPartitionReassignments): the replica set becomes the target followed by the original
   replicas not in it, with the replicas being added (AR = TRS - ORS) and removed (RR = ORS - TRS), written
   to ``/brokers/topics/<topic>`` as Kafka writes them (``adding_replicas``, ``removing_replicas``). The
   pushed image makes every broker of AR create its replica and follow the leader. A reassignment that
   replaces another one drops at once the replicas the new one no longer wants (out of the ISR, logs
   deleted); a cancellation (null replicas) is a reassignment back to ORS.
2. **Completion**, once every target replica is in the ISR (the leader's AlterPartition brings it): the
   replica set becomes TRS, RR leaves the ISR, a leader outside TRS hands over to the first live in-sync
   target replica, and the leader epoch moves (replicas were removed, so their fetches are fenced). The
   removed replicas' brokers delete their logs when the image no longer assigns the partition to them.

Each step is one fenced ZooKeeper transaction writing the partition states and the topic's assignment
together, so a new controller finds either the reassignment in progress or its end, and resumes the former
(:meth:`PartitionReassignments.resume`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from tierlog.cluster.image import PartitionImage
from tierlog.cluster.zookeeper import FencedControllerError, topic_assignment, topic_path
from tierlog.errors import (
    InvalidReplicaAssignmentError,
    KafkaError,
    NoReassignmentInProgressError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from tierlog.cluster.zk_controller import ZkController

log = logging.getLogger(__name__)

NO_LEADER = -1
Key = tuple[str, int]


def reassign_to(pi: PartitionImage, target: Iterable[int]) -> PartitionImage:
    """Kafka's ReplicaAssignment.reassignTo: the replica set is the target followed by the original replicas,
    adding what the original lacks and removing what the target lacks."""
    target = tuple(target)
    origin = pi.origin_replicas
    full = tuple(dict.fromkeys((*target, *origin)))
    return replace(pi, replicas=full, adding_replicas=tuple(r for r in full if r not in origin),
                   removing_replicas=tuple(r for r in full if r not in target))


def _scala(kind: str, items: Iterable[int]) -> str:
    return f"{kind}({', '.join(map(str, items))})"


def is_complete(pi: PartitionImage) -> bool:
    """Every target replica is in sync (Kafka's isReassignmentComplete)."""
    return set(pi.target_replicas) <= set(pi.isr)


class PartitionReassignments:
    """The reassignment part of the active controller; every method runs on its thread."""

    def __init__(self, controller: ZkController) -> None:
        self.controller = controller

    # ------------------------------------------------------------------ requests

    def alter(self, requests: Iterable[tuple[str, int, tuple[int, ...] | None]]) -> dict[Key, KafkaError | None]:
        """AlterPartitionReassignments: for each (topic, partition, target replicas or None to cancel), start,
        replace or cancel its reassignment. Answers {(topic, partition): error or None} with Kafka's errors."""
        image = self.controller.image
        results: dict[Key, KafkaError | None] = {}
        moves: dict[Key, PartitionImage] = {}
        for name, p, target in requests:
            t = image.topics.get(name)
            pi = t.partitions.get(p) if t is not None else None
            if target is not None:
                error = self._invalid(pi, target)
                if error is not None:
                    results[(name, p)] = error
                    continue
            if target is None and (pi is None or not pi.is_reassigning):
                results[(name, p)] = NoReassignmentInProgressError("No partition reassignment is in progress.")
                continue
            if pi is None:
                results[(name, p)] = UnknownTopicOrPartitionError("The partition does not exist.")
                continue
            moves[(name, p)] = reassign_to(pi, target if target is not None else pi.origin_replicas)
            results[(name, p)] = None
            if target is None:
                log.info("Cancelling the reassignment of %s-%d: back to replicas %s", name, p,
                         list(pi.origin_replicas))
            else:
                log.info("Reassigning %s-%d from %s to %s", name, p, list(pi.origin_replicas), list(target))
        if moves:
            try:
                self._apply(moves)
            except FencedControllerError:
                raise
            except Exception as e:  # noqa: BLE001 - ZooKeeper refused the write: Kafka's answer for each
                log.error("Cannot start the reassignment of %d partition(s): %s", len(moves), e)
                for key in moves:
                    results[key] = UnknownServerError(f"cannot write the reassignment: {e}")
        return results

    def _invalid(self, pi: PartitionImage | None, target: tuple[int, ...]) -> KafkaError | None:
        """Kafka's validateReplicas: a non-empty list of distinct broker ids whose new members are alive (the
        messages are Kafka 3.9's, Scala's collections included)."""
        if not target:
            return InvalidReplicaAssignmentError("Empty replica list specified in partition reassignment.")
        if len(set(target)) != len(target):
            return InvalidReplicaAssignmentError(
                f"Duplicate replica ids in partition reassignment replica list: {_scala('ArrayBuffer', target)}")
        if any(r < 0 for r in target):
            return InvalidReplicaAssignmentError(f"Invalid broker id in replica list: {_scala('ArrayBuffer', target)}")
        live = self.controller.image.brokers
        adding = reassign_to(pi, target).adding_replicas if pi is not None else target
        if not set(adding) <= set(live):
            return InvalidReplicaAssignmentError(
                f"Replica assignment has brokers that are not alive. Replica list: {_scala('ArrayBuffer', adding)}, "
                f"live broker list: {_scala('Set', sorted(live))}")
        return None

    def list(self, partitions: Iterable[Key] | None = None) -> dict[Key, PartitionImage]:
        """ListPartitionReassignments: the partitions being reassigned among ``partitions`` (None: all)."""
        topics = self.controller.image.topics
        if partitions is None:
            return {(t.name, p): pi for t in topics.values() for p, pi in sorted(t.partitions.items())
                    if pi.is_reassigning}
        out = {}
        for name, p in partitions:
            pi = topics[name].partitions.get(p) if name in topics else None
            if pi is not None and pi.is_reassigning:
                out[(name, p)] = pi
        return out

    # ------------------------------------------------------------------ progress

    def maybe_complete(self, partitions: Iterable[Key]) -> None:
        """Finish the reassignments among ``partitions`` whose target replicas are all in sync now (called
        after an ISR change)."""
        topics = self.controller.image.topics
        done = {}
        for name, p in partitions:
            pi = topics[name].partitions.get(p) if name in topics else None
            if pi is not None and pi.is_reassigning and is_complete(pi):
                done[(name, p)] = pi
        if done:
            try:
                self._apply(done)
            except FencedControllerError:
                raise
            except Exception:  # noqa: BLE001 - tried again with the next ISR change or controller
                log.exception("Cannot complete the reassignment of %s", ", ".join(f"{n}-{p}" for n, p in done))

    def resume(self) -> None:
        """A new controller: finish the reassignments its predecessor left whose target is in sync; the others
        go on (their replicas already follow) and finish with a later ISR change."""
        going = list(self.list())
        if going:
            log.info("Resuming %d partition reassignment(s): %s", len(going),
                     ", ".join(f"{n}-{p}" for n, p in going[:20]))
            self.maybe_complete(going)

    def _apply(self, moves: Mapping[Key, PartitionImage]) -> None:
        """Write each partition's next state (completed when its target is in sync) and its topic's assignment
        in one fenced transaction, then push."""
        c = self.controller
        live = set(c.image.brokers) - c._shutting_down
        changes: dict[Key, PartitionImage] = {}
        for (name, p), moved in moves.items():
            before = c.image.topics[name].partitions[p]
            usable = {r for r in live if not c._replica_offline(r, name, p)}  # not in a failed log dir
            after = self._settle(name, before, moved, usable)
            if after != before:
                changes[(name, p)] = after
        if not changes:
            return
        topics = {}
        for (name, p), pi in changes.items():
            t = topics.get(name) or c.image.topics[name]
            topics[name] = replace(t, partitions={**t.partitions, p: pi})

        def assignments(tx) -> None:
            for t in topics.values():
                tx.set_data(topic_path(t.name), topic_assignment(t))
        c._write_states(changes, extra=assignments)
        c._version += 1
        c._on_loop(c._wake_pushers)

    @staticmethod
    def _settle(name: str, before: PartitionImage, moved: PartitionImage, live: set[int]) -> PartitionImage:
        """The state after ``moved``'s replica set: completed when its target is in sync; replicas that left
        the set leave the ISR; a leader that left (or is gone) hands over to the first live in-sync replica;
        the leader epoch moves when the leader changes or replicas were removed."""
        completing = moved.is_reassigning and is_complete(moved)
        nxt = moved
        if completing:
            nxt = replace(moved, replicas=moved.target_replicas, adding_replicas=(), removing_replicas=())
        isr = tuple(r for r in nxt.replicas if r in moved.isr)
        leader = moved.leader
        if leader not in nxt.replicas or leader not in live:
            leader = next((r for r in nxt.replicas if r in isr and r in live), NO_LEADER)
            if leader == NO_LEADER and completing:
                # No live in-sync target replica could lead: the reassignment waits (Kafka's election fails).
                log.warning("Reassignment of %s-%d cannot complete: no live in-sync replica of %s can lead", name,
                            moved.partition, list(nxt.replicas))
                nxt, isr, leader = moved, tuple(r for r in moved.replicas if r in moved.isr), moved.leader
        removed = set(before.replicas) - set(nxt.replicas)
        epoch = before.leader_epoch + 1 if removed or leader != before.leader else before.leader_epoch
        after = replace(nxt, leader=leader, isr=isr or moved.isr[-1:], leader_epoch=epoch)
        if not after.is_reassigning and before.is_reassigning:
            log.info("Reassignment of %s-%d completed: replicas %s, leader %d, ISR %s%s", name, after.partition,
                     list(after.replicas), after.leader, list(after.isr),
                     f", removed {sorted(removed)}" if removed else "")
        return after


__all__ = ["PartitionReassignments", "is_complete", "reassign_to"]
