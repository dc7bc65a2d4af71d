"""A minimal blocking Kafka protocol client for tests (any API, any version, raw answers), and topic
helpers over it that work against tierlog and Apache Kafka alike; for clusters, ``metadata``,
``controller_address``, ``wait_for_controller`` and ``create_topic_in_cluster`` (CreateTopics sent to
the controller)."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid

from kio.index import load_request_schema, load_response_schema

from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey, build, encode_request, parse_response


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv(4))[0]
        return self._recv(size)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, values: dict):
        """Send a request built from plain values; return the parsed response object."""
        self.correlation_id += 1
        req = build(load_request_schema(api_key, version), values)
        self.send_frame(encode_request(req, self.correlation_id, "rawclient"))
        corr, resp = parse_response(self.read_frame(), load_response_schema(api_key, version))
        assert corr == self.correlation_id
        return resp


@contextlib.contextmanager
def raw_client(bootstrap: str):
    """A RawClient for a ``with`` block, closed after it."""
    c = RawClient(bootstrap)
    try:
        yield c
    finally:
        c.close()


def unique(prefix: str) -> str:
    """A topic (or group) name no other test uses: ``prefix`` and eight random hex digits."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: dict | None = None,
                 timeout: float = 15) -> None:
    """CreateTopics, then wait until every partition has a leader (Kafka answers before that)."""
    raw = RawClient(bootstrap)
    try:
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
            "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
            "timeout_ms": 10000, "validate_only": False})
        assert resp.topics[0].error_code == 0, resp.topics[0]
        wait_for_leaders(raw, name, partitions, timeout)
    finally:
        raw.close()


def wait_for_leaders(raw: RawClient, name: str, partitions: int, timeout: float = 15) -> None:
    """Until Metadata shows a leader for every partition and ListOffsets answers for each of them."""

    def led():
        md = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
        t = md.topics[0]
        if t.error_code == 0 and len(t.partitions) == partitions and all(
                p.error_code == 0 and p.leader_id >= 0 for p in t.partitions):
            # Kafka's metadata cache can show the leader a moment before its replica manager leads.
            lo = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": name, "partitions": [{"partition_index": i, "timestamp": -1} for i in range(partitions)]}]})
            if all(p.error_code == 0 for p in lo.topics[0].partitions):
                return True
        return not_yet(t)

    wait_until(led, timeout, what=f"leaders of every partition of topic {name}")


# ------------------------------------------------------------------------------------ several brokers

NOT_CONTROLLER = 41


def metadata(bootstrap: str, topics: list[str] | None = None, version: int = 12):
    """A Metadata answer from the first broker of ``bootstrap`` (``host:port[,host:port...]``); every topic
    when ``topics`` is None."""
    raw = RawClient(bootstrap.split(",")[0])
    try:
        return raw.request(ApiKey.METADATA, version, {
            "topics": None if topics is None else [{"name": t} for t in topics], "allow_auto_topic_creation": False})
    finally:
        raw.close()


def controller_address(bootstrap: str) -> str:
    """``host:port`` of the cluster's controller, as the first broker of ``bootstrap`` names it."""
    md = metadata(bootstrap, [])
    for b in md.brokers:
        if b.node_id == md.controller_id:
            return f"{b.host}:{b.port}"
    raise AssertionError(f"no controller among the brokers {[b.node_id for b in md.brokers]} ({md.controller_id})")


def wait_for_controller(bootstrap: str, expected: int | None = None, timeout: float = 30) -> int:
    """Until the first broker of ``bootstrap`` names a controller among the brokers it lists (``expected``
    when given); returns its id."""

    def named():
        md = metadata(bootstrap, [])
        controller = md.controller_id if md.controller_id in {b.node_id for b in md.brokers} else None
        return md if controller is not None and expected in (None, controller) else not_yet(controller)

    # OSError: the broker is still starting
    md = wait_until(named, timeout, interval=0.1, ignore=(OSError,),
                    what=f"{bootstrap} to name a controller{'' if expected is None else f' {expected}'}")
    return md.controller_id


def create_topic_in_cluster(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                            configs: dict | None = None, timeout: float = 30) -> None:
    """CreateTopics sent to the controller (Kafka in ZooKeeper mode answers NOT_CONTROLLER on other brokers;
    sent again if the controller moved), then wait until every broker's Metadata shows a leader for every
    partition."""
    started = time.monotonic()

    def created():
        raw = RawClient(controller_address(bootstrap))
        try:
            resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                "assignments": [], "configs": [{"name": k, "value": str(v)} for k, v in (configs or {}).items()]}],
                "timeout_ms": int(timeout * 1000), "validate_only": False})
        finally:
            raw.close()
        return resp.topics[0] if resp.topics[0].error_code != NOT_CONTROLLER else not_yet(resp.topics[0])

    topic = wait_until(created, timeout, interval=0.1, what=f"the controller of {bootstrap} to take topic {name}")
    assert topic.error_code == 0, topic
    for broker in metadata(bootstrap, []).brokers:
        left = timeout - (time.monotonic() - started)
        wait_for_leaders_on(f"{broker.host}:{broker.port}", name, partitions, max(1.0, left))


def wait_for_leaders_on(address: str, name: str, partitions: int, timeout: float = 15) -> None:
    """Until the Metadata of the broker at ``address`` shows a leader for every partition of ``name`` (the
    controller's news reaches each broker on its own)."""

    def led():
        t = metadata(address, [name]).topics[0]
        return t.error_code == 0 and len(t.partitions) == partitions and all(
            p.error_code == 0 and p.leader_id >= 0 for p in t.partitions) or not_yet(t)

    wait_until(led, timeout, what=f"leaders of every partition of topic {name} on {address}")


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes], acks: int = 1):
    """One Produce v9 of ``values`` (one batch) to ``topic``-``partition`` at the first broker of ``bootstrap``;
    returns the partition's answer (``error_code``, ``base_offset``)."""
    from tierlog.records import build_batch
    now = int(time.time() * 1000)
    raw = RawClient(bootstrap.split(",")[0])
    try:
        resp = raw.request(ApiKey.PRODUCE, 9, {"acks": acks, "timeout": 5000, "topic_data": [{
            "name": topic, "partition_data": [{"index": partition, "records": build_batch(
                [(None, v, [], now) for v in values])}]}]})
        return resp.responses[0].partition_responses[0]
    finally:
        raw.close()
