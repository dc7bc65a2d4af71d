"""Small Java programs of the test suite (``tests/harness/java/*.java``) run against Kafka 4.4's client jars
(the reference peer's): each compiled once per source version into the peer's cache, then started as
``java -cp <its classes>:<Kafka's jars> <main class>``. Without a JDK or the jars the test is skipped
locally and fails in CI (``prerequisites.unavailable``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.harness.apache_kafka import kafka_peer_module
from tests.harness.prerequisites import unavailable


def java_program_command(source: Path, main_class: str, version: str | None = None) -> list[str]:
    """The argv prefix that runs ``main_class`` compiled from ``source`` with Kafka's client jars (of ``version``,
    the peer's default when None)."""
    peer = kafka_peer_module
    missing = peer.missing_prerequisites() + ([] if shutil.which("javac") else ["javac (a JDK)"])
    if missing:
        unavailable("Kafka's Java client", "missing " + ", ".join(missing))
    try:
        classpath = peer.classpath(version or peer.KAFKA_VERSION)
    except peer.KafkaPeerError as e:
        unavailable("Kafka's Java client", str(e))
    digest = hashlib.sha1(source.read_bytes()).hexdigest()[:12]
    folder = f"{source.stem.lower()}-{digest}"
    cache = peer.cache_dir(version or peer.KAFKA_VERSION)
    classes = cache / folder
    if not (classes / f"{main_class}.class").exists():
        staging = Path(tempfile.mkdtemp(prefix=f"{folder}-", dir=cache))
        proc = subprocess.run(["javac", "-cp", classpath, "-d", str(staging), str(source)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"javac failed:\n{proc.stdout}{proc.stderr}"
        try:
            staging.rename(classes)
        except OSError:  # compiled meanwhile by another process
            shutil.rmtree(staging, ignore_errors=True)
    cmd = peer.java_command(main_class, version=version or peer.KAFKA_VERSION)
    cp = cmd.index("-cp") + 1
    cmd[cp] = f"{classes}{os.pathsep}{cmd[cp]}"
    return cmd
