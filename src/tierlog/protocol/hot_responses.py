"""The two answers on the hot paths, Produce (v3-v13) and Fetch (v4-v18), encoded straight to bytes.

Every produced batch and every consumer fetch is answered with one of these. Through kio (plain values ->
kio objects -> kio's generic writer) a one-partition Produce answer cost 35 us, about a sixth of the
broker's CPU under Kafka's ProducerPerformance, and a Fetch answer a tenth of the consume path's. The
layouts are small and fixed, so they are written here by hand; tests hold them byte for byte to kio's
encoding for every version and every field.

Version differences follow Kafka's ProduceResponse.json and FetchResponse.json. Flexible versions (compact
arrays and strings, tagged fields, response header v1) start at Produce v9 and Fetch v12. Tagged fields
tierlog never sets (Produce ``current_leader`` and ``node_endpoints``; Fetch ``diverging_epoch``,
``current_leader``, ``snapshot_id`` and ``node_endpoints``) are left out, as Kafka leaves out a tagged field
holding its default.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
_I64_I64 = struct.Struct(">qq")
_HEAD_V1 = struct.Struct(">ib")  # correlation id, no tagged fields
_ZERO_ID = bytes(16)
#: Record bytes at least this long (records read from the remote tier) are a part of their own, not copied
#: into the response buffer; records that are not bytes (file regions for sendfile) always are.
OWN_PART_BYTES = 64 * 1024



def own_part(records) -> bool:
    """Whether a records value travels as a part of its own rather than copied into the response buffer:
    anything not bytes-like (a file region), and big ``bytes`` or ``memoryview``; a ``bytearray`` is always
    copied (the socket server sends only ``bytes``, views and file regions as parts)."""
    if isinstance(records, (bytes, memoryview)):
        return len(records) >= OWN_PART_BYTES
    return not isinstance(records, bytearray)


PRODUCE_VERSIONS = range(3, 14)
FETCH_VERSIONS = range(4, 19)  # v18 answers as v17 (only its request changed)


def _uvarint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
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


def _count(out: bytearray, n: int | None, flexible: bool) -> None:
    """An array's length; ``None`` is a null array."""
    if n is None:
        out += b"\x00" if flexible else b"\xff\xff\xff\xff"
    else:
        out += _uvarint(n + 1) if flexible else _I32.pack(n)


def _uuid_bytes(value: uuid.UUID | None) -> bytes:
    """A topic id on the wire; kio reads the zero id as None, which is answered as the zero id again."""
    return _ZERO_ID if value is None else value.bytes


def _header(out: bytearray, correlation_id: int, flexible: bool) -> None:
    out += _HEAD_V1.pack(correlation_id, 0) if flexible else _I32.pack(correlation_id)


# ------------------------------------------------------------------------------------------- Produce

_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset


def encode_produce_response(version: int, correlation_id: int, responses: Iterable[Mapping[str, Any]],
                            throttle_time_ms: int = 0) -> bytes:
    """The whole response frame (size prefix, header, body) of a Produce response.

    ``responses`` holds one mapping per topic: ``name`` (v3-v12) or ``topic_id`` (a ``uuid.UUID``, v13, KIP-516)
    and ``partition_responses``, mappings with
    ``index``, ``error_code``, ``base_offset``, ``log_append_time_ms``, ``log_start_offset`` and, when
    a partition failed, optionally ``error_message`` and ``record_errors`` (mappings with
    ``batch_index`` and ``batch_index_error_message``)."""
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"Produce response v{version} is not encoded here")
    flexible = version >= 9
    out = bytearray(b"\0\0\0\0")
    _header(out, correlation_id, flexible)
    responses = list(responses)
    _count(out, len(responses), flexible)
    partition = _PARTITION_V5 if version >= 5 else _PARTITION
    by_id = version >= 13
    for topic in responses:
        if by_id:
            out += _uuid_bytes(topic["topic_id"])
        else:
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


# --------------------------------------------------------------------------------------------- Fetch

_FETCH_PARTITION = struct.Struct(">ihqq")  # index, error code, high watermark, last stable offset
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log start offset


def encode_fetch_response(version: int, correlation_id: int, responses: Iterable[Mapping[str, Any]],
                          throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0) -> list:
    """The whole response frame of a Fetch response as parts: ``bytes`` (the first one starting with the
    size prefix) and, as parts of their own, records that are not bytes (file regions, sent with sendfile)
    or of at least :data:`OWN_PART_BYTES`.

    ``responses`` holds one mapping per topic: ``topic`` (v4-v12) or ``topic_id`` (a ``uuid.UUID``, v13+)
    and ``partitions``, mappings with ``partition_index``, ``error_code``, ``high_watermark``,
    ``last_stable_offset``, ``log_start_offset``, ``aborted_transactions`` (``None`` or mappings with
    ``producer_id`` and ``first_offset``), ``preferred_read_replica`` and ``records`` (``None``, bytes-like or
    an object with ``__len__``)."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch response v{version} is not encoded here")
    flexible = version >= 12
    by_id = version >= 13
    parts: list = []
    size = 0
    out = bytearray(b"\0\0\0\0")
    _header(out, correlation_id, flexible)
    out += _I32.pack(throttle_time_ms)
    if version >= 7:
        out += _I16_I32.pack(error_code, session_id)
    responses = list(responses)
    _count(out, len(responses), flexible)
    partition = _FETCH_PARTITION_V5 if version >= 5 else _FETCH_PARTITION
    for topic in responses:
        if by_id:
            out += _uuid_bytes(topic["topic_id"])
        else:
            _string(out, topic["topic"], flexible)
        partitions = topic["partitions"]
        _count(out, len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                out += partition.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                      p["last_stable_offset"], p["log_start_offset"])
            else:
                out += partition.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                      p["last_stable_offset"])
            aborted = p.get("aborted_transactions")
            _count(out, None if aborted is None else len(aborted), flexible)
            for a in aborted or ():
                out += _I64_I64.pack(a["producer_id"], a["first_offset"])
                if flexible:
                    out.append(0)
            if version >= 11:
                out += _I32.pack(p.get("preferred_read_replica", -1))
            records = p.get("records")
            if records is None:
                _count(out, None, flexible)
            else:
                n = len(records)
                out += _uvarint(n + 1) if flexible else _I32.pack(n)
                if not own_part(records):
                    out += records
                else:  # sent as it is (sendfile for a file region), never copied here
                    parts += (bytes(out), records)
                    size += len(out) + n
                    out = bytearray()
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)
    if out:
        parts.append(bytes(out))
        size += len(out)
    parts[0] = _I32.pack(size - 4) + parts[0][4:]
    return parts
