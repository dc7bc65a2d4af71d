"""A small synchronous facade over the asyncio clients, for scripts and notebooks.

Each facade object runs its asyncio client on a private event loop in a daemon thread and turns
every coroutine method into a blocking call::

    from tierlog.client.sync import Admin, Consumer, Producer

    with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        producer.send("events", b"hello").get(timeout=10)   # RecordMetadata
        producer.flush()

Plain (non-coroutine) methods and attributes are passed through unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from typing import Any

from tierlog.client import admin as _admin
from tierlog.client import consumer as _consumer
from tierlog.client import producer as _producer


class _Loop:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class SendFuture:
    """The result of a synchronous ``send``: ``get(timeout)`` blocks for the RecordMetadata."""

    def __init__(self, future: concurrent.futures.Future) -> None:
        self._future = future

    def get(self, timeout: float | None = None):
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done()

    def exception(self, timeout: float | None = None):
        return self._future.exception(timeout)


class _Facade:
    _async_class: type

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # construct in the caller's thread so bad settings raise here, before any thread starts
        self._target = self._async_class(config, **kwargs)
        self._loop = _Loop(f"tierlog-{self._async_class.__name__.lower()}")
        try:
            self._loop.run(self._target.start())
        except BaseException:
            self._loop.stop()
            raise

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if inspect.iscoroutinefunction(attr):
            def call(*args: Any, **kwargs: Any) -> Any:
                return self._loop.run(attr(*args, **kwargs))
        elif inspect.ismethod(attr):
            # plain methods touch state the loop's tasks share (events, positions): run them there too
            def call(*args: Any, **kwargs: Any) -> Any:
                async def inline() -> Any:
                    return attr(*args, **kwargs)
                return self._loop.run(inline())
        else:
            return attr
        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call

    def run(self, calls: Any, timeout: float | None = None) -> Any:
        """Await ``calls(client)`` on the client's loop, ``client`` being the asyncio client: several requests
        in flight at once, e.g. ``admin.run(lambda a: asyncio.gather(a.list_offsets(x), a.describe_cluster()))``
        takes one round trip where two blocking calls take two."""
        async def awaited() -> Any:
            return await calls(self._target)
        return self._loop.run(awaited(), timeout)

    def close(self, *args: Any, **kwargs: Any) -> None:
        try:
            self._loop.run(self._target.close(*args, **kwargs))
        finally:
            self._loop.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Producer(_Facade):
    _async_class = _producer.Producer

    def send(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> SendFuture:
        """Queue one record (blocking, as Java's send, only for metadata and ``buffer.memory``) and
        return at once; records of one thread keep their order. ``get()`` gives the RecordMetadata."""
        async def queue() -> concurrent.futures.Future:
            record = await self._target.send(topic, value, key, **kwargs)
            done: concurrent.futures.Future = concurrent.futures.Future()

            def bridge(r: Any) -> None:
                try:
                    done.set_result(r.result())
                except BaseException as exc:  # noqa: BLE001 - handed to whoever calls get()
                    done.set_exception(exc)
            record.add_done_callback(bridge)
            return done
        return SendFuture(self._loop.run(queue()))


class Consumer(_Facade):
    _async_class = _consumer.Consumer

    def __iter__(self):
        while True:
            for records in self.poll(timeout_ms=1000).values():
                yield from records


class Admin(_Facade):
    _async_class = _admin.Admin
