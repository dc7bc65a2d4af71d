"""Kafka's own applications as real JVM processes for tests/apps: Kafka Streams (``tests/apps/java/
WordCount.java``) and Kafka Connect's distributed worker (with ``GateInterceptor.java`` on its classpath),
both 4.1 from Maven Central (``kafka_peer.resolve_apps()``, ``APPS_KAFKA_VERSION``: no connect-file 4.4.0 there),
as is the reference broker tests/apps runs them against.

``apps_classpath()`` compiles the Java sources once per source hash into the cache and returns the classpath
(skipped locally, failed in CI, without a JDK or the jars). ``JavaApp(argv, log)`` is one process: its
stdout lines are kept (``wait_for_line``), its stderr goes to ``log``; ``kill()`` is a SIGKILL, ``stop()`` a
SIGTERM. ``JavaApp.running`` lets the fixtures kill what a failing test left behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from tests.harness.apache_kafka import kafka_peer_module as peer
from tests.harness.prerequisites import unavailable
from tests.harness.waiting import not_yet, wait_until

SOURCES = sorted((Path(__file__).resolve().parents[1] / "apps" / "java").glob("*.java"))
#: JVM flags of the applications: small heaps, quick start (two cores shared with brokers).
JVM_OPTS = ["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]


def apps_classpath() -> str:
    """The compiled sources and Kafka 4.1's Streams and Connect jars, as one classpath."""
    missing = peer.missing_prerequisites(need_maven=not peer.apps_resolved())
    missing += [] if shutil.which("javac") else ["javac (a JDK)"]
    if missing:
        unavailable("Kafka Streams and Connect", "missing " + ", ".join(missing))
    try:
        jars = peer.apps_classpath()
    except peer.KafkaPeerError as e:
        unavailable("Kafka Streams and Connect", str(e))
    digest = hashlib.sha1(b"".join(s.name.encode() + s.read_bytes() for s in SOURCES)).hexdigest()[:12]
    classes = peer.apps_cache_dir() / f"classes-{digest}"
    if not classes.exists():
        staging = Path(tempfile.mkdtemp(prefix="classes-", dir=peer.apps_cache_dir()))
        proc = subprocess.run(["javac", "-cp", jars, "-d", str(staging), *map(str, SOURCES)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise AssertionError(f"javac failed:\n{proc.stdout}{proc.stderr}")
        try:
            staging.rename(classes)
        except OSError:  # compiled meanwhile by another process
            shutil.rmtree(staging, ignore_errors=True)
    return f"{classes}{os.pathsep}{jars}"


def java_argv(classpath: str, main_class: str, *args: str, properties: dict | None = None) -> list[str]:
    """The argv running ``main_class`` with Kafka's warning-level log4j2 configuration (on stderr)."""
    cmd = peer.java_command(main_class, *args, jvm_opts=JVM_OPTS, cp=classpath)
    cls = cmd.index(main_class)
    return cmd[:cls - 2] + [f"-D{k}={v}" for k, v in (properties or {}).items()] + cmd[cls - 2:]


class JavaApp:
    running: set[JavaApp] = set()

    def __init__(self, argv: list[str], log: Path):
        self.log_path = log
        self.log = open(log, "a")  # noqa: SIM115 - closed when the process is reaped
        self.lines: list[str] = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        JavaApp.running.add(self)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, line: str, timeout: float = 180, after: int = 0) -> int:
        """Wait for ``line`` among stdout's lines from index ``after``; its index."""

        def index():
            for i in range(after, len(self.lines)):
                if self.lines[i] == line:
                    return [i]  # (a list: index 0 is an answer too)
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.tail()}"
            return not_yet(f"stdout {self.lines[-20:]}\n{self.tail()}")

        return wait_until(index, timeout, interval=0.1, what=f"{line!r}")[0]

    def tail(self, n: int = 60) -> str:
        self.log.flush()
        return "".join(self.log_path.read_text(errors="replace").splitlines(keepends=True)[-n:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self._reap(30)

    def stop(self, timeout: float = 60) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self._reap(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def _reap(self, timeout: float) -> None:
        self.proc.wait(timeout)
        self.log.close()
        JavaApp.running.discard(self)

    @classmethod
    def kill_running(cls) -> None:
        for app in list(cls.running):
            app.kill()
