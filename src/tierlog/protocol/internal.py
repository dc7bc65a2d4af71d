"""tierlog's own inter-broker requests: what Kafka's protocol library no longer has (Kafka 4 removed the
ZooKeeper-mode LeaderAndIsr, UpdateMetadata, StopReplica and ControlledShutdown) and the KIP-950 draft's
DisableRemoteTopic.

They travel on the Kafka wire like any request (a size-prefixed frame, request header v1: api key, version,
correlation id, client id) with API keys of their own, outside Kafka's range, and a JSON body; the answer is
a frame with the correlation id and a JSON body. Only brokers send them, on the inter-broker listener;
docs/compatibility.md lists them.
"""

from __future__ import annotations

import enum
import json
import struct

_HEADER = struct.Struct(">hhih")
_I32 = struct.Struct(">i")


class InternalApi(enum.IntEnum):
    #: controller -> broker: the cluster metadata (brokers, topics, partition leadership), with the controller
    #: epoch; Kafka's ZooKeeper-mode UpdateMetadata and LeaderAndIsr in one (deleted topics stop their replicas).
    UPDATE_METADATA = 10000
    #: controller -> broker: the KIP-950 draft's DisableRemoteTopic.
    DISABLE_REMOTE_TOPIC = 10001
    #: broker -> controller: move my leaderships away, I am stopping (Kafka's ControlledShutdown).
    CONTROLLED_SHUTDOWN = 10002


def is_internal(frame: bytes | memoryview) -> bool:
    """Whether a request frame (without its size prefix) carries one of :class:`InternalApi`'s keys."""
    return len(frame) >= 2 and int.from_bytes(frame[:2], "big", signed=True) >= InternalApi.UPDATE_METADATA


def encode_internal_request(api: InternalApi, correlation_id: int, client_id: str, body: dict) -> bytes:
    cid = client_id.encode()
    payload = json.dumps(body, separators=(",", ":")).encode()
    head = _HEADER.pack(int(api), 0, correlation_id, len(cid)) + cid
    return _I32.pack(len(head) + len(payload)) + head + payload


def parse_internal_request(frame: bytes | memoryview) -> tuple[int, int, dict]:
    """(api key, correlation id, body) of a frame without its size prefix; ValueError when malformed."""
    if len(frame) < _HEADER.size:
        raise ValueError("truncated header")
    api_key, _version, corr, cid_len = _HEADER.unpack_from(frame, 0)
    start = _HEADER.size + max(cid_len, 0)
    try:
        body = json.loads(bytes(frame[start:]).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise ValueError("body is not a JSON object")
    return api_key, corr, body


def encode_internal_response(correlation_id: int, body: dict) -> bytes:
    payload = json.dumps(body, separators=(",", ":")).encode()
    return _I32.pack(4 + len(payload)) + _I32.pack(correlation_id) + payload


def parse_internal_response(frame: bytes | memoryview) -> dict:
    """The body of a response frame without its size prefix and correlation id."""
    body = json.loads(bytes(frame).decode())
    if not isinstance(body, dict):
        raise ValueError("body is not a JSON object")
    return body
