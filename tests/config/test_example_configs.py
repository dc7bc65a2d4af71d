"""The example configurations under config/: each parses with BrokerConfig and uses only keys tierlog knows;
the three brokers of config/cluster/ form one cluster (one ZooKeeper chroot, one shared remote folder) and
never share an id, a port or a log dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.config import BrokerConfig

CONFIG = Path(__file__).resolve().parents[2] / "config"
EXAMPLES = sorted(CONFIG.rglob("*.properties"))
CLUSTER = sorted((CONFIG / "cluster").glob("broker-*.properties"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(CONFIG)))
def test_example_parses_with_known_keys_only(path):
    cfg = BrokerConfig.load(path)
    assert cfg.unknown_keys == frozenset(), path


def test_the_cluster_examples_are_three_brokers_of_one_cluster():
    assert [p.name for p in CLUSTER] == ["broker-1.properties", "broker-2.properties", "broker-3.properties"]
    configs = [BrokerConfig.load(p) for p in CLUSTER]
    assert all(cfg.zookeeper_mode for cfg in configs)
    assert {cfg["zookeeper.connect"] for cfg in configs} == {"127.0.0.1:2181/tierlog"}
    assert [cfg["broker.id"] for cfg in configs] == [cfg["node.id"] for cfg in configs] == [1, 2, 3]
    assert [(lst.host, lst.port) for cfg in configs for lst in cfg.listeners] == [
        ("127.0.0.1", 9092), ("127.0.0.1", 9093), ("127.0.0.1", 9094)]
    assert len({cfg["metrics.port"] for cfg in configs}) == 3
    assert not {9092, 9093, 9094} & {cfg["metrics.port"] for cfg in configs}
    dirs = [d for cfg in configs for d in cfg.log_dirs]
    assert len(set(dirs)) == len(dirs) == 3
    assert all(not a.startswith(b) and not b.startswith(a) for a in dirs for b in dirs if a != b)  # none nested
    # tiered storage to one folder the three share
    assert all(cfg["remote.log.storage.system.enable"] for cfg in configs)
    assert {cfg["remote.log.storage.manager.class.name"] for cfg in configs} == {"filesystem"}
    assert len({cfg.rsm_config()["dir"] for cfg in configs}) == 1
    assert all(cfg["offsets.topic.replication.factor"] == 3 for cfg in configs)
