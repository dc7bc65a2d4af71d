"""The Java producer's default partitioning (Kafka 3.3+, KIP-794).

* A record with an explicit partition goes there.
* A keyed record goes to ``to_positive(murmur2(key)) % num_partitions``, unless
  ``partitioner.ignore.keys`` is set. Every Kafka client that claims Java compatibility does this,
  so the same key lands on the same partition whoever wrote it.
* Any other record uses the *uniform sticky* partitioner (Java's ``BuiltInPartitioner``): it sticks
  to one partition per topic until ``batch.size`` bytes have been appended there, then picks another
  one at random among the partitions that have a leader (among all partitions when none has).

Switching happens after an append, and may be held back while the partition's last batch is still
open, so that switching does not leave a small fraction of a batch behind (linger.ms + steady load
would otherwise give 12 KB + 4 KB batches for a 16 KB batch.size). It is never held back past
``2 * batch.size``. The accumulator drives this, mirroring Java's ``RecordAccumulator.append``::

    p = partitioner.partition(topic, key, n, available, explicit_partition=record_partition)
    sticky = partitioner.is_sticky(key, record_partition)
    if sticky and all_batches_full(p):                    # complete a switch held back earlier
        if partitioner.on_append(topic, p, 0):
            p = partitioner.partition(topic, key, n, available)
    appended = append(p, record)                          # bytes the record took in the batch
    if sticky:
        partitioner.on_append(topic, p, appended, enable_switch=all_batches_full(p))

where ``all_batches_full(p)`` is "the last batch queued for p is full or there is none", and
``appended`` is how much the batch grew (for a record that opens a new batch, the batch's whole
estimated size, header included, as Java counts it).

Adaptive partitioning (``partitioner.adaptive.partitioning.enable``, on by default in Java) weighs
the random choice by how little is queued per partition: the accumulator's ready() check reports the
queue length of every partition with a leader through :meth:`DefaultPartitioner.update_partition_load_stats`
(Java also leaves out partitions whose broker has not drained for ``partitioner.availability.timeout.ms``;
that is the accumulator's side too). Without such reports, or with adaptive partitioning disabled,
the choice is uniform. Java waits until each partition of the topic has had a batch queue before it
reports sizes; the caller should do the same.

This class is not thread-safe: it is meant for the producer's single asyncio thread.
"""

from __future__ import annotations

import bisect
import functools
import random as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.hashing import murmur2, to_positive

__all__ = ["DefaultPartitioner", "partition_for_key"]


