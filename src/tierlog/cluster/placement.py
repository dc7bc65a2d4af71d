"""Where a new partition's replicas go: Kafka's replica placement (``AdminUtils.assignReplicasToBrokers``).

Without racks, partition ``p``'s first replica is broker ``(p + start) mod n`` and the others follow with a
shift that grows every ``n`` partitions, so leaders and followers spread evenly; ``start`` and the shift are
random, as in Kafka, so that topics created one after another do not all lead on the same broker. With a rack
on every broker, the brokers are first listed alternating between racks, and each partition's replicas go to
as many different racks as there are. Some brokers with a rack and others without is refused, as Kafka's
enforced rack-aware mode does.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tierlog.errors import InvalidReplicationFactorError, InvalidRequestError


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers listed one rack after the other (racks and brokers in sorted order)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    names = sorted(by_rack)
    iters = {r: iter(by_rack[r]) for r in names}
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        b = next(iters[names[i]], None)
        if b is not None:
            out.append(b)
        i = (i + 1) % len(names)
    return out


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    start_partition: int = 0, rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas of partitions ``start_partition .. start_partition + partitions - 1`` over ``brokers`` (id ->
    rack or None)."""
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    if partitions <= 0:
        return {}
    rng = rng or random.Random()
    with_rack = [b for b, r in brokers.items() if r is not None]
    if with_rack and len(with_rack) != n:
        raise InvalidRequestError("Not all brokers have rack information for replica rack aware assignment.")
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    if not with_rack:
        ids = sorted(brokers)
        for p in range(start_partition, start_partition + partitions):
            if p > 0 and p % n == 0:
                shift += 1
            first = (p + start) % n
            out[p] = [ids[first]] + [ids[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        return out
    racks = {b: r for b, r in brokers.items()}
    n_racks = len(set(racks.values()))
    arranged = rack_alternated(racks)
    for p in range(start_partition, start_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas, used_racks, used = [leader], {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                b = arranged[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                if ((racks[b] not in used_racks or len(used_racks) == n_racks)
                        and (b not in used or len(used) == n)):
                    replicas.append(b)
                    used_racks.add(racks[b])
                    used.add(b)
                    break
        out[p] = replicas
    return out
