"""Kafka's Java transactional producer and read_committed consumer (4.1's client jars) as one-shot commands:
``java/TransactionalClients.java``, compiled once per source version into the peer's cache.

``java_produce(bootstrap, topic, transactional_id, plan)`` runs transactions by ``plan`` ("c3,a2": commit
three records, then abort two) and returns the values it committed and aborted, in order;
``java_consume(bootstrap, topic, isolation, until)`` returns the (offset, value) pairs a Java consumer reads
from the earliest offset up to and including ``until``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness.java_programs import java_program_command

SOURCE = Path(__file__).resolve().parent / "java" / "TransactionalClients.java"


def _command() -> list[str]:
    return java_program_command(SOURCE, "TransactionalClients")


def _run(*args: str, timeout: float) -> list[str]:
    proc = subprocess.run([*_command(), *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"TransactionalClients {args[0]} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc.stdout.splitlines()


def plan_values(plan: str) -> tuple[list[str], list[str]]:
    """The values ``plan`` commits and aborts, as TransactionalClients writes them."""
    committed, aborted = [], []
    for i, step in enumerate(plan.split(",")):
        values = [f"{i}-{step[0]}-{j}-" + "x" * 200 for j in range(int(step[1:]))]
        (committed if step[0] == "c" else aborted).extend(values)
    return committed, aborted


def java_produce(bootstrap: str, topic: str, transactional_id: str, plan: str,
                 timeout: float = 180) -> tuple[list[str], list[str]]:
    lines = _run("produce", bootstrap, topic, transactional_id, plan, timeout=timeout)
    committed, aborted = plan_values(plan)
    assert lines[-1] == f"DONE {len(committed)}", lines
    return committed, aborted


def java_consume(bootstrap: str, topic: str, isolation: str, until: str, timeout: float = 120) -> list[tuple[int, str]]:
    lines = _run("consume", bootstrap, topic, isolation, until, str(int(timeout * 1000)), timeout=timeout + 60)
    assert lines and lines[-1] == "DONE", f"the Java consumer ({isolation}) did not reach {until!r}: {lines[-5:]}"
    return [(int(o), v) for o, v in (line.split(" ", 1) for line in lines[:-1])]
