"""The controller election against a real ZooKeeper, in process: an election whose answer was lost.

Found by scripts/jepsen_replication.py (seed 41, a zk-cut and then a ZooKeeper restart): a broker's election
transaction was applied by ZooKeeper but its answer never came back (the connection dropped), so
``/controller`` named that broker, in its own live session, while the broker did not know it was the controller.
Every other broker saw a controller and waited; nobody pushed metadata again and the cluster never formed. Kafka's
registerControllerAndIncrementControllerEpoch takes such a ``/controller`` as its own; tierlog now does too."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import ConnectionLoss

from tests.harness.waiting import wait_until_async
from tierlog.cluster.image import BrokerImage
from tierlog.cluster.zk_controller import ZkController
from tierlog.cluster.zookeeper import ZkClient
from tierlog.config import BrokerConfig


class AnswerLost(ZkClient):
    """Applies the first election transaction, then raises what kazoo raises when the answer never came."""

    lost = 0

    def try_become_controller(self, broker_id):
        fence = super().try_become_controller(broker_id)
        if not self.lost:
            self.lost += 1
            raise ConnectionLoss()
        return fence


def test_a_controller_election_whose_answer_was_lost_is_taken_up(zookeeper_connect, tmp_path):
    async def main():
        zk = AnswerLost(zookeeper_connect, 6000, None)
        await asyncio.get_running_loop().run_in_executor(None, zk.start)
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "zookeeper.connect": zookeeper_connect,
                                       "broker.id": "1"})
        controller = ZkController(cfg, zk, BrokerImage(1, "127.0.0.1", 9092), "cluster-id")
        try:
            await controller.start(channel=None)
            controller.begin_election()
            await wait_until_async(lambda: controller.is_active, 30, what="broker 1 the active controller")
            assert zk.lost == 1 and zk.controller_id() == 1
            assert controller.fence.epoch == zk.controller_epoch() == controller.controller_epoch
        finally:
            await controller.stop()
            zk.close()
    asyncio.run(main())
