"""stop_tasks ends a task even when the task loses a cancellation, as Python 3.11's wait_for does when the
cancellation lands together with the awaited result."""

from __future__ import annotations

import asyncio

from tierlog.tasks import stop_tasks


def test_a_task_that_swallows_its_first_cancellation_is_cancelled_again_until_it_ends():
    async def main():
        swallowed = asyncio.Event()
        looping = asyncio.Event()

        async def reader():
            while True:
                looping.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    if swallowed.is_set():
                        raise
                    swallowed.set()  # lost, as wait_for loses it: the loop goes on
                    asyncio.current_task().uncancel()

        task = asyncio.create_task(reader())
        await looping.wait()
        await asyncio.wait_for(stop_tasks(task, None), 30)
        assert swallowed.is_set() and task.cancelled()
    asyncio.run(main())


def test_a_task_that_failed_or_finished_is_stopped_without_an_unretrieved_exception():
    async def main():
        async def fail():
            raise RuntimeError("boom")
        failed = asyncio.create_task(fail())
        finished = asyncio.create_task(asyncio.sleep(0))
        await asyncio.wait({failed, finished})
        await stop_tasks(failed, finished)
        assert failed.exception() is not None and finished.result() is None
    asyncio.run(main())
