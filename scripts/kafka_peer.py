#!/usr/bin/env python3
"""Apache Kafka as a reference peer: resolve it from Maven Central, run its tools, run a broker.

Kafka 4.4 (KRaft) is the peer of the single-node broker and of the KRaft clusters, the default everywhere
(it has KIP-1023, ``follower.fetch.last.tiered.offset.enable``, shipped in 4.3, and the tiered-storage KIPs
of 4.3-4.4; ``KIP1023_KAFKA_VERSION`` and ``LATEST_KAFKA_VERSION`` name it too); Kafka 3.9, the last release
with ZooKeeper mode, is the peer of tierlog's ZooKeeper clusters; Kafka 4.1 (``APPS_KAFKA_VERSION``) is only
tests/apps' broker and applications (Kafka Streams, Connect's runtime and its file connectors: Maven Central
has no ``connect-file`` 4.4.0, and Streams 4.1 did not recover from a 4.4 broker's SIGKILL), the
applications a third artifact set in 4.1's folder (``apps/``: ``resolve_apps``, ``apps_classpath``).
Nothing from Kafka lives in the repository. The jars are copied by Maven into a cache folder per release
outside it (``~/.cache/tierlog/kafka-<version>``, or ``$TIERLOG_KAFKA_CACHE``, ``$TIERLOG_KAFKA_APPS_CACHE``
and ``$TIERLOG_KAFKA_ZK_CACHE``) the first time they are needed, from a pom this script writes into that
folder; a changed pom resolves the folder again.

Command line::

    scripts/kafka_peer.py resolve               # resolve the three releases (and 4.1's Streams and Connect)
    scripts/kafka_peer.py classpath             # resolve 4.4 if needed, print the classpath
    scripts/kafka_peer.py tool TopicCommand --bootstrap-server 127.0.0.1:9092 --list
    scripts/kafka_peer.py zk-tool TopicCommand --bootstrap-server 127.0.0.1:9092 --describe   # 3.9's tools
    scripts/kafka_peer.py server [--tiered]   # a single-node KRaft broker until Ctrl-C

From Python (the tests load this file with importlib)::

    run_tool("TopicCommand", "--bootstrap-server", bootstrap, "--list")
    run_tool("TopicCommand", ..., version=ZK_KAFKA_VERSION)      # Kafka 3.9's tool
    with KafkaServer(tmp_dir, tiered=True) as kafka:
        kafka.bootstrap   # "127.0.0.1:<port>"
    KafkaZkBroker(tmp_dir, 1, "127.0.0.1:2181/kafka").start()    # one 3.9 broker in ZooKeeper mode

Every server runs on 127.0.0.1 and is stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

KAFKA_VERSION = "4.4.0"
#: KIP-1023 (an empty follower starts after the leader's last tiered offset) shipped in 4.3; 4.4 has it.
KIP1023_KAFKA_VERSION = KAFKA_VERSION
#: The newest release: KIP-848 consumer groups, share groups (KIP-932, KIP-1191), ApiVersions v5 (KIP-1242).
LATEST_KAFKA_VERSION = KAFKA_VERSION
#: Kafka Streams and Connect (tests/apps) and the broker they run against: 4.1, since Maven Central has no
#: org.apache.kafka:connect-file:4.4.0 (and Streams 4.1 against a 4.4 broker did not recover from the broker's
#: SIGKILL in tests/apps/test_kafka_streams.py; one release for the applications and their broker).
APPS_KAFKA_VERSION = "4.1.0"
#: The KRaft releases, each with its own cache folder and the same code path: 4.4 for everything but tests/apps.
KRAFT_VERSIONS = (KAFKA_VERSION, APPS_KAFKA_VERSION)
SCALA_VERSION = "2.13"
#: The last Kafka release with ZooKeeper mode (4.0 removed it): the reference for tierlog's ZooKeeper clusters.
ZK_KAFKA_VERSION = "3.9.1"
#: The logging Kafka 3.9 ships with (log4j 1.2's API on reload4j, through slf4j).
ZK_SLF4J_VERSION = "1.7.36"
ZK_RELOAD4J_VERSION = "1.2.25"
#: The log4j2 each KRaft release itself depends on (its backend is not among Kafka's runtime dependencies).
LOG4J_VERSIONS = {KAFKA_VERSION: "2.25.4", APPS_KAFKA_VERSION: "2.24.3"}
#: The variable that moves each release's cache folder.
CACHE_ENV = {KAFKA_VERSION: "TIERLOG_KAFKA_CACHE", APPS_KAFKA_VERSION: "TIERLOG_KAFKA_APPS_CACHE",
             ZK_KAFKA_VERSION: "TIERLOG_KAFKA_ZK_CACHE"}
REPO_ROOT = Path(__file__).resolve().parents[1]

# Short names for Kafka's command-line classes (4.x moved most of them to kafka-tools).
TOOLS = {
    "TopicCommand": "org.apache.kafka.tools.TopicCommand",
    "ConfigCommand": "org.apache.kafka.tools.ConfigCommand",  # kafka.admin in 4.1
    "ConsoleProducer": "org.apache.kafka.tools.ConsoleProducer",
    "ConsoleConsumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "GetOffsetShell": "org.apache.kafka.tools.GetOffsetShell",
    "ProducerPerformance": "org.apache.kafka.tools.ProducerPerformance",
    "ConsumerPerformance": "org.apache.kafka.tools.ConsumerPerformance",
    "DumpLogSegments": "org.apache.kafka.tools.DumpLogSegments",  # kafka.tools in 4.1
    "StorageTool": "kafka.tools.StorageTool",
    "ConsumerGroupCommand": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "DeleteRecordsCommand": "org.apache.kafka.tools.DeleteRecordsCommand",
    "LeaderElectionCommand": "org.apache.kafka.tools.LeaderElectionCommand",
    "LogDirsCommand": "org.apache.kafka.tools.LogDirsCommand",
    "TransactionsCommand": "org.apache.kafka.tools.TransactionsCommand",
    "AclCommand": "org.apache.kafka.tools.AclCommand",
    "Kafka": "kafka.Kafka",
    "ToolRunner": "ToolRunner",
}

# The same for Kafka 3.9 (ZooKeeper mode), whose tools sat in both kafka-tools and the core jar.
ZK_TOOLS = {
    "TopicCommand": "org.apache.kafka.tools.TopicCommand",
    "LeaderElectionCommand": "org.apache.kafka.tools.LeaderElectionCommand",
    "ReassignPartitionsCommand": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "ConfigCommand": "kafka.admin.ConfigCommand",
    "ConsoleProducer": "kafka.tools.ConsoleProducer",
    "ConsoleConsumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "ConsumerGroupCommand": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "GetOffsetShell": "org.apache.kafka.tools.GetOffsetShell",
    "DeleteRecordsCommand": "org.apache.kafka.tools.DeleteRecordsCommand",
    "DumpLogSegments": "kafka.tools.DumpLogSegments",
    "AclCommand": "kafka.admin.AclCommand",
    "Kafka": "kafka.Kafka",
    "ToolRunner": "ToolRunner",
}

# JVM options for short-lived tool processes: start fast rather than run fast.
TOOL_JVM_OPTS = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto"]
SERVER_JVM_OPTS = ["-Xmx512m", "-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]

LOG4J2_TOOLS = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.follow = true
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
"""

