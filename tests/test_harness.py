"""The harness's own rules (tests/harness/plugin.py): brokers a test leaves running are killed, a run that
collects nothing fails, and tests sharing a JVM or a module fixture share a pytest-xdist worker.

The end-to-end checks run pytest in a subprocess on small test files written here, with the plugin
loaded by ``-p`` as tests/conftest.py loads it, serially and with two xdist workers.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.harness import ROOT
from tests.harness.cluster_shapes import differences, metadata_shape
from tests.harness.plugin import xdist_groups


class _Item:
    """What ``xdist_groups`` reads of a collected test: its id, fixtures and their scopes."""

    def __init__(self, nodeid: str, fixtures: list[str], module_scoped: tuple[str, ...] = ()):
        defs = {n: [SimpleNamespace(scope="module" if n in module_scoped else "function")] for n in fixtures}
        self.nodeid, self.fixturenames, self._fixtureinfo = nodeid, fixtures, SimpleNamespace(name2fixturedefs=defs)


def test_tests_sharing_a_jvm_or_a_module_fixture_share_a_group():
    peer = _Item("tests/peer/test_a.py::t", ["kafka_peer", "kafka_jars", "tmp_path"])
    tiered = _Item("tests/peer/test_a2.py::t", ["kafka_peer_tiered", "kafka_jars"])
    both = _Item("tests/peer/test_c.py::t[kafka]", ["peer"])
    # test_d.py's module fixture needs the session's Kafka in one test: the whole module joins the Kafka group.
    module_only = _Item("tests/peer/test_d.py::t1", ["shared"], module_scoped=("shared",))
    module_kafka = _Item("tests/peer/test_d.py::t2", ["shared", "kafka_peer"], module_scoped=("shared",))
    # Kafka's jars or the tool JVM alone bind nothing: resolved once under a lock, a tool JVM a worker
    tool = _Item("tests/server/test_b.py::t", ["kafka_tool", "kafka_tool_runner", "kafka_jars"])
    jars_module = _Item("tests/client/test_j.py::t", ["kafka", "kafka_jars"], module_scoped=("kafka",))
    own_module = _Item("tests/client/test_e.py::t1", ["shared", "tmp_path"], module_scoped=("shared",))
    own_module2 = _Item("tests/client/test_e.py::t2", ["shared"], module_scoped=("shared",))
    spark = _Item("tests/spark/test_f.py::t", ["spark", "spark_kafka_jars", "broker"])
    free = _Item("tests/server/test_g.py::t", ["broker", "start_broker", "tmp_path"])
    # Kafka 3.9 (ZooKeeper mode): its tool JVM and its module-scoped clusters, on one worker
    zk_tool = _Item("tests/peer/test_h.py::t", ["kafka_zk_tool", "kafka_zk_tool_runner", "kafka_zk_jars"])
    zk_cluster = _Item("tests/peer/test_i.py::t", ["kafka39", "zookeeper", "kafka_zk_jars"], module_scoped=("kafka39",))
    groups = xdist_groups([peer, tiered, both, module_only, module_kafka, tool, jars_module, own_module, own_module2,
                           spark, free, zk_tool, zk_cluster])
    assert {groups[i] for i in (peer, tiered, both, module_only, module_kafka)} == {"kafka"}
    assert tool not in groups
    assert groups[jars_module] == "tests/client/test_j.py"
    assert groups[own_module] == groups[own_module2] == "tests/client/test_e.py"
    assert groups[spark] == "spark"
    assert free not in groups
    assert groups[zk_tool] == groups[zk_cluster] == "kafka-zk"


def test_metadata_shape_keeps_what_two_clusters_share():
    def partition(index, leader, replicas, isr, offline=(), error=0):
        return {"partition_index": index, "leader_id": leader, "replica_nodes": replicas, "isr_nodes": isr,
                "offline_replicas": list(offline), "error_code": error}

    kafka = {"brokers": [{"node_id": 3}, {"node_id": 1}], "controller_id": 3, "topics": [
        {"name": "t", "error_code": 0, "is_internal": False, "partitions": [
            partition(1, -1, [2], [], offline=[2], error=5), partition(0, 3, [3, 1, 2], [3, 1], offline=[2])]},
        {"name": "__consumer_offsets", "error_code": 0, "is_internal": True, "partitions": []}]}
    shape = metadata_shape(kafka)
    assert shape == {"brokers": 2, "controller": True, "topics": {"t": {"error": 0, "partitions": {
        0: {"leader": 1, "replicas": 3, "isr": 2, "offline": 1, "error": 0},
        1: {"leader": "none", "replicas": 1, "isr": 0, "offline": 1, "error": 5}}}}}
    assert "__consumer_offsets" in metadata_shape(kafka, include_internal=True)["topics"]
    # other broker ids, the same shape; a leader on the other broker is a difference
    tierlog = {**kafka, "brokers": [{"node_id": 7}, {"node_id": 9}], "controller_id": -1, "topics": [
        {"name": "t", "error_code": 0, "partitions": [partition(0, 7, [9, 7, 8], [9, 7], [8])]}]}
    assert differences(shape, metadata_shape(tierlog)) == [
        "controller: True != False", "topics.t.partitions.0.leader: 1 != 0",
        "topics.t.partitions.1: missing on the right"]
    # an ISR of the leader alone (tierlog before replication) against Kafka's: the same with isr="leader"
    alone = {**kafka, "topics": [{"name": "t", "error_code": 0, "partitions": [
        partition(1, -1, [2], [2], offline=[2], error=5), partition(0, 3, [3, 1, 2], [3], offline=[2])]}]}
    assert differences(metadata_shape(kafka), metadata_shape(alone)) == [
        "topics.t.partitions.0.isr: 2 != 1", "topics.t.partitions.1.isr: 0 != 1"]
    assert differences(metadata_shape(kafka, isr="leader"), metadata_shape(alone, isr="leader")) == [
        "topics.t.partitions.1.isr: 0 != 1"]
    assert metadata_shape(kafka, isr="leader")["topics"]["t"]["partitions"][0]["isr"] == "leader in"


LEAKS = '''
import ast
import os
from pathlib import Path

import pytest

from tests.harness.broker import BrokerProcess

OUT = Path(os.environ["HARNESS_OUT"])
left: list = []


@pytest.fixture(scope="session")
def forgotten(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("session") / "logs", {}).start()
    (OUT / f"pid-{b.proc.pid}").touch()
    return b  # never stopped: the end of the session kills it


def test_leaves_a_broker_running(tmp_path, forgotten):
    b = BrokerProcess(tmp_path / "logs", {}).start()
    (OUT / f"pid-{b.proc.pid}").touch()
    left.append(b)


def test_the_left_broker_is_gone():
    if not left:
        pytest.skip("ran on another worker")
    assert left[0].proc.poll() is not None
'''

GROUPED = '''
import ast
import os
from pathlib import Path

import pytest

OUT = Path(os.environ["HARNESS_OUT"])


@pytest.fixture(scope="module")
def shared():
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@pytest.mark.parametrize("i", range(6))
def test_uses_the_module_fixture(shared, i):
    (OUT / f"worker-{i}-{shared}").touch()
'''


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    for name, source in (("test_leaks.py", LEAKS), ("test_grouped.py", GROUPED)):
        (tmp_path / name).write_text(textwrap.dedent(source))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "HARNESS_OUT": str(out), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.harness.plugin", "-p", "no:cacheprovider",
                           "-q", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadgroup"]], ids=["serial", "xdist"])
def test_left_brokers_are_killed_and_groups_share_a_worker(tmp_path, workers):
    if workers:
        pytest.importorskip("xdist")
    proc = _pytest(tmp_path, *workers)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pids = [int(f.name.split("-")[1]) for f in (tmp_path / "out").glob("pid-*")]
    assert len(pids) == 2 and not any(_alive(p) for p in pids)
    workers_seen = {f.name.split("-", 2)[2] for f in (tmp_path / "out").glob("worker-*")}
    assert len(workers_seen) == 1, workers_seen


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_run_that_collects_nothing_fails(tmp_path, workers):
    if workers:
        pytest.importorskip("xdist")
    proc = _pytest(tmp_path, "-k", "no_such_test", *workers)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout + proc.stderr


def _imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) for every import in ``path`` (name None for ``import module``), relative imports
    resolved against its package."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            found += [(base, alias.name) for alias in node.names]
    return found


def _is_test_module_or_conftest(module: str) -> bool:
    name = module.rsplit(".", 1)[-1]
    return module.startswith("tests.") and (name.startswith("test_") or name == "conftest")


def test_no_test_module_imports_a_test_module_or_a_conftest():
    """Shared helpers live in tests/harness or a suite's lib module, never in a test module or a conftest."""
    offences = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for module, name in _imports(path):
            if name is not None and _is_test_module_or_conftest(f"{module}.{name}"):
                offences.append(f"{path.relative_to(ROOT)} imports {module}.{name}")  # from tests.x import test_y
            elif _is_test_module_or_conftest(module):
                offences.append(f"{path.relative_to(ROOT)} imports {module}" + (f" {name}" if name else ""))
    assert not offences, "\n".join(offences)
