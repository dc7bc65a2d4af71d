"""The broker survives hostile bytes: random and mutated frames over many connections.

A live broker gets a bounded stream (``FUZZ_FRAMES`` frames or ``FUZZ_SECONDS``, whichever comes
first) of frames built from real requests - ours (kio through ``tierlog.protocol``) and
kafka-python's encoder - then mutated: bit flips, int32 fields overwritten with extreme values
(array lengths, sizes), truncated bodies, junk appended, wrong api keys and versions, lying size
prefixes, negative and huge sizes, plus plain random bytes. Afterwards the broker must still be
running, answer ApiVersions, and serve a normal kafka-python producer and consumer exactly.

The seed is printed; ``TIERLOG_FUZZ_SEED=<n>`` replays a run.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest
from kio.index import load_request_schema

from tests.harness.memory import rss_mib
from tests.harness.rawclient import RawClient
from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey, build, encode_request
from tierlog.records import build_batch

FUZZ_FRAMES = 2000
FUZZ_SECONDS = 20.0
CONNECTIONS = 6
UNSUPPORTED_VERSION = 35

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]


# ------------------------------------------------------------------------------------ corpus


def _req(api_key: int, version: int, values: dict, corr: int = 7) -> bytes:
    """A full request frame (with size prefix)."""
    return encode_request(build(load_request_schema(api_key, version), values), corr, "fuzz")


def seed_frames() -> list[bytes]:
    """Valid request frames of the APIs real clients send, at old and new versions."""
    batch = build_batch([(b"k%d" % i, b"v" * 50, [("h", b"x")]) for i in range(5)])
    gz = build_batch([(None, b"z" * 200)] * 3, compression="gzip")
    idem = build_batch([(None, b"i")], producer_id=1000, producer_epoch=0, base_sequence=0)
    frames = []
    for v in (0, 3, 4):
        frames.append(_req(ApiKey.API_VERSIONS, v, {"client_software_name": "fuzz",
                                                   "client_software_version": "1"}))
    for v in (1, 4, 9, 12, 13):
        frames.append(_req(ApiKey.METADATA, v, {"topics": [{"name": "fuzz"}], "allow_auto_topic_creation": True}))
    frames.append(_req(ApiKey.METADATA, 12, {"topics": None}))
    for v, records in ((3, batch), (7, gz), (9, batch), (12, idem)):
        frames.append(_req(ApiKey.PRODUCE, v, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": "fuzz", "partition_data": [{"index": 0, "records": records}]}]}))
    frames.append(_req(ApiKey.PRODUCE, 9, {"acks": 0, "timeout": 1000, "topic_data": [
        {"name": "fuzz", "partition_data": [{"index": 0, "records": batch}]}]}))
    for v in (4, 11, 12):
        frames.append(_req(ApiKey.FETCH, v, {"replica_id": -1, "max_wait": 50, "min_bytes": 1, "max_bytes": 1 << 20,
                                             "topics": [{"topic": "fuzz", "partitions": [
                                                 {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536,
                                                  "current_leader_epoch": -1, "log_start_offset": -1}]}]}))
    for v in (1, 7, 11):
        frames.append(_req(ApiKey.LIST_OFFSETS, v, {"replica_id": -1, "topics": [
            {"name": "fuzz", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}))
    frames.append(_req(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": "fuzz", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}))
    for v in (0, 4):
        frames.append(_req(ApiKey.INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout": 60000,
                                                        "producer_id": -1, "producer_epoch": -1}))
    frames.append(_req(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["fuzz-group"]}))
    frames.append(_req(ApiKey.JOIN_GROUP, 5, {"group_id": "fuzz-group", "session_timeout": 6000,
                                              "rebalance_timeout": 1000, "member_id": "", "protocol_type": "consumer",
                                              "protocols": [{"name": "range", "metadata": b"\0\0\0\0\0\0"}]}))
    frames.append(_req(ApiKey.OFFSET_FETCH, 7, {"group_id": "fuzz-group", "topics": None}))
    frames.append(_req(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 2, "resource_name": "fuzz", "configuration_keys": None}]}))
    frames.append(_req(ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None}))
    frames.append(_req(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": "fuzz", "partitions": [0, 1]}]}))
    frames += kafka_python_frames()
    return frames


def kafka_python_frames() -> list[bytes]:
    """Requests as kafka-python's own encoder writes them."""
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import ProduceRequest
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=1, batch_size=1 << 20)
    for i in range(4):
        builder.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"kp" * 40, headers=[])
    builder.close()
    requests = [
        ApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3"),
        MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name="fuzz", topic_id=None)],
                            allow_auto_topic_creation=True, include_topic_authorized_operations=False),
        ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name="fuzz", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=bytes(builder.buffer()))])]),
    ]
    frames = []
    for i, r in enumerate(requests):
        r.with_header(correlation_id=100 + i, client_id="kafka-python-fuzz")
        frames.append(bytes(r.encode(header=True, framed=True)))
    return frames