LOG4J2_SERVER = """\
status = error
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.controller.name = org.apache.kafka.controller
logger.controller.level = info
logger.raft.name = org.apache.kafka.raft
logger.raft.level = warn
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
"""


# Kafka 3.9 logs through log4j 1.2 (reload4j).
LOG4J_ZK_TOOLS = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""

LOG4J_ZK_SERVER = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.zookeeper=INFO
log4j.logger.kafka.controller=INFO
log4j.logger.state.change.logger=INFO
"""


class KafkaPeerError(RuntimeError):
    """Java or Maven is missing, resolution failed, or a Kafka process misbehaved."""


# --------------------------------------------------------------------------------------------- resolve

def cache_dir(version: str = KAFKA_VERSION) -> Path:
    """The folder holding a KRaft release's generated pom and ``lib/``; never inside the repository."""
    if _zk_mode(version):
        raise KafkaPeerError(f"Kafka {version} is the ZooKeeper-mode release: zk_cache_dir()")
    return _cache_dir(CACHE_ENV[version], version)


def zk_cache_dir() -> Path:
    """The same for Kafka 3.9 (ZooKeeper mode), beside it: ``kafka-3.9.1`` or ``$TIERLOG_KAFKA_ZK_CACHE``."""
    return _cache_dir(CACHE_ENV[ZK_KAFKA_VERSION], ZK_KAFKA_VERSION)


def _cache_dir(env_name: str, version: str) -> Path:
    env = os.environ.get(env_name)
    path = Path(env).expanduser() if env else Path.home() / ".cache" / "tierlog" / f"kafka-{version}"
    path = path.resolve()
    if path == REPO_ROOT or REPO_ROOT in path.parents:
        raise KafkaPeerError(f"the Kafka cache {path} is inside the repository; nothing from Kafka is committed")
    return path


