"""The socket server's parts in-process: the log line format and the repeat limiter (tierlog.logs), the
memory pool, the connection quotas and their overrides, the accept loop at EMFILE, and a segment that
cannot be opened at the descriptor limit."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import logging
import re
import socket

import pytest

from tests.harness import logcapture
from tests.harness.waiting import TimedOut, wait_until_async
from tierlog import logs
from tierlog.config import BrokerConfig
from tierlog.config.definitions import parse_connection_overrides
from tierlog.errors import InvalidConfigError
from tierlog.protocol import HandlerRegistry
from tierlog.server.network import socket_server
from tierlog.server.network.connection_quotas import ConnectionQuotas
from tierlog.server.network.memory_pool import SMALL_FRAME_BYTES, MemoryPool
from tierlog.server.network.socket_server import SocketServer

ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARNING) tierlog\.test\.fmt: hello 42$")


# ------------------------------------------------------------------------------------------ logs


@pytest.fixture
def root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    if logs._handler is not None:
        root.removeHandler(logs._handler)
        logs._handler = None
    root.handlers[:] = handlers
    root.setLevel(level)


def test_configure_writes_iso_lines_with_the_logger_name(root_logging):
    out = io.StringIO()
    logs.configure(logging.INFO, stream=out)
    logging.getLogger("tierlog.test.fmt").info("hello %d", 42)
    logs.configure(logging.WARNING, stream=out)  # again: one handler, the new level
    logging.getLogger("tierlog.test.fmt").info("hello %d", 42)
    logging.getLogger("tierlog.test.fmt").warning("hello %d", 42)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert all(ISO_LINE.match(line) for line in lines), lines
    assert lines[0].split(" ")[1] == "INFO" and lines[1].split(" ")[1] == "WARNING"


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_repeat_limiter_logs_once_then_counts(caplog):
    clock = FakeClock()
    limiter = logs.RepeatLimiter(logging.getLogger("tierlog.test.repeat"), 10, clock=clock)
    with caplog.at_level(logging.WARNING, logger="tierlog.test.repeat"):
        for i in range(513):
            limiter.warning("k", "Cannot accept: %s", f"attempt {i}")
            clock.now += 0.01
        limiter.warning("other", "another key")  # keys are limited separately
        assert logcapture.messages(caplog) == ["Cannot accept: attempt 0", "another key"]
        clock.now += 10
        limiter.warning("k", "Cannot accept: %s", "later")  # no event loop: reported with the next one
    messages = logcapture.messages(caplog)
    assert messages[2] == "Cannot accept: attempt 512 (repeated 512 times in the last 15 s)"
    assert messages[3] == "Cannot accept: later"


def test_repeat_limiter_remembers_at_most_max_keys(caplog):
    limiter = logs.RepeatLimiter(logging.getLogger("tierlog.test.repeat"), 10, clock=FakeClock(), max_keys=3)
    with caplog.at_level(logging.WARNING, logger="tierlog.test.repeat"):
        limiter.warning("a", "a")
        limiter.warning("a", "a again")
        limiter.warning("b", "b")
        limiter.warning("c", "c")
        assert len(limiter._windows) == 3
        limiter.warning("d", "d")  # a 4th key: the pending repeats are reported and every window forgotten
        assert list(limiter._windows) == ["d"]
        limiter.warning("a", "a once more")  # forgotten: logged at once
    assert logcapture.messages(caplog) == [
        "a", "b", "c", "a again (repeated 1 times in the last 0.0 s)", "d", "a once more"]


def test_repeat_limiter_reports_the_count_when_the_interval_ends_on_a_loop(caplog):
    async def main():
        limiter = logs.RepeatLimiter(logging.getLogger("tierlog.test.repeat"), 0.05)
        for _ in range(5):
            limiter.warning("k", "refused")
        # the report comes from a timer, without another call; a loaded machine runs the 50 ms timer late
        with contextlib.suppress(TimedOut):  # the messages are checked below
            await wait_until_async(lambda: len(logcapture.records(caplog)) >= 2, 30, interval=0.01,
                                   what="the limiter's report")
        limiter.warning("k", "refused")  # repeats going on are counted into the next window
        limiter.flush()

    with caplog.at_level(logging.WARNING, logger="tierlog.test.repeat"):
        asyncio.run(main())
    messages = logcapture.messages(caplog)
    assert messages[0] == "refused"
    assert re.fullmatch(r"refused \(repeated 4 times in the last \d+\.\d s\)", messages[1]), messages
    assert re.fullmatch(r"refused \(repeated 1 times in the last \d+\.\d s\)", messages[2]), messages
    assert len(messages) == 3


# ------------------------------------------------------------------------------------------ settings


def test_connection_settings_defaults_and_checks():
    cfg = BrokerConfig({})
    assert cfg["max.connections"] == 2**31 - 1 and cfg["max.connections.per.ip"] == 2**31 - 1
    assert cfg["max.connections.per.ip.overrides"] == "" and cfg["queued.max.request.bytes"] == -1
    assert parse_connection_overrides("hostName:100, 127.0.0.1:200,[::1]:3") == {
        "hostName": 100, "127.0.0.1": 200, "::1": 3}
    with pytest.raises(InvalidConfigError):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.1"})
    with pytest.raises(InvalidConfigError):
        BrokerConfig({"max.connections.per.ip": "0"})  # only with overrides
    BrokerConfig({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"})
    with pytest.raises(InvalidConfigError):  # Kafka: at least socket.request.max.bytes when bounded
        BrokerConfig({"queued.max.request.bytes": "1000"})


def test_quotas_per_ip_override_host_names_and_broker_wide():
    settings = {"max.connections": 5, "max.connections.per.ip": 1,
                "max.connections.per.ip.overrides": "localhost:3"}
    q = ConnectionQuotas(lambda: settings)
    assert [q.try_inc("127.0.0.1") for _ in range(4)][:3] == [None, None, None]  # localhost resolved
    assert q.try_inc("127.0.0.1")[0] == "max.connections.per.ip"
    assert q.try_inc("10.0.0.1") is None
    assert q.try_inc("10.0.0.1")[0] == "max.connections.per.ip"
    assert q.try_inc("10.0.0.2") is None  # 5 connections now
    assert q.try_inc("10.0.0.3")[0] == "max.connections"
    q.dec("127.0.0.1")
    assert q.total == 4 and q.per_ip["127.0.0.1"] == 2
    settings["max.connections"] = 10  # a dynamic change applies to the next connection
    assert q.try_inc("10.0.0.3") is None
    with pytest.raises(InvalidConfigError):
        ConnectionQuotas(lambda: {**settings, "max.connections.per.ip.overrides": "no-such-host.invalid:1"})


# ------------------------------------------------------------------------------------------ memory pool


def test_memory_pool_waits_first_come_first_served_and_overshoots_by_one():
    u = SMALL_FRAME_BYTES + 1  # every reservation here is a big frame's

    async def main():
        pool = MemoryPool(100 * u)
        assert pool.try_reserve(150 * u)  # non-strict: granted while anything is left
        assert not pool.try_reserve(u)
        order = []

        async def waiter(name, size):
            await pool.reserve(size)
            order.append(name)

        a = asyncio.ensure_future(waiter("a", 60 * u))
        b = asyncio.ensure_future(waiter("b", 60 * u))
        c = asyncio.ensure_future(waiter("c", 10 * u))
        await asyncio.sleep(0)
        c.cancel()  # a cancelled waiter leaves the queue
        pool.release(100 * u)  # 50 used: a gets in (110), b waits
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == ["a"] and pool.used == 110 * u
        pool.release(110 * u)
        await asyncio.wait_for(b, 1)
        assert order == ["a", "b"] and pool.used == 60 * u and not pool._waiters
        await asyncio.gather(a, c, return_exceptions=True)

    asyncio.run(main())


def test_memory_pool_takes_small_frames_from_its_reserve_while_big_ones_wait():
    """An exhausted pool still grants small reservations (a heartbeat, an ApiVersions) from a reserve beyond
    its limit, ahead of a waiting big one; when the reserve is used up too, small ones wait for it."""
    async def main():
        pool = MemoryPool(8 * 1024 * 1024)
        assert pool.small_reserve == 1024 * 1024
        assert pool.try_reserve(8 * 1024 * 1024)  # a big frame fills the pool
        big = asyncio.ensure_future(pool.reserve(1024 * 1024))
        await asyncio.sleep(0)
        assert not big.done() and pool.may_read()
        for _ in range(16):  # 16 x 64 KiB: the whole reserve
            assert pool.try_reserve(SMALL_FRAME_BYTES)
        assert not pool.may_read() and not pool.try_reserve(100)
        small = asyncio.ensure_future(pool.reserve(100))
        reader = asyncio.ensure_future(pool.wait_to_read())
        await asyncio.sleep(0)
        assert not small.done() and not reader.done()
        pool.release(SMALL_FRAME_BYTES)  # one small request answered: room in the reserve again
        await asyncio.wait_for(asyncio.gather(small, reader), 1)
        assert not big.done()  # the big one waits for the pool itself
        pool.release(8 * 1024 * 1024 + 15 * SMALL_FRAME_BYTES)  # the big frame and the small ones answered
        await asyncio.wait_for(big, 1)
        assert pool.used == 1024 * 1024 + 100

    asyncio.run(main())


# ------------------------------------------------------------------------------------------ accept errors


def test_accept_errors_back_off_and_are_logged_once_with_a_count(caplog, monkeypatch):
    """EMFILE from accept: the listener pauses ACCEPT_BACKOFF_S after each failure (no spinning), the
    first failure is logged, the others counted; a connection is accepted once descriptors are back."""
    monkeypatch.setattr(socket_server, "ACCEPT_BACKOFF_S", 0.01)

    async def main():
        server = SocketServer(HandlerRegistry(), max_frame_bytes=1024, idle_timeout_ms=0,
                              error_response=lambda ctx, e: None)
        server._warn = logs.RepeatLimiter(socket_server.log, 30)
        await server.bind([type("L", (), {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 0})()])
        loop = asyncio.get_running_loop()
        real_accept = loop.sock_accept
        failures = {"left": 20, "calls": 0}

        async def flaky_accept(sock):
            failures["calls"] += 1
            if failures["left"]:
                failures["left"] -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return await real_accept(sock)

        monkeypatch.setattr(loop, "sock_accept", flaky_accept)
        await server.start_serving()
        client = socket.create_connection(("127.0.0.1", server.bound[0].port))
        for _ in range(500):
            if server.quotas.total == 1:
                break
            await asyncio.sleep(0.01)
        assert server.quotas.total == 1 and 21 <= failures["calls"] <= 22  # then it waits for the next one
        client.close()
        await server.stop()  # reports the counted repeats

    with caplog.at_level(logging.WARNING, logger="tierlog.server.network"):
        asyncio.run(main())
    messages = logcapture.messages(caplog)
    assert len(messages) == 2, messages
    assert "Too many open files" in messages[0] and "accepting again in 10 ms" in messages[0]
    assert "(repeated 19 times in the last" in messages[1]
    assert not any(r.exc_info for r in logcapture.records(caplog))


def test_a_segment_that_cannot_be_opened_at_the_fd_limit_is_logged_as_an_error(caplog):
    class Region:
        path = "/logs/t-0/00000000000000000000.log"
        position, length = 0, 10

        def open(self):
            raise OSError(errno.EMFILE, "Too many open files")

    class Writer:
        def get_extra_info(self, name):
            return ("127.0.0.1", 5555)

        def write(self, data):
            pass

    async def main():
        server = SocketServer(HandlerRegistry(), max_frame_bytes=1024, idle_timeout_ms=0,
                              error_response=lambda ctx, e: None)
        with pytest.raises(ConnectionError):
            await server._send_parts(Writer(), [b"prefix", Region()])

    with caplog.at_level(logging.ERROR, logger="tierlog.server.network"):
        asyncio.run(main())
    [record] = logcapture.records(caplog)
    assert record.levelno == logging.ERROR
    assert "Cannot open /logs/t-0/00000000000000000000.log" in record.getMessage()
    assert "Too many open files" in record.getMessage()