EXTREMES = (0, -1, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000, 1 << 24)


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """One hostile variant of a valid frame (returned with a size prefix, which may lie)."""
    body = bytearray(frame[4:])
    kind = rng.randrange(9)
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(body))
            body[i] ^= 1 << rng.randrange(8)
    elif kind == 1 and len(body) >= 4:  # an int32 (array length, size, offset...) set to an extreme
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(body) - 3)
            struct.pack_into(">i", body, i, rng.choice(EXTREMES) if rng.random() < 0.8 else rng.getrandbits(31))
    elif kind == 2:  # truncated body, size prefix consistent
        body = body[:rng.randrange(len(body))]
    elif kind == 3:  # junk appended
        body += rng.randbytes(rng.randint(1, 64))
    elif kind == 4:  # wrong api key
        struct.pack_into(">h", body, 0, rng.choice((-1, 70, 1000, 32767, -32768, rng.randrange(100))))
    elif kind == 5:  # wrong api version
        struct.pack_into(">h", body, 2, rng.choice((-1, 99, 32767, -32768, rng.randrange(20))))
    elif kind == 6:  # int16 string length of the client id
        if len(body) >= 10:
            struct.pack_into(">h", body, 8, rng.choice((-2, -1, 0x7FFF, len(body))))
    elif kind == 7:  # random slice shuffled
        i, j = sorted(rng.randrange(len(body) + 1) for _ in range(2))
        chunk = body[i:j]
        rng.shuffle(chunk)
        body[i:j] = chunk
    else:  # random bytes overwritten
        i = rng.randrange(len(body))
        n = rng.randint(1, 16)
        body[i:i + n] = rng.randbytes(n)
    return struct.pack(">i", len(body)) + bytes(body)


def hostile(rng: random.Random, corpus: list[bytes]) -> tuple[bytes, bool]:
    """(bytes to send, whether the connection should be dropped right after)."""
    r = rng.random()
    if r < 0.55:
        return mutate(rng, rng.choice(corpus)), False
    if r < 0.65:
        return rng.choice(corpus), False  # valid requests keep the connection doing real work
    if r < 0.75:  # random frame
        body = rng.randbytes(rng.randint(0, 200))
        return struct.pack(">i", len(body)) + body, False
    if r < 0.82:  # size prefix promising more than is sent, then hang up
        frame = rng.choice(corpus)
        return struct.pack(">i", len(frame) + rng.randint(1, 10_000)) + frame[4:], True
    if r < 0.88:  # negative size
        return struct.pack(">i", rng.choice((-1, -4, -0x80000000))) + rng.randbytes(8), False
    if r < 0.94:  # huge size, beyond socket.request.max.bytes
        return struct.pack(">i", rng.choice((0x7FFFFFFF, 104857601, 1 << 30))) + rng.randbytes(16), False
    # more valid requests (FuzzConnection.send splits a fifth of all writes in two, for reassembly)
    return rng.choice(corpus), False


# ------------------------------------------------------------------------------------ helpers


