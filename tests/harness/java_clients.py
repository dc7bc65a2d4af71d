"""Kafka's Java clients (4.4, the reference peer's jars) kept alive in one JVM while a test changes the
brokers under them: ``java/RebootstrapClient.java`` (a producer, a consumer and an admin client, one
command per stdin line, one answer line each), compiled once per source version into the peer's cache.

``rebootstrap_client_command()`` is the argv prefix that runs it (skipped locally, failed in CI, without a
JDK or the jars); ``JavaClients(command, settings, log)`` starts one JVM with the client settings given.
Used by the single-node rebootstrap tests (tests/client) and the cluster ones (tests/cluster).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from tests.harness.java_programs import java_program_command

SOURCE = Path(__file__).resolve().parent / "java" / "RebootstrapClient.java"


def rebootstrap_client_command() -> list[str]:
    """The argv prefix that runs RebootstrapClient against Kafka 4.4's client jars."""
    return java_program_command(SOURCE, "RebootstrapClient")


class JavaClients:
    """One JVM with a producer, a consumer and an admin client; a command per call."""

    def __init__(self, command: list[str], settings: dict, log: Path):
        self.log = open(log, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([*command, *(f"{k}={v}" for k, v in settings.items())], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        assert self._line(60) == "READY"

    def _line(self, timeout: float) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        assert box and box[0], f"no answer from the Java client within {timeout} s (see {self.log.name})"
        return box[0].rstrip("\n")

    def __call__(self, command: str, timeout: float = 120) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._line(timeout)

    def ok(self, command: str, timeout: float = 120) -> str:
        answer = self(command, timeout)
        assert answer.startswith("OK"), f"{command}: {answer}"
        return answer[3:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()