def partition_for_key(key_bytes: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """Java's ``BuiltInPartitioner.partitionForKey``: the partition of a serialized key."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return to_positive(murmur2(key_bytes)) % num_partitions


@dataclass
class _Sticky:
    partition: int
    produced_bytes: int = 0


@dataclass
class _LoadStats:
    cumulative: list[int]  # running sum of (max queue + 1 - queue size): a strictly rising table
    partition_ids: list[int]


class DefaultPartitioner:
    """Keyed records by murmur2, the rest uniform sticky; see the module docstring for the protocol.

    ``random`` returns a non-negative int below 2**31 (Java's ``toPositive(nextInt())``); tests pass
    a deterministic one."""

    def __init__(self, batch_size: int = 16384, ignore_keys: bool = False, adaptive: bool = True,
                 random: Callable[[], int] | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size (sticky batch size) must be >= 1 but got {batch_size}")
        self.batch_size = batch_size
        self.ignore_keys = ignore_keys
        self.adaptive = adaptive
        self._random = random if random is not None else functools.partial(_random.Random().getrandbits, 31)
        self._sticky: dict[str, _Sticky] = {}
        self._stats: dict[str, _LoadStats] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DefaultPartitioner:
        """Build from producer settings (``batch.size``, ``partitioner.ignore.keys``,
        ``partitioner.adaptive.partitioning.enable``); missing ones take Kafka's defaults."""
        # KafkaProducer clamps batch.size to at least 1 before handing it to the partitioner.
        return cls(batch_size=max(1, int(config.get("batch.size", 16384))),
                   ignore_keys=bool(config.get("partitioner.ignore.keys", False)),
                   adaptive=bool(config.get("partitioner.adaptive.partitioning.enable", True)))

    # ---------------------------------------------------------------- choosing

    def is_sticky(self, key_bytes: bytes | None, explicit_partition: int | None = None) -> bool:
        """Whether a record's partition comes from the sticky choice (and so counts towards switching)."""
        return explicit_partition is None and (key_bytes is None or self.ignore_keys)

    def partition(self, topic: str, key_bytes: bytes | None, num_partitions: int,
                  available_partitions: Sequence[int] | None = None, *,
                  explicit_partition: int | None = None) -> int:
        """The partition for a record of ``topic``, which has ``num_partitions`` partitions of which
        ``available_partitions`` (ids, in metadata order) have a leader; None means unknown, treated
        like none available (the choice is then among all partitions)."""
        if explicit_partition is not None:
            if explicit_partition < 0:
                raise ValueError(f"Invalid partition: {explicit_partition}. "
                                 "Partition number should always be non-negative or null.")
            if explicit_partition >= num_partitions:
                raise ValueError(f"Invalid partition given with record: {explicit_partition} is not in the "
                                 f"range [0...{num_partitions}).")
            return explicit_partition
        if num_partitions <= 0:
            raise ValueError(f"num_partitions must be positive, not {num_partitions}")
        if key_bytes is not None and not self.ignore_keys:
            return partition_for_key(key_bytes, num_partitions)
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition >= num_partitions:
            sticky = self._sticky[topic] = _Sticky(self._next_partition(topic, num_partitions, available_partitions))
        return sticky.partition

    def current_partition(self, topic: str) -> int | None:
        """The sticky partition of ``topic`` if one is chosen (a switch clears it until next use)."""
        sticky = self._sticky.get(topic)
        return None if sticky is None else sticky.partition

    def _next_partition(self, topic: str, num_partitions: int, available: Sequence[int] | None) -> int:
        r = self._random()
        stats = self._stats.get(topic)
        if stats is not None:
            # The first entry strictly above r: lighter queues own wider ranges of the table.
            index = bisect.bisect_right(stats.cumulative, r % stats.cumulative[-1])
            return stats.partition_ids[index]
        if available:
            return available[r % len(available)]
        return r % num_partitions

    # ---------------------------------------------------------------- accumulator hooks

    def on_append(self, topic: str, partition: int, bytes_appended: int, *, enable_switch: bool = True) -> bool:
        """Count ``bytes_appended`` to the sticky partition of ``topic`` (Java's ``updatePartitionInfo``).

        Call it only for sticky records (see :meth:`is_sticky`). Once ``batch.size`` bytes are in,
        the partitioner switches, unless ``enable_switch`` is False (the partition's last batch is
        still open) and fewer than ``2 * batch.size`` bytes are in. ``bytes_appended=0`` with
        ``enable_switch=True`` completes a switch held back before. Returns whether it switched:
        the next :meth:`partition` call then picks a new partition. Appends to a partition that is
        not the current sticky one (the sticky one moved meanwhile) are ignored."""
        sticky = self._sticky.get(topic)
        if sticky is None or sticky.partition != partition:
            return False
        sticky.produced_bytes += bytes_appended
        produced = sticky.produced_bytes
        if (produced >= self.batch_size and enable_switch) or produced >= 2 * self.batch_size:
            # Chosen lazily at the next partition() call, with the metadata current then.
            del self._sticky[topic]
            return True
        return False

    def update_partition_load_stats(self, topic: str, queue_sizes: Sequence[int] | None,
                                    partition_ids: Sequence[int] | None, length: int | None = None) -> None:
        """Adaptive partitioning input (Java's ``updatePartitionLoadStats``): the number of queued
        batches of each partition of ``topic`` that has a leader. ``queue_sizes`` covers every such
        partition; only the first ``length`` (default: all) stay eligible, the rest being partitions
        the caller excludes for latency. None (or adaptive partitioning off) means uniform choice."""
        if not self.adaptive or queue_sizes is None or partition_ids is None:
            self._stats.pop(topic, None)
            return
        if len(queue_sizes) != len(partition_ids):
            raise ValueError("queue_sizes and partition_ids differ in length")
        if length is None:
            length = len(queue_sizes)
        # Fewer than 2 partitions in all leaves nothing to weigh, unless some were excluded.
        if length < 1 or len(queue_sizes) < 2:
            self._stats.pop(topic, None)
            return
        sizes = list(queue_sizes[:length])
        max_plus_1 = max(sizes) + 1
        if length == len(queue_sizes) and all(s == sizes[0] for s in sizes):
            self._stats.pop(topic, None)
            return
        cumulative: list[int] = []
        total = 0
        for s in sizes:
            total += max_plus_1 - s
            cumulative.append(total)
        self._stats[topic] = _LoadStats(cumulative, list(partition_ids[:length]))

    def forget(self, topic: str) -> None:
        """Drop the state kept for ``topic`` (e.g. when the producer stops producing to it)."""
        self._sticky.pop(topic, None)
        self._stats.pop(topic, None)
