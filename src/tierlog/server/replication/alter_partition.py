"""ISR changes from a leader to the controller (Kafka's ``AlterPartitionManager``).

A leader never changes a partition's ISR itself: it proposes the new ISR with AlterPartition (v2, topic
ids), naming the leader epoch and partition epoch it knows, and the controller writes it to ZooKeeper
with compare-and-set and answers with the new partition epoch. Proposals wait in a queue and go out together
in one request, one per partition at a time; the replica manager keeps the proposed ISR as pending
meanwhile, counting it on the safe side for the high watermark. A request that cannot reach the controller
(none elected yet, a connection lost, NOT_CONTROLLER) is sent again after a back-off; a refusal (a stale
leader or partition epoch) drops the proposal, since the next metadata push brings the current state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.errors import FencedLeaderEpochError, NotControllerError, describe_error, error_for_code
from tierlog.protocol import ApiKey
from tierlog.server.partition import Partition
from tierlog.tasks import stop_tasks

log = logging.getLogger(__name__)

RETRY_S = (0.05, 1.0)  # first and longest wait before asking the controller again
LEADER_RECOVERED = 0  # LeaderRecoveryState.RECOVERED


class AlterPartitionManager:
    def __init__(self, node_id: int, channel: NetworkBrokerChannel, controller_id: Callable[[], int],
                 broker_epoch: Callable[[], int], timeout_ms: int) -> None:
        self.node_id = node_id
        self.channel = channel
        self.controller_id = controller_id
        self.broker_epoch = broker_epoch
        self.on_updated: Callable | None = None
        self.on_failed: Callable | None = None
        self.timeout_ms = timeout_ms
        self._queued: dict[tuple[str, int], tuple[Partition, tuple[int, ...], int, int]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self, on_updated: Callable, on_failed: Callable) -> None:
        """``on_updated(partition, leader epoch, isr, partition epoch)`` and ``on_failed(partition, leader epoch,
        reason)`` are the replica manager's, given when it starts replication (it holds this manager)."""
        self.on_updated, self.on_failed = on_updated, on_failed
        self._task = asyncio.get_running_loop().create_task(self._run(), name="alter-partition")

    async def stop(self) -> None:
        await stop_tasks(self._task)

    def submit(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Propose ``isr`` for ``partition`` as of its current leader and partition epochs."""
        self._queued[(partition.topic, partition.index)] = (partition, isr, partition.leader_epoch,
                                                            partition.partition_epoch)
        self._wake.set()

    async def _run(self) -> None:
        wait = RETRY_S[0]
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._queued:
                continue
            batch, self._queued = self._queued, {}
            try:
                response = await self._request(batch)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the controller is unreachable or moving: asked again
                log.debug("AlterPartition to the controller failed (%s); retrying in %.2f s", e, wait)
                for key, item in batch.items():
                    self._queued.setdefault(key, item)  # a newer proposal made meanwhile wins
            else:
                self._handle(batch, response)
                if not self._queued:
                    wait = RETRY_S[0]
                    continue
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_S[1])
            self._wake.set()

    async def _request(self, batch: dict):
        controller = self.controller_id()
        if controller < 0:
            raise NotControllerError("no controller is known yet")
        topics: dict = {}
        for partition, isr, leader_epoch, partition_epoch in batch.values():
            topics.setdefault(partition.topic_id, []).append({
                "partition_index": partition.index, "leader_epoch": leader_epoch, "new_isr": list(isr),
                "leader_recovery_state": LEADER_RECOVERED, "partition_epoch": partition_epoch})
        response = await self.channel.request(controller, ApiKey.ALTER_PARTITION, {
            "broker_id": self.node_id, "broker_epoch": self.broker_epoch(),
            "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]},
            max_version=2, timeout_ms=self.timeout_ms)
        if response.error_code.value:
            raise error_for_code(response.error_code.value)(f"AlterPartition refused: {response.error_code.name}")
        return response

    def _handle(self, batch: dict, response) -> None:
        """Apply the controller's answer; what it did not accept yet is queued again."""
        by_key = {(partition.topic_id, partition.index): (partition, leader_epoch)
                  for partition, _, leader_epoch, _ in batch.values()}
        for t in response.topics:
            for p in t.partitions:
                found = by_key.pop((t.topic_id, int(p.partition_index)), None)
                if found is None:
                    continue
                partition, leader_epoch = found
                code = p.error_code.value
                if code == 0:
                    self.on_updated(partition, leader_epoch, tuple(int(r) for r in p.isr), int(p.partition_epoch))
                elif error_for_code(code).retriable and code != FencedLeaderEpochError.code:  # asked again
                    self._queued.setdefault((partition.topic, partition.index),
                                            (partition, partition.pending_isr or partition.isr, leader_epoch,
                                             partition.partition_epoch))
                else:
                    self.on_failed(partition, leader_epoch, describe_error(code))
        for partition, leader_epoch in by_key.values():  # not answered: asked again
            if partition.pending_isr is not None:
                self._queued.setdefault((partition.topic, partition.index),
                                        (partition, partition.pending_isr, leader_epoch, partition.partition_epoch))


__all__ = ["AlterPartitionManager"]