def lib_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_dir(version) / "lib"


def _dependency(group: str, artifact: str, version: str, classifier: str | None = None) -> str:
    extra = f"\n      <classifier>{classifier}</classifier>" if classifier else ""
    return (f"    <dependency>\n      <groupId>{group}</groupId>\n      <artifactId>{artifact}</artifactId>\n"
            f"      <version>{version}</version>{extra}\n    </dependency>\n")


def _pom(artifact_id: str, description: str, deps: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by tierlog's scripts/kafka_peer.py: {description}. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.tierlog</groupId>
  <artifactId>{artifact_id}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}  </dependencies>
</project>
"""


def pom_xml(version: str = KAFKA_VERSION) -> str:
    """A KRaft release's broker, its tools, LocalTieredStorage and the log4j2 backend it was built with."""
    cache_dir(version)  # a KRaft release, or KafkaPeerError
    log4j = LOG4J_VERSIONS[version]
    deps = "".join([
        _dependency("org.apache.kafka", f"kafka_{SCALA_VERSION}", version),
        _dependency("org.apache.kafka", "kafka-tools", version),
        # LocalTieredStorage (the file-system RemoteStorageManager Kafka's own tests use) ships in
        # kafka-storage's test-fixtures jar in 4.4, in its test jar before.
        _dependency("org.apache.kafka", "kafka-storage", version,
                    classifier="test" if version == APPS_KAFKA_VERSION else "test-fixtures"),
        _dependency("org.apache.logging.log4j", "log4j-slf4j-impl", log4j),
        _dependency("org.apache.logging.log4j", "log4j-core", log4j),
    ])
    artifact = "kafka-peer" if version == KAFKA_VERSION else f"kafka-peer-{version}"
    return _pom(artifact, f"Apache Kafka {version} as a test peer", deps)


def zk_pom_xml() -> str:
    """Kafka 3.9's broker (its runtime dependencies bring the ZooKeeper client), its tools (TopicCommand and
    the others moved to kafka-tools in 3.x) and the log4j 1.2 backend its distribution ships."""
    deps = "".join([
        _dependency("org.apache.kafka", f"kafka_{SCALA_VERSION}", ZK_KAFKA_VERSION),
        _dependency("org.apache.kafka", "kafka-tools", ZK_KAFKA_VERSION),
        _dependency("org.slf4j", "slf4j-reload4j", ZK_SLF4J_VERSION),
        _dependency("ch.qos.reload4j", "reload4j", ZK_RELOAD4J_VERSION),
    ])
    return _pom("kafka-zk-peer", f"Apache Kafka {ZK_KAFKA_VERSION} in ZooKeeper mode as a test peer", deps)


def apps_cache_dir() -> Path:
    """Kafka 4.1's applications (Kafka Streams with RocksDB, Connect's runtime and its file connectors), a
    cache folder of their own inside 4.1's: ``~/.cache/tierlog/kafka-4.1.0/apps``."""
    return cache_dir(APPS_KAFKA_VERSION) / "apps"


