"""SIGUSR1 makes a broker write what each of its asyncio tasks awaits (a hang's cause, which thread dumps do
not show); the harness asks for it when a broker overruns its stop."""

from __future__ import annotations

import asyncio
import io

from tests.harness.broker import running_broker
from tierlog import task_dump


def test_the_dump_follows_each_task_down_to_the_innermost_await():
    async def innermost(gate: asyncio.Event) -> None:
        await gate.wait()

    async def outer(gate: asyncio.Event) -> None:
        await innermost(gate)

    async def main() -> str:
        gate = asyncio.Event()
        task = asyncio.get_running_loop().create_task(outer(gate), name="held-by-a-gate")
        await asyncio.sleep(0)  # the task runs up to its await
        out = io.StringIO()
        task_dump.dump_tasks(out)
        gate.set()
        await task
        return out.getvalue()

    text = asyncio.run(main())
    block = text.split("task held-by-a-gate:")[1].split("\ntask ")[0]
    names = [line.rsplit(" in ", 1)[1] for line in block.splitlines() if line.startswith("  ")]
    assert names[:3] == ["outer", "innermost", "wait"], block
    assert text.rstrip().endswith(task_dump.END)


def test_a_running_broker_dumps_its_tasks_on_sigusr1(tmp_path):
    with running_broker(tmp_path, {}) as broker:
        dump = broker.dump_tasks()
        assert dump.startswith("asyncio tasks:"), dump
        assert "in _accept_loop" in dump, dump  # the listener's task, down to its frame
        assert broker.proc.poll() is None  # and the broker goes on
