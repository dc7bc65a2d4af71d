"""A ZooKeeper for development and tests: ``tierlog zookeeper start`` and the test harness run it.

A cluster of tierlog brokers coordinates through ZooKeeper (``zookeeper.connect``). This module runs one
standalone ZooKeeper server as a child process: it finds Java and ZooKeeper's jars (``$ZOOKEEPER_HOME``
from an Apache release, else Debian's ``zookeeper`` package), writes a ``zoo.cfg`` into the data folder,
starts ``ZooKeeperServerMain`` on it, waits until the server answers ``ruok`` with ``imok``, and stops
it by its PID (SIGTERM, then SIGKILL after a bound). It is not a production deployment: one server, no
quorum, no authentication.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 2181
#: ZooKeeper's own default tick; session timeouts are bounded by 2 and 20 ticks unless set.
DEFAULT_TICK_TIME_MS = 2000

#: Debian's package (and its Class-Path manifest, which names every dependency jar).
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
#: The logging binding added to Debian's jar: log4j 1.2 through slf4j (both dependencies of the package).
#: Only this one, not every jar of /usr/share/java, which holds several slf4j bindings that would compete.
DEBIAN_LOGGING_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
INSTALL_HINT = "install Debian's zookeeper package: apt-get install zookeeper"

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
#: A single server serving a few brokers and clients needs little memory, and starts faster without C2.
JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

#: Files the server writes into its data folder besides its snapshots and transaction logs.
CONFIG_FILE = "zoo.cfg"
LOG_FILE = "zookeeper.log"
OUTPUT_FILE = "zookeeper.out"

# Release tarballs up to 3.7 log through log4j 1.2, Debian's package too; 3.8+ tarballs through logback.
# Both configurations are written, each framework reads its own.
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{{ISO8601}} %-5p [%t] %c{{1}}: %m%n
"""
LOGBACK_XML = """\
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{ISO8601}} %-5level [%thread] %logger{{0}}: %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


class ZooKeeperError(Exception):
    """ZooKeeper cannot run or did not start; the message is one line saying why and what to do."""


# --------------------------------------------------------------------------------------------- finding

def find_java() -> str:
    """The java executable: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperError(f"java is not installed (not on PATH, no JAVA_HOME); {INSTALL_HINT} (it brings a JRE)")
    return java


def find_classpath() -> list[str]:
    """ZooKeeper's jars: every jar of ``$ZOOKEEPER_HOME`` (and its ``lib/``) when set, else Debian's."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        jars = sorted(root.glob("*.jar")) + sorted((root / "lib").glob("*.jar"))
        if not any(j.name.startswith("zookeeper-") and "jute" not in j.name for j in jars):
            raise ZooKeeperError(f"ZOOKEEPER_HOME={home} holds no zookeeper-*.jar (in it or its lib/); point it "
                                 f"at an unpacked Apache ZooKeeper release, or unset it and {INSTALL_HINT}")
        return [str(j) for j in jars]
    if not DEBIAN_JAR.is_file():
        raise ZooKeeperError(f"ZooKeeper is not installed ({DEBIAN_JAR} is missing); {INSTALL_HINT}, "
                             f"or set ZOOKEEPER_HOME to an unpacked Apache ZooKeeper release")
    return [str(DEBIAN_JAR), *(str(j) for j in DEBIAN_LOGGING_JARS if j.is_file())]


# ------------------------------------------------------------------------------------------ talking

def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """ZooKeeper's answer to a four-letter command (``ruok``, ``srvr``, ``mntr``); "" when none."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")