def apps_pom_xml() -> str:
    """Kafka Streams, Connect's distributed worker, FileStreamSourceConnector and the log4j2 backend, all 4.1."""
    deps = "".join([
        _dependency("org.apache.kafka", "kafka-streams", APPS_KAFKA_VERSION),
        _dependency("org.apache.kafka", "connect-runtime", APPS_KAFKA_VERSION),
        _dependency("org.apache.kafka", "connect-file", APPS_KAFKA_VERSION),
        _dependency("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSIONS[APPS_KAFKA_VERSION]),
        _dependency("org.apache.logging.log4j", "log4j-core", LOG4J_VERSIONS[APPS_KAFKA_VERSION]),
    ])
    return _pom("kafka-apps", f"Kafka Streams and Kafka Connect {APPS_KAFKA_VERSION} as test applications", deps)


def resolve_apps(verbose: bool = False) -> list[Path]:
    """Kafka 4.1's Streams and Connect jars, downloading them with Maven when their cache is empty."""
    return _resolve(apps_cache_dir(), apps_pom_xml(), f"kafka-streams-{APPS_KAFKA_VERSION}", verbose)


def apps_resolved() -> bool:
    return _up_to_date(apps_cache_dir(), apps_pom_xml())


def apps_classpath() -> str:
    return os.pathsep.join(str(j) for j in resolve_apps())


def resolved(version: str = KAFKA_VERSION) -> bool:
    """True when a KRaft release's jars are in their cache (no Maven needed)."""
    return _up_to_date(cache_dir(version), pom_xml(version))


def zk_resolved() -> bool:
    """True when Kafka 3.9's jars are in their cache (no Maven needed)."""
    return _up_to_date(zk_cache_dir(), zk_pom_xml())


def missing_prerequisites(need_maven: bool | None = None, version: str = KAFKA_VERSION) -> list[str]:
    """What this machine lacks to run the peer (empty when all is there)."""
    missing = []
    if shutil.which("java") is None:
        missing.append("java (a JDK 17+ on PATH)")
    if need_maven is None:
        need_maven = not (zk_resolved() if _zk_mode(version) else resolved(version))
    if need_maven and shutil.which("mvn") is None:
        missing.append("mvn (Apache Maven, to fetch Kafka from Maven Central)")
    return missing


def resolve(verbose: bool = False, version: str = KAFKA_VERSION) -> list[Path]:
    """A KRaft release's jars (4.4 by default), downloading them with Maven when its cache is empty."""
    return _resolve(cache_dir(version), pom_xml(version), f"kafka_{SCALA_VERSION}-{version}", verbose)


def resolve_zk(verbose: bool = False) -> list[Path]:
    """Kafka 3.9's jars (ZooKeeper mode), downloading them with Maven when their cache is empty."""
    return _resolve(zk_cache_dir(), zk_pom_xml(), f"kafka_{SCALA_VERSION}-{ZK_KAFKA_VERSION}", verbose)


def _resolve(root: Path, pom: str, must_have: str, verbose: bool) -> list[Path]:
    lib = root / "lib"
    marker = lib / ".complete"
    if _up_to_date(root, pom):
        return sorted(lib.glob("*.jar"))
    missing = missing_prerequisites(need_maven=True)
    if missing:
        raise KafkaPeerError(f"cannot resolve {root.name}: missing " + ", ".join(missing))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be resolving right now
        if _up_to_date(root, pom):
            return sorted(lib.glob("*.jar"))
        (root / "pom.xml").write_text(pom)
        staging = root / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        cmd = ["mvn", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        if not verbose:
            cmd.insert(1, "-q")
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=root, capture_output=not verbose, text=True)
        if proc.returncode != 0:
            out = (proc.stdout or "") + (proc.stderr or "")
            raise KafkaPeerError(f"mvn failed ({proc.returncode}) resolving {root.name}:\n{out[-4000:]}")
        jars = sorted(staging.glob("*.jar"))
        if not any(j.name.startswith(must_have) for j in jars):
            raise KafkaPeerError(f"mvn copied no {must_have}* jar into {staging}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        marker.write_text(f"{len(jars)} jars in {time.monotonic() - started:.1f}s\n")
        return sorted(lib.glob("*.jar"))


def _up_to_date(root: Path, pom: str) -> bool:
    """The folder's jars are complete and were resolved from this very pom (a changed pom resolves again)."""
    pom_file = root / "pom.xml"
    return (root / "lib" / ".complete").exists() and pom_file.exists() and pom_file.read_text() == pom


def classpath(version: str = KAFKA_VERSION) -> str:
    jars = resolve_zk() if _zk_mode(version) else resolve(version=version)
    return os.pathsep.join(str(j) for j in jars)


def _zk_mode(version: str) -> bool:
    """True for Kafka 3.9 (ZooKeeper mode), False for the KRaft releases; any other version is a mistake."""
    if version not in (*KRAFT_VERSIONS, ZK_KAFKA_VERSION):
        raise KafkaPeerError(f"no Kafka {version} here: {', '.join(KRAFT_VERSIONS)} or {ZK_KAFKA_VERSION}")
    return version == ZK_KAFKA_VERSION


def _log4j_config(kind: str, version: str = KAFKA_VERSION) -> Path:
    if _zk_mode(version):
        path = zk_cache_dir() / f"log4j-{kind}.properties"
        text = LOG4J_ZK_TOOLS if kind == "tools" else LOG4J_ZK_SERVER
    else:
        path = cache_dir(version) / f"log4j2-{kind}.properties"
        text = LOG4J2_TOOLS if kind == "tools" else LOG4J2_SERVER
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)  # a fresh machine: nothing resolved yet
        path.write_text(text)
    return path


def java_command(main_class: str, *args: str, jvm_opts: list[str] | None = None, log: str = "tools",
                 version: str = KAFKA_VERSION, cp: str | None = None) -> list[str]:
    """The argv that runs a Kafka main class of ``version`` (short names from ``TOOLS``, or ``ZK_TOOLS``
    for 3.9, accepted); ``cp``: a classpath other than the release's (``apps_classpath()``)."""
    zk = _zk_mode(version)
    cls = (ZK_TOOLS if zk else TOOLS).get(main_class, main_class)
    if shutil.which("java") is None:
        raise KafkaPeerError("java is not on PATH")
    opts = TOOL_JVM_OPTS if jvm_opts is None else jvm_opts
    logging_opt = (f"-Dlog4j.configuration=file:{_log4j_config(log, version)}" if zk
                   else f"-Dlog4j2.configurationFile={_log4j_config(log, version)}")
    return ["java", *opts, "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8", "-Dstdout.encoding=UTF-8",
            "-Dstderr.encoding=UTF-8", logging_opt, "-cp", cp or classpath(version), cls, *map(str, args)]


def run_tool(main_class: str, *args: str, input: str | bytes | None = None, timeout: float = 120,
             check: bool = True, jvm_opts: list[str] | None = None,
             version: str = KAFKA_VERSION) -> subprocess.CompletedProcess:
    """Run a Kafka command-line class (of ``version``) to completion; stdout/stderr captured as text."""
    cmd = java_command(main_class, *args, jvm_opts=jvm_opts, version=version)
    text = not isinstance(input, bytes)
    proc = subprocess.run(cmd, input=input, capture_output=True, text=text, timeout=timeout,
                          stdin=subprocess.DEVNULL if input is None else None)
    if check and proc.returncode != 0:
        raise KafkaPeerError(f"{main_class} {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


class ToolRunner:
    """Kafka's command-line classes run one after another in one long-lived JVM.

    ``run`` has ``run_tool``'s signature and result. Starting a JVM per call costs one to several
    seconds on a busy machine; here only the first call pays (scripts/kafka/ToolRunner.java redirects
    Kafka's ``Exit`` to an exception, so exit codes are kept). Calls are serialized. A call that
    exceeds its timeout kills the JVM (by PID); the next call starts a new one.
    """

    SOURCE = Path(__file__).resolve().parent / "kafka" / "ToolRunner.java"

    def __init__(self, jvm_opts: list[str] | None = None, version: str = KAFKA_VERSION):
        self.jvm_opts = TOOL_JVM_OPTS if jvm_opts is None else jvm_opts
        self.version = version
        self.tools = ZK_TOOLS if _zk_mode(version) else TOOLS
        self.proc: subprocess.Popen | None = None
        self.calls = 0
        self.per_call = shutil.which("javac") is None  # a JRE cannot compile the runner
        self._lock = threading.Lock()

    def _compiled(self) -> Path:
        """The runner's classes, compiled once per version of its source (safe across processes)."""
        digest = hashlib.sha1(self.SOURCE.read_bytes()).hexdigest()[:12]
        root = zk_cache_dir() if _zk_mode(self.version) else cache_dir(self.version)
        classes = root / f"tool-runner-{digest}"
        if (classes / "ToolRunner.class").exists():
            return classes
        staging = Path(tempfile.mkdtemp(prefix="tool-runner-", dir=root))
        proc = subprocess.run(["javac", "-cp", classpath(self.version), "-d", str(staging), str(self.SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaPeerError(f"javac failed on {self.SOURCE}:\n{proc.stdout}{proc.stderr}")
        try:
            staging.rename(classes)
        except OSError:  # another process got there first
            shutil.rmtree(staging, ignore_errors=True)
        return classes

    def _start(self) -> None:
        classes = self._compiled()
        cmd = java_command("ToolRunner", jvm_opts=self.jvm_opts, version=self.version)
        cp = cmd.index("-cp") + 1
        cmd[cp] = f"{classes}{os.pathsep}{cmd[cp]}"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        if self._readline(60) != b"READY":
            self.close()
            raise KafkaPeerError("the Kafka tool runner JVM did not start")

    def _readline(self, timeout: float) -> bytes:
        box: list[bytes] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive() or not box:
            self.close()
            raise subprocess.TimeoutExpired("ToolRunner", timeout)
        return box[0].rstrip(b"\n")

    def run(self, main_class: str, *args: str, input: str | bytes | None = None, timeout: float = 120,
            check: bool = True, jvm_opts: list[str] | None = None) -> subprocess.CompletedProcess:
        if jvm_opts is not None or self.per_call:  # own JVM flags, or no javac: one JVM per call
            return run_tool(main_class, *args, input=input, timeout=timeout, check=check, jvm_opts=jvm_opts,
                            version=self.version)
        cls = self.tools.get(main_class, main_class)
        data = input.encode() if isinstance(input, str) else (input or b"")
        fields = [cls.encode(), data, *(str(a).encode() for a in args)]
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            self.proc.stdin.write(b"\t".join(base64.b64encode(f) for f in fields) + b"\n")
            self.proc.stdin.flush()
            line = self._readline(timeout)
            self.calls += 1
        code, out, err = line.split(b"\t")
        stdout, stderr = base64.b64decode(out), base64.b64decode(err)
        result = subprocess.CompletedProcess([cls, *map(str, args)], int(code),
                                             stdout if isinstance(input, bytes) else stdout.decode(errors="replace"),
                                             stderr if isinstance(input, bytes) else stderr.decode(errors="replace"))
        if check and result.returncode != 0:
            raise KafkaPeerError(f"{main_class} {' '.join(map(str, args))} exited {result.returncode}\n"
                                 f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# ---------------------------------------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def random_cluster_id() -> str:
    """A Kafka Uuid string (url-safe base64 of 16 bytes, no padding); like Kafka's Uuid.randomUuid,
    never one starting with "-", which command lines would read as an option."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _api_versions_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when the port answers an ApiVersions v0 request without error."""
    client_id = b"kafka-peer"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            frame = _recv_exact(s, struct.unpack(">i", head)[0])
    except OSError:
        return False
    corr, error_code = struct.unpack_from(">ih", frame, 0)
    return corr == 1 and error_code == 0


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


class _KafkaProcess:
    """A Kafka broker JVM on 127.0.0.1 with its output in ``<work_dir>/server.out``, started and
    stopped by its PID."""

    def __init__(self, work_dir: str | os.PathLike, jvm_opts: list[str] | None):
        self.work_dir = Path(work_dir)
        self.jvm_opts = SERVER_JVM_OPTS if jvm_opts is None else jvm_opts
        self.port: int | None = None
        #: where it listens; another address with ``argv_prefix`` (``ip netns exec <ns>``) runs it in a network
        #: namespace of its own, the command exec'd so the PID is the JVM's
        self.host = "127.0.0.1"
        self.argv_prefix: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None
        self._output_from = 0  # where this start's output begins (a restart appends)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def output_path(self) -> Path:
        return self.work_dir / "server.out"

    def ready_line(self) -> str:
        raise NotImplementedError

    def _launch(self, cmd: list[str], started: float, timeout: float) -> None:
        """Run ``cmd`` and return once its output has the ready line and its port answers ApiVersions;
        stopped again (and KafkaPeerError) when it exits or ``timeout`` passes first."""
        self._output_from = self.output_path.stat().st_size if self.output_path.exists() else 0
        with open(self.output_path, "ab") as out:
            self.proc = subprocess.Popen(
                [*self.argv_prefix, *cmd], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # Ctrl-C in the terminal goes to pytest, which stops us by PID
                cwd=self.work_dir, start_new_session=True)
        deadline = started + timeout
        try:
            while True:
                if self.proc.poll() is not None:
                    raise KafkaPeerError(f"Kafka exited with {self.proc.returncode} while starting:\n"
                                         + self.tail())
                if self.ready_line() in self.output(since_start=True) and _api_versions_ok(self.host, self.port):
                    break
                if time.monotonic() > deadline:
                    raise KafkaPeerError(f"Kafka did not start within {timeout}s:\n" + self.tail())
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def port_clash(self) -> bool:
        """Whether the latest start failed because a port picked free was taken before Kafka bound it."""
        return "Address already in use" in self.output(since_start=True)

    def output(self, since_start: bool = False) -> str:
        """What the broker printed (all its starts, or only the latest one's)."""
        try:
            with open(self.output_path, "rb") as f:
                if since_start:
                    f.seek(self._output_from)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM by PID (controlled shutdown), SIGKILL if it does not exit within ``timeout``."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL by PID: a crash, no controlled shutdown."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        return proc.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class KafkaServer(_KafkaProcess):
    """A single-node KRaft Apache Kafka (broker and controller in one JVM) on 127.0.0.1, of ``version`` (one
    of ``KRAFT_VERSIONS``, 4.4 by default).

    ``tiered=True`` turns on tiered storage with Kafka's LocalTieredStorage (remote segments in
    ``<work_dir>/remote``), a half-second remote log manager and retention interval, and no initial
    delay for the retention task. ``overrides`` are added to
    server.properties last.
    """

    READY_LINE = "Kafka Server started"

    def __init__(self, work_dir: str | os.PathLike, *, tiered: bool = False, overrides: dict | None = None,
                 jvm_opts: list[str] | None = None, version: str = KAFKA_VERSION):
        super().__init__(work_dir, jvm_opts)
        cache_dir(version)  # a KRaft release, or KafkaPeerError
        self.version = version
        self.tiered = tiered
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}
        self.controller_port: int | None = None
        self.cluster_id = random_cluster_id()

    def ready_line(self) -> str:
        return self.READY_LINE

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "kafka-logs"

    @property
    def remote_dir(self) -> Path:
        return self.work_dir / "remote"

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.tiered:
            props.update({
                "remote.log.storage.system.enable": "true",
                "remote.log.storage.manager.class.name":
                    "org.apache.kafka.server.log.remote.storage.LocalTieredStorage",
                "remote.log.storage.manager.impl.prefix": "rsm.config.",
                "rsm.config.dir": str(self.remote_dir),
                "remote.log.metadata.manager.impl.prefix": "rlmm.config.",
                "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
                "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
                "remote.log.metadata.manager.listener.name": "PLAINTEXT",
                "remote.log.manager.task.interval.ms": "500",
                "log.retention.check.interval.ms": "500",
                # Kafka's internal test setting: start the retention task at once, not after 30 s.
                "log.initial.task.delay.ms": "0",
            })
        props.update(self.overrides)
        return props

    def start(self, timeout: float = 120) -> KafkaServer:
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.tiered:
            self.remote_dir.mkdir(exist_ok=True)
        for attempt in range(3):  # free ports picked again when another process took one meanwhile
            self.port, self.controller_port = free_port(), free_port()
            while self.controller_port == self.port:
                self.controller_port = free_port()
            config = self.work_dir / "server.properties"
            config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
            run_tool("StorageTool", "format", "-t", self.cluster_id, "-c", str(config), "--ignore-formatted",
                     timeout=timeout, version=self.version)
            try:
                self._launch(java_command("Kafka", str(config), jvm_opts=self.jvm_opts, log="server",
                                          version=self.version), started, timeout)
                return self
            except KafkaPeerError:
                if attempt == 2 or not self.port_clash():
                    raise
        return self


class KafkaKRaftNode(KafkaServer):
    """One node of a multi-node KRaft cluster of Kafka 4.4 (or ``version``): broker and controller in one JVM (combined
    roles), one of the static ``voters`` (``{node_id: controller_port}``), all formatted with one
    ``cluster_id``. Its ports are fixed before any node starts, since every node names every controller; a
    restart keeps them and its log dir. With ``tiered``, every node of the cluster tiers into the same
    ``remote_dir`` (LocalTieredStorage on a shared folder, as Kafka's own multi-broker tiered tests do), and
    the remote log metadata topic has ``min(3, len(voters))`` replicas.
    """

    def __init__(self, work_dir: str | os.PathLike, node_id: int, port: int, voters: dict[int, int],
                 cluster_id: str, *, remote_dir: Path | None = None, tiered: bool = False,
                 overrides: dict | None = None, jvm_opts: list[str] | None = None, version: str = KAFKA_VERSION):
        super().__init__(work_dir, tiered=tiered, overrides=overrides, jvm_opts=jvm_opts, version=version)
        self.node_id, self.voters, self.cluster_id = node_id, voters, cluster_id
        self.port, self.controller_port = port, voters[node_id]
        self._remote_dir = Path(remote_dir) if remote_dir else self.work_dir / "remote"

    @property
    def remote_dir(self) -> Path:
        return self._remote_dir

    def properties(self) -> dict[str, str]:
        props = super().properties()
        rf = str(min(3, len(self.voters)))
        props.update({
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(self.voters.items())),
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "share.coordinator.state.topic.replication.factor": rf,
        })
        if self.tiered:
            props["rlmm.config.remote.log.metadata.topic.replication.factor"] = rf
        props.update(self.overrides)
        return props

    def start(self, timeout: float = 180) -> KafkaKRaftNode:
        if self.running():
            raise KafkaPeerError(f"node {self.node_id} already runs as pid {self.proc.pid}")
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.tiered:
            self.remote_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        run_tool("StorageTool", "format", "-t", self.cluster_id, "-c", str(config), "--ignore-formatted",
                 timeout=timeout, version=self.version)
        self._launch(java_command("Kafka", str(config), jvm_opts=self.jvm_opts, log="server", version=self.version),
                     started, timeout)
        return self


class KafkaZkBroker(_KafkaProcess):
    """One Apache Kafka 3.9 broker in ZooKeeper mode on 127.0.0.1 (PLAINTEXT, a free port kept across
    restarts). Brokers with distinct ``broker_id`` on the same ``zookeeper_connect`` (``host:port/chroot``;
    Kafka creates the chroot) form a cluster, its controller elected through ZooKeeper. ``overrides`` go
    into server.properties last. ``start`` after ``stop``/``kill`` is a restart on the same port and logs.
    """

    def __init__(self, work_dir: str | os.PathLike, broker_id: int, zookeeper_connect: str, *,
                 overrides: dict | None = None, jvm_opts: list[str] | None = None):
        super().__init__(work_dir, jvm_opts)
        self.broker_id = broker_id
        self.zookeeper_connect = zookeeper_connect
        self.overrides = {k: str(v) for k, v in (overrides or {}).items()}

    def ready_line(self) -> str:
        return f"[KafkaServer id={self.broker_id}] started"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "kafka-logs"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

    def properties(self) -> dict[str, str]:
        props = {
            "broker.id": str(self.broker_id),
            "zookeeper.connect": self.zookeeper_connect,
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.overrides)
        return props

    def start(self, timeout: float = 120) -> KafkaZkBroker:
        if self.running():
            raise KafkaPeerError(f"broker {self.broker_id} already runs as pid {self.proc.pid}")
        started = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        picked = self.port is None  # a port of our own, picked again if taken before Kafka binds it
        for attempt in range(3):
            if picked:
                self.port = free_port()
            self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
            try:
                self._launch(java_command("Kafka", str(self.config_path), jvm_opts=self.jvm_opts, log="server",
                                          version=ZK_KAFKA_VERSION), started, timeout)
                return self
            except KafkaPeerError:
                if attempt == 2 or not picked or not self.port_clash():
                    raise
        return self

# ------------------------------------------------------------------------------------------------ CLI

def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("classpath", help="resolve Kafka if needed and print its classpath")
    sub.add_parser("resolve", help=f"resolve Kafka {', '.join(KRAFT_VERSIONS)}, {ZK_KAFKA_VERSION} (ZooKeeper "
                                   f"mode) and {APPS_KAFKA_VERSION}'s Streams and Connect if needed (Maven output "
                                   f"shown) and print their cache folders")
    tool = sub.add_parser("tool", help="run a Kafka command-line class", prefix_chars="\0")
    tool.add_argument("main_class", help="a short name (" + ", ".join(sorted(TOOLS)) + ") or a full class")
    tool.add_argument("args", nargs=argparse.REMAINDER)
    zk_tool = sub.add_parser("zk-tool", help=f"run a command-line class of Kafka {ZK_KAFKA_VERSION}",
                             prefix_chars="\0")
    zk_tool.add_argument("main_class", help="a short name (" + ", ".join(sorted(ZK_TOOLS)) + ") or a full class")
    zk_tool.add_argument("args", nargs=argparse.REMAINDER)
    server = sub.add_parser("server", help="run a single-node KRaft broker on 127.0.0.1 until Ctrl-C")
    server.add_argument("--tiered", action="store_true", help="enable tiered storage (LocalTieredStorage)")
    server.add_argument("--dir", help="work folder (default: a new temporary folder)")
    server.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    server.add_argument("--kafka-version", default=KAFKA_VERSION, choices=KRAFT_VERSIONS)
    opts = parser.parse_args(argv)
    try:
        if opts.command == "classpath":
            print(classpath())
        elif opts.command == "resolve":
            for version in KRAFT_VERSIONS:
                jars = resolve(verbose=True, version=version)
                print(f"{len(jars)} jars in {lib_dir(version)}")
            jars = resolve_zk(verbose=True)
            print(f"{len(jars)} jars in {zk_cache_dir() / 'lib'}")
            jars = resolve_apps(verbose=True)
            print(f"{len(jars)} jars in {apps_cache_dir() / 'lib'}")
        elif opts.command == "tool":
            return subprocess.call(java_command(opts.main_class, *opts.args))
        elif opts.command == "zk-tool":
            return subprocess.call(java_command(opts.main_class, *opts.args, version=ZK_KAFKA_VERSION))
        elif opts.command == "server":
            work = Path(opts.dir) if opts.dir else Path(tempfile.mkdtemp(prefix="kafka-peer-"))
            overrides = dict(o.split("=", 1) for o in opts.override)
            # SIGTERM (e.g. from `timeout`) stops Kafka too, like Ctrl-C does.
            signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
            kafka = KafkaServer(work, tiered=opts.tiered, overrides=overrides, version=opts.kafka_version).start()
            print(f"Apache Kafka {opts.kafka_version} ready on {kafka.bootstrap} (pid {kafka.proc.pid}, "
                  f"{kafka.start_seconds:.1f}s, logs in {kafka.output_path})", flush=True)
            try:
                while kafka.proc.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
            finally:
                kafka.stop()
    except KafkaPeerError as e:
        print(f"kafka_peer: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
