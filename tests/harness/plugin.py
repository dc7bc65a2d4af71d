"""The pytest plugin of the live-process harness: shared fixtures and suite-wide hooks.

tests/conftest.py registers it once (``pytest_plugins``), so every suite and a single test file run
alone see the same fixtures; no conftest imports fixtures from another.

Fixtures:

- ``start_broker(settings=None, **overrides)``: starts a private ``tierlog broker`` (settings as a dict
  of Kafka keys, or keyword arguments with dots written as underscores) and returns its
  :class:`~tests.harness.broker.BrokerProcess`; every broker it started is killed at teardown.
  ``broker`` is a ready one with default settings.
- ``kafka_jars``: Apache Kafka's jars (skips locally, fails in CI without Java/Maven); ``kafka_kip1023_jars``
  those of the release the KIP-1023 cases run (4.4, the same jars: KIP-1023 shipped in 4.3).
- ``kafka_peer``: one single-node KRaft Apache Kafka for the session; ``kafka_peer_tiered`` the same
  with tiered storage through Kafka's LocalTieredStorage (started only when a test asks for it).
- ``tierlog_peer``: one ``tierlog broker`` for the session with the same static settings as
  ``kafka_peer``; ``peer`` is parametrized over both, for tests that must pass against either.
- ``kafka_tool(cls, *args, input=None, check=True)``: one of Kafka's command-line classes run in the
  session's long-lived tool JVM (``kafka_tool_runner``).
- ``kafka_zk_jars``: the jars of Apache Kafka 3.9, the last release with ZooKeeper mode (the peer of
  tierlog's ZooKeeper clusters: ``apache_kafka.start_kafka_zk_cluster``); ``kafka_zk_tool`` runs one of
  its command-line classes in a session JVM of its own (``kafka_zk_tool_runner``).
- ``moto_s3``: a moto S3 server for the module with bucket ``tiered``; its endpoint URL (for faults a real
  server cannot make). ``seaweedfs_s3`` and ``s3proxy_s3``: a real S3 server for the module with bucket
  ``tiered`` (tests/harness/s3_servers.py); ``real_s3`` is parametrized over both.
- ``zookeeper``: one ZooKeeper for the session (one per pytest-xdist worker), on 127.0.0.1 and a free
  port with a 200 ms tick (sessions from 400 ms); tests keep apart by chroot. ``zookeeper_connect`` is
  its ``zookeeper.connect`` under a fresh chroot, per test (tests/harness/zookeeper.py). Without Java or
  ZooKeeper they skip locally and fail in CI.

Hooks: brokers a test started and left running are killed after it, and every broker still running at
the end of the session (in each pytest-xdist worker, which runs this plugin too). A run that collects
nothing fails (exit status 1, not pytest's 5). Under pytest-xdist with ``--dist loadgroup``, tests that
share a JVM (the Spark session, Apache Kafka) or a module-scoped fixture run on one worker, so each JVM
and each module fixture starts once (see ``xdist_groups`` and the scheduler below).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.harness import apache_kafka, s3_servers
from tests.harness import zookeeper as zk
from tests.harness.broker import BrokerProcess
from tests.harness.s3 import moto_server

# ------------------------------------------------------------------------------------------ brokers


@pytest.fixture
def start_broker(tmp_path):
    started: list[BrokerProcess] = []

    def _start(settings: dict | None = None, **overrides) -> BrokerProcess:
        merged = {**(settings or {}), **{k.replace("_", "."): str(v) for k, v in overrides.items()}}
        b = BrokerProcess(tmp_path / f"logs{len(started)}", merged)
        started.append(b)
        return b.start()

    yield _start
    for b in started:
        b.kill()


@pytest.fixture
def broker(start_broker) -> BrokerProcess:
    return start_broker()


@pytest.fixture(autouse=True)
def _no_stray_brokers():
    """Kill the brokers a test started itself and left running (a failed assertion before its
    ``stop()``); brokers of module or session fixtures were started before this runs, or are marked
    ``BrokerProcess.shared`` when a test added them to a fixture's cluster."""
    before = set(BrokerProcess.running)
    yield
    BrokerProcess.kill_running(keep=before | BrokerProcess.shared)


# ------------------------------------------------------------------------------ Apache Kafka peer


@pytest.fixture(scope="session")
def kafka_jars():
    return apache_kafka.resolve_jars()


@pytest.fixture(scope="session")
def kafka_kip1023_jars():
    """The jars of ``apache_kafka.KIP1023_KAFKA_VERSION`` (4.4, the default peer; KIP-1023 shipped in 4.3)."""
    return apache_kafka.resolve_jars(apache_kafka.KIP1023_KAFKA_VERSION)