def is_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a ZooKeeper serving requests listens on host:port (``ruok`` answered ``imok``)."""
    return four_letter_word(host, port, "ruok", timeout) == "imok"


# ------------------------------------------------------------------------------------------- server

class ZooKeeperServer:
    """One standalone ZooKeeper server, a child process with its data (and config, log) in ``data_dir``.

    ``min_session_timeout_ms`` and ``max_session_timeout_ms`` bound the session timeouts clients may ask
    for (ZooKeeper's defaults: 2 and 20 ticks); tests lower the tick to allow short broker sessions.
    ``extra`` adds (or overrides) zoo.cfg settings.
    """

    def __init__(self, data_dir: str | os.PathLike, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                 tick_time_ms: int = DEFAULT_TICK_TIME_MS, min_session_timeout_ms: int | None = None,
                 max_session_timeout_ms: int | None = None, extra: dict[str, str] | None = None,
                 jvm_opts: tuple[str, ...] | list[str] = JVM_OPTS):
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.extra = {k: str(v) for k, v in (extra or {}).items()}
        self.jvm_opts = list(jvm_opts)
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None

    @property
    def connect(self) -> str:
        """``host:port``, the ``zookeeper.connect`` of brokers using this server (add a chroot as needed)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    @property
    def output_path(self) -> Path:
        """The JVM's own standard output and error (crashes before logging is set up land here)."""
        return self.data_dir / OUTPUT_FILE

    def config(self) -> dict[str, str]:
        settings = {
            "tickTime": str(self.tick_time_ms),
            "dataDir": str(self.data_dir),
            "clientPortAddress": self.host,
            "clientPort": str(self.port),
            # no limit per client address: every broker and test client comes from 127.0.0.1
            "maxClientCnxns": "0",
            # the AdminServer would take port 8080 on every server
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,mntr",
        }
        if self.min_session_timeout_ms is not None:
            settings["minSessionTimeout"] = str(self.min_session_timeout_ms)
        if self.max_session_timeout_ms is not None:
            settings["maxSessionTimeout"] = str(self.max_session_timeout_ms)
        settings.update(self.extra)
        return settings

    def write_config(self) -> Path:
        """zoo.cfg and the logging configurations, into the data folder (created if needed)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        (self.data_dir / "log4j.properties").write_text(LOG4J_PROPERTIES.format(log=self.log_path))
        (self.data_dir / "logback.xml").write_text(LOGBACK_XML.format(log=self.log_path))
        return self.config_path

    def command(self) -> list[str]:
        """The argv that runs the server on the written zoo.cfg."""
        java, classpath = find_java(), find_classpath()
        return [java, *self.jvm_opts,
                f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}",
                f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
                f"-Dzookeeper.log.dir={self.data_dir}",
                "-cp", os.pathsep.join(classpath), MAIN_CLASS, str(self.config_path)]

    def start(self, timeout: float = 60) -> ZooKeeperServer:
        """Start the server and return once it answers ``imok``; ZooKeeperError (and nothing left
        running) when it cannot start within ``timeout`` seconds."""
        if self.proc is not None and self.proc.poll() is None:
            raise ZooKeeperError(f"ZooKeeper already runs as pid {self.proc.pid}")
        started = time.monotonic()
        cmd = self.command()  # finds java and the jars first: their absence is the likeliest failure
        if is_ok(self.host, self.port):
            raise ZooKeeperError(f"a ZooKeeper already answers on {self.connect}; use it, or choose another port")
        self.write_config()
        with open(self.output_path, "wb") as out:
            # its own session: Ctrl-C in a terminal reaches only the parent, which stops it by PID
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.data_dir, start_new_session=True)
        try:
            self._wait_ready(started + timeout, timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        while not is_ok(self.host, self.port, timeout=0.5):
            if self.proc.poll() is not None:
                raise ZooKeeperError(f"ZooKeeper exited with status {self.proc.returncode} while starting: "
                                     f"{self.failure_reason()}")
            if time.monotonic() > deadline:
                raise ZooKeeperError(f"ZooKeeper did not answer ruok on {self.connect} within {timeout:g} s; "
                                     f"see {self.log_path}")
            time.sleep(0.05)

    def failure_reason(self) -> str:
        """Why the server stopped, in one line, from its log and output."""
        text = "\n".join(_read(p) for p in (self.log_path, self.output_path))
        if "Address already in use" in text or "BindException" in text:
            return f"{self.connect} is already in use; choose another port"
        for line in reversed(text.splitlines()):
            if " ERROR " in line or "Exception" in line or line.startswith("Error"):
                return " ".join(line.split())[:300] + f" (see {self.log_path})"
        return f"see {self.log_path} and {self.output_path}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10) -> int | None:
        """SIGTERM by PID, SIGKILL when it has not exited within ``timeout`` seconds; its exit status."""
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

    def kill(self) -> None:
        """SIGKILL by PID (a crash, for tests of session expiry)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------ foreground

class _Stop(Exception):
    """SIGTERM arrived while running in the foreground."""


def _raise_stop(signum, frame):
    raise _Stop


def run_foreground(server: ZooKeeperServer, on_ready: Callable[[ZooKeeperServer], None] | None = None,
                   timeout: float = 60) -> int:
    """Start ``server``, call ``on_ready``, then wait until Ctrl-C or SIGTERM (0: stopped on request) or
    until the server exits by itself (ZooKeeperError saying why). The server is stopped in every case."""
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.start(timeout)
        if on_ready is not None:
            on_ready(server)
        while server.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.proc.wait(0.5)
        raise ZooKeeperError(f"ZooKeeper exited with status {server.proc.returncode}: {server.failure_reason()}")
    except (KeyboardInterrupt, _Stop):
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
