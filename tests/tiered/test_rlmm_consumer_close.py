"""Closing the metadata manager's reader of ``__remote_log_metadata`` ends it even when its poll swallows the
cancellation, as Python 3.11's ``asyncio.wait_for`` does when the awaited result arrives together with the
cancel (a broker's shutdown once hung there, its task dump showing the reader 'cancelling' inside poll)."""

from __future__ import annotations

import asyncio

from tierlog.tiered.rlmm.consumer_task import ConsumerTask


class SwallowingConsumer:
    """A consumer whose poll returns normally the first time it is cancelled, like wait_for in the race above
    (only the first: a test that fails must still end)."""

    def __init__(self) -> None:
        self.polls = 0
        self.polled = asyncio.Event()
        self.swallowed = False

    async def poll(self, timeout_ms: int):
        self.polls += 1
        self.polled.set()
        try:
            await asyncio.sleep(timeout_ms / 1000)
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed = True  # the cancellation is lost here
        return {}

    async def position(self, tp) -> int:
        return 0


def test_close_ends_the_reader_when_its_poll_swallows_the_cancellation():
    async def scenario():
        consumer = SwallowingConsumer()
        task = ConsumerTask(consumer, store=None, num_partitions=1, log_dir=None)
        task.read_offsets[0] = 0  # a metadata partition to read: the loop polls
        task.start()
        await asyncio.wait_for(consumer.polled.wait(), 30)
        closing = asyncio.ensure_future(task.close())
        done, _ = await asyncio.wait({closing}, timeout=30)
        assert closing in done, "close() still waiting for the reader, which polls on"  # before the fix
        assert consumer.swallowed
        polls = consumer.polls
        await asyncio.sleep(0.3)
        assert consumer.polls == polls  # nothing polls after close
    asyncio.run(scenario())
