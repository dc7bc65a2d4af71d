"""A leader's partition state (server/partition.py) on its own: the high watermark over the ISR."""

from __future__ import annotations

import os
import uuid

import pytest

from tierlog.records import build_batch
from tierlog.server.partition import Partition
from tierlog.storage import Log, LogConfig


@pytest.fixture
def leader(tmp_path):
    """A partition led by broker 1 with followers 2 and 3 in its ISR; ``min.insync.replicas`` as asked."""
    opened = []

    def make(min_insync_replicas: int) -> Partition:
        lg = Log.open(os.path.join(tmp_path, f"t-{len(opened)}"), "t", len(opened),
                      LogConfig(min_insync_replicas=min_insync_replicas))
        opened.append(lg)
        p = Partition("t", 0, uuid.uuid4(), lg, leader_epoch=0, leader_id=1, replicas=(1, 2, 3), isr=(1, 2, 3))
        p.become_leader(0)
        return p
    yield make
    for lg in opened:
        for seg in lg.segments:
            if seg.fd >= 0:
                seg.close()


def append(p: Partition, n: int) -> None:
    p.log.append_as_leader(build_batch([(None, b"v", [], 0)] * n), p.leader_epoch)


def test_the_high_watermark_is_the_lowest_log_end_of_the_isr(leader):
    p = leader(2)
    append(p, 3)
    assert p.update_follower(2, 3, 1) and p.update_follower(3, 1, 1)
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 1
    p.isr = (1, 2)  # 3 left the ISR: 2 replicas still meet min.insync.replicas
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 3


def test_the_high_watermark_stands_still_below_min_insync_replicas(leader):
    """Kafka 3.9's rule (Partition.maybeIncrementLeaderHW, isUnderMinIsr): what is appended while the ISR is
    smaller than min.insync.replicas is not committed, even if the whole ISR has it."""
    p = leader(3)
    append(p, 2)
    p.update_follower(2, 2, 1)
    p.update_follower(3, 2, 1)
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 2
    p.isr = (1, 2)
    append(p, 1)
    p.update_follower(2, 3, 2)
    assert not p.maybe_increment_high_watermark() and p.log.high_watermark == 2
    p.log.config = LogConfig(min_insync_replicas=2)  # min.insync.replicas lowered on the fly
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 3


def test_min_insync_replicas_is_capped_at_the_replica_count(leader):
    p = leader(5)
    append(p, 1)
    p.update_follower(2, 1, 1)
    p.update_follower(3, 1, 1)
    assert p.maybe_increment_high_watermark() and p.log.high_watermark == 1
