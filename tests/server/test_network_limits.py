"""The socket server's limits against a real ``tierlog broker`` process: max.connections,
max.connections.per.ip and its overrides (a connection beyond a limit is closed at once, the others go
on), queued.max.request.bytes (backpressure; frames being received hold their announced size, released
when the connection closes or idles out), the broker's memory with half-sent 100 MiB frames, and the log
lines (ISO-8601 form, repeated warnings counted)."""

from __future__ import annotations

import random
import socket
import struct
import threading
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from kio.index import load_request_schema

from tests.harness import waiting
from tests.harness.broker import log_lines
from tests.harness.memory import rss_mib
from tests.harness.rawclient import RawClient, create_topic
from tests.harness.tiered import metrics_url, wait_for
from tests.harness.waiting import not_yet
from tierlog.protocol import ApiKey, build, encode_request
from tierlog.protocol.framing import LARGE_BODY_BYTES

MIB = 1024 * 1024


def api_versions(client: RawClient) -> int:
    return client.request(ApiKey.API_VERSIONS, 0, {}).error_code


def connect(broker, source: str = "127.0.0.1", timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.port), timeout=timeout, source_address=(source, 0))


def closed_by_broker(sock: socket.socket, timeout: float = 10) -> bool:
    """True once the broker closed ``sock`` (EOF or reset) within ``timeout``; False if it stayed open."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def client_from(broker, source: str) -> RawClient:
    c = RawClient.__new__(RawClient)
    c.sock = connect(broker, source)
    c.correlation_id = 0
    return c


def network_warnings(broker, text: str) -> list:
    return [m for m in log_lines(broker.output, "WARNING", "tierlog.server.network") if text in m["message"]]


def test_per_ip_limit_closes_new_connections_at_once_and_counts_repeats(start_broker):
    b = start_broker({"max.connections.per.ip": "3", "internal.log.repeat.interval.ms": "500"})
    clients = [RawClient(b.bootstrap) for _ in range(3)]
    try:
        assert [api_versions(c) for c in clients] == [0, 0, 0]
        extra = [connect(b) for _ in range(8)]
        assert all(closed_by_broker(s) for s in extra)
        for s in extra:
            s.close()
        # The connections within the limit are unaffected.
        assert [api_versions(c) for c in clients] == [0, 0, 0]
        # One line at once, then the repeats of the interval counted on one line.
        counted = wait_for(lambda: [m for m in network_warnings(b, "max.connections.per.ip")
                                    if "(repeated " in m["message"]], "the count of repeated rejections", 15)
        assert "times in the last" in counted[0]["message"]
        rejections = network_warnings(b, "max.connections.per.ip")
        assert 2 <= len(rejections) <= 3, [m.string for m in rejections]
        # A freed slot is taken by the next connection.
        clients.pop().close()
        again = wait_for(lambda: _try_client(b), "a connection after one closed")
        assert api_versions(again) == 0
        again.close()
    finally:
        for c in clients:
            c.close()


def _try_client(broker, source: str = "127.0.0.1") -> RawClient | None:
    """A client whose ApiVersions is answered, or None when the broker closed the connection (its count of
    the closed connection may lag the client's close by a moment)."""
    c = client_from(broker, source)
    try:
        api_versions(c)
        return c
    except (ConnectionError, OSError):
        c.close()
        return None


def test_per_ip_overrides_and_the_broker_wide_limit(start_broker):
    b = start_broker({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:3",
                      "max.connections": "4"})
    held = []
    try:
        held += [client_from(b, "127.0.0.1") for _ in range(3)]  # the override: 3 from 127.0.0.1
        held.append(client_from(b, "127.0.0.2"))  # the default: 1 from any other address
        assert [api_versions(c) for c in held] == [0, 0, 0, 0]
        assert closed_by_broker(connect(b, "127.0.0.1"))  # 4th from 127.0.0.1: its override
        assert closed_by_broker(connect(b, "127.0.0.2"))  # 2nd from 127.0.0.2: max.connections.per.ip
        assert closed_by_broker(connect(b, "127.0.0.3"))  # 1st from 127.0.0.3, 5th overall: max.connections
        assert [api_versions(c) for c in held] == [0, 0, 0, 0]
        wait_for(lambda: network_warnings(b, "(max.connections=4)"), "the max.connections rejection logged")
        held.pop(0).close()
        again = wait_for(lambda: _try_client(b, "127.0.0.3"), "a connection from 127.0.0.3 once one closed")
        held.append(again)
    finally:
        for c in held:
            c.close()


def test_log_lines_have_the_iso_form(broker):
    lines = log_lines(broker.output)
    assert lines, "".join(broker.output)
    assert any(m["level"] == "INFO" and m["logger"] == "tierlog.server.broker" for m in lines)
    # Every line of the output is a log line, a traceback line or one of the broker's printed status lines.
    for line in broker.output:
        assert (log_lines([line]) or line.startswith("tierlog broker ")), line


def _half_frame(broker, announced: int, body: int) -> socket.socket:
    """A connection that announced a frame of ``announced`` bytes and sent ``body`` bytes of it."""
    s = connect(broker)
    s.sendall(struct.pack(">i", announced) + b"\0" * body)
    return s


def metric(b, name: str) -> float | None:
    text = urllib.request.urlopen(metrics_url(b) + "/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_queued_max_request_bytes_stops_reading_big_frames_until_memory_is_freed(start_broker):
    """A half-sent frame holds the whole pool: a big request on another connection is not read until it is
    released, while small requests (an ApiVersions, a Metadata) are still answered from the pool's reserve,
    never starved behind it (Kafka makes them wait as long as the frame is held)."""
    b = start_broker({"socket.request.max.bytes": str(MIB), "queued.max.request.bytes": str(MIB),
                      "connections.max.idle.ms": "600000", "metrics.port": "0"})
    assert metric(b, "kafka_network_socketserver_memorypoolavailable") == MIB
    holder = _half_frame(b, MIB, 1000)  # reserves its announced MiB: the pool is exhausted
    try:
        wait_for(lambda: metric(b, "kafka_network_socketserver_memorypoolused") == MIB, "the frame's reservation")
        # A big request (a Metadata naming topics, 300 KiB) on another connection is not read meanwhile...
        names = [f"absent-{i:06d}" for i in range(20_000)]
        big = RawClient(b.bootstrap)
        big.correlation_id = 7
        big.send_frame(encode_request(build(load_request_schema(ApiKey.METADATA, 12), {
            "topics": [{"name": n} for n in names], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}), 7, "big"))
        # ...while small ones are answered, on a new connection and on one already open
        for _ in range(3):
            small = RawClient(b.bootstrap, timeout=5)
            assert api_versions(small) == 0
            small.close()
        big.sock.settimeout(1.5)
        with pytest.raises(TimeoutError):
            big.read_frame()
        # ...and the big one is answered once the holder's connection closes and its reservation goes back.
        holder.close()
        big.sock.settimeout(10)
        assert len(big.read_frame()) > 20_000 * len(names[0])
        big.close()
        wait_for(lambda: metric(b, "kafka_network_socketserver_memorypoolused") == 0, "everything released")
    finally:
        holder.close()


def test_an_idle_half_sent_frame_is_released_by_connections_max_idle_ms(start_broker):
    b = start_broker({"socket.request.max.bytes": str(MIB), "queued.max.request.bytes": str(MIB),
                      "connections.max.idle.ms": "1500", "metrics.port": "0"})
    holder = _half_frame(b, MIB, 1000)
    try:
        wait_for(lambda: metric(b, "kafka_network_socketserver_memorypoolused") == MIB, "the frame's reservation")
        c = RawClient(b.bootstrap, timeout=20)
        assert api_versions(c) == 0  # a small request: answered from the pool's reserve meanwhile
        c.close()
        assert closed_by_broker(holder)  # the holder idled out: the broker closed it...
        wait_for(lambda: metric(b, "kafka_network_socketserver_memorypoolused") == 0, "its reservation released")
        wait_for(lambda: log_lines(b.output, "INFO", "tierlog.server.network"), "the idle close logged")
    finally:
        holder.close()


def test_a_connection_that_keeps_asking_outlives_connections_max_idle_ms(start_broker):
    # The idle clock runs only while the broker waits to read: requests every 0.1 s for well over the
    # timeout keep the connection; once they stop, the broker closes it and says so.
    b = start_broker({"connections.max.idle.ms": "5000"})
    c = RawClient(b.bootstrap, timeout=30)
    try:
        for _ in range(120):  # about 12 s, more than twice the timeout
            assert api_versions(c) == 0
            threading.Event().wait(0.1)
        assert closed_by_broker(c.sock, timeout=60)
        assert wait_for(lambda: [m for m in log_lines(b.output, "INFO", "tierlog.server.network")
                                 if m["message"].startswith("Closing idle connection")], "the idle close's log line")
    finally:
        c.close()


def _api_versions_request():
    return build(load_request_schema(ApiKey.API_VERSIONS, 0), {})


def _warm_up(b) -> float:
    """Exercise the broker (a topic, a produce, a fetch through the client) and return its RSS after."""
    create_topic(b.bootstrap, "warm")
    c = RawClient(b.bootstrap)
    for _ in range(3):
        api_versions(c)
    c.close()
    return rss_mib(b.proc.pid)


class HalfSenders:
    """``n`` connections, each announcing a frame of ``announced`` bytes and sending ``body`` of it from its
    own thread (a send blocks while the broker does not read)."""

    def __init__(self, broker, n: int, announced: int, body: int):
        self.socks = [connect(broker, timeout=None) for _ in range(n)]
        self.done = [threading.Event() for _ in range(n)]
        self.threads = [threading.Thread(target=self._send, args=(i, announced, body), daemon=True)
                        for i in range(n)]
        for t in self.threads:
            t.start()

    def _send(self, i: int, announced: int, body: int) -> None:
        chunk = b"\0" * MIB
        try:
            self.socks[i].sendall(struct.pack(">i", announced))
            for _ in range(body // MIB):
                self.socks[i].sendall(chunk)
        except OSError:
            return  # closed by the test
        self.done[i].set()

    def finished(self) -> int:
        return sum(e.is_set() for e in self.done)

    def close(self) -> None:
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(10)


def test_half_sent_big_frames_stay_within_the_pool_and_are_released(start_broker):
    """Ten connections announce 100 MiB frames and send 90 MiB each: with queued.max.request.bytes=100 MiB
    the broker holds about one of them (the others are not read), and gives the memory back after they
    close."""
    b = start_broker({"queued.max.request.bytes": str(100 * MIB)})
    baseline = _warm_up(b)
    senders = HalfSenders(b, 10, 100 * MIB, 90 * MIB)
    try:
        wait_for(lambda: senders.finished() >= 1, "one connection's 90 MiB sent", 60)
        wait_for(lambda: rss_mib(b.proc.pid) >= baseline + 80, "the broker reading the 90 MiB", 30)
        peak = rss_mib(b.proc.pid)
        # One 90 MiB partial frame, plus at most a StreamReader buffer and a read chunk per connection.
        assert peak <= baseline + 100 + 10 * 1 + 25, (baseline, peak)
        assert senders.finished() == 1
    finally:
        senders.close()
    wait_for(lambda: rss_mib(b.proc.pid) <= baseline + 20, "the memory released after the connections closed")
    c = RawClient(b.bootstrap)
    assert api_versions(c) == 0
    c.close()


def test_half_sent_big_frames_without_a_pool_are_released_when_they_close(start_broker):
    """Without queued.max.request.bytes (Kafka's default, unbounded) ten half-sent 100 MiB frames are held
    as they arrive (never the announced size up front), and the broker's RSS goes back down after they
    close."""
    b = start_broker()
    baseline = _warm_up(b)
    senders = HalfSenders(b, 10, 100 * MIB, 90 * MIB)
    try:
        wait_for(lambda: senders.finished() == 10, "ten connections' 90 MiB sent", 120)
        wait_for(lambda: rss_mib(b.proc.pid) >= baseline + 800, "the broker reading them", 60)
        assert rss_mib(b.proc.pid) <= baseline + 900 * 1.5, "held at most as received"
    finally:
        senders.close()
    wait_for(lambda: rss_mib(b.proc.pid) <= baseline + 30, "the memory released after the connections closed")


def test_a_produce_request_above_the_large_body_size_is_stored_and_read_back_whole(start_broker):
    """A 12 MiB record and one just above LARGE_BODY_BYTES (their Produce requests written into their buffers
    as they arrive over many reads), sent by confluent-kafka with the pool on, are acknowledged at offsets 0
    and 1 and read back byte for byte."""
    b = start_broker({"message.max.bytes": str(20 * MIB), "queued.max.request.bytes": str(100 * MIB)})
    create_topic(b.bootstrap, "big-records")
    rnd = random.Random(3)
    values = [rnd.randbytes(12 * MIB), rnd.randbytes(LARGE_BODY_BYTES + 1)]
    producer = Producer({"bootstrap.servers": b.bootstrap, "message.max.bytes": 20 * MIB,
                         "compression.type": "none", "linger.ms": 0})
    acked = []
    for v in values:
        producer.produce("big-records", v, on_delivery=lambda err, msg: acked.append((err, msg.offset())))
        producer.flush(60)
    assert acked == [(None, 0), (None, 1)]
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "big-records", "auto.offset.reset": "earliest",
                         "fetch.max.bytes": 40 * MIB, "max.partition.fetch.bytes": 40 * MIB,
                         "receive.message.max.bytes": 50 * MIB, "enable.auto.commit": False})
    try:
        consumer.subscribe(["big-records"])
        got = []

        def read():
            if len(got) >= 2:
                return True
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return not_yet(len(got))

        waiting.wait_until(read, 60, interval=0, what="2 records (how many arrived)")
        assert got == values
    finally:
        consumer.close()