class FuzzConnection:
    def __init__(self, port: int):
        self.port = port
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def ensure(self) -> socket.socket:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            self.sock.settimeout(0.5)
            self.reconnects += 1
        return self.sock

    def drop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def send(self, data: bytes, rng: random.Random) -> None:
        sock = self.ensure()
        try:
            if rng.random() < 0.2 and len(data) > 8:
                cut = rng.randrange(1, len(data))
                sock.sendall(data[:cut])
                sock.sendall(data[cut:])
            else:
                sock.sendall(data)
        except OSError:  # closed by the broker (expected for bad frames) or our timeout
            self.drop()
            return
        self.drain()

    def drain(self) -> None:
        """Read whatever answers are there without waiting; notice a closed connection."""
        sock = self.sock
        if sock is None:
            return
        sock.setblocking(False)
        try:
            while True:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    self.drop()
                    return
        except BlockingIOError:
            pass
        except OSError:
            self.drop()
            return
        if self.sock is not None:
            self.sock.settimeout(0.5)


def read_frame(sock: socket.socket) -> bytes | None:
    def recv_exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    head = recv_exact(4)
    if head is None:
        return None
    return recv_exact(struct.unpack(">i", head)[0])


def closed_by_peer(sock: socket.socket, timeout: float = 5) -> bool:
    """True if the broker closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def kafka_python_round_trip(bootstrap: str, topic: str, n: int = 20) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", request_timeout_ms=10000)
    sent = [b"after-fuzz-%d" % i for i in range(n)]
    metas = [producer.send(topic, value=v, partition=0) for v in sent]
    producer.flush(30)
    offsets = [m.get(timeout=30).offset for m in metas]
    producer.close(10)
    assert offsets == list(range(offsets[0], offsets[0] + n))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=10000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, offsets[0])
    got = []

    def read():
        if len(got) >= n:
            return True
        for msgs in consumer.poll(timeout_ms=500).values():
            got.extend((m.offset, m.value) for m in msgs)
        return not_yet(len(got))

    wait_until(read, 30, interval=0, what=f"{n} records (how many arrived)")
    consumer.close()
    assert got == list(zip(offsets, sent))


# ------------------------------------------------------------------------------------ tests


def test_fuzzed_frames_leave_the_broker_serving(start_broker):
    broker = start_broker(socket_request_max_bytes=1048576)
    seed = int(os.environ.get("TIERLOG_FUZZ_SEED", random.randrange(1 << 32)))
    print(f"fuzz seed {seed} (TIERLOG_FUZZ_SEED={seed} replays it)")
    rng = random.Random(seed)
    corpus = seed_frames()
    conns = [FuzzConnection(broker.port) for _ in range(CONNECTIONS)]
    sent = 0
    # not a wait: the time budget of the fuzzing
    deadline = time.monotonic() + FUZZ_SECONDS
    try:
        while sent < FUZZ_FRAMES and time.monotonic() < deadline:
            conn = rng.choice(conns)
            data, hang_up = hostile(rng, corpus)
            conn.send(data, rng)
            if hang_up:
                conn.drop()
            sent += 1
            assert broker.proc.poll() is None, f"broker died after {sent} frames (seed {seed})"
    finally:
        for c in conns:
            c.drop()
    print(f"sent {sent} frames, {sum(c.reconnects for c in conns)} connections")
    assert sent >= 500, f"only {sent} frames in {FUZZ_SECONDS} s"

    # Still alive, still answering, still correct.
    assert broker.proc.poll() is None
    client = RawClient(broker.bootstrap)
    try:
        assert client.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "after",
                                                       "client_software_version": "1"}).error_code == 0
    finally:
        client.close()
    kafka_python_round_trip(broker.bootstrap, "after-fuzz")
    # No handler may crash on what it is given: bad input is an error code or a closed connection.
    crashes = handler_crashes(broker.output)
    assert not crashes, "\n\n".join(crashes)


def handler_crashes(output: list[str]) -> list[str]:
    """Each logged traceback, as one string ending with its exception line."""
    crashes, current = [], None
    for line in output:
        if line.startswith("Traceback"):
            current = [line]
        elif current is not None:
            current.append(line)
            if not line.startswith((" ", "\t")):
                crashes.append("".join(current).rstrip())
                current = None
    return crashes


def test_oversized_frame_closes_the_connection_without_allocating(start_broker):
    limit = 1048576
    broker = start_broker(socket_request_max_bytes=limit)
    rss_before = rss_mib(broker.proc.pid)
    # 1 GiB announced: refused from the size prefix alone, nothing is buffered.
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(struct.pack(">i", 1 << 30) + b"\0" * 64)
    assert closed_by_peer(sock)
    sock.close()
    # One byte over the limit, with the body actually streaming: closed before it is all sent.
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(struct.pack(">i", limit + 1))
    sent = 0
    try:
        for _ in range(64):
            sock.sendall(b"\0" * 65536)
            sent += 65536
    except OSError:
        pass
    assert sent < limit or closed_by_peer(sock)
    sock.close()
    assert rss_mib(broker.proc.pid) - rss_before < 32, "the broker buffered an oversized frame"
    # A frame within the limit on a new connection is served as usual.
    client = RawClient(broker.bootstrap)
    try:
        assert client.request(ApiKey.METADATA, 12, {"topics": [{"name": "big"}],
                                                    "allow_auto_topic_creation": True}).topics[0].error_code == 0
        big = build_batch([(None, b"x" * (limit // 2))])
        resp = client.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "big", "partition_data": [{"index": 0, "records": big}]}]})
        assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        client.close()
    assert broker.proc.poll() is None


def test_api_versions_of_an_unknown_version_gets_the_v0_answer(broker):
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        # ApiVersions v99 (header v2, a body the broker cannot know) - KIP-511.
        client_id = b"future-client"
        body = struct.pack(">hhih", 18, 99, 4242, len(client_id)) + client_id + b"\0" + b"\x04fut\x02v\0"
        sock.sendall(struct.pack(">i", len(body)) + body)
        frame = read_frame(sock)
        assert frame is not None, "connection closed instead of the KIP-511 answer"
        corr, error, count = struct.unpack_from(">ihi", frame, 0)
        assert (corr, error) == (4242, UNSUPPORTED_VERSION)
        ranges = {}
        pos = 10
        for _ in range(count):
            key, lo, hi = struct.unpack_from(">hhh", frame, pos)
            ranges[key] = (lo, hi)
            pos += 6
        assert pos == len(frame), "a v0 ApiVersionsResponse has nothing after the array"
        assert ranges[ApiKey.API_VERSIONS] == (0, 5)  # v5: KIP-1242
        assert ApiKey.PRODUCE in ranges and ApiKey.FETCH in ranges and ApiKey.METADATA in ranges
        # The connection stays usable: the client retries with a version it now knows.
        frame = _req(ApiKey.API_VERSIONS, 3, {"client_software_name": "c", "client_software_version": "1"}, 4243)
        sock.sendall(frame)
        reply = read_frame(sock)
        assert struct.unpack_from(">ih", reply, 0) == (4243, 0)
    finally:
        sock.close()


def _header_v1(api_key: int, version: int, corr: int) -> bytes:
    return struct.pack(">hhih", api_key, version, corr, 4) + b"fuzz"


NULL_ARRAY_REQUESTS = {
    # ListOffsets v1: replica_id, topics = null (int32 -1)
    "ListOffsets v1": _header_v1(ApiKey.LIST_OFFSETS, 1, 1) + struct.pack(">ii", -1, -1),
    # Produce v3: transactional_id null, acks, timeout, topic_data = null
    "Produce v3": _header_v1(ApiKey.PRODUCE, 3, 2) + struct.pack(">hhii", -1, -1, 1000, -1),
    # Produce v9 (flexible): header v2, compact null transactional_id, topic_data compact null (0)
    "Produce v9": _header_v1(ApiKey.PRODUCE, 9, 3) + b"\0" + b"\0" + struct.pack(">hi", -1, 1000) + b"\0\0",
    # Fetch v4: replica_id, max_wait, min_bytes, max_bytes, isolation, topics = null
    "Fetch v4": _header_v1(ApiKey.FETCH, 4, 4) + struct.pack(">iiiibi", -1, 10, 1, 1 << 20, 0, -1),
}


@pytest.mark.parametrize("name", sorted(NULL_ARRAY_REQUESTS))
def test_null_for_a_non_nullable_array_is_a_malformed_request(broker, name):
    body = NULL_ARRAY_REQUESTS[name]
    mark = len(broker.output)
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert closed_by_peer(sock), "Kafka closes the connection on a request it cannot parse"
    finally:
        sock.close()
    time.sleep(0.2)  # let the broker's log line arrive
    assert not handler_crashes(broker.output[mark:]), "".join(broker.output[mark:])