@pytest.fixture(scope="session")
def kafka_peer(kafka_jars, tmp_path_factory):
    kafka = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka"), "kafka")
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def kafka_peer_tiered(kafka_jars, tmp_path_factory):
    kafka = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-tiered"), "kafka-tiered", tiered=True)
    yield kafka
    kafka.stop()


@pytest.fixture(scope="session")
def tierlog_peer(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog") / "logs", dict(apache_kafka.SHARED_SETTINGS))
    b.start()
    # ``peer`` reaches it through request.getfixturevalue, after the stray-broker sweep of the test began: without
    # this, the first test to start it would kill it at its end, and the session's next tests find it gone
    BrokerProcess.shared.add(b)
    yield b
    BrokerProcess.shared.discard(b)
    b.stop()


@pytest.fixture(scope="session")
def tierlog_tiered(tmp_path_factory):
    """A tiering ``tierlog broker`` for the session, the counterpart of ``kafka_peer_tiered`` (the same task
    and retention-check intervals)."""
    root = tmp_path_factory.mktemp("tierlog-tiered")
    b = BrokerProcess(root / "logs", {
        "remote.log.storage.system.enable": "true", "rsm.config.dir": str(root / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500",
        "num.partitions": "1"}).start()
    yield b
    b.stop()


@pytest.fixture(params=["kafka", "tierlog"])
def peer(request):
    """Each peer in turn: a test passing against Kafka proves it checks the right thing."""
    return request.getfixturevalue(f"{request.param}_peer")


@pytest.fixture(scope="session")
def kafka_tool_runner(kafka_jars):
    runner = apache_kafka.kafka_peer_module.ToolRunner()
    yield runner
    runner.close()


@pytest.fixture
def kafka_tool(kafka_tool_runner):
    """``kafka_tool(cls, *args, input=None, check=True)``: a Kafka tool run in the shared tool JVM."""
    return kafka_tool_runner.run


@pytest.fixture(scope="session")
def kafka_zk_jars():
    return apache_kafka.resolve_zk_jars()


@pytest.fixture(scope="session")
def kafka_zk_tool_runner(kafka_zk_jars):
    runner = apache_kafka.kafka_peer_module.ToolRunner(version=apache_kafka.ZK_KAFKA_VERSION)
    yield runner
    runner.close()


@pytest.fixture
def kafka_zk_tool(kafka_zk_tool_runner):
    """``kafka_zk_tool(cls, *args, input=None, check=True)``: a Kafka 3.9 tool run in its shared tool JVM."""
    return kafka_zk_tool_runner.run


# ------------------------------------------------------------------------------------------ S3


@pytest.fixture(scope="module")
def moto_s3():
    """A moto S3 server on a free local port with bucket ``tiered``; yields its endpoint URL."""
    with moto_server("tiered") as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def seaweedfs_s3(tmp_path_factory):
    """SeaweedFS (``weed server`` with its S3 gateway) for the module, bucket ``tiered``; an S3Server."""
    with s3_servers.s3_server("seaweedfs", tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="module")
def s3proxy_s3(tmp_path_factory):
    """S3Proxy (filesystem backend, v4 signatures) for the module, bucket ``tiered``; an S3Server."""
    with s3_servers.s3_server("s3proxy", tmp_path_factory.mktemp("s3proxy")) as server:
        yield server


@pytest.fixture(scope="module", params=s3_servers.KINDS)
def real_s3(request):
    """Each real S3 server in turn (module-scoped: one server of each kind per module)."""
    return request.getfixturevalue(f"{request.param}_s3")


# ------------------------------------------------------------------------------------------ ZooKeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A ZooKeeperServer (tierlog.tools.zookeeper) for the session; ``.connect`` is ``127.0.0.1:<port>``."""
    server = zk.start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    print(f"\nZooKeeper ready on {server.connect} in {server.start_seconds:.1f}s")
    yield server
    zk.stop_zookeeper(server)


@pytest.fixture
def zookeeper_connect(zookeeper) -> str:
    """``127.0.0.1:<port>/t-<hex>``: the session's ZooKeeper under a chroot of this test's own."""
    return zk.connect_string(zookeeper, zk.unique_chroot())


# ------------------------------------------------------------------------------------------ hooks


def pytest_sessionfinish(session, exitstatus):
    BrokerProcess.kill_running()  # whatever a fixture's teardown did not reach
    apache_kafka.KafkaZkCluster.kill_running()
    apache_kafka.KafkaKRaftCluster.kill_running()
    zk.kill_running()
    s3_servers.kill_running()
    # A run that collected nothing must fail loudly: exit code 5 would otherwise read as "no tests".
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Fixtures that hold (or lead to) a JVM for the whole session, and the xdist group of their users:
#: every test of the session's Kafka brokers (``kafka_peer``, ``kafka_peer_tiered``, ``peer``) runs on one
#: worker, and every test needing the Spark session (1.6 GB) on one worker, so each JVM starts once per run.
#: Tests of Kafka 3.9 (ZooKeeper mode) share a worker too: its tool JVM, and one multi-broker cluster at a time.
#: Kafka's jars alone (``kafka_jars``: files, resolved once under a lock) and the tool JVM (a few seconds to
#: start, one per worker) do not bind their users to one worker: grouped by the jars, 200 tests in 32 modules
#: ran one after another on one worker, the suite's longest path.
SHARED_JVMS = {"kafka_peer": "kafka", "kafka_peer_tiered": "kafka", "peer": "kafka", "spark": "spark",
               "kafka_zk_jars": "kafka-zk"}


def xdist_groups(items) -> dict:
    """item -> group name for the tests that must share a worker: those using the same JVM of
    ``SHARED_JVMS`` or the same module-scoped fixture, transitively (a module whose fixture needs
    Kafka joins the Kafka group). Tests sharing nothing costly are left free."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # "kafka" and "spark" sort before "tests/..."

    shared: dict = {}
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        keys = {SHARED_JVMS[name] for name in item.fixturenames if name in SHARED_JVMS}
        for name in item.fixturenames:
            defs = info.name2fixturedefs.get(name)
            if defs and defs[-1].scope == "module":
                keys.add(item.nodeid.split("::", 1)[0])
        if keys:
            first, *rest = sorted(keys)
            for k in rest:
                union(first, k)
            shared[item] = first
    return {item: find(key) for item, key in shared.items()}


# pytest-xdist's own ``--dist loadgroup`` passes a group from the workers to the scheduler by appending it
# to the test's node id, which pytest 9.2 no longer lets a plugin change (pytest-xdist issue 1386): the
# groups are silently ignored. So under ``--dist loadgroup`` the harness schedules itself: each worker
# writes its groups (the ones above, and any explicit ``xdist_group`` mark) to a file in a folder the
# controller made, before it reports its collection; the scheduler, pytest-xdist's scope scheduler,
# sends each group to one worker as one unit of work, and every other test on its own.
_GROUPS_DIR = pytest.StashKey[str]()
_WORKERINPUT_KEY = "tierlog_xdist_groups"


def _groups_dir(config) -> str:
    if _GROUPS_DIR not in config.stash:
        config.stash[_GROUPS_DIR] = tempfile.mkdtemp(prefix="tierlog-xdist-groups-")
    return config.stash[_GROUPS_DIR]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if node.config.getvalue("dist") == "loadgroup":
        node.workerinput[_WORKERINPUT_KEY] = _groups_dir(node.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    groups_dir = Path(_groups_dir(config))

    class SharedResourceScheduling(LoadScopeScheduling):
        """pytest-xdist's scope scheduler with the harness's groups as scopes (a test in no group is
        its own scope)."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # every worker has written its file before reporting its collection
                self.groups = {}
                for f in sorted(groups_dir.glob("*.json")):
                    self.groups.update(json.loads(f.read_text()))
            return self.groups.get(nodeid, nodeid)

    return SharedResourceScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reports the collection to the controller
def pytest_collection_finish(session):
    folder = getattr(session.config, "workerinput", {}).get(_WORKERINPUT_KEY)
    if folder is None:
        return
    groups = {item.nodeid: group for item, group in xdist_groups(session.items).items()}
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[item.nodeid] = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    target = Path(folder) / f"{session.config.workerinput['workerid']}.json"
    staging = target.with_suffix(".tmp")
    staging.write_text(json.dumps(groups))
    staging.replace(target)


def pytest_unconfigure(config):
    if _GROUPS_DIR in config.stash:
        shutil.rmtree(config.stash[_GROUPS_DIR], ignore_errors=True)


@pytest.fixture(scope="session")
def java_client_command():
    """The command running Kafka's Java clients through tests/harness/java/RebootstrapClient.java (compiled
    once per session)."""
    from tests.harness.java_clients import rebootstrap_client_command
    return rebootstrap_client_command()


@pytest.fixture
def java(java_client_command, tmp_path):
    """``java(settings)``: a JavaClients driver with those client settings, closed after the test."""
    from tests.harness.java_clients import JavaClients
    made: list = []

    def _make(settings: dict):
        c = JavaClients(java_client_command, settings, tmp_path / f"java{len(made)}.log")
        made.append(c)
        return c

    yield _make
    for c in made:
        c.close()
