"""A node assembled in-process from the broker's own services, for tests that need no subprocess and no
socket: real logs in a temporary folder, the controller, and tiered storage with the filesystem store and
the in-memory metadata manager, wired as the composition root (server/broker.py) wires them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierlog.cluster import BrokerImage, Controller, FileMetadataStore, ensure_meta_properties
from tierlog.config import BrokerConfig
from tierlog.records import build_batch
from tierlog.server.partition import Partition
from tierlog.server.replica_manager import ReplicaManager
from tierlog.storage import LogManager
from tierlog.tiered.remote_log_manager import RemoteLogManager, build_remote_log_manager
from tierlog.tiered.rlmm.memory import InMemoryRemoteLogMetadataManager
from tierlog.tiered.rsm import create_remote_storage_manager

NODE = 1
TS0 = 1_700_000_000_000


@dataclass
class Node:
    controller: Controller
    log_manager: LogManager
    rlm: RemoteLogManager
    rm: ReplicaManager

    async def close(self) -> None:
        await self.rlm.close()
        self.rlm.rsm.close()
        self.rm.shutdown()
        self.log_manager.shutdown()


async def assemble(tmp_path, **settings) -> Node:
    """What the broker's composition root builds, minus the network: on the running event loop."""
    log_dir = str(tmp_path / "logs")
    cfg = BrokerConfig({"node.id": str(NODE), "log.dirs": log_dir, "remote.log.storage.system.enable": "true",
                        "rsm.config.dir": str(tmp_path / "remote"), "remote.log.manager.task.interval.ms": "3600000",
                        **settings})
    cluster_id = ensure_meta_properties([log_dir], NODE, None)
    controller = Controller(cfg, FileMetadataStore(log_dir), BrokerImage(NODE, "127.0.0.1", 9092), cluster_id)
    lm = LogManager([log_dir], controller.log_config)
    lm.startup()
    rsm = create_remote_storage_manager("filesystem", {"dir": str(tmp_path / "remote"), "fsync.enable": "false"})
    rlm = build_remote_log_manager(cfg, NODE, rsm, InMemoryRemoteLogMetadataManager(), log_dir,
                                   effective_config=lambda: controller.effective_config)
    rm = ReplicaManager(NODE, lm, controller, rlm, lambda: controller.effective_config)
    rm.load(controller.image)
    controller.add_listener(rm.on_metadata_update)
    return Node(controller, lm, rlm, rm)


def produce(node: Node, topic: str, count: int, partition: int = 0, size: int = 200) -> None:
    for i in range(count):
        batch = build_batch([(b"k%d" % i, bytes([i % 251]) * size, [], TS0 + i)])
        assert node.rm.append_records(topic, partition, batch, acks=-1)["base_offset"] == i


async def tier(node: Node, partition: Partition) -> None:
    """Copy every rolled segment now and let local retention drop what was copied."""
    tp = node.rlm.topic_id_partition(partition)
    node.rlm.cancel(tp)  # the periodic tasks would race the explicit run
    await node.rlm.run_copy(tp)
    partition.log.delete_old_segments()
