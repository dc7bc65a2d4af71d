"""The replica-set arithmetic of a reassignment (Kafka's ReplicaAssignment.reassignTo) and the state each step
leaves, in-process; tests/cluster/test_reassignment.py moves replicas across real brokers."""

from __future__ import annotations

from tierlog.cluster.image import PartitionImage
from tierlog.cluster.reassignment import PartitionReassignments, is_complete, reassign_to

settle = PartitionReassignments._settle


def part(replicas, isr, leader, epoch=5, adding=(), removing=()) -> PartitionImage:
    return PartitionImage(0, leader, epoch, tuple(replicas), tuple(isr), 7, tuple(adding), tuple(removing))


def test_the_replica_set_is_the_target_then_the_original_replicas():
    moving = reassign_to(part([1, 2, 3], [1, 2, 3], 1), [2, 3, 4])
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == ((2, 3, 4, 1), (4,), (1,))
    assert moving.target_replicas == (2, 3, 4) and moving.origin_replicas == (2, 3, 1)
    assert not is_complete(moving)
    # A new target replaces the old one: the replica the old one was adding is no longer wanted.
    again = reassign_to(moving, [2, 3, 5])
    assert (again.replicas, again.adding_replicas, again.removing_replicas) == ((2, 3, 5, 1), (5,), (1,))
    # A cancellation is a reassignment back to the original replicas: nothing left to add or remove.
    back = reassign_to(moving, moving.origin_replicas)
    assert (back.replicas, back.adding_replicas, back.removing_replicas) == ((2, 3, 1), (), ())


def test_completion_removes_the_dropped_replicas_and_moves_the_leader_into_the_target():
    before = part([2, 3, 4, 1], [1, 2, 3, 4], 1, adding=[4], removing=[1])
    done = settle("t", before, before, live={1, 2, 3, 4})
    assert (done.replicas, done.isr, done.leader, done.leader_epoch) == ((2, 3, 4), (2, 3, 4), 2, 6)
    assert not done.is_reassigning
    # Not in sync yet: only the replica set is recorded, the leader and its epoch stay.
    start = part([1, 2, 3], [1, 2, 3], 1)
    moving = settle("t", start, reassign_to(start, [2, 3, 4]), live={1, 2, 3, 4})
    assert (moving.replicas, moving.isr, moving.leader, moving.leader_epoch) == ((2, 3, 4, 1), (2, 3, 1), 1, 5)


def test_a_cancellation_drops_the_added_replica_from_the_isr_and_fences_it():
    before = part([2, 3, 4, 1], [1, 2, 4], 1, adding=[4], removing=[3])
    back = settle("t", before, reassign_to(before, before.origin_replicas), live={1, 2, 3, 4})
    assert (back.replicas, back.isr, back.leader, back.leader_epoch) == ((2, 3, 1), (2, 1), 1, 6)


def test_a_target_no_live_replica_of_which_can_lead_waits():
    before = part([4, 1], [4, 1], 1, adding=[4], removing=[1])
    waiting = settle("t", before, before, live={1})  # broker 4 is in the ISR but gone
    assert waiting == before
