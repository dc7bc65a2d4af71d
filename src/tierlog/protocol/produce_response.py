"""The Produce response (v3 to v12), encoded straight to bytes.

Every produced batch is answered with one of these, and through kio (plain values -> kio objects ->
kio's generic writer) a one-partition answer cost about a sixth of the broker's CPU under Kafka's
ProducerPerformance. The layout is small and fixed, so it is written here by hand; a test holds it
byte for byte against kio's encoding for every version and every field.

Version differences (Kafka's ProduceResponse.json): ``log_start_offset`` from v5; ``record_errors``
and ``error_message`` from v8; flexible (compact arrays and strings, tagged fields, response header
v1) from v9. The tagged fields of v10+ (``current_leader``, ``node_endpoints``) are left out, as
Kafka leaves them out when they hold their defaults; tierlog does not set them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

_I32 = struct.Struct(">i")
_HEAD_V1 = struct.Struct(">ib")  # correlation id, no tagged fields
_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset
_FLEXIBLE = 9
MIN_VERSION, MAX_VERSION = 3, 12


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode()
    out += _uvarint(len(data) + 1) if flexible else len(data).to_bytes(2, "big")
    out += data


def _count(out: bytearray, n: int, flexible: bool) -> None:
    out += _uvarint(n + 1) if flexible else _I32.pack(n)


def encode_produce_response(version: int, correlation_id: int, responses: Iterable[Mapping[str, Any]],
                            throttle_time_ms: int = 0) -> bytes:
    """The whole response frame (size prefix, header, body) of a Produce response.

    ``responses`` holds one mapping per topic: ``name`` and ``partition_responses``, mappings with
    ``index``, ``error_code``, ``base_offset``, ``log_append_time_ms``, ``log_start_offset`` and, when
    a partition failed, optionally ``error_message`` and ``record_errors`` (mappings with
    ``batch_index`` and ``batch_index_error_message``)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce response v{version} is not encoded here")
    flexible = version >= _FLEXIBLE
    out = bytearray(b"\0\0\0\0")
    out += _HEAD_V1.pack(correlation_id, 0) if flexible else _I32.pack(correlation_id)
    responses = list(responses)
    _count(out, len(responses), flexible)
    partition = _PARTITION_V5 if version >= 5 else _PARTITION
    for topic in responses:
        _string(out, topic["name"], flexible)
        parts = topic["partition_responses"]
        _count(out, len(parts), flexible)
        for p in parts:
            if version >= 5:
                out += partition.pack(p["index"], p["error_code"], p["base_offset"], p["log_append_time_ms"],
                                      p["log_start_offset"])
            else:
                out += partition.pack(p["index"], p["error_code"], p["base_offset"], p["log_append_time_ms"])
            if version >= 8:
                record_errors = p.get("record_errors") or ()
                _count(out, len(record_errors), flexible)
                for e in record_errors:
                    out += _I32.pack(e["batch_index"])
                    _string(out, e.get("batch_index_error_message"), flexible)
                    if flexible:
                        out.append(0)
                _string(out, p.get("error_message"), flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    out[0:4] = _I32.pack(len(out) - 4)
    return bytes(out)
